"""A sleeping tenant cluster frees its GPUs (catalog.cluster_sleep, fleet.sleep) against the
simulator: the catalog puts the cluster to sleep through main, the simulator's Flux scales its
control plane to zero, and the idle merge's pass then deletes the pods its syncer left running
in the tenant's namespace, as ``vcluster pause`` does, and nothing else."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from catalog import cluster_sleep, idle_actions, tasks
from catalog.models import Kind, Resource
from fleet import services as fleet
from fleet.kube import Kube, KubeError
from fleet.models import Workload
from gitops.fleet import configured_fleet
from gitops.render import portal
from portal.models import AuditEvent, Job
from simulator import Simulator
from simulator.store import PODS, resource_of
from simulator.virtual import VirtualCluster
from tests.simulator.test_simulator_vcluster_sync import gpu_pod
from tests.support.catalog import through_main

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 4}
DEV = {"name": "dev", "node_pools": ["h200"], "gpu_quota": 2}
OPS = {"name": "ops", "node_pools": ["h200"], "gpu_quota": 2}
DEV_POD = "train-1-x-default-x-dev"
OPS_POD = "train-1-x-default-x-ops"


def _run_gpu_pod(sim: Simulator, release: str) -> VirtualCluster:
    """A 2-GPU pod created in the tenant cluster ``release``, synced and running on the host."""
    cluster = sim.flux.virtual_cluster("alpha", release)
    assert cluster is not None
    pod = gpu_pod("train-1", 2)
    pod["metadata"]["namespace"] = "default"
    cluster.create(pod, 0)
    sim.tick()
    host = sim.get_object("pods", "alpha", f"train-1-x-default-x-{release}")
    assert host["status"]["phase"] == "Running"
    return cluster


def _host_pods(sim: Simulator) -> set[str]:
    return {p["metadata"]["name"] for p in sim.store.list(PODS, "alpha")}


def _busy_gpus(sim: Simulator) -> int:
    return sum(node.busy_gpus() for node in sim.cluster.nodes.values())


def _asleep_on_main(run_jobs: Any, cluster: Resource) -> None:
    request = run_jobs(idle_actions.sleep, cluster, reason="idle for 8 hours")
    assert request.change is not None, request.error
    assert run_jobs(idle_actions.merge_ready) == 1
    assert idle_actions.is_asleep(cluster)


def _scene(
    world: dict[str, Any], run_jobs: Any, start_fleet: Callable[..., Simulator], **options: Any
) -> tuple[Simulator, Resource, VirtualCluster]:
    through_main(world, run_jobs, Kind.GPU_SHARE, SHARE)
    dev = through_main(world, run_jobs, Kind.CLUSTER, DEV)
    through_main(world, run_jobs, Kind.CLUSTER, OPS)
    sim = start_fleet(**options)
    for _ in range(3):
        sim.tick()
    cluster = _run_gpu_pod(sim, "dev")
    _run_gpu_pod(sim, "ops")
    return sim, dev, cluster


@pytest.fixture
def scene(
    world: dict[str, Any], onboarded: Any, run_jobs: Any, start_fleet: Callable[..., Simulator]
) -> tuple[Simulator, Resource, VirtualCluster]:
    """alpha with two tenant clusters on main, ``dev`` and ``ops``, each running a 2-GPU pod."""
    return _scene(world, run_jobs, start_fleet)


def test_a_sleeping_clusters_pods_go_once_its_control_plane_is_gone_and_free_the_gpus(
    scene: tuple[Simulator, Resource, VirtualCluster], run_jobs: Any
) -> None:
    sim, dev, _ = scene
    busy = _busy_gpus(sim)
    # Awake on main: nothing to do.
    report = cluster_sleep.free_sleeping_clusters()
    assert (report.freed, report.waiting, report.errors) == ({}, [], {})
    assert {DEV_POD, OPS_POD, "dev-0", "ops-0"} <= _host_pods(sim)

    _asleep_on_main(run_jobs, dev)
    # Main holds it asleep, but Flux has not scaled the control plane down yet: it waits.
    report = cluster_sleep.free_sleeping_clusters()
    assert report.waiting == ["alpha/dev"] and report.freed == {}
    assert DEV_POD in _host_pods(sim)

    sim.tick()  # Flux applies main: the StatefulSet at 0 replicas, its pod goes
    pods = _host_pods(sim)
    assert "dev-0" not in pods
    # Only the control plane went: the synced pod still runs and holds its GPUs.
    assert DEV_POD in pods and _busy_gpus(sim) == busy

    report = cluster_sleep.free_sleeping_clusters()
    assert report.freed == {"alpha/dev": (DEV_POD,)} and report.errors == {}
    pods = _host_pods(sim)
    assert DEV_POD not in pods
    # The other release's control plane and pod, in the same namespace, are untouched.
    assert {OPS_POD, "ops-0"} <= pods
    assert _busy_gpus(sim) == busy - 2
    [event] = AuditEvent.objects.filter(action=cluster_sleep.AUDIT_ACTION)
    assert event.tenant_slug == "alpha" and event.target_id == str(dev.pk)
    assert event.diff == {"host_pods_deleted": [None, 1]} and event.actor is None

    # Idempotent: the next pass finds nothing, deletes nothing and records nothing.
    report = cluster_sleep.free_sleeping_clusters()
    assert (report.freed, report.waiting, report.errors) == ({}, [], {})
    assert AuditEvent.objects.filter(action=cluster_sleep.AUDIT_ACTION).count() == 1
    assert {OPS_POD, "ops-0"} <= _host_pods(sim)


def test_the_idle_merge_task_frees_them_and_logs_what_went(
    scene: tuple[Simulator, Resource, VirtualCluster], run_jobs: Any
) -> None:
    sim, dev, _ = scene
    _asleep_on_main(run_jobs, dev)
    sim.tick()
    tasks.idle_merge()
    job = Job.objects.filter(task="catalog.idle_merge").latest("pk")
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert f"alpha/dev: asleep, 1 host pods deleted: {DEV_POD}" in job.log
    assert "1 host pods of sleeping clusters gone" in job.log
    assert DEV_POD not in _host_pods(sim)


def test_a_cluster_awake_on_main_is_never_touched(
    scene: tuple[Simulator, Resource, VirtualCluster],
) -> None:
    """Even with its control plane gone (as after a crash), main holds it awake: its pods
    stay."""
    sim, _, _ = scene
    sim.cluster.delete_pod("alpha", "dev-0", 0, recreate=False)
    assert "dev-0" not in _host_pods(sim)
    report = cluster_sleep.free_sleeping_clusters()
    assert (report.freed, report.waiting, report.errors) == ({}, [], {})
    assert DEV_POD in _host_pods(sim)
    assert not AuditEvent.objects.filter(action=cluster_sleep.AUDIT_ACTION).exists()


def test_woken_the_syncer_drops_the_started_pod_and_a_new_one_runs(
    scene: tuple[Simulator, Resource, VirtualCluster], run_jobs: Any
) -> None:
    """What a Deployment in the tenant cluster sees on wake: its started pod has no host pod,
    so the syncer deletes it (pods/syncer.go ``SyncToHost``), and the pod its ReplicaSet makes
    in its place is synced and runs on the GPUs again."""
    sim, dev, cluster = scene
    _asleep_on_main(run_jobs, dev)
    sim.tick()
    cluster_sleep.free_sleeping_clusters()
    free = _busy_gpus(sim)
    assert cluster.get("", "Pod", "default", "train-1") is not None  # kept while asleep

    woken = run_jobs(idle_actions.wake, dev, reason="wanted", actor=None)
    assert woken.change is not None, woken.error
    assert run_jobs(idle_actions.merge_ready) == 1
    sim.tick()  # the control plane is back, then its syncer runs
    sim.tick()
    assert "dev-0" in _host_pods(sim)
    assert cluster.get("", "Pod", "default", "train-1") is None
    assert DEV_POD not in _host_pods(sim)
    _run_gpu_pod(sim, "dev")  # the replacement
    assert _busy_gpus(sim) == free + 2
    # Awake again: the pass leaves the new pod alone.
    cluster_sleep.free_sleeping_clusters()
    assert DEV_POD in _host_pods(sim)


def test_the_portals_own_account_with_its_rendered_rbac_frees_them(
    world: dict[str, Any], onboarded: Any, run_jobs: Any, start_fleet: Callable[..., Simulator]
) -> None:
    """The portal as its own service account, with only its ClusterRole (its deployment's,
    applied here by hand) and the tenant's portal-access Role as Flux applied it from main."""
    fleet = configured_fleet()
    account = f"system:serviceaccount:{fleet.portal_namespace}:{fleet.portal_service_account}"
    sim, dev, _ = _scene(world, run_jobs, start_fleet, as_account=account)
    for obj in portal.rbac_objects(fleet):
        resource = resource_of(obj["apiVersion"], obj["kind"])
        if resource is not None and obj["kind"] != "ServiceAccount":
            sim.store.apply(resource, obj, 0)
    _asleep_on_main(run_jobs, dev)
    sim.tick()
    report = cluster_sleep.free_sleeping_clusters()
    assert report.errors == {} and report.freed == {"alpha/dev": (DEV_POD,)}
    assert DEV_POD not in _host_pods(sim)
    # Without a tenant cluster there is no grant: bravo's pods (and the platform's) are out
    # of reach.
    with Kube() as kube:
        for namespace, name in (("bravo", "anything"), ("flux-system", "anything")):
            with pytest.raises(KubeError) as refused:
                kube.delete_pod(namespace, name)
            assert refused.value.status == 403


def test_the_catalog_shows_a_sleeping_clusters_pods_until_they_are_freed(
    scene: tuple[Simulator, Resource, VirtualCluster], run_jobs: Any, login: Any
) -> None:
    sim, dev, _ = scene
    _asleep_on_main(run_jobs, dev)
    sim.tick()
    fleet.sync_all()
    assert Workload.objects.get(namespace="alpha", name=DEV_POD).vcluster == "dev"
    bob = login("bob")
    page = bob.get("/t/alpha/catalog/").content.decode()
    assert "asleep" in page and "1 pod running" in page
    cluster_sleep.free_sleeping_clusters()
    fleet.sync_all()
    page = bob.get("/t/alpha/catalog/").content.decode()
    assert "0 pods running" in page
    # The other cluster's pod is still seen, as its own.
    assert Workload.objects.get(namespace="alpha", name=OPS_POD).vcluster == "ops"


def test_an_api_server_that_does_not_answer_is_reported_and_the_next_pass_frees_them(
    scene: tuple[Simulator, Resource, VirtualCluster], run_jobs: Any, settings: Any
) -> None:
    sim, dev, _ = scene
    _asleep_on_main(run_jobs, dev)
    sim.tick()
    served = settings.FLEET_API_URL
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        settings.FLEET_API_URL = f"http://127.0.0.1:{closed.getsockname()[1]}"
    report = cluster_sleep.free_sleeping_clusters()
    assert list(report.errors) == ["alpha/dev"] and "did not answer" in report.errors["alpha/dev"]
    assert report.freed == {} and DEV_POD in _host_pods(sim)
    assert not AuditEvent.objects.filter(action=cluster_sleep.AUDIT_ACTION).exists()
    settings.FLEET_API_URL = served
    assert cluster_sleep.free_sleeping_clusters().freed == {"alpha/dev": (DEV_POD,)}
