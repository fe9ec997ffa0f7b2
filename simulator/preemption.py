"""Kueue's preemption: which admitted workloads a pending one evicts, and why.

Read from kubernetes-sigs/kueue v0.19.2 ``pkg/scheduler/preemption``:

- ``preemption.go`` ``GetTargets``: with fair sharing on (Kueue's Configuration has
  ``fairSharing``) ``fairPreemptions``, else ``classicalPreemptions``; only workloads using a
  (flavor, resource) that needs preemption are candidates (``WorkloadUsesResources``);
- the ClusterQueue's ``spec.preemption``: ``withinClusterQueue`` (Never, LowerPriority,
  LowerOrNewerEqualPriority) for its own workloads, ``reclaimWithinCohort`` (Never,
  LowerPriority, Any) for workloads of the cohort's other ClusterQueues that borrow,
  ``borrowWithinCohort`` (``common/preemption_policy.go`` ``SatisfiesPreemptionPolicy``;
  defaults Never);
- classical (``classical/hierarchical_preemption.go``, ``candidate_generator.go``): candidates
  are classified InClusterQueue, InCohortReclamation (the preemptor fits its nominal quota, or
  may not borrow while preempting) or InCohortReclaimWhileBorrowing (``borrowWithinCohort``
  allows it, below ``maxPriorityThreshold``), ordered by ``common/ordering.go``
  ``CandidatesOrdering`` (evicted first, other queues first, lower priority, newer
  reservation); they are removed one by one until the preemptor fits, trying without
  borrowing first where the policy demands it, then put back from the last but one while it
  still fits (``fillBackWorkloads``);
- fair sharing (``fairsharing/ordering.go``, ``strategy.go``, ``target.go`` and
  ``pkg/cache/scheduler/fair_sharing.go``): the ClusterQueue with the highest dominant
  resource share (what it borrows over what the cohort can lend, x1000, over its
  ``spec.fairSharing.weight``) gives up a workload first; its own ClusterQueue's candidates go
  InClusterQueue, and while the preemptor stays within its nominal quota other queues' go
  InCohortReclamation (``FairSharingPreemptWithinNominal``, on by default); otherwise a
  workload goes InCohortFairSharing when the preemptor's new share stays at or below the
  target's share after the removal (``LessThanOrEqualToFinalShare``), then, for those left,
  when it is below the target's share before (``LessThanInitialShare``);
- ``IssuePreemptions``: each target gets ``Evicted`` (reason Preempted) and ``Preempted``
  (the target's reason) with ``preemptionMessage``'s text naming the preemptor; its job is
  then stopped and it is requeued (``jobs.py``, ``Cluster``).

Simplified: cohorts one level deep (the lowest common ancestor of two queues is their cohort),
no TAS in the fit check, no admission fair sharing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from simulator.admission import quantity
from simulator.store import CLUSTER_QUEUES, WORKLOADS, JsonObject, as_dict, key_of
from simulator.workloads import (
    JOB_UID_LABEL,
    PREEMPTED,
    condition,
    evict,
    holds_quota,
    is_evicted,
    set_condition,
)
from simulator.workloads import (
    usage as workload_usage,
)

if TYPE_CHECKING:
    from simulator.kueue import Assignment, Kueue, Usage

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
# preemption.go ``HumanReadablePreemptionReasons``.
HUMAN_READABLE = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}
FlavorResource = tuple[str, str]


@dataclass
class Target:
    """A workload to preempt, its ClusterQueue and the reason (``preemption.Target``)."""

    workload: JsonObject
    cluster_queue: str
    reason: str


@dataclass
class _Candidate:
    workload: JsonObject
    cluster_queue: str
    usage: dict[FlavorResource, Decimal]
    variant: str  # the reason, or "" for ReclaimWithoutBorrowing's InCohortReclamation
    reclaim_without_borrowing: bool = False


class _Snapshot:
    """The quota usage preemption simulates removals on (``schdcache.Snapshot``)."""

    def __init__(self, kueue: Kueue, usage: Usage) -> None:
        self.kueue = kueue
        self.usage: dict[tuple[str, str, str], Decimal] = dict(usage)
        self.queues = {
            str(as_dict(cq.get("metadata")).get("name", "")): cq
            for cq in kueue.store.list(CLUSTER_QUEUES)
        }

    def add(self, cq: str, amounts: Mapping[FlavorResource, Decimal], sign: int = 1) -> None:
        for (flavor, resource), amount in amounts.items():
            key = (cq, flavor, resource)
            self.usage[key] = self.usage.get(key, Decimal(0)) + sign * amount

    def used(self, cq: str, fr: FlavorResource) -> Decimal:
        return self.usage.get((cq, *fr), Decimal(0))

    def nominal(self, cq: str, fr: FlavorResource) -> Decimal:
        return self.kueue.quota(self.queues.get(cq, {}), *fr).nominal

    def borrowing(self, cq: str, fr: FlavorResource, extra: Decimal = Decimal(0)) -> bool:
        """``BorrowingWith``: usage (plus ``extra``) above the nominal quota."""
        return self.used(cq, fr) + extra > self.nominal(cq, fr)

    def available(self, cq: str, fr: FlavorResource) -> Decimal:
        found, _ = self.kueue.capacity(cq, self.queues.get(cq, {}), *fr, self.usage)
        return max(Decimal(0), found)

    def cohort(self, cq: str) -> str:
        return str(as_dict(self.queues.get(cq, {}).get("spec")).get("cohortName") or "")

    def fits(self, cq: str, requests: Mapping[FlavorResource, Decimal], borrow: bool) -> bool:
        """``workloadFits``."""
        for fr, amount in requests.items():
            if not borrow and self.borrowing(cq, fr, amount):
                return False
            if amount > self.available(cq, fr):
                return False
        return True


def _policy(cq: Mapping[str, Any], name: str) -> str:
    return str(as_dict(as_dict(cq.get("spec")).get("preemption")).get(name) or "Never")


def _priority(wl: Mapping[str, Any]) -> int:
    return int(as_dict(wl.get("spec")).get("priority") or 0)


def _created(wl: Mapping[str, Any]) -> str:
    return str(as_dict(wl.get("metadata")).get("creationTimestamp") or "")


def satisfies(preemptor: Mapping[str, Any], candidate: Mapping[str, Any], policy: str) -> bool:
    """``SatisfiesPreemptionPolicy`` (the timestamp buffer gate is off by default)."""
    lower = _priority(preemptor) > _priority(candidate)
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        newer = _priority(preemptor) == _priority(candidate) and _created(preemptor) < _created(
            candidate
        )
        return lower or newer
    return policy == "Any"


def _reserved_at(wl: Mapping[str, Any]) -> str:
    found = condition(wl, "QuotaReserved")
    return str(found.get("lastTransitionTime") or "") if found else ""


def _ordering(preemptor_cq: str) -> Any:
    """``CandidatesOrdering``: evicted first, other ClusterQueues first, lower priority first,
    the most recently reserved first, then the uid."""

    def key(c: _Candidate) -> tuple[Any, ...]:
        reserved = _reserved_at(c.workload)
        return (
            not is_evicted(c.workload),
            c.cluster_queue == preemptor_cq,
            _priority(c.workload),
            # Newer first: invert the RFC 3339 text character by character.
            tuple(-ord(ch) for ch in reserved),
            str(as_dict(c.workload.get("metadata")).get("uid", "")),
        )

    return key


def _admitted(kueue: Kueue) -> list[tuple[JsonObject, str]]:
    out = []
    for wl in kueue.store.list(WORKLOADS):
        if holds_quota(wl):
            cq = str(as_dict(as_dict(wl.get("status")).get("admission")).get("clusterQueue"))
            out.append((wl, cq))
    return out


def targets(kueue: Kueue, wl: JsonObject, assignment: Assignment, usage: Usage) -> list[Target]:
    """``GetTargets``: the workloads ``wl`` preempts to fit, or none."""
    snapshot = _Snapshot(kueue, usage)
    if kueue.fair_sharing:
        return _fair(snapshot, wl, assignment)
    return _classical(snapshot, wl, assignment)


def _uses(usage: Mapping[FlavorResource, Decimal], frs: set[FlavorResource]) -> bool:
    return any(fr in frs and amount > 0 for fr, amount in usage.items())


def _classical(snapshot: _Snapshot, wl: JsonObject, assignment: Assignment) -> list[Target]:
    cq_name = assignment.cluster_queue
    cq = snapshot.queues.get(cq_name, {})
    frs = assignment.need_preemption
    requests = assignment.requests()
    within, reclaim = _policy(cq, "withinClusterQueue"), _policy(cq, "reclaimWithinCohort")
    borrow_spec = as_dict(
        as_dict(as_dict(cq.get("spec")).get("preemption")).get("borrowWithinCohort")
    )
    forbidden = str(borrow_spec.get("policy") or "Never") == "Never"
    threshold = borrow_spec.get("maxPriorityThreshold")
    cohort = snapshot.cohort(cq_name)
    # QuantitiesFitInQuota on the ClusterQueue: the preemptor fits its nominal quota.
    advantage = all(
        snapshot.used(cq_name, fr) + amount <= snapshot.nominal(cq_name, fr)
        for fr, amount in requests.items()
    )
    same: list[_Candidate] = []
    hierarchy: list[_Candidate] = []
    priority: list[_Candidate] = []
    for other, other_cq in _admitted(snapshot.kueue):
        held = workload_usage(other)
        if not _uses(held, frs) or key_of(other) == key_of(wl):
            continue
        if other_cq == cq_name:
            if within != "Never" and satisfies(wl, other, within):
                same.append(_Candidate(other, other_cq, held, IN_CLUSTER_QUEUE))
            continue
        if not cohort or reclaim == "Never" or snapshot.cohort(other_cq) != cohort:
            continue
        # collectCandidatesInSubtree: only ClusterQueues above their nominal quota.
        if all(not snapshot.borrowing(other_cq, fr) for fr in frs):
            continue
        if not satisfies(wl, other, reclaim):
            continue
        if advantage:
            hierarchy.append(_Candidate(other, other_cq, held, IN_COHORT_RECLAMATION))
            continue
        without = forbidden or _priority(other) >= _priority(wl)
        if not without and threshold is not None:
            without = _priority(other) > int(threshold)
        reason = IN_COHORT_RECLAMATION if without else IN_COHORT_RECLAIM_WHILE_BORROWING
        priority.append(_Candidate(other, other_cq, held, reason, without))
    order = _ordering(cq_name)
    groups = [sorted(g, key=order) for g in (hierarchy, priority, same)]
    candidates = [c for g in groups for c in g if is_evicted(c.workload)] + [
        c for g in groups for c in g if not is_evicted(c.workload)
    ]
    under_nominal = all(snapshot.nominal(cq_name, fr) > snapshot.used(cq_name, fr) for fr in frs)
    if (not hierarchy and not priority) or (forbidden and not under_nominal):
        attempts = [True]
    elif forbidden and not hierarchy:
        attempts = [False, True]
    else:
        attempts = [True, False]
    for borrow in attempts:
        chosen: list[_Candidate] = []
        for candidate in candidates:
            if candidate.cluster_queue != cq_name:
                if borrow and candidate.reclaim_without_borrowing:
                    continue
                if all(not snapshot.borrowing(candidate.cluster_queue, fr) for fr in frs):
                    continue  # candidateIsValid: that queue is back within its nominal quota
            snapshot.add(candidate.cluster_queue, candidate.usage, -1)
            chosen.append(candidate)
            if snapshot.fits(cq_name, requests, borrow):
                chosen = _fill_back(snapshot, cq_name, requests, chosen, borrow)
                return [Target(c.workload, c.cluster_queue, c.variant) for c in chosen]
        for candidate in chosen:
            snapshot.add(candidate.cluster_queue, candidate.usage)
    return []


def _fill_back(
    snapshot: _Snapshot,
    cq_name: str,
    requests: Mapping[FlavorResource, Decimal],
    chosen: list[_Candidate],
    borrow: bool,
) -> list[_Candidate]:
    """``fillBackWorkloads``: put back, from the last but one, every target the preemptor
    still fits without (the last one stays: it made the preemptor fit)."""
    for index in range(len(chosen) - 2, -1, -1):
        snapshot.add(chosen[index].cluster_queue, chosen[index].usage)
        if snapshot.fits(cq_name, requests, borrow):
            chosen[index] = chosen[-1]
            chosen.pop()
        else:
            snapshot.add(chosen[index].cluster_queue, chosen[index].usage, -1)
    return chosen


# --- fair sharing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """``schdcache.DRS``: the dominant resource share and the queue's weight."""

    ratio: float
    weight: float
    borrowing: bool

    @property
    def weighted(self) -> float:
        """``PreciseWeightedShare``."""
        if self.ratio == 0:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.ratio / self.weight


def _compare(a: Share, b: Share) -> int:
    """``CompareDRS``."""
    a_zero = a.weight == 0 and a.ratio != 0
    b_zero = b.weight == 0 and b.ratio != 0
    if a_zero and b_zero:
        return (a.ratio > b.ratio) - (a.ratio < b.ratio)
    if a_zero:
        return 1
    if b_zero:
        return -1
    return (a.weighted > b.weighted) - (a.weighted < b.weighted)


def _weight(cq: Mapping[str, Any]) -> float:
    fair = as_dict(as_dict(cq.get("spec")).get("fairSharing"))
    if "weight" not in fair:
        return 1.0
    return float(quantity(fair.get("weight")))


def _share(snapshot: _Snapshot, cq_name: str) -> Share:
    """``dominantResourceShare`` of a ClusterQueue whose parent is a root cohort."""
    cq = snapshot.queues.get(cq_name, {})
    weight = _weight(cq)
    cohort = snapshot.cohort(cq_name)
    if not cohort:
        return Share(0.0, weight, False)
    borrowed: dict[str, Decimal] = {}
    for group in as_dict(cq.get("spec")).get("resourceGroups") or []:
        for entry in as_dict(group).get("flavors") or []:
            flavor = str(as_dict(entry).get("name", ""))
            for resource in as_dict(group).get("coveredResources") or []:
                over = snapshot.used(cq_name, (flavor, str(resource))) - snapshot.nominal(
                    cq_name, (flavor, str(resource))
                )
                if over > 0:
                    borrowed[str(resource)] = borrowed.get(str(resource), Decimal(0)) + over
    if not borrowed:
        return Share(0.0, weight, False)
    lendable: dict[str, Decimal] = {}
    for other_name, other in snapshot.queues.items():
        if snapshot.cohort(other_name) != cohort:
            continue
        for group in as_dict(other.get("spec")).get("resourceGroups") or []:
            for entry in as_dict(group).get("flavors") or []:
                flavor = str(as_dict(entry).get("name", ""))
                for resource in as_dict(group).get("coveredResources") or []:
                    quota = snapshot.kueue.quota(other, flavor, str(resource))
                    lendable[str(resource)] = lendable.get(str(resource), Decimal(0)) + (
                        quota.nominal - quota.local
                    )
    ratio = 0.0
    for resource, amount in borrowed.items():
        if lendable.get(resource, Decimal(0)) > 0:
            ratio = max(ratio, float(amount * 1000 / lendable[resource]))
    return Share(ratio, weight, True)


def dominant_resource_share(kueue: Kueue, cq_name: str, usage: Usage) -> Share:
    return _share(_Snapshot(kueue, usage), cq_name)


def rounded_share(share: Share) -> int:
    """``roundedWeightedShare``: what ``status.fairSharing.weightedShare`` shows."""
    if share.weight == 0 and share.ratio != 0:
        return 2**63 - 1
    return math.ceil(share.weighted)


def _fair(snapshot: _Snapshot, wl: JsonObject, assignment: Assignment) -> list[Target]:
    """``fairPreemptions`` with the default strategies."""
    cq_name = assignment.cluster_queue
    cq = snapshot.queues.get(cq_name, {})
    frs = assignment.need_preemption
    requests = assignment.requests()
    within, reclaim = _policy(cq, "withinClusterQueue"), _policy(cq, "reclaimWithinCohort")
    cohort = snapshot.cohort(cq_name)
    candidates: list[_Candidate] = []
    for other, other_cq in _admitted(snapshot.kueue):
        held = workload_usage(other)
        if not _uses(held, frs) or key_of(other) == key_of(wl):
            continue
        if other_cq == cq_name:
            if within != "Never" and satisfies(wl, other, within):
                candidates.append(_Candidate(other, other_cq, held, IN_CLUSTER_QUEUE))
        elif (
            cohort
            and reclaim != "Never"
            and snapshot.cohort(other_cq) == cohort
            and any(snapshot.borrowing(other_cq, fr) for fr in frs)
            and satisfies(wl, other, reclaim)
        ):
            candidates.append(_Candidate(other, other_cq, held, IN_COHORT_FAIR_SHARING))
    if not candidates:
        return []
    candidates.sort(key=_ordering(cq_name))
    snapshot.add(cq_name, requests)  # SimulateUsageAddition

    def fits() -> bool:
        snapshot.add(cq_name, requests, -1)
        result = snapshot.fits(cq_name, requests, True)
        snapshot.add(cq_name, requests)
        return result

    chosen: list[_Candidate] = []
    found, retry = _first_strategy(snapshot, cq_name, cohort, candidates, chosen, frs, fits)
    if not found:
        found = _second_strategy(snapshot, cq_name, cohort, retry, chosen, fits)
    snapshot.add(cq_name, requests, -1)
    if not found:
        return []
    chosen = _fill_back(snapshot, cq_name, requests, chosen, True)
    return [Target(c.workload, c.cluster_queue, c.variant) for c in chosen]


def _next_queue(
    snapshot: _Snapshot,
    cq_name: str,
    cohort: str,
    waiting: dict[str, list[_Candidate]],
    pruned: set[str],
) -> str | None:
    """``TargetClusterQueueOrdering.nextTarget`` in a one-level cohort: the ClusterQueue with
    the highest share that borrows (or the preemptor's own) and has candidates left."""
    if not cohort:
        return cq_name if waiting.get(cq_name) and cq_name not in pruned else None
    best: str | None = None
    best_share = Share(-1.0, 1.0, False)
    order = _ordering(cq_name)
    for name in sorted(snapshot.queues):
        if name in pruned or snapshot.cohort(name) != cohort:
            continue
        share = _share(snapshot, name)
        if (not share.borrowing and name != cq_name) or not waiting.get(name):
            pruned.add(name)
            continue
        compared = _compare(share, best_share)
        if compared > 0 or (
            compared == 0 and best is not None and order(waiting[name][0]) < order(waiting[best][0])
        ):
            best, best_share = name, share
    return best


def _first_strategy(
    snapshot: _Snapshot,
    cq_name: str,
    cohort: str,
    candidates: list[_Candidate],
    chosen: list[_Candidate],
    frs: set[FlavorResource],
    fits: Any,
) -> tuple[bool, list[_Candidate]]:
    """``runFirstFsStrategy`` with ``LessThanOrEqualToFinalShare``."""
    waiting: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        waiting.setdefault(candidate.cluster_queue, []).append(candidate)
    pruned: set[str] = set()
    retry: list[_Candidate] = []
    while (target := _next_queue(snapshot, cq_name, cohort, waiting, pruned)) is not None:
        if target == cq_name:
            candidate = waiting[target].pop(0)
            snapshot.add(target, candidate.usage, -1)
            candidate.variant = IN_CLUSTER_QUEUE
            chosen.append(candidate)
            if fits():
                return True, retry
            continue
        # FairSharingPreemptWithinNominal: the preemptor, its request counted, borrows none
        # of what needs preemption.
        preemptor_within = all(not snapshot.borrowing(cq_name, fr) for fr in frs)
        if preemptor_within:
            candidate = waiting[target].pop(0)
            snapshot.add(target, candidate.usage, -1)
            candidate.variant = IN_COHORT_RECLAMATION
            chosen.append(candidate)
            if fits():
                return True, retry
            continue
        preemptor_share = _share(snapshot, cq_name)
        target_old = _share(snapshot, target)
        if math.isinf(preemptor_share.weighted) and not math.isinf(target_old.weighted):
            retry += waiting.pop(target)
            continue
        while waiting.get(target):
            candidate = waiting[target].pop(0)
            snapshot.add(target, candidate.usage, -1)
            target_new = _share(snapshot, target)
            snapshot.add(target, candidate.usage)
            if _compare(preemptor_share, target_new) <= 0:
                snapshot.add(target, candidate.usage, -1)
                candidate.variant = IN_COHORT_FAIR_SHARING
                chosen.append(candidate)
                if fits():
                    return True, retry
                break
            retry.append(candidate)
    return False, retry


def _second_strategy(
    snapshot: _Snapshot,
    cq_name: str,
    cohort: str,
    retry: list[_Candidate],
    chosen: list[_Candidate],
    fits: Any,
) -> bool:
    """``runSecondFsStrategy`` with ``LessThanInitialShare``: one try per ClusterQueue."""
    waiting: dict[str, list[_Candidate]] = {}
    for candidate in retry:
        waiting.setdefault(candidate.cluster_queue, []).append(candidate)
    pruned: set[str] = set()
    while (target := _next_queue(snapshot, cq_name, cohort, waiting, pruned)) is not None:
        preemptor_share = _share(snapshot, cq_name)
        target_old = _share(snapshot, target)
        candidate = waiting[target].pop(0)
        if _compare(preemptor_share, target_old) < 0:
            snapshot.add(target, candidate.usage, -1)
            candidate.variant = IN_COHORT_FAIR_SHARING
            chosen.append(candidate)
            if fits():
                return True
        pruned.add(target)
    return False


# --- issuing ---------------------------------------------------------------------------------


def message(
    preemptor: Mapping[str, Any], reason: str, preemptor_path: str, preemptee_path: str
) -> str:
    """``preemptionMessage``."""
    metadata = as_dict(preemptor.get("metadata"))
    uid = str(metadata.get("uid") or "UNKNOWN")
    job_uid = str(as_dict(metadata.get("labels")).get(JOB_UID_LABEL) or "UNKNOWN")
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
        f"{HUMAN_READABLE.get(reason, 'UNKNOWN')}; preemptor path: {preemptor_path}; "
        f"preemptee path: {preemptee_path}"
    )


def cq_path(kueue: Kueue, cq_name: str) -> str:
    """``buildCQPath``: ``/<cohort>/<clusterqueue>``."""
    cq = kueue.store.get(CLUSTER_QUEUES, "", cq_name)
    cohort = str(as_dict(as_dict(cq).get("spec")).get("cohortName") or "")
    return f"/{cohort}/{cq_name}" if cohort else f"/{cq_name}"


def issue(kueue: Kueue, preemptor: JsonObject, chosen: list[Target], now: float) -> None:
    """``IssuePreemptions``: Evicted (Preempted) and Preempted (the reason) on each target not
    evicted already."""
    preemptor_cq = kueue.cluster_queue_of(preemptor)
    for target in chosen:
        if is_evicted(target.workload):
            continue  # "Preemption ongoing"
        text = message(
            preemptor,
            target.reason,
            cq_path(kueue, preemptor_cq),
            cq_path(kueue, target.cluster_queue),
        )

        def change(obj: JsonObject, reason: str = target.reason, text: str = text) -> None:
            set_condition(obj, PREEMPTED, True, reason, text, now)
            evict(obj, "Preempted", text, now)

        kueue.store.mutate(WORKLOADS, *key_of(target.workload), change)
