"""Seed workloads Kueue admitted before the simulator started (``SeedWorkload.cluster_queue``):
their Workload holds their requests in the tenant's ClusterQueue, a job of lower priority
waits behind them instead of preempting them, and a replaced pod runs under the same
admission."""

from __future__ import annotations

from decimal import Decimal

from simulator.cluster import Cluster
from simulator.config import POOL_LABEL, NodeGroup, SeedWorkload, SimConfig
from simulator.store import CLUSTER_QUEUES, LOCAL_QUEUES, PODS, RESOURCE_FLAVORS, WORKLOADS, Store
from simulator.workloads import QUOTA_RESERVED, condition, holds_quota, is_evicted
from tests.simulator.kueue_world import workload

TRAIN = SeedWorkload(
    "team",
    "train",
    pods=2,
    resources=(("nvidia.com/gpu", "4"), ("cpu", "8"), ("memory", "64Gi")),
    pool="h200",
    cluster_queue="team",
    priority_class="training",
    priority=500,
)


def _cluster(*seeds: SeedWorkload) -> Cluster:
    config = SimConfig(
        node_groups=(NodeGroup(pool="h200", nodes=2, labels=((POOL_LABEL, "h200"),)),),
        seed_workloads=seeds,
    )
    cluster = Cluster(config, Store(), now=0)
    # What Flux applies once the tenant is merged: its flavor, queue and 10 GPUs.
    store = cluster.store
    cluster.ensure_namespace("team", 1)
    store.apply(RESOURCE_FLAVORS, {"metadata": {"name": "h200"}, "spec": {}}, 1)
    resources = [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "memory", "nominalQuota": "512Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": "10"},
    ]
    store.apply(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "team"},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": [r["name"] for r in resources],
                        "flavors": [{"name": "h200", "resources": resources}],
                    }
                ],
            },
        },
        1,
    )
    store.apply(
        LOCAL_QUEUES,
        {"metadata": {"name": "gpu", "namespace": "team"}, "spec": {"clusterQueue": "team"}},
        1,
    )
    return cluster


def test_a_seed_workload_holds_its_quota_and_a_lower_priority_job_waits_behind_it() -> None:
    cluster = _cluster(TRAIN)
    (seed,) = cluster.store.list(WORKLOADS, "team")
    assert holds_quota(seed)
    assert seed["spec"]["priority"] == 500
    assert cluster.kueue.usage()[("team", "h200", "nvidia.com/gpu")] == Decimal(8)

    workload(cluster.store, "eval", "team", "gpu", {"nvidia.com/gpu": "4"}, priority=100)
    cluster.tick(2)

    waiting = cluster.store.get(WORKLOADS, "team", "eval")
    reserved = condition(waiting or {}, QUOTA_RESERVED) or {}
    assert reserved.get("status") == "False"
    assert "insufficient unused quota for nvidia.com/gpu in flavor h200" in reserved["message"]
    seed = cluster.store.get(WORKLOADS, *(seed["metadata"][k] for k in ("namespace", "name")))
    assert seed is not None and holds_quota(seed) and not is_evicted(seed)
    # Without the seed's admission the job fits: 4 of 10 GPUs.
    empty = _cluster()
    workload(empty.store, "eval", "team", "gpu", {"nvidia.com/gpu": "4"}, priority=100)
    empty.tick(2)
    assert holds_quota(empty.store.get(WORKLOADS, "team", "eval") or {})


def test_a_replaced_seed_pod_runs_under_the_same_admission() -> None:
    cluster = _cluster(TRAIN)
    victim = next(p for p in cluster.store.list(PODS, "team"))
    cluster.delete_pod("team", victim["metadata"]["name"], now=2)
    cluster.tick(3)

    pods = cluster.store.list(PODS, "team")
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert not any(p["spec"].get("schedulingGates") for p in pods)
    (seed,) = cluster.store.list(WORKLOADS, "team")
    assert holds_quota(seed)
    assert cluster.kueue.usage()[("team", "h200", "nvidia.com/gpu")] == Decimal(8)
