"""Kueue objects as Kueue v0.19.2 writes them (``kueue.x-k8s.io/v1beta2``), for tests.

``../shared/fixtures`` has no recorded Kueue objects, so these are built from the CRDs'
shapes (``../shared/crds/kueue``; tests/fleet/test_kueue.py validates every builder against
them) and from the code that writes each field, cited where it matters:
- conditions: pkg/workload/workload.go (``SetQuotaReservation``, ``SetPreemptedCondition``),
  pkg/workload/evict, pkg/scheduler/scheduler.go, pkg/scheduler/flavorassigner (messages);
- preemption messages: pkg/scheduler/preemption/preemption.go ``preemptionMessage``;
- Workload names and owners: pkg/controller/jobframework (``GetWorkloadNameForOwnerWithGVK``:
  ``<kind>-<owner name>-<hash>``, an ownerReference with ``controller: true``).
"""

from __future__ import annotations

from typing import Any

API = "kueue.x-k8s.io/v1beta2"
T0 = "2025-06-01T10:00:00Z"
T1 = "2025-06-01T10:05:00Z"
T2 = "2025-06-01T10:20:00Z"

OWNER_API = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "Pod": "v1"}


def condition(
    kind: str, status: str, reason: str, message: str = "", at: str = T1
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }


def pod_set(name: str = "main", count: int = 1, gpus: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "count": count,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "ghcr.io/example/train:1",
                        "resources": {
                            "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
                            "limits": {"nvidia.com/gpu": str(gpus)},
                        },
                    }
                ],
            }
        },
    }


def admission(
    cluster_queue: str, flavor: str = "h100", count: int = 1, gpus: int = 1
) -> dict[str, Any]:
    return {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {
                "name": "main",
                "count": count,
                "flavors": {"cpu": flavor, "memory": flavor, "nvidia.com/gpu": flavor},
                "resourceUsage": {
                    "cpu": str(2 * count),
                    "memory": f"{8 * count}Gi",
                    "nvidia.com/gpu": str(gpus * count),
                },
            }
        ],
    }


def workload(
    namespace: str,
    name: str,
    *,
    owner_kind: str = "Job",
    owner_name: str = "",
    uid: str = "",
    queue: str = "gpu",
    priority: int | None = 500,
    priority_class: str = "training",
    count: int = 1,
    gpus: int = 1,
    conditions: list[dict[str, Any]] | None = None,
    admitted_to: str = "",
    flavor: str = "h100",
    active: bool | None = None,
) -> dict[str, Any]:
    """A Workload; ``admitted_to`` gives it an admission to that ClusterQueue."""
    owner_name = owner_name or name
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [pod_set(count=count, gpus=gpus)],
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
    if active is not None:
        spec["active"] = active
    status: dict[str, Any] = {}
    if conditions:
        status["conditions"] = conditions
    if admitted_to:
        status["admission"] = admission(admitted_to, flavor, count, gpus)
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "creationTimestamp": T0,
            "ownerReferences": [
                {
                    "apiVersion": OWNER_API.get(owner_kind, "v1"),
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": f"uid-{owner_kind.lower()}-{owner_name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
    if status:
        obj["status"] = status
    return obj


# --- condition sets, as Kueue leaves them at each stage --------------------------------------

WAITING_FOR_QUOTA = [
    condition(
        "QuotaReserved",
        "False",
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor h100, 2 more needed",
    )
]
QUOTA_RESERVED = [
    condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue alpha"),
    condition(
        "Admitted", "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready"
    ),
]
ADMITTED = [
    condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue alpha"),
    condition("Admitted", "True", "Admitted", "The workload is admitted", at=T2),
]


def preempted(reason: str, preemptor_uid: str, path: str = "/fleet/beta") -> list[dict[str, Any]]:
    """Evicted by preemption and requeued: Preempted and Evicted stay True until quota is
    reserved again; QuotaReserved and Admitted are False."""
    human = {
        "InClusterQueue": "prioritization in the ClusterQueue",
        "InCohortReclamation": "reclamation within the cohort",
        "InCohortFairSharing": "Fair Sharing within the cohort",
    }[reason]
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: job-{preemptor_uid}) "
        f"due to {human}; preemptor path: {path}; preemptee path: /fleet/alpha"
    )
    return [
        condition("QuotaReserved", "False", "Preempted", message, at=T2),
        condition("Admitted", "False", "NoReservation", "The workload has no reservation", at=T2),
        condition("Evicted", "True", "Preempted", message, at=T2),
        condition("Preempted", "True", reason, message, at=T2),
        condition("Requeued", "True", "Preempted", message, at=T2),
    ]


EVICTED_PODS_READY = [
    condition("QuotaReserved", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
    condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
    condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/x"),
]
DEACTIVATED = [
    condition("QuotaReserved", "False", "Deactivated", "The workload is deactivated"),
    condition(
        "Evicted",
        "True",
        "Deactivated",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
    ),
]


def finished(succeeded: bool) -> list[dict[str, Any]]:
    return [
        *ADMITTED,
        condition(
            "Finished",
            "True",
            "Succeeded" if succeeded else "Failed",
            "Job finished successfully"
            if succeeded
            else "Job has reached the specified backoff limit",
            at=T2,
        ),
    ]


# --- queues ---------------------------------------------------------------------------------


def cluster_queue(
    name: str,
    *,
    cohort: str = "fleet",
    flavor: str = "h100",
    nominal: int = 4,
    lending_limit: int | None = None,
    borrowing_limit: int | None = None,
    used: int = 0,
    borrowed: int = 0,
    reserved: int | None = None,
    pending: int = 0,
    admitted: int = 0,
    weight: str = "1",
    weighted_share: int | None = 0,
) -> dict[str, Any]:
    """A tenant's ClusterQueue as gitops.render.kueue renders it, with a status."""
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}
    if borrowing_limit is not None:
        gpu["borrowingLimit"] = str(borrowing_limit)
    if lending_limit is not None:
        gpu["lendingLimit"] = str(lending_limit)
    reserved = used if reserved is None else reserved

    def usage(total: int) -> list[dict[str, Any]]:
        return [
            {
                "name": flavor,
                "resources": [
                    {"name": "cpu", "total": str(2 * total), "borrowed": "0"},
                    {"name": "nvidia.com/gpu", "total": str(total), "borrowed": str(borrowed)},
                ],
            }
        ]

    status: dict[str, Any] = {
        "conditions": [condition("Active", "True", "Ready", "Can admit new workloads")],
        "flavorsReservation": usage(reserved),
        "flavorsUsage": usage(used),
        "pendingWorkloads": pending,
        "reservingWorkloads": admitted,
        "admittedWorkloads": admitted,
    }
    if weighted_share is not None:
        status["fairSharing"] = {"weightedShare": weighted_share}
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "uid": f"uid-cq-{name}"},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"ai-factory.io/tenant": name}},
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": weight},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": "cpu", "nominalQuota": "64"}, gpu],
                        }
                    ],
                }
            ],
        },
        "status": status,
    }


def local_queue(
    namespace: str, name: str = "gpu", *, cluster_queue: str = "", used: int = 0, pending: int = 0
) -> dict[str, Any]:
    usage = [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": str(used)}]}]
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-lq-{namespace}-{name}"},
        "spec": {"clusterQueue": cluster_queue or namespace},
        "status": {
            "conditions": [condition("Active", "True", "Ready", "Can submit new workloads")],
            "flavorsReservation": usage,
            "flavorsUsage": usage,
            "pendingWorkloads": pending,
            "reservingWorkloads": 0,
            "admittedWorkloads": 0,
        },
    }


def cohort(name: str = "fleet", *, parent: str = "", weight: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if weight:
        spec["fairSharing"] = {"weight": weight}
    return {
        "apiVersion": API,
        "kind": "Cohort",
        "metadata": {"name": name, "uid": f"uid-cohort-{name}"},
        "spec": spec,
        "status": {"fairSharing": {"weightedShare": 0}},
    }
