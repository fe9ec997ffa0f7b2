"""Run-once work through the simulator's Kueue, end to end: a Job or JobSet created through the
simulator's API is suspended by Kueue's webhook, gets its Workload, is admitted on a flavor,
runs its pods on the fleet's nodes, finishes, and its quota is released; one that does not
fit waits with Kueue's message and its place in the visibility API."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from simulator import Simulator
from simulator.admission import Rejected, admit_object
from simulator.store import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    PODS,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from simulator.workloads import QUOTA_RESERVED, condition, workload_name

NS = "team"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def queues(sim: Simulator, gpus: str = "4") -> None:
    """A flavor on the h200 pool, a ClusterQueue ``team`` with ``gpus`` GPUs, LocalQueue
    ``gpu``."""
    store, now = sim.store, time.time()
    store.apply(NAMESPACES, {"metadata": {"name": NS}}, now)
    store.apply(
        RESOURCE_FLAVORS,
        {
            "metadata": {"name": "h200"},
            "spec": {
                "nodeLabels": {"ai-factory.io/pool": "h200"},
                "tolerations": [GPU_TOLERATION],
            },
        },
        now,
    )
    store.apply(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "team"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h200",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "memory", "nominalQuota": "512Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        now,
    )
    store.apply(
        LOCAL_QUEUES,
        {"metadata": {"name": "gpu", "namespace": NS}, "spec": {"clusterQueue": "team"}},
        now,
    )


def job(name: str, gpus: int = 1, parallelism: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": {"sim.ai-factory.io/run-seconds": "30"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "ghcr.io/ai-factory/trainer:1",
                            "resources": {
                                "requests": {
                                    "cpu": "1",
                                    "memory": "1Gi",
                                    "nvidia.com/gpu": str(gpus),
                                },
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
            **spec,
        },
    }


def workload_of(sim: Simulator, created: dict[str, Any]) -> dict[str, Any]:
    meta = created["metadata"]
    kind = created["kind"]
    group = "batch" if kind == "Job" else "jobset.x-k8s.io"
    name = workload_name(meta["name"], meta["uid"], kind, group)
    return sim.get_object("workloads", NS, name)


def job_pods(sim: Simulator, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sim.store.list(PODS, NS)
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == name
    ]


def get_json(sim: Simulator, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{sim.url}{path}") as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_job_is_queued_admitted_run_and_finished(simulator: Simulator) -> None:
    sim = simulator
    queues(sim)
    created = sim.create("jobs", job("train"))
    # Kueue's mutating webhook (mjob.kb.io) suspends a queued Job on creation.
    assert created["spec"]["suspend"] is True
    start = time.time()
    sim.tick(start)
    wl = workload_of(sim, created)
    assert wl["metadata"]["name"].startswith("job-train-")
    [owner] = wl["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "train", True)
    assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == created["metadata"]["uid"]
    assert wl["spec"]["queueName"] == "gpu"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": "2",
        "memory": "2Gi",
        "nvidia.com/gpu": "2",
    }
    running = sim.get_object("jobs", NS, "train")
    assert running["spec"]["suspend"] is False
    template = running["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"ai-factory.io/pool": "h200"}
    assert GPU_TOLERATION in template["spec"]["tolerations"]
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
    pods = job_pods(sim, "train")
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert all(p["spec"]["nodeName"].startswith("h200-") for p in pods)
    assert all("schedulingGates" not in p["spec"] for p in pods)  # the Job is Kueue's
    sim.tick(start + 1)
    team = sim.get_object("clusterqueues", "", "team")
    assert team["status"]["reservingWorkloads"] == 1
    assert team["status"]["flavorsReservation"][0]["resources"][2] == {
        "name": "nvidia.com/gpu",
        "total": "2",
        "borrowed": "0",
    }
    assert sim.get_object("jobs", NS, "train")["status"]["active"] == 2
    # The pods run their 30 s, succeed; the Job completes, the Workload finishes.
    sim.tick(start + 31)
    sim.tick(start + 32)
    done = sim.get_object("jobs", NS, "train")
    assert done["status"]["succeeded"] == 2
    complete = condition(done, "Complete")
    assert complete is not None
    assert (complete["status"], complete["reason"]) == ("True", "CompletionsReached")
    assert condition(done, "SuccessCriteriaMet") is not None
    finished = condition(workload_of(sim, created), "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == (
        "Succeeded",
        "Reached expected number of succeeded pods",
    )
    sim.tick(start + 33)
    team = sim.get_object("clusterqueues", "", "team")
    assert team["status"]["reservingWorkloads"] == 0
    assert team["status"]["flavorsReservation"][0]["resources"][2]["total"] == "0"


def test_a_job_over_quota_waits_with_kueues_message_and_position(simulator: Simulator) -> None:
    sim = simulator
    queues(sim, gpus="2")
    sim.create("jobs", job("first"))
    start = time.time()
    sim.tick(start)
    waiting = sim.create("jobs", job("second", parallelism=1))
    sim.tick(start + 1)
    wl = workload_of(sim, waiting)
    reserved = condition(wl, QUOTA_RESERVED)
    assert reserved is not None
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
    assert reserved["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor h200, 1 more needed"
    )
    assert sim.get_object("jobs", NS, "second")["spec"]["suspend"] is True
    status, summary = get_json(
        sim, "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/team/pendingworkloads"
    )
    assert status == 200
    [item] = summary["items"]
    assert item["metadata"]["name"] == wl["metadata"]["name"]
    assert (item["positionInClusterQueue"], item["positionInLocalQueue"]) == (0, 0)
    assert item["localQueueName"] == "gpu"
    status, local = get_json(
        sim,
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{NS}/localqueues/gpu/pendingworkloads",
    )
    assert (status, [i["metadata"]["name"] for i in local["items"]]) == (
        200,
        [wl["metadata"]["name"]],
    )
    status, missing = get_json(
        sim, "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/nope/pendingworkloads"
    )
    assert (status, missing["reason"]) == (404, "NotFound")
    assert missing["message"] == 'clusterqueue.visibility.kueue.x-k8s.io "nope" not found'
    # The first Job's pods end now (the /sim hand); its quota goes to the second.
    request = urllib.request.Request(
        f"{sim.url}/sim/jobs/{NS}/first/finish",
        data=json.dumps({"outcome": "Succeeded"}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read()) == {"pods": 2}
    sim.tick(start + 2)
    sim.tick(start + 3)
    assert sim.get_object("jobs", NS, "second")["spec"]["suspend"] is False
    assert len(job_pods(sim, "second")) == 1


def test_a_failed_job_fails_its_workload(simulator: Simulator) -> None:
    sim = simulator
    queues(sim)
    created = sim.create("jobs", job("flaky", parallelism=1, backoffLimit=0))
    start = time.time()
    sim.tick(start)
    assert sim.finish_job(NS, "flaky", "Failed") == 1
    sim.tick(start + 1)
    failed = sim.get_object("jobs", NS, "flaky")
    assert [(c["type"], c["reason"]) for c in failed["status"]["conditions"][-2:]] == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]
    finished = condition(workload_of(sim, created), "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == (
        "Failed",
        "Job has reached the specified backoff limit",
    )


def test_a_job_past_its_deadline_fails(simulator: Simulator) -> None:
    sim = simulator
    queues(sim)
    sim.create("jobs", job("slow", parallelism=1, activeDeadlineSeconds=10))
    start = time.time()
    sim.tick(start)
    sim.tick(start + 11)
    slow = sim.get_object("jobs", NS, "slow")
    failed = condition(slow, "Failed")
    assert failed is not None
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert job_pods(sim, "slow") == []


def test_deactivating_a_workload_suspends_its_job_and_reactivating_requeues_it(
    simulator: Simulator,
) -> None:
    sim = simulator
    queues(sim)
    created = sim.create("jobs", job("pausable", parallelism=1))
    start = time.time()
    sim.tick(start)
    wl = workload_of(sim, created)
    key = (NS, wl["metadata"]["name"])
    sim.store.mutate(WORKLOADS, *key, lambda o: o["spec"].update(active=False))
    sim.tick(start + 1)
    wl = sim.get_object("workloads", *key)
    evicted = condition(wl, "Evicted")
    assert evicted is not None
    assert (evicted["reason"], evicted["message"]) == ("Deactivated", "The workload is deactivated")
    requeued = condition(wl, "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"]) == ("False", "Deactivated")
    assert "admission" not in wl["status"]
    assert sim.get_object("jobs", NS, "pausable")["spec"]["suspend"] is True
    assert job_pods(sim, "pausable") == []
    sim.store.mutate(WORKLOADS, *key, lambda o: o["spec"].update(active=True))
    sim.tick(start + 2)
    sim.tick(start + 3)
    wl = sim.get_object("workloads", *key)
    assert (condition(wl, "Requeued") or {}).get("reason") == "Reactivated"
    assert (condition(wl, QUOTA_RESERVED) or {}).get("status") == "True"
    assert sim.get_object("jobs", NS, "pausable")["spec"]["suspend"] is False


def test_a_higher_priority_job_preempts_a_lower_one(simulator: Simulator) -> None:
    """withinClusterQueue LowerPriority: the low-priority Job is suspended, its pods gone,
    its Workload requeued; the high-priority one runs."""
    sim = simulator
    queues(sim, gpus="2")
    sim.store.mutate(
        CLUSTER_QUEUES,
        "",
        "team",
        lambda o: o["spec"].update(preemption={"withinClusterQueue": "LowerPriority"}),
    )
    for name, value in (("low", 10), ("high", 1000)):
        sim.put_object(
            "priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    low_job = job("low-job")
    low_job["spec"]["template"]["spec"]["priorityClassName"] = "low"
    low = sim.create("jobs", low_job)
    start = time.time()
    sim.tick(start)
    high_job = job("high-job")
    high_job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    high = sim.create("jobs", high_job)
    sim.tick(start + 1)
    low_wl = workload_of(sim, low)
    assert low_wl["spec"]["priority"] == 10
    assert low_wl["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "low",
    }
    preempted = condition(low_wl, "Preempted")
    assert preempted is not None
    assert preempted["reason"] == "InClusterQueue"
    assert f"UID: {workload_of(sim, high)['metadata']['uid']}" in preempted["message"]
    assert (condition(low_wl, "Requeued") or {}).get("status") == "True"
    assert sim.get_object("jobs", NS, "low-job")["spec"]["suspend"] is True
    assert job_pods(sim, "low-job") == []
    sim.tick(start + 2)
    assert sim.get_object("jobs", NS, "high-job")["spec"]["suspend"] is False
    assert len(job_pods(sim, "high-job")) == 2


def test_a_jobset_gets_one_workload_and_completes_with_its_jobs(simulator: Simulator) -> None:
    sim = simulator
    queues(sim)
    template = job("x", parallelism=1)["spec"]
    created = sim.create(
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": "multi",
                "namespace": NS,
                "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
            },
            "spec": {
                "replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": template}},
                    {"name": "workers", "replicas": 2, "template": {"spec": template}},
                ]
            },
        },
    )
    assert created["spec"]["suspend"] is True
    start = time.time()
    sim.tick(start)
    wl = workload_of(sim, created)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("leader", 1),
        ("workers", 2),
    ]
    sim.tick(start + 1)
    children = [j["metadata"]["name"] for j in sim.store.list(JOBS, NS)]
    assert children == ["multi-leader-0", "multi-workers-0", "multi-workers-1"]
    for child in children:
        assert sim.get_object("jobs", NS, child)["spec"]["suspend"] is False
    sim.tick(start + 31)
    sim.tick(start + 32)
    sim.tick(start + 33)
    completed = condition(sim.get_object("jobsets", NS, "multi"), "Completed")
    assert completed is not None
    assert (completed["reason"], completed["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert (condition(workload_of(sim, created), "Finished") or {}).get("reason") == "Succeeded"


def test_kueue_refuses_a_queue_change_on_a_running_job(simulator: Simulator) -> None:
    sim = simulator
    queues(sim)
    sim.create("jobs", job("steady", parallelism=1))
    sim.tick(time.time())
    old = sim.get_object("jobs", NS, "steady")
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    with pytest.raises(Rejected) as caught:
        admit_object(sim.store, new, JOBS, requester="alice", operation="UPDATE", old=old)
    assert str(caught.value) == (
        'admission webhook "vjob.kb.io" denied the request: '
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable'
    )
