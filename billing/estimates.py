"""What a catalog request would cost at the prices in effect now, shown where people decide:
beside the request form and on the approval page.

Usage is billed, not quota: a GPU share costs what its workloads hold of it, hour by hour
(``billing.costing``). The estimate is therefore the most a request can cost: every unit it
asks for held for a whole month of ``HOURS_PER_MONTH`` hours (365 x 24 / 12 = 730), and for a
time-bound share until the end of its end date. Units are priced by ``PriceBook.unit_price``,
the lookup invoices use, with the quantity the ledger would meter (``billing.fractions``):
whole GPUs and DRA claims per GPU-hour, MIG slices per instance-hour of their profile, HAMi
slots as the dominant fraction of the card each holds. A unit whose GPU model has no price is
named, never silently counted as 0.00.

An endpoint runs on one of the tenant's shares and a tenant cluster's workloads on the shares
of its node pools, so their cost is part of those shares' use, not added to it; the estimate
says so. Pure: the prices come in as a ``PriceBook`` and the moment as ``now``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from billing.costing import HOUR, HOURS_PER_MONTH, PriceBook
from billing.fractions import GPUCORES, GPUMEM, VGPU, gpu_equivalents
from catalog.models import Kind
from catalog.specs import from_json
from gitops.specs import EndpointSpec, FleetSpec, GpuShare, SpecError, TenantClusterSpec, TenantSpec

MONTH = Decimal(HOURS_PER_MONTH)


@dataclass(frozen=True)
class EstimateLine:
    """One priced item: ``quantity`` units of ``gpu_model`` (and MIG profile) held at once."""

    what: str  # what is held, as a person reads it ("2 whole GPUs of h200")
    gpu_model: str
    mig_profile: str
    quantity: Decimal  # in ``unit``s per hour
    unit: str  # costing.GPU_HOUR or costing.INSTANCE_HOUR
    unit_price: Decimal | None  # None: no price set

    @property
    def per_hour(self) -> Decimal:
        return self.quantity * self.unit_price if self.unit_price is not None else Decimal(0)

    @property
    def per_month(self) -> Decimal:
        return self.per_hour * MONTH


@dataclass(frozen=True)
class Estimate:
    """A request's cost at current prices: ``per_month`` at most (``low_per_month`` at the
    least, when it runs on a range such as an endpoint's replicas), ``until_end`` for a
    time-bound share, and a sentence per unpriced unit."""

    lines: tuple[EstimateLine, ...]
    basis: str  # what the figure assumes, as a sentence
    per_month: Decimal
    low_per_month: Decimal | None = None
    ends: date | None = None
    hours_to_end: Decimal | None = None
    until_end: Decimal | None = None
    hours_per_month: int = HOURS_PER_MONTH

    @property
    def unpriced(self) -> list[str]:
        named = dict.fromkeys(
            f"{line.gpu_model} {line.mig_profile}".strip()
            for line in self.lines
            if line.unit_price is None
        )
        return [f"No price set for {what}: it counts as zero here." for what in named]


def _line(share: GpuShare, fleet: FleetSpec, book: PriceBook, now: datetime) -> EstimateLine:
    """``share.count`` units of the share, metered and priced as the ledger would."""
    flavor = fleet.flavor(share.flavor)
    model = flavor.product if flavor else ""
    if share.kind == "hami":
        asked = {VGPU: share.count, GPUMEM: share.gpumem_mib, GPUCORES: share.gpucores_percent}
        memory = flavor.gpu_memory_mib if flavor else 0
        fraction = gpu_equivalents(asked, mode="hami", gpu_memory_mib=memory)
        quantity = Decimal(fraction.numerator) / Decimal(fraction.denominator)
        what = f"{share.count} vGPU slots of {share.flavor}"
    elif share.mig_profile:
        quantity = Decimal(share.count)
        what = f"{share.count} x {share.mig_profile} MIG slices of {share.flavor}"
    else:
        quantity = Decimal(share.count)
        noun = "GPU" if share.count == 1 else "GPUs"
        what = f"{share.count} {'DRA-claimed' if share.kind == 'dra' else 'whole'} {noun} of "
        what += share.flavor
    price = book.unit_price(model, share.mig_profile, now)
    unit = price.unit if price else ("instance-hour" if share.mig_profile else "GPU-hour")
    return EstimateLine(
        what, model, share.mig_profile, quantity, unit, price.amount if price else None
    )


def hours_to_end(until: date, now: datetime) -> Decimal:
    """Hours from ``now`` to the end of ``until`` in ``now``'s time zone: a time-bound share
    is removed once its end date has passed (``catalog.services.expire_reservations``)."""
    end = datetime.combine(until + timedelta(days=1), time(0), tzinfo=now.tzinfo)
    return max(Decimal((end - now).total_seconds()) / HOUR, Decimal(0))


def _share(share: GpuShare, fleet: FleetSpec, book: PriceBook, now: datetime) -> Estimate:
    line = _line(share, fleet, book, now)
    if not share.until:
        return Estimate((line,), "Every unit of the share held all month.", line.per_month)
    try:
        ends = date.fromisoformat(share.until)
    except ValueError:
        return Estimate((line,), "Every unit of the share held all month.", line.per_month)
    hours = hours_to_end(ends, now)
    return Estimate(
        (line,),
        "Every unit of the share held until its end date.",
        line.per_month,
        ends=ends,
        hours_to_end=hours,
        until_end=line.per_hour * hours,
    )


def _endpoint(
    endpoint: EndpointSpec, tenant: TenantSpec, fleet: FleetSpec, book: PriceBook, now: datetime
) -> Estimate | None:
    share = tenant.share(endpoint.share)
    if share is None:
        return None
    most = endpoint.max_replicas * endpoint.gpus_per_replica
    least = endpoint.min_replicas * endpoint.gpus_per_replica
    line = _line(dataclasses.replace(share, count=most), fleet, book, now)
    low = _line(dataclasses.replace(share, count=least), fleet, book, now)
    basis = (
        f"Paid as use of the share {share.name}: {endpoint.gpus_per_replica} per replica, "
        f"{endpoint.min_replicas} to {endpoint.max_replicas} replicas running all month."
    )
    return Estimate((line,), basis, line.per_month, low.per_month if least != most else None)


def _cluster(
    cluster: TenantClusterSpec, fleet: FleetSpec, book: PriceBook, now: datetime
) -> Estimate | None:
    if not cluster.gpu_quota or not cluster.node_pools:
        return None
    lines = tuple(
        _line(GpuShare("", pool, "whole", cluster.gpu_quota), fleet, book, now)
        for pool in cluster.node_pools
        if fleet.flavor(pool) is not None
    )
    if not lines:
        return None
    amounts = [line.per_month for line in lines]
    basis = (
        f"Paid as use of the shares of its node pools: its {cluster.gpu_quota} GPUs held all "
        "month, as whole GPUs of the pool they run on."
    )
    low = min(amounts)
    return Estimate(lines, basis, max(amounts), low if low != max(amounts) else None)


def estimate(
    kind: str,
    spec: Mapping[str, Any],
    tenant: TenantSpec | None,
    fleet: FleetSpec,
    *,
    book: PriceBook,
    now: datetime,
) -> Estimate | None:
    """The cost of the resource ``spec`` of ``kind`` at the prices of ``book`` in effect at
    ``now``; None when it holds no GPU or its spec does not read (the form says why).
    ``tenant`` is the tenant with the request applied: an endpoint's share is found there."""
    try:
        item = from_json(kind, dict(spec))
        if kind == Kind.GPU_SHARE:
            return _share(item, fleet, book, now)
        if kind == Kind.ENDPOINT and tenant is not None:
            return _endpoint(item, tenant, fleet, book, now)
        if kind == Kind.CLUSTER:
            return _cluster(item, fleet, book, now)
    # A stored spec is read as it is: a field of the wrong type has no cost to show.
    except (SpecError, KeyError, TypeError, ValueError, ArithmeticError):
        return None
    return None
