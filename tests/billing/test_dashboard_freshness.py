"""Dashboards that are current: "data as of" and the lagging mark on every dashboard, the
"start here" state of a tenant with nothing metered, charts left out when they have no data,
and finance's month to date for every tenant with a forecast."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from billing.freshness import ledger_freshness
from billing.models import Budget, GpuPrice, IngestCursor, Source, UsageHour
from billing.services import rollup_days
from catalog.models import Resource

Login = Callable[[str], Client]
H200 = "NVIDIA-H200"
HOUR = timedelta(hours=1)
PAGES = [
    ("pam", "/billing/"),
    ("fiona", "/billing/finance/"),
    ("pam", "/billing/idle/"),
    ("bob", "/t/alpha/usage/"),
    ("bob", "/t/alpha/idle/"),
    ("bob", "/t/alpha/budget/"),
]


def this_hour() -> datetime:
    return timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def usage(tenant: str, last_hour: datetime, hours: int = 3) -> None:
    """``hours`` hours of one GPU held by ``tenant``, the latest starting at ``last_hour``."""
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=last_hour - h * HOUR,
            tenant_slug=tenant,
            namespace=tenant,
            flavor="h200",
            gpu_model=H200,
            workload="Job/train",
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(3600),
            used_gpu_seconds=Decimal(1800),
            observed_seconds=3600,
            energy_kwh=Decimal("0.5"),
        )
        for h in range(hours)
    )
    rollup_days({(last_hour - h * HOUR).date() for h in range(hours)})


# --- data as of, lagging ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_ledger_is_as_of_the_end_of_its_cursors_hour_or_its_latest_rows() -> None:
    now = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)
    assert ledger_freshness(now).as_of is None
    assert not ledger_freshness(now).lagging
    usage("alpha", datetime(2026, 3, 10, 9, tzinfo=UTC))
    behind = ledger_freshness(now)
    assert behind.as_of == datetime(2026, 3, 10, 10, tzinfo=UTC)
    assert behind.lag_hours == Decimal("2.5") and behind.lagging  # the default: 2 h
    # The cursor says the ingest read the next hour too, though it held no usage.
    IngestCursor.objects.create(
        source=settings.BILLING_SOURCE, last_complete_hour=datetime(2026, 3, 10, 10, tzinfo=UTC)
    )
    current = ledger_freshness(now)
    assert current.as_of == datetime(2026, 3, 10, 11, tzinfo=UTC)
    assert current.lag_hours == Decimal("1.5") and not current.lagging


@pytest.mark.parametrize(("user", "url"), PAGES)
def test_every_dashboard_says_data_as_of(login: Login, user: str, url: str) -> None:
    last = this_hour() - HOUR
    usage("alpha", last)
    page = login(user).get(url).content.decode()
    assert f'Data as of <time datetime="{(last + HOUR).isoformat()}"' in page
    assert 'id="data-lagging"' not in page


@pytest.mark.parametrize(("user", "url"), PAGES)
def test_every_dashboard_marks_a_lagging_ledger(login: Login, user: str, url: str) -> None:
    usage("alpha", this_hour() - 5 * HOUR)
    page = login(user).get(url).content.decode()
    assert 'id="data-lagging"' in page
    assert "more than 2.00 h means the usage ingest is not keeping up" in page


def test_the_lag_threshold_is_a_setting(login: Login, settings: Any) -> None:
    settings.BILLING_LAGGING_AFTER_MINUTES = 600
    usage("alpha", this_hour() - 5 * HOUR)
    assert 'id="data-lagging"' not in login("pam").get("/billing/").content.decode()


def test_a_range_change_keeps_data_as_of_in_the_panels(login: Login) -> None:
    usage("alpha", this_hour() - HOUR)
    fragment = login("bob").get("/t/alpha/usage/?range=24h", HTTP_HX_REQUEST="true")
    assert 'id="data-as-of"' in fragment.content.decode()


# --- empty tenant ---------------------------------------------------------------------------


def test_a_tenant_with_nothing_metered_gets_start_here_and_no_charts(login: Login) -> None:
    usage("bravo", this_hour() - HOUR)  # another tenant's usage is not alpha's
    page = login("bob").get("/t/alpha/usage/").content.decode()
    assert 'id="start-here"' in page
    assert "/t/alpha/catalog/gpu-share/new/" in page
    assert "/t/alpha/catalog/" in page and "/t/alpha/jobs/new/" in page
    assert "plotly-chart" not in page


def test_a_tenant_with_an_approved_share_but_nothing_run_is_told_to_run_work(
    login: Login, world: dict[str, Any]
) -> None:
    Resource.objects.create(
        tenant=world["alpha"],
        kind="gpu-share",
        name="train",
        state="active",
        spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 2},
    )
    page = login("bob").get("/t/alpha/usage/").content.decode()
    assert 'id="start-here"' in page
    assert "Your GPU shares are approved (on h200)" in page
    assert "/t/alpha/jobs/new/" in page


def test_a_tenant_with_usage_gets_its_charts(login: Login) -> None:
    usage("alpha", this_hour() - HOUR)
    page = login("bob").get("/t/alpha/usage/").content.decode()
    assert 'id="start-here"' not in page
    assert "plotly-chart" in page


def test_a_tenant_with_usage_outside_the_range_gets_no_empty_charts(login: Login) -> None:
    usage("alpha", this_hour() - timedelta(days=20))
    page = login("bob").get("/t/alpha/usage/?range=24h").content.decode()
    assert 'id="start-here"' not in page  # it has run things, just not in this range
    assert "plotly-chart" not in page
    assert "Nothing to draw in this range." in page


def test_a_year_by_week_starts_at_the_first_week_with_usage(login: Login) -> None:
    last = this_hour() - timedelta(days=20)
    usage("alpha", last)
    page = login("bob").get("/t/alpha/usage/?range=365d").content.decode()
    figures = re.findall(r'data-plotly-figure="([^"]*)"', page)
    usage_figure = json.loads(html.unescape(figures[0]))
    first = datetime.fromisoformat(usage_figure["data"][0]["x"][0])
    week = (last - timedelta(hours=2)).date()
    assert first.date() == week - timedelta(days=week.weekday())


def test_the_platform_dashboard_draws_no_empty_charts(login: Login) -> None:
    page = login("pam").get("/billing/").content.decode()
    assert "plotly-chart" not in page
    assert "No usage data yet" in page


# --- finance ---------------------------------------------------------------------------------


def test_finance_lists_every_tenants_month_with_a_forecast_and_totals(
    login: Login, world: dict[str, Any]
) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("2.00"), effective_from=date(2020, 1, 1))
    Budget.objects.create(tenant=world["alpha"], monthly_amount=Decimal(1000), thresholds=[50])
    now = this_hour()
    hours = min(int((now - now.replace(day=1, hour=0)) / HOUR), 3)
    if hours == 0:
        pytest.skip("the first hour of a month has no complete hour of it yet")
    usage("bravo", now - HOUR, hours=hours)  # no budget: listed all the same
    page = login("fiona").get("/billing/finance/").content.decode()
    table = page[
        page.index('id="month-to-date"') : page.index("</table>", page.index("month-to-date"))
    ]
    assert "bravo" in table and "alpha" in table
    assert table.index("bravo") < table.index("alpha")  # dearest first
    spent = Decimal(2 * hours)
    assert f"{spent:.2f} EUR" in table
    assert "none" in table  # bravo has no budget
    assert "Total" in table
    assert "linear run-rate" in page


def test_a_tenants_budget_page_forecasts_its_month(login: Login, world: dict[str, Any]) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("2.00"), effective_from=date(2020, 1, 1))
    now = this_hour()
    elapsed = int((now - now.replace(day=1, hour=0)) / HOUR)
    if elapsed < 2:
        pytest.skip("the month's first hours have too little of it to run on")
    usage("alpha", now - HOUR, hours=1)  # 2.00 spent in the month so far
    page = login("bob").get("/t/alpha/budget/").content.decode()
    month_hours = (now.replace(day=28) + timedelta(days=4)).replace(day=1, hour=0) - now.replace(
        day=1, hour=0
    )
    expected = Decimal(2) * Decimal(month_hours / HOUR) / Decimal(elapsed)
    assert f"{expected.quantize(Decimal('0.01')):,} EUR" in page
