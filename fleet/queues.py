"""The queue as pages and the API show it, read from the Kueue rows (``fleet.services`` writes
them from the watch, the sync and the visibility API; nothing here calls the cluster).

Per flavor and GPU resource of a ClusterQueue (Kueue v0.19.2's ``ClusterQueueStatus``):

- **nominal** and the **borrowing/lending limits** come from the spec;
- **in use** is ``flavorsUsage[].total`` (admitted workloads), **borrowed** its ``borrowed``:
  what is used beyond the queue's own quota, lent by others in the cohort, and *reclaimable*:
  a lender takes it back by preemption (``reclaimWithinCohort: Any``, gitops.render.kueue);
- **reserved, not admitted** is ``flavorsReservation`` minus ``flavorsUsage``: quota held by
  workloads still waiting for admission checks;
- **left** is the nominal quota not used by the queue itself (nominal - (in use - borrowed));
  **lendable** the part of it the cohort may borrow (capped by the lending limit). Kueue does
  not say which lender a borrower draws on, so what a queue has *lent* is not known per queue:
  the fleet page shows the cohort's borrowing as a whole.

Amounts are shown with two decimals and their unit ("2.00 GPU", "3.50 GPU borrowed").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Min
from django.utils import timezone

from fleet import kueue
from fleet.inventory import is_gpu_resource
from fleet.models import (
    ClusterQueueStatus,
    CohortStatus,
    LocalQueueStatus,
    QueueWorkload,
    SyncState,
    WatchState,
)
from gitops.fleet import configured_fleet
from gitops.render import resources
from gitops.specs import FleetSpec

ZERO = Decimal(0)
TWO_PLACES = Decimal("0.01")
GIB = Decimal(2**30)
# How many finished workloads a tenant's page lists (newest first).
FINISHED_SHOWN = 20
KUEUE_WATCHES = ("workloads", "clusterqueues", "localqueues", "cohorts")
MIG_PREFIX = resources.mig_resource("")


def unit_of(resource: str) -> tuple[Decimal, str]:
    """(divisor, unit) to show an amount of ``resource`` in."""
    if resource in (resources.GPU, resources.DRA_GPU_CLASS):
        return Decimal(1), "GPU"
    if resource.startswith(MIG_PREFIX):
        return Decimal(1), f"MIG {resource.removeprefix(MIG_PREFIX)}"
    if resource == resources.DRA_MIG_CLASS:
        return Decimal(1), "MIG device"
    if resource == resources.VGPU:
        return Decimal(1), "vGPU"
    if resource == resources.GPUMEM:
        return Decimal(1024), "GiB GPU memory"  # HAMi counts MiB
    if resource == resources.GPUCORES:
        return Decimal(1), "% GPU cores"
    if resource == "cpu":
        return Decimal(1), "CPU"
    if resource in ("memory", "ephemeral-storage"):
        return GIB, "GiB" if resource == "memory" else "GiB disk"
    return Decimal(1), resource


@dataclass(frozen=True)
class Amount:
    """An amount of one resource, shown with two decimals and its unit."""

    value: Decimal
    resource: str

    def __str__(self) -> str:
        divisor, unit = unit_of(self.resource)
        return f"{(self.value / divisor).quantize(TWO_PLACES)} {unit}"

    @property
    def number(self) -> Decimal:
        """The value in the unit shown, to two decimals (charts, the API)."""
        divisor, _ = unit_of(self.resource)
        return (self.value / divisor).quantize(TWO_PLACES)

    @property
    def unit(self) -> str:
        return unit_of(self.resource)[1]


def duration(span: timedelta | None) -> str:
    """A wait as people read it: "45 s", "12 min", "3.50 h", "—" when unknown."""
    if span is None:
        return "—"
    seconds = int(span.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{Decimal(seconds) / 3600:.2f} h"


def _decimal(value: object) -> Decimal:
    return Decimal(str(value)) if value not in (None, "") else ZERO


def _gpu(resource: str) -> bool:
    return is_gpu_resource(resource) or resource in (
        resources.DRA_GPU_CLASS,
        resources.DRA_MIG_CLASS,
    )


@dataclass(frozen=True)
class FlavorRow:
    """One GPU resource on one flavor of a ClusterQueue (the module docstring defines each)."""

    flavor: str
    resource: str
    nominal: Amount
    in_use: Amount
    borrowed: Amount
    reserved_waiting: Amount
    left: Amount
    lendable: Amount
    borrowing_limit: Amount | None
    lending_limit: Amount | None


def _limit(value: object, resource: str) -> Amount | None:
    return None if value is None else Amount(_decimal(value), resource)


def flavor_rows(queue: ClusterQueueStatus) -> list[FlavorRow]:
    """The GPU resources of a ClusterQueue per flavor, in its spec's order; a flavor in use
    that the spec no longer lists still shows (nominal 0), one with neither quota nor use
    does not."""
    quotas: Mapping[str, Mapping[str, Mapping[str, Any]]] = queue.quotas or {}
    usage: Mapping[str, Mapping[str, Mapping[str, Any]]] = queue.usage or {}
    reservation: Mapping[str, Mapping[str, Mapping[str, Any]]] = queue.reservation or {}
    keys: list[tuple[str, str]] = []
    for flavor, entries in quotas.items():
        keys.extend((flavor, resource) for resource in entries)
    for flavor, entries in usage.items():
        keys.extend((flavor, r) for r in entries if (flavor, r) not in keys)
    rows = []
    for flavor, resource in keys:
        if not _gpu(resource):
            continue
        limits = quotas.get(flavor, {}).get(resource, {})
        used = usage.get(flavor, {}).get(resource, {})
        nominal = _decimal(limits.get("nominal"))
        in_use = _decimal(used.get("total"))
        borrowed = _decimal(used.get("borrowed"))
        reserved = _decimal(reservation.get(flavor, {}).get(resource, {}).get("total"))
        if not (nominal or in_use or reserved):
            # Covered at 0 only so the queue may borrow it (gitops.render.kueue): a row of
            # zeros says nothing; it shows once the queue uses or waits for it.
            continue
        left = max(nominal - (in_use - borrowed), ZERO)
        lending = limits.get("lending_limit")
        lendable = min(left, _decimal(lending)) if lending is not None else left
        borrowing = limits.get("borrowing_limit")
        rows.append(
            FlavorRow(
                flavor=flavor,
                resource=resource,
                nominal=Amount(nominal, resource),
                in_use=Amount(in_use, resource),
                borrowed=Amount(borrowed, resource),
                reserved_waiting=Amount(max(reserved - in_use, ZERO), resource),
                left=Amount(left, resource),
                lendable=Amount(lendable, resource),
                borrowing_limit=None
                if borrowing is None
                else Amount(_decimal(borrowing), resource),
                lending_limit=None if lending is None else Amount(_decimal(lending), resource),
            )
        )
    return rows


def gpu_requests(pod_sets: Iterable[Mapping[str, Any]]) -> list[Amount]:
    """A workload's GPU requests over its pod sets, per resource."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for pod_set in pod_sets:
        for resource, value in (pod_set.get("requests") or {}).items():
            if _gpu(resource):
                totals[resource] += _decimal(value)
    return [Amount(v, r) for r, v in sorted(totals.items())]


def assigned_flavors(pod_sets: Iterable[Mapping[str, Any]]) -> list[str]:
    """The flavors Kueue assigned a workload's GPU resources, in order, without repeats."""
    seen: list[str] = []
    for pod_set in pod_sets:
        for resource, flavor in (pod_set.get("flavors") or {}).items():
            if _gpu(resource) and flavor not in seen:
                seen.append(flavor)
    return seen


# --- freshness ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFreshness:
    """Whether the Kueue rows are live (a Kueue watch or the sync heard the cluster within the
    staleness limits) and when the visibility API's positions were last read."""

    live: bool
    heard: datetime | None
    positions_read: datetime | None
    positions_error: str


def queue_freshness() -> QueueFreshness:
    """Two queries: the Kueue watches' states and the two sync states."""
    watches = [w for w in WatchState.objects.filter(kind__in=KUEUE_WATCHES) if not w.stale]
    states = {
        s.source: s
        for s in SyncState.objects.filter(
            source__in=[SyncState.Source.KUEUE, SyncState.Source.POSITIONS]
        )
    }
    synced = states.get(SyncState.Source.KUEUE)
    positions = states.get(SyncState.Source.POSITIONS)
    stamps = [w.last_heard for w in watches if w.last_heard]
    if synced is not None and not synced.stale and synced.last_success:
        stamps.append(synced.last_success)
    return QueueFreshness(
        live=bool(stamps),
        heard=max(stamps) if stamps else None,
        positions_read=positions.last_success if positions else None,
        positions_error=positions.error if positions else "",
    )


# --- a tenant's queue -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadRow:
    """A workload as the tenant's queue lists it. ``preemptor`` names the preempting workload
    only when it is the same tenant's; another tenant's is described, never named."""

    workload: QueueWorkload
    gpus: list[Amount]
    flavors: list[str]
    preemption: str
    preemptor: str
    waited: timedelta | None

    @property
    def waited_text(self) -> str:
        return duration(self.waited)


@dataclass
class TenantQueue:
    """What a tenant's queue page and API show."""

    cluster_queue: ClusterQueueStatus | None
    local_queues: list[LocalQueueStatus]
    flavors: list[FlavorRow]
    waiting_for: list[Amount]  # the GPU requests of the waiting workloads, by resource
    groups: dict[str, list[WorkloadRow]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    freshness: QueueFreshness | None = None

    @property
    def borrowing(self) -> list[FlavorRow]:
        return [row for row in self.flavors if row.borrowed.value > 0]


GROUPS = (
    ("admitted", (kueue.STATE_ADMITTED, kueue.STATE_QUOTA_RESERVED)),
    ("pending", (kueue.PENDING,)),
    ("preempted", (kueue.STATE_PREEMPTED,)),
    ("evicted", (kueue.STATE_EVICTED, kueue.INACTIVE)),
    ("finished", (kueue.SUCCEEDED, kueue.FAILED)),
)


def _preemption_text(reason: str) -> str:
    return kueue.PREEMPTION_REASONS.get(reason, reason)


def workload_rows(
    workloads: Sequence[QueueWorkload], tenant_id: int | None, now: datetime
) -> list[WorkloadRow]:
    """The rows of ``workloads`` with their GPUs, flavors and preemptor; a preemptor is named
    only when it belongs to tenant ``tenant_id`` (None: to anyone, for platform views). One
    query for the preemptors."""
    uids = {w.preemptor_uid for w in workloads if w.preemptor_uid}
    preemptors = {
        p.uid: p
        for p in QueueWorkload.objects.filter(uid__in=uids).only(
            "uid", "namespace", "name", "tenant_id", "cluster_queue"
        )
    }
    rows = []
    for w in workloads:
        who = ""
        if w.preemptor_uid:
            found = preemptors.get(w.preemptor_uid)
            if found is not None and (tenant_id is None or found.tenant_id == tenant_id):
                who = f"{found.namespace}/{found.name}"
            else:
                who = "a workload of another queue in the cohort"
                if w.preemption_reason == "InClusterQueue":
                    who = "a workload of higher priority in this queue"
        # A waiting workload has waited until now; one that ran, until it was admitted.
        start = w.created
        end = now if w.waiting else w.admitted_at
        rows.append(
            WorkloadRow(
                workload=w,
                gpus=gpu_requests(w.pod_sets),
                flavors=assigned_flavors(w.pod_sets),
                preemption=_preemption_text(w.preemption_reason) if w.preemption_reason else "",
                preemptor=who,
                waited=(end - start) if start and end and end >= start else None,
            )
        )
    return rows


def tenant_queue(tenant_id: int, cluster_queue_name: str) -> TenantQueue:
    """A tenant's queue: its ClusterQueue (named after it), its LocalQueues, its workloads by
    state. A fixed number of queries whatever the number of workloads."""
    queue = ClusterQueueStatus.objects.filter(name=cluster_queue_name).first()
    local_queues = list(LocalQueueStatus.objects.filter(tenant_id=tenant_id))
    now = timezone.now()
    live = list(
        QueueWorkload.objects.filter(tenant_id=tenant_id)
        .exclude(state__in=(kueue.SUCCEEDED, kueue.FAILED))
        .order_by("position_in_cluster_queue", "created", "name")
    )
    finished = list(
        QueueWorkload.objects.filter(
            tenant_id=tenant_id, state__in=(kueue.SUCCEEDED, kueue.FAILED)
        ).order_by("-finished_at", "name")[:FINISHED_SHOWN]
    )
    rows = workload_rows([*live, *finished], tenant_id, now)
    groups: dict[str, list[WorkloadRow]] = {name: [] for name, _ in GROUPS}
    for row in rows:
        for name, states in GROUPS:
            if row.workload.state in states:
                groups[name].append(row)
    waiting: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row.workload.waiting:
            for amount in row.gpus:
                waiting[amount.resource] += amount.value
    return TenantQueue(
        cluster_queue=queue,
        local_queues=local_queues,
        flavors=flavor_rows(queue) if queue is not None else [],
        waiting_for=[Amount(v, r) for r, v in sorted(waiting.items())],
        groups=groups,
        counts={name: len(items) for name, items in groups.items()},
        freshness=queue_freshness(),
    )


# --- the fleet's queues ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """One ClusterQueue on the fleet page."""

    queue: ClusterQueueStatus
    tenant: str
    flavors: list[FlavorRow]
    longest_wait: timedelta | None

    @property
    def borrowed(self) -> list[Amount]:
        return [row.borrowed for row in self.flavors if row.borrowed.value > 0]

    @property
    def longest_wait_text(self) -> str:
        return duration(self.longest_wait)


@dataclass(frozen=True)
class CohortNode:
    """A cohort of the tree with its queues and child cohorts."""

    name: str
    cohort: CohortStatus | None
    queues: list[QueueRow]
    children: list[CohortNode]
    borrowed: list[Amount]


@dataclass
class FleetQueues:
    rows: list[QueueRow]
    tree: list[CohortNode]
    pending: int
    freshness: QueueFreshness


def _tenant_slugs(ids: Iterable[int | None]) -> dict[int, str]:
    tenant_model = QueueWorkload._meta.get_field("tenant").related_model
    assert tenant_model is not None and not isinstance(tenant_model, str)
    wanted = [i for i in ids if i is not None]
    return dict(tenant_model._default_manager.filter(id__in=wanted).values_list("id", "slug"))


def fleet_queues() -> FleetQueues:
    """Every ClusterQueue with its flavors, tenant and longest wait, and the cohort tree. Five
    queries whatever the number of queues and workloads."""
    queues = list(ClusterQueueStatus.objects.all())
    cohorts = {c.name: c for c in CohortStatus.objects.all()}
    oldest = dict(
        QueueWorkload.objects.filter(state__in=kueue.WAITING)
        .exclude(cluster_queue="")
        .values("cluster_queue")
        .annotate(oldest=Min("created"))
        .values_list("cluster_queue", "oldest")
    )
    slugs = _tenant_slugs(q.tenant_id for q in queues)
    now = timezone.now()
    rows = [
        QueueRow(
            queue=q,
            tenant=slugs.get(q.tenant_id, "") if q.tenant_id else "",
            flavors=flavor_rows(q),
            longest_wait=(now - oldest[q.name]) if oldest.get(q.name) else None,
        )
        for q in queues
    ]
    rows.sort(key=lambda r: (-(r.longest_wait or timedelta()).total_seconds(), r.queue.name))
    return FleetQueues(
        rows=rows,
        tree=cohort_tree(rows, cohorts),
        pending=sum(q.pending for q in queues),
        freshness=queue_freshness(),
    )


def cohort_tree(rows: Sequence[QueueRow], cohorts: Mapping[str, CohortStatus]) -> list[CohortNode]:
    """The cohorts as a tree (roots first), each with its ClusterQueues. A cohort named by a
    queue but with no Cohort object is implicit, as Kueue allows."""
    names = set(cohorts) | {r.queue.cohort for r in rows if r.queue.cohort}
    children: dict[str, list[str]] = defaultdict(list)
    for name in sorted(names):
        parent = cohorts[name].parent if name in cohorts else ""
        children[parent if parent in names and parent != name else ""].append(name)
    by_cohort: dict[str, list[QueueRow]] = defaultdict(list)
    for row in rows:
        by_cohort[row.queue.cohort].append(row)

    def node(name: str, seen: frozenset[str]) -> CohortNode:
        queues = sorted(by_cohort.get(name, []), key=lambda r: r.queue.name)
        kids = [node(c, seen | {c}) for c in children.get(name, []) if c not in seen]
        borrowed: dict[str, Decimal] = defaultdict(Decimal)
        for row in queues:
            for amount in row.borrowed:
                borrowed[amount.resource] += amount.value
        return CohortNode(
            name=name,
            cohort=cohorts.get(name),
            queues=queues,
            children=kids,
            borrowed=[Amount(v, r) for r, v in sorted(borrowed.items())],
        )

    return [node(name, frozenset({name})) for name in children.get("", [])]


# --- quota left, live -----------------------------------------------------------------------------


def gpu_equivalents(resource: str, amount: Decimal, flavor_name: str, fleet: FleetSpec) -> Decimal:
    """``amount`` of a Kueue GPU resource in GPU-equivalents (billing's unit: a MIG slice is a
    seventh of a GPU, a vGPU slot 1/split of one: ``gitops.render.resources.gpu_equivalents``).
    HAMi's memory and cores are the same devices as its slots, so they count nothing."""
    flavor = fleet.flavor(flavor_name)
    if resource in (resources.GPU, resources.DRA_GPU_CLASS):
        return amount
    if resource.startswith(MIG_PREFIX):
        slices = resources.mig_slices(resource.removeprefix(MIG_PREFIX))
        return amount * slices / resources.MIG_SLICES_PER_GPU
    if resource == resources.VGPU and flavor is not None:
        return amount / max(flavor.hami_split, 1)
    if resource == resources.DRA_MIG_CLASS and flavor is not None and flavor.mig_profiles:
        # DRA MIG devices of the pool's profiles: the smallest, as the pool cannot say which.
        slices = min(resources.mig_slices(p) for p, _ in flavor.mig_profiles)
        return amount * slices / resources.MIG_SLICES_PER_GPU
    return ZERO


def live_allocation(tenant: str | None = None) -> dict[str, Decimal] | None:
    """GPU-equivalents in use per flavor now, from the ClusterQueues' live status (the queue
    of the tenant with slug ``tenant``, or every queue); None when the Kueue rows are not live
    (the caller falls back to the ledger and says so)."""
    if not queue_freshness().live:
        return None
    queues = ClusterQueueStatus.objects.all()
    if tenant is not None:
        queues = queues.filter(tenant__slug=tenant)
    fleet = configured_fleet()
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for usage in queues.values_list("usage", flat=True):
        for flavor, entries in (usage or {}).items():
            for resource, amounts in entries.items():
                totals[flavor] += gpu_equivalents(
                    resource, _decimal(amounts.get("total")), flavor, fleet
                )
    return dict(totals)
