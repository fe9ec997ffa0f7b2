"""The cost estimate of a catalog request, for the catalog's pages (the request form's preview
and the approval page).

A tag rather than a view's context: the catalog may not import billing (DESIGN.md,
"Boundaries": nobody reads billing but pages), so the page asks billing itself, with what the
catalog's view already knows (the kind, the spec and the tenant with the request applied).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from billing.costing import PriceBook
from billing.estimates import estimate
from gitops.fleet import configured_fleet
from gitops.specs import FleetSpec, TenantSpec

register = template.Library()


@register.inclusion_tag("billing/_estimate.html")
def cost_estimate(
    kind: str,
    spec: Mapping[str, Any] | None,
    tenant: TenantSpec | None,
    fleet: FleetSpec | None = None,
) -> dict[str, Any]:
    """The estimate block of ``spec`` (nothing when it holds no GPU or does not read)."""
    found = (
        estimate(
            kind,
            spec,
            tenant,
            fleet or configured_fleet(),
            book=PriceBook.load(),
            now=timezone.now(),
        )
        if spec
        else None
    )
    return {"estimate": found, "currency": settings.BILLING_CURRENCY}
