"""Reading the cluster into the portal, and the few things the portal does to it.

``sync_all`` reads nodes, GPU pods, Flux Kustomizations/HelmReleases, InferenceServices and
Kueue's Workloads, ClusterQueues, LocalQueues and Cohorts (and,
less often, the served CRDs the schema check uses: ``fleet.schemas``), each source on its own: a
source that fails keeps its last rows and records the error, so a page shows old data with a warning
rather than an error page. After a good read of Flux, merged changes move on to applied or failed
(``gitops.applied``).

Cordon, uncordon and drain are the platform admins' verbs on nodes: audited, and a drain
evicts through the eviction API (which honours PodDisruptionBudgets) as a job with progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from fleet import burnin, inventory, kueue, schemas
from fleet.flavors import derive_flavors
from fleet.kube import (
    CLUSTER_QUEUE,
    COHORT,
    HELM_RELEASE,
    INFERENCE_SERVICE,
    KUSTOMIZATION,
    LOCAL_QUEUE,
    WORKLOAD,
    CustomKind,
    Kube,
    KubeError,
)
from fleet.models import (
    ClusterQueueStatus,
    CohortStatus,
    FluxObject,
    Health,
    LocalQueueStatus,
    Node,
    QueueWorkload,
    SyncState,
    Workload,
)
from fleet.sleep import MANAGED_BY
from gitops import services as gitops_services
from gitops import sources
from gitops.applied import FluxReport, update_apply_states
from gitops.fleet import base_fleet, configured_fleet
from gitops.models import ChangeRequest
from gitops.render.flux import TENANT_SOURCE_SECRET
from gitops.render.meta import FLUX_NAMESPACE, FLUX_TENANT_LABEL, TENANT_LABEL
from gitops.render.validate import RESERVED_PREFIXES, reserved_namespaces
from gitops.render.vcluster import pool_labels
from gitops.specs import FleetSpec, PortalDeploySpec
from portal.audit import record_audit
from portal.jobs import enqueue
from portal.models import Job
from tenants import access
from tenants.access import Action

logger = logging.getLogger(__name__)

Progress = Callable[[int, str], None]

NODE_FIELDS = (
    "pool",
    "flavor",
    "product",
    "gpu_count",
    "gpu_memory_mib",
    "gpu_family",
    "driver_version",
    "sharing",
    "mig_strategy",
    "mig_config",
    "mig_config_state",
    "mig_profiles",
    "clique",
    "block",
    "rack",
    "hostname",
    "instance_type",
    "gpu_capacity",
    "gpu_allocatable",
    "capacity",
    "allocatable",
    "labels",
    "taints",
    "conditions",
    "unschedulable",
    "ready",
    "health",
    "health_reasons",
    "problems",
)
NODE_BATCH = 200


@dataclass
class SyncReport:
    """What one sync read, per source: item counts, or the error that kept the old rows."""

    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    moved_changes: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def sync_all(kube: Kube | None = None, *, progress: Progress | None = None) -> SyncReport:
    """Read every source once. Never raises for what the cluster returns."""
    report = SyncReport()
    step = progress or (lambda _pct, _msg: None)
    own = kube is None
    try:
        kube = kube or Kube()
    except Exception as exc:  # a broken kubeconfig: every source is stale
        for source in SyncState.Source.values:
            record_sync(source, error=f"Cannot configure the Kubernetes client: {exc}")
            report.errors[source] = str(exc)
        return report
    try:
        fleet = configured_fleet()
        sources: Sequence[tuple[str, Callable[[], tuple[int, int]]]] = (
            (SyncState.Source.NODES, lambda: sync_nodes(kube, fleet)),
            (SyncState.Source.PODS, lambda: sync_workloads(kube)),
            (SyncState.Source.FLUX, lambda: sync_flux(kube)),
            (SyncState.Source.KSERVE, lambda: sync_inference_services(kube)),
            (SyncState.Source.KUEUE, lambda: sync_kueue(kube)),
        )
        for index, (source, run) in enumerate(sources):
            step(int(100 * index / (len(sources) + 1)), f"reading {source}")
            try:
                kept, skipped = run()
            except KubeError as exc:
                logger.warning("fleet sync of %s failed: %s", source, exc)
                record_sync(source, error=str(exc))
                report.errors[source] = str(exc)
            else:
                record_sync(source, items=kept, skipped=skipped)
                report.counts[source] = kept
        if schemas.crds_due():
            # The CRDs change rarely (an operator upgrade), so they are read less often.
            step(80, "reading the served CRDs")
            try:
                crds = schemas.sync_crds(kube)
            except KubeError as exc:
                logger.warning("fleet sync of CRD schemas failed: %s", exc)
                record_sync(SyncState.Source.CRDS, error=str(exc))
                report.errors[SyncState.Source.CRDS] = str(exc)
            else:
                record_sync(SyncState.Source.CRDS, items=crds.kept, skipped=crds.skipped)
                report.counts[SyncState.Source.CRDS] = crds.kept
        step(85, "writing tenants' Git credentials")
        try:
            installed, waiting = ensure_source_credentials(kube)
        except KubeError as exc:
            logger.warning("writing tenants' Git credentials failed: %s", exc)
            report.errors[CREDENTIALS] = str(exc)
        else:
            report.counts[CREDENTIALS] = installed
            if waiting:
                logger.info(
                    "%d tenants' namespaces are not there yet for their Git Secret", waiting
                )
        if SyncState.Source.FLUX not in report.errors:
            step(90, "updating the state of merged changes")
            moved = update_changes()
            report.moved_changes = [c.pk for c in moved]
        step(100, _summary(report))
    finally:
        if own:
            kube.close()
    return report


def _summary(report: SyncReport) -> str:
    parts = [f"{n} {source}" for source, n in report.counts.items()]
    if report.errors:
        parts.append("failed: " + ", ".join(report.errors))
    return "read " + ", ".join(parts)


def record_sync(source: str, *, items: int = 0, skipped: int = 0, error: str = "") -> None:
    now = timezone.now()
    state, _ = SyncState.objects.get_or_create(source=source)
    state.last_attempt = now
    state.error = error[:2000]
    if not error:
        state.last_success = now
        state.items = items
        state.skipped = skipped
    state.save()


def sync_states() -> dict[str, SyncState]:
    """Every source's state, with a never-synced placeholder for sources not read yet."""
    found = {s.source: s for s in SyncState.objects.all()}
    return {source: found.get(source) or SyncState(source=source) for source in SyncState.Source}


def flavor_for(labels: dict[str, str], fleet: FleetSpec) -> str:
    """The flavor whose node labels the node carries, or ""."""
    for flavor in fleet.flavors:
        if all(labels.get(k) == v for k, v in pool_labels(flavor).items()):
            return flavor.name
    return ""


def _warn_problems(kind: str, name: str, problems: Iterable[str]) -> None:
    for problem in problems:
        logger.warning("%s %s: %s", kind, name, problem)


def sync_nodes(kube: Kube, fleet: FleetSpec) -> tuple[int, int]:
    """Replace the node rows with what the API lists, then place the nodes the lifecycle has
    never seen (``fleet.burnin.discover``); returns (kept, skipped)."""
    counts = store_nodes(kube.list_nodes(), fleet)
    burnin.discover(kube)
    return counts


def store_nodes(raw: list[Any], fleet: FleetSpec) -> tuple[int, int]:
    """Replace the node rows with the listed node objects; returns (kept, skipped)."""
    now = timezone.now()
    parsed: dict[str, inventory.NodeInfo] = {}
    skipped = 0
    for obj in raw:
        info = inventory.parse_node(obj, pool_label=settings.FLEET_POOL_LABEL)
        if info is None:
            skipped += 1
            logger.warning("skipped a node object without a name: %.200r", obj)
            continue
        _warn_problems("node", info.name, info.problems)
        parsed[info.name] = info
    del raw  # the decoded JSON is several times the parsed facts; free it before the writes
    with transaction.atomic():
        existing = {n.name: n for n in Node.objects.select_for_update()}
        new: list[Node] = []
        changed: list[Node] = []
        for name, info in parsed.items():
            node = existing.get(name)
            if node is None:
                node = Node(name=name, first_seen=now)
                _fill_node(node, info, fleet, now)
                new.append(node)
                continue
            before = _node_values(node)
            _fill_node(node, info, fleet, now)
            if _node_values(node) != before:
                changed.append(node)
        Node.objects.bulk_create(new, batch_size=NODE_BATCH)
        # Only the nodes whose facts moved: a steady fleet costs one UPDATE of last_seen, not
        # one CASE expression per field and node (seconds at a thousand nodes).
        Node.objects.bulk_update(changed, NODE_FIELDS, batch_size=NODE_BATCH)
        Node.objects.exclude(name__in=parsed).delete()
        Node.objects.update(last_seen=now)
    return len(parsed), skipped


def store_node(event: str, obj: Any, fleet: FleetSpec) -> None:
    """One node as a watch reports it: ADDED or MODIFIED writes its row (the list's fill
    code), DELETED removes it."""
    info = inventory.parse_node(obj, pool_label=settings.FLEET_POOL_LABEL)
    if info is None:
        logger.warning("skipped a node object without a name: %.200r", obj)
        return
    if event == "DELETED":
        Node.objects.filter(name=info.name).delete()
        return
    _warn_problems("node", info.name, info.problems)
    now = timezone.now()
    node = Node(name=info.name, first_seen=now)
    _fill_node(node, info, fleet, now)
    # An upsert in one statement: the sync may write the same node at the same moment.
    Node.objects.bulk_create(
        [node],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=[*NODE_FIELDS, "last_seen"],
    )


def _node_values(node: Node) -> tuple[Any, ...]:
    return tuple(getattr(node, field) for field in NODE_FIELDS)


def _fill_node(node: Node, info: inventory.NodeInfo, fleet: FleetSpec, now: Any) -> None:
    node.pool = info.pool
    node.flavor = flavor_for(info.labels, fleet)
    node.product = info.product
    node.gpu_count = max(0, info.gpu_count)
    node.gpu_memory_mib = max(0, info.gpu_memory_mib)
    node.gpu_family = info.gpu_family
    node.driver_version = info.driver_version
    node.sharing = info.sharing
    node.mig_strategy = info.mig_strategy
    node.mig_config = info.mig_config
    node.mig_config_state = info.mig_config_state
    node.mig_profiles = dict(info.mig_profiles)
    node.clique = info.clique
    node.block = info.block
    node.rack = info.rack
    node.hostname = info.hostname
    node.instance_type = info.instance_type
    node.gpu_capacity = dict(info.gpu_capacity)
    node.gpu_allocatable = dict(info.gpu_allocatable)
    node.capacity = dict(info.capacity)
    node.allocatable = dict(info.allocatable)
    node.labels = dict(info.labels)
    node.taints = [list(t) for t in info.taints]
    node.conditions = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "last_transition": c.last_transition,
        }
        for c in info.conditions
    ]
    node.unschedulable = info.unschedulable
    node.ready = info.ready
    node.health = info.health if info.health in Health.values else Health.UNKNOWN
    node.health_reasons = list(info.health_reasons)
    node.problems = list(info.problems)
    node.last_seen = now


def tenant_of(
    namespace: str,
    platform: frozenset[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The tenant a namespaced object belongs to: its namespace (tenant namespaces are named
    after the tenant), never a label a tenant writes: a pod labelled as another tenant's would
    bill that tenant. The platform's own namespaces belong to no tenant, with one exception:
    in the Flux namespace only the platform writes (a tenant's Kustomization impersonates an
    account confined to the tenant's namespace, gitops/render/rbac.py), and there the tenant
    label the portal renders on a tenant's HelmReleases is the platform's own word.
    ``platform`` is ``platform_namespaces()``, passed in by loops."""
    if namespace == FLUX_NAMESPACE:
        labels = labels or {}
        return labels.get(TENANT_LABEL) or labels.get(FLUX_TENANT_LABEL) or ""
    if platform is None:
        platform = platform_namespaces()
    if namespace in platform or namespace.startswith(RESERVED_PREFIXES):
        return ""
    return namespace


def platform_namespaces() -> frozenset[str]:
    """The namespaces of the platform: the names no tenant may take (one list, the
    renderer's), on the configured fleet."""
    return reserved_namespaces(base_fleet())


def sync_workloads(kube: Kube) -> tuple[int, int]:
    """Keep the pods that use GPUs; returns (kept, skipped)."""
    return store_workloads(kube.list_pods())


def _workload_row(pod: inventory.PodInfo, platform: frozenset[str], now: Any) -> Workload | None:
    """The row of a pod the portal keeps (one using GPUs, not finished), else None."""
    _warn_problems("pod", f"{pod.namespace}/{pod.name}", pod.problems)
    if not pod.gpu_requests or pod.phase in ("Succeeded", "Failed"):
        return None
    return Workload(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        tenant_slug=tenant_of(pod.namespace, platform),
        node=pod.node,
        phase=pod.phase,
        owner_kind=pod.owner_kind,
        owner_name=pod.owner_name,
        queue=pod.queue,
        gpu_requests=dict(pod.gpu_requests),
        last_seen=now,
        vcluster=pod.labels.get(MANAGED_BY, "")[:63],
    )


def store_workload(event: str, obj: Any) -> None:
    """One pod as a watch reports it: its row is written, or removed when the pod is gone,
    finished or uses no GPU."""
    pod = inventory.parse_pod(obj)
    if pod is None:
        return
    row = None if event == "DELETED" else _workload_row(pod, platform_namespaces(), timezone.now())
    if row is None:
        Workload.objects.filter(namespace=pod.namespace, name=pod.name).delete()
        return
    fields = [
        f.name for f in Workload._meta.concrete_fields if f.name not in ("id", "namespace", "name")
    ]
    Workload.objects.bulk_create(
        [row], update_conflicts=True, unique_fields=["namespace", "name"], update_fields=fields
    )


def store_workloads(raw: list[Any]) -> tuple[int, int]:
    """Replace the workload rows with the listed pods; returns (kept, skipped)."""
    platform = platform_namespaces()
    now = timezone.now()
    rows: dict[tuple[str, str], Workload] = {}
    skipped = 0
    for obj in raw:
        pod = inventory.parse_pod(obj)
        if pod is None:
            skipped += 1
            continue
        row = _workload_row(pod, platform, now)
        if row is not None:
            rows[(pod.namespace, pod.name)] = row
    with transaction.atomic():
        Workload.objects.all().delete()
        Workload.objects.bulk_create(rows.values())
    return len(rows), skipped


def _sync_custom(kube: Kube, kind: CustomKind) -> tuple[list[FluxObject], int]:
    return _custom_rows(kind, kube.list_custom(kind))


def _custom_rows(kind: CustomKind, items: list[Any]) -> tuple[list[FluxObject], int]:
    now = timezone.now()
    rows: list[FluxObject] = []
    skipped = 0
    platform = platform_namespaces()
    for obj in items:
        row = _flux_row(kind, obj, platform, now)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    return rows, skipped


FLUX_FIELDS = (
    "tenant_slug",
    "ready",
    "reconciling",
    "stalled",
    "released",
    "suspended",
    "reason",
    "message",
    "last_applied_revision",
    "last_attempted_revision",
    "url",
    "address",
    "path",
    "chart",
    "problems",
    "last_seen",
)


def _flux_row(kind: CustomKind, obj: Any, platform: frozenset[str], now: Any) -> FluxObject | None:
    """The row of one Flux or KServe object, or None when it is too malformed to keep."""
    status = inventory.parse_flux_object(kind.kind, obj)
    if status is None:
        return None
    _warn_problems(kind.kind, f"{status.namespace}/{status.name}", status.problems)
    labels = _labels_of(obj)
    return FluxObject(
        kind=kind.kind,
        namespace=status.namespace,
        name=status.name,
        tenant_slug=tenant_of(status.namespace, platform, labels),
        ready=status.ready,
        reconciling=status.reconciling,
        stalled=status.stalled,
        released=status.released,
        suspended=status.suspended,
        reason=status.reason[:120],
        message=status.message,
        last_applied_revision=status.last_applied_revision[:200],
        last_attempted_revision=status.last_attempted_revision[:200],
        url=status.url[:500],
        address=status.address[:500],
        path=status.path[:500],
        chart=status.chart[:200],
        problems=list(status.problems),
        last_seen=now,
    )


def store_custom(kind: CustomKind, items: list[Any]) -> tuple[int, int]:
    """Replace the rows of one kind with the listed objects; returns (kept, skipped)."""
    rows, skipped = _custom_rows(kind, items)
    _replace([kind.kind], rows)
    return len(rows), skipped


def store_custom_object(kind: CustomKind, event: str, obj: Any) -> None:
    """One Flux or KServe object as a watch (or a read) reports it: its row is written, or
    removed on DELETED."""
    row = _flux_row(kind, obj, platform_namespaces(), timezone.now())
    if row is None:
        return
    if event == "DELETED":
        FluxObject.objects.filter(kind=kind.kind, namespace=row.namespace, name=row.name).delete()
        return
    # One statement (INSERT ... ON CONFLICT UPDATE): the watcher, the Flux hook and the sync
    # may write the same row at the same moment.
    FluxObject.objects.bulk_create(
        [row],
        update_conflicts=True,
        unique_fields=["kind", "namespace", "name"],
        update_fields=FLUX_FIELDS,
    )


def refresh_custom_object(kube: Kube, kind: CustomKind, namespace: str, name: str) -> None:
    """Read one object from the API now and write its row (remove it when it is gone)."""
    try:
        obj = kube.read_custom(kind, namespace, name)
    except KubeError as exc:
        if exc.status != 404:
            raise
        FluxObject.objects.filter(kind=kind.kind, namespace=namespace, name=name).delete()
        return
    store_custom_object(kind, "MODIFIED", obj)


def update_changes() -> list[ChangeRequest]:
    """Move merged changes on from the Kustomization rows (``gitops.applied``)."""
    return update_apply_states(gitops_services.repository(), flux_reports())


def _labels_of(obj: Any) -> dict[str, str]:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def _replace(kinds: Sequence[str], rows: list[FluxObject]) -> None:
    with transaction.atomic():
        FluxObject.objects.filter(kind__in=kinds).delete()
        FluxObject.objects.bulk_create(rows, ignore_conflicts=True)


def sync_flux(kube: Kube) -> tuple[int, int]:
    """Flux Kustomizations and HelmReleases; returns (kept, skipped)."""
    kustomizations, skipped_k = _sync_custom(kube, KUSTOMIZATION)
    try:
        releases, skipped_h = _sync_custom(kube, HELM_RELEASE)
    except KubeError as exc:
        if exc.status != 404:
            raise
        # helm-controller is not installed: no releases, which is not an error of the sync.
        releases, skipped_h = [], 0
    _replace(
        [FluxObject.Kind.KUSTOMIZATION, FluxObject.Kind.HELM_RELEASE], kustomizations + releases
    )
    return len(kustomizations) + len(releases), skipped_k + skipped_h


def sync_inference_services(kube: Kube) -> tuple[int, int]:
    try:
        rows, skipped = _sync_custom(kube, INFERENCE_SERVICE)
    except KubeError as exc:
        if exc.status != 404:
            raise
        rows, skipped = [], 0  # KServe is not installed
    _replace([FluxObject.Kind.INFERENCE_SERVICE], rows)
    return len(rows), skipped


def flux_reports() -> list[FluxReport]:
    """The Kustomizations as ``gitops.applied`` reads them."""
    return [
        FluxReport(
            namespace=row.namespace,
            name=row.name,
            ready=row.ready,
            stalled=row.stalled,
            reconciling=row.reconciling,
            reason=row.reason,
            message=row.message,
            applied_sha=inventory.revision_sha(row.last_applied_revision),
            attempted_sha=inventory.revision_sha(row.last_attempted_revision),
        )
        for row in FluxObject.objects.filter(kind=FluxObject.Kind.KUSTOMIZATION)
    ]


# --- Kueue, read back ---------------------------------------------------------------------------
# Workloads, ClusterQueues, LocalQueues and Cohorts (``fleet.kueue`` parses them). Like the other
# kinds: the list replaces the rows, a watch event writes or removes one. Queue positions come
# from the visibility API (``sync_positions``) and survive a list or an event: only a workload
# that stops waiting loses its position.

QUEUE_WORKLOAD_BATCH = 500
QUEUE_WORKLOAD_FIELDS = (
    "uid",
    "tenant",
    "owner_kind",
    "owner_name",
    "owner_uid",
    "local_queue",
    "cluster_queue",
    "priority",
    "priority_class",
    "state",
    "reason",
    "message",
    "preemption_reason",
    "preemptor_uid",
    "preemptor_path",
    "eviction_reason",
    "pod_sets",
    "created",
    "admitted_at",
    "finished_at",
    "problems",
    "last_seen",
)


def tenant_ids() -> dict[str, int]:
    """{slug: id} of every tenant, for the rows' tenant key. The Tenant model is the FK's own
    (fleet imports nothing of the tenants app but its access rules: DESIGN.md)."""
    tenant_model = QueueWorkload._meta.get_field("tenant").related_model
    assert tenant_model is not None and not isinstance(tenant_model, str)
    return dict(tenant_model._default_manager.values_list("slug", "id"))


def _tenant_id(namespace: str, platform: frozenset[str], tenants: Mapping[str, int]) -> int | None:
    slug = tenant_of(namespace, platform)
    return tenants.get(slug) if slug else None


def _queue_workload_row(
    info: kueue.WorkloadInfo,
    platform: frozenset[str],
    tenants: Mapping[str, int],
    local_queues: Mapping[tuple[str, str], str],
    now: Any,
) -> QueueWorkload:
    _warn_problems("workload", f"{info.namespace}/{info.name}", info.problems)
    return QueueWorkload(
        namespace=info.namespace,
        name=info.name,
        uid=info.uid,
        tenant_id=_tenant_id(info.namespace, platform, tenants),
        owner_kind=info.owner_kind,
        owner_name=info.owner_name,
        owner_uid=info.owner_uid,
        local_queue=info.local_queue,
        # Until quota is reserved the admission names no ClusterQueue: the LocalQueue's does.
        cluster_queue=info.cluster_queue
        or local_queues.get((info.namespace, info.local_queue), ""),
        priority=info.priority,
        priority_class=info.priority_class,
        state=info.state,
        reason=info.reason[:120],
        message=info.message,
        preemption_reason=info.preemption_reason[:64],
        preemptor_uid=info.preemptor_uid[:64],
        preemptor_path=info.preemptor_path[:500],
        eviction_reason=info.eviction_reason[:64],
        pod_sets=[p.as_json() for p in info.pod_sets],
        created=info.created,
        admitted_at=info.admitted_at,
        finished_at=info.finished_at,
        problems=list(info.problems),
        last_seen=now,
    )


def _local_queue_targets() -> dict[tuple[str, str], str]:
    return {
        (ns, name): cq
        for ns, name, cq in LocalQueueStatus.objects.values_list(
            "namespace", "name", "cluster_queue"
        )
    }


def _clear_positions() -> None:
    """A workload that no longer waits has no place in a queue."""
    QueueWorkload.objects.exclude(state__in=kueue.WAITING).filter(
        position_in_cluster_queue__isnull=False
    ).update(position_in_cluster_queue=None, position_in_local_queue=None)


def _upsert_workloads(rows: Sequence[QueueWorkload], *, positions: bool = False) -> None:
    # One statement per batch (INSERT ... ON CONFLICT UPDATE): the watcher and the sync may
    # write the same row at the same moment. Positions are left as the visibility read wrote
    # them unless ``positions`` (the rows carry none: they no longer wait).
    QueueWorkload.objects.bulk_create(
        rows,
        batch_size=QUEUE_WORKLOAD_BATCH,
        update_conflicts=True,
        unique_fields=["namespace", "name"],
        update_fields=[
            *QUEUE_WORKLOAD_FIELDS,
            *(("position_in_cluster_queue", "position_in_local_queue") if positions else ()),
        ],
    )


def store_queue_workloads(raw: list[Any]) -> tuple[int, int]:
    """Replace the Workload rows with the listed Workloads; returns (kept, skipped)."""
    platform = platform_namespaces()
    tenants = tenant_ids()
    local_queues = _local_queue_targets()
    now = timezone.now()
    rows: dict[tuple[str, str], QueueWorkload] = {}
    skipped = 0
    for obj in raw:
        info = kueue.parse_workload(obj)
        if info is None:
            skipped += 1
            logger.warning("skipped a Workload object without a name: %.200r", obj)
            continue
        rows[(info.namespace, info.name)] = _queue_workload_row(
            info, platform, tenants, local_queues, now
        )
    del raw
    with transaction.atomic():
        gone = [
            pk
            for pk, namespace, name in QueueWorkload.objects.values_list("pk", "namespace", "name")
            if (namespace, name) not in rows
        ]
        for start in range(0, len(gone), QUEUE_WORKLOAD_BATCH):
            QueueWorkload.objects.filter(pk__in=gone[start : start + QUEUE_WORKLOAD_BATCH]).delete()
        _upsert_workloads(list(rows.values()))
        _clear_positions()
    return len(rows), skipped


def store_queue_workload(event: str, obj: Any) -> None:
    """One Workload as a watch reports it: its row is written, or removed on DELETED."""
    info = kueue.parse_workload(obj)
    if info is None:
        logger.warning("skipped a Workload object without a name: %.200r", obj)
        return
    if event == "DELETED":
        QueueWorkload.objects.filter(namespace=info.namespace, name=info.name).delete()
        return
    platform = platform_namespaces()
    slug = tenant_of(info.namespace, platform)
    tenants = tenant_ids_for(slug)
    local_queues: dict[tuple[str, str], str] = {}
    if not info.cluster_queue and info.local_queue:
        target = (
            LocalQueueStatus.objects.filter(namespace=info.namespace, name=info.local_queue)
            .values_list("cluster_queue", flat=True)
            .first()
        )
        if target:
            local_queues[(info.namespace, info.local_queue)] = target
    row = _queue_workload_row(info, platform, tenants, local_queues, timezone.now())
    _upsert_workloads([row], positions=not row.waiting)


def tenant_ids_for(slug: str) -> dict[str, int]:
    """{slug: id} for one tenant slug (empty when it is no tenant's): one indexed query."""
    if not slug:
        return {}
    tenant_model = QueueWorkload._meta.get_field("tenant").related_model
    assert tenant_model is not None and not isinstance(tenant_model, str)
    found = tenant_model._default_manager.filter(slug=slug).values_list("id", flat=True).first()
    return {slug: found} if found is not None else {}


def _upsert(
    model: type[Model], rows: Iterable[Model], unique: Sequence[str], fields: Sequence[str]
) -> None:
    """One INSERT ... ON CONFLICT UPDATE for the rows: the watcher and the sync may write the
    same row at the same moment."""
    model._default_manager.bulk_create(
        list(rows), update_conflicts=True, unique_fields=list(unique), update_fields=list(fields)
    )


def _replace_rows(
    model: type[Model], rows: Mapping[Any, Model], unique: Sequence[str], fields: Sequence[str]
) -> None:
    """Make the table the listed rows, keyed by ``unique`` (one field: the value; more: a
    tuple), in one transaction."""
    with transaction.atomic():
        keys = model._default_manager.values_list("pk", *unique)
        gone = [pk for pk, *key in keys if (key[0] if len(unique) == 1 else tuple(key)) not in rows]
        model._default_manager.filter(pk__in=gone).delete()
        _upsert(model, rows.values(), unique, fields)


CLUSTER_QUEUE_FIELDS = (
    "tenant",
    "cohort",
    "weight",
    "weighted_share",
    "quotas",
    "usage",
    "reservation",
    "pending",
    "reserving",
    "admitted",
    "active",
    "reason",
    "message",
    "problems",
    "last_seen",
)


def _cluster_queue_row(
    info: kueue.ClusterQueueInfo, tenants: Mapping[str, int], now: Any
) -> ClusterQueueStatus:
    _warn_problems("ClusterQueue", info.name, info.problems)
    return ClusterQueueStatus(
        name=info.name,
        # The renderer names a tenant's ClusterQueue after the tenant (gitops.render.kueue).
        tenant_id=tenants.get(info.name),
        cohort=info.cohort,
        weight=info.weight or "",
        weighted_share=info.weighted_share,
        quotas=info.quotas,
        usage=info.usage,
        reservation=info.reservation,
        pending=max(info.pending, 0),
        reserving=max(info.reserving, 0),
        admitted=max(info.admitted, 0),
        active=info.active,
        reason=info.reason[:120],
        message=info.message,
        problems=list(info.problems),
        last_seen=now,
    )


def store_cluster_queues(raw: list[Any]) -> tuple[int, int]:
    """Replace the ClusterQueue rows with the listed ones; returns (kept, skipped)."""
    tenants = tenant_ids()
    now = timezone.now()
    rows = {}
    for obj in raw:
        info = kueue.parse_cluster_queue(obj)
        if info is not None:
            rows[info.name] = _cluster_queue_row(info, tenants, now)
    _replace_rows(ClusterQueueStatus, rows, ["name"], CLUSTER_QUEUE_FIELDS)
    return len(rows), len(raw) - len(rows)


def store_cluster_queue(event: str, obj: Any) -> None:
    info = kueue.parse_cluster_queue(obj)
    if info is None:
        return
    if event == "DELETED":
        ClusterQueueStatus.objects.filter(name=info.name).delete()
        return
    row = _cluster_queue_row(info, tenant_ids_for(info.name), timezone.now())
    _upsert(ClusterQueueStatus, [row], ["name"], CLUSTER_QUEUE_FIELDS)


LOCAL_QUEUE_FIELDS = (
    "tenant",
    "cluster_queue",
    "usage",
    "reservation",
    "pending",
    "reserving",
    "admitted",
    "weighted_share",
    "problems",
    "last_seen",
)


def _local_queue_row(
    info: kueue.LocalQueueInfo, platform: frozenset[str], tenants: Mapping[str, int], now: Any
) -> LocalQueueStatus:
    _warn_problems("LocalQueue", f"{info.namespace}/{info.name}", info.problems)
    return LocalQueueStatus(
        namespace=info.namespace,
        name=info.name,
        tenant_id=_tenant_id(info.namespace, platform, tenants),
        cluster_queue=info.cluster_queue,
        usage=info.usage,
        reservation=info.reservation,
        pending=max(info.pending, 0),
        reserving=max(info.reserving, 0),
        admitted=max(info.admitted, 0),
        weighted_share=info.weighted_share,
        problems=list(info.problems),
        last_seen=now,
    )


def store_local_queues(raw: list[Any]) -> tuple[int, int]:
    """Replace the LocalQueue rows with the listed ones; returns (kept, skipped)."""
    platform = platform_namespaces()
    tenants = tenant_ids()
    now = timezone.now()
    rows = {}
    for obj in raw:
        info = kueue.parse_local_queue(obj)
        if info is not None:
            rows[(info.namespace, info.name)] = _local_queue_row(info, platform, tenants, now)
    _replace_rows(LocalQueueStatus, rows, ["namespace", "name"], LOCAL_QUEUE_FIELDS)
    return len(rows), len(raw) - len(rows)


def store_local_queue(event: str, obj: Any) -> None:
    info = kueue.parse_local_queue(obj)
    if info is None:
        return
    if event == "DELETED":
        LocalQueueStatus.objects.filter(namespace=info.namespace, name=info.name).delete()
        return
    platform = platform_namespaces()
    tenants = tenant_ids_for(tenant_of(info.namespace, platform))
    row = _local_queue_row(info, platform, tenants, timezone.now())
    _upsert(LocalQueueStatus, [row], ["namespace", "name"], LOCAL_QUEUE_FIELDS)


COHORT_FIELDS = ("parent", "weight", "weighted_share", "quotas", "problems", "last_seen")


def _cohort_row(info: kueue.CohortInfo, now: Any) -> CohortStatus:
    _warn_problems("Cohort", info.name, info.problems)
    return CohortStatus(
        name=info.name,
        parent=info.parent,
        weight=info.weight or "",
        weighted_share=info.weighted_share,
        quotas=info.quotas,
        problems=list(info.problems),
        last_seen=now,
    )


def store_cohorts(raw: list[Any]) -> tuple[int, int]:
    """Replace the Cohort rows with the listed ones; returns (kept, skipped)."""
    now = timezone.now()
    rows = {}
    for obj in raw:
        info = kueue.parse_cohort(obj)
        if info is not None:
            rows[info.name] = _cohort_row(info, now)
    _replace_rows(CohortStatus, rows, ["name"], COHORT_FIELDS)
    return len(rows), len(raw) - len(rows)


def store_cohort(event: str, obj: Any) -> None:
    info = kueue.parse_cohort(obj)
    if info is None:
        return
    if event == "DELETED":
        CohortStatus.objects.filter(name=info.name).delete()
        return
    _upsert(CohortStatus, [_cohort_row(info, timezone.now())], ["name"], COHORT_FIELDS)


# The four kinds in the order a sync stores them: a Workload row takes its ClusterQueue from
# its LocalQueue's row until quota is reserved, so the LocalQueues come first.
KUEUE_KINDS: tuple[tuple[CustomKind, Callable[[list[Any]], tuple[int, int]]], ...] = (
    (COHORT, store_cohorts),
    (CLUSTER_QUEUE, store_cluster_queues),
    (LOCAL_QUEUE, store_local_queues),
    (WORKLOAD, store_queue_workloads),
)


def sync_kueue(kube: Kube) -> tuple[int, int]:
    """Kueue's Cohorts, ClusterQueues, LocalQueues and Workloads; returns (kept, skipped).
    Kueue not installed (404 on its kinds) is no error: there are no queues."""
    kept = skipped = 0
    for kind, store in KUEUE_KINDS:
        try:
            items = kube.list_custom(kind)
        except KubeError as exc:
            if exc.status != 404:
                raise
            items = []
        k, s = store(items)
        kept, skipped = kept + k, skipped + s
    return kept, skipped


def waiting_cluster_queues() -> list[str]:
    """The ClusterQueues with a workload waiting, by their status or by the Workload rows
    (whichever the watch heard first)."""
    names = set(ClusterQueueStatus.objects.filter(pending__gt=0).values_list("name", flat=True))
    names.update(
        QueueWorkload.objects.filter(state__in=kueue.WAITING)
        .exclude(cluster_queue="")
        .values_list("cluster_queue", flat=True)
        .distinct()
    )
    return sorted(names)


def sync_positions(kube: Kube, *, page: int | None = None) -> int:
    """Read every waiting workload's position from Kueue's visibility API, one ClusterQueue
    at a time, ``page`` items a request (offset/limit, as ``kubectl get --raw`` pages it); write
    them and clear the positions of the rest. Returns how many positions were read.

    Cheap when nothing waits: no request at all, one query for the queues and one update. A
    ClusterQueue deleted meanwhile (404) is skipped; any other failure raises ``KubeError``
    and leaves the positions as they were."""
    page = page or settings.FLEET_QUEUE_POSITIONS_PAGE
    now = timezone.now()
    found: dict[tuple[str, str], tuple[str, kueue.PendingPosition]] = {}
    for cluster_queue in waiting_cluster_queues():
        offset = 0
        while True:
            try:
                body = kube.pending_workloads(cluster_queue, offset=offset, limit=page)
            except KubeError as exc:
                if exc.status == 404:
                    break
                raise
            items = kueue.parse_pending_workloads(body)
            for item in items:
                found[(item.namespace, item.name)] = (cluster_queue, item)
            if len(items) < page:
                break
            offset += len(items)
    with transaction.atomic():
        QueueWorkload.objects.filter(position_in_cluster_queue__isnull=False).update(
            position_in_cluster_queue=None, position_in_local_queue=None
        )
        rows = list(
            QueueWorkload.objects.filter(state__in=kueue.WAITING).only(
                "pk", "namespace", "name", "cluster_queue"
            )
        )
        changed = []
        for row in rows:
            hit = found.get((row.namespace, row.name))
            if hit is None:
                continue
            cluster_queue, item = hit
            row.cluster_queue = cluster_queue
            row.position_in_cluster_queue = item.position_in_cluster_queue
            row.position_in_local_queue = item.position_in_local_queue
            row.positions_read = now
            changed.append(row)
        QueueWorkload.objects.bulk_update(
            changed,
            [
                "cluster_queue",
                "position_in_cluster_queue",
                "position_in_local_queue",
                "positions_read",
            ],
            batch_size=QUEUE_WORKLOAD_BATCH,
        )
    return len(found)


# --- tenants' Git credentials ---------------------------------------------------------------

CREDENTIALS = "git credentials"
# The user name is not checked (the token is the password); it names the writer for humans.
SOURCE_USERNAME = b"flux"
SOURCE_SECRET_LABELS = {"app.kubernetes.io/managed-by": "ai-factory-portal"}


def install_source_credentials(slug: str, *, acting_user: Any, kube: Kube) -> str:
    """Issue the tenant a new source token and write it into the tenant's Secret; returns the
    token's visible prefix.

    One transaction: when the API refuses the Secret, the new token is rolled back and the one
    before stays valid, so a failed rotation never breaks a working source.
    """
    with transaction.atomic():
        token = sources.issue_token(slug, acting_user=acting_user)
        kube.write_secret(
            slug,
            TENANT_SOURCE_SECRET,
            {"username": SOURCE_USERNAME, "password": token.encode("utf-8")},
            labels={**SOURCE_SECRET_LABELS, TENANT_LABEL: slug},
        )
    return token[: sources.VISIBLE_CHARS]


def ensure_source_credentials(kube: Kube) -> tuple[int, int]:
    """Give every tenant on main that has no source token one, written into its namespace, and
    write a new one for a tenant whose Secret is gone from the cluster.

    The namespace exists only once Flux applied the onboarding, so this runs with every fleet
    sync: a tenant whose namespace is not there yet (404) waits for the next one. A Secret can
    also vanish (a rebuilt cluster, a restarted simulator, a hand-deleted Secret): the portal
    keeps only the token's digest, so it issues a new token. It looks only at tenants whose
    workloads Kustomization is not Ready (one read each), so a healthy fleet costs one query
    in all. Returns (installed, still waiting).
    """
    repo = gitops_services.repository()
    main = repo.head(settings.GITOPS_MAIN_BRANCH)
    if main is None:
        return 0, 0
    slugs = set(sources.tenant_slugs(repo, main))
    missing = sources.tokenless(slugs)
    unhealthy = {
        namespace
        for namespace, name in FluxObject.objects.filter(kind=FluxObject.Kind.KUSTOMIZATION)
        .exclude(ready="True")
        .values_list("namespace", "name")
        if name == f"{namespace}-workloads"
    }
    for slug in sorted((slugs - missing) & unhealthy):
        try:
            kube.read_secret(slug, TENANT_SOURCE_SECRET)
        except KubeError as exc:
            if exc.status != 404:
                raise
            missing.add(slug)
    installed = waiting = 0
    for slug in sorted(missing):
        try:
            install_source_credentials(slug, acting_user=None, kube=kube)
        except KubeError as exc:
            if exc.status != 404:
                raise
            waiting += 1
        else:
            installed += 1
    return installed, waiting


def do_rotate_source_token(slug: str, *, acting_user: Any, kube: Kube | None = None) -> str:
    """Replace a tenant's source token (platform admins only); returns the new prefix.

    The old token stops working as soon as the new one is in the tenant's Secret; Flux picks
    the Secret up at its next fetch.
    """
    access.require(acting_user, Action.OPERATE_FLEET)
    repo = gitops_services.repository()
    main = repo.head(settings.GITOPS_MAIN_BRANCH)
    if main is None or slug not in sources.tenant_slugs(repo, main):
        raise ValidationError(
            f"Tenant '{slug}' is not on main: its onboarding must be merged before it has a "
            "Git token."
        )
    own = kube is None
    kube = kube or Kube()
    try:
        return install_source_credentials(slug, acting_user=acting_user, kube=kube)
    except KubeError as exc:
        raise ValidationError(
            f"The token was not rotated (the old one still works): {exc}"
        ) from exc
    finally:
        if own:
            kube.close()


# --- cordon and drain -----------------------------------------------------------------------


@dataclass(frozen=True)
class DrainPlan:
    """What draining a node would do: the pods to evict and whose they are."""

    node: str
    evict: tuple[inventory.PodInfo, ...]
    skipped: tuple[tuple[inventory.PodInfo, str], ...]  # (pod, why it stays)

    def owners(self) -> list[tuple[inventory.PodInfo, str]]:
        """Each pod to evict with its tenant ("" for the platform's)."""
        platform = platform_namespaces()
        return [(p, tenant_of(p.namespace, platform)) for p in self.evict]

    @property
    def tenants(self) -> list[str]:
        return sorted({slug for _, slug in self.owners()} - {""})


def drain_plan(node: Node, kube: Kube | None = None) -> DrainPlan:
    """Read the node's pods now (not from the cache) and decide which a drain evicts, as
    ``kubectl drain`` does: DaemonSet pods and mirror pods stay, finished pods are ignored;
    unlike it, only tenants' pods go (the platform's are the operator's to move)."""
    own = kube is None
    kube = kube or Kube()
    try:
        raw = kube.list_pods(node=node.name)
    finally:
        if own:
            kube.close()
    evict: list[inventory.PodInfo] = []
    skipped: list[tuple[inventory.PodInfo, str]] = []
    platform = platform_namespaces()
    for obj in raw:
        pod = inventory.parse_pod(obj)
        if pod is None or pod.node != node.name:
            continue
        if pod.phase in ("Succeeded", "Failed"):
            continue
        if pod.owner_kind == "DaemonSet":
            skipped.append((pod, "DaemonSet pod (recreated on the node by its controller)"))
        elif pod.owner_kind == "Node":
            skipped.append((pod, "static (mirror) pod"))
        elif not tenant_of(pod.namespace, platform):
            # The portal's write-scope policy lets it evict tenants' pods only
            # (gitops.render.portal.write_scope_policy).
            skipped.append((pod, "platform pod (the operator drains those)"))
        else:
            evict.append(pod)
    return DrainPlan(node.name, tuple(evict), tuple(skipped))


@transaction.atomic
def do_cordon(node: Node, *, acting_user: Any, cordon: bool = True, reason: str = "") -> Node:
    """Mark the node unschedulable (or schedulable again) in the cluster, then here."""
    access.require(acting_user, Action.OPERATE_FLEET)
    with Kube() as kube:
        try:
            kube.set_unschedulable(node.name, cordon)
        except KubeError as exc:
            raise ValidationError(str(exc)) from exc
    before = node.unschedulable
    node.unschedulable = cordon
    node.save(update_fields=["unschedulable"])
    record_audit(
        actor=acting_user,
        action="node.cordon" if cordon else "node.uncordon",
        target=node,
        diff={"unschedulable": [before, cordon], **({"reason": [None, reason]} if reason else {})},
    )
    return node


@transaction.atomic
def do_drain(node: Node, *, acting_user: Any, plan: DrainPlan, reason: str = "") -> Job:
    """Cordon the node and evict the planned pods in a job. The plan is the one the admin
    confirmed: pods that arrived since are not evicted by surprise (the node is cordoned, so
    none should)."""
    access.require(acting_user, Action.OPERATE_FLEET)
    do_cordon(node, acting_user=acting_user, reason=reason or "drain")
    pods = [f"{p.namespace}/{p.name}" for p in plan.evict]
    by_tenant: dict[str, list[str]] = {}
    for pod, slug in plan.owners():
        if slug:
            by_tenant.setdefault(slug, []).append(f"{pod.namespace}/{pod.name}")
    record_audit(
        actor=acting_user,
        action="node.drain",
        target=node,
        diff={"pods": [None, pods], "tenants": [None, sorted(by_tenant)]},
    )
    for slug in sorted(by_tenant):
        record_audit(
            actor=acting_user,
            action="node.drain",
            target=node,
            tenant_slug=slug,
            diff={"pods": [None, by_tenant[slug]]},
        )
    return enqueue(
        "fleet.drain",
        title=f"Drain node {node.name}",
        created_by=acting_user,
        node=node.name,
        pods=pods,
    )


EVICTION_ATTEMPTS = 3


def evict_pods(
    node: str, pods: Sequence[str], *, progress: Progress, kube: Kube | None = None
) -> tuple[list[str], dict[str, str]]:
    """Evict each ``namespace/name``; returns (evicted, {pod: why not}). A pod already gone
    counts as evicted; one a disruption budget protects is tried again, then reported."""
    own = kube is None
    kube = kube or Kube()
    evicted: list[str] = []
    failed: dict[str, str] = {}
    try:
        for index, ref in enumerate(pods):
            namespace, _, name = ref.partition("/")
            for attempt in range(1, EVICTION_ATTEMPTS + 1):
                try:
                    kube.evict(namespace, name)
                except KubeError as exc:
                    if exc.status == 404:
                        evicted.append(ref)
                        break
                    if exc.status == 429 and attempt < EVICTION_ATTEMPTS:
                        time.sleep(settings.FLEET_EVICTION_RETRY_SECONDS)
                        continue
                    failed[ref] = str(exc)
                    break
                else:
                    evicted.append(ref)
                    break
            progress(
                int(100 * (index + 1) / max(len(pods), 1)), f"{ref}: {failed.get(ref, 'evicted')}"
            )
    finally:
        if own:
            kube.close()
    return evicted, failed


# --- the inventory as flavors ----------------------------------------------------------------


def do_reconcile_flavors(*, acting_user: Any = None) -> tuple[ChangeRequest | None, list[str]]:
    """Count the flavors from the synced nodes, store them (capacity checks use them at once)
    and open a pull request when the ResourceFlavors or the Topology must change. Nothing
    happens while the node inventory is stale or empty: a cluster that cannot be read must not
    shrink the fleet to nothing. Returns the change (if one is open) and notes for people."""
    access.require(acting_user, Action.OPERATE_FLEET)
    state = sync_states()[SyncState.Source.NODES]
    if state.stale:
        return None, ["The node inventory is stale; flavors were left as they are."]
    nodes = list(Node.objects.all())
    derived = derive_flavors(base_fleet(), nodes)
    if not derived.flavors:
        return None, [*derived.notes, "No GPU nodes were found; flavors were left as they are."]
    change = gitops_services.do_record_inventory(
        derived.flavors, derived.topology_levels, acting_user=acting_user
    )
    return change, list(derived.notes)


# --- the portal's own deployment ---------------------------------------------------------------

PORTAL_DEPLOYMENT_TITLE = "Deploy the portal on the {fleet} fleet from {image}"


@transaction.atomic
def do_propose_portal_deployment(
    spec: PortalDeploySpec, *, acting_user: Any, fleet: FleetSpec | None = None
) -> ChangeRequest:
    """Open a platform change request that makes main hold the portal's own deployment
    (``gitops.render.portal``): opt-in, reviewed and checked like any platform change. A bad
    spec is a ``ValidationError`` and nothing is written; a spec main already holds too."""
    access.require(acting_user, Action.OPERATE_FLEET)
    fleet = fleet or configured_fleet()
    changes = gitops_services.portal_deployment_changes(spec, fleet)
    change = gitops_services.open_change(
        acting_user=acting_user,
        title=PORTAL_DEPLOYMENT_TITLE.format(fleet=fleet.name, image=spec.image),
        scope=[],  # the platform's files: no tenant's resources
        changes=changes,
        kind=ChangeRequest.Kind.PLATFORM,
        description=(
            f"The portal in namespace {fleet.portal_namespace}: {spec.web_replicas} web, "
            f"{spec.worker_replicas} Celery worker(s), one beat, the migration Job; served on "
            f"{', '.join(spec.hostnames)}. Secrets come from the Secret {spec.secret_name}, "
            "which is not in Git."
        ),
    )
    record_audit(
        actor=acting_user,
        action="fleet.portal_deployment",
        target=change,
        diff={
            "image": [None, spec.image],
            "replicas": [None, f"web {spec.web_replicas}, worker {spec.worker_replicas}"],
        },
    )
    return change


def cluster_pods_running(namespace: str, release: str) -> int:
    """How many GPU pods the syncer of tenant cluster ``release`` made in ``namespace`` the last
    sync saw running (a sleeping cluster's: none, once ``fleet.sleep`` freed them)."""
    return Workload.objects.filter(namespace=namespace, vcluster=release, phase="Running").count()


def running_pods(namespace: str, name_prefix: str) -> int:
    """How many pods of ``namespace`` whose name starts with ``name_prefix`` the last sync saw
    running (a sleeping endpoint's predictor or cluster's control plane: none)."""
    return Workload.objects.filter(
        namespace=namespace, name__startswith=name_prefix, phase="Running"
    ).count()
