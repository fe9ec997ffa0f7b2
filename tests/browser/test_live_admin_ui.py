"""The admin pages update themselves in a real browser: the node page shows a cordon made
elsewhere, the merge queue and a queued change's page show it merge, the approval page shows a
decision taken in another tab while a reason is being typed (the form is outside the polled
region, so the text stays). A poll that fails marks the region stale until one answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import close_old_connections
from playwright.sync_api import Page, expect

from catalog import services as catalog
from fleet import services as fleet
from fleet.models import Node
from gitops import merge_queue
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest, MergeQueueEntry
from simulator import Simulator
from tenants.specs import tenant_spec

pytestmark = pytest.mark.browser

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 1}


@pytest.fixture(autouse=True)
def fast_polls(settings: Any) -> None:
    """The live server runs in this process: its regions poll every 200 ms."""
    settings.LIVE_ADMIN_POLL_MS = 200


@pytest.mark.expected_responses("network")
def test_the_node_page_shows_a_cordon_made_elsewhere_and_marks_a_failed_poll(
    page: Page,
    sign_in: Callable[[Page, str], None],
    world: dict[str, Any],
    start_fleet: Callable[..., Simulator],
) -> None:
    start_fleet()
    fleet.sync_all()
    node = Node.objects.filter(unschedulable=False).order_by("name").first()
    assert node is not None
    sign_in(page, "pam")
    page.goto(f"/fleet/nodes/{node.name}/")
    status = page.locator("#live .fleet-node-status")
    expect(status).to_contain_text("schedulable")
    # Polls that find nothing new (a 204) still move the "Updated" stamp on.
    stamp = page.locator("#live [data-live-checked]")
    first = stamp.inner_text()
    expect(stamp).not_to_have_text(first)

    fleet.do_cordon(node, acting_user=world["pam"], cordon=True, reason="from the test")
    close_old_connections()
    expect(status.locator(".fleet-cordoned")).to_have_text("cordoned")

    # The portal stops answering the polls: the region says it is no longer up to date...
    polls = re.compile(r"/fleet/nodes/[^/]+/\?since=")
    page.route(polls, lambda route: route.abort())
    expect(page.locator("#live .live-lost")).to_be_visible()
    expect(page.locator("#live")).to_have_class(re.compile(r"\blive-stale\b"))
    # ... until a poll answers again.
    page.unroute(polls)
    expect(page.locator("#live .live-lost")).to_be_hidden()


def test_the_queue_and_a_queued_changes_page_show_it_merge(
    page: Page,
    sign_in: Callable[[Page, str], None],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
) -> None:
    merged_change(tenant_spec(world["alpha"]))
    change = gitops.open_tenant_change(
        acting_user=world["bob"],
        tenant=catalog.desired_tenant(world["alpha"], kind="gpu-share", name="train", spec=SHARE),
        fleet=configured_fleet(),
        title="GPU share train",
        kind=ChangeRequest.Kind.TENANT,
        run_checks=False,
    )
    gitops.do_review(change, acting_user=world["pam"], state="approve")
    # Queued as "Add to merge queue" would, without the run it kicks: the test merges below.
    MergeQueueEntry.objects.create(change=change, enqueued_by=world["pam"])
    sign_in(page, "pam")
    page.goto(f"/changes/{change.pk}/")
    place = page.locator("#queue")
    expect(place).to_contain_text("position 1 of 1")
    queue = page.context.new_page()
    queue.goto("/changes/queue/")
    expect(queue.locator("#live")).to_contain_text(f"#{change.pk}")

    merge_queue.run_queue("test", lambda line: None)
    close_old_connections()
    expect(place).to_contain_text("Out of the merge queue: merged")
    expect(place).to_contain_text("nothing more will change here")
    expect(queue.locator("#live")).to_contain_text("The queue is empty.")


def test_the_approval_page_shows_a_decision_without_losing_a_reason_being_typed(
    page: Page,
    sign_in: Callable[[Page, str], None],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
) -> None:
    merged_change(tenant_spec(world["alpha"]))
    request = catalog.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
    )
    sign_in(page, "pam")
    page.goto(f"/approvals/{request.pk}/")
    state = page.locator("#live .approvals-progress")
    expect(state).to_contain_text("Submitted")
    reason = page.locator("#decide form[action$='/reject/'] textarea")
    reason.fill("Half typed")

    # Decided in another tab (a rejection: it starts no background job), which is final.
    catalog.do_reject(request, acting_user=world["pam"], note="from another tab")
    close_old_connections()
    expect(state).to_contain_text("Rejected")
    expect(state).to_contain_text("from another tab")
    expect(page.locator("#live .live-stamp")).to_contain_text("nothing more will change here")
    expect(reason).to_have_value("Half typed")
