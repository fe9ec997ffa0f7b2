"""Building Kueue's objects in the simulator's store, as Kueue's own tests build them with
``utiltestingapi.MakeWorkload``, ``MakeClusterQueue`` and ``MakeLocalQueue``."""

from __future__ import annotations

from typing import Any

from simulator.kueue import Kueue
from simulator.store import WORKLOADS, Store
from simulator.workloads import (
    MAIN,
    QUOTA_RESERVED,
    condition,
    holds_quota,
    new_workload,
    pod_set,
    reserve_quota,
)


def workload(
    store: Store,
    name: str,
    namespace: str,
    queue: str,
    requests: dict[str, str],
    *,
    priority: int = 0,
    created: float = 0,
    count: int = 1,
    pod_spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    uid: str = "",
) -> dict[str, Any]:
    """A pending Workload with one pod set ``main`` of ``count`` pods requesting ``requests``
    (``MakeWorkload(name, ns).Queue(queue).Priority(p).Request(...)``)."""
    template: dict[str, Any] = {
        "metadata": {"annotations": dict(annotations or {})},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": dict(requests)}}],
            **(pod_spec or {}),
        },
    }
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "active": True,
            "queueName": queue,
            "priority": priority,
            "podSets": [pod_set(MAIN, template, count)],
        },
    }
    stored = store.apply(WORKLOADS, obj, created)
    if uid:
        # The store hands out uids; Kueue's wrappers name them, and preemption's candidate
        # order ends with the uid.
        stored = store.mutate(WORKLOADS, namespace, name, lambda o: o["metadata"].update(uid=uid))
    return stored or obj


def admitted(
    store: Store,
    name: str,
    namespace: str,
    cq: str,
    flavors: dict[str, str],
    *,
    priority: int = 0,
    created: float = 0,
    reserved: float | None = None,
    queue: str = "",
    uid: str = "",
    **requests: str,
) -> dict[str, Any]:
    """A Workload already holding quota in ``cq`` (``ReserveQuota(MakeAdmission(cq)...)``):
    ``requests`` as resource usage, ``gpu`` meaning ``example.com/gpu``."""
    usage = {("example.com/gpu" if r == "gpu" else r): v for r, v in requests.items()}
    obj = workload(
        store, name, namespace, queue or cq, usage, priority=priority, created=created, uid=uid
    )
    at = created if reserved is None else reserved
    admission = {
        "clusterQueue": cq,
        "podSetAssignments": [
            {
                "name": MAIN,
                "count": 1,
                "flavors": {
                    ("example.com/gpu" if r == "gpu" else r): f for r, f in flavors.items()
                },
                "resourceUsage": usage,
            }
        ],
    }
    return (
        store.mutate(WORKLOADS, namespace, name, lambda o: reserve_quota(o, admission, at)) or obj
    )


def admit_pod(
    store: Store, pod: dict[str, Any], *, fair_sharing: bool = False
) -> dict[str, str] | str:
    """Queue ``pod`` as the pod integration does (a Workload with pod set ``main`` of 1), run
    a scheduling cycle, and give the flavor of each resource Kueue assigned, or the pending
    message; an admitted pod gets the flavors' node labels and tolerations, and its Workload
    keeps holding the quota."""
    index = len(store.list(WORKLOADS))
    pod = {**pod, "apiVersion": "v1"}
    pod["metadata"] = {**pod["metadata"], "uid": f"uid-{index}"}
    wl = store.apply(WORKLOADS, new_workload(store, pod, "Pod", "", [pod_set(MAIN, pod, 1)]), 0)
    kueue = Kueue(store, fair_sharing=fair_sharing)
    kueue.schedule(0)
    wl = store.get(WORKLOADS, wl["metadata"]["namespace"], wl["metadata"]["name"]) or wl
    if not holds_quota(wl):
        found = condition(wl, QUOTA_RESERVED)
        assert found is not None
        return str(found["message"])
    flavors = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]
    kueue.apply_admission(pod, flavors.values())
    pod.pop("apiVersion")
    return dict(flavors)
