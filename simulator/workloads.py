"""Kueue's Workload objects (``kueue.x-k8s.io/v1beta2``): how they are named, built from a Job,
a JobSet or a pod, prioritised, and how their conditions are written.

Read from kubernetes-sigs/kueue v0.19.2:

- names: ``pkg/controller/jobframework/workload_names.go`` ``GetWorkloadNameForOwnerWithGVK``:
  ``<kind in lower case>-<owner name>`` cut to 247 characters, a dash, then the first five hex
  digits of the SHA-1 of ``kind\\ngroup\\nname\\nuid`` (``ShortWorkloadNames`` is off by
  default); a standalone pod's is the same with kind ``Pod`` (``pkg/controller/jobs/pod``
  ``GetWorkloadNameForPod``);
- the object: ``jobframework.ConstructWorkload`` and ``NewWorkload`` (a controller
  ownerReference to the job, the ``kueue.x-k8s.io/job-uid`` label, ``spec.queueName`` from the
  queue label), pod sets from ``PodSets()`` (a Job: one pod set ``main`` of ``parallelism``
  pods; a JobSet: one per replicated job, ``replicas x parallelism`` pods; a pod: ``main`` of 1);
- priority: ``jobframework.ExtractPriority`` and ``pkg/util/priority``: the
  ``kueue.x-k8s.io/priority-class`` label names a WorkloadPriorityClass, else the first pod
  set's ``priorityClassName`` a PriorityClass, else the ``globalDefault`` PriorityClass; 0
  when none (``spec.priorityClassRef`` names the class used);
- conditions: ``apimeta.SetStatusCondition`` (the transition time moves only when the status
  does), ``pkg/workload`` ``SetQuotaReservation``, ``UnsetQuotaReservationWithCondition``,
  ``SyncAdmittedCondition`` (no AdmissionChecks: a quota reservation is an admission),
  ``SetRequeuedCondition``, ``SetPreemptedCondition``; ``pkg/workload/evict``
  ``SetEvictedCondition``; ``pkg/workload/finish``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from simulator.admission import pod_usage, quantity
from simulator.store import (
    PRIORITY_CLASSES,
    WORKLOAD_PRIORITY_CLASSES,
    JsonObject,
    Store,
    as_dict,
    as_list,
    timestamp,
)

API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# Condition types (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
# The pod set names of the integrations (``kueue.DefaultPodSetName``).
MAIN = "main"
_HASH_LENGTH = 5
_MAX_NAME = 253


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str) -> str:
    """``GetWorkloadNameForOwnerWithGVK`` (workload_names.go)."""
    prefix = f"{kind.lower()}-{owner_name}"[: _MAX_NAME - 1 - _HASH_LENGTH]
    digest = hashlib.sha1(  # noqa: S324 (Kueue's naming hash, not a security use)
        f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()
    ).hexdigest()
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


# --- conditions --------------------------------------------------------------------------------


def condition(obj: Mapping[str, Any], kind: str) -> JsonObject | None:
    for item in as_list(as_dict(obj.get("status")).get("conditions")):
        if as_dict(item).get("type") == kind:
            return as_dict(item)
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    obj: JsonObject,
    kind: str,
    status: bool,
    reason: str,
    message: str,
    now: float,
    *,
    generation: bool = True,
) -> None:
    """``apimeta.SetStatusCondition``: the transition time stays while the status does
    (``generation`` False for kinds whose conditions have no ``observedGeneration``, such as
    batch/v1 Jobs)."""
    state = obj.setdefault("status", {})
    conditions = [as_dict(c) for c in as_list(state.get("conditions"))]
    observed = as_dict(obj.get("metadata")).get("generation") if generation else None
    value = "True" if status else "False"
    old = next((c for c in conditions if c.get("type") == kind), None)
    new: JsonObject = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(now)
        if old is None or old.get("status") != value
        else old.get("lastTransitionTime"),
    }
    if observed is not None:
        new["observedGeneration"] = observed
    if old is None:
        conditions.append(new)
    else:
        conditions[conditions.index(old)] = new
    state["conditions"] = conditions


def reset_active(obj: JsonObject, kind: str, reason: str, now: float) -> None:
    """``resetActiveCondition``: a True condition becomes False, "Previously: <message>"."""
    old = condition(obj, kind)
    if old is not None and old.get("status") == "True":
        set_condition(obj, kind, False, reason, f"Previously: {old.get('message', '')}", now)


def has_quota(wl: Mapping[str, Any]) -> bool:
    """``HasQuotaReservation``."""
    return is_true(wl, QUOTA_RESERVED)


def is_finished(wl: Mapping[str, Any]) -> bool:
    return is_true(wl, FINISHED)


def is_evicted(wl: Mapping[str, Any]) -> bool:
    return is_true(wl, EVICTED)


def is_active(wl: Mapping[str, Any]) -> bool:
    """``spec.active`` defaults to true."""
    return as_dict(wl.get("spec")).get("active") is not False


def holds_quota(wl: Mapping[str, Any]) -> bool:
    """Counted in its ClusterQueue's usage: reserved and not finished (the cache drops a
    finished workload's usage, pkg/cache/scheduler ``DeleteWorkload`` on finish)."""
    return (
        has_quota(wl) and not is_finished(wl) and bool(as_dict(wl.get("status")).get("admission"))
    )


def is_pending(wl: Mapping[str, Any]) -> bool:
    """Queued: active, not finished, no quota reserved (``pkg/cache/queue`` adds such)."""
    return is_active(wl) and not is_finished(wl) and not has_quota(wl)


def reserve_quota(wl: JsonObject, admission: JsonObject, now: float) -> None:
    """``SetQuotaReservation`` then ``SyncAdmittedCondition`` (no AdmissionChecks)."""
    wl.setdefault("status", {})["admission"] = admission
    cq = admission.get("clusterQueue", "")
    set_condition(
        wl, QUOTA_RESERVED, True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now
    )
    reset_active(wl, EVICTED, "QuotaReserved", now)
    reset_active(wl, PREEMPTED, "QuotaReserved", now)
    set_condition(wl, ADMITTED, True, "Admitted", "The workload is admitted", now)


def unset_quota(wl: JsonObject, reason: str, message: str, now: float) -> None:
    """``UnsetQuotaReservationWithCondition`` then ``SyncAdmittedCondition``: Admitted goes
    False with reason NoReservation once it had been True."""
    set_condition(wl, QUOTA_RESERVED, False, reason, message, now)
    wl.setdefault("status", {}).pop("admission", None)
    if condition(wl, ADMITTED) is not None:
        set_condition(wl, ADMITTED, False, "NoReservation", "The workload has no reservation", now)


def evict(wl: JsonObject, reason: str, message: str, now: float, *, cause: str = "") -> None:
    """``workloadevict.Evict``'s status change (``SetEvictedCondition``; a deactivation with
    an underlying cause is reason ``DeactivatedDueTo<cause>``, ``patching.ReasonWithCause``)
    and its count in ``schedulingStats`` by reason and cause (``workloadEvictionStateInc``)."""
    shown = f"{reason}DueTo{cause}" if reason == "Deactivated" and cause else reason
    set_condition(wl, EVICTED, True, shown, message, now)
    stats = wl.setdefault("status", {}).setdefault("schedulingStats", {})
    evictions = [as_dict(e) for e in as_list(stats.get("evictions"))]
    entry = next(
        (
            e
            for e in evictions
            if e.get("reason") == reason and (e.get("underlyingCause") or "") == cause
        ),
        None,
    )
    if entry is None:
        evictions.append({"reason": reason, "underlyingCause": cause, "count": 1})
    else:
        entry["count"] = int(entry.get("count") or 0) + 1
    stats["evictions"] = evictions


def finish(wl: JsonObject, reason: str, message: str, now: float) -> None:
    """``workloadfinish.Finish``: Finished True (Succeeded or Failed, the job's message)."""
    set_condition(wl, FINISHED, True, reason, message, now)


def finisher(reason: str, message: str, now: float) -> Callable[[JsonObject], None]:
    """``finish`` as a ``Store.mutate`` change."""
    return lambda obj: finish(obj, reason, message, now)


# --- construction ------------------------------------------------------------------------------


def pod_set(name: str, template: Mapping[str, Any], count: int) -> JsonObject:
    """A ``PodSet``: the template as the job has it, its metadata kept to what Kueue copies."""
    metadata = as_dict(template.get("metadata"))
    kept = {k: metadata[k] for k in ("labels", "annotations") if metadata.get(k)}
    return {
        "name": name,
        "count": count,
        "template": {"metadata": kept, "spec": as_dict(template.get("spec"))},
    }


def per_pod_requests(podset: Mapping[str, Any]) -> dict[str, Decimal]:
    """One pod's requests (``PodRequestsAndLimits``' sums of its containers)."""
    return {
        key.removeprefix("requests."): value
        for key, value in pod_usage(as_dict(podset.get("template"))).items()
        if key.startswith("requests.")
    }


def priority(
    store: Store, labels: Mapping[str, Any], podsets: Iterable[Mapping[str, Any]]
) -> tuple[int, JsonObject | None]:
    """``ExtractPriority``: (priority, ``priorityClassRef``)."""
    name = labels.get(PRIORITY_CLASS_LABEL)
    if isinstance(name, str) and name:
        found = store.get(WORKLOAD_PRIORITY_CLASSES, "", name)
        if found is not None:
            ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": name}
            return int(found.get("value") or 0), ref
    for podset in podsets:
        class_name = as_dict(as_dict(podset.get("template")).get("spec")).get("priorityClassName")
        if isinstance(class_name, str) and class_name:
            found = store.get(PRIORITY_CLASSES, "", class_name)
            if found is not None:
                ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class_name}
                return int(found.get("value") or 0), ref
            break
    for found in store.list(PRIORITY_CLASSES):
        if found.get("globalDefault") is True:
            name = str(as_dict(found.get("metadata")).get("name", ""))
            ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
            return int(found.get("value") or 0), ref
    return 0, None


def new_workload(
    store: Store,
    owner: Mapping[str, Any],
    kind: str,
    group: str,
    podsets: list[JsonObject],
) -> JsonObject:
    """``ConstructWorkload`` for ``owner`` (a Job, a JobSet or a pod) with ``podsets``."""
    metadata = as_dict(owner.get("metadata"))
    name, uid = str(metadata.get("name", "")), str(metadata.get("uid", ""))
    labels = as_dict(metadata.get("labels"))
    value, ref = priority(store, labels, podsets)
    spec: JsonObject = {
        "active": True,
        "podSets": podsets,
        "queueName": str(labels.get(QUEUE_LABEL, "")),
        "priority": value,
    }
    if ref is not None:
        spec["priorityClassRef"] = ref
    wl_labels = {JOB_UID_LABEL: uid}
    if PRIORITY_CLASS_LABEL in labels:
        wl_labels[PRIORITY_CLASS_LABEL] = str(labels[PRIORITY_CLASS_LABEL])
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name, uid, kind, group),
            "namespace": str(metadata.get("namespace", "")),
            "labels": wl_labels,
            "ownerReferences": [
                {
                    "apiVersion": str(owner.get("apiVersion", "")),
                    "kind": kind,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def owner_of(wl: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the workload's controller owner."""
    for ref in as_list(as_dict(wl.get("metadata")).get("ownerReferences")):
        ref = as_dict(ref)
        if ref.get("controller") is True:
            return str(ref.get("kind", "")), str(ref.get("name", ""))
    return "", ""


def usage(wl: Mapping[str, Any]) -> dict[tuple[str, str], Decimal]:
    """(flavor, resource) -> quantity the workload's admission holds."""
    held: dict[tuple[str, str], Decimal] = {}
    admission = as_dict(as_dict(wl.get("status")).get("admission"))
    for assignment in as_list(admission.get("podSetAssignments")):
        assignment = as_dict(assignment)
        flavors = as_dict(assignment.get("flavors"))
        for resource, amount in as_dict(assignment.get("resourceUsage")).items():
            flavor = str(flavors.get(resource, ""))
            key = (flavor, str(resource))
            held[key] = held.get(key, Decimal(0)) + quantity(amount)
    return held
