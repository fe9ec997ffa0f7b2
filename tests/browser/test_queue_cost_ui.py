"""What approving costs, in a real browser: pam's approval queue names each waiting request's
monthly cost and their total, and a decommission page what removing the resource saves. The
``page`` fixture fails the test on any JavaScript error or Content-Security-Policy violation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from billing.models import GpuPrice
from catalog import services
from catalog.models import Kind, Resource
from gitops.fleet import H200_PRODUCT
from tenants.specs import tenant_spec

pytestmark = pytest.mark.browser


def test_the_approver_sees_what_the_queue_costs_and_a_decommission_saves(
    page: Page,
    live_server: Any,
    sign_in: Callable[[Page, str], None],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
) -> None:
    merged_change(tenant_spec(world["alpha"]))
    GpuPrice.objects.create(
        gpu_model=H200_PRODUCT, amount=Decimal("2.5"), effective_from=date(2025, 1, 1)
    )
    spec = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
    services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=spec
    )
    old = Resource.objects.create(
        tenant=world["alpha"],
        kind=Kind.GPU_SHARE,
        name="old",
        state=Resource.State.ACTIVE,
        spec={"name": "old", "flavor": "h200", "kind": "whole", "count": 1},
    )
    services.do_decommission_request(old, acting_user=world["bob"], reason="done")

    sign_in(page, "pam")
    page.goto("/approvals/")
    expect(page.locator("td.queue-cost")).to_have_text(["+3,650.00 EUR", "saves 1,825.00 EUR"])
    expect(page.locator("td.queue-cost-total")).to_have_text("+1,825.00 EUR")

    kept = Resource.objects.create(
        tenant=world["alpha"],
        kind=Kind.GPU_SHARE,
        name="kept",
        state=Resource.State.ACTIVE,
        spec={"name": "kept", "flavor": "h200", "kind": "whole", "count": 4},
    )
    page.goto(f"/t/alpha/resources/{kept.pk}/decommission/")
    expect(page.get_by_test_id("release-saving")).to_contain_text(
        "Up to 7,300.00 EUR a month at current prices"
    )
