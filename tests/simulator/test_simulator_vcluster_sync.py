"""A tenant cluster's pods and Services reach the host through vCluster's syncer, as the
syncer's service account, so the host's admission judges them (``simulator/syncer.py``).

The portal's rendered repository is played through the simulated Flux; a member bound in the
tenant cluster (the ``edit`` role Flux applies) creates objects through the virtual API server
(authorised by its RBAC; the ID token check is tests/simulator/test_simulator_virtual.py's).
Then the rendered policy or values are edited the way the portal used to render them, or
might, and the difference shows.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.render.tree import render_repository
from gitops.repo import GitRepository, Identity
from gitops.specs import ClusterMember, GpuShare, TenantClusterSpec, TenantSpec
from simulator import Simulator
from simulator.config import SimConfig
from simulator.kueue import ADMISSION_GATE
from simulator.store import ENDPOINT_SLICES, ENDPOINTS, PODS, SERVICES
from simulator.virtual import Forbidden, Refused, UserInfo, VirtualCluster, serve
from tests.cluster_oidc import ISSUER, fleet_with_oidc

AUTHOR = Identity("Test Author", "author@example.com")
MEMBER = UserInfo("oidc:sub-bob")
# Endpoints take more than ``edit`` (since Kubernetes 1.22 the aggregated edit role has no
# write on them, bootstrappolicy policy.go): a tenant admin, cluster-admin there, writes them.
ADMIN = UserInfo("oidc:sub-ann")
SYNCER = "system:serviceaccount:alpha:vc-dev"
POLICY_FILE = "tenants/alpha/kyverno-policy.yaml"
CLUSTER_FILE = "tenants/alpha/clusters/dev.yaml"
GATE_MESSAGE = "Only Kueue may remove its scheduling gates (kueue.x-k8s.io/*) from a pod."
ALPHA = TenantSpec(
    slug="alpha",
    shares=(GpuShare(name="train", flavor="h200", kind="whole", count=2),),
    clusters=(TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2),),
    members=(
        ClusterMember("ann", "admin", ISSUER, "sub-ann"),
        ClusterMember("bob", "member", ISSUER, "sub-bob"),
    ),
)
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}

Edit = Callable[[list[Any]], None]


@pytest.fixture
def sim(settings: Any) -> Iterator[Simulator]:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    simulator.put_object(
        "secrets",
        {
            "metadata": {"namespace": "alpha", "name": "flux-git-auth"},
            "data": {k: base64.b64encode(b"x").decode() for k in ("username", "password")},
        },
    )
    try:
        yield simulator
    finally:
        simulator.stop()


def play(sim: Simulator, settings: Any, **edits: Edit) -> VirtualCluster:
    """Commit the rendered repository (with ``edits`` by path, ``/`` as ``__``), let Flux
    apply it and the tenant cluster start; its virtual API."""
    files = render_repository(fleet_with_oidc(), [ALPHA])
    for path, edit in edits.items():
        docs = list(yaml.safe_load_all(files[path.replace("__", "/")]))
        edit(docs)
        files[path.replace("__", "/")] = yaml.safe_dump_all(docs).encode()
    repo = GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))
    repo.commit(files, message="m\n", author=AUTHOR, branch="main", expected_parent=None)
    for _ in range(3):
        sim.tick()
    cluster = sim.flux.virtual_cluster("alpha", "dev")
    assert cluster is not None
    return cluster


def without_gate_rule(docs: list[Any]) -> None:
    """The tenant policy as it was before ``vcluster-keeps-kueue-gates``."""
    for doc in docs:
        if doc["metadata"]["name"] == "vcluster-accounts":
            doc["spec"]["rules"] = [
                r for r in doc["spec"]["rules"] if r["name"] != "vcluster-keeps-kueue-gates"
            ]


def with_endpoints_synced(docs: list[Any]) -> None:
    """The chart's defaults for ``sync.toHost.endpoints`` and ``endpointSlices``."""
    to_host = docs[0]["spec"]["values"]["sync"]["toHost"]
    to_host["endpoints"] = {"enabled": True}
    to_host["endpointSlices"] = {"enabled": True}


def gpu_pod(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": "gpu", "release": "v2", **labels},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/ai-factory/trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4", "memory": "16Gi"}},
                    "securityContext": RESTRICTED,
                }
            ]
        },
    }


def create(cluster: VirtualCluster, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    """POST through the virtual API server, as the member."""
    group = ["apis", "discovery.k8s.io", "v1"] if resource == "endpointslices" else ["api", "v1"]
    return serve(cluster, MEMBER, "POST", [*group, "namespaces", "default", resource], obj)


def host_pod(sim: Simulator, name: str) -> dict[str, Any]:
    return sim.get_object("pods", "alpha", f"{name}-x-default-x-dev")


def admitted_to(sim: Simulator, pod: dict[str, Any]) -> str | None:
    """The ClusterQueue Kueue admitted the pod's Workload to, if any."""
    wl = sim.cluster.pod_workload(pod)
    admission = (wl or {}).get("status", {}).get("admission")
    return admission["clusterQueue"] if admission else None


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == kind)


def notes(cluster: VirtualCluster, name: str, kind: str = "Pod") -> list[str]:
    obj = cluster.get("", kind, "default", name)
    assert obj is not None
    return [e["note"] for e in cluster.events(obj)]


# --- pods ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_virtual_pod_runs_in_the_host_namespace_as_vcluster_names_it(
    sim: Simulator, settings: Any
) -> None:
    cluster = play(sim, settings)
    with pytest.raises(Forbidden, match='User "oidc:sub-eve" cannot create resource "pods"'):
        serve(
            cluster,
            UserInfo("oidc:sub-eve"),
            "POST",
            ["api", "v1", "namespaces", "default", "pods"],
            gpu_pod("x", 1),
        )
    create(cluster, "pods", gpu_pod("train-1", 2, app="trainer"))
    sim.tick()
    host = host_pod(sim, "train-1")
    labels, spec = host["metadata"]["labels"], host["spec"]
    # Labels copied, ``release`` rewritten, vCluster's own and the namespace's added.
    assert labels["app"] == "trainer"
    assert "release" not in labels
    assert labels["vcluster.loft.sh/label-dev-x-a4d451ec23"] == "v2"
    assert labels["vcluster.loft.sh/managed-by"] == "dev"
    assert labels["vcluster.loft.sh/namespace"] == "default"
    assert "default" in labels.values()  # kubernetes.io/metadata.name under an ns-label key
    assert host["metadata"]["annotations"]["vcluster.loft.sh/object-name"] == "train-1"
    assert spec["serviceAccountName"] == "vc-workload-dev"
    assert spec["automountServiceAccountToken"] is False
    # The values' node selector and enforced toleration; Kueue admitted it on the pool.
    assert spec["nodeSelector"]["ai-factory.io/pool"] == "h200"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert admitted_to(sim, host) == "alpha"
    assert host["status"]["phase"] == "Running"
    assert spec["nodeName"].startswith("h200-")
    # The owner is the chart's Service, which the garbage collector follows.
    [owner] = host["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Service", "dev")
    # Status flows back, and the virtual pod is bound to the host pod's node.
    virtual = cluster.get("", "Pod", "default", "train-1")
    assert virtual is not None
    assert virtual["status"]["phase"] == "Running"
    assert virtual["spec"]["nodeName"] == spec["nodeName"]
    assert condition(virtual, "Ready")["status"] == "True"


@pytest.mark.django_db
def test_the_host_judges_a_synced_pod_as_the_namespaces_own_account(
    sim: Simulator, settings: Any
) -> None:
    """tenant-creators reserve-platform-labels applies to the namespace's service accounts
    only: the syncer is one."""
    cluster = play(sim, settings)
    create(cluster, "pods", gpu_pod("sneaky", 1, app="vcluster"))
    sim.tick()
    with pytest.raises(LookupError):
        host_pod(sim, "sneaky")
    [note] = notes(cluster, "sneaky")
    assert note.startswith("Error syncing to host cluster: create object: admission webhook")
    assert "resource Pod/alpha/sneaky was blocked" in note  # the host name put back
    assert "reserve-platform-labels" in note


@pytest.mark.django_db
def test_the_syncer_may_not_lift_kueues_gate(sim: Simulator, settings: Any) -> None:
    cluster = play(sim, settings)
    create(cluster, "pods", gpu_pod("train-1", 2))
    sim.tick()
    create(cluster, "pods", gpu_pod("train-2", 2))
    for _ in range(3):
        sim.tick()
    # The quota is taken: Kueue keeps the host pod gated, and the syncer's updates, which
    # would set the virtual pod's (empty) gates, are refused with the tenant policy's words.
    gated = host_pod(sim, "train-2")
    assert gated["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert gated["status"]["phase"] == "Pending"
    assert admitted_to(sim, gated) is None
    [note] = notes(cluster, "train-2")
    assert note.startswith(
        "Error syncing: patch host object: update object: admission webhook "
        '"validate.kyverno.svc-fail" denied the request:'
    )
    assert "resource Pod/alpha/train-2 was blocked" in note
    # Kyverno's YAML folds the message at 80 columns (kyverno.py _blocked_message).
    assert f"vcluster-keeps-kueue-gates: {GATE_MESSAGE}" in " ".join(note.split())
    event = cluster.events(cluster.get("", "Pod", "default", "train-2") or {})[0]
    assert event["series"]["count"] >= 3  # tried again on every pass
    virtual = cluster.get("", "Pod", "default", "train-2")
    assert virtual is not None
    assert condition(virtual, "PodScheduled")["reason"] == "SchedulingGated"

    # The first pod goes: Kueue admits the second, lifts its gate, and it runs.
    serve(
        cluster, MEMBER, "DELETE", ["api", "v1", "namespaces", "default", "pods", "train-1"], None
    )
    sim.tick()
    with pytest.raises(LookupError):
        host_pod(sim, "train-1")
    sim.tick()
    admitted = host_pod(sim, "train-2")
    assert "schedulingGates" not in admitted["spec"]
    assert admitted_to(sim, admitted) == "alpha"
    assert admitted["status"]["phase"] == "Running"
    sim.tick()
    virtual = cluster.get("", "Pod", "default", "train-2")
    assert virtual is not None and virtual["status"]["phase"] == "Running"


@pytest.mark.django_db
def test_without_the_gate_rule_the_syncer_runs_the_pod_unadmitted(
    sim: Simulator, settings: Any
) -> None:
    cluster = play(sim, settings, **{POLICY_FILE.replace("/", "__"): without_gate_rule})
    create(cluster, "pods", gpu_pod("train-1", 2))
    sim.tick()
    create(cluster, "pods", gpu_pod("train-2", 2))
    sim.tick()
    ungated = host_pod(sim, "train-2")
    # The syncer set the host pod's gates to the virtual pod's: none. Kueue never admitted it,
    # and it runs on the tenant's pool beyond the queue's two GPUs.
    assert "schedulingGates" not in ungated["spec"]
    assert admitted_to(sim, ungated) is None
    assert ungated["status"]["phase"] == "Running"
    assert host_pod(sim, "train-1")["status"]["phase"] == "Running"
    assert notes(cluster, "train-2") == []


# --- Services, Endpoints, EndpointSlices -----------------------------------------------------

METADATA_ADDRESS = "169.254.169.254"


def selectorless(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }


def metadata_endpoints(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name},
        "subsets": [
            {"addresses": [{"ip": METADATA_ADDRESS}], "ports": [{"name": "http", "port": 80}]}
        ],
    }
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [METADATA_ADDRESS]}],
        "ports": [{"name": "http", "port": 80}],
    }
    return endpoints, endpoint_slice


def apply(cluster: VirtualCluster, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A server-side apply (PATCH) through the virtual API, as the tenant admin."""
    group = ["apis", "discovery.k8s.io", "v1"] if resource == "endpointslices" else ["api", "v1"]
    name = obj["metadata"]["name"]
    return serve(cluster, ADMIN, "PATCH", [*group, "namespaces", "default", resource, name], obj)


@pytest.mark.django_db
def test_a_service_with_a_selector_reaches_the_host_translated(
    sim: Simulator, settings: Any
) -> None:
    cluster = play(sim, settings)
    created = create(
        cluster,
        "services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web", "release": "v2"}, "ports": [{"port": 80}]},
        },
    )
    host = sim.get_object("services", "alpha", "web-x-default-x-dev")
    # The filter created the host Service first; the virtual one has its address.
    assert created["spec"]["clusterIP"] == host["spec"]["clusterIP"]
    assert host["spec"]["selector"] == {
        "app": "web",
        "vcluster.loft.sh/label-dev-x-a4d451ec23": "v2",
        "vcluster.loft.sh/managed-by": "dev",
        "vcluster.loft.sh/namespace": "default",
    }
    sim.tick()
    host = sim.get_object("services", "alpha", "web-x-default-x-dev")
    assert "vcluster.loft.sh/block-deletion" not in host["metadata"]["annotations"]
    # The virtual cluster's DNS Service too, which synced pods resolve through.
    dns = sim.get_object("services", "alpha", "kube-dns-x-kube-system-x-dev")
    assert dns["spec"]["selector"]["k8s-app"] == "vcluster-kube-dns"


@pytest.mark.django_db
def test_the_rendered_cluster_keeps_hand_written_endpoints_out_of_the_host(
    sim: Simulator, settings: Any
) -> None:
    cluster = play(sim, settings)
    # A Service without a selector: the filter creates the host Service first, as the syncer,
    # and tenant-creators refuses it, so the virtual API refuses the request.
    with pytest.raises(Refused) as refused:
        create(cluster, "services", selectorless("metadata"))
    assert refused.value.code == 400
    assert "require-service-selectors" in refused.value.message
    assert cluster.get("", "Service", "default", "metadata") is None
    # Applied instead (a PATCH the filter does not see), it exists in the virtual cluster with
    # hand-written endpoints; the syncer's own create of the host Service is refused too.
    apply(cluster, "services", selectorless("metadata"))
    endpoints, endpoint_slice = metadata_endpoints("metadata")
    with pytest.raises(Forbidden, match='cannot patch resource "endpoints"'):
        serve(
            cluster,
            MEMBER,
            "PATCH",
            ["api", "v1", "namespaces", "default", "endpoints", "metadata"],
            endpoints,
        )
    apply(cluster, "endpoints", endpoints)
    apply(cluster, "endpointslices", endpoint_slice)
    sim.tick()
    sim.tick()
    assert sim.store.list(ENDPOINTS, "alpha") == []
    assert sim.store.list(ENDPOINT_SLICES, "alpha") == []
    with pytest.raises(LookupError):
        sim.get_object("services", "alpha", "metadata-x-default-x-dev")
    [note] = notes(cluster, "metadata", "Service")
    assert note.startswith("Error syncing to host cluster: create object: admission webhook")
    assert "require-service-selectors" in note


@pytest.mark.django_db
def test_with_endpoints_synced_the_host_gets_the_metadata_address(
    sim: Simulator, settings: Any
) -> None:
    cluster = play(sim, settings, **{CLUSTER_FILE.replace("/", "__"): with_endpoints_synced})
    apply(cluster, "services", selectorless("metadata"))
    endpoints, endpoint_slice = metadata_endpoints("metadata")
    apply(cluster, "endpoints", endpoints)
    apply(cluster, "endpointslices", endpoint_slice)
    sim.tick()
    [host] = sim.store.list(ENDPOINTS, "alpha")
    assert host["metadata"]["name"] == "metadata-x-default-x-dev"
    assert host["subsets"][0]["addresses"] == [{"ip": METADATA_ADDRESS}]
    [host_slice] = sim.store.list(ENDPOINT_SLICES, "alpha")
    assert host_slice["endpoints"][0]["addresses"] == [METADATA_ADDRESS]
    assert host_slice["metadata"]["labels"]["kubernetes.io/service-name"] == (
        "metadata-x-default-x-dev"
    )
    # Synced even though the host Service they belong to was refused: the syncers look at the
    # virtual Service only.
    assert "metadata-x-default-x-dev" not in {
        s["metadata"]["name"] for s in sim.store.list(SERVICES, "alpha")
    }


@pytest.mark.django_db
def test_removing_the_cluster_takes_what_its_syncer_made(sim: Simulator, settings: Any) -> None:
    cluster = play(sim, settings)
    create(cluster, "pods", gpu_pod("train-1", 1))
    sim.tick()
    assert host_pod(sim, "train-1")["status"]["phase"] == "Running"
    repo = GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))
    files = render_repository(
        fleet_with_oidc(), [dataclasses.replace(ALPHA, clusters=(), members=())]
    )
    stale = set(repo.read_tree(repo.head("main"))) - set(files)
    repo.commit(
        {**files, **dict.fromkeys(stale)},
        message="m\n",
        author=AUTHOR,
        branch="main",
        expected_parent=repo.head("main"),
    )
    for _ in range(2):
        sim.tick()
    assert [p["metadata"]["name"] for p in sim.store.list(PODS, "alpha")] == []
    assert sim.store.list(SERVICES, "alpha") == []


def _commit(settings: Any, tenant: TenantSpec) -> None:
    repo = GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))
    repo.commit(
        render_repository(fleet_with_oidc(), [tenant]),
        message="m\n",
        author=AUTHOR,
        branch="main",
        expected_parent=repo.head("main"),
    )


@pytest.mark.django_db
def test_a_woken_syncer_syncs_a_pod_that_never_started_again_and_drops_one_that_had(
    sim: Simulator, settings: Any
) -> None:
    """The syncer's object cache lives in its memory (pkg/syncer/synccontext/cache.go), so a
    control plane that slept starts without it. A virtual pod whose host pod went meanwhile
    (the portal deletes a sleeping cluster's, fleet.sleep) then reaches ``SyncToHost`` with no
    ``HostOld`` (pods/syncer.go): one that never started is created on the host again, one
    that had (``status.startTime``) is deleted in the virtual cluster."""
    cluster = play(sim, settings)
    create(cluster, "pods", gpu_pod("train-1", 2))
    sim.tick()
    create(cluster, "pods", gpu_pod("waiting", 2))  # the quota is used: Kueue holds it
    sim.tick()
    assert host_pod(sim, "waiting")["status"]["phase"] == "Pending"
    assert host_pod(sim, "train-1")["status"]["phase"] == "Running"
    waiting = cluster.get("", "Pod", "default", "waiting")
    assert waiting is not None and "startTime" not in waiting["status"]

    asleep = dataclasses.replace(
        ALPHA, clusters=(dataclasses.replace(ALPHA.clusters[0], asleep=True),)
    )
    _commit(settings, asleep)
    sim.tick()
    assert sim.flux.virtual_cluster("alpha", "dev") is None
    for name in ("waiting", "train-1"):
        sim.cluster.delete_pod("alpha", f"{name}-x-default-x-dev", 0, recreate=False)

    _commit(settings, ALPHA)
    sim.tick()
    sim.tick()
    assert sim.flux.virtual_cluster("alpha", "dev") is cluster
    # Back on the host, and admitted now: train-1's GPUs are free.
    assert host_pod(sim, "waiting")["status"]["phase"] == "Running"
    assert cluster.get("", "Pod", "default", "train-1") is None
    with pytest.raises(LookupError):
        host_pod(sim, "train-1")
