"""Current dashboards in a real browser: bob's usage page draws its charts and says how
current its data is; charlie's tenant, which has run nothing, starts him at the catalog; a
lagging ledger is marked. The page fixture fails on any JavaScript error or CSP violation."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import Source, UsageHour
from billing.services import rollup_days

pytestmark = pytest.mark.browser
HOUR = timedelta(hours=1)


def usage(tenant: str, hours_ago: int) -> None:
    last = timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last -= hours_ago * HOUR
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=last - h * HOUR,
            tenant_slug=tenant,
            namespace=tenant,
            flavor="h200",
            gpu_model="NVIDIA-H200",
            workload="Job/train",
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(3600),
            used_gpu_seconds=Decimal(1800),
            observed_seconds=3600,
            energy_kwh=Decimal("0.5"),
        )
        for h in range(6)
    )
    rollup_days({(last - h * HOUR).date() for h in range(6)})


def test_a_tenant_with_usage_sees_its_charts_and_data_as_of(
    page: Page, world: dict[str, Any], sign_in: Callable[[Page, str], None]
) -> None:
    usage("alpha", hours_ago=1)
    sign_in(page, "bob")
    page.goto("/t/alpha/usage/?range=24h")
    expect(page.locator("#data-as-of")).to_contain_text("Data as of")
    expect(page.locator("#data-lagging")).to_have_count(0)
    # plotly.js turns each figure's element into an SVG.
    expect(page.locator(".plotly-chart svg.main-svg").first).to_be_visible()
    expect(page.locator("#start-here")).to_have_count(0)


def test_a_tenant_that_ran_nothing_starts_at_the_catalog(
    page: Page, world: dict[str, Any], sign_in: Callable[[Page, str], None]
) -> None:
    usage("alpha", hours_ago=5)  # alpha's, not bravo's; and behind by more than two hours
    sign_in(page, "charlie")
    page.goto("/t/bravo/usage/")
    expect(page.locator("#data-lagging")).to_be_visible()
    start = page.locator("#start-here")
    expect(start).to_be_visible()
    expect(page.locator(".plotly-chart")).to_have_count(0)
    start.get_by_role("link", name="Request a GPU share").click()
    expect(page).to_have_url(re.compile(r"/t/bravo/catalog/gpu-share/new/$"))
