"""The catalog in a real browser, against the simulator: bob asks for a model endpoint,
pam approves it and merges its pull request, and bob's request page turns ready with the URL
by itself (htmx polling), as the fleet sync and the catalog's follow-up run in the background.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import close_old_connections
from playwright.sync_api import Browser, Page, expect

from catalog import services as catalog
from catalog.models import Resource, ResourceRequest
from fleet import services as fleet
from gitops import services as gitops
from gitops.fleet import configured_fleet
from simulator import Simulator
from tenants.specs import tenant_spec
from tests.browser.conftest import (
    TIMEOUT_MS,
    watch_for_console_errors,
    watch_for_csp_violations,
)

pytestmark = pytest.mark.browser

SHARE = {"name": "infer", "flavor": "h200", "kind": "whole", "count": 2}


@pytest.fixture
def cluster(start_fleet: Callable[..., Simulator]) -> Simulator:
    """The simulated fleet, ticking on its own, playing Flux on this test's repository."""
    return start_fleet(tick_seconds=0.2)


@pytest.fixture
def background(cluster: Simulator) -> Iterator[None]:
    """What the beat schedule does in the portal: read the cluster, move requests on."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.5):
            try:
                fleet.sync_all()
                catalog.advance_requests()
            finally:
                close_old_connections()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        close_old_connections()


@pytest.fixture
def alpha_with_a_share(world: dict[str, Any]) -> dict[str, Any]:
    """alpha onboarded and holding a GPU share on main, as an earlier request left it."""
    fleet_spec = configured_fleet()
    onboarding = gitops.open_tenant_change(
        acting_user=world["alice"],
        tenant=tenant_spec(world["alpha"]),
        fleet=fleet_spec,
        title="Onboard alpha",
        kind="onboarding",
    )
    onboarding.checks_state = "passed"
    onboarding.save()
    gitops.do_review(onboarding, acting_user=world["pam"], state="approve")
    gitops.do_merge(onboarding, acting_user=world["pam"])
    Resource.objects.create(
        tenant=world["alpha"], kind="gpu-share", name="infer", state="active", spec=SHARE
    )
    change = gitops.open_tenant_change(
        acting_user=world["alice"],
        tenant=catalog.desired_tenant(world["alpha"], kind="gpu-share", name="infer", spec=SHARE),
        fleet=fleet_spec,
        title="GPU share infer",
        kind="gpu-share",
    )
    change.checks_state = "passed"
    change.save()
    gitops.do_review(change, acting_user=world["pam"], state="approve")
    gitops.do_merge(change, acting_user=world["pam"])
    return world


def _context_page(browser: Browser, live_server: Any) -> tuple[Page, list[str], list[str]]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    violations = watch_for_csp_violations(context)
    page = context.new_page()
    return page, violations, watch_for_console_errors(page)


def test_a_tenant_gets_a_model_endpoint_from_request_to_ready(
    page: Page,
    browser: Browser,
    sign_in: Callable[[Page, str], None],
    live_server: Any,
    alpha_with_a_share: dict[str, Any],
    background: None,
) -> None:
    # bob asks for an endpoint; the form checks as he types and previews the manifests
    sign_in(page, "bob")
    page.goto("/t/alpha/catalog/")
    page.get_by_role("link", name=re.compile("endpoint", re.I)).first.click()
    expect(page).to_have_url(re.compile(r"/t/alpha/catalog/endpoint/new/$"))
    page.get_by_label("Model", exact=True).fill("hf://org/chat-model")
    page.get_by_label("Share", exact=True).select_option("infer")
    page.get_by_label("Name", exact=True).fill("Chat!")
    expect(page.locator("#preview .form-errors")).to_contain_text("Name")
    page.get_by_label("Name", exact=True).fill("chat")
    expect(page.locator("#preview")).to_contain_text("inferenceservice", ignore_case=True)
    expect(page.locator("#preview .form-errors")).to_have_count(0)
    page.get_by_role("button", name=re.compile("submit|request|ask", re.I)).click()
    expect(page).to_have_url(re.compile(r"/t/alpha/requests/\d+/$"))
    expect(page.locator("body")).to_contain_text("Submitted")
    request = ResourceRequest.objects.get(resource__name="chat")
    bob_url = page.url

    # pam sees it waiting, with the diff, and approves: the pull request opens
    admin, admin_violations, admin_console = _context_page(browser, live_server)
    sign_in(admin, "pam")
    admin.goto("/approvals/")
    admin.get_by_role("link", name=re.compile("chat")).first.click()
    expect(admin.locator("body")).to_contain_text("inferenceservice", ignore_case=True)
    admin.get_by_role("button", name="Approve and open the pull request").click()
    expect(admin.locator("body")).to_contain_text("Pull request open")
    request.refresh_from_db()
    assert request.state == "pr_open" and request.change is not None

    # ... and merges it on the change page (checks ran when it opened)
    admin.goto(f"/changes/{request.change_id}/")
    admin.get_by_role("button", name="Merge into main").click()
    expect(admin.locator("body")).to_contain_text("Merged")

    # bob's page, left open, turns ready with the endpoint's URL without a reload
    page.goto(bob_url)
    ready = page.locator("body")
    expect(ready).to_contain_text("Ready", timeout=60_000)
    expect(ready).to_contain_text("https://alpha.models.ai-factory.example.com/chat")
    expect(ready).to_contain_text("/v1/chat/completions")
    request.refresh_from_db()
    assert request.state == "ready"
    admin.context.close()
    assert not admin_violations, f"Content-Security-Policy violations: {admin_violations}"
    assert not admin_console, f"Console errors: {admin_console}"


def test_a_platform_admin_approves_the_selected_requests_at_once(
    page: Page,
    sign_in: Callable[[Page, str], None],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
) -> None:
    """The queue's header box ticks every request pam may decide (not her own), "Approve
    selected" starts the job, and its page shows each request's pull request when it is done."""
    merged_change(tenant_spec(world["alpha"]))
    merged_change(tenant_spec(world["bravo"]))
    theirs = [
        catalog.do_create_request(
            world[tenant], acting_user=world[by], kind="gpu-share", spec={**SHARE, "name": name}
        )
        for tenant, by, name in [("alpha", "bob", "train"), ("bravo", "charlie", "eval")]
    ]
    mine = catalog.do_create_request(
        world["alpha"], acting_user=world["pam"], kind="gpu-share", spec={**SHARE, "name": "mine"}
    )
    sign_in(page, "pam")
    page.goto("/approvals/")
    page.get_by_label("Select every request you may decide").check()
    for request in theirs:
        expect(page.get_by_label(f"Select request {request.pk}")).to_be_checked()
    expect(page.get_by_label("Yours: another platform admin decides")).not_to_be_checked()
    expect(page.get_by_label("Yours: another platform admin decides")).to_be_disabled()
    page.get_by_label("Approval note (for every selected request)").fill("reorganisation")
    page.get_by_role("button", name="Approve selected").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    body = page.locator("body")
    expect(body).to_contain_text("2 approved, 0 left waiting")
    for request in theirs:
        request.refresh_from_db()
        assert request.change is not None and request.decision_note == "reorganisation"
        expect(body).to_contain_text(f"pull request #{request.change_id}")
    mine.refresh_from_db()
    assert mine.state == "submitted"
