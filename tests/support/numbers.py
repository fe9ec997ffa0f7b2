"""Numbers people read: the rule that no page prints more than two decimals outside unit
prices, and a world whose amounts do not round to two places, for the walks that check it
(tests/portal/test_numbers_walk.py with the test client, tests/browser/test_persona_walk.py in
Chromium)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

from django.utils import timezone

# A digit, a point and three digits: 3.028 or 35458.680 (not a version like 1.2.3's parts,
# which never run three digits after a point in our pages, nor a date or an IP address).
LONG_DECIMAL = re.compile(r"(?<![\d.])\d[\d,]*\.\d{3,}(?![\d.])")
# Text inside these is code or data, not something a person reads as a number.
SKIPPED_TAGS = frozenset({"script", "style", "pre", "code", "textarea"})
# Unit prices may keep four decimals; a template marks them with this class.
UNIT_PRICE_CLASS = "unit-price"
_VOID_TAGS = {"br", "img", "input", "meta", "link", "hr", "source", "wbr", "col"}


def long_decimals_in(texts: Iterable[str]) -> list[str]:
    """The numbers of more than two decimals in ``texts`` (text nodes a person reads)."""
    return [m.group(0) for text in texts for m in LONG_DECIMAL.finditer(text)]


class _Text(HTMLParser):
    """The text nodes a person reads, without scripts, code and unit prices."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append((tag, tag in SKIPPED_TAGS or UNIT_PRICE_CLASS in classes))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if not any(skip for _, skip in self.stack):
            self.texts.append(data)


def long_decimals(html: str) -> list[str]:
    """The numbers of more than two decimals in the text of ``html``, outside unit prices."""
    parser = _Text()
    parser.feed(html)
    return long_decimals_in(parser.texts)


def seed_odd_amounts(world: dict[str, Any]) -> dict[str, int]:
    """Alpha holds a whole GPU and three MIG 1g slices, used for a day of this month and one of
    last month at a four-decimal price; last month's invoice is drafted, and a request for three
    more slices waits for approval. Returns their ids (``invoice_id``, ``request_id``)."""
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
