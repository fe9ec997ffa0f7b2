"""A made-up past for the demo: prices, 30 days of ledger rows and a budget (``seed_demo``).

A new demo has no usage until its exporter has been scraped for an hour, and no price at all,
so the cost pages would be empty for days. This writes what the real ingest would have
written had the demo's workloads run for the last 30 days: the same namespaces, flavors, GPU
models, MIG profiles and workload names (the synced ``fleet.Workload`` rows when the fleet
has been synced, else the workloads ``seed_demo`` says the demo's cluster will run), attributed
by namespace with the ingest's own rules, with ``source="demo"`` so it can never be mistaken
for metered usage. Utilisation is pseudo-random from a fixed seed with a daily cycle, so two
runs write the same rows; one tenant is left nearly idle so that waste and right-sizing have
something to show, and so is one model endpoint, which the demo's idle policy then puts to
sleep after its grace (the simulator's DCGM reads its pods as idle too: ``idle_pods``).

The periodic ingest starts after the history (its cursor is set to the history's last hour
when it has none): it would otherwise rewrite the last day's hours from an exporter that had
not been scraped yet, leaving them empty.

Re-running replaces the demo rows and never touches another source's: an hour that the real
ingest has written is skipped (the ingest, for its part, replaces a whole hour, demo rows
included, when it gets to it).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing.costing import priced, totals
from billing.dashboards import endpoint_of
from billing.fractions import MIG_PROFILE, MIG_SLICES_PER_GPU, FractionError, gpu_equivalents
from billing.ingest import workload_name
from billing.models import (
    Budget,
    GpuPrice,
    IdlePolicy,
    IngestCursor,
    ReservationPrice,
    Source,
    UsageHour,
)
from billing.services import HOUR, last_complete_hour, rollup_days
from fleet.models import Node, Workload
from fleet.services import platform_namespaces, tenant_of
from tenants.models import Tenant

DAYS = 30
SEED = 20260101
# The inference tenant's endpoint holds its GPU shares around the clock and is asked little.
IDLE_TENANT = "llm-platform"
# vision's catalog endpoint (tenant, endpoint) nobody calls: the idle policy's demo case.
IDLE_ENDPOINT = ("vision", "caption")
BUDGET_TENANT = "vision"
PRICE_NOTE = "Demo price (seed_demo)"
# Per GPU-hour of a whole GPU, and per instance-hour of a MIG profile: (days ago, amount).
# The older price makes the price history, and an invoice line per price period, visible.
WHOLE_PRICES = ((120, Decimal("3.4000")), (12, Decimal("2.9500")))
MIG_PRICE_PER_SLICE = Decimal("0.4500")  # a 1g instance; a 3g pays three slices
# Per GPU-hour of a reserved node, paid whether used or not: below the usage price, as a
# commitment is.
RESERVATION_PRICE = Decimal("2.6000")
# An H200 draws about 100 W idle and up to its 700 W board power (NVIDIA H200 datasheet).
IDLE_WATTS = 100
BUSY_WATTS = 600
BATCH = 2000
# The demo's idle policy: the nearly idle tenant runs at 2-7%, the others at 25% and more;
# a grace short enough to watch the endpoint go to sleep after `make demo` starts.
DEMO_IDLE_THRESHOLD = Decimal(10)
DEMO_IDLE_WINDOW_HOURS = 2
DEMO_GRACE_MINUTES = 2


@dataclass(frozen=True)
class Placement:
    """GPUs one workload of one namespace holds on one flavor, as the ledger keys them."""

    namespace: str
    flavor: str
    gpu_model: str
    mig_profile: str
    workload: str
    gpu_equivalents: Fraction
    memory_mib: int  # the framebuffer the placement holds


@dataclass(frozen=True)
class PlannedWorkload:
    """A workload the demo's cluster will run before the fleet is first synced: its pods and
    their GPU requests on one node pool (``seed_demo`` reads them from the simulator's
    configuration, which this app does not import)."""

    namespace: str
    kind: str
    name: str
    pods: int
    pool: str
    product: str
    mode: str
    gpu_memory_mib: int
    requests: Mapping[str, int] = field(default_factory=dict)  # a pod's nvidia.com/* requests


@dataclass(frozen=True)
class Seeded:
    """What one run wrote: new prices, demo rows, hours left to another source, budget's tenant."""

    prices: int
    rows: int
    skipped_hours: int
    budget: str


def _memory_mib(equivalents: Fraction, mig_profile: str, gpu_memory_mib: int) -> int:
    """The framebuffer held: a MIG instance its profile's (decimal) gigabytes, anything else
    its share of the card."""
    match = MIG_PROFILE.match(mig_profile) if mig_profile else None
    if match is None:
        return int(equivalents * gpu_memory_mib)
    instances = equivalents * MIG_SLICES_PER_GPU / int(match["slices"])
    return int(instances * int(match["gb"]) * 10**9 / 2**20)


def _mig_profile(requests: dict[str, int]) -> str:
    profiles = [
        r.removeprefix("nvidia.com/mig-") for r in requests if r.startswith("nvidia.com/mig-")
    ]
    return profiles[0] if len(profiles) == 1 else ""


def _merge(found: list[Placement]) -> list[Placement]:
    """One placement per ledger key, as the rollup merges the pods of one owner."""
    merged: dict[tuple[str, str, str, str], Placement] = {}
    for p in found:
        key = (p.namespace, p.flavor, p.mig_profile, p.workload)
        old = merged.get(key)
        if old is not None:
            p = dataclasses.replace(
                old,
                gpu_equivalents=old.gpu_equivalents + p.gpu_equivalents,
                memory_mib=old.memory_mib + p.memory_mib,
            )
        merged[key] = p
    return sorted(merged.values(), key=lambda p: (p.namespace, p.flavor, p.mig_profile, p.workload))


def synced_placements() -> list[Placement]:
    """The GPU pods of the synced fleet, on the nodes they run on."""
    nodes = {n.name: n for n in Node.objects.filter(gpu_count__gt=0)}
    found = []
    for w in Workload.objects.exclude(node=""):
        node = nodes.get(w.node)
        if node is None:
            continue
        mode = node.sharing or "whole"
        try:
            held = gpu_equivalents(w.gpu_requests, mode=mode, gpu_memory_mib=node.gpu_memory_mib)
        except FractionError:
            continue
        if not held:
            continue
        profile = _mig_profile(w.gpu_requests) if mode == "mig" else ""
        found.append(
            Placement(
                w.namespace,
                node.flavor or node.pool,
                node.product,
                profile,
                workload_name(w.owner_kind, w.owner_name, w.name),
                held,
                _memory_mib(held, profile, node.gpu_memory_mib),
            )
        )
    return _merge(found)


def planned_placements(planned: Iterable[PlannedWorkload]) -> list[Placement]:
    """The placements of ``planned`` workloads, on the flavors of their pools."""
    from gitops.fleet import POOL_LABEL, base_fleet

    flavor_of_pool = {
        value: flavor.name
        for flavor in base_fleet().flavors
        for key, value in flavor.node_labels
        if key == POOL_LABEL
    }
    found = []
    for seed in planned:
        requests = dict(seed.requests)
        try:
            held = gpu_equivalents(requests, mode=seed.mode, gpu_memory_mib=seed.gpu_memory_mib)
        except FractionError:
            continue
        if not held:
            continue
        profile = _mig_profile(requests) if seed.mode == "mig" else ""
        found += [
            Placement(
                seed.namespace,
                flavor_of_pool.get(seed.pool, seed.pool),
                seed.product,
                profile,
                workload_name(seed.kind, seed.name, ""),
                held,
                _memory_mib(held, profile, seed.gpu_memory_mib),
            )
        ] * seed.pods
    return _merge(found)


def placements(planned: Iterable[PlannedWorkload] = ()) -> list[Placement]:
    return synced_placements() or planned_placements(planned)


def within_grants(
    found: Iterable[Placement], grants: Mapping[tuple[str, str], Decimal]
) -> list[Placement]:
    """The placements cut down to ``grants`` (GPU-equivalents per tenant and flavor,
    ``billing.dashboards.granted``): per tenant and flavor, endpoints' predictors first (main
    holds them awake), then the smallest workloads, each holding what is left of the grant at
    most; one with nothing left is left out. The demo cluster's seed workloads run outside
    Kueue, so without this a tenant's history would hold more than its shares grant (vision's
    16-GPU training job against a 2-GPU share). Cut down rather than left out whole, so every
    workload the demo talks about (the idle tenant's predictor among them) keeps a history."""
    platform = platform_namespaces()
    left: dict[tuple[str, str], Fraction] = {}
    kept = []
    order = sorted(
        found, key=lambda p: (not p.workload.startswith("ReplicaSet/"), p.gpu_equivalents)
    )
    for p in order:
        key = (tenant_of(p.namespace, platform), p.flavor)
        if key not in left:
            # Decimal of a fraction (4/7 of a GPU, rounded): back to the fraction it stands for.
            left[key] = Fraction(grants.get(key, Decimal(0))).limit_denominator(10**6)
        held = min(p.gpu_equivalents, left[key])
        if held <= 0:
            continue
        left[key] -= held
        share = held / p.gpu_equivalents
        kept.append(
            dataclasses.replace(p, gpu_equivalents=held, memory_mib=int(p.memory_mib * share))
        )
    return sorted(kept, key=lambda p: (p.namespace, p.flavor, p.mig_profile, p.workload))


def _busy(rng: random.Random, hour: datetime, idle: bool) -> float:
    """How busy the GPUs were: a working-day cycle peaking at 14:00 UTC, plus noise."""
    cycle = 0.5 + 0.5 * math.cos((hour.hour - 14) / 24 * 2 * math.pi)
    weekend = 0.6 if hour.weekday() >= 5 else 1.0
    if idle:
        return min(1.0, max(0.0, 0.02 + 0.05 * cycle * weekend + rng.uniform(-0.01, 0.02)))
    return min(1.0, max(0.0, 0.25 + 0.6 * cycle * weekend + rng.uniform(-0.1, 0.1)))


def is_idle(tenant_slug: str, workload: str) -> bool:
    """Whether the history has the workload nearly idle: the idle tenant's, and the idle
    endpoint's predictor (``billing.dashboards.endpoint_of``)."""
    tenant, endpoint = IDLE_ENDPOINT
    return tenant_slug == IDLE_TENANT or (
        tenant_slug == tenant and endpoint_of(workload, [endpoint]) == endpoint
    )


def _dec(value: float | Fraction, places: str) -> Decimal:
    if isinstance(value, Fraction):
        value = value.numerator / value.denominator
    return Decimal(repr(value)).quantize(Decimal(places), rounding=ROUND_HALF_EVEN)


def history_rows(
    found: list[Placement], hours: list[datetime], tenants: set[str]
) -> list[UsageHour]:
    """The rows of ``found`` for ``hours``: the same inputs give the same rows."""
    platform = platform_namespaces()
    now = timezone.now()
    rows = []
    for hour in hours:
        # One generator per hour: an hour's rows do not depend on which other hours are kept.
        rng = random.Random(f"{SEED}:{hour.isoformat()}")  # noqa: S311 (made-up usage)
        for p in found:
            owner = tenant_of(p.namespace, platform)
            if p.namespace and not owner:
                continue  # a platform namespace: the ingest does not bill it either
            idle = is_idle(owner, p.workload)
            busy = _busy(rng, hour, idle)
            # Now and then a scrape is missed: the ledger marks a gap, never fills it in.
            observed = 3600 - 60 * rng.randrange(1, 30) if rng.random() < 0.01 else 3600
            allocated = float(p.gpu_equivalents) * observed
            memory_share = (0.08 if idle else 0.35) + (0.05 if idle else 0.45) * busy
            memory_avg = p.memory_mib * memory_share
            watts = float(p.gpu_equivalents) * (IDLE_WATTS + BUSY_WATTS * busy)
            rows.append(
                UsageHour(
                    hour=hour,
                    tenant_slug=owner if owner in tenants else "",
                    namespace=p.namespace,
                    flavor=p.flavor,
                    gpu_model=p.gpu_model,
                    mig_profile=p.mig_profile,
                    workload=p.workload,
                    source=Source.DEMO,
                    allocated_gpu_seconds=_dec(allocated, "0.001"),
                    used_gpu_seconds=_dec(allocated * busy, "0.001"),
                    observed_seconds=observed,
                    memory_avg_mib=_dec(memory_avg, "0.1"),
                    memory_peak_mib=min(p.memory_mib, int(memory_avg * rng.uniform(1.05, 1.3))),
                    energy_kwh=_dec(watts * observed / 3600 / 1000, "0.000001"),
                    ingested_at=now,
                )
            )
    return rows


def seed_prices(found: list[Placement], today: date) -> int:
    """A whole-GPU price history for each GPU model of the fleet's flavors and the demo's
    placements, and a price per MIG profile, for the models that have no price yet (an
    operator's own prices are left alone)."""
    from gitops.fleet import base_fleet

    profiles: dict[str, set[str]] = defaultdict(set)
    for flavor in base_fleet().flavors:
        if flavor.product:
            profiles[flavor.product] |= {"", *(name for name, _ in flavor.mig_profiles)}
    for p in found:
        if p.gpu_model:
            profiles[p.gpu_model].add(p.mig_profile)
    created = 0
    for model, used in sorted(profiles.items()):
        if GpuPrice.objects.filter(gpu_model=model).exists():
            continue
        prices = [
            GpuPrice(
                gpu_model=model,
                amount=amount,
                effective_from=today - timedelta(days=days_ago),
                note=PRICE_NOTE,
            )
            for days_ago, amount in WHOLE_PRICES
        ]
        for profile in sorted(used - {""}):
            match = MIG_PROFILE.match(profile)
            if match is None:
                continue
            prices.append(
                GpuPrice(
                    gpu_model=model,
                    mig_profile=profile,
                    amount=MIG_PRICE_PER_SLICE * int(match["slices"]),
                    effective_from=today - timedelta(days=WHOLE_PRICES[0][0]),
                    note=PRICE_NOTE,
                )
            )
        GpuPrice.objects.bulk_create(prices)
        created += len(prices)
    return created


def seed_reservation_prices(today: date) -> int:
    """A price per reserved GPU-hour for each GPU model of the fleet's flavors that has none
    (the demo reserves two H200 nodes for bank-risk; an operator's own prices are left
    alone)."""
    from gitops.fleet import base_fleet

    created = 0
    for model in sorted({flavor.product for flavor in base_fleet().flavors if flavor.product}):
        if ReservationPrice.objects.filter(gpu_model=model).exists():
            continue
        ReservationPrice.objects.create(
            gpu_model=model,
            amount=RESERVATION_PRICE,
            effective_from=today - timedelta(days=WHOLE_PRICES[0][0]),
            note=PRICE_NOTE,
        )
        created += 1
    return created


def seed_budget(start: datetime, end: datetime) -> str:
    """A monthly budget for one tenant, a little above its last 30 days' GPU cost, so the
    first thresholds are crossed. Left alone once set."""
    tenant = Tenant.objects.filter(slug=BUDGET_TENANT).first()
    if tenant is None:
        return ""
    if Budget.objects.filter(tenant=tenant).exists():
        return tenant.slug
    rows = UsageHour.objects.filter(tenant_slug=tenant.slug)
    spent = totals(priced(rows, start, end)).get(None)
    amount = (spent.amount * Decimal("1.15") if spent else Decimal(0)).quantize(Decimal(100))
    Budget.objects.create(
        tenant=tenant, monthly_amount=max(amount, Decimal(1000)), thresholds=[50, 80, 100]
    )
    return tenant.slug


@transaction.atomic
def seed_history(
    now: datetime | None = None,
    *,
    planned: Iterable[PlannedWorkload] = (),
    grants: Mapping[tuple[str, str], Decimal] | None = None,
) -> Seeded:
    """Prices, the last ``DAYS`` days of demo ledger rows up to the last complete hour, and
    a budget; ``planned``: what the cluster will run, for a fleet not synced yet; ``grants``:
    what the tenants' shares on main grant (``within_grants``), None to keep every placement
    as the cluster runs it. Idempotent: the demo rows are replaced, other sources' hours
    skipped."""
    end = last_complete_hour(now) + HOUR
    start = end - timedelta(days=DAYS)
    found = placements(planned)
    if grants is not None:
        found = within_grants(found, grants)
    today = (now or timezone.now()).date()
    prices = seed_prices(found, today) + seed_reservation_prices(today)
    UsageHour.objects.filter(source=Source.DEMO).delete()
    metered = set(
        UsageHour.objects.filter(hour__gte=start, hour__lt=end).values_list("hour", flat=True)
    )
    hours = [start + i * HOUR for i in range(DAYS * 24)]
    kept = [h for h in hours if h not in metered]
    tenants = set(Tenant.objects.values_list("slug", flat=True))
    rows = history_rows(found, kept, tenants)
    UsageHour.objects.bulk_create(rows, batch_size=BATCH)
    # The daily sums the dashboards read for ranges of days, as the ingest keeps them.
    rollup_days({(start + i * HOUR).date() for i in range(DAYS * 24)})
    budget = seed_budget(start, end)
    if rows and not IngestCursor.objects.filter(source=settings.BILLING_SOURCE).exists():
        IngestCursor.objects.create(source=settings.BILLING_SOURCE, last_complete_hour=end - HOUR)
    return Seeded(prices, len(rows), len(hours) - len(kept), budget)


def seed_idle(now: datetime | None = None) -> int:
    """An idle policy with a short grace, acting on endpoints, on each flavor the nearly idle
    workloads use, and one evaluation, so the idle pages have cases: the idle tenant's
    (told, as nothing in the catalog stands behind them) and the idle endpoint's, which the
    policy puts to sleep once the grace has run out. Returns the cases opened; policies
    already set are left as they are."""
    from billing import idle

    keys = (
        UsageHour.objects.filter(source=Source.DEMO)
        .exclude(flavor="")
        .values_list("tenant_slug", "workload", "flavor")
        .order_by()
        .distinct()
    )
    flavors = {flavor for tenant, workload, flavor in keys if is_idle(tenant, workload)}
    for flavor in sorted(flavors):
        IdlePolicy.objects.get_or_create(
            flavor=flavor,
            tenant=None,
            defaults={
                "threshold_percent": DEMO_IDLE_THRESHOLD,
                "window_hours": DEMO_IDLE_WINDOW_HOURS,
                "grace_minutes": DEMO_GRACE_MINUTES,
                "act_on_endpoints": True,
            },
        )
    return idle.evaluate(now=now).detected
