"""Kueue's objects as the portal reads them back (``kueue.x-k8s.io/v1beta2``, Kueue v0.19.2):
Workloads, ClusterQueues, LocalQueues and Cohorts parsed into plain facts, and a Workload's
state derived from its conditions. Pure functions over the API's JSON: no Django, no I/O.

A malformed field never hides the object: it is read as empty and named in ``problems``, as
``fleet.inventory`` does for nodes and pods.

The state of a Workload follows Kueue's own ``workload.Status`` (pkg/workload/workload.go at
v0.19.2: finished, admitted, quota reserved, else pending) with what a tenant also needs to
tell apart, in this order:

- ``finished-succeeded`` / ``finished-failed``: the ``Finished`` condition is True; its reason
  is ``Succeeded`` or, for every other end (``Failed``, ``OutOfSync``, ``OwnerNotFound``), failed
  (apis/kueue/v1beta2/workload_types.go ``WorkloadFinishedReason*``);
- ``inactive``: ``spec.active`` is false (``workload.IsActive``; Kueue deactivates a workload
  that hit its requeuing limit or its maximum execution time, and a person may);
- ``preempted``: the ``Preempted`` condition is True. It stays True while the workload is
  evicted and requeued, and is reset to False only when quota is reserved again
  (``workload.SetQuotaReservation`` -> ``resetActiveCondition``), so a preempted workload
  waiting again reads as preempted, with who preempted it;
- ``evicted``: the ``Evicted`` condition is True for any other reason (``PodsReadyTimeout``,
  ``ClusterQueueStopped``, ``NodeFailures``...), reset the same way;
- ``admitted``: ``Admitted`` is True; ``quota-reserved``: ``QuotaReserved`` is True (quota held,
  admission checks not yet passed); otherwise ``pending``.

Who preempted: Kueue writes the preemptor's UID and ClusterQueue path into the ``Preempted``
condition's message (pkg/scheduler/preemption/preemption.go ``preemptionMessage``: "Preempted to
accommodate a workload (UID: <uid>, JobUID: <uid>) due to <reason>; preemptor path:
/<cohort>/<cq>; preemptee path: ..."), and the reason is one of ``InClusterQueue`` (priority),
``InCohortReclamation`` (a lender took its quota back), ``InCohortFairSharing`` (fair share)
and ``InCohortReclaimWhileBorrowing``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

# Workload condition types (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
FINISHED = "Finished"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
FINISHED_SUCCEEDED = "Succeeded"

PENDING = "pending"
STATE_QUOTA_RESERVED = "quota-reserved"
STATE_ADMITTED = "admitted"
STATE_PREEMPTED = "preempted"
STATE_EVICTED = "evicted"
INACTIVE = "inactive"
SUCCEEDED = "finished-succeeded"
FAILED = "finished-failed"
STATES = (
    PENDING,
    STATE_QUOTA_RESERVED,
    STATE_ADMITTED,
    STATE_PREEMPTED,
    STATE_EVICTED,
    INACTIVE,
    SUCCEEDED,
    FAILED,
)
# The states a workload still waits in: the visibility API lists them with a position.
WAITING = (PENDING, STATE_PREEMPTED, STATE_EVICTED)

# Preempted condition reasons, and what they mean to the one preempted
# (pkg/scheduler/preemption/preemption.go ``HumanReadablePreemptionReasons``).
PREEMPTION_REASONS = {
    "InClusterQueue": "priority: a workload of higher priority in the same queue",
    "InCohortReclamation": "reclaim: another queue took back quota this one had borrowed",
    "InCohortFairSharing": "fair share: a queue below its fair share in the cohort",
    "InCohortReclaimWhileBorrowing": "reclaim while borrowing: a borrowing queue reclaimed quota",
}
PREEMPTOR = re.compile(r"\(UID: (?P<uid>[^,)]*), JobUID: (?P<job>[^)]*)\)")
PREEMPTOR_PATH = re.compile(r"preemptor path: (?P<path>[^;]*)")
UNKNOWN = "UNKNOWN"  # what Kueue writes for a UID or path it does not know

ZERO = Decimal(0)


def quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity ("2", "500m", "16Gi") as a Decimal, or None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str):
        return None
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, InvalidOperation):
        return None


def _number(value: Decimal) -> str:
    """A Decimal as JSON keeps it: plain notation, no exponent, no trailing zeros."""
    return format(value.normalize(), "f")


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _mapping(value: object, where: str, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where} is not an object")
        return {}
    return value


def _list(value: object, where: str, problems: list[str]) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where} is not a list")
        return []
    return value


def _text(value: object, where: str, problems: list[str]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        problems.append(f"{where} is not a string")
        return ""
    return value


def _count(value: object, where: str, problems: list[str]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{where} is not a number")
        return 0
    return value


def _resources(value: object, where: str, problems: list[str]) -> dict[str, Decimal]:
    """A ResourceList ({name: quantity})."""
    out: dict[str, Decimal] = {}
    for name, raw in _mapping(value, where, problems).items():
        amount = quantity(raw)
        if amount is None:
            problems.append(f"{where}.{name} is not a quantity")
            continue
        out[str(name)] = amount
    return out


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None


def _conditions(value: object, where: str, problems: list[str]) -> dict[str, Condition]:
    found: dict[str, Condition] = {}
    for index, raw in enumerate(_list(value, where, problems)):
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            problems.append(f"{where}[{index}] has no type")
            continue
        found[raw["type"]] = Condition(
            type=raw["type"],
            status=str(raw.get("status") or ""),
            reason=str(raw.get("reason") or ""),
            message=str(raw.get("message") or ""),
            last_transition=_timestamp(raw.get("lastTransitionTime")),
        )
    return found


def _named(obj: object) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return None
    return obj, meta, meta["name"]


# --- Workloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSet:
    """One pod set of a Workload: how many pods, what they ask in all, and the flavor Kueue
    assigned each resource (empty until quota is reserved)."""

    name: str
    count: int
    requests: dict[str, Decimal] = field(default_factory=dict)
    flavors: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "count": self.count,
            "requests": {k: _number(v) for k, v in sorted(self.requests.items())},
            "flavors": dict(sorted(self.flavors.items())),
        }


@dataclass(frozen=True)
class State:
    """A Workload's state, and the condition that explains it."""

    state: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class WorkloadInfo:
    """A Workload as the queue pages show it."""

    namespace: str
    name: str
    uid: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    owner_uid: str = ""
    local_queue: str = ""
    cluster_queue: str = ""  # from the admission: known once quota is reserved
    priority: int | None = None
    priority_class: str = ""
    state: str = PENDING
    reason: str = ""
    message: str = ""
    preemption_reason: str = ""
    preemptor_uid: str = ""
    preemptor_path: str = ""
    eviction_reason: str = ""
    pod_sets: tuple[PodSet, ...] = ()
    created: datetime | None = None
    admitted_at: datetime | None = None
    finished_at: datetime | None = None
    problems: tuple[str, ...] = ()


def derive_state(conditions: dict[str, Condition], active: bool) -> State:
    """The state of a Workload from its conditions and ``spec.active`` (the module docstring
    gives the order and where each rule comes from)."""

    def true(kind: str) -> Condition | None:
        condition = conditions.get(kind)
        return condition if condition is not None and condition.status == "True" else None

    if finished := true(FINISHED):
        state = SUCCEEDED if finished.reason == FINISHED_SUCCEEDED else FAILED
        return State(state, finished.reason, finished.message)
    if not active:
        evicted = true(EVICTED)
        return State(
            INACTIVE, evicted.reason if evicted else "", evicted.message if evicted else ""
        )
    if preempted := true(PREEMPTED):
        return State(STATE_PREEMPTED, preempted.reason, preempted.message)
    if evicted := true(EVICTED):
        return State(STATE_EVICTED, evicted.reason, evicted.message)
    if admitted := true(ADMITTED):
        return State(STATE_ADMITTED, admitted.reason, admitted.message)
    if reserved := true(QUOTA_RESERVED):
        # Quota is held; the Admitted condition says what it still waits for (admission
        # checks, delayed topology requests).
        waiting = conditions.get(ADMITTED)
        explained = waiting if waiting is not None else reserved
        return State(STATE_QUOTA_RESERVED, explained.reason, explained.message)
    # Pending: QuotaReserved False says why ("couldn't assign flavors to pod set ...").
    why = conditions.get(QUOTA_RESERVED)
    return State(PENDING, why.reason if why else "", why.message if why else "")


def preemptor(message: str) -> tuple[str, str]:
    """(preemptor UID, preemptor's ClusterQueue path) from a Preempted condition's message;
    empty where Kueue did not know them."""
    uid = path = ""
    if match := PREEMPTOR.search(message):
        uid = match.group("uid").strip()
    if match := PREEMPTOR_PATH.search(message):
        path = match.group("path").strip()
    return ("" if uid == UNKNOWN else uid), ("" if path == UNKNOWN else path)


def _owner(value: object, problems: list[str]) -> tuple[str, str, str]:
    """(kind, name, uid) of the Workload's owner: the controller reference, else the first."""
    refs = [r for r in _list(value, "metadata.ownerReferences", problems) if isinstance(r, dict)]
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None:
        return "", "", ""
    return str(ref.get("kind") or ""), str(ref.get("name") or ""), str(ref.get("uid") or "")


def _pod_requests(template: dict[str, Any], where: str, problems: list[str]) -> dict[str, Decimal]:
    """What one pod of a pod set asks: its containers' requests summed, at least any init
    container's (the scheduler's effective request); limits stand in for a missing request,
    as the API server defaults them."""
    spec = _mapping(template.get("spec"), f"{where}.spec", problems)

    def each(key: str) -> list[dict[str, Decimal]]:
        out = []
        for index, container in enumerate(_list(spec.get(key), f"{where}.spec.{key}", problems)):
            if not isinstance(container, dict):
                continue
            resources = _mapping(container.get("resources"), f"{where}.{key}[{index}]", problems)
            limits = _resources(resources.get("limits"), f"{where}.{key}[{index}].limits", problems)
            requests = _resources(
                resources.get("requests"), f"{where}.{key}[{index}].requests", problems
            )
            out.append({**limits, **requests})
        return out

    total: dict[str, Decimal] = {}
    for container in each("containers"):
        for name, amount in container.items():
            total[name] = total.get(name, ZERO) + amount
    for container in each("initContainers"):
        for name, amount in container.items():
            total[name] = max(total.get(name, ZERO), amount)
    return total


def _pod_sets(spec: dict[str, Any], status: dict[str, Any], problems: list[str]) -> list[PodSet]:
    """The pod sets with their total requests: the admission's ``resourceUsage`` once quota is
    reserved, else ``status.resourceRequests`` (LimitRange defaults included, written when
    Kueue considered the workload), else the pod templates times their count."""
    admission = _mapping(status.get("admission"), "status.admission", problems)
    assigned: dict[str, dict[str, Any]] = {}
    for raw in _list(admission.get("podSetAssignments"), "status.admission", problems):
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            assigned[raw["name"]] = raw
    considered: dict[str, dict[str, Decimal]] = {}
    for raw in _list(status.get("resourceRequests"), "status.resourceRequests", problems):
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            considered[raw["name"]] = _resources(
                raw.get("resources"), f"status.resourceRequests.{raw['name']}", problems
            )
    out: list[PodSet] = []
    for index, raw in enumerate(_list(spec.get("podSets"), "spec.podSets", problems)):
        if not isinstance(raw, dict):
            problems.append(f"spec.podSets[{index}] is not an object")
            continue
        name = str(raw.get("name") or "main")
        count = _count(raw.get("count"), f"spec.podSets[{index}].count", problems)
        assignment = assigned.get(name, {})
        where = f"status.admission.podSetAssignments.{name}"
        if "count" in assignment:
            count = _count(assignment.get("count"), f"{where}.count", problems)
        if assignment.get("resourceUsage"):
            requests = _resources(
                assignment.get("resourceUsage"), f"{where}.resourceUsage", problems
            )
        elif name in considered:
            requests = considered[name]
        else:
            template = _mapping(raw.get("template"), f"spec.podSets[{index}].template", problems)
            one = _pod_requests(template, f"spec.podSets[{index}].template", problems)
            requests = {k: v * count for k, v in one.items()}
        flavors = {
            str(k): str(v)
            for k, v in _mapping(assignment.get("flavors"), f"{where}.flavors", problems).items()
        }
        out.append(PodSet(name, count, requests, flavors))
    return out


def parse_workload(obj: object) -> WorkloadInfo | None:
    """A Workload as the API returns it, or None when it has no name."""
    named = _named(obj)
    if named is None:
        return None
    workload, meta, name = named
    problems: list[str] = []
    spec = _mapping(workload.get("spec"), "spec", problems)
    status = _mapping(workload.get("status"), "status", problems)
    conditions = _conditions(status.get("conditions"), "status.conditions", problems)
    active = spec.get("active") is not False
    state = derive_state(conditions, active)
    owner_kind, owner_name, owner_uid = _owner(meta.get("ownerReferences"), problems)
    priority_class = _mapping(spec.get("priorityClassRef"), "spec.priorityClassRef", problems)
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        problems.append("spec.priority is not a number")
        priority = None
    admission = _mapping(status.get("admission"), "status.admission", problems)
    preempted = conditions.get(PREEMPTED)
    preemption_reason = preemptor_uid = preemptor_path = ""
    if preempted is not None and preempted.status == "True":
        preemption_reason = preempted.reason
        preemptor_uid, preemptor_path = preemptor(preempted.message)
    evicted = conditions.get(EVICTED)
    admitted = conditions.get(ADMITTED)
    finished = conditions.get(FINISHED)
    return WorkloadInfo(
        namespace=_text(meta.get("namespace"), "metadata.namespace", problems),
        name=name,
        uid=_text(meta.get("uid"), "metadata.uid", problems),
        owner_kind=owner_kind,
        owner_name=owner_name,
        owner_uid=owner_uid,
        local_queue=_text(spec.get("queueName"), "spec.queueName", problems),
        cluster_queue=_text(
            admission.get("clusterQueue"), "status.admission.clusterQueue", problems
        ),
        priority=priority,
        priority_class=str(priority_class.get("name") or ""),
        state=state.state,
        reason=state.reason,
        message=state.message,
        preemption_reason=preemption_reason,
        preemptor_uid=preemptor_uid,
        preemptor_path=preemptor_path,
        eviction_reason=evicted.reason if evicted is not None and evicted.status == "True" else "",
        pod_sets=tuple(_pod_sets(spec, status, problems)),
        created=_timestamp(meta.get("creationTimestamp")),
        admitted_at=(
            admitted.last_transition if admitted is not None and admitted.status == "True" else None
        ),
        finished_at=(
            finished.last_transition if finished is not None and finished.status == "True" else None
        ),
        problems=tuple(problems),
    )


# --- queues and cohorts --------------------------------------------------------------------------

# {flavor: {resource: {"nominal": "4", "borrowing_limit": "2" | None, "lending_limit": ...}}}
Quotas = dict[str, dict[str, dict[str, str | None]]]
# {flavor: {resource: {"total": "3", "borrowed": "1"}}}
Usage = dict[str, dict[str, dict[str, str]]]


def _quotas(value: object, problems: list[str]) -> Quotas:
    """``spec.resourceGroups`` as {flavor: {resource: limits}} (numbers as strings)."""
    out: Quotas = {}
    for g, group in enumerate(_list(value, "spec.resourceGroups", problems)):
        if not isinstance(group, dict):
            continue
        for flavor in _list(group.get("flavors"), f"spec.resourceGroups[{g}].flavors", problems):
            if not isinstance(flavor, dict) or not isinstance(flavor.get("name"), str):
                continue
            where = f"spec.resourceGroups[{g}].flavors.{flavor['name']}"
            entries = out.setdefault(flavor["name"], {})
            for raw in _list(flavor.get("resources"), where, problems):
                if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                    continue
                limits: dict[str, str | None] = {}
                for key, out_key in (
                    ("nominalQuota", "nominal"),
                    ("borrowingLimit", "borrowing_limit"),
                    ("lendingLimit", "lending_limit"),
                ):
                    amount = quantity(raw.get(key)) if key in raw else None
                    if key in raw and amount is None:
                        problems.append(f"{where}.{raw['name']}.{key} is not a quantity")
                    limits[out_key] = None if amount is None else _number(amount)
                limits["nominal"] = limits["nominal"] or "0"
                entries[raw["name"]] = limits
    return out


def _usage(value: object, where: str, problems: list[str]) -> Usage:
    """``status.flavorsUsage`` / ``flavorsReservation`` as {flavor: {resource: amounts}}."""
    out: Usage = {}
    for raw in _list(value, where, problems):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        resources = out.setdefault(raw["name"], {})
        for entry in _list(raw.get("resources"), f"{where}.{raw['name']}", problems):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            total = quantity(entry.get("total", "0"))
            borrowed = quantity(entry.get("borrowed", "0"))
            if total is None or borrowed is None:
                problems.append(f"{where}.{raw['name']}.{entry['name']} is not a quantity")
                continue
            resources[entry["name"]] = {"total": _number(total), "borrowed": _number(borrowed)}
    return out


def _weight(value: object, problems: list[str]) -> str | None:
    fair = _mapping(value, "spec.fairSharing", problems)
    if "weight" not in fair:
        return None
    amount = quantity(fair.get("weight"))
    if amount is None:
        problems.append("spec.fairSharing.weight is not a quantity")
        return None
    return _number(amount)


def _weighted_share(status: dict[str, Any], problems: list[str]) -> int | None:
    fair = _mapping(status.get("fairSharing"), "status.fairSharing", problems)
    share = fair.get("weightedShare")
    if share is None:
        return None
    if isinstance(share, bool) or not isinstance(share, int):
        problems.append("status.fairSharing.weightedShare is not a number")
        return None
    return share


@dataclass(frozen=True)
class ClusterQueueInfo:
    """A ClusterQueue: its quotas per flavor (spec), what it uses and has reserved (status),
    its fair-sharing weight and weighted share, and its workload counts."""

    name: str
    cohort: str = ""
    weight: str | None = None
    weighted_share: int | None = None
    quotas: Quotas = field(default_factory=dict)
    usage: Usage = field(default_factory=dict)
    reservation: Usage = field(default_factory=dict)
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    active: bool | None = None
    reason: str = ""
    message: str = ""
    problems: tuple[str, ...] = ()


def parse_cluster_queue(obj: object) -> ClusterQueueInfo | None:
    named = _named(obj)
    if named is None:
        return None
    queue, _, name = named
    problems: list[str] = []
    spec = _mapping(queue.get("spec"), "spec", problems)
    status = _mapping(queue.get("status"), "status", problems)
    conditions = _conditions(status.get("conditions"), "status.conditions", problems)
    active = conditions.get("Active")
    return ClusterQueueInfo(
        name=name,
        cohort=_text(spec.get("cohortName"), "spec.cohortName", problems),
        weight=_weight(spec.get("fairSharing"), problems),
        weighted_share=_weighted_share(status, problems),
        quotas=_quotas(spec.get("resourceGroups"), problems),
        usage=_usage(status.get("flavorsUsage"), "status.flavorsUsage", problems),
        reservation=_usage(status.get("flavorsReservation"), "status.flavorsReservation", problems),
        pending=_count(status.get("pendingWorkloads"), "status.pendingWorkloads", problems),
        reserving=_count(status.get("reservingWorkloads"), "status.reservingWorkloads", problems),
        admitted=_count(status.get("admittedWorkloads"), "status.admittedWorkloads", problems),
        active=None if active is None else active.status == "True",
        reason=active.reason if active else "",
        message=active.message if active else "",
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class LocalQueueInfo:
    """A LocalQueue: the ClusterQueue it feeds and the namespace's share of its usage."""

    namespace: str
    name: str
    cluster_queue: str = ""
    usage: Usage = field(default_factory=dict)
    reservation: Usage = field(default_factory=dict)
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    weighted_share: int | None = None
    problems: tuple[str, ...] = ()


def parse_local_queue(obj: object) -> LocalQueueInfo | None:
    named = _named(obj)
    if named is None:
        return None
    queue, meta, name = named
    problems: list[str] = []
    spec = _mapping(queue.get("spec"), "spec", problems)
    status = _mapping(queue.get("status"), "status", problems)
    return LocalQueueInfo(
        namespace=_text(meta.get("namespace"), "metadata.namespace", problems),
        name=name,
        cluster_queue=_text(spec.get("clusterQueue"), "spec.clusterQueue", problems),
        usage=_usage(status.get("flavorsUsage"), "status.flavorsUsage", problems),
        reservation=_usage(status.get("flavorsReservation"), "status.flavorsReservation", problems),
        pending=_count(status.get("pendingWorkloads"), "status.pendingWorkloads", problems),
        reserving=_count(status.get("reservingWorkloads"), "status.reservingWorkloads", problems),
        admitted=_count(status.get("admittedWorkloads"), "status.admittedWorkloads", problems),
        weighted_share=_weighted_share(status, problems),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class CohortInfo:
    """A Cohort: its parent in the cohort tree, its own quotas, weight and weighted share."""

    name: str
    parent: str = ""
    weight: str | None = None
    weighted_share: int | None = None
    quotas: Quotas = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def parse_cohort(obj: object) -> CohortInfo | None:
    named = _named(obj)
    if named is None:
        return None
    cohort, _, name = named
    problems: list[str] = []
    spec = _mapping(cohort.get("spec"), "spec", problems)
    status = _mapping(cohort.get("status"), "status", problems)
    return CohortInfo(
        name=name,
        parent=_text(spec.get("parentName"), "spec.parentName", problems),
        weight=_weight(spec.get("fairSharing"), problems),
        weighted_share=_weighted_share(status, problems),
        quotas=_quotas(spec.get("resourceGroups"), problems),
        problems=tuple(problems),
    )


# --- the visibility API --------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingPosition:
    """One item of a ``PendingWorkloadsSummary`` (apis/visibility/v1beta2/types.go
    ``PendingWorkload``): positions start from 0."""

    namespace: str
    name: str
    local_queue: str
    position_in_cluster_queue: int
    position_in_local_queue: int
    priority: int


def parse_pending_workloads(body: object) -> list[PendingPosition]:
    """The items of a PendingWorkloadsSummary; an item without a name is skipped."""
    items = body.get("items") if isinstance(body, dict) else None
    out: list[PendingPosition] = []
    for raw in items if isinstance(items, list) else []:
        named = _named(raw)
        if named is None:
            continue
        item, meta, name = named

        def number(key: str, item: dict[str, Any] = item) -> int:
            value = item.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        out.append(
            PendingPosition(
                namespace=str(meta.get("namespace") or ""),
                name=name,
                local_queue=str(item.get("localQueueName") or ""),
                position_in_cluster_queue=number("positionInClusterQueue"),
                position_in_local_queue=number("positionInLocalQueue"),
                priority=number("priority"),
            )
        )
    return out
