"""Issue 28, "Kueue workloads requeued": remediation drains a faulty node running a Kueue Job
whose evicted pod cannot be placed again (no capacity left); the Kueue Configuration the
portal committed (``waitForPodsReady``, applied by Flux) has the simulator's Kueue evict the
Workload after ``recoveryTimeout``, release its quota and requeue it; the tenant's queue page
shows it evicted with Kueue's reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from fleet import remediation, services
from fleet.models import Remediation, RemediationPolicy
from gitops import services as gitops_services
from gitops.fleet import configured_fleet
from simulator import Simulator
from simulator.config import POOL_LABEL, NodeGroup
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    PODS,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from simulator.workloads import condition

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]

NS = "alpha"  # the tenant's namespace; its ClusterQueue is named after it
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _queues(sim: Simulator, now: float) -> None:
    """alpha's ClusterQueue of 16 GPUs on the h200 pool, and its LocalQueue ``gpu``."""
    sim.store.apply(NAMESPACES, {"metadata": {"name": NS}}, now)
    sim.store.apply(
        RESOURCE_FLAVORS,
        {
            "metadata": {"name": "train"},
            "spec": {"nodeLabels": {POOL_LABEL: "h200"}, "tolerations": [GPU_TOLERATION]},
        },
        now,
    )
    quota = [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "memory", "nominalQuota": "512Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": "16"},
    ]
    sim.store.apply(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": NS},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [{"name": "train", "resources": quota}],
                    }
                ],
            },
        },
        now,
    )
    sim.store.apply(
        LOCAL_QUEUES,
        {"metadata": {"name": "gpu", "namespace": NS}, "spec": {"clusterQueue": NS}},
        now,
    )


def _job() -> dict[str, Any]:
    """Two pods of 8 GPUs: the whole of the two-node pool."""
    container = {
        "name": "train",
        "image": "ghcr.io/ai-factory/trainer:1",
        "resources": {
            "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
            "limits": {"nvidia.com/gpu": "8"},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "finetune",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"annotations": {"sim.ai-factory.io/run-seconds": "86400"}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def _workload(sim: Simulator) -> dict[str, Any]:
    [found] = [
        w
        for w in sim.store.list(WORKLOADS, NS)
        if w["metadata"]["ownerReferences"][0]["name"] == "finetune"
    ]
    return found


def _job_pods(sim: Simulator) -> list[dict[str, Any]]:
    return [
        p
        for p in sim.store.list(PODS, NS)
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == "finetune"
    ]


def test_a_drained_jobs_unplaceable_pod_releases_its_quota_and_requeues_it(
    start_fleet: Callable[..., Simulator],
    world: dict[str, Any],
    login: Callable[[str], Client],
) -> None:
    fleet = configured_fleet()
    recovery = fleet.pods_ready.recovery_seconds
    gitops_services.ensure_bootstrapped(fleet)
    sim = start_fleet(
        node_groups=(NodeGroup(pool="h200", nodes=2, labels=((POOL_LABEL, "h200"),)),),
        seed_workloads=(),
    )
    start = time.time()
    sim.tick(start)
    sim.tick(start)  # Flux: the infrastructure, with Kueue's ConfigMap
    applied = sim.get_object("configmaps", "kueue-system", "kueue-manager-config")
    assert "waitForPodsReady" in applied["data"]["controller_manager_config.yaml"]
    assert sim.cluster.kueue.wait_for_pods_ready.recovery_timeout == recovery
    _queues(sim, start)
    sim.create("jobs", _job())
    sim.tick(start + 1)
    sim.tick(start + 2)
    ready = condition(_workload(sim), "PodsReady") or {}
    assert (ready.get("status"), ready.get("reason")) == ("True", "Started")
    nodes = sorted(p["spec"]["nodeName"] for p in _job_pods(sim))
    assert nodes == ["h200-01", "h200-02"]

    # A fatal XID on h200-01: cordoned, then drained at once (no grace).
    policy = RemediationPolicy.current()
    policy.grace_seconds = 0
    policy.save()
    services.sync_all()
    sim.inject_xid("h200-01", 0, 79)
    for _ in range(3):
        services.sync_all()
        remediation.step()
    assert Remediation.objects.get().state == Remediation.State.BURN_IN  # drained
    drained = time.time()
    sim.tick(drained)  # the Job's replacement pod: nowhere to go
    sim.tick(drained + 1)
    pending = [p for p in _job_pods(sim) if p["status"]["phase"] == "Pending"]
    assert len(pending) == 1 and "unschedulable" in str(pending[0]["status"]["conditions"])
    wl = _workload(sim)
    assert (condition(wl, "PodsReady") or {}).get("reason") == "WaitForRecovery"
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"  # still held

    # Past recoveryTimeout: evicted, the Job suspended, the quota released, requeued.
    sim.tick(drained + 1 + recovery + 1)
    sim.tick(drained + 1 + recovery + 2)
    wl = _workload(sim)
    evicted = condition(wl, "Evicted") or {}
    assert (evicted.get("status"), evicted.get("reason")) == ("True", "PodsReadyTimeout")
    assert wl["status"]["requeueState"]["count"] == 1
    assert "admission" not in wl["status"]
    assert sim.get_object("jobs", NS, "finetune")["spec"]["suspend"] is True
    assert _job_pods(sim) == []
    assert sim.get_object("clusterqueues", "", NS)["status"]["reservingWorkloads"] == 0

    # The portal reads it back: the tenant's queue page lists it evicted, with Kueue's reason.
    services.sync_all()
    page = login("bob").get(f"/t/{NS}/queue/").content.decode()
    row = page.split(wl["metadata"]["name"], 1)[1].split("</tr>", 1)[0]
    assert "PodsReadyTimeout" in row
    assert f"Exceeded the PodsReady timeout {NS}/{wl['metadata']['name']}" in row
