"""No page of any persona prints a number with more than two decimals, outside unit prices.

The pages are found by walking the URL configuration (the GET pages that need no argument,
and those that need only the tenant), so a new page is covered the day it is added. The world
holds amounts that do not round to two places: a MIG slice is 1/7 of a GPU, a price of four
decimals times such hours. Unit prices may keep four decimals: a template marks them with
``class="unit-price"``, and their text is left out of the check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

# A digit, a point and three digits: 3.028 or 35458.680 (not a version like 1.2.3's parts,
# which never run three digits after a point in our pages, nor a date or an IP address).
LONG_DECIMAL = re.compile(r"(?<![\d.])\d[\d,]*\.\d{3,}(?![\d.])")
# Django's admin, the JSON API and vendored assets are not pages of the portal.
SKIPPED_PREFIXES = ("django-admin/", "api/v1/", "static-vendor/", "accounts/")
SKIPPED_TAGS = {"script", "style", "pre", "code", "textarea"}


class _Text(HTMLParser):
    """The text nodes a person reads, without scripts, code and unit prices."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"br", "img", "input", "meta", "link", "hr", "source", "wbr", "col"}:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append((tag, tag in SKIPPED_TAGS or "unit-price" in classes))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if not any(skip for _, skip in self.stack):
            self.texts.append(data)


def long_decimals(html: str) -> list[str]:
    parser = _Text()
    parser.feed(html)
    return [m.group(0) for text in parser.texts for m in LONG_DECIMAL.finditer(text)]


def test_it_finds_a_long_decimal_outside_unit_prices_only() -> None:
    html = (
        "<p>quota 3.028571428571428571428571429 GPUs</p>"
        '<td><span class="unit-price">2.1234 EUR</span></td>'
        "<script>var x = 1.23456;</script><p>1,234.56 EUR on 2026-12-06 at 10.0.0.1</p>"
    )
    assert long_decimals(html) == ["3.028571428571428571428571429"]


def _pages(ids: dict[str, int]) -> list[str]:
    found: list[str] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and p.name:
                route = prefix + str(p.pattern)
                route = route.replace("<slug:tenant>", "alpha").replace("<str:kind>", "gpu-share")
                for name, pk in ids.items():
                    route = route.replace(f"<int:{name}>", str(pk))
                if "<" not in route and "^" not in route and not route.startswith(SKIPPED_PREFIXES):
                    found.append("/" + route)

    walk(get_resolver().url_patterns, "")
    return sorted(set(found))


@pytest.fixture
def odd_amounts(world: dict[str, Any]) -> dict[str, int]:
    """Alpha holds a whole GPU and three MIG 1g slices, used for a day of this month and one of
    last month at a four-decimal price; last month's invoice is drafted, and a request for three
    more slices waits for approval. Returns their ids."""
    from billing import invoicing, services
    from billing.models import Budget, GpuPrice, Source, UsageHour
    from catalog.models import Resource, ResourceRequest

    alpha = world["alpha"]
    alpha.gpu_quota = 4
    alpha.save()
    Resource.objects.create(
        tenant=alpha,
        kind="gpu-share",
        name="train",
        state="active",
        spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 1},
    )
    slices = Resource.objects.create(
        tenant=alpha,
        kind="gpu-share",
        name="slices",
        state="active",
        spec={
            "name": "slices",
            "flavor": "h200-mig",
            "kind": "mig",
            "mig_profile": "1g.18gb",
            "count": 3,
        },
    )
    GpuPrice.objects.create(
        gpu_model="NVIDIA-H200", amount=Decimal("2.1234"), effective_from=date(2020, 1, 1)
    )
    Budget.objects.create(tenant=alpha, monthly_amount=Decimal("1000.00"))
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    this_month = now - timedelta(hours=30)
    last_month = now.replace(day=1) - timedelta(days=2)
    hours = [start + timedelta(hours=i) for start in (this_month, last_month) for i in range(24)]
    for hour in hours:
        UsageHour.objects.create(
            hour=hour,
            tenant_slug="alpha",
            namespace="tenant-alpha",
            flavor="h200",
            gpu_model="NVIDIA-H200",
            workload="Job/train-1",
            source=Source.PROMETHEUS,
            allocated_gpu_seconds=(Decimal("3600") * 3 / 7).quantize(Decimal("0.001")),
            used_gpu_seconds=(Decimal("3600") / 7).quantize(Decimal("0.001")),
            observed_seconds=3600,
            energy_kwh=Decimal("0.123457"),
        )
    # The dashboards read the daily and monthly sums, as after the nightly roll-up.
    services.rollup_days({hour.date() for hour in hours})
    services.rollup_months({hour.date().replace(day=1) for hour in hours})
    month = last_month.date().replace(day=1)
    invoice = invoicing.do_draft_invoice(alpha, month, acting_user=world["pam"])
    request = ResourceRequest.objects.create(
        tenant=alpha,
        resource=slices,
        state="submitted",
        spec={**slices.spec, "count": 6},
        requested_by=world["bob"],
    )
    return {"invoice_id": invoice.pk, "request_id": request.pk}


@pytest.mark.parametrize("persona", ["alice", "vic", "pam", "fiona"])
def test_no_page_prints_more_than_two_decimals(
    persona: str, odd_amounts: dict[str, int], login: Callable[[str], Client]
) -> None:
    client = login(persona)
    offenders: dict[str, list[str]] = {}
    pages = _pages(odd_amounts)
    invoice, request = odd_amounts["invoice_id"], odd_amounts["request_id"]
    assert {
        "/t/alpha/catalog/",
        "/t/alpha/usage/",
        f"/billing/invoices/{invoice}/",
        f"/approvals/{request}/",
    } <= set(pages)
    for url in pages:
        response = client.get(url)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        found = long_decimals(response.content.decode())
        if found:
            offenders[url] = found
    assert offenders == {}
