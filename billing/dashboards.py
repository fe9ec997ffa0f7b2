"""What the usage dashboards show: aggregate queries over the ledger, the fleet and the
catalog, returned as plain rows (no HTTP, no templates).

Every sum is taken in the database (GROUP BY hour, tenant, flavor or workload), so a year of
hourly rows for hundreds of tenants never comes into Python (at most a sum per hour does);
the number of queries does not grow with tenants or rows. Money comes from
``billing.costing.priced`` only.

Capacity is the fleet's GPU count now (``fleet.models.Node.gpu_count`` of the GPU nodes):
the portal keeps no history of the inventory, so allocation and utilisation percentages of
past buckets are taken against today's fleet. A fleet that grew makes the past look fuller
than it was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Subquery, Sum
from django.utils import timezone

from billing.costing import HOUR, PriceBook, Priced, Total, priced, totals
from billing.models import FleetDay, IngestRun, UsageDay, UsageHour, UsageMonth
from billing.reservations import (
    is_reserved_flavor,
    overlapping,
    reserved_flavor,
    reserved_window,
    spans,
)
from catalog.models import Kind, Resource, ResourceRequest
from catalog.services import share_gpu_equivalents
from catalog.specs import SpecError, from_json
from catalog.states import AWAITING_DECISION, IN_FLIGHT
from fleet.models import Health, Node
from fleet.queues import live_allocation
from gitops.fleet import configured_fleet
from gitops.specs import FleetSpec, GpuShare

PRESETS = {"24h": 1, "7d": 7, "30d": 30, "90d": 90, "365d": 365}
DEFAULT_PRESET = "7d"
MAX_CUSTOM_DAYS = 731
# A workload using less than this share of what it holds is "idle" on the tenant page.
IDLE_EFFICIENCY = Decimal("0.10")
TOP_WORKLOADS = 20
RECENT_RUNS = 10
# The cost table lists the dearest tenants; the rest are summed in one line.
COST_ROWS = 50
LIVE = (Resource.State.ACTIVE, Resource.State.DECOMMISSIONING)
# Asked for but not yet on main: waiting for a decision, or approved on its way through Git.
PENDING = sorted(AWAITING_DECISION | (IN_FLIGHT - {ResourceRequest.State.DECOMMISSIONING}))
ZERO = Decimal(0)


class RangeError(ValueError):
    """A time range the dashboards cannot show, with a sentence saying why."""


# --- the time range -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    """Hours ``start <= hour < end`` (UTC), charted in buckets of ``bucket``."""

    start: datetime
    end: datetime
    bucket: str
    preset: str  # a PRESETS key, or "custom"

    @property
    def hours(self) -> int:
        return int((self.end - self.start).total_seconds() // 3600)

    def query(self) -> str:
        """The range as a URL query, so a link keeps it."""
        if self.preset != "custom":
            return f"range={self.preset}"
        last = (self.end - timedelta(days=1)).date()
        return f"range=custom&from={self.start.date().isoformat()}&to={last.isoformat()}"


def bucket_for(hours: int) -> str:
    """Hourly up to two days, daily up to 90, weekly up to a year, monthly beyond."""
    if hours <= 48:
        return "hour"
    if hours <= 90 * 24:
        return "day"
    if hours <= 366 * 24:
        return "week"
    return "month"


def _day(text: str, name: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise RangeError(f"The {name} date must be a date like 2026-01-31, not {text!r}.") from None


def parse_range(params: Mapping[str, str], now: datetime) -> Range:
    """The range a query string asks for: ``range`` one of PRESETS (the last N days up to the
    current hour), or ``range=custom`` with ``from`` and ``to`` dates (both days included)."""
    preset = params.get("range") or DEFAULT_PRESET
    if preset in PRESETS:
        end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        bucket = bucket_for(PRESETS[preset] * 24)
        if bucket == "hour":
            start = end - timedelta(days=PRESETS[preset])
        else:
            # The last N calendar days, today's hours so far included: whole days, so the
            # daily sums (UsageDay) answer it.
            first = (end - timedelta(hours=1)).date() - timedelta(days=PRESETS[preset] - 1)
            start = datetime(first.year, first.month, first.day, tzinfo=UTC)
        return Range(start, end, bucket, preset)
    if preset != "custom":
        raise RangeError(f"Unknown range {preset!r}: choose one of {', '.join(PRESETS)} or custom.")
    if not params.get("from") or not params.get("to"):
        raise RangeError("A custom range needs both a from and a to date.")
    first, last = _day(params["from"], "from"), _day(params["to"], "to")
    if first > last:
        raise RangeError("The from date must not be after the to date.")
    if (last - first).days + 1 > MAX_CUSTOM_DAYS:
        raise RangeError(f"A custom range may span at most {MAX_CUSTOM_DAYS} days.")
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    return Range(start, end, bucket_for(int((end - start).total_seconds() // 3600)), "custom")


def ledger(window: Range, tenant: str | None = None) -> QuerySet[Any]:
    """The rows of the range: hourly ones for an hourly chart, else the daily sums
    (``UsageDay``, a 24th of the rows; every range charted by day or longer starts at
    midnight UTC). Both have the same sums under the same names."""
    if window.bucket == "hour":
        rows: QuerySet[Any] = UsageHour.objects.filter(hour__gte=window.start, hour__lt=window.end)
    else:
        last = (window.end - timedelta(microseconds=1)).date()
        rows = UsageDay.objects.filter(day__gte=window.start.date(), day__lte=last)
    return rows if tenant is None else rows.filter(tenant_slug=tenant)


def monthly(window: Range, tenant: str | None = None) -> QuerySet[UsageMonth] | None:
    """The monthly sums that may stand in for whole months of ``ledger(window, tenant)``
    (``costing.priced`` picks the months wholly inside each price period); None for an
    hourly range."""
    if window.bucket == "hour":
        return None
    rows = UsageMonth.objects.all()
    return rows if tenant is None else rows.filter(tenant_slug=tenant)


def fleet_days(window: Range) -> QuerySet[FleetDay]:
    """The fleet's daily totals over a daily range: what the platform's series reads."""
    last = (window.end - timedelta(microseconds=1)).date()
    return FleetDay.objects.filter(day__gte=window.start.date(), day__lte=last)


def time_field(rows: QuerySet[Any]) -> str:
    return "day" if rows.model in (UsageDay, FleetDay) else "hour"


def _moment(value: date | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


# --- rows -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """GPU-hours of one time bucket, and what the fleet could have given in it."""

    start: datetime
    gpu_hours: Decimal
    used_gpu_hours: Decimal
    energy_kwh: Decimal
    capacity_gpu_hours: Decimal = ZERO
    gap_rows: int = 0  # ledger rows with less than the hour observed
    gap_hours: int = 0  # hours with such rows
    # Of ``gpu_hours``: reserved nodes' GPU-hours no work held, their tenants' (``reserved_idle``).
    reserved_idle_gpu_hours: Decimal = ZERO

    @property
    def allocation(self) -> Decimal:
        return self.gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else ZERO

    @property
    def utilisation(self) -> Decimal:
        return self.used_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else ZERO


@dataclass(frozen=True)
class Tiles:
    """The fleet now: GPUs, and what the latest ledger hour held and used of them."""

    total: int
    unhealthy: int
    allocated: Decimal
    used: Decimal
    hour: datetime | None


@dataclass
class TenantCost:
    """One tenant's GPU-hours, waste, energy and cost in the range, by flavor."""

    tenant: str
    total: Total
    by_flavor: dict[str, Decimal] = field(default_factory=dict)
    # Its reserved nodes' GPU-hours that none of its work held (``reserved_idle``).
    reserved_idle_gpu_hours: Decimal = ZERO

    @property
    def idle_gpu_hours(self) -> Decimal:
        """Held and not used, reserved nodes standing idle included: the tenant's waste."""
        return self.total.gpu_hours - self.total.used_gpu_hours + self.reserved_idle_gpu_hours


@dataclass(frozen=True)
class FlavorQuota:
    """A flavor in GPU-equivalents: promised by approved shares, held now (``live``: from
    Kueue's ClusterQueue status as the fleet watch last heard it; else in the latest ledger
    hour), and asked for by requests not yet in effect."""

    flavor: str
    quota: Decimal
    allocated: Decimal
    pending: Decimal = ZERO
    live: bool = False

    @property
    def left(self) -> Decimal:
        return max(self.quota - self.allocated, ZERO)


@dataclass(frozen=True)
class WorkloadUse:
    tenant: str
    namespace: str
    workload: str
    gpu_hours: Decimal
    used_gpu_hours: Decimal

    @property
    def efficiency(self) -> Decimal:
        return self.used_gpu_hours / self.gpu_hours if self.gpu_hours else ZERO

    @property
    def name(self) -> str:
        """The workload without its kind: ``ReplicaSet/chat-predictor-5d4`` -> ``chat-...``."""
        return self.workload.partition("/")[2] or self.workload


@dataclass(frozen=True)
class Warnings:
    runs: list[IngestRun]
    gap_rows: int
    gap_hours: int
    no_tenant_gpu_hours: Decimal
    unpriced_models: list[str]
    unpriced_gpu_hours: Decimal

    @property
    def any(self) -> bool:
        return bool(
            self.runs or self.gap_rows or self.no_tenant_gpu_hours or self.unpriced_gpu_hours
        )


def _hours(seconds: Decimal | None) -> Decimal:
    return (seconds or ZERO) / HOUR


Hourly = tuple[datetime, Decimal, Decimal, Decimal, int]


def fold(hourly: Iterable[Hourly], window: Range, capacity_gpus: int) -> list[Bucket]:
    """(hour, GPU-hours, used GPU-hours, kWh, rows with gaps) sums folded into the range's
    buckets. Every bucket of the range is present (zero when the ledger has nothing), so
    gaps show as gaps."""
    sums: dict[datetime, list[Any]] = defaultdict(lambda: [ZERO, ZERO, ZERO, 0, 0])
    for hour, held, used, energy, gaps in hourly:
        bucket = sums[_truncate(hour.astimezone(UTC), window.bucket)]
        bucket[0] += held
        bucket[1] += used
        bucket[2] += energy
        bucket[3] += gaps
        bucket[4] += 1 if gaps else 0
    out = []
    for start, hours in bucket_starts(window):
        held, used, energy, gap_rows, gap_hours = sums.get(start, [ZERO, ZERO, ZERO, 0, 0])
        capacity = Decimal(capacity_gpus * hours)
        out.append(Bucket(start, held, used, energy, capacity, gap_rows, gap_hours))
    return out


def series(rows: QuerySet[Any], window: Range, capacity_gpus: int = 0) -> list[Bucket]:
    """GPU-hours allocated and used, kWh and gaps, per bucket: one query grouped by the
    ledger's stored hour (or day), folded into buckets here. Grouping by the stored time
    rather than a truncation keeps the database from calling a function per row (on SQLite,
    Django's ``django_datetime_trunc`` is Python); a year is 366 daily sums."""
    when = time_field(rows)
    gaps = Sum("gap_hours") if when == "day" else Count("pk", filter=Q(observed_seconds__lt=3600))
    sums = (
        rows.values(when)
        .annotate(
            a=Sum("allocated_gpu_seconds"), u=Sum("used_gpu_seconds"), e=Sum("energy_kwh"), g=gaps
        )
        .order_by(when)
    )
    hourly = (
        (_moment(i[when]), _hours(i["a"]), _hours(i["u"]), i["e"] or ZERO, int(i["g"] or 0))
        for i in sums
    )
    return fold(hourly, window, capacity_gpus)


def _truncate(moment: datetime, bucket: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    if bucket == "hour":
        return moment
    moment = moment.replace(hour=0)
    if bucket == "week":
        return moment - timedelta(days=moment.weekday())  # ISO weeks start on Monday
    if bucket == "month":
        return moment.replace(day=1)
    return moment


def _next(moment: datetime, bucket: str) -> datetime:
    if bucket == "month":
        return (moment.replace(day=28) + timedelta(days=4)).replace(day=1)
    steps = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
    return moment + steps[bucket]


def bucket_starts(window: Range) -> list[tuple[datetime, int]]:
    """Each bucket's start (as the database truncates) and its hours inside the range."""
    out = []
    start = _truncate(window.start, window.bucket)
    while start < window.end:
        following = _next(start, window.bucket)
        inside = min(following, window.end) - max(start, window.start)
        out.append((start, int(inside.total_seconds() // 3600)))
        start = following
    return out


def fleet_gpus() -> tuple[int, int]:
    """(GPUs of the fleet, GPUs on unhealthy nodes), one query."""
    sums = Node.objects.filter(gpu_count__gt=0).aggregate(
        total=Sum("gpu_count"), unhealthy=Sum("gpu_count", filter=Q(health=Health.UNHEALTHY))
    )
    return int(sums["total"] or 0), int(sums["unhealthy"] or 0)


def latest_hour_by(fields: Sequence[str], tenant: str | None = None) -> dict[tuple[str, ...], Any]:
    """GPU-equivalents held and used in the ledger's latest hour, per ``fields``: one query
    (the latest hour is a subquery). Values: (hour, allocated, used)."""
    rows = (
        UsageHour.objects.all() if tenant is None else UsageHour.objects.filter(tenant_slug=tenant)
    )
    latest = rows.order_by("-hour").values("hour")[:1]
    sums = (
        rows.filter(hour=Subquery(latest))
        .values("hour", *fields)
        .annotate(a=Sum("allocated_gpu_seconds"), u=Sum("used_gpu_seconds"))
        .order_by()
    )
    return {
        tuple(item[f] for f in fields): (item["hour"], _hours(item["a"]), _hours(item["u"]))
        for item in sums
    }


def tiles(latest: Mapping[tuple[str, ...], Any]) -> Tiles:
    total, unhealthy = fleet_gpus()
    hour = next((value[0] for value in latest.values()), None)
    allocated = sum((value[1] for value in latest.values()), ZERO)
    used = sum((value[2] for value in latest.values()), ZERO)
    return Tiles(total, unhealthy, allocated, used, hour)


def tenant_costs(lines: Iterable[Priced]) -> list[TenantCost]:
    """Priced lines (by tenant and flavor) folded into one row per tenant, dearest first."""
    lines = list(lines)
    by_tenant = totals(lines, "tenant_slug")
    flavors: dict[object, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for line in lines:
        flavors[line.key.get("tenant_slug")][str(line.key.get("flavor") or "")] += line.amount
    rows = [
        TenantCost(str(slug or ""), total, dict(flavors[slug])) for slug, total in by_tenant.items()
    ]
    return sorted(rows, key=lambda row: (-row.total.amount, -row.total.gpu_hours, row.tenant))


def top_workloads(lines: Iterable[Priced], limit: int = TOP_WORKLOADS) -> list[WorkloadUse]:
    """Workloads by GPU-hours held, most first, from priced lines grouped by workload."""
    sums: dict[tuple[str, str, str], list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    for line in lines:
        tenant, namespace, workload = (
            str(line.key.get(f) or "") for f in ("tenant_slug", "namespace", "workload")
        )
        sums[(tenant, namespace, workload)][0] += line.gpu_hours
        sums[(tenant, namespace, workload)][1] += line.used_gpu_hours
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1][0], kv[0][1], kv[0][2]))
    return [WorkloadUse(*key, held, used) for key, (held, used) in ranked[:limit]]


def workloads(rows: QuerySet[Any]) -> list[WorkloadUse]:
    """Every workload of ``rows`` by GPU-hours held, most first: one GROUP BY query (for one
    tenant's rows: the platform's top list comes from its priced lines)."""
    sums = (
        rows.values("tenant_slug", "namespace", "workload")
        .annotate(a=Sum("allocated_gpu_seconds"), u=Sum("used_gpu_seconds"))
        .order_by("-a", "namespace", "workload")
    )
    return [
        WorkloadUse(i["tenant_slug"], i["namespace"], i["workload"], _hours(i["a"]), _hours(i["u"]))
        for i in sums
    ]


# --- quotas ---------------------------------------------------------------------------------------


def _equivalents(spec: object, fleet: FleetSpec) -> tuple[str, Decimal]:
    """(flavor, GPU-equivalents) of a stored GPU share spec; ("", 0) when it does not load
    or names a flavor the fleet no longer has."""
    if not isinstance(spec, dict) or not spec:
        return "", ZERO
    try:
        share: GpuShare = from_json(Kind.GPU_SHARE, spec)
    except (SpecError, TypeError):
        return "", ZERO
    flavor = next((f for f in fleet.flavors if f.name == share.flavor), None)
    if flavor is None:
        return share.flavor, ZERO
    return share.flavor, share_gpu_equivalents(share, flavor)


def granted(
    tenant: str | None = None, fleet: FleetSpec | None = None
) -> dict[tuple[str, str], Decimal]:
    """GPU-equivalents the approved GPU shares on main grant, per (tenant, flavor): what
    Kueue's ClusterQueues promise. Two queries (the fleet's inventory unless given, the
    shares)."""
    fleet = fleet or configured_fleet()
    shares = Resource.objects.filter(kind=Kind.GPU_SHARE, state__in=LIVE)
    if tenant is not None:
        shares = shares.filter(tenant__slug=tenant)
    out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for slug, spec in shares.values_list("tenant__slug", "spec"):
        name, amount = _equivalents(spec, fleet)
        out[(slug, name)] += amount
    return dict(out)


def quotas(latest: Mapping[tuple[str, ...], Any], tenant: str | None = None) -> list[FlavorQuota]:
    """Per flavor, in GPU-equivalents (the ledger's unit, ``catalog.services
    .share_gpu_equivalents``): the nominal quota of the approved GPU shares on main (what Kueue's
    ClusterQueues promise), what is held now, and the growth asked by share requests not yet
    in effect. Held now is Kueue's live ClusterQueue usage when the fleet watch has it
    (``fleet.queues.live_allocation``), else the allocation of the ledger's latest hour
    (``latest`` keyed by (tenant, flavor)); each row says which. Six queries: the Kueue
    freshness (2) and usage, the fleet's inventory, the shares, the open requests."""
    fleet = configured_fleet()
    requests = ResourceRequest.objects.filter(
        resource__kind=Kind.GPU_SHARE,
        state__in=PENDING,
        action__in=[ResourceRequest.Action.CREATE, ResourceRequest.Action.MODIFY],
    )
    if tenant is not None:
        requests = requests.filter(tenant__slug=tenant)
    quota: dict[str, Decimal] = defaultdict(Decimal)
    for (_, name), amount in granted(tenant, fleet).items():
        quota[name] += amount
    pending: dict[str, Decimal] = defaultdict(Decimal)
    for wanted, current, state in requests.values_list("spec", "resource__spec", "resource__state"):
        name, amount = _equivalents(wanted, fleet)
        _, now = _equivalents(current, fleet) if state in LIVE else ("", ZERO)
        pending[name] += max(amount - now, ZERO)
    allocated: dict[str, Decimal] = defaultdict(Decimal)
    live = live_allocation(tenant)
    if live is not None:
        allocated.update({name: held for name, held in live.items() if held})
    else:
        for key, (_, held, _) in latest.items():
            if tenant is None or key[0] == tenant:
                allocated[key[1]] += held
    names = [f.name for f in fleet.flavors]
    names += sorted(n for n in {*quota, *allocated, *pending} - set(names) if n)
    return [
        FlavorQuota(
            n, quota.get(n, ZERO), allocated.get(n, ZERO), pending.get(n, ZERO), live is not None
        )
        for n in names
        if n in quota or n in allocated or n in pending or tenant is None
    ]


# --- reserved nodes -------------------------------------------------------------------------


@dataclass(frozen=True)
class ReservedIdle:
    """Reserved nodes' GPU-hours that no work of their tenant held in a range."""

    by_tenant: dict[str, Decimal]
    by_bucket: dict[datetime, Decimal]
    # What the reservations cost in the range, by tenant and its own flavor (not rounded).
    cost: dict[tuple[str, str], Decimal] = field(default_factory=dict)

    @property
    def total(self) -> Decimal:
        return sum(self.by_tenant.values(), ZERO)


def reserved_idle(
    window: Range, tenant: str | None = None, now: datetime | None = None
) -> ReservedIdle:
    """A reserved node's GPUs are its tenant's from acceptance to release, used or not (issue
    29): the hours no work of the tenant held them (reserved GPU-hours minus the GPU-hours its
    ledger holds on its own flavors ``<pool>.<slug>``, per bucket) are the tenant's waste, and
    not the platform's idle capacity. One query for the reservations and, when there are any,
    one for the ledger's rows on reserved flavors and one for the reservation prices."""
    now = now or timezone.now()
    found = list(overlapping(window.start, window.end, None if tenant is None else [tenant]))
    if not found:
        return ReservedIdle({}, {})
    reserved: dict[tuple[str, datetime], Decimal] = defaultdict(Decimal)
    for start, hours in bucket_starts(window):
        end = min(start + timedelta(hours=hours), window.end)
        for row in found:
            span = reserved_window(row, max(start, window.start), end, now)
            if span is not None:
                held_for = Decimal((span[1] - span[0]).total_seconds()) / HOUR
                reserved[(row.tenant_slug, start)] += held_for * row.gpus
    rows = ledger(window, tenant).filter(flavor__contains=".")
    when = time_field(rows)
    held: dict[tuple[str, datetime], Decimal] = defaultdict(Decimal)
    sums = rows.values(when, "tenant_slug", "flavor").annotate(a=Sum("allocated_gpu_seconds"))
    for item in sums.order_by():
        if is_reserved_flavor(item["flavor"], item["tenant_slug"]):
            bucket = _truncate(_moment(item[when]), window.bucket)
            held[(item["tenant_slug"], bucket)] += _hours(item["a"])
    by_tenant: dict[str, Decimal] = defaultdict(Decimal)
    by_bucket: dict[datetime, Decimal] = defaultdict(Decimal)
    for (slug, start), gpu_hours in reserved.items():
        idle = max(gpu_hours - held.get((slug, start), ZERO), ZERO)
        by_tenant[slug] += idle
        by_bucket[start] += idle
    cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for priced_span in spans(found, window.start, window.end, now):
        row = priced_span.reservation
        cost[(row.tenant_slug, reserved_flavor(row.flavor, row.tenant_slug))] += priced_span.amount
    return ReservedIdle(dict(by_tenant), dict(by_bucket), dict(cost))


def with_reserved_idle(
    buckets: Sequence[Bucket], costs: Sequence[TenantCost], idle: ReservedIdle
) -> tuple[list[Bucket], list[TenantCost]]:
    """The platform's series and tenant rows with reserved nodes' idle hours counted as held
    by their tenants, and their cost under the tenant's own flavor (a tenant with nothing but
    a reservation gets a row)."""
    series = [
        replace(
            b,
            gpu_hours=b.gpu_hours + idle.by_bucket.get(b.start, ZERO),
            reserved_idle_gpu_hours=idle.by_bucket.get(b.start, ZERO),
        )
        for b in buckets
    ]
    rows = list(costs)
    listed = {row.tenant for row in rows}
    rows += [TenantCost(slug, Total()) for slug in sorted(idle.by_tenant) if slug not in listed]
    rows += [
        TenantCost(slug, Total())
        for slug in sorted({slug for slug, _ in idle.cost} - listed - set(idle.by_tenant))
    ]
    for row in rows:
        row.reserved_idle_gpu_hours = idle.by_tenant.get(row.tenant, ZERO)
    for (slug, flavor), amount in idle.cost.items():
        row = next(r for r in rows if r.tenant == slug)
        row.total.amount += amount
        row.by_flavor[flavor] = row.by_flavor.get(flavor, ZERO) + amount
    rows.sort(key=lambda row: (-row.total.amount, -row.total.gpu_hours, row.tenant))
    return series, rows


# --- warnings -------------------------------------------------------------------------------------


def warnings(window: Range, buckets: Sequence[Bucket], costs: Sequence[TenantCost]) -> Warnings:
    """What the numbers cannot be trusted for: ingest runs that failed or warned in the range
    (one query), ledger rows with gaps, usage of no tenant, GPU models without a price."""
    runs = list(
        IngestRun.objects.filter(end__gt=window.start, start__lt=window.end)
        .filter(Q(status=IngestRun.Status.FAILED) | ~Q(warnings=[]))
        .order_by("-started_at")[:RECENT_RUNS]
    )
    nobody = next((row.total.gpu_hours for row in costs if row.tenant == ""), ZERO)
    models = sorted({m for row in costs for m in row.total.unpriced_models})
    return Warnings(
        runs=runs,
        gap_rows=sum(b.gap_rows for b in buckets),
        gap_hours=sum(b.gap_hours for b in buckets),
        no_tenant_gpu_hours=nobody,
        unpriced_models=models,
        unpriced_gpu_hours=sum((row.total.unpriced_gpu_hours for row in costs), ZERO),
    )


# --- the two dashboards ---------------------------------------------------------------------------


@dataclass
class AdminDashboard:
    window: Range
    tiles: Tiles
    series: list[Bucket]
    costs: list[TenantCost]
    quotas: list[FlavorQuota]
    top: list[WorkloadUse]
    warnings: Warnings
    flavors: list[str]

    @property
    def listed_costs(self) -> list[TenantCost]:
        return self.costs[:COST_ROWS]

    @property
    def other_costs(self) -> Total:
        """The tenants beyond the listed ones, summed."""
        rest = Total()
        for row in self.costs[COST_ROWS:]:
            for name in ("gpu_hours", "used_gpu_hours", "energy_kwh", "amount"):
                setattr(rest, name, getattr(rest, name) + getattr(row.total, name))
        return rest

    @property
    def other_count(self) -> int:
        return max(len(self.costs) - COST_ROWS, 0)


def admin_dashboard(window: Range) -> AdminDashboard:
    """Everything the platform admin's dashboard shows, in a fixed number of queries."""
    rows = ledger(window)
    latest = latest_hour_by(("tenant_slug", "flavor"))
    now = tiles(latest)
    # One pass over the range's rows per price period gives cost by tenant and flavor and
    # the top workloads; ``series`` is the other pass.
    by = ("tenant_slug", "namespace", "workload", "flavor")
    lines = priced(
        rows, window.start, window.end, by=by, book=PriceBook.load(), months=monthly(window)
    )
    for line in lines:
        # Covered by the reservation, as on the invoice (billing.reservations).
        if is_reserved_flavor(str(line.key["flavor"] or ""), str(line.key["tenant_slug"] or "")):
            line.amount = ZERO
    reserved = reserved_idle(window)
    buckets, costs = with_reserved_idle(
        series(rows if window.bucket == "hour" else fleet_days(window), window, now.total),
        tenant_costs(lines),
        reserved,
    )
    return AdminDashboard(
        window=window,
        tiles=now,
        series=buckets,
        costs=costs,
        quotas=quotas(latest),
        top=top_workloads(lines),
        warnings=warnings(window, buckets, costs),
        flavors=sorted(
            {str(line.key.get("flavor") or "") for line in lines}
            | {flavor for _, flavor in reserved.cost}
        ),
    )


@dataclass(frozen=True)
class EndpointUse:
    endpoint: str
    gpu_hours: Decimal
    used_gpu_hours: Decimal
    workloads: tuple[str, ...]

    @property
    def efficiency(self) -> Decimal:
        return self.used_gpu_hours / self.gpu_hours if self.gpu_hours else ZERO


def endpoint_of(workload: str, endpoints: Iterable[str]) -> str:
    """The model endpoint a ledger workload serves, or "".

    KServe (Standard deployment mode) runs an InferenceService ``<name>`` as the Deployment
    ``<name>-predictor`` (kserve/kserve v0.20.0 pkg/constants ``PredictorServiceName``), so its
    pods belong to the ReplicaSet ``<name>-predictor-<pod-template-hash>`` and are named
    ``<name>-predictor-<hash>-<suffix>``; the ledger names a workload after the pod's
    controller (``ReplicaSet/...``), or the pod itself. The portal names the InferenceService
    after the endpoint, so a workload belongs to the endpoint whose ``<name>-predictor`` its
    name is or starts with, followed by ``-``; the longest such endpoint name wins (``chat``
    and ``chat-large`` both exist)."""
    name = workload.partition("/")[2] or workload
    matches = [
        e for e in endpoints if name == f"{e}-predictor" or name.startswith(f"{e}-predictor-")
    ]
    return max(matches, key=len, default="")


def endpoint_usage(uses: Iterable[WorkloadUse], endpoints: Sequence[str]) -> list[EndpointUse]:
    grouped: dict[str, list[WorkloadUse]] = defaultdict(list)
    for use in uses:
        endpoint = endpoint_of(use.workload, endpoints)
        if endpoint:
            grouped[endpoint].append(use)
    return [
        EndpointUse(
            name,
            sum((u.gpu_hours for u in grouped.get(name, [])), ZERO),
            sum((u.used_gpu_hours for u in grouped.get(name, [])), ZERO),
            tuple(u.workload for u in grouped.get(name, [])),
        )
        for name in endpoints
    ]


@dataclass(frozen=True)
class PriceLine:
    """A GPU model (and MIG profile) at one price over one price period of the range."""

    gpu_model: str
    mig_profile: str
    period_start: datetime
    period_end: datetime
    unit: str
    unit_price: Decimal | None
    quantity: Decimal
    amount: Decimal


def price_lines(lines: Iterable[Priced]) -> list[PriceLine]:
    """Priced lines (per bucket) summed per model, profile and price period: what the bill
    would list."""
    sums: dict[tuple[str, str, datetime, datetime, str, Decimal | None], PriceLine] = {}
    for line in lines:
        key = (
            line.gpu_model,
            line.mig_profile,
            line.period_start,
            line.period_end,
            line.unit,
            line.unit_price,
        )
        before = sums.get(key)
        sums[key] = PriceLine(
            *key,
            quantity=line.quantity + (before.quantity if before else ZERO),
            amount=line.amount + (before.amount if before else ZERO),
        )
    return sorted(sums.values(), key=lambda p: (p.gpu_model, p.mig_profile, p.period_start))


@dataclass
class TenantDashboard:
    window: Range
    tenant: str
    series: list[Bucket]
    price_lines: list[PriceLine]
    total: Total
    cost_series: dict[datetime, Decimal]
    idle: list[WorkloadUse]
    quotas: list[FlavorQuota]
    endpoints: list[EndpointUse]
    top: list[WorkloadUse]
    # Its reserved nodes' GPU-hours none of its work held: paid for, and its waste.
    reserved_idle_gpu_hours: Decimal = ZERO
    # Whether the ledger holds any usage of the tenant, in any range.
    has_history: bool = True

    @property
    def granted_flavors(self) -> list[str]:
        """The flavors the tenant's approved GPU shares grant GPUs of."""
        return [q.flavor for q in self.quotas if q.quota]

    @property
    def starting(self) -> bool:
        """Nothing ever metered, nothing held now and nothing to pay: the page shows where to
        start instead of empty charts. Work Kueue holds GPUs for right now is not metered until
        its first hour is ingested, but it has started: the page shows its live allocation."""
        return (
            not self.has_history
            and not self.reserved_idle_gpu_hours
            and not self.total.amount
            and not any(q.allocated for q in self.quotas)
        )


def tenant_dashboard(window: Range, tenant: str) -> TenantDashboard:
    """Everything a tenant's usage page shows, in a fixed number of queries."""
    rows = ledger(window, tenant)
    # Priced per stored hour or day (see ``series``), which gives the usage per bucket too.
    when = time_field(rows)
    lines = priced(rows, window.start, window.end, by=(when,), book=PriceBook.load())
    cost_series: dict[datetime, Decimal] = defaultdict(Decimal)
    hourly: list[Hourly] = []
    for line in lines:
        stored = line.key[when]
        assert isinstance(stored, date)
        moment = _moment(stored)
        cost_series[_truncate(moment, window.bucket)] += line.amount
        hourly.append((moment, line.gpu_hours, line.used_gpu_hours, line.energy_kwh, 0))
    uses = workloads(rows)
    names = list(
        Resource.objects.filter(tenant__slug=tenant, kind=Kind.ENDPOINT, state__in=LIVE)
        .order_by("name")
        .values_list("name", flat=True)
    )
    return TenantDashboard(
        window=window,
        tenant=tenant,
        series=fold(hourly, window, 0),
        price_lines=price_lines(lines),
        total=totals(lines).get(None, Total()),
        cost_series=dict(cost_series),
        idle=[u for u in uses if u.gpu_hours and u.efficiency < IDLE_EFFICIENCY],
        quotas=quotas(latest_hour_by(("tenant_slug", "flavor"), tenant), tenant),
        endpoints=endpoint_usage(uses, names),
        top=uses[:TOP_WORKLOADS],
        reserved_idle_gpu_hours=reserved_idle(window, tenant).total,
        has_history=bool(lines) or UsageHour.objects.filter(tenant_slug=tenant).exists(),
    )
