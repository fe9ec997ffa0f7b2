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
- admission assigns, per resource group, the first flavor (in the ClusterQueue's order) where
  every requested resource of the group fits the nominal quota, or the nominal quota plus what
  it may borrow from its cohort (unused lendable quota of the other ClusterQueues, within its
  own ``borrowingLimit``). A requested resource that no group covers makes the workload
  inadmissible; so does a missing LocalQueue or ClusterQueue: the pod then stays gated.

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
PodScheduled condition), no preemption, no fair sharing, and topology placement only checks
that some single node fits (no domain packing or required levels).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from simulator.admission import pod_usage, quantity
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
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
        """Try to admit a gated pod; on success ``pod`` is changed as Kueue changes it."""
        metadata = as_dict(pod.get("metadata"))
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        decision = self._assign(pod)
        if isinstance(decision, str):
            self.pending[key] = decision
            return False
        cluster_queue, flavor = decision
        self.pending.pop(key, None)
        spec = pod.setdefault("spec", {})
        flavor_spec = as_dict(flavor.get("spec"))
        selector = as_dict(spec.get("nodeSelector"))
        selector.update({str(k): str(v) for k, v in as_dict(flavor_spec.get("nodeLabels")).items()})
        if selector:
            spec["nodeSelector"] = selector
        tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
        tolerations += [t for t in as_list(flavor_spec.get("tolerations")) if t not in tolerations]
        if tolerations:
            spec["tolerations"] = tolerations
        spec["schedulingGates"] = [
            g
            for g in as_list(spec.get("schedulingGates"))
            if as_dict(g).get("name") != ADMISSION_GATE
        ]
        if not spec["schedulingGates"]:
            del spec["schedulingGates"]
        flavor_name = str(as_dict(flavor.get("metadata")).get("name", ""))
        metadata.setdefault("annotations", {})[ADMITTED_ANNOTATION] = (
            f"{cluster_queue}/{flavor_name}"
        )
        pod["metadata"] = metadata
        return True

    def _assign(self, pod: Mapping[str, Any]) -> tuple[str, JsonObject] | str:
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
        wanted = {
            key.removeprefix("requests."): value
            for key, value in pod_usage(pod).items()
            if key.startswith("requests.") and value > 0
        }
        groups = [
            as_dict(g) for g in as_list(as_dict(cluster_queue.get("spec")).get("resourceGroups"))
        ]
        for resource in sorted(wanted):
            if not any(resource in as_list(g.get("coveredResources")) for g in groups):
                return (
                    "couldn't assign flavors to pod set main: resource "
                    f"{resource} unavailable in ClusterQueue"
                )
        tas_only = all(
            self._topology_name(str(as_dict(entry).get("name", "")))
            for group in groups
            for entry in as_list(group.get("flavors"))
        )
        chosen: JsonObject | None = None
        reasons = []
        for group in groups:
            covered = [str(r) for r in as_list(group.get("coveredResources"))]
            needed = {r: wanted[r] for r in covered if r in wanted}
            if not needed:
                continue
            for entry in as_list(group.get("flavors")):
                entry = as_dict(entry)
                flavor_name = str(entry.get("name", ""))
                flavor = self.store.get(RESOURCE_FLAVORS, "", flavor_name)
                if flavor is None:
                    reasons.append(f"flavor {flavor_name} not found")
                    continue
                tas, short = self._tas_match(pod, flavor, covered, wanted, tas_only)
                if short is None:
                    short = self._shortfall(cq_name, cluster_queue, flavor_name, entry, needed)
                if short is None and tas:
                    short = self._topology_shortfall(flavor, wanted)
                if short is None:
                    chosen = flavor
                    break
                reasons.append(short)
            if chosen is None:
                return "couldn't assign flavors to pod set main: " + ", ".join(reasons)
        if chosen is None:
            return "couldn't assign flavors to pod set main: no resource group covers the pod"
        return cq_name, chosen

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

    def _usage(self, cluster_queue: str, flavor: str) -> dict[str, Decimal]:
        used: dict[str, Decimal] = {}
        for other in self.store.list(PODS):
            annotations = as_dict(as_dict(other.get("metadata")).get("annotations"))
            if annotations.get(ADMITTED_ANNOTATION) != f"{cluster_queue}/{flavor}":
                continue
            if as_dict(other.get("status")).get("phase") in ("Succeeded", "Failed"):
                continue
            for key, value in pod_usage(other).items():
                if key.startswith("requests."):
                    name = key.removeprefix("requests.")
                    used[name] = used.get(name, Decimal(0)) + value
        return used

    def _shortfall(
        self,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        flavor: str,
        entry: Mapping[str, Any],
        needed: Mapping[str, Decimal],
    ) -> str | None:
        quotas = {str(as_dict(r).get("name")): as_dict(r) for r in as_list(entry.get("resources"))}
        used = self._usage(cq_name, flavor)
        cohort = str(as_dict(cluster_queue.get("spec")).get("cohortName") or "")
        for resource, amount in sorted(needed.items()):
            quota = quotas.get(resource, {})
            nominal = quantity(quota.get("nominalQuota", 0))
            room = nominal - used.get(resource, Decimal(0))
            if amount <= room:
                continue
            borrow = self._borrowable(cq_name, cohort, flavor, resource) if cohort else Decimal(0)
            if "borrowingLimit" in quota:
                borrow = min(borrow, quantity(quota["borrowingLimit"]))
            if amount > room + borrow:
                return f"insufficient quota for {resource} in flavor {flavor}"
        return None

    def _borrowable(self, own: str, cohort: str, flavor: str, resource: str) -> Decimal:
        """Unused lendable quota of the cohort's other ClusterQueues for one flavor/resource."""
        total = Decimal(0)
        for other in self.store.list(CLUSTER_QUEUES):
            name = str(as_dict(other.get("metadata")).get("name", ""))
            spec = as_dict(other.get("spec"))
            if name == own or spec.get("cohortName") != cohort:
                continue
            for group in as_list(spec.get("resourceGroups")):
                for entry in as_list(as_dict(group).get("flavors")):
                    if as_dict(entry).get("name") != flavor:
                        continue
                    for quota in as_list(as_dict(entry).get("resources")):
                        quota = as_dict(quota)
                        if quota.get("name") != resource:
                            continue
                        nominal = quantity(quota.get("nominalQuota", 0))
                        lendable = quantity(quota.get("lendingLimit", quota.get("nominalQuota", 0)))
                        used = self._usage(name, flavor).get(resource, Decimal(0))
                        total += max(min(lendable, nominal - used), Decimal(0))
        return total
