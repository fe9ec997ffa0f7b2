"""The Content-Security-Policy as a browser enforces it: the key pages load with the policy
on and nothing refused, the charts still plot (plotly, also after an htmx refresh) and the
behaviour that used to sit in inline handlers (confirm, go back) still works.

The `page` fixture fails any browser test on a violation; these tests walk the pages no other
browser test opens, with the data that makes them show their charts and forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from catalog import services as catalog
from catalog.models import ResourceRequest
from catalog.specs import GpuShare, to_json
from fleet import services as fleet
from gitops import services as gitops
from gitops.fleet import configured_fleet

pytestmark = pytest.mark.browser

SignIn = Callable[[Page, str], None]

PAGES = {
    "pam": [
        "/",
        "/tenants/",
        "/tenants/new/",
        "/audit/",
        "/changes/",
        "/approvals/",
        "/notifications/",
        "/fleet/",
        "/fleet/nodes/",
        "/fleet/topology/",
        "/fleet/status/",
        "/jobs/",
        "/billing/",
        "/t/alpha/settings/",
    ],
    "alice": [
        "/t/alpha/",
        "/t/alpha/members/",
        "/t/alpha/audit/",
        "/t/alpha/catalog/",
        "/t/alpha/catalog/gpu-share/new/",
        "/t/alpha/requests/",
        "/t/alpha/status/",
        "/t/alpha/usage/",
    ],
}


@pytest.fixture
def submitted(world: dict[str, Any], start_fleet: Callable[..., Any]) -> ResourceRequest:
    """The simulated fleet read into the portal (so the fleet page has a capacity chart) and
    a GPU share request of alpha waiting for approval (so the approval page has one too)."""
    start_fleet()
    fleet.sync_all()
    fleet_spec = configured_fleet()
    gitops.ensure_bootstrapped(fleet_spec)
    flavor = next(f.name for f in fleet_spec.flavors if f.mode == "whole")
    spec = to_json(GpuShare(name="train", flavor=flavor, kind="whole", count=2))
    return catalog.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=spec, reason="training"
    )


def _policy(page: Page, path: str) -> str:
    response = page.goto(path)
    assert response is not None and response.status == 200, path
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy, path
    assert "unsafe" not in policy, path
    return policy


def _plotted(page: Page, selector: str) -> None:
    """plotly.js drew the chart in ``selector`` and its stylesheet took effect."""
    chart = page.locator(selector)
    expect(chart.locator(".main-svg").first).to_be_attached()
    expect(chart.locator(".trace.bars").first).to_be_attached()
    # Its rules went into the nonce'd <style>: the SVG layers are stacked, not laid out in turn.
    assert page.evaluate("document.getElementById('plotly.js-style-global').sheet.cssRules.length")
    expect(chart.locator(".main-svg").first).to_have_css("position", "absolute")


def test_key_pages_run_under_the_policy_with_nothing_refused(
    page: Page, sign_in: SignIn, submitted: ResourceRequest
) -> None:
    # Violations are collected by the `page` fixture, which fails the test on any.
    _policy(page, "/accounts/login/")
    for index, (who, paths) in enumerate(PAGES.items()):
        if index:  # sign out as a person does (clearing cookies under a loaded form raced)
            page.locator("form[action='/accounts/logout/'] button[type=submit]").click()
            expect(page.locator("input[name=login]")).to_be_visible()
        sign_in(page, who)
        for path in paths:
            _policy(page, path)
            expect(page.locator("main h1").first).to_be_visible()
    page.context.clear_cookies()
    sign_in(page, "pam")
    _policy(page, f"/approvals/{submitted.pk}/")
    _plotted(page, ".approvals-chart")


def test_charts_plot_and_replot_after_an_htmx_refresh(
    page: Page, sign_in: SignIn, submitted: ResourceRequest
) -> None:
    sign_in(page, "pam")
    policy = _policy(page, "/fleet/")
    assert "style-src 'self' 'nonce-" in policy
    _plotted(page, "#overview .fleet-chart")
    # What the every-10s poll does, now: the fragment's chart is plotted by portal.js.
    page.evaluate("document.querySelector('#overview .fleet-chart .main-svg').remove()")
    with page.expect_response(lambda r: r.url.endswith("/fleet/")) as refreshed:
        page.evaluate("htmx.ajax('GET', '/fleet/', {target: '#overview', swap: 'outerHTML'})")
    assert refreshed.value.status == 200
    _plotted(page, "#overview .fleet-chart")


@pytest.mark.expected_responses(403)
def test_confirmations_and_links_work_without_inline_handlers(
    page: Page, sign_in: SignIn, submitted: ResourceRequest, live_server: Any
) -> None:
    sign_in(page, "bob")
    _policy(page, f"/t/alpha/requests/{submitted.pk}/")
    cancel = page.get_by_role("button", name="Cancel the request")
    # Saying no to the question keeps the request...
    page.once("dialog", lambda dialog: dialog.dismiss())
    cancel.click()
    page.wait_for_timeout(300)
    submitted.refresh_from_db()
    assert submitted.state == ResourceRequest.State.SUBMITTED
    # ...saying yes cancels it; the question was portal.js's, with the request's number.
    questions: list[str] = []

    def accept(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    with page.expect_navigation():
        cancel.click()
    assert questions == [f"Cancel request #{submitted.pk}?"]
    submitted.refresh_from_db()
    assert submitted.state == ResourceRequest.State.CANCELLED

    # The 403 page's "Back" goes back through history, not through a javascript: URL.
    page.goto("/t/alpha/")
    response = page.goto("/tenants/new/")
    assert response is not None and response.status == 403
    page.get_by_role("link", name="Back").click()
    expect(page).to_have_url(f"{live_server.url}/t/alpha/")


def test_polls_say_so_and_what_the_person_does_does_not(
    page: Page, sign_in: SignIn, submitted: ResourceRequest
) -> None:
    # The session idle timeout counts only what the person does (portal.middleware): a page
    # left open keeps polling, and those requests carry the header that says so.
    sign_in(page, "alice")
    page.goto("/t/alpha/requests/")
    with page.expect_request(
        lambda r: "/t/alpha/requests/" in r.url and "hx-request" in r.headers, timeout=15_000
    ) as poll:
        pass
    assert poll.value.headers.get("x-portal-background") == "poll"
    page.goto("/t/alpha/members/")
    # The answer, not only the request: a test that ends with a request still being served
    # has its database emptied under that request (a deadlock on PostgreSQL).
    with page.expect_response(lambda r: "/role/" in r.url) as change:
        page.get_by_label("Role of vic").select_option("member")
    assert change.value.ok
    assert "hx-request" in change.value.request.headers
    assert "x-portal-background" not in change.value.request.headers


@pytest.mark.expected_responses(400)
def test_the_usage_dashboard_replots_after_a_range_change(
    page: Page, sign_in: SignIn, world: dict[str, Any], live_server: Any
) -> None:
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from billing.models import Source, UsageHour

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    for tenant in ("alpha", "bravo"):
        UsageHour.objects.create(
            hour=hour,
            tenant_slug=tenant,
            namespace=tenant,
            flavor="h200",
            gpu_model="NVIDIA-H200",
            workload="Deployment/train",
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(7200),
            used_gpu_seconds=Decimal(600),
            observed_seconds=3600,
        )
    sign_in(page, "pam")  # lands on the dashboard
    _plotted(page, "#panels")
    page.locator("#dash-range").select_option("24h")
    with page.expect_response(lambda r: "range=24h" in r.url) as answered:
        page.locator("form.dash-range button[type=submit]").click()
    assert answered.value.status == 200
    expect(page).to_have_url(f"{live_server.url}/billing/?range=24h&from=&to=")
    _plotted(page, "#panels")
    # A bad range is refused with its reason in the flash area; the panels stay as they were.
    page.locator("#dash-range").select_option("custom")
    page.locator("#dash-from").fill("2026-03-02")
    page.locator("#dash-to").fill("2026-03-01")
    page.locator("form.dash-range button[type=submit]").click()
    expect(page.locator("#messages")).to_contain_text("must not be after the to date")
    _plotted(page, "#panels")
