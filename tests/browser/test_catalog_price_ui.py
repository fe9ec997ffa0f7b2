"""Price and free capacity where people decide, in a real browser: bob fills the GPU share
form and its live preview shows the monthly cost and what the pool has free, and both change
with the count; pam's approval page shows the same numbers. The ``page`` fixture fails the
test on any JavaScript error or Content-Security-Policy violation."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from billing.models import GpuPrice
from catalog.models import ResourceRequest
from gitops.fleet import H200_PRODUCT
from tenants.specs import tenant_spec
from tests.browser.conftest import (
    TIMEOUT_MS,
    watch_for_console_errors,
    watch_for_csp_violations,
)

pytestmark = pytest.mark.browser


@pytest.fixture
def priced_alpha(world: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, Any]:
    """alpha on main, and a price of 2.50 EUR per H200 GPU-hour in effect."""
    merged_change(tenant_spec(world["alpha"]))
    GpuPrice.objects.create(
        gpu_model=H200_PRODUCT, amount=Decimal("2.5"), effective_from=date(2025, 1, 1)
    )
    return world


def test_the_member_and_the_approver_see_price_and_free_capacity(
    page: Page,
    browser: Browser,
    live_server: Any,
    sign_in: Callable[[Page, str], None],
    priced_alpha: dict[str, Any],
) -> None:
    sign_in(page, "bob")
    page.goto("/t/alpha/catalog/gpu-share/new/")
    h200 = page.locator('#preview tr[data-pool="h200 GPUs"]')
    # Before any choice, each pool's free capacity is there beside the form.
    expect(h200.locator("td.num").first).to_have_text("64.00")

    page.get_by_label("Name", exact=True).fill("train")
    page.get_by_label("Kind", exact=True).select_option("h200")
    page.get_by_label("Count", exact=True).fill("2")
    estimate = page.locator("#preview .cost-estimate-month")
    expect(estimate).to_contain_text("3,650.00 EUR")  # 2 GPUs x 2.50 x 730 h
    expect(estimate).to_contain_text("730 h")
    expect(h200.locator("td.num")).to_have_text(["64.00", "62.00", "64.00"])
    expect(h200).to_have_class("free-changed")

    page.get_by_label("Count", exact=True).fill("4")
    expect(estimate).to_contain_text("7,300.00 EUR")
    expect(h200.locator("td.num")).to_have_text(["64.00", "60.00", "64.00"])

    page.get_by_role("button", name="Submit request").click()
    expect(page).to_have_url(re.compile(r"/t/alpha/requests/\d+/$"))
    request = ResourceRequest.objects.get(resource__name="train")

    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    violations = watch_for_csp_violations(context)
    admin = context.new_page()
    errors: list[str] = []
    admin.on("pageerror", lambda exc: errors.append(str(exc)))
    console = watch_for_console_errors(admin)
    sign_in(admin, "pam")
    admin.goto(f"/approvals/{request.pk}/")
    expect(admin.locator(".cost-estimate-month")).to_contain_text("7,300.00 EUR")
    row = admin.locator(".approvals-capacity tbody tr").filter(
        has=admin.get_by_role("cell", name="h200", exact=True)
    )
    expect(row.locator("td.num")).to_have_text(["64.00", "60.00"])
    context.close()
    assert not errors, f"JavaScript errors on the approval page: {errors}"
    assert not violations, f"Content-Security-Policy violations: {violations}"
    assert not console, f"Console errors on the approval page: {console}"
