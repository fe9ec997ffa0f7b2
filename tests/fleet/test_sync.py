"""The sync against the simulator over HTTP: inventory, applied/failed changes, stale data,
faults, malformed objects and the drain flow. The same client code a real cluster gets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from fleet import services
from fleet.models import FluxObject, Node, SyncState, Workload
from gitops.models import ChangeRequest, SourceToken
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec, TenantSpec
from portal.jobs import enqueue
from portal.models import AuditEvent, Job
from simulator import Simulator

# Bulk upserts (update_conflicts, ignore_conflicts) and row locks.
pytestmark = pytest.mark.db_engine

SHARE = GpuShare(name="infer", flavor="h200", kind="whole", count=2)
ENDPOINT = EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="infer")
CLUSTER = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2)


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    """The demo fleet, ticking on its own as in the demo (tests also step it)."""
    return start_fleet(tick_seconds=0.5)


@pytest.fixture
def still(start_fleet: Callable[..., Simulator]) -> Simulator:
    """The demo fleet moving only when the test ticks it: for tests of an order of events,
    which a background tick racing the test's own steps would make flaky."""
    return start_fleet()


def _reconcile(sim: Simulator) -> None:
    """Flux reconciles, then the controllers make things ready: two steps of the simulator.

    Asked for explicitly, in this thread: Flux checks tenants' tokens against the database,
    and the background tick's connection does not see this test's uncommitted rows.
    """
    sim.flux.request_reconcile(time.time())
    sim.tick()
    sim.tick()


@pytest.mark.django_db
def test_it_reads_the_inventory_over_http(sim: Simulator) -> None:
    report = services.sync_all()
    assert report.ok, report.errors
    assert Node.objects.count() == 18
    flavors = {n.flavor for n in Node.objects.all()}
    # The CPU-only system nodes belong to no GPU flavor.
    assert flavors == {"h200", "h200-mig", "h200-hami", "h200-dra", ""}
    assert Node.objects.filter(flavor="", gpu_count=0).count() == 2
    whole = Node.objects.filter(flavor="h200").first()
    assert whole is not None
    assert (whole.product, whole.gpu_count, whole.gpu_memory_mib) == ("NVIDIA-H200", 8, 143771)
    assert whole.gpu_allocatable["nvidia.com/gpu"] == 8
    assert whole.health == "healthy" and whole.ready is True
    mig = Node.objects.filter(flavor="h200-mig").first()
    assert mig is not None and mig.sharing == "mig"
    assert mig.mig_profiles == {"1g.18gb": 16, "2g.35gb": 8, "3g.71gb": 8}
    hami = Node.objects.filter(flavor="h200-hami").first()
    assert hami is not None and hami.sharing == "hami"
    assert hami.gpu_allocatable == {"nvidia.com/vgpu": 80}
    dra = Node.objects.filter(flavor="h200-dra").first()
    assert dra is not None and (dra.sharing, dra.gpu_count, dra.gpu_allocatable) == ("dra", 8, {})
    assert len({n.domain for n in Node.objects.exclude(flavor="")}) == 2  # two NVLink domains
    assert all(n.rack and n.block for n in Node.objects.all())
    vision = Workload.objects.filter(tenant_slug="vision")
    assert vision.exists()
    assert all(w.node for w in vision)
    states = {s.source: s for s in SyncState.objects.all()}
    assert set(states) == {"nodes", "pods", "flux", "kserve", "kueue", "crds"}
    assert not any(s.stale for s in states.values())


@pytest.mark.django_db
def test_it_runs_as_a_job_with_progress(
    sim: Simulator, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        job = enqueue("fleet.sync", title="sync")
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.progress == 100
    assert "18 nodes" in job.log


@pytest.mark.django_db
def test_it_marks_a_merged_change_applied_when_flux_reports_it(
    still: Simulator,
    merged_change: Callable[..., ChangeRequest],
    login: Callable[[str], Client],
) -> None:
    onboarding = merged_change(TenantSpec(slug="alpha"))
    services.sync_all()
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "pending"  # Flux has not reconciled yet
    _reconcile(still)
    services.sync_all()
    onboarding.refresh_from_db()
    # The namespace is there now, and with it the tenant's Git Secret (this sync wrote it);
    # until the source fetched with it, the tenant's own Kustomization has applied nothing.
    assert onboarding.apply_state == "pending", onboarding.apply_message
    assert "alpha/alpha-workloads has not applied it yet" in onboarding.apply_message
    assert SourceToken.objects.filter(tenant_slug="alpha").exists()
    _reconcile(still)
    services.sync_all()
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "applied", onboarding.apply_message
    tenants = FluxObject.objects.get(kind="Kustomization", namespace="flux-system", name="tenants")
    assert tenants.last_applied_revision == f"main@sha1:{onboarding.merge_sha}"
    assert FluxObject.objects.filter(tenant_slug="alpha", kind="Kustomization").exists()

    endpoint = merged_change(
        TenantSpec(slug="alpha", shares=(SHARE,), endpoints=(ENDPOINT,), clusters=(CLUSTER,))
    )
    _reconcile(still)
    services.sync_all()
    endpoint.refresh_from_db()
    assert endpoint.apply_state == "applied", endpoint.apply_message
    isvc = FluxObject.objects.get(kind="InferenceService", namespace="alpha", name="chat")
    assert isvc.state == "ready"
    assert isvc.url.startswith("http")
    assert Workload.objects.filter(tenant_slug="alpha").exclude(node="").exists()
    assert AuditEvent.objects.filter(action="change.apply_applied", tenant_slug="alpha").exists()
    vcluster = FluxObject.objects.get(kind="HelmRelease", name="alpha-dev")
    assert vcluster.is_vcluster and vcluster.released is True
    assert vcluster.cluster_state == "ready"
    page = login("bob").get("/t/alpha/status/")
    assert page.status_code == 200
    assert page.context["clusters"] == [{"name": "dev", "obj": vcluster}]
    assert isvc.url in page.content.decode()
    assert login("charlie").get("/t/alpha/status/").status_code == 404


@pytest.mark.django_db
def test_it_marks_a_change_failed_with_the_build_error(
    sim: Simulator, merged_change: Callable[..., ChangeRequest]
) -> None:
    merged_change(TenantSpec(slug="alpha"))
    _reconcile(sim)
    broken = merged_change(
        changes={
            "tenants/alpha/kustomization.yaml": (
                b"apiVersion: kustomize.config.k8s.io/v1beta1\n"
                b"kind: Kustomization\nresources:\n- missing.yaml\n"
            )
        }
    )
    _reconcile(sim)
    services.sync_all()
    broken.refresh_from_db()
    assert broken.apply_state == "failed"
    assert "flux-system/tenants" in broken.apply_message
    assert "missing.yaml" in broken.apply_message
    tenants = FluxObject.objects.get(kind="Kustomization", namespace="flux-system", name="tenants")
    assert tenants.state == "failed"
    assert tenants.last_applied_revision != f"main@sha1:{broken.merge_sha}"


@pytest.mark.django_db
def test_it_keeps_old_rows_and_marks_them_stale_when_the_api_is_down(
    sim: Simulator, login: Callable[[str], Client], settings: Any
) -> None:
    services.sync_all()
    sim.stop()
    report = services.sync_all()
    assert set(report.errors) == {"nodes", "pods", "flux", "kserve", "kueue"}
    assert Node.objects.count() == 18  # the last good read stays
    nodes = SyncState.objects.get(source="nodes")
    assert nodes.stale and "did not answer" in nodes.error
    assert nodes.last_success is not None
    page = login("pam").get("/fleet/")
    assert page.status_code == 200
    assert "did not answer" in page.content.decode()


@pytest.fixture
def silent_api(settings: Any) -> Iterator[str]:
    """A server that accepts connections and never answers: the API timing out."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    settings.FLEET_API_URL = f"http://127.0.0.1:{server.getsockname()[1]}"
    settings.FLEET_API_TIMEOUT = 0.5
    try:
        yield settings.FLEET_API_URL
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.django_db
def test_it_treats_a_timeout_as_stale_data_not_a_crash(silent_api: str) -> None:
    started = time.monotonic()
    report = services.sync_all()
    assert time.monotonic() - started < 30
    assert set(report.errors) == {"nodes", "pods", "flux", "kserve", "kueue", "crds"}
    assert all(SyncState.objects.get(source=s).stale for s in report.errors)


@pytest.mark.django_db
def test_it_shows_malformed_and_unknown_objects_as_unknown(
    sim: Simulator, login: Callable[[str], Client]
) -> None:
    sim.put_object("nodes", {"metadata": {"name": "odd-1", "labels": ["not", "a", "map"]}})
    sim.put_object(
        "nodes",
        {
            "metadata": {
                "name": "mystery-1",
                "labels": {"nvidia.com/gpu.product": "ACME-X1", "nvidia.com/gpu.count": "lots"},
            },
            "status": "broken",
        },
    )
    sim.put_object("nodes", {"metadata": {"labels": {"a": "b"}}, "status": {}})
    report = services.sync_all()
    assert "nodes" not in report.errors
    odd = Node.objects.get(name="odd-1")
    assert odd.health == "unknown" and odd.product == "" and odd.problems
    mystery = Node.objects.get(name="mystery-1")
    assert (mystery.product, mystery.flavor, mystery.gpu_count) == ("ACME-X1", "", 0)
    assert any("gpu.count" in p for p in mystery.problems)
    assert SyncState.objects.get(source="nodes").skipped == 1  # the nameless one
    client = login("pam")
    for url in ["/fleet/", "/fleet/nodes/", "/fleet/nodes/odd-1/", "/fleet/nodes/mystery-1/"]:
        assert client.get(url).status_code == 200, url
    assert "unknown" in client.get("/fleet/nodes/odd-1/").content.decode()


@pytest.mark.django_db
def test_it_shows_injected_gpu_and_node_faults(
    sim: Simulator, login: Callable[[str], Client]
) -> None:
    sim.inject_xid("h200-03", 5, 79)
    sim.set_node_ready("h200-07", False)
    services.sync_all()
    fallen = Node.objects.get(name="h200-03")
    assert fallen.health == "unhealthy"
    assert any("XID 79" in reason for reason in fallen.health_reasons), fallen.health_reasons
    assert fallen.gpu_allocatable["nvidia.com/gpu"] == 7
    down = Node.objects.get(name="h200-07")
    assert (down.health, down.ready) == ("unhealthy", None)
    assert any("Kubelet stopped posting node status." in r for r in down.health_reasons)
    page = login("pam").get("/fleet/nodes/h200-03/").content.decode()
    assert "SysLogsGPUFallenOff" in page
    sim.clear_faults()
    services.sync_all()
    assert Node.objects.get(name="h200-03").health == "healthy"


def _busy_node() -> Node:
    pod = Workload.objects.filter(tenant_slug="vision", owner_kind="Job").exclude(node="").first()
    assert pod is not None
    return Node.objects.get(name=pod.node)


@pytest.mark.django_db
def test_it_drains_a_node_through_the_eviction_api(
    sim: Simulator, world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    services.sync_all()
    node = _busy_node()
    before = Workload.objects.filter(tenant_slug="vision").count()
    plan = services.drain_plan(node)
    assert plan.tenants == ["vision"]
    assert plan.evict and all(p.node == node.name for p in plan.evict)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.do_drain(node, acting_user=world["pam"], plan=plan)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.log
    sim.tick()  # controllers re-create evicted pods elsewhere
    services.sync_all()
    node.refresh_from_db()
    assert node.unschedulable  # cordoned in the cluster, read back by the sync
    assert not Workload.objects.filter(node=node.name).exists()
    assert Workload.objects.filter(tenant_slug="vision").count() == before
    actions = set(AuditEvent.objects.values_list("action", "tenant_slug"))
    assert {("node.cordon", ""), ("node.drain", ""), ("node.drain", "vision")} <= actions
    assert ("node.drain_finished", "") in actions


@pytest.mark.django_db
def test_it_reports_pods_a_disruption_budget_protects(
    sim: Simulator, world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    services.sync_all()
    node = _busy_node()
    plan = services.drain_plan(node)
    blocked = plan.evict[0]
    labels = sim.get_object("pods", blocked.namespace, blocked.name)["metadata"]["labels"]
    sim.put_object(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-all", "namespace": blocked.namespace, "generation": 1},
            "spec": {"selector": {"matchLabels": labels}, "minAvailable": "100%"},
        },
    )
    with django_capture_on_commit_callbacks(execute=True):
        job = services.do_drain(node, acting_user=world["pam"], plan=plan)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert f"{blocked.namespace}/{blocked.name}" in job.log
    assert "disruption budget" in job.log


@pytest.mark.django_db
def test_usage_is_attributed_by_namespace_never_by_label(sim: Simulator) -> None:
    """A pod labelled as another tenant's stays its namespace's; a pod in a platform namespace
    is no tenant's, whatever its labels say (billing attributes GPU-seconds by this)."""
    services.sync_all()
    original = Workload.objects.filter(tenant_slug="vision").first()
    assert original is not None
    pod = sim.get_object("pods", original.namespace, original.name)
    spoofed = {**pod, "metadata": {**pod["metadata"], "uid": "spoof-1", "name": "spoof"}}
    spoofed["metadata"]["labels"] = {
        **pod["metadata"].get("labels", {}),
        "ai-factory.io/tenant": "alpha",
        "toolkit.fluxcd.io/tenant": "alpha",
    }
    sim.put_object("pods", spoofed)
    platform = {
        **spoofed,
        "metadata": {**spoofed["metadata"], "namespace": "monitoring", "uid": "spoof-2"},
    }
    sim.put_object("pods", platform)
    hosted = {
        **spoofed,
        "metadata": {**spoofed["metadata"], "namespace": "portal-system", "uid": "spoof-3"},
    }
    sim.put_object("pods", hosted)
    with services.Kube() as kube:
        services.sync_workloads(kube)
    assert Workload.objects.get(namespace=original.namespace, name="spoof").tenant_slug == (
        original.namespace
    )
    assert Workload.objects.get(namespace="monitoring", name="spoof").tenant_slug == ""
    assert Workload.objects.get(namespace="portal-system", name="spoof").tenant_slug == ""
    assert not Workload.objects.filter(tenant_slug="alpha").exists()
