"""The cost estimate of a catalog request, for the catalog's pages (the request form's preview,
the approval page and queue, the decommission page).

A tag rather than a view's context: the catalog may not import billing (DESIGN.md,
"Boundaries": nobody reads billing but pages), so the page asks billing itself, with what the
catalog's view already knows (the kind, the spec and the tenant with the request applied).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from billing import request_costs
from billing.costing import PriceBook
from billing.estimates import estimate
from billing.request_costs import QueueCosts
from catalog.models import Resource, ResourceRequest
from gitops.fleet import configured_fleet
from gitops.specs import FleetSpec, TenantSpec

register = template.Library()


@register.inclusion_tag("billing/_estimate.html")
def cost_estimate(
    kind: str,
    spec: Mapping[str, Any] | None,
    tenant: TenantSpec | None,
    fleet: FleetSpec | None = None,
    runs_now: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The estimate block of ``spec`` (nothing when it holds no GPU or does not read), and of
    ``runs_now`` beside it: what the resource a modify changes costs as it runs."""
    if not spec:
        return {"estimate": None}
    fleet = fleet or configured_fleet()
    book = PriceBook.load()
    # Local time: a time-bound share ends with its end date where the portal runs.
    now = timezone.localtime()
    found = estimate(kind, spec, tenant, fleet, book=book, now=now)
    current = estimate(kind, runs_now, tenant, fleet, book=book, now=now) if runs_now else None
    return {"estimate": found, "current": current, "currency": settings.BILLING_CURRENCY}


@register.simple_tag
def queue_costs(requests: Sequence[ResourceRequest]) -> QueueCosts:
    """The approval queue's requests with what each changes in a month, and their total."""
    return request_costs.queue_costs(list(requests))


@register.inclusion_tag("billing/_saving.html")
def release_saving(resource: Resource) -> dict[str, Any]:
    """What decommissioning ``resource`` saves a month (nothing when it holds no GPU)."""
    return {"estimate": request_costs.running_cost(resource), "currency": settings.BILLING_CURRENCY}
