"""Kueue objects parsed back: the state a Workload's conditions say, who preempted it and why,
its pod sets and flavors, and the queues' quotas and usage. The samples are checked against
Kueue's CRDs first (``../shared/fixtures`` records no Kueue objects; see kueue_samples.py)."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from fleet import kueue
from gitops.checks.schema import validate_object
from tests.fleet import kueue_samples as k
from tests.gitops.checks_support import require_crds

PREEMPTOR = "5f0e2a44-1c1e-4c39-9d2b-0d7c9e3d8a10"

SAMPLES: dict[str, dict[str, Any]] = {
    "new": k.workload("alpha", "job-train-1a2b3"),
    "waiting for quota": k.workload("alpha", "job-a", conditions=k.WAITING_FOR_QUOTA),
    "quota reserved": k.workload(
        "alpha", "job-b", conditions=k.QUOTA_RESERVED, admitted_to="alpha"
    ),
    "admitted": k.workload("alpha", "job-c", conditions=k.ADMITTED, admitted_to="alpha"),
    "preempted": k.workload(
        "alpha", "job-d", conditions=k.preempted("InCohortReclamation", PREEMPTOR)
    ),
    "evicted": k.workload("alpha", "job-e", conditions=k.EVICTED_PODS_READY),
    "inactive": k.workload("alpha", "job-f", conditions=k.DEACTIVATED, active=False),
    "succeeded": k.workload("alpha", "job-g", conditions=k.finished(True), admitted_to="alpha"),
    "failed": k.workload("alpha", "job-h", conditions=k.finished(False), admitted_to="alpha"),
    "cluster queue": k.cluster_queue("alpha", used=3, borrowed=1, lending_limit=2),
    "local queue": k.local_queue("alpha", used=3),
    "cohort": k.cohort("fleet", parent="root", weight="2"),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_samples_are_valid_kueue_objects(name: str) -> None:
    # The validator checks manifests for Git, which must not carry what the API server sets.
    sample = copy.deepcopy(SAMPLES[name])
    for field in ("uid", "creationTimestamp"):
        sample["metadata"].pop(field, None)
    problems = validate_object(sample, require_crds())
    assert problems == [], [str(p) for p in problems]


@pytest.mark.parametrize(
    ("sample", "state", "reason"),
    [
        ("new", "pending", ""),
        ("waiting for quota", "pending", "WaitingForQuota"),
        ("quota reserved", "quota-reserved", "UnsatisfiedAdmissionChecks"),
        ("admitted", "admitted", "Admitted"),
        ("preempted", "preempted", "InCohortReclamation"),
        ("evicted", "evicted", "PodsReadyTimeout"),
        ("inactive", "inactive", "Deactivated"),
        ("succeeded", "finished-succeeded", "Succeeded"),
        ("failed", "finished-failed", "Failed"),
    ],
)
def test_the_state_follows_kueues_conditions(sample: str, state: str, reason: str) -> None:
    info = kueue.parse_workload(SAMPLES[sample])
    assert info is not None
    assert (info.state, info.reason) == (state, reason)
    assert info.problems == ()


def test_a_pending_workload_says_what_it_waits_for() -> None:
    info = kueue.parse_workload(SAMPLES["waiting for quota"])
    assert info is not None
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100" in info.message
    assert info.cluster_queue == ""  # no admission yet: the LocalQueue names it
    assert info.local_queue == "gpu"


@pytest.mark.parametrize("reason", ["InClusterQueue", "InCohortReclamation", "InCohortFairSharing"])
def test_a_preempted_workload_names_its_preemptor_and_why(reason: str) -> None:
    info = kueue.parse_workload(
        k.workload("alpha", "job-d", conditions=k.preempted(reason, PREEMPTOR, "/fleet/bravo"))
    )
    assert info is not None
    assert info.state == "preempted"
    assert info.preemption_reason == reason
    assert info.preemptor_uid == PREEMPTOR
    assert info.preemptor_path == "/fleet/bravo"
    assert info.eviction_reason == "Preempted"
    assert reason in kueue.PREEMPTION_REASONS


def test_quota_reserved_again_ends_the_preempted_state() -> None:
    # SetQuotaReservation resets Preempted and Evicted to False ("Previously: ...").
    conditions = [
        {
            **c,
            "status": "False",
            "reason": "QuotaReserved",
            "message": f"Previously: {c['message']}",
        }
        if c["type"] in ("Preempted", "Evicted")
        else c
        for c in k.preempted("InClusterQueue", PREEMPTOR)
        if c["type"] not in ("QuotaReserved", "Admitted", "Requeued")
    ] + k.ADMITTED
    info = kueue.parse_workload(k.workload("alpha", "job-d", conditions=conditions))
    assert info is not None
    assert info.state == "admitted"
    assert info.preemptor_uid == "" and info.preemption_reason == ""


def test_an_unknown_preemptor_is_left_empty() -> None:
    uid, path = kueue.preemptor(
        "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: UNKNOWN; preemptee path: UNKNOWN"
    )
    assert (uid, path) == ("", "")


def test_pod_sets_carry_requests_and_assigned_flavors() -> None:
    admitted = kueue.parse_workload(
        k.workload("alpha", "js", count=4, gpus=2, conditions=k.ADMITTED, admitted_to="alpha")
    )
    pending = kueue.parse_workload(k.workload("alpha", "js", count=4, gpus=2))
    assert admitted is not None and pending is not None
    (assigned,) = admitted.pod_sets
    assert assigned.count == 4
    assert assigned.requests["nvidia.com/gpu"] == Decimal(8)
    assert assigned.flavors["nvidia.com/gpu"] == "h100"
    assert assigned.as_json()["requests"]["memory"] == str(32 * 2**30)
    (waiting,) = pending.pod_sets
    # From the pod template times the count, with no flavor yet.
    assert waiting.requests["nvidia.com/gpu"] == Decimal(8) and waiting.flavors == {}
    assert admitted.admitted_at is not None and admitted.owner_kind == "Job"
    assert admitted.priority == 500 and admitted.priority_class == "training"


def test_malformed_fields_are_named_not_fatal() -> None:
    broken = k.workload("alpha", "x")
    broken["spec"]["priority"] = "high"
    broken["status"] = {"conditions": "yes", "admission": []}
    info = kueue.parse_workload(broken)
    assert info is not None
    assert info.state == "pending" and info.priority is None
    assert set(info.problems) >= {
        "spec.priority is not a number",
        "status.conditions is not a list",
        "status.admission is not an object",
    }
    assert kueue.parse_workload({"metadata": {}}) is None


def test_a_cluster_queue_reads_quotas_usage_and_fair_share() -> None:
    info = kueue.parse_cluster_queue(
        k.cluster_queue(
            "alpha",
            nominal=4,
            lending_limit=2,
            borrowing_limit=3,
            used=5,
            borrowed=1,
            reserved=6,
            pending=2,
            admitted=3,
            weight="2",
            weighted_share=312,
        )
    )
    assert info is not None
    assert info.cohort == "fleet" and info.weight == "2" and info.weighted_share == 312
    assert info.quotas["h100"]["nvidia.com/gpu"] == {
        "nominal": "4",
        "borrowing_limit": "3",
        "lending_limit": "2",
    }
    assert info.usage["h100"]["nvidia.com/gpu"] == {"total": "5", "borrowed": "1"}
    assert info.reservation["h100"]["nvidia.com/gpu"]["total"] == "6"
    assert (info.pending, info.admitted, info.active) == (2, 3, True)


def test_a_local_queue_and_a_cohort() -> None:
    local = kueue.parse_local_queue(k.local_queue("alpha", used=3, pending=1))
    cohort = kueue.parse_cohort(k.cohort("team", parent="fleet", weight="2"))
    assert local is not None and cohort is not None
    assert (local.namespace, local.cluster_queue, local.pending) == ("alpha", "alpha", 1)
    assert local.usage["h100"]["nvidia.com/gpu"]["total"] == "3"
    assert (cohort.parent, cohort.weight, cohort.weighted_share) == ("fleet", "2", 0)


def test_a_pending_workloads_summary() -> None:
    # apis/visibility/v1beta2/types.go PendingWorkloadsSummary, as the API serves it.
    body = {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "metadata": {"creationTimestamp": None},
        "items": [
            {
                "metadata": {"name": "job-a", "namespace": "alpha", "creationTimestamp": k.T0},
                "priority": 500,
                "localQueueName": "gpu",
                "positionInClusterQueue": 0,
                "positionInLocalQueue": 0,
            },
            {"metadata": {}, "priority": 1},
        ],
    }
    (item,) = kueue.parse_pending_workloads(body)
    assert (item.namespace, item.name, item.position_in_cluster_queue) == ("alpha", "job-a", 0)
    assert kueue.parse_pending_workloads({"items": None}) == []
