"""The fleet watcher follows Kueue as it follows the other kinds, against the simulator over
HTTP: Workloads, ClusterQueues, LocalQueues and Cohorts are listed, then watched (events write
and remove rows), a compacted version is Gone and the watcher lists again; the scheduled sync
lists them too. Workloads belong to the tenant of their namespace, never of a label."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from fleet import services, watch
from fleet.kube import Kube
from fleet.models import (
    ClusterQueueStatus,
    CohortStatus,
    LocalQueueStatus,
    QueueWorkload,
    SyncState,
    WatchState,
)
from gitops.render.meta import TENANT_LABEL
from simulator import Simulator
from simulator.store import CLUSTER_QUEUES, COHORTS, LOCAL_QUEUES, WORKLOADS, Resource
from tests.fleet import kueue_samples as k
from tests.support import wait_until


def _watched(name: str) -> watch.Watched:
    return next(w for w in watch.WATCHED if w.name == name)


@pytest.fixture
def still(start_fleet: Callable[..., Simulator]) -> Simulator:
    # Without the demo's seed workloads (their Workloads are Kueue's too): only the test's own.
    return start_fleet(watch_bookmark_seconds=0.2, seed_workloads=())


def _put(sim: Simulator, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    return sim.store.apply(resource, obj, 0)


# Each kind: its store resource, a sample, a change to it, and how to read the row's key fact.
KINDS: dict[
    str,
    tuple[
        Resource, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None], Callable[[], Any]
    ],
] = {
    "workloads": (
        WORKLOADS,
        lambda: k.workload("alpha", "job-train-1a2b3", conditions=k.WAITING_FOR_QUOTA),
        lambda obj: obj.update(
            status={"conditions": k.ADMITTED, "admission": k.admission("alpha")}
        ),
        lambda: QueueWorkload.objects.get(namespace="alpha", name="job-train-1a2b3").state,
    ),
    "clusterqueues": (
        CLUSTER_QUEUES,
        lambda: k.cluster_queue("alpha", used=0),
        lambda obj: obj["status"].update(k.cluster_queue("alpha", used=3)["status"]),
        lambda: ClusterQueueStatus.objects.get(name="alpha").usage["h100"]["nvidia.com/gpu"][
            "total"
        ],
    ),
    "localqueues": (
        LOCAL_QUEUES,
        lambda: k.local_queue("alpha", pending=0),
        lambda obj: obj["status"].update(pendingWorkloads=2),
        lambda: LocalQueueStatus.objects.get(namespace="alpha", name="gpu").pending,
    ),
    "cohorts": (
        COHORTS,
        lambda: k.cohort("team"),
        lambda obj: obj["spec"].update(parentName="fleet"),
        lambda: CohortStatus.objects.get(name="team").parent,
    ),
}
BEFORE_AFTER = {
    "workloads": ("pending", "admitted"),
    "clusterqueues": ("0", "3"),
    "localqueues": (0, 2),
    "cohorts": ("", "fleet"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kueue_kind_is_listed_then_watched(
    kind: str, still: Simulator, world: dict[str, Any]
) -> None:
    resource, sample, change, fact = KINDS[kind]
    watched = _watched(kind)
    stored = _put(still, resource, sample())
    namespace = stored["metadata"].get("namespace", "")
    name = stored["metadata"]["name"]
    before, after = BEFORE_AFTER[kind]
    with Kube() as kube:
        version = watch.relist(watched, kube)
        assert fact() == before
        state = WatchState.objects.get(kind=kind)
        assert state.resource_version == version and state.last_list is not None
        still.store.mutate(resource, namespace, name, change)
        version = watch.watch_once(watched, kube, version, timeout=1)
        assert fact() == after
        still.store.delete(resource, namespace, name)
        watch.watch_once(watched, kube, version, timeout=1)
    with pytest.raises(Exception, match="does not exist"):
        fact()
    assert SyncState.objects.get(source=SyncState.Source.KUEUE).items == 1


@pytest.mark.django_db(transaction=True)
def test_the_workload_watch_lists_again_after_410(still: Simulator, world: dict[str, Any]) -> None:
    workloads = _watched("workloads")
    _put(still, WORKLOADS, k.workload("alpha", "job-a", conditions=k.WAITING_FOR_QUOTA))
    with Kube() as kube:
        watch.relist(workloads, kube)
    # While nobody watches: one workload admitted, one added, then history is compacted.
    still.store.mutate(
        WORKLOADS,
        "alpha",
        "job-a",
        lambda obj: obj.update(
            status={"conditions": k.ADMITTED, "admission": k.admission("alpha")}
        ),
    )
    _put(still, WORKLOADS, k.workload("alpha", "job-b"))
    still.store.compact()
    stop = threading.Event()
    runner = threading.Thread(target=watch.run, args=(workloads, stop))
    runner.start()
    try:
        wait_until(
            lambda: WatchState.objects.get(kind="workloads").relists >= 1,
            10,
            "the workload watch to list again",
        )
        wait_until(
            lambda: QueueWorkload.objects.filter(name="job-b").exists(),
            10,
            "the relist to bring the new workload",
        )
        assert QueueWorkload.objects.get(name="job-a").state == "admitted"
        # And it watches on from the relist's version.
        still.store.delete(WORKLOADS, "alpha", "job-a")
        wait_until(
            lambda: not QueueWorkload.objects.filter(name="job-a").exists(),
            10,
            "the watch to remove the deleted workload",
        )
    finally:
        stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()


@pytest.mark.django_db
def test_the_scheduled_sync_lists_kueue_too(still: Simulator, world: dict[str, Any]) -> None:
    _put(still, COHORTS, k.cohort("fleet"))
    _put(still, CLUSTER_QUEUES, k.cluster_queue("alpha", pending=1))
    _put(still, LOCAL_QUEUES, k.local_queue("alpha"))
    _put(still, WORKLOADS, k.workload("alpha", "job-a", conditions=k.WAITING_FOR_QUOTA))
    report = services.sync_all()
    assert SyncState.Source.KUEUE not in report.errors
    assert report.counts[SyncState.Source.KUEUE] >= 4
    row = QueueWorkload.objects.get(name="job-a")
    # Pending: no admission yet, so its ClusterQueue is its LocalQueue's.
    assert (row.state, row.cluster_queue, row.local_queue) == ("pending", "alpha", "gpu")
    assert ClusterQueueStatus.objects.get(name="alpha").tenant == world["alpha"]
    assert CohortStatus.objects.filter(name="fleet").exists()


@pytest.mark.django_db
def test_workloads_belong_to_the_tenant_of_their_namespace(
    still: Simulator, world: dict[str, Any]
) -> None:
    # A tenant cluster's pod, synced by vCluster into alpha's namespace under its host name
    # (<name>-x-<namespace>-x-<vcluster>), with a label naming another tenant.
    synced = k.workload(
        "alpha",
        "pod-train-0-x-default-x-dev-3c4d5",
        owner_kind="Pod",
        owner_name="train-0-x-default-x-dev",
    )
    synced["metadata"]["labels"] = {"ai-factory.io/tenant": "bravo"}
    _put(still, WORKLOADS, synced)
    _put(still, WORKLOADS, k.workload("kube-system", "job-platform"))
    _put(still, WORKLOADS, k.workload("bravo", "jobset-sweep-9f8e7", owner_kind="JobSet"))
    with Kube() as kube:
        watch.relist(_watched("workloads"), kube)
    pod = QueueWorkload.objects.get(name="pod-train-0-x-default-x-dev-3c4d5")
    assert pod.tenant == world["alpha"]
    assert (pod.owner_kind, pod.owner_name) == ("Pod", "train-0-x-default-x-dev")
    assert QueueWorkload.objects.get(name="job-platform").tenant is None
    jobset = QueueWorkload.objects.get(name="jobset-sweep-9f8e7")
    assert (jobset.tenant, jobset.owner_kind) == (world["bravo"], "JobSet")
    # One event for one workload: the same attribution.
    with Kube() as kube:
        version = WatchState.objects.get(kind="workloads").resource_version
        still.store.mutate(
            WORKLOADS,
            "alpha",
            "pod-train-0-x-default-x-dev-3c4d5",
            lambda obj: obj.update(
                status={"conditions": k.ADMITTED, "admission": k.admission("alpha")}
            ),
        )
        watch.watch_once(_watched("workloads"), kube, version, timeout=1)
    pod.refresh_from_db()
    assert (pod.state, pod.tenant) == ("admitted", world["alpha"])


@pytest.mark.django_db
def test_a_preempted_workload_keeps_who_preempted_it(
    still: Simulator, world: dict[str, Any]
) -> None:
    preemptor = _put(
        still,
        WORKLOADS,
        k.workload("bravo", "job-urgent", conditions=k.ADMITTED, admitted_to="bravo"),
    )
    uid = preemptor["metadata"]["uid"]
    _put(
        still,
        WORKLOADS,
        k.workload(
            "alpha", "job-d", conditions=k.preempted("InCohortReclamation", uid, "/fleet/bravo")
        ),
    )
    with Kube() as kube:
        watch.relist(_watched("workloads"), kube)
    row = QueueWorkload.objects.get(name="job-d")
    assert (row.state, row.preemption_reason, row.preemptor_uid) == (
        "preempted",
        "InCohortReclamation",
        uid,
    )
    assert QueueWorkload.objects.get(uid=row.preemptor_uid).name == "job-urgent"


@pytest.mark.django_db
def test_the_states_the_simulators_kueue_writes_read_back(
    still: Simulator, world: dict[str, Any]
) -> None:
    """Conditions as the simulator's Kueue writes them (modelled on Kueue v0.19.2's
    scheduler and preemptor), not as the samples spell them: admitted, pending for quota,
    and preempted within the ClusterQueue by a workload of higher priority."""
    from simulator.kueue import Kueue
    from simulator.store import NAMESPACES, RESOURCE_FLAVORS
    from tests.simulator import kueue_world

    store = still.store
    store.apply(RESOURCE_FLAVORS, {"metadata": {"name": "h100"}, "spec": {}}, 0)
    store.apply(NAMESPACES, {"metadata": {"name": "alpha", "labels": {TENANT_LABEL: "alpha"}}}, 0)
    queue = k.cluster_queue("alpha", nominal=2)
    queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    del queue["status"]
    store.apply(CLUSTER_QUEUES, queue, 0)
    store.apply(LOCAL_QUEUES, {**k.local_queue("alpha"), "status": {}}, 0)
    kueue = Kueue(store, fair_sharing=False)
    gpus = {"cpu": "1", "nvidia.com/gpu": "2"}
    kueue_world.workload(store, "low", "alpha", "gpu", gpus, priority=100, created=1)
    kueue.schedule(1)
    kueue_world.workload(store, "later", "alpha", "gpu", gpus, priority=100, created=2)
    high = kueue_world.workload(store, "high", "alpha", "gpu", gpus, priority=900, created=3)
    kueue.schedule(4)
    kueue.update_status(4)
    with Kube() as kube:
        watch.relist(_watched("workloads"), kube)
        watch.relist(_watched("clusterqueues"), kube)
    rows = {w.name: w for w in QueueWorkload.objects.all()}
    low = rows["low"]
    assert (low.state, low.preemption_reason) == ("preempted", "InClusterQueue")
    assert low.preemptor_uid == high["metadata"]["uid"]
    assert low.preemptor_path.endswith("/alpha")
    assert rows["later"].state == "pending" and rows["later"].message
    assert rows["high"].state == "pending"  # waiting for the preempted workload to go
    assert all(w.tenant == world["alpha"] for w in rows.values())
    cq = ClusterQueueStatus.objects.get(name="alpha")
    assert cq.quotas["h100"]["nvidia.com/gpu"]["nominal"] == "2"
