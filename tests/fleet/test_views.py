"""The fleet pages: who sees them, what they show from the cached rows (stale or odd), and the
node actions. The cluster is only reached by cordon and drain: the simulator, over HTTP."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from fleet.models import FluxObject, Node, SyncState, Workload
from portal.models import AuditEvent, Job
from simulator import Simulator
from simulator.config import NodeGroup, SimConfig
from simulator.store import RESOURCES

NODE = "gpu-01.example.com"
SHA = "0123456789abcdef0123456789abcdef01234567"
ADMIN_PAGES = [
    "/fleet/",
    "/fleet/nodes/",
    "/fleet/nodes/gpu-01.example.com/",
    "/fleet/topology/",
    "/fleet/status/",
    "/fleet/portal-deployment/",
]
ADMIN_ACTIONS = [
    "/fleet/sync/",
    "/fleet/flavors/recount/",
    "/fleet/nodes/gpu-01.example.com/cordon/",
    "/fleet/nodes/gpu-01.example.com/uncordon/",
    "/fleet/nodes/gpu-01.example.com/drain/",
]


def make_node(name: str, **fields: Any) -> Node:
    defaults: dict[str, Any] = {
        "pool": "h200",
        "flavor": "h200",
        "product": "NVIDIA-H200",
        "gpu_count": 8,
        "gpu_memory_mib": 143771,
        "sharing": "whole",
        "health": "healthy",
        "ready": True,
        "gpu_capacity": {"nvidia.com/gpu": 8},
        "gpu_allocatable": {"nvidia.com/gpu": 8},
        "block": "block-a",
        "rack": "rack-1",
    }
    return Node.objects.create(name=name, **{**defaults, **fields})


def make_workload(
    name: str, tenant: str, node: str = "gpu-01.example.com", gpus: int = 2
) -> Workload:
    return Workload.objects.create(
        namespace=tenant,
        name=name,
        tenant_slug=tenant,
        node=node,
        phase="Running",
        owner_kind="Job",
        owner_name=name,
        gpu_requests={"nvidia.com/gpu": gpus},
    )


def fresh_states() -> None:
    now = timezone.now()
    for source in SyncState.Source.values:
        SyncState.objects.create(source=source, last_attempt=now, last_success=now, items=1)


@pytest.fixture
def fleet_rows(world: dict[str, Any]) -> dict[str, Any]:
    fresh_states()
    node = make_node("gpu-01.example.com")
    make_workload("alpha-train", "alpha")
    make_workload("bravo-train", "bravo", gpus=4)
    FluxObject.objects.create(
        kind="Kustomization",
        namespace="flux-system",
        name="tenant-alpha",
        tenant_slug="alpha",
        ready="True",
        reason="ReconciliationSucceeded",
        last_applied_revision=f"main@sha1:{SHA}",
    )
    FluxObject.objects.create(
        kind="InferenceService",
        namespace="alpha",
        name="alpha-chat",
        tenant_slug="alpha",
        ready="True",
        url="https://alpha-chat.models.example.com",
    )
    FluxObject.objects.create(
        kind="HelmRelease",
        namespace="bravo",
        name="bravo-secret-release",
        tenant_slug="bravo",
        ready="False",
        stalled=True,
        reason="InstallFailed",
        message="bravo chart values are wrong",
    )
    return {"node": node}


def pod_json(name: str, namespace: str, node: str, *, owner: str = "Job", gpus: int = 1) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {},
            "ownerReferences": [{"kind": owner, "name": f"{name}-owner", "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Running"},
    }


class SimCluster:
    """The simulator holding node ``gpu-01.example.com``, its pods and what was done to
    them. Cordon and drain reach it over HTTP through the real ``Kube`` client."""

    def __init__(self, sim: Simulator, settings: Any) -> None:
        self.sim = sim
        self.settings = settings
        sim.put_object(
            "nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "spec": {}},
        )

    def add_pods(self, *pods: Any) -> None:
        for pod in pods:
            self.sim.put_object("pods", pod)

    def unschedulable(self) -> bool:
        return bool(self.sim.get_object("nodes", "", NODE).get("spec", {}).get("unschedulable"))

    def pod_names(self) -> set[str]:
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in self.sim.store.list(RESOURCES["pods"])
        }

    def refuse_with_a_wrong_token(self) -> None:
        self.sim.token = "the-real-token"
        self.settings.FLEET_API_TOKEN = "a-stale-token"

    def stop_answering(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.settings.FLEET_API_URL = f"http://127.0.0.1:{port}"
        self.settings.FLEET_API_TIMEOUT = 2


@pytest.fixture
def cluster(settings: Any) -> Iterator[SimCluster]:
    config = SimConfig(node_groups=(NodeGroup(pool="h200", nodes=1),), recreate_delay=0)
    with Simulator(config) as sim:
        settings.FLEET_API_URL = sim.start("127.0.0.1", 0, tick_seconds=None)
        settings.FLEET_KUBECONFIG = ""
        settings.FLEET_IN_CLUSTER = False
        settings.FLEET_API_TOKEN = ""
        yield SimCluster(sim, settings)


# --- who sees what --------------------------------------------------------------------------------


def test_it_shows_every_fleet_page_to_a_platform_admin(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    expected = {
        "/fleet/": "Capacity by flavor",
        "/fleet/nodes/": "gpu-01.example.com",
        "/fleet/nodes/gpu-01.example.com/": "NVIDIA-H200",
        "/fleet/nodes/gpu-01.example.com/drain/": "Type the node name",
        "/fleet/topology/": "block-a",
        "/fleet/status/": "tenant-alpha",
        "/fleet/portal-deployment/": "Open the change",
    }
    for url, text in expected.items():
        response = pam.get(url)
        assert response.status_code == 200, url
        assert text in response.content.decode(), url
    assert "140 GiB each" in pam.get("/fleet/nodes/").content.decode()


@pytest.mark.parametrize("who", ["alice", "nora", "fiona"])
def test_it_hides_fleet_pages_from_everyone_else(
    who: str, fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    client = login(who)
    for url in ADMIN_PAGES + ADMIN_ACTIONS:
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"confirm": "gpu-01.example.com"}).status_code == 404, url
    assert not Job.objects.exists()
    assert not cluster.unschedulable()
    assert not Node.objects.get(name="gpu-01.example.com").unschedulable


def test_it_sends_anonymous_users_to_sign_in(fleet_rows: dict[str, Any]) -> None:
    for url in ADMIN_PAGES:
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_it_links_the_fleet_from_the_nav_for_platform_admins_only(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    assert b'href="/fleet/"' in login("pam").get("/tenants/").content
    assert b'href="/fleet/"' not in login("alice").get("/tenants/").content


def test_it_answers_404_for_a_node_that_is_not_there(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    assert login("pam").get("/fleet/nodes/no-such-node/").status_code == 404
    assert login("pam").post("/fleet/nodes/no-such-node/cordon/").status_code == 404


# --- a tenant's status ----------------------------------------------------------------------------


def test_it_shows_a_tenant_only_its_own_status(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("vic").get("/t/alpha/status/").content.decode()
    assert "tenant-alpha" in page
    assert "https://alpha-chat.models.example.com" in page
    assert "alpha-train" in page
    assert SHA[:12] in page
    assert "bravo" not in page
    page = login("charlie").get("/t/bravo/status/").content.decode()
    assert "bravo-secret-release" in page and "bravo chart values are wrong" in page
    assert "bravo-train" in page
    assert "alpha" not in page.replace("Alpha", "")


def test_it_totals_the_tenants_gpu_use(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    make_workload("alpha-serve", "alpha", gpus=3)
    response = login("alice").get("/t/alpha/status/")
    assert response.context["gpu_use"] == {"nvidia.com/gpu": 5}


def test_it_hides_a_tenants_status_from_non_members(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    assert login("charlie").get("/t/alpha/status/").status_code == 404
    assert login("nora").get("/t/alpha/status/").status_code == 404
    assert login("alice").post("/t/alpha/status/").status_code == 405


def test_it_adds_a_status_tab_to_the_tenant_pages(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    assert b'href="/t/alpha/status/"' in login("vic").get("/t/alpha/").content


# --- stale and odd data ---------------------------------------------------------------------------


def test_it_warns_when_the_data_is_stale_and_still_shows_it(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    SyncState.objects.filter(source="nodes").update(
        last_success=timezone.now() - timedelta(minutes=3, seconds=5),
        error="Could not list nodes: the API server at https://k8s did not answer.",
    )
    pam = login("pam")
    for url in ["/fleet/", "/fleet/nodes/", "/fleet/topology/", "/t/alpha/status/"]:
        page = pam.get(url).content.decode().replace("\xa0", " ")  # timesince's spaces
        assert "This may be out of date" in page, url
        assert "the API server at https://k8s did not answer" in page, url
        assert "3 minutes ago" in page, url
    assert "gpu-01.example.com" in pam.get("/fleet/nodes/").content.decode()
    assert "alpha-train" in login("bob").get("/t/alpha/status/").content.decode()


def test_it_says_never_for_a_source_never_read(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("pam").get("/fleet/").content.decode()
    assert "This may be out of date" in page
    assert "last read never" in page


def test_it_survives_whatever_the_sync_rows_hold(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    SyncState.objects.filter(source="pods").update(
        last_success=timezone.now() + timedelta(days=3), error="<b>" + "x" * 5000
    )
    SyncState.objects.filter(source="flux").update(last_success=None, error="")
    response = login("pam").get("/fleet/")
    assert response.status_code == 200
    assert b"&lt;b&gt;" in response.content
    assert b"<b>xxx" not in response.content


def test_it_shows_nodes_with_missing_and_malformed_fields(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    make_node(
        "odd.node",
        pool="",
        flavor="",
        product="",
        gpu_count=0,
        sharing="",
        health="unknown",
        ready=None,
        block="",
        rack="",
        conditions=[],
        gpu_capacity="eight",
        gpu_allocatable=[],
        labels=["not", "a", "map"],
        taints=[["only-key"], "junk", ["k", "v", "NoSchedule"]],
        mig_profiles=[1, 2],
        health_reasons={"no": "list"},
        problems=["status.capacity is not a mapping: 'eight'"],
    )
    make_node(
        "weird-conditions",
        conditions=[
            "junk",
            {
                "type": "GpuXidError",
                "status": "True",
                "message": "XID 79",
                "last_transition": "2025-13-45T99:00:00Z",
            },
            {"type": "Ready", "status": "True", "last_transition": "2025-01-02T03:04:05Z"},
        ],
    )
    pam = login("pam")
    listing = pam.get("/fleet/nodes/")
    assert listing.status_code == 200
    assert "unknown" in listing.content.decode()
    detail = pam.get("/fleet/nodes/odd.node/").content.decode()
    assert "unknown" in detail
    assert "status.capacity is not a mapping" in detail
    assert "No conditions reported." in detail
    assert "k=v:NoSchedule" in detail
    detail = pam.get("/fleet/nodes/weird-conditions/").content.decode()
    assert "fleet-gpu-condition" in detail
    assert "2025-13-45T99:00:00Z" in detail
    assert pam.get("/fleet/topology/").status_code == 200
    assert pam.get("/fleet/").status_code == 200


# --- the node list --------------------------------------------------------------------------------


def _names(client: Client, query: dict[str, str]) -> set[str]:
    response = client.get("/fleet/nodes/", query)
    assert response.status_code == 200
    return {use.node.name for use in response.context["uses"]}


def test_it_filters_nodes_by_health_flavor_and_cordon(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    make_node("sick", health="unhealthy", health_reasons=["NotReady: kubelet stopped posting"])
    make_node("mig-01", flavor="h200-mig", sharing="mig", unschedulable=True)
    pam = login("pam")
    everything = {"gpu-01.example.com", "sick", "mig-01"}
    assert _names(pam, {}) == everything
    assert _names(pam, {"health": "unhealthy"}) == {"sick"}
    assert _names(pam, {"flavor": "h200-mig"}) == {"mig-01"}
    assert _names(pam, {"cordoned": "yes"}) == {"mig-01"}
    assert _names(pam, {"cordoned": "no", "flavor": "h200"}) == {"gpu-01.example.com", "sick"}
    bad = {"health": "on-fire", "flavor": "<script>", "cordoned": "maybe"}
    assert _names(pam, bad) == everything
    assert "kubelet stopped posting" in pam.get("/fleet/nodes/").content.decode()


def test_it_shows_use_and_tenants_per_node(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    response = login("pam").get("/fleet/nodes/")
    (use,) = response.context["uses"]
    assert (use.used, use.allocatable, use.tenants) == (6, 8, ("alpha", "bravo"))


def test_it_serves_the_node_table_as_a_fragment_to_htmx(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    response = login("pam").get("/fleet/nodes/", {"health": "healthy"}, HTTP_HX_REQUEST="true")
    assert b'<div id="nodes">' in response.content
    assert b"<html" not in response.content


@pytest.mark.db_engine
def test_it_lists_nodes_in_a_fixed_number_of_queries(
    fleet_rows: dict[str, Any], login: Callable[[str], Client], django_assert_max_num_queries: Any
) -> None:
    pam = login("pam")
    for i in range(30):
        make_node(f"n{i:02}", rack=f"rack-{i % 4}")
        make_workload(f"w{i}", "alpha", node=f"n{i:02}")
    for url in ["/fleet/nodes/", "/fleet/topology/"]:
        # 11: the banner reads the watches' state too (fleet.watch.freshness), once.
        with django_assert_max_num_queries(11):
            assert pam.get(url).status_code == 200


# --- overview -------------------------------------------------------------------------------------


def test_it_shows_capacity_health_and_a_chart_on_the_overview(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    make_node("sick", health="unhealthy")
    make_node("cordoned", health="degraded", unschedulable=True)
    response = login("pam").get("/fleet/")
    page = response.content.decode()
    h200 = next(r for r in response.context["rows"] if r.flavor == "h200")
    assert (h200.in_use, h200.free, h200.unavailable) == (6, 2, 16)
    assert response.context["health"]["unhealthy"] == 1
    assert "/fleet/nodes/?health=unhealthy" in page
    assert "/fleet/nodes/?cordoned=yes" in page
    assert 'class="plotly-chart" data-plotly-figure="{' in page
    assert "/static-vendor/plotly.min.js?v=" in page
    assert 'hx-trigger="every 10s"' in page
    # plotly.js writes its rules into a style element that carries the policy's nonce.
    nonce = re.search(r"style-src 'self' 'nonce-([^']+)'", response["Content-Security-Policy"])
    assert nonce is not None
    assert f'<style id="plotly.js-style-global" nonce="{nonce[1]}"></style>' in page
    assert "<script>" not in page and "<script type" not in page


def test_it_refreshes_the_overview_as_a_fragment(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    response = login("pam").get("/fleet/", HTTP_HX_REQUEST="true")
    assert response.content.lstrip().startswith(b'<div id="overview"')
    assert b"plotly.min.js" not in response.content  # loaded once, by the full page
    # The fragment's chart is data that portal.js plots: no inline script to be refused.
    assert b"data-plotly-figure=" in response.content
    assert b"<script" not in response.content


@pytest.mark.db_engine
def test_it_builds_the_overview_in_a_bounded_number_of_queries(
    fleet_rows: dict[str, Any], login: Callable[[str], Client], django_assert_max_num_queries: Any
) -> None:
    pam = login("pam")
    for i in range(40):
        make_node(f"n{i:02}", health="degraded" if i % 3 else "healthy")
        make_workload(f"w{i}", "bravo", node=f"n{i:02}", gpus=1)
    # 11: one for the reserved nodes (their free GPUs are not the shared pool's), whatever
    # the number of nodes.
    with django_assert_max_num_queries(11):
        assert pam.get("/fleet/").status_code == 200


def test_it_queues_a_sync_and_goes_to_its_job(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    response = pam.post("/fleet/sync/")
    job = Job.objects.get(task="fleet.sync")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.created_by is not None and job.created_by.username == "pam"
    response = pam.post("/fleet/sync/", HTTP_HX_REQUEST="true")
    assert Job.objects.filter(task="fleet.sync").count() == 2
    assert "/jobs/" in response["HX-Location"]
    assert pam.get("/fleet/sync/").status_code == 405


def test_it_queues_the_flavor_recount(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    response = login("pam").post("/fleet/flavors/recount/", follow=True)
    job = Job.objects.get(task="fleet.reconcile_flavors")
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert "queued as job" in response.content.decode()


# --- topology and Flux ----------------------------------------------------------------------------


def test_it_groups_the_topology_by_domain(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    make_node("c1", clique="fabric.1", rack="r9", unschedulable=True)
    make_node("loose", block="", rack="")
    page = login("pam").get("/fleet/topology/")
    names = [d.name for d in page.context["domains"]]
    assert names == ["block-a", "fabric.1", "no NVLink domain"]
    block = page.context["domains"][0]
    assert (block.total_gpus, block.free_gpus, block.largest_free) == (8, 2, 2)
    assert "fleet-tile-cordoned" in page.content.decode()


def test_it_lists_flux_objects_and_filters_them(
    fleet_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    FluxObject.objects.create(
        kind="InferenceService",
        namespace="bravo",
        name="odd-url",
        tenant_slug="bravo",
        url="javascript:alert(1)",
    )
    pam = login("pam")
    page = pam.get("/fleet/status/").content.decode()
    for name in ["tenant-alpha", "alpha-chat", "bravo-secret-release", SHA[:12]]:
        assert name in page
    assert 'href="https://alpha-chat.models.example.com"' in page
    assert 'href="javascript:' not in page
    assert '<option value="failed">failed</option>' in page

    def shown(query: dict[str, str]) -> set[str]:
        return {row.obj.name for row in pam.get("/fleet/status/", query).context["rows"]}

    assert shown({"state": "failed"}) == {"bravo-secret-release"}
    assert shown({"kind": "Kustomization"}) == {"tenant-alpha"}
    assert shown({"kind": "Nope", "state": "nope"}) == {
        "tenant-alpha",
        "alpha-chat",
        "bravo-secret-release",
        "odd-url",
    }


# --- node actions ---------------------------------------------------------------------------------


def test_it_cordons_and_uncordons_with_an_audit_row(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    url = "/fleet/nodes/gpu-01.example.com/"
    response = pam.post(url + "cordon/", {"reason": "ECC errors"}, follow=True)
    assert "is cordoned" in response.content.decode()
    assert Node.objects.get(name="gpu-01.example.com").unschedulable
    assert cluster.unschedulable()
    event = AuditEvent.objects.get(action="node.cordon")
    assert event.diff["reason"] == [None, "ECC errors"]
    pam.post(url + "uncordon/")
    assert not Node.objects.get(name="gpu-01.example.com").unschedulable
    assert AuditEvent.objects.filter(action="node.uncordon").exists()
    assert pam.get(url + "cordon/").status_code == 405


def test_it_shows_the_error_when_a_cordon_fails(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    cluster.refuse_with_a_wrong_token()
    response = login("pam").post("/fleet/nodes/gpu-01.example.com/cordon/", follow=True)
    assert response.status_code == 200
    assert "HTTP 401" in response.content.decode()
    assert not cluster.unschedulable()
    assert not Node.objects.get(name="gpu-01.example.com").unschedulable
    assert not AuditEvent.objects.filter(action__startswith="node.").exists()


def test_it_lists_the_tenants_and_pods_a_drain_would_affect(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    cluster.add_pods(
        pod_json("alpha-train-0", "alpha", "gpu-01.example.com", gpus=2),
        pod_json("bravo-train-0", "bravo", "gpu-01.example.com", gpus=4),
        pod_json("dcgm-exporter-x", "gpu-operator", "gpu-01.example.com", owner="DaemonSet"),
        pod_json("elsewhere", "alpha", "gpu-02"),
        pod_json("coredns-1", "kube-system", "gpu-01.example.com"),
    )
    response = login("pam").get("/fleet/nodes/gpu-01.example.com/drain/")
    page = response.content.decode()
    assert response.context["plan"].tenants == ["alpha", "bravo"]
    assert "alpha/alpha-train-0" in page and "bravo/bravo-train-0" in page
    assert "DaemonSet pod" in page
    # Issue 26 finding 13: the portal may evict tenants' pods only.
    assert [p.name for p in response.context["plan"].evict] == ["alpha-train-0", "bravo-train-0"]
    assert "platform pod (the operator drains those)" in page
    assert "elsewhere" not in page
    assert 'name="confirm"' in page


def test_it_shows_the_api_error_and_no_confirm_button(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    cluster.stop_answering()
    response = login("pam").get("/fleet/nodes/gpu-01.example.com/drain/")
    page = response.content.decode()
    assert "did not answer" in page
    assert 'name="confirm"' not in page
    response = login("pam").post(
        "/fleet/nodes/gpu-01.example.com/drain/", {"confirm": "gpu-01.example.com"}
    )
    assert response.status_code == 422
    assert not Job.objects.exists()


def test_it_drains_nothing_when_the_typed_name_does_not_match(
    fleet_rows: dict[str, Any], cluster: SimCluster, login: Callable[[str], Client]
) -> None:
    cluster.add_pods(pod_json("alpha-train-0", "alpha", "gpu-01.example.com"))
    response = login("pam").post(
        "/fleet/nodes/gpu-01.example.com/drain/",
        {"confirm": "gpu-02.example.com", "pod": "alpha/alpha-train-0"},
    )
    assert response.status_code == 422
    assert "Type the node name" in response.content.decode()
    assert not Job.objects.exists()
    assert not AuditEvent.objects.exists()
    assert not Node.objects.get(name="gpu-01.example.com").unschedulable
    assert not cluster.unschedulable()
    assert cluster.pod_names() == {"alpha/alpha-train-0"}


def test_it_drains_the_confirmed_pods_in_a_job_with_audit_rows(
    fleet_rows: dict[str, Any],
    cluster: SimCluster,
    login: Callable[[str], Client],
    django_capture_on_commit_callbacks: Any,
) -> None:
    cluster.add_pods(
        pod_json("alpha-train-0", "alpha", "gpu-01.example.com"),
        pod_json("bravo-train-0", "bravo", "gpu-01.example.com"),
        # Arrived after the admin looked: not in the confirmed list, so not evicted.
        pod_json("late-arrival", "alpha", "gpu-01.example.com"),
    )
    pam = login("pam")
    with django_capture_on_commit_callbacks(execute=True):
        response = pam.post(
            "/fleet/nodes/gpu-01.example.com/drain/",
            {
                "confirm": "gpu-01.example.com",
                "reason": "replace GPU 3",
                "pod": ["alpha/alpha-train-0", "bravo/bravo-train-0"],
            },
        )
    job = Job.objects.get(task="fleet.drain")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.kwargs == {
        "node": "gpu-01.example.com",
        "pods": ["alpha/alpha-train-0", "bravo/bravo-train-0"],
    }
    assert Node.objects.get(name="gpu-01.example.com").unschedulable
    assert cluster.unschedulable()
    drains = AuditEvent.objects.filter(action="node.drain")
    assert {e.tenant_slug for e in drains} == {"", "alpha", "bravo"}
    alpha = drains.get(tenant_slug="alpha")
    assert alpha.diff["pods"] == [None, ["alpha/alpha-train-0"]]
    assert cluster.pod_names() == {"alpha/late-arrival"}
    job_page = pam.get(response["Location"]).content.decode()
    assert (
        "1 pod arrived after the plan, still on gpu-01.example.com: alpha/late-arrival" in job_page
    )
    assert "1 pod arrived after you looked; it stays" in job_page
    assert "evicting 2 pods" in job_page


# --- plotly.js ------------------------------------------------------------------------------------


def test_it_serves_plotly_js_from_the_installed_package(client: Client) -> None:
    response = client.get("/static-vendor/plotly.min.js")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert b"plotly" in response.content[:2000].lower()
    assert "max-age=31536000" in response["Cache-Control"]
    again = client.get("/static-vendor/plotly.min.js", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304
    zipped = client.get("/static-vendor/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip, br")
    assert zipped["Content-Encoding"] == "gzip"
    assert len(zipped.content) < len(response.content) / 2
