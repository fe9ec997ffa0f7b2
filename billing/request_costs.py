"""What requests would change in a month's cost, for the approval queue, the decommission page
and the API's request preview: each request's estimate at current prices
(``billing.estimates``) beside what its resource costs as it runs.

Many requests at once in a bounded number of queries: the prices once, and the GPU shares of
the requests' tenants once (an endpoint's cost is found from the share it runs on). The share
an endpoint names is the one the database holds as live; a share not merged yet has no spec
there, so such an endpoint shows no figure rather than a wrong one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.costing import PriceBook
from billing.estimates import Estimate, estimate
from catalog.models import Kind, Resource, ResourceRequest
from catalog.specs import from_json
from gitops.fleet import configured_fleet
from gitops.specs import FleetSpec, GpuShare, SpecError, TenantSpec
from tenants.models import Tenant

A = ResourceRequest.Action
LIVE = (Resource.State.ACTIVE, Resource.State.DECOMMISSIONING)


@dataclass(frozen=True)
class RequestCost:
    """A request's monthly cost once applied (``after``; None for a decommission) and its
    resource's as it runs (``before``; None for a create)."""

    kind: str
    after: Estimate | None
    before: Estimate | None
    request: ResourceRequest | None = None

    @property
    def change(self) -> Decimal | None:
        """What approving adds to a month (negative: saves), None when neither side prices."""
        if self.after is None and self.before is None:
            return None
        after = self.after.per_month if self.after else Decimal(0)
        before = self.before.per_month if self.before else Decimal(0)
        return after - before

    @property
    def saving(self) -> Decimal | None:
        """What approving saves a month (a decommission, a smaller share), else None."""
        change = self.change
        return -change if change is not None and change < 0 else None

    @property
    def billed_directly(self) -> bool:
        """A GPU share is what is paid for; an endpoint or a cluster is use of shares, so its
        figure is part of theirs and a total adds only the shares'."""
        return self.kind == Kind.GPU_SHARE

    @property
    def unpriced(self) -> list[str]:
        found = [*(self.after.unpriced if self.after else ())]
        found += self.before.unpriced if self.before else ()
        return list(dict.fromkeys(found))


@dataclass(frozen=True)
class QueueCosts:
    """Every request's cost, and ``total``: what approving all of them would add to a month's
    GPU-share bill (endpoints and clusters run on shares: not added again)."""

    rows: list[RequestCost]
    total: Decimal
    currency: str

    @property
    def saving(self) -> Decimal | None:
        return -self.total if self.total < 0 else None

    @property
    def unpriced(self) -> bool:
        return any(row.unpriced for row in self.rows)


def _shares_by_tenant(tenant_ids: Iterable[int]) -> dict[int, tuple[GpuShare, ...]]:
    """The live GPU shares of these tenants, in one query."""
    found: dict[int, list[GpuShare]] = defaultdict(list)
    rows = Resource.objects.filter(
        tenant_id__in=set(tenant_ids), kind=Kind.GPU_SHARE, state__in=LIVE
    ).values_list("tenant_id", "spec")
    for tenant_id, spec in rows:
        try:
            found[tenant_id].append(from_json(Kind.GPU_SHARE, spec))
        except (SpecError, KeyError, TypeError, ValueError):
            continue  # a share whose spec does not read has no price to lend an endpoint
    return {tenant_id: tuple(shares) for tenant_id, shares in found.items()}


def request_costs(
    requests: Sequence[ResourceRequest],
    *,
    fleet: FleetSpec | None = None,
    book: PriceBook | None = None,
    now: datetime | None = None,
) -> list[RequestCost]:
    """The cost of each request (``select_related("tenant", "resource")`` keeps it at two
    queries: the prices and the tenants' shares)."""
    if not requests:
        return []
    fleet = fleet or configured_fleet()
    book = book or PriceBook.load()
    # Local time: a time-bound share ends with its end date where the portal runs.
    now = now or timezone.localtime()
    endpoints = [r.tenant_id for r in requests if r.kind == Kind.ENDPOINT]
    shares = _shares_by_tenant(endpoints) if endpoints else {}
    costs = []
    for request in requests:
        tenant = TenantSpec(slug=request.tenant.slug, shares=shares.get(request.tenant_id, ()))

        def priced(spec: dict[str, Any], kind: str = request.kind, t: TenantSpec = tenant) -> Any:
            return estimate(kind, spec, t, fleet, book=book, now=now) if spec else None

        after = priced(request.spec) if request.action != A.DECOMMISSION else None
        before = priced(request.resource.spec) if request.action != A.CREATE else None
        costs.append(RequestCost(request.kind, after, before, request))
    return costs


def spec_cost(
    tenant: Tenant, kind: str, spec: dict[str, Any] | None, running: dict[str, Any] | None
) -> RequestCost:
    """What setting a ``kind`` resource of ``tenant`` to ``spec`` (None: removing it) costs a
    month, beside ``running``, the spec it has now (None: a new one); a document's dry run."""
    shares = _shares_by_tenant([tenant.pk]) if kind == Kind.ENDPOINT else {}
    owner = TenantSpec(slug=tenant.slug, shares=shares.get(tenant.pk, ()))
    fleet, book, now = configured_fleet(), PriceBook.load(), timezone.localtime()
    after, before = (
        estimate(kind, part, owner, fleet, book=book, now=now) if part else None
        for part in (spec, running)
    )
    return RequestCost(kind, after, before)


def running_cost(resource: Resource) -> Estimate | None:
    """What ``resource`` costs a month as it runs: what decommissioning it saves."""
    return spec_cost(resource.tenant, resource.kind, None, resource.spec or None).before


def queue_costs(requests: Sequence[ResourceRequest]) -> QueueCosts:
    """The requests' costs and what approving them all adds to a month."""
    rows = request_costs(requests)
    total = sum(
        (row.change for row in rows if row.billed_directly and row.change is not None),
        Decimal(0),
    )
    return QueueCosts(rows, total, settings.BILLING_CURRENCY)
