"""Kueue as it acts on pods: the queue webhook and a small quota scheduler.

Read from kubernetes-sigs/kueue v0.19.2 and its documentation:

- LocalQueueDefaulting (stable since v0.17, ``site/content/en/docs/tasks/manage/
  enforce_job_management/setup_default_local_queue.md``): a workload without
  ``kueue.x-k8s.io/queue-name`` in a namespace that has a LocalQueue named ``default`` gets
  that label. Namespaces Kueue does not manage are left alone
  (``managedJobsNamespaceSelector`` excludes ``kube-system`` and ``kueue-system`` by default);
- the pod integration gates every queued pod with the ``kueue.x-k8s.io/admission`` scheduling
  gate (``pkg/controller/jobs/pod/pod_webhook.go``) and removes it once the pod's workload is
  admitted, after adding the assigned ResourceFlavor's ``nodeLabels`` to the node selector
  and its ``tolerations`` (``pkg/podset``);
- admission (``pkg/scheduler/scheduler.go`` ``nominate``, ``pkg/scheduler/flavorassigner``):
  the workload's namespace must match the ClusterQueue's ``namespaceSelector`` (null selects
  nothing); a ClusterQueue naming a missing flavor admits nothing; a requested resource no
  resource group covers makes the workload inadmissible (a zero request is ignored). Each
  resource group gets a flavor, tried in the ClusterQueue's order: a flavor is skipped when
  it fails the TAS rules below, has a ``nodeTaints`` entry the pod's and the flavor's own
  tolerations do not tolerate, or does not match the pod's node selector or required node
  affinity on the flavor's own label keys; then every requested resource of the group is
  checked against the queue's quota, with cohort borrowing, ``borrowingLimit`` and
  ``lendingLimit`` as ``pkg/cache/scheduler/resource_node.go`` counts them. The first flavor
  that fits is taken (borrowing or not); the pending reason is Kueue's message, its reasons
  sorted. The pod's assignment (ClusterQueue, flavor per resource) is kept on the pod, as a
  Workload's ``status.admission`` keeps it; ``pods`` counts where a queue covers it;
- topology-aware scheduling (TAS), which flavors a pod may use (Kueue v0.19.2
  ``pkg/scheduler/flavorassigner/tas_flavorassigner.go`` ``checkPodSetAndFlavorMatchForTAS``):
  a pod requests TAS explicitly with a ``kueue.x-k8s.io/podset-required-topology``,
  ``-preferred-topology`` or ``-unconstrained-topology`` annotation (any value:
  ``pkg/controller/jobframework/tas.go``, ``pkg/workload/workload.go``
  ``IsExplicitlyRequestingTAS``), and implicitly when *every* flavor of its ClusterQueue has
  ``topologyName`` (``pkg/cache/scheduler/clusterqueue.go`` ``isTASOnly``). A pod that
  requests no TAS skips every flavor with ``topologyName`` ("supports only
  TopologyAwareScheduling"), so in a ClusterQueue that mixes TAS and non-TAS flavors a pod
  without the annotation can never use the TAS ones; a pod that requests TAS explicitly skips a
  flavor without ``topologyName`` that covers any resource it requests ("does not support
  TopologyAwareScheduling") and one whose Topology lacks the requested level;
- where TAS applies (``pkg/cache/scheduler/tas_flavor_snapshot.go``) the pod must fit on one
  node of the flavor that carries every level label of the Topology (nodes without them are
  left out), counted against that node's *allocatable* less what its pods request. A resource
  no node advertises, such as HAMi's ``gpumem``/``gpucores`` (scheduler-extender resources,
  absent from allocatable), never fits.

Simplified: no Workload objects (the pending reason is kept here and shown on the pod's
PodScheduled condition), one pod set per workload (a pod), no preemption (a flavor that
would need it is only tried after the others, and the pod waits), no fair sharing, no
``flavorFungibility`` other than the default, cohorts one level deep without quota of their
own, admission one pod at a time (no scheduling cycle), and topology placement only checks
that some single node fits (no domain packing or required levels).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from simulator.admission import pod_usage, quantity
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    JsonObject,
    Store,
    as_dict,
    as_list,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
DEFAULT_QUEUE = "default"
UNMANAGED_NAMESPACES = frozenset({"kube-system", "kueue-system"})
# Where the simulator remembers an admission ("<clusterqueue>/<flavor>"), standing in for the
# Workload object Kueue would keep.
ADMITTED_ANNOTATION = "sim.ai-factory.io/kueue-admission"


def gated(pod: Mapping[str, Any]) -> bool:
    gates = as_list(as_dict(pod.get("spec")).get("schedulingGates"))
    return any(as_dict(g).get("name") == ADMISSION_GATE for g in gates)


class Kueue:
    """The webhook (``mutate``) and the scheduler (``admit``) over the simulator's store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # (namespace, pod) -> why its workload is not admitted yet.
        self.pending: dict[tuple[str, str], str] = {}

    def mutate(self, pod: JsonObject) -> None:
        metadata = pod.setdefault("metadata", {})
        namespace = str(metadata.get("namespace") or "default")
        if namespace in UNMANAGED_NAMESPACES:
            return
        labels = metadata.setdefault("labels", {})
        if QUEUE_LABEL not in labels and self.store.get(LOCAL_QUEUES, namespace, DEFAULT_QUEUE):
            labels[QUEUE_LABEL] = DEFAULT_QUEUE
        if QUEUE_LABEL in labels and not gated(pod):
            spec = pod.setdefault("spec", {})
            spec["schedulingGates"] = [
                *as_list(spec.get("schedulingGates")),
                {"name": ADMISSION_GATE},
            ]

    # --- admission -----------------------------------------------------------------------------

    def admit(self, pod: JsonObject) -> bool:
        """Try to admit a gated pod; on success ``pod`` is changed as Kueue changes it: the
        assigned flavors' ``nodeLabels`` join its node selector and their ``tolerations`` its
        tolerations (kueue v0.19.2 ``pkg/podset`` ``FromAssignment``), the gate goes."""
        metadata = as_dict(pod.get("metadata"))
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        decision = self._assign(pod)
        if isinstance(decision, str):
            self.pending[key] = decision
            return False
        cluster_queue, assigned = decision
        self.pending.pop(key, None)
        spec = pod.setdefault("spec", {})
        selector = as_dict(spec.get("nodeSelector"))
        tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
        for flavor_name in dict.fromkeys(assigned.values()):
            flavor_spec = as_dict(
                as_dict(self.store.get(RESOURCE_FLAVORS, "", flavor_name)).get("spec")
            )
            labels = as_dict(flavor_spec.get("nodeLabels"))
            selector.update({str(k): str(v) for k, v in labels.items()})
            tolerations += [
                t for t in as_list(flavor_spec.get("tolerations")) if t not in tolerations
            ]
        if selector:
            spec["nodeSelector"] = selector
        if tolerations:
            spec["tolerations"] = tolerations
        spec["schedulingGates"] = [
            g
            for g in as_list(spec.get("schedulingGates"))
            if as_dict(g).get("name") != ADMISSION_GATE
        ]
        if not spec["schedulingGates"]:
            del spec["schedulingGates"]
        metadata.setdefault("annotations", {})[ADMITTED_ANNOTATION] = admission_value(
            cluster_queue, assigned
        )
        pod["metadata"] = metadata
        return True

    def _assign(self, pod: Mapping[str, Any]) -> tuple[str, dict[str, str]] | str:
        """(ClusterQueue, flavor per resource) for the pod's pod set ``main``, or why not."""
        metadata = as_dict(pod.get("metadata"))
        namespace = str(metadata.get("namespace", ""))
        queue = str(as_dict(metadata.get("labels")).get(QUEUE_LABEL, ""))
        local = self.store.get(LOCAL_QUEUES, namespace, queue)
        if local is None:
            return f"LocalQueue {queue} doesn't exist"
        cq_name = str(as_dict(local.get("spec")).get("clusterQueue", ""))
        cluster_queue = self.store.get(CLUSTER_QUEUES, "", cq_name)
        if cluster_queue is None:
            return f"ClusterQueue {cq_name} doesn't exist"
        spec = as_dict(cluster_queue.get("spec"))
        groups = [as_dict(g) for g in as_list(spec.get("resourceGroups"))]
        if any(
            self.store.get(RESOURCE_FLAVORS, "", str(as_dict(entry).get("name", ""))) is None
            for group in groups
            for entry in as_list(group.get("flavors"))
        ):
            # pkg/cache/scheduler/clusterqueue.go: a ClusterQueue naming a missing flavor is
            # inactive (FlavorNotFound), and the scheduler admits nothing to it.
            return f"ClusterQueue {cq_name} is inactive"
        # pkg/workload/resources.go ValidateAdmissibility: the workload's namespace must exist
        # and match the ClusterQueue's namespaceSelector (null selects nothing).
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            return (
                f'workload namespace "{namespace}" does not exist: '
                f'namespaces "{namespace}" not found'
            )
        ns_labels = as_dict(as_dict(ns.get("metadata")).get("labels"))
        if not label_selector_matches(spec.get("namespaceSelector"), ns_labels):
            return "workload namespace doesn't match ClusterQueue selector"
        covered = {str(r) for g in groups for r in as_list(g.get("coveredResources"))}
        requests = {
            key.removeprefix("requests."): value
            for key, value in pod_usage(pod).items()
            if key.startswith("requests.")
        }
        if "pods" in covered:
            requests["pods"] = Decimal(1)  # one pod; counted where the queue covers pods
        tas_only = all(
            self._topology_name(str(as_dict(entry).get("name", "")))
            for group in groups
            for entry in as_list(group.get("flavors"))
        )
        assigned: dict[str, str] = {}
        reasons: list[str] = []
        fits = True
        # flavorassigner.go ``assignFlavors``: resource by resource (kueue iterates a map or a
        # hash-ordered slice; sorted here), each resource group once.
        for resource, amount in sorted(requests.items()):
            group = next(
                (g for g in groups if resource in as_list(g.get("coveredResources"))), None
            )
            if group is None:
                if amount == 0:
                    continue  # a zero request of a resource the queue lacks (#8079)
                reasons = [f"resource {resource} unavailable in ClusterQueue"]
                fits = False
                break
            if resource in assigned:
                continue
            needed = {
                r: v for r, v in requests.items() if r in as_list(group.get("coveredResources"))
            }
            flavors, why, fit = self._find_flavor(
                pod, cq_name, cluster_queue, group, needed, requests, tas_only
            )
            if not flavors:
                reasons = why  # a group without any flavor: its reasons alone
                fits = False
                break
            assigned.update(flavors)
            if not fit:
                fits = False
                reasons += why
        if not fits or not assigned:
            if not reasons:
                reasons = ["no resource group covers the pod"]
            # Status.Message: the reasons sorted, joined with ", ".
            return "couldn't assign flavors to pod set main: " + ", ".join(sorted(reasons))
        return cq_name, assigned

    def _find_flavor(
        self,
        pod: Mapping[str, Any],
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        group: Mapping[str, Any],
        needed: Mapping[str, Decimal],
        requests: Mapping[str, Decimal],
        tas_only: bool,
    ) -> tuple[dict[str, str], list[str], bool]:
        """``findFlavorForPodSets``: (flavor per resource of the group, reasons, whether it fits).

        Flavors are tried in the ClusterQueue's order. One that fails ``checkFlavorForPodSets``
        (missing, TAS mismatch, an untolerated taint, node affinity) or exceeds the maximum
        capacity (NoFit) is skipped; one that fits, borrowing or not, ends the search (the
        default ``whenCanBorrow: MayStopSearch``); one that would need preemption is kept as
        the best so far and the next is tried (the default ``whenCanPreempt: TryNextFlavor``).
        The simulator never preempts, so a best that needs preemption leaves the pod pending.
        """
        covered = [str(r) for r in as_list(group.get("coveredResources"))]
        reasons: list[str] = []
        best: dict[str, str] = {}
        usage = self._usage()
        for entry in as_list(group.get("flavors")):
            entry = as_dict(entry)
            name = str(entry.get("name", ""))
            flavor = self.store.get(RESOURCE_FLAVORS, "", name)
            if flavor is None:
                reasons.append(f"flavor {name} not found")
                continue
            # The pod spec's requests: ``pods`` is a quota resource, not a container's.
            spec_requests = {r: v for r, v in requests.items() if r != "pods"}
            tas, mismatch = self._tas_match(pod, flavor, covered, spec_requests, tas_only)
            mismatch = mismatch or _flavor_mismatch(pod, flavor)
            if mismatch is not None:
                reasons.append(mismatch)
                continue
            mode = FIT
            for resource, amount in sorted(needed.items()):
                quota = next(
                    (
                        as_dict(r)
                        for r in as_list(entry.get("resources"))
                        if as_dict(r).get("name") == resource
                    ),
                    {},
                )
                resource_mode, why = self._fits(
                    cq_name, cluster_queue, name, resource, amount, quota, usage
                )
                if why:
                    reasons.append(why)
                mode = min(mode, resource_mode)
            if mode == FIT and tas:
                short = self._topology_shortfall(flavor, spec_requests)
                if short is not None:
                    reasons.append(short)
                    mode = PREEMPT
            if mode == FIT:
                return {r: name for r in needed}, [], True
            if mode == PREEMPT and not best:
                best = {r: name for r in needed}
        return best, reasons, False

    def _topology_name(self, flavor_name: str) -> str:
        flavor = self.store.get(RESOURCE_FLAVORS, "", flavor_name)
        name = as_dict(as_dict(flavor).get("spec")).get("topologyName") if flavor else None
        return name if isinstance(name, str) else ""

    def _tas_match(
        self,
        pod: Mapping[str, Any],
        flavor: Mapping[str, Any],
        covered: list[str],
        wanted: Mapping[str, Decimal],
        tas_only: bool,
    ) -> tuple[bool, str | None]:
        """(whether TAS places the pod on this flavor, why the flavor is skipped or None), as
        kueue v0.19.2 tas_flavorassigner.go ``checkPodSetAndFlavorMatchForTAS``."""
        annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
        explicit = any(
            key in annotations
            for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY)
        )
        flavor_name = str(as_dict(flavor.get("metadata")).get("name", ""))
        topology_name = as_dict(flavor.get("spec")).get("topologyName")
        if not explicit and not tas_only:
            if topology_name:
                return False, (f'Flavor "{flavor_name}" supports only TopologyAwareScheduling')
            return False, None
        if not explicit:
            return True, None  # TAS-only ClusterQueue: implied, every flavor matches
        if not topology_name:
            if any(resource in wanted for resource in covered):
                return False, f'Flavor "{flavor_name}" does not support TopologyAwareScheduling'
            return False, None
        level = annotations.get(REQUIRED_TOPOLOGY, annotations.get(PREFERRED_TOPOLOGY))
        if level is not None:
            topology = self.store.get(TOPOLOGIES, "", str(topology_name))
            levels = [
                as_dict(item).get("nodeLabel")
                for item in as_list(as_dict(as_dict(topology).get("spec")).get("levels"))
            ]
            if level not in levels:
                return False, f'Flavor "{flavor_name}" does not contain the requested level'
        return True, None

    def _topology_shortfall(
        self, flavor: Mapping[str, Any], wanted: Mapping[str, Decimal]
    ) -> str | None:
        """Why a topology-aware flavor cannot place the pod on any node, or None."""
        spec = as_dict(flavor.get("spec"))
        name = spec.get("topologyName")
        if not isinstance(name, str) or not name:
            return None
        topology = self.store.get(TOPOLOGIES, "", name)
        levels = [
            str(as_dict(level).get("nodeLabel"))
            for level in as_list(as_dict(topology.get("spec") if topology else {}).get("levels"))
        ]
        selector = {str(k): str(v) for k, v in as_dict(spec.get("nodeLabels")).items()}
        requested: dict[str, dict[str, Decimal]] = {}
        for pod in self.store.list(PODS):
            bound = str(as_dict(pod.get("spec")).get("nodeName") or "")
            if bound and as_dict(pod.get("status")).get("phase") not in ("Succeeded", "Failed"):
                on_node = requested.setdefault(bound, {})
                for key, value in pod_usage(pod).items():
                    if key.startswith("requests."):
                        resource = key.removeprefix("requests.")
                        on_node[resource] = on_node.get(resource, Decimal(0)) + value
        for node in self.store.list(NODES):
            labels = as_dict(as_dict(node.get("metadata")).get("labels"))
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            if topology is None or any(level not in labels for level in levels):
                continue  # TAS leaves out nodes without the topology's labels
            allocatable = {
                str(k): quantity(v)
                for k, v in as_dict(as_dict(node.get("status")).get("allocatable")).items()
            }
            used = requested.get(str(as_dict(node.get("metadata")).get("name")), {})
            if all(
                allocatable.get(r, Decimal(0)) - used.get(r, Decimal(0)) >= amount
                for r, amount in wanted.items()
            ):
                return None
        return (
            f'topology "{name}" doesn\'t allow to fit any of 1 pod(s) in flavor '
            f"{as_dict(flavor.get('metadata')).get('name')}"
        )

    def _usage(self) -> dict[tuple[str, str, str], Decimal]:
        """What admitted pods hold: (ClusterQueue, flavor, resource) -> quantity."""
        used: dict[tuple[str, str, str], Decimal] = {}
        for other in self.store.list(PODS):
            annotations = as_dict(as_dict(other.get("metadata")).get("annotations"))
            admission = parse_admission(annotations.get(ADMITTED_ANNOTATION))
            if admission is None:
                continue
            if as_dict(other.get("status")).get("phase") in ("Succeeded", "Failed"):
                continue
            cq, flavors = admission
            requests = {
                key.removeprefix("requests."): value
                for key, value in pod_usage(other).items()
                if key.startswith("requests.")
            }
            requests["pods"] = Decimal(1)
            for resource, flavor in flavors.items():
                key = (cq, flavor, resource)
                used[key] = used.get(key, Decimal(0)) + requests.get(resource, Decimal(0))
        return used

    def _fits(
        self,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        flavor: str,
        resource: str,
        amount: Decimal,
        quota: Mapping[str, Any],
        usage: Mapping[tuple[str, str, str], Decimal],
    ) -> tuple[int, str]:
        """``fitsResourceQuota`` (flavorassigner.go) for one resource of one flavor: (FIT,
        PREEMPT or NOFIT, the reason in Kueue's words or "")."""
        available, potential = self._capacity(cq_name, cluster_queue, flavor, resource, usage)
        if amount > potential:
            return NOFIT, (
                f"insufficient quota for {resource} in flavor {flavor}, previously considered "
                f"podsets requests ({quantity_string(resource, Decimal(0))}) + current podset "
                f"request ({quantity_string(resource, amount)}) > maximum capacity "
                f"({quantity_string(resource, potential)})"
            )
        if amount <= available:
            return FIT, ""
        return PREEMPT, (
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{quantity_string(resource, amount - available)} more needed"
        )

    def _capacity(
        self,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        flavor: str,
        resource: str,
        usage: Mapping[tuple[str, str, str], Decimal],
    ) -> tuple[Decimal, Decimal]:
        """(available, potentialAvailable) of one ClusterQueue for one flavor and resource, as
        kueue v0.19.2 ``pkg/cache/scheduler/resource_node.go`` computes them for a ClusterQueue
        whose cohort is a root without quota of its own: the cohort's subtree quota is what
        its ClusterQueues lend (nominal less ``localQuota``, nominal less ``lendingLimit``), its
        usage what they use past their ``localQuota``; ``borrowingLimit`` caps what one
        ClusterQueue may take from it."""
        own = _quota(cluster_queue, flavor, resource)
        used = usage.get((cq_name, flavor, resource), Decimal(0))
        cohort = str(as_dict(cluster_queue.get("spec")).get("cohortName") or "")
        if not cohort:
            return own.nominal - used, own.nominal
        subtree = Decimal(0)
        cohort_usage = Decimal(0)
        for other in self.store.list(CLUSTER_QUEUES):
            if as_dict(other.get("spec")).get("cohortName") != cohort:
                continue
            name = str(as_dict(other.get("metadata")).get("name", ""))
            quota = _quota(other, flavor, resource)
            subtree += quota.nominal - quota.local
            other_used = usage.get((name, flavor, resource), Decimal(0))
            cohort_usage += max(Decimal(0), other_used - quota.local)
        parent = subtree - cohort_usage
        if own.borrowing_limit is not None:
            in_parent = max(Decimal(0), used - own.local)
            parent = min(own.nominal - own.local - in_parent + own.borrowing_limit, parent)
        available = max(Decimal(0), own.local - used) + parent
        potential = own.local + subtree
        if own.borrowing_limit is not None:
            potential = min(own.nominal + own.borrowing_limit, potential)
        return available, potential


FIT, PREEMPT, NOFIT = 2, 1, 0


def admission_value(cluster_queue: str, flavors: Mapping[str, str]) -> str:
    """The admission annotation: the ClusterQueue and the flavor of each resource, as a
    Workload's ``status.admission`` keeps them for its pod set."""
    return json.dumps({"clusterQueue": cluster_queue, "flavors": dict(flavors)}, sort_keys=True)


def parse_admission(value: object) -> tuple[str, dict[str, str]] | None:
    if not isinstance(value, str):
        return None
    try:
        loaded = json.loads(value)
    except ValueError:
        return None
    flavors = as_dict(as_dict(loaded).get("flavors"))
    return str(as_dict(loaded).get("clusterQueue", "")), {
        str(k): str(v) for k, v in flavors.items()
    }


@dataclass(frozen=True)
class _Quota:
    nominal: Decimal
    borrowing_limit: Decimal | None
    # ``localQuota``: what ``lendingLimit`` keeps from the cohort (resource_node.go).
    local: Decimal


def _quota(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> _Quota:
    for group in as_list(as_dict(cluster_queue.get("spec")).get("resourceGroups")):
        for entry in as_list(as_dict(group).get("flavors")):
            if as_dict(entry).get("name") != flavor:
                continue
            for quota in as_list(as_dict(entry).get("resources")):
                quota = as_dict(quota)
                if quota.get("name") != resource:
                    continue
                nominal = quantity(quota.get("nominalQuota", 0))
                borrowing = quota.get("borrowingLimit")
                lending = quota.get("lendingLimit")
                return _Quota(
                    nominal,
                    quantity(borrowing) if borrowing is not None else None,
                    max(Decimal(0), nominal - quantity(lending))
                    if lending is not None
                    else Decimal(0),
                )
    return _Quota(Decimal(0), None, Decimal(0))


def quantity_string(resource: str, value: Decimal) -> str:
    """``ResourceFormatter.ResourceQuantityString`` (kueue v0.19.2 pkg/resources): cpu as a
    milli quantity in DecimalSI, memory and ephemeral-storage in BinarySI when exact, anything
    else in DecimalSI, each in Kubernetes' canonical form (``3``, ``500m``, ``10Mi``, ``2k``)."""
    if resource in ("memory", "ephemeral-storage") and value == value.to_integral_value():
        number = int(value)
        for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
            if number and number % (1024**power) == 0:
                return f"{number // 1024**power}{suffix}"
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    number = int(value)
    for power, suffix in ((6, "E"), (5, "P"), (4, "T"), (3, "G"), (2, "M"), (1, "k")):
        if number and number % (1000**power) == 0:
            return f"{number // 1000**power}{suffix}"
    return str(number)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """k8s.io/api core/v1 ``Toleration.ToleratesTaint``."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and toleration.get("value", "") == taint.get("value", "")


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """One node selector requirement against labels (k8s.io/component-helpers nodeaffinity)."""
    key = str(requirement.get("key", ""))
    operator = requirement.get("operator")
    values = [str(v) for v in as_list(requirement.get("values"))]
    if operator == "In":
        return key in labels and str(labels[key]) in values
    if operator == "NotIn":
        return key not in labels or str(labels[key]) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, bound = int(str(labels[key])), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _flavor_mismatch(pod: Mapping[str, Any], flavor: Mapping[str, Any]) -> str | None:
    """``checkFlavorForPodSets`` beyond TAS: the flavor's first ``nodeTaints`` entry with
    effect NoSchedule or NoExecute that neither the pod's nor the flavor's own tolerations
    tolerate; then the pod's node selector and required node affinity, kept to the keys of the
    flavor's own ``nodeLabels`` (``flavorSelector``), against those labels."""
    spec = as_dict(pod.get("spec"))
    flavor_spec = as_dict(flavor.get("spec"))
    name = str(as_dict(flavor.get("metadata")).get("name", ""))
    tolerations = [
        as_dict(t)
        for t in [*as_list(spec.get("tolerations")), *as_list(flavor_spec.get("tolerations"))]
    ]
    for taint in (as_dict(t) for t in as_list(flavor_spec.get("nodeTaints"))):
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            # Go's %s of a corev1.Taint: {Key Value Effect TimeAdded}.
            shown = (
                f"{{{taint.get('key', '')} {taint.get('value', '')} {taint.get('effect')} <nil>}}"
            )
            return f"untolerated taint {shown} in flavor {name}"
    labels = {str(k): str(v) for k, v in as_dict(flavor_spec.get("nodeLabels")).items()}
    selector = {str(k): str(v) for k, v in as_dict(spec.get("nodeSelector")).items() if k in labels}
    if any(labels.get(k) != v for k, v in selector.items()):
        return f"flavor {name} doesn't match node affinity"
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms: list[list[JsonObject]] = []
    for term in as_list(required.get("nodeSelectorTerms")):
        kept = [
            as_dict(e)
            for e in as_list(as_dict(term).get("matchExpressions"))
            if as_dict(e).get("key") in labels
        ]
        if not kept:
            terms = []  # a term left empty matches any flavor: the terms are ORed
            break
        terms.append(kept)
    if terms and not any(all(_requirement_matches(e, labels) for e in term) for term in terms):
        return f"flavor {name} doesn't match node affinity"
    return None


def label_selector_matches(selector: object, labels: Mapping[str, Any]) -> bool:
    """``metav1.LabelSelectorAsSelector`` then ``Matches``: null selects nothing, ``{}``
    everything; matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) all hold."""
    if not isinstance(selector, dict):
        return False
    for key, value in as_dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    return all(
        _requirement_matches(as_dict(e), labels) for e in as_list(selector.get("matchExpressions"))
    )
