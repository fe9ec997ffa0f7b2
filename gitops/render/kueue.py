"""Kueue objects (``kueue.x-k8s.io/v1beta2``): the fleet's flavors, topology, cohort and
priorities, and each tenant's ClusterQueue and LocalQueue.

A tenant's ClusterQueue has **one** resource group covering ``cpu``, ``memory`` and every GPU
resource of its shares, with one entry per flavor it has a share on (in fleet order, which is
the order Kueue tries them). One group rather than one per kind of GPU, because:

- Kueue rejects a resource or a flavor that appears in two groups of a queue, and every GPU
  pod also asks for ``cpu`` and ``memory``, so those two can only sit in one group;
- topology-aware scheduling needs all of a pod set's resources from a single flavor;
- within a group every flavor must list every covered resource (the CRD's rule), so a flavor
  gets ``0`` for the resources it does not provide, and Kueue moves on to the next flavor.

``cpu``/``memory`` get the tenant's whole namespace budget on every flavor: the namespace
ResourceQuota is what bounds them (and the nodes, which topology-aware scheduling reads), so
Kueue's count of them only has to let GPU pods through, never be the limit. A GPU resource the
tenant has no quota for on one of its flavors (another MIG profile, DRA on a whole-GPU pool)
is covered with 0 and may be borrowed when another queue of the cohort lends it.

Whole GPUs (``nvidia.com/gpu``) and HAMi vGPU slots (``nvidia.com/vgpu``) are different
resources (``gitops.render.resources``), so a pod asking for whole GPUs can never be admitted
to a HAMi flavor and the fleet's flavor order does not matter for that.

Shares of one flavor add up; their borrowing limit is the sum unless one share borrows without
limit, and their lending limit is what each share lends (all of it when it sets no limit).
DRA shares are counted under the DeviceClass name (see ``gitops.render.resources``).
``admissible`` is what Kueue may admit for the queue (nominal plus borrowing, per resource):
the namespace ResourceQuota is rendered from it, so a borrowed admission never fails at pod
creation.

Topology-aware scheduling (TAS) only on flavors whose pods it can place: TAS fits a pod set
against the nodes' ``status.allocatable`` and only considers nodes that carry every level label
of the Topology (kueue v0.19.2 pkg/cache/scheduler/tas_nodes_cache.go, pkg/util/tas/node.go
``NodeMatchesFlavor``). HAMi's ``nvidia.com/gpumem``/``gpucores`` are never allocatable (see
``gitops.render.resources``), so a HAMi pod would never fit: HAMi flavors get no
``topologyName``. Nor do DRA flavors: TAS sizes a pod from its containers' requests and does
not count ResourceClaims ("No DRA + Topology Aware Scheduling (TAS)", kueue v0.19.2
site/content/en/docs/concepts/dynamic_resource_allocation.md, Limitations).
The Topology's levels are the fleet's ``topology_levels``, which the fleet's
inventory keeps to labels every GPU node carries; ``kubernetes.io/hostname`` is set by the
kubelet on every node.

Kueue implies TAS for a pod only when *every* flavor of its ClusterQueue is topology-aware
(kueue v0.19.2 pkg/cache/scheduler/clusterqueue.go ``isTASOnly``); in a queue that mixes them,
as a tenant with a whole-GPU and a HAMi share has, a pod that does not ask for TAS skips every
topology-aware flavor ("supports only TopologyAwareScheduling",
pkg/scheduler/flavorassigner/tas_flavorassigner.go ``checkPodSetAndFlavorMatchForTAS``) and
its whole GPUs could never be admitted. So pods that ask for a GPU resource the tenant has only
on topology-aware flavors (``tas_resources``) carry ``kueue.x-k8s.io/podset-unconstrained-
topology``: the endpoints' predictors from the renderer, every other pod of the tenant from
its Kyverno policy (``gitops.render.kyverno``). A pod asking explicitly skips a non-TAS flavor
that covers what it requests, which those flavors offer no quota of anyway.

Preemption: a queue reclaims its nominal quota from any borrower (``reclaimWithinCohort: Any``)
and preempts lower priorities inside itself. With fair sharing (the fleet's default) Kueue
ignores ``borrowWithinCohort`` (kueue v0.19.2 site/content/en/docs/concepts/preemption.md
"Fair Sharing"; pkg/scheduler/preemption/preemption.go ``getTargets`` runs
``fairPreemptions``, which never reads it), and a borrowing queue preempts only workloads of
queues that are themselves borrowing, by share value, so it is not rendered. With classic
preemption, a borrowing queue may preempt only workloads of other queues at or below the
``training`` priority, so borrowed capacity never evicts another tenant's production
inference; the queues then carry no fair-sharing weight.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gitops.render import reservations, resources
from gitops.render.meta import LOCAL_QUEUE, TENANT_LABEL, UNTIL_ANNOTATION, metadata
from gitops.render.vcluster import pool_labels
from gitops.specs import Flavor, FleetSpec, TenantSpec

API = "kueue.x-k8s.io/v1beta2"
# Resources every pod requests, covered by every flavor with the namespace's whole budget (the
# ResourceQuota bounds them). ephemeral-storage too: the LimitRange gives every container a
# request for it, and Kueue refuses a workload that requests a resource its ClusterQueue does
# not cover ("resource ... unavailable in ClusterQueue", kubernetes-sigs/kueue
# pkg/scheduler/flavorassigner; KEP-5800 proposes per-queue exclusion for this reason).
NAMESPACE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
TOPOLOGY = "default"
# A pod set's explicit request for topology-aware scheduling without constraints (kueue v0.19.2
# apis/kueue/v1beta2/topology_types.go PodSetUnconstrainedTopologyAnnotation).
TAS_REQUEST_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
# Pools topology-aware scheduling can place pods on (see the module docstring).
TOPOLOGY_MODES = ("whole", "mig")
# WorkloadPriorityClasses: name, value, description.
PRIORITY_CLASSES = (
    ("inference-critical", 1000, "Production model endpoints; preempts training and batch."),
    ("training", 500, "Fine-tuning and training jobs."),
    ("batch-low", 100, "Evaluation and batch work that yields to everything else."),
)
INFERENCE_PRIORITY = "inference-critical"
# The priority classes (pod PriorityClass and Kueue WorkloadPriorityClass alike) a tenant's pods
# may name, by trust level; model servers may always name INFERENCE_PRIORITY (see
# gitops.render.kyverno). On shared nodes a pod naming it would preempt other tenants' pods, on
# the node (kube-scheduler) and in the queue (Kueue). Dedicated tenants still share nodes (their
# own nodes are issue 29), so for now they get the same.
TRUST_PRIORITIES = {
    "shared": ("training", "batch-low"),
    "dedicated": ("training", "batch-low"),
}
# Borrowers may preempt other queues' workloads up to this priority (training).
BORROW_PREEMPT_THRESHOLD = 500


def topology_enabled(flavor: Flavor) -> bool:
    """Whether the flavor's ResourceFlavor names the Topology (see the module docstring):
    whole-GPU and MIG pools unless the fleet turns it off, never HAMi or DRA pools."""
    return flavor.mode in TOPOLOGY_MODES and flavor.topology is not False


def tas_resources(tenant: TenantSpec, fleet: FleetSpec) -> tuple[str, ...]:
    """The GPU resources the tenant's queue offers only on topology-aware flavors, whose pods
    must ask for TAS explicitly (see the module docstring), sorted. A resource it has on both
    kinds of flavor is left out: its pods then use the flavors without topology."""
    aware: set[str] = set()
    plain: set[str] = set()
    for share in tenant.shares:
        flavor = fleet.flavor(share.flavor)
        if flavor is None:
            continue
        (aware if topology_enabled(flavor) else plain).update(resources.kueue_resources(share))
    return tuple(sorted(aware - plain))


def resource_flavor(flavor: Flavor, *, reserved_for: str = "") -> dict[str, Any]:
    """The flavor's ResourceFlavor; ``reserved_for`` a tenant's own flavor of its reserved
    nodes (``gitops.render.reservations``), whose pods also tolerate the reservation taint."""
    tolerations = [{"key": flavor.taint_key, "operator": "Exists", "effect": "NoSchedule"}]
    if reserved_for:
        tolerations.append(reservations.toleration(reserved_for))
    spec: dict[str, Any] = {
        "nodeLabels": pool_labels(flavor),
        # Kueue adds these to admitted pods, so GPU pods need not tolerate the taint themselves.
        "tolerations": tolerations,
    }
    if topology_enabled(flavor):
        spec["topologyName"] = TOPOLOGY
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": metadata(flavor.name, tenant=reserved_for or None),
        "spec": spec,
    }


def topology(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": metadata(TOPOLOGY),
        "spec": {"levels": [{"nodeLabel": level} for level in fleet.topology_levels]},
    }


def cohort(fleet: FleetSpec) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Cohort", "metadata": metadata(fleet.cohort), "spec": {}}


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata(name),
            "value": value,
            "description": description,
        }
        for name, value, description in PRIORITY_CLASSES
    ]


def fleet_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Everything Kueue needs before any tenant queue: flavors, topology, cohort, priorities."""
    objs = [resource_flavor(flavor) for flavor in fleet.flavors]
    if any(topology_enabled(flavor) for flavor in fleet.flavors):
        objs.append(topology(fleet))
    objs.append(cohort(fleet))
    objs.extend(priority_classes())
    return objs


def _namespace_entries(tenant: TenantSpec) -> list[dict[str, Any]]:
    return [
        {"name": "cpu", "nominalQuota": str(tenant.cpu_quota)},
        {"name": "memory", "nominalQuota": f"{tenant.memory_gib}Gi"},
        {"name": "ephemeral-storage", "nominalQuota": f"{tenant.ephemeral_storage_gib}Gi"},
    ]


def _resource_group(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any] | None:
    nominal: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    borrowing: dict[str, dict[str, int | None]] = defaultdict(dict)
    lending: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    lending_limited: dict[str, set[str]] = defaultdict(set)
    for share in tenant.shares:
        amounts = resources.kueue_resources(share)
        for name, amount in amounts.items():
            nominal[share.flavor][name] += amount
        limits = borrowing[share.flavor]
        if share.borrowing_limit is None:
            for name in amounts:
                limits[name] = None
        else:
            for name, amount in resources.kueue_limit(share, share.borrowing_limit).items():
                current = limits.get(name, 0)
                limits[name] = None if current is None else current + amount
        if share.lending_limit is None:
            lent = amounts
        else:
            lent = resources.kueue_limit(share, share.lending_limit)
            lending_limited[share.flavor].update(lent)
        for name, amount in lent.items():
            lending[share.flavor][name] += amount
    own = reservations.tenant_flavors(tenant, fleet)
    if not nominal and not own:
        return None
    gpu_names = sorted(
        {name for amounts in nominal.values() for name in amounts}
        | ({resources.GPU} if own else set())
    )
    covered = [*NAMESPACE_RESOURCES, *gpu_names]
    flavors = []
    # The tenant's own nodes first: Kueue tries a group's flavors in order.
    for flavor, gpus in own:
        entries = _namespace_entries(tenant)
        for name in gpu_names:
            if name == resources.GPU:
                # No other queue lists the flavor: nothing to borrow, nobody to lend to.
                quota = {"nominalQuota": str(gpus), "borrowingLimit": "0", "lendingLimit": "0"}
                entries.append({"name": name, **quota})
            else:
                entries.append({"name": name, "nominalQuota": "0"})
        flavors.append({"name": flavor.name, "resources": entries})
    for flavor in fleet.flavors:
        if flavor.name not in nominal:
            continue
        entries = _namespace_entries(tenant)
        for name in gpu_names:
            amount = nominal[flavor.name].get(name, 0)
            entry: dict[str, Any] = {"name": name, "nominalQuota": str(amount)}
            if amount:
                limit = borrowing[flavor.name].get(name)
                if limit is not None:
                    entry["borrowingLimit"] = str(limit)
                # Lending everything is Kueue's default; a limit is written once a share sets one.
                if name in lending_limited[flavor.name]:
                    entry["lendingLimit"] = str(min(lending[flavor.name][name], amount))
            entries.append(entry)
        flavors.append({"name": flavor.name, "resources": entries})
    return {"coveredResources": covered, "flavors": flavors}


def admissible(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, int]:
    """The most of each GPU resource Kueue may admit for the tenant's queue, over its flavors:
    nominal quota plus the borrowing limit, or the flavor's whole pool where borrowing has no
    limit (a queue can never borrow more than the pool holds)."""
    totals: dict[str, int] = defaultdict(int)
    group = _resource_group(tenant, fleet)
    for entry in group["flavors"] if group else []:
        flavor = fleet.flavor(entry["name"])
        for resource in entry["resources"]:
            name = resource["name"]
            if name in NAMESPACE_RESOURCES:
                continue
            nominal = int(resource["nominalQuota"])
            if flavor is None or "borrowingLimit" in resource:
                # A flavor of the tenant's own nodes always has a borrowing limit (0).
                totals[name] += nominal + int(resource["borrowingLimit"])
            else:
                totals[name] += max(nominal, resources.flavor_capacity(flavor, name))
    return dict(totals)


def _preemption(fleet: FleetSpec) -> dict[str, Any]:
    preemption: dict[str, Any] = {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
    }
    if not fleet.fair_sharing:
        preemption["borrowWithinCohort"] = {
            "policy": "LowerPriority",
            "maxPriorityThreshold": BORROW_PREEMPT_THRESHOLD,
        }
    return preemption


def cluster_queue(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cohortName": fleet.cohort,
        "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant.slug}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": _preemption(fleet),
    }
    if fleet.fair_sharing:
        spec["fairSharing"] = {"weight": str(tenant.fair_share_weight)}
    group = _resource_group(tenant, fleet)
    if group is not None:
        spec["resourceGroups"] = [group]
    until = sorted((share.name, share.until) for share in tenant.shares if share.until)
    annotations = (
        {UNTIL_ANNOTATION: ",".join(f"{name}={day}" for name, day in until)} if until else None
    )
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": metadata(tenant.slug, tenant=tenant.slug, annotations=annotations),
        "spec": spec,
    }


def local_queue(tenant: TenantSpec) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": metadata(LOCAL_QUEUE, tenant.slug, tenant=tenant.slug),
        "spec": {"clusterQueue": tenant.slug},
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    own = [
        resource_flavor(flavor, reserved_for=tenant.slug)
        for flavor, _ in reservations.tenant_flavors(tenant, fleet)
    ]
    return [*own, cluster_queue(tenant, fleet), local_queue(tenant)]
