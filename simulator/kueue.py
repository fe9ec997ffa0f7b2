"""Kueue's scheduler over Workload objects: flavor assignment, quota reservation with cohort
borrowing, preemption (``preemption.py``), the queues' order and the queues' status.

Read from kubernetes-sigs/kueue v0.19.2 and its documentation:

- the webhooks (``kueue_webhooks.py``) queue pods, Jobs and JobSets; ``workloads.py`` builds
  their Workloads, ``jobs.py`` runs Jobs and JobSets once admitted and the pod integration
  (``Cluster``) lifts a pod's scheduling gate. Every admission goes through ``schedule`` and
  every quota in use is a Workload's ``status.admission``;
- queues (``pkg/cache/queue``, ``pkg/workload/ordering.go``): a pending workload waits in the
  ClusterQueue its LocalQueue names, ordered by priority then creation time (then name: the
  API's timestamps have seconds only). ``BestEffortFIFO`` (the default) lets an inadmissible
  workload step aside for the next; ``StrictFIFO`` blocks the queue behind its head;
- the cycle (``pkg/scheduler/scheduler.go`` ``schedule``, ``nominate``, ``processEntry``,
  ``makeClassicalIterator``): each ClusterQueue's head is nominated, the heads are tried
  not-borrowing first, then by priority and time; one that fits reserves quota
  (``SetQuotaReservation``, and ``Admitted`` at once: no AdmissionChecks are modelled); one
  that needs preemption evicts its targets and waits ("... Pending the preemption of N
  workload(s)"), to be admitted once they have released their quota; the others stay pending
  with the assigner's message (``QuotaReserved`` False, reason ``Pending``). Cycles repeat
  within a tick until every head was tried;
- admission checks (``pkg/workload/resources.go`` ``ValidateAdmissibility``,
  ``pkg/cache/scheduler/clusterqueue.go``): the workload's namespace must match the
  ClusterQueue's ``namespaceSelector`` (null selects nothing); a ClusterQueue naming a missing
  flavor is inactive and admits nothing;
- flavors (``pkg/scheduler/flavorassigner``): pod set by pod set, each resource group gets a
  flavor, tried in the ClusterQueue's order: a flavor is skipped when it fails the TAS rules
  below, has a ``nodeTaints`` entry the pod's and the flavor's own tolerations do not
  tolerate, or does not match the pod's node selector or required node affinity on the
  flavor's own label keys; then every requested resource of the group (count x the pod's
  requests, ``pods`` where covered) plus what earlier pod sets took of the same flavor is
  checked against the queue's quota, with cohort borrowing, ``borrowingLimit`` and
  ``lendingLimit`` as ``pkg/cache/scheduler/resource_node.go`` counts them. The first flavor
  that fits is taken (borrowing or not: ``whenCanBorrow: MayStopSearch``); one that would need
  preemption is remembered and the next tried (``whenCanPreempt: TryNextFlavor``). A requested
  resource no group covers makes the workload inadmissible (a zero request is ignored). The
  pending message is Kueue's, its reasons sorted;
- topology-aware scheduling (``tas_flavorassigner.go`` ``checkPodSetAndFlavorMatchForTAS``):
  a pod set requests TAS explicitly with a ``kueue.x-k8s.io/podset-required-topology``,
  ``-preferred-topology`` or ``-unconstrained-topology`` annotation (``pkg/workload``
  ``IsExplicitlyRequestingTAS``), implicitly when *every* flavor of its ClusterQueue has
  ``topologyName`` (``isTASOnly``). One that requests no TAS skips every flavor with
  ``topologyName`` ("supports only TopologyAwareScheduling"); one that requests TAS skips a
  flavor without it that covers a resource it requests ("does not support
  TopologyAwareScheduling") and one whose Topology lacks the requested level; where TAS
  applies (``tas_flavor_snapshot.go``) a pod must fit on one node of the flavor carrying every
  level label, against the node's allocatable less what its pods request (HAMi's
  ``gpumem``/``gpucores``, which no node advertises, never fit);
- admitted pods get the assigned flavors' ``nodeLabels`` and ``tolerations`` (``pkg/podset``
  ``FromAssignment``, ``Merge``);
- waitForPodsReady (``pods_ready.py``, configured by the manager's ConfigMap the platform
  applies): an admitted Job whose pods are not all ready within ``timeout``, or short of ready
  pods longer than ``recoveryTimeout`` after they were, is evicted (``PodsReadyTimeout``),
  its job stopped and its quota released; it queues again after its backoff (``Requeued``
  False until then), from the time of its eviction, and past ``backoffLimitCount`` requeues it
  is deactivated;
- status (``pkg/controller/core/clusterqueue_controller.go``, ``localqueue_controller.go``,
  ``pkg/cache/scheduler/fair_sharing.go``): per flavor and resource the reserved total and
  what is borrowed past the nominal quota, the counts of pending, reserving and admitted
  workloads, the ``Active`` condition, and with fair sharing the weighted share
  (``ceil(DRS / weight)``); written only when something changed.

Simplified: no AdmissionChecks, partial admission, workload slices or ``flavorFungibility``
other than the default; cohorts are one level deep and hold no quota of their own; a
ClusterQueue's flavors are tried without simulating preemption first (a flavor that would need
it is kept and the next tried, as the default ``TryNextFlavor``); topology placement only checks
that each pod fits some single node (no domain packing or required levels); the fair-sharing
scheduler orders heads as the classical one does (``fair_sharing_iterator.go`` is not modelled).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from simulator import pods_ready, preemption
from simulator.admission import pod_usage, quantity
from simulator.kueue_webhooks import (
    ADMISSION_GATE,
    DEFAULT_QUEUE,
    QUEUE_LABEL,
    UNMANAGED_NAMESPACES,
    gated,
    mutate_pod,
)
from simulator.store import (
    CLUSTER_QUEUES,
    COHORTS,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    JsonObject,
    Store,
    as_dict,
    as_list,
    key_of,
)
from simulator.workloads import (
    ADMITTED,
    EVICTED,
    REQUEUED,
    condition,
    evict,
    holds_quota,
    is_active,
    is_evicted,
    is_finished,
    is_pending,
    owner_of,
    per_pod_requests,
    reserve_quota,
    set_condition,
    unset_quota,
)
from simulator.workloads import usage as workload_usage

__all__ = [
    "ADMISSION_GATE",
    "DEFAULT_QUEUE",
    "QUEUE_LABEL",
    "UNMANAGED_NAMESPACES",
    "Assignment",
    "Kueue",
    "gated",
]

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
STRICT_FIFO = "StrictFIFO"
BACKOFF_MESSAGE = "The workload backoff was finished"
PENDING = "Pending"
FIT, PREEMPT, NOFIT = 2, 1, 0
# (ClusterQueue, flavor, resource) -> quantity held by admitted workloads.
Usage = dict[tuple[str, str, str], Decimal]


@dataclass
class PodSetAssignment:
    """One pod set's flavors and what it reserves (``kueue.PodSetAssignment``)."""

    name: str
    count: int
    flavors: dict[str, str]
    usage: dict[str, Decimal]


@dataclass
class Assignment:
    """The flavor assigner's answer for a workload: ``mode`` FIT, PREEMPT or NOFIT, ``message``
    why it does not fit, the (flavor, resource) pairs that need preemption."""

    cluster_queue: str
    pod_sets: list[PodSetAssignment]
    mode: int
    message: str = ""
    need_preemption: set[tuple[str, str]] = field(default_factory=set)
    borrows: bool = False

    def requests(self) -> dict[tuple[str, str], Decimal]:
        """(flavor, resource) -> total over the pod sets."""
        total: dict[tuple[str, str], Decimal] = {}
        for podset in self.pod_sets:
            for resource, amount in podset.usage.items():
                key = (podset.flavors[resource], resource)
                total[key] = total.get(key, Decimal(0)) + amount
        return total

    def to_api(self) -> JsonObject:
        """``status.admission`` (``Assignment.ToAPI``)."""
        return {
            "clusterQueue": self.cluster_queue,
            "podSetAssignments": [
                {
                    "name": podset.name,
                    "count": podset.count,
                    "flavors": dict(sorted(podset.flavors.items())),
                    "resourceUsage": {
                        resource: quantity_string(resource, amount)
                        for resource, amount in sorted(podset.usage.items())
                    },
                }
                for podset in self.pod_sets
            ],
        }


def queue_key(wl: Mapping[str, Any]) -> tuple[int, str, str]:
    """The order of a ClusterQueue's pending workloads (``queueOrderingFunc``): higher
    priority first, then older; the name last, for a deterministic order."""
    spec = as_dict(wl.get("spec"))
    metadata = as_dict(wl.get("metadata"))
    # ``GetQueueOrderTimestamp`` with the ``Eviction`` requeuing timestamp: a workload evicted
    # for its pods' readiness queues from the time of its eviction.
    evicted = condition(wl, EVICTED) or {}
    since = metadata.get("creationTimestamp")
    if evicted.get("status") == "True" and evicted.get("reason") == pods_ready.PODS_READY_TIMEOUT:
        since = evicted.get("lastTransitionTime")
    return (
        -int(spec.get("priority") or 0),
        str(since or ""),
        f"{metadata.get('namespace', '')}/{metadata.get('name', '')}",
    )


class Kueue:
    """The pod webhook (``mutate``), the scheduler (``schedule``) and the queues' status
    (``update_status``) over the simulator's store. ``fair_sharing`` is whether Kueue's
    Configuration has ``fairSharing`` (the portal renders it unless the fleet turns it off)."""

    def __init__(self, store: Store, *, fair_sharing: bool = True) -> None:
        self.store = store
        self.fair_sharing = fair_sharing
        # waitForPodsReady, from the manager's ConfigMap as the platform applied it.
        self.configuration = pods_ready.ConfigurationReader(store)

    @property
    def wait_for_pods_ready(self) -> pods_ready.WaitForPodsReady:
        return self.configuration.read()

    def mutate(self, pod: JsonObject) -> None:
        mutate_pod(self.store, pod)

    @staticmethod
    def quota(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> _Quota:
        """A ClusterQueue's quota of one flavor and resource."""
        return _quota(cluster_queue, flavor, resource)

    # --- queues --------------------------------------------------------------------------------

    def cluster_queue_of(self, wl: Mapping[str, Any]) -> str:
        """The ClusterQueue the workload's LocalQueue names ("" when there is none)."""
        namespace = str(as_dict(wl.get("metadata")).get("namespace", ""))
        queue = str(as_dict(wl.get("spec")).get("queueName", ""))
        local = self.store.get(LOCAL_QUEUES, namespace, queue)
        return str(as_dict(as_dict(local).get("spec")).get("clusterQueue", "")) if local else ""

    def pending(self, cq_name: str) -> list[JsonObject]:
        """The ClusterQueue's pending workloads in queue order (what the visibility API
        shows: ``Manager.PendingWorkloadsInfo``)."""
        return sorted(
            (
                wl
                for wl in self.store.list(WORKLOADS)
                if is_pending(wl) and self.cluster_queue_of(wl) == cq_name
            ),
            key=queue_key,
        )

    def reconcile_workloads(self, now: float) -> None:
        """The workload controller (``workload_controller.go`` ``Reconcile``): the PodsReady
        timeouts and the end of a requeue's backoff (``pods_ready.py``), then activation:
        ``DeactivationTarget`` sets ``spec.active: false``; that evicts a Workload (Evicted,
        reason Deactivated, "The workload is deactivated", with the target's reason as the
        underlying cause: ``DeactivatedDueTo<cause>``, "... due to <its message>"; its job is
        stopped by ``jobs.py`` or ``Cluster``), ``Requeued`` goes False with reason Deactivated
        and the ``requeueState`` is dropped; set true again, ``Requeued`` goes True
        (Reactivated) and the Workload queues again."""
        self.reconcile_pods_ready(now)
        for wl in self.store.list(WORKLOADS):
            requeued = condition(wl, REQUEUED) or {}
            target = condition(wl, pods_ready.DEACTIVATION_TARGET)
            if is_active(wl) and target is not None and target.get("status") == "True":
                wl = (
                    self.store.mutate(
                        WORKLOADS, *key_of(wl), lambda obj: obj["spec"].update(active=False)
                    )
                    or wl
                )
            if not is_active(wl) and not is_finished(wl) and not is_evicted(wl):

                def deactivate(obj: JsonObject) -> None:
                    message, cause = "The workload is deactivated", ""
                    found = condition(obj, pods_ready.DEACTIVATION_TARGET)
                    if found is not None:
                        cause = str(found.get("reason") or "")
                        message = f"{message} due to {found.get('message', '')}"
                        _remove_condition(obj, pods_ready.DEACTIVATION_TARGET)
                    evict(obj, "Deactivated", message, now, cause=cause)
                    set_condition(obj, REQUEUED, False, "Deactivated", message, now)
                    obj["status"].pop("requeueState", None)

                self.store.mutate(WORKLOADS, *key_of(wl), deactivate)
            elif not is_active(wl) and "requeueState" in as_dict(wl.get("status")):
                self.store.mutate(
                    WORKLOADS, *key_of(wl), lambda obj: obj["status"].pop("requeueState", None)
                )
            elif (
                is_active(wl)
                and requeued.get("status") == "False"
                # Also "DeactivatedDueTo<cause>", the reason the job reconciler copies from
                # the eviction (evict.go ``IsEvictedByDeactivation`` matches the prefix too).
                and str(requeued.get("reason") or "").startswith("Deactivated")
            ):
                self.store.mutate(
                    WORKLOADS,
                    *key_of(wl),
                    lambda obj: set_condition(
                        obj, REQUEUED, True, "Reactivated", "The workload was reactivated", now
                    ),
                )

    def reconcile_pods_ready(self, now: float) -> None:
        """``reconcileNotReadyTimeout`` for the Workloads of batch/v1 Jobs (the integration
        whose ``PodsReady`` ``jobs.py`` writes), and the end of a requeue's backoff."""
        config = self.wait_for_pods_ready
        for wl in self.store.list(WORKLOADS):
            if not is_active(wl) or is_finished(wl):
                continue
            requeued = condition(wl, REQUEUED) or {}
            state = as_dict(as_dict(wl.get("status")).get("requeueState"))
            if (
                requeued.get("status") == "False"
                and requeued.get("reason") == pods_ready.PODS_READY_TIMEOUT
                and pods_ready.seconds(state.get("requeueAt")) <= now
            ):
                self.store.mutate(WORKLOADS, *key_of(wl), lambda obj: _backoff_finished(obj, now))
                continue
            if is_evicted(wl) or owner_of(wl)[0] != JOBS.kind:
                continue
            wait, left = pods_ready.not_ready(
                condition(wl, ADMITTED), condition(wl, pods_ready.PODS_READY), config, now
            )
            if not wait or left > 0:
                continue
            limit = config.backoff_limit_count
            if limit is not None and int(state.get("count") or 0) + 1 > limit:
                self.store.mutate(
                    WORKLOADS,
                    *key_of(wl),
                    lambda obj: set_condition(
                        obj,
                        pods_ready.DEACTIVATION_TARGET,
                        True,
                        pods_ready.REQUEUING_LIMIT_EXCEEDED,
                        pods_ready.LIMIT_MESSAGE,
                        now,
                    ),
                )
                continue

            def time_out(obj: JsonObject, cause: str = wait) -> None:
                pods_ready.update_requeue_state(obj, config, now)
                message = f"Exceeded the PodsReady timeout {_key(obj)}"
                evict(obj, pods_ready.PODS_READY_TIMEOUT, message, now, cause=cause)

            self.store.mutate(WORKLOADS, *key_of(wl), time_out)

    # --- the cycle -----------------------------------------------------------------------------

    def usage(self, workloads: Iterable[Mapping[str, Any]] | None = None) -> Usage:
        """What admitted workloads hold, per ClusterQueue, flavor and resource."""
        used: Usage = {}
        for wl in self.store.list(WORKLOADS) if workloads is None else workloads:
            if not holds_quota(wl):
                continue
            cq = str(as_dict(as_dict(wl.get("status")).get("admission")).get("clusterQueue"))
            for (flavor, resource), amount in workload_usage(wl).items():
                key = (cq, flavor, resource)
                used[key] = used.get(key, Decimal(0)) + amount
        return used

    def schedule(self, now: float) -> list[str]:
        """Scheduling cycles until every head was tried; returns the keys
        (``namespace/name``) of the workloads admitted."""
        admitted: list[str] = []
        with self.store.lock:
            usage = self.usage()
            tried: set[str] = set()
            blocked: set[str] = set()
            while True:
                heads = self._heads(tried, blocked)
                if not heads:
                    break
                entries = []
                for cq_name, wl in heads:
                    decision = self.assign(wl, usage)
                    entries.append((cq_name, wl, decision))
                entries.sort(key=lambda e: (_borrows(e[2]), queue_key(e[1])))
                for cq_name, wl, _ in entries:
                    key = _key(wl)
                    tried.add(key)
                    # Assign again: an entry before this one may have taken the quota
                    # (``updateAssignmentIfNeeded``).
                    decision = self.assign(wl, usage)
                    message = decision if isinstance(decision, str) else decision.message
                    if isinstance(decision, Assignment) and decision.mode == FIT:
                        self._admit(wl, decision, usage, now)
                        admitted.append(key)
                        continue
                    if isinstance(decision, Assignment) and decision.mode == PREEMPT:
                        targets = preemption.targets(self, wl, decision, usage)
                        if targets:
                            preemption.issue(self, wl, targets, now)
                            message += f". Pending the preemption of {len(targets)} workload(s)"
                    self._pend(wl, message, now)
                    if self._strict(cq_name):
                        blocked.add(cq_name)
        return admitted

    def _heads(self, tried: set[str], blocked: set[str]) -> list[tuple[str, JsonObject]]:
        """Each ClusterQueue's first pending workload not tried in this tick; a StrictFIFO
        queue whose head could not be admitted gives none. Workloads whose LocalQueue or
        ClusterQueue is missing are heads of their own (nominate marks them inadmissible)."""
        queues: dict[str, list[JsonObject]] = {}
        for wl in self.store.list(WORKLOADS):
            if not is_pending(wl) or _key(wl) in tried or _backing_off(wl):
                continue
            cq_name = self.cluster_queue_of(wl)
            queues.setdefault(cq_name or f"?{_key(wl)}", []).append(wl)
        heads = []
        for name, waiting in sorted(queues.items()):
            if name in blocked:
                continue
            heads.append((name, min(waiting, key=queue_key)))
        return heads

    def _strict(self, cq_name: str) -> bool:
        cq = self.store.get(CLUSTER_QUEUES, "", cq_name)
        return as_dict(as_dict(cq).get("spec")).get("queueingStrategy") == STRICT_FIFO

    def _admit(self, wl: JsonObject, assignment: Assignment, usage: Usage, now: float) -> None:
        admission = assignment.to_api()
        self.store.mutate(WORKLOADS, *key_of(wl), lambda obj: reserve_quota(obj, admission, now))
        for (flavor, resource), amount in assignment.requests().items():
            key = (assignment.cluster_queue, flavor, resource)
            usage[key] = usage.get(key, Decimal(0)) + amount

    def _pend(self, wl: JsonObject, message: str, now: float) -> None:
        """``requeueAndUpdate``: QuotaReserved False, reason Pending, the message."""
        self.store.mutate(
            WORKLOADS, *key_of(wl), lambda obj: unset_quota(obj, PENDING, message, now)
        )

    # --- flavor assignment ---------------------------------------------------------------------

    def assign(self, wl: Mapping[str, Any], usage: Usage) -> Assignment | str:
        """The flavors of each pod set of ``wl`` against ``usage``, or why the workload cannot
        be considered at all."""
        namespace = str(as_dict(wl.get("metadata")).get("namespace", ""))
        queue = str(as_dict(wl.get("spec")).get("queueName", ""))
        local = self.store.get(LOCAL_QUEUES, namespace, queue)
        if local is None:
            return f"LocalQueue {queue} doesn't exist"
        cq_name = str(as_dict(local.get("spec")).get("clusterQueue", ""))
        cluster_queue = self.store.get(CLUSTER_QUEUES, "", cq_name)
        if cluster_queue is None:
            return f"ClusterQueue {cq_name} doesn't exist"
        if self._missing_flavors(cluster_queue):
            return f"ClusterQueue {cq_name} is inactive"
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            return (
                f'workload namespace "{namespace}" does not exist: '
                f'namespaces "{namespace}" not found'
            )
        spec = as_dict(cluster_queue.get("spec"))
        ns_labels = as_dict(as_dict(ns.get("metadata")).get("labels"))
        if not label_selector_matches(spec.get("namespaceSelector"), ns_labels):
            return "workload namespace doesn't match ClusterQueue selector"
        groups = [as_dict(g) for g in as_list(spec.get("resourceGroups"))]
        covered = {str(r) for g in groups for r in as_list(g.get("coveredResources"))}
        tas_only = all(
            self._topology_name(str(as_dict(entry).get("name", "")))
            for group in groups
            for entry in as_list(group.get("flavors"))
        )
        result = Assignment(cq_name, [], FIT)
        assumed: dict[tuple[str, str], Decimal] = {}
        for podset in (as_dict(p) for p in as_list(as_dict(wl.get("spec")).get("podSets"))):
            name = str(podset.get("name", ""))
            count = int(podset.get("count") or 1)
            excluded = self.configuration.excluded_prefixes()
            requests = {
                r: v * count
                for r, v in per_pod_requests(podset).items()
                if not r.startswith(excluded)
            }
            if "pods" in covered:
                requests["pods"] = Decimal(count)
            template = as_dict(podset.get("template"))
            flavors, mode, reasons, preempt = self._assign_pod_set(
                template, count, cq_name, cluster_queue, groups, requests, assumed, usage, tas_only
            )
            if mode != FIT and (result.mode == FIT or not result.message):
                result.message = f"couldn't assign flavors to pod set {name}: " + ", ".join(
                    sorted(reasons)
                )
            result.mode = min(result.mode, mode)
            if mode == NOFIT:
                return result
            result.need_preemption |= preempt
            kept = {r: v for r, v in requests.items() if r in flavors}
            result.pod_sets.append(PodSetAssignment(name, count, flavors, kept))
            for resource, amount in kept.items():
                key = (flavors[resource], resource)
                assumed[key] = assumed.get(key, Decimal(0)) + amount
        result.borrows = any(
            usage.get((cq_name, flavor, resource), Decimal(0)) + amount
            > _quota(cluster_queue, flavor, resource).nominal
            for (flavor, resource), amount in result.requests().items()
        )
        return result

    def _missing_flavors(self, cluster_queue: Mapping[str, Any]) -> list[str]:
        """``clusterqueue.go``: a ClusterQueue naming a missing flavor is inactive
        (FlavorNotFound), and the scheduler admits nothing to it."""
        return [
            str(as_dict(entry).get("name", ""))
            for group in as_list(as_dict(cluster_queue.get("spec")).get("resourceGroups"))
            for entry in as_list(as_dict(group).get("flavors"))
            if self.store.get(RESOURCE_FLAVORS, "", str(as_dict(entry).get("name", ""))) is None
        ]

    def _assign_pod_set(
        self,
        template: Mapping[str, Any],
        count: int,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        groups: list[JsonObject],
        requests: Mapping[str, Decimal],
        assumed: Mapping[tuple[str, str], Decimal],
        usage: Usage,
        tas_only: bool,
    ) -> tuple[dict[str, str], int, list[str], set[tuple[str, str]]]:
        """(flavor per resource, mode, reasons, resources needing preemption) of one pod set,
        as ``assignFlavors`` does it: resource by resource (Kueue iterates a map or a
        hash-ordered slice; sorted here), each resource group once."""
        assigned: dict[str, str] = {}
        reasons: list[str] = []
        mode = FIT
        preempt: set[tuple[str, str]] = set()
        for resource, amount in sorted(requests.items()):
            group = next(
                (g for g in groups if resource in as_list(g.get("coveredResources"))), None
            )
            if group is None:
                if amount == 0:
                    continue  # a zero request of a resource the queue lacks (#8079)
                return {}, NOFIT, [f"resource {resource} unavailable in ClusterQueue"], set()
            if resource in assigned:
                continue
            needed = {
                r: v for r, v in requests.items() if r in as_list(group.get("coveredResources"))
            }
            flavors, why, group_mode = self._find_flavor(
                template,
                count,
                cq_name,
                cluster_queue,
                group,
                needed,
                requests,
                assumed,
                usage,
                tas_only,
            )
            if not flavors:
                return {}, NOFIT, why, set()  # a group without any flavor: its reasons alone
            assigned.update(flavors)
            if group_mode != FIT:
                reasons += why
                preempt |= {(flavors[r], r) for r in needed}
            mode = min(mode, group_mode)
        if not assigned and mode == FIT and not requests:
            return {}, NOFIT, ["no resource group covers the pod"], set()
        return assigned, mode, reasons, preempt

    def _find_flavor(
        self,
        template: Mapping[str, Any],
        count: int,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        group: Mapping[str, Any],
        needed: Mapping[str, Decimal],
        requests: Mapping[str, Decimal],
        assumed: Mapping[tuple[str, str], Decimal],
        usage: Usage,
        tas_only: bool,
    ) -> tuple[dict[str, str], list[str], int]:
        """``findFlavorForPodSets``: (flavor per resource of the group, reasons, mode).

        Flavors are tried in the ClusterQueue's order. One that fails ``checkFlavorForPodSets``
        (missing, TAS mismatch, an untolerated taint, node affinity) or exceeds the maximum
        capacity (NoFit) is skipped; one that fits, borrowing or not, ends the search (the
        default ``whenCanBorrow: MayStopSearch``); one that would need preemption is kept as
        the best so far and the next is tried (the default ``whenCanPreempt: TryNextFlavor``).
        """
        covered = [str(r) for r in as_list(group.get("coveredResources"))]
        reasons: list[str] = []
        best: dict[str, str] = {}
        per_pod = {r: v / count for r, v in requests.items() if r != "pods"}
        for entry in as_list(group.get("flavors")):
            entry = as_dict(entry)
            name = str(entry.get("name", ""))
            flavor = self.store.get(RESOURCE_FLAVORS, "", name)
            if flavor is None:
                reasons.append(f"flavor {name} not found")
                continue
            tas, mismatch = self._tas_match(template, flavor, covered, per_pod, tas_only)
            mismatch = mismatch or _flavor_mismatch(template, flavor)
            if mismatch is not None:
                reasons.append(mismatch)
                continue
            mode = FIT
            for resource, amount in sorted(needed.items()):
                resource_mode, why = self._fits(
                    cq_name,
                    cluster_queue,
                    name,
                    resource,
                    amount,
                    assumed.get((name, resource), Decimal(0)),
                    usage,
                )
                if why:
                    reasons.append(why)
                mode = min(mode, resource_mode)
            if mode == FIT and tas:
                short = self._topology_shortfall(flavor, per_pod, count, template)
                if short is not None:
                    reasons.append(short)
                    mode = PREEMPT
            if mode == FIT:
                return {r: name for r in needed}, [], FIT
            if mode == PREEMPT and not best:
                best = {r: name for r in needed}
        return best, reasons, PREEMPT if best else NOFIT

    def _fits(
        self,
        cq_name: str,
        cluster_queue: Mapping[str, Any],
        flavor: str,
        resource: str,
        amount: Decimal,
        assumed: Decimal,
        usage: Usage,
    ) -> tuple[int, str]:
        """``fitsResourceQuota`` (flavorassigner.go) for one resource of one flavor: (FIT,
        PREEMPT or NOFIT, the reason in Kueue's words or ""); ``assumed`` is what earlier pod
        sets of the workload take of it."""
        available, potential = self.capacity(cq_name, cluster_queue, flavor, resource, usage)
        value = assumed + amount
        if value > potential:
            return NOFIT, (
                f"insufficient quota for {resource} in flavor {flavor}, previously considered "
                f"podsets requests ({quantity_string(resource, assumed)}) + current podset "
                f"request ({quantity_string(resource, amount)}) > maximum capacity "
                f"({quantity_string(resource, potential)})"
            )
        if value <= available:
            return FIT, ""
        return PREEMPT, (
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{quantity_string(resource, value - available)} more needed"
        )

    # --- pod integration -------------------------------------------------------------------------

    def apply_admission(self, template: JsonObject, flavor_names: Iterable[str]) -> None:
        """``podset.FromAssignment`` and ``Merge``: the flavors' ``nodeLabels`` join the node
        selector, their ``tolerations`` the tolerations of the pod (template)."""
        spec = template.setdefault("spec", {})
        selector = as_dict(spec.get("nodeSelector"))
        tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
        for flavor_name in dict.fromkeys(flavor_names):
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

    # --- status --------------------------------------------------------------------------------

    def update_status(self, now: float) -> None:
        """ClusterQueue, LocalQueue and Cohort status, written when it changed."""
        with self.store.lock:
            workloads = self.store.list(WORKLOADS)
            usage = self.usage(workloads)
            by_cq: dict[str, list[JsonObject]] = {}
            by_lq: dict[tuple[str, str], list[JsonObject]] = {}
            for wl in workloads:
                by_cq.setdefault(self.cluster_queue_of(wl), []).append(wl)
                metadata, spec = as_dict(wl.get("metadata")), as_dict(wl.get("spec"))
                key = (str(metadata.get("namespace", "")), str(spec.get("queueName", "")))
                by_lq.setdefault(key, []).append(wl)
            for cq in self.store.list(CLUSTER_QUEUES):
                name = str(as_dict(cq.get("metadata")).get("name", ""))
                status = self._cluster_queue_status(cq, by_cq.get(name, []), usage, now)
                self.store.mutate(CLUSTER_QUEUES, "", name, _status_setter(status))
            for lq in self.store.list(LOCAL_QUEUES):
                key = key_of(lq)
                status = self._local_queue_status(lq, by_lq.get(key, []), now)
                self.store.mutate(LOCAL_QUEUES, *key, _status_setter(status))
            if self.fair_sharing:
                for cohort in self.store.list(COHORTS):
                    # A root Cohort has no parent to borrow from: its share is 0
                    # (fair_sharing.go ``dominantResourceShare``).
                    self.store.mutate(
                        COHORTS,
                        *key_of(cohort),
                        _status_setter({"fairSharing": {"weightedShare": 0}}),
                    )

    def _flavor_rows(
        self, cluster_queue: Mapping[str, Any], used: Mapping[tuple[str, str], Decimal]
    ) -> list[JsonObject]:
        rows = []
        for group in as_list(as_dict(cluster_queue.get("spec")).get("resourceGroups")):
            for entry in as_list(as_dict(group).get("flavors")):
                flavor = str(as_dict(entry).get("name", ""))
                resources = []
                for resource in as_list(as_dict(group).get("coveredResources")):
                    total = used.get((flavor, str(resource)), Decimal(0))
                    nominal = _quota(cluster_queue, flavor, str(resource)).nominal
                    resources.append(
                        {
                            "name": str(resource),
                            "total": quantity_string(str(resource), total),
                            "borrowed": quantity_string(
                                str(resource), max(Decimal(0), total - nominal)
                            ),
                        }
                    )
                rows.append({"name": flavor, "resources": resources})
        return rows

    def _cluster_queue_status(
        self,
        cq: Mapping[str, Any],
        workloads: list[JsonObject],
        usage: Usage,
        now: float,
    ) -> JsonObject:
        name = str(as_dict(cq.get("metadata")).get("name", ""))
        used = {(f, r): v for (c, f, r), v in usage.items() if c == name}
        rows = self._flavor_rows(cq, used)
        holding = sum(1 for wl in workloads if holds_quota(wl))
        missing = self._missing_flavors(cq)
        status: JsonObject = {
            "flavorsReservation": rows,
            "flavorsUsage": rows,
            "pendingWorkloads": sum(1 for wl in workloads if is_pending(wl)),
            "reservingWorkloads": holding,
            "admittedWorkloads": holding,
        }
        holder: JsonObject = {"status": dict(as_dict(cq.get("status")))}
        if missing:
            set_condition(
                holder,
                "Active",
                False,
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): "
                f"{','.join(missing)}.",
                now,
            )
        else:
            set_condition(holder, "Active", True, "Ready", "Can admit new workloads", now)
        status["conditions"] = holder["status"]["conditions"]
        if self.fair_sharing:
            share = preemption.dominant_resource_share(self, name, usage)
            status["fairSharing"] = {"weightedShare": preemption.rounded_share(share)}
        return status

    def _local_queue_status(
        self, lq: Mapping[str, Any], workloads: list[JsonObject], now: float
    ) -> JsonObject:
        cq_name = str(as_dict(lq.get("spec")).get("clusterQueue", ""))
        cq = self.store.get(CLUSTER_QUEUES, "", cq_name)
        used: dict[tuple[str, str], Decimal] = {}
        for wl in workloads:
            if holds_quota(wl):
                for key, amount in workload_usage(wl).items():
                    used[key] = used.get(key, Decimal(0)) + amount
        rows = [
            {
                "name": row["name"],
                "resources": [{"name": r["name"], "total": r["total"]} for r in row["resources"]],
            }
            for row in (self._flavor_rows(cq, used) if cq else [])
        ]
        holding = sum(1 for wl in workloads if holds_quota(wl))
        status: JsonObject = {
            "flavorsReservation": rows,
            "flavorsUsage": rows,
            "pendingWorkloads": sum(1 for wl in workloads if is_pending(wl)),
            "reservingWorkloads": holding,
            "admittedWorkloads": holding,
        }
        holder: JsonObject = {"status": dict(as_dict(lq.get("status")))}
        if cq is None:
            set_condition(
                holder,
                "Active",
                False,
                "ClusterQueueDoesNotExist",
                "Can't submit new workloads to clusterQueue",
                now,
            )
        else:
            set_condition(
                holder, "Active", True, "Ready", "Can submit new workloads to localQueue", now
            )
        status["conditions"] = holder["status"]["conditions"]
        return status

    # --- quota arithmetic and TAS ----------------------------------------------------------------

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
        self,
        flavor: Mapping[str, Any],
        wanted: Mapping[str, Decimal],
        count: int,
        template: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Why a topology-aware flavor cannot place a pod of the pod set on any node, or
        None. A node with a NoSchedule or NoExecute taint that neither the pod (``template``)
        nor the flavor tolerates is left out (kueue v0.19.2 pkg/cache/scheduler/
        tas_flavor_snapshot.go: the requirements' tolerations are the pod's plus the
        flavor's; scheduling_simulator_default.go "excluding node with untolerated taint")."""
        spec = as_dict(flavor.get("spec"))
        tolerations = [
            as_dict(t)
            for t in [
                *as_list(as_dict(as_dict(template).get("spec")).get("tolerations")),
                *as_list(spec.get("tolerations")),
            ]
        ]
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
            taints = (as_dict(t) for t in as_list(as_dict(node.get("spec")).get("taints")))
            if any(
                taint.get("effect") in ("NoSchedule", "NoExecute")
                and not any(tolerates(t, taint) for t in tolerations)
                for taint in taints
            ):
                continue
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
            f'topology "{name}" doesn\'t allow to fit any of {count} pod(s) in flavor '
            f"{as_dict(flavor.get('metadata')).get('name')}"
        )

    def capacity(
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


def _key(wl: Mapping[str, Any]) -> str:
    namespace, name = key_of(wl)
    return f"{namespace}/{name}"


def _borrows(decision: Assignment | str) -> bool:
    return isinstance(decision, Assignment) and decision.borrows


def _backing_off(wl: Mapping[str, Any]) -> bool:
    """Not queued while ``Requeued`` is False (``backoffWaitingTimeExpired``, kueue v0.19.2
    pkg/cache/queue/cluster_queue.go): evicted for its pods' readiness, until its backoff ends."""
    requeued = condition(wl, REQUEUED)
    return requeued is not None and requeued.get("status") == "False"


def _backoff_finished(wl: JsonObject, now: float) -> None:
    """The backoff is over: ``requeueAt`` cleared, ``Requeued`` True (BackoffFinished)."""
    as_dict(as_dict(wl.get("status")).get("requeueState")).pop("requeueAt", None)
    set_condition(wl, REQUEUED, True, pods_ready.BACKOFF_FINISHED, BACKOFF_MESSAGE, now)


def _remove_condition(obj: JsonObject, kind: str) -> None:
    """``apimeta.RemoveStatusCondition``."""
    status = obj.setdefault("status", {})
    status["conditions"] = [
        c for c in as_list(status.get("conditions")) if as_dict(c).get("type") != kind
    ]


def _status_setter(status: JsonObject) -> Any:
    """A ``Store.mutate`` change that sets the status fields given (a no-op write is not
    stored, so the resourceVersion moves only when something changed)."""

    def change(obj: JsonObject) -> None:
        obj["status"] = {**as_dict(obj.get("status")), **status}

    return change


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
