"""Queue positions from Kueue's visibility API, read over HTTP from the simulator (which serves
it as Kueue v0.19.2's pkg/visibility/storage does): paged with offset/limit, written to the
waiting workloads' rows, cleared when a workload stops waiting; no request at all when nothing
waits; a ClusterQueue the API does not know is skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleet import services, watch
from fleet.kube import Kube
from fleet.models import QueueWorkload
from gitops.render.meta import TENANT_LABEL
from simulator import Simulator
from simulator.kueue import Kueue
from simulator.store import CLUSTER_QUEUES, LOCAL_QUEUES, NAMESPACES, RESOURCE_FLAVORS, WORKLOADS
from tests.fleet import kueue_samples as k
from tests.simulator import kueue_world

GPUS = {"cpu": "1", "nvidia.com/gpu": "2"}


@pytest.fixture
def queued(start_fleet: Callable[..., Simulator], world: dict[str, Any]) -> Simulator:
    """alpha's queue of 2 GPUs: one workload admitted, five waiting behind it (two of them in
    a second LocalQueue of alpha's)."""
    # Without the demo's seed workloads (their Workloads are Kueue's too): only alpha's.
    sim = start_fleet(watch_bookmark_seconds=0.2, seed_workloads=())
    store = sim.store
    store.apply(RESOURCE_FLAVORS, {"metadata": {"name": "h100"}, "spec": {}}, 0)
    store.apply(NAMESPACES, {"metadata": {"name": "alpha", "labels": {TENANT_LABEL: "alpha"}}}, 0)
    queue = k.cluster_queue("alpha", nominal=2)
    del queue["status"]
    store.apply(CLUSTER_QUEUES, queue, 0)
    for name in ("gpu", "batch"):
        store.apply(
            LOCAL_QUEUES, {**k.local_queue("alpha", name, cluster_queue="alpha"), "status": {}}, 0
        )
    for index in range(6):
        queue_name = "batch" if index in (2, 4) else "gpu"
        kueue_world.workload(store, f"job-{index}", "alpha", queue_name, GPUS, created=index + 1)
    kueue = Kueue(store, fair_sharing=False)
    kueue.schedule(10)
    kueue.update_status(10)
    return sim


def _sync(sim: Simulator) -> None:
    with Kube() as kube:
        for name in ("clusterqueues", "localqueues", "workloads"):
            watch.relist(next(w for w in watch.WATCHED if w.name == name), kube)


@pytest.mark.django_db
def test_positions_are_read_page_by_page(queued: Simulator) -> None:
    _sync(queued)
    assert QueueWorkload.objects.get(name="job-0").state == "admitted"
    with Kube() as kube:
        read = services.sync_positions(kube, page=2)  # three pages for five waiting
    assert read == 5
    rows = {w.name: w for w in QueueWorkload.objects.all()}
    assert (rows["job-0"].position_in_cluster_queue, rows["job-0"].positions_read) == (None, None)
    in_cq = {n: r.position_in_cluster_queue for n, r in rows.items() if n != "job-0"}
    assert in_cq == {"job-1": 0, "job-2": 1, "job-3": 2, "job-4": 3, "job-5": 4}
    # Per LocalQueue: gpu holds 1, 3, 5; batch holds 2, 4.
    in_lq = {n: r.position_in_local_queue for n, r in rows.items() if n != "job-0"}
    assert in_lq == {"job-1": 0, "job-3": 1, "job-5": 2, "job-2": 0, "job-4": 1}
    assert all(rows[n].cluster_queue == "alpha" for n in in_cq)


@pytest.mark.django_db
def test_a_workload_that_stops_waiting_loses_its_position(queued: Simulator) -> None:
    _sync(queued)
    with Kube() as kube:
        services.sync_positions(kube)
        # job-0 finishes, job-1 is admitted in its place; the watch event and the next read.
        queued.store.delete(WORKLOADS, "alpha", "job-0")
        Kueue(queued.store, fair_sharing=False).schedule(20)
        watch.relist(next(w for w in watch.WATCHED if w.name == "workloads"), kube)
        assert QueueWorkload.objects.get(name="job-1").state == "admitted"
        assert QueueWorkload.objects.get(name="job-1").position_in_cluster_queue is None
        assert QueueWorkload.objects.get(name="job-2").position_in_cluster_queue == 1  # as read
        services.sync_positions(kube)
    assert QueueWorkload.objects.get(name="job-2").position_in_cluster_queue == 0


@pytest.mark.django_db
def test_nothing_waiting_sends_no_request(
    start_fleet: Callable[..., Simulator], world: dict[str, Any]
) -> None:
    start_fleet()
    services.store_queue_workloads(
        [k.workload("alpha", "job-run", conditions=k.ADMITTED, admitted_to="alpha")]
    )

    class NoCalls(Kube):
        def pending_workloads(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("no ClusterQueue waits: no request")

    with NoCalls() as kube:
        assert services.sync_positions(kube) == 0


@pytest.mark.django_db
def test_a_cluster_queue_the_api_does_not_know_is_skipped(
    start_fleet: Callable[..., Simulator], world: dict[str, Any]
) -> None:
    start_fleet()
    # A row says ClusterQueue "ghost" has a waiting workload; the API answers 404 for it.
    services.store_queue_workloads(
        [k.workload("alpha", "job-wait", conditions=k.WAITING_FOR_QUOTA)]
    )
    QueueWorkload.objects.update(cluster_queue="ghost", position_in_cluster_queue=3)
    with Kube() as kube:
        assert services.sync_positions(kube) == 0
    assert QueueWorkload.objects.get(name="job-wait").position_in_cluster_queue is None


@pytest.mark.django_db(transaction=True)
def test_the_scheduled_task_records_its_freshness(
    queued: Simulator, django_capture_on_commit_callbacks: Any
) -> None:
    from fleet.models import SyncState
    from portal.jobs import enqueue

    _sync(queued)
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("fleet.queue_positions")
    state = SyncState.objects.get(source=SyncState.Source.POSITIONS)
    assert state.items == 5 and state.error == "" and state.last_success is not None
    queued.stop()  # the API is gone: the failure is recorded, the positions stay
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("fleet.queue_positions")
    state.refresh_from_db()
    assert state.error and QueueWorkload.objects.filter(position_in_cluster_queue=0).exists()
