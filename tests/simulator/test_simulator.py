"""The simulator through the official Kubernetes client over HTTP: nodes, selectors,
cordon, eviction, errors, Flux play on a real bare repository, faults and DCGM metrics."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import CommandError, call_command
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gitops.fleet import POOL_LABEL, demo_fleet
from gitops.render.tree import render_repository
from gitops.repo import GitRepository, Identity
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec, TenantSpec
from simulator import Simulator
from simulator.cluster import Cluster
from simulator.config import ConfigError, SimConfig, load_config
from simulator.store import NODES, RESOURCES, Store

JSON = "application/json"
AUTHOR = Identity("Test Author", "author@example.com")
FLUX = ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations")
HELM = ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
ALPHA = TenantSpec(
    slug="alpha",
    shares=(
        GpuShare(
            name="infer",
            flavor="h200-hami",
            kind="hami",
            count=4,
            gpumem_mib=24000,
            gpucores_percent=30,
        ),
    ),
    endpoints=(EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="infer"),),
    clusters=(TenantClusterSpec(name="dev", node_pools=("h200-hami",)),),
)


def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


def custom(kube: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube)


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": i for i in items}


def kustomizations(kube: client.ApiClient) -> dict[str, dict[str, Any]]:
    return by_name(custom(kube).list_cluster_custom_object(*FLUX)["items"])


def vision_pod_on(kube: client.ApiClient, node: str) -> client.V1Pod:
    pods = core(kube).list_namespaced_pod("vision", field_selector=f"spec.nodeName={node}")
    assert pods.items, f"no vision pod on {node}"
    return pods.items[0]


def repository(settings: Any) -> GitRepository:
    return GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))


def git_secret(sim: Simulator, slug: str = "alpha") -> None:
    """The Secret the portal writes for a tenant's source (any credentials pass the default
    check); put in before the tenant's namespace exists, so one tick applies everything."""
    encoded = {
        k: base64.b64encode(v.encode()).decode()
        for k, v in (("username", "flux"), ("password", "t"))
    }
    sim.put_object(
        "secrets", {"metadata": {"namespace": slug, "name": "flux-git-auth"}, "data": encoded}
    )


def commit(repo: GitRepository, changes: dict[str, bytes | None], parent: str | None) -> str:
    return repo.commit(
        changes, message="Change\n", author=AUTHOR, branch="main", expected_parent=parent
    )


# --- nodes -----------------------------------------------------------------------------------


def test_it_lists_the_demo_nodes_with_gpu_feature_discovery_labels(
    kube: client.ApiClient,
) -> None:
    nodes = {n.metadata.name: n for n in core(kube).list_node().items}
    assert len(nodes) == 18  # 16 GPU nodes and 2 CPU-only system nodes

    whole = nodes["h200-01"]
    labels = whole.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "143771"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (
        "9",
        "0",
    )
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    assert labels["kubernetes.io/hostname"] == "h200-01"
    assert labels[POOL_LABEL] == "h200"
    assert whole.status.capacity["nvidia.com/gpu"] == "8"
    assert whole.status.allocatable["nvidia.com/gpu"] == "8"
    assert [(t.key, t.value, t.effect) for t in whole.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    ready = next(c for c in whole.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", "KubeletReady")
    assert whole.status.node_info.kubelet_version.startswith("v1.")

    mig = nodes["h200-mig-01"]
    assert mig.metadata.labels["nvidia.com/mig.config"] == "all-balanced"
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.metadata.labels["nvidia.com/mig-1g.18gb.count"] == "16"
    assert mig.metadata.labels["nvidia.com/mig-3g.71gb.product"] == "NVIDIA-H200-MIG-3g.71gb"
    assert {k: v for k, v in mig.status.allocatable.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.18gb": "16",
        "nvidia.com/mig-2g.35gb": "8",
        "nvidia.com/mig-3g.71gb": "8",
    }

    hami = nodes["h200-hami-01"]
    assert hami.metadata.labels["gpu"] == "on"
    # HAMi's slots under its resourceName; memory and cores only in the register annotation.
    assert {k: v for k, v in hami.status.allocatable.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/vgpu": "80"
    }
    devices = hami.metadata.annotations["hami.io/node-nvidia-register"].rstrip(":").split(":")
    assert len(devices) == 8
    uuid, split, memory, cores, kind, numa, healthy = devices[0].split(",")
    assert uuid.startswith("GPU-") and (split, memory, cores, healthy) == (
        "10",
        "143771",
        "100",
        "true",
    )
    assert kind == "NVIDIA-NVIDIA H200" and numa == "0"

    dra = nodes["h200-dra-01"]
    # No device plugin: the DRA driver's GPUs are in ResourceSlices, not in the node status.
    assert dra.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert dra.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert not any(k.startswith("nvidia.com/") for k in dra.status.allocatable)


def test_nvidias_device_plugin_runs_where_the_node_does_not_turn_it_off() -> None:
    # Issue 26 finding 10: without nvidia.com/gpu.deploy.device-plugin=false the GPU Operator
    # runs NVIDIA's device plugin on a HAMi node too, and both advertise the same GPUs.
    demo = SimConfig.demo()
    groups = tuple(
        dataclasses.replace(
            group,
            labels=tuple(p for p in group.labels if p[0] != "nvidia.com/gpu.deploy.device-plugin"),
        )
        if group.mode in ("hami", "dra")
        else group
        for group in demo.node_groups
    )
    store = Store()
    Cluster(dataclasses.replace(demo, node_groups=groups), store, 0.0)
    nodes = {n["metadata"]["name"]: n for n in store.list(NODES, "")}
    hami = nodes["h200-hami-01"]["status"]["allocatable"]
    assert (hami["nvidia.com/vgpu"], hami["nvidia.com/gpu"]) == ("80", "8")
    assert nodes["h200-dra-01"]["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def _place(
    simulator: Simulator, name: str, limits: dict[str, str], *, pool: str = "", claims: int = 0
) -> dict[str, Any]:
    """A pod that was running before the simulator started (no admission), placed now."""
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]
    }
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        simulator.put_object(
            "resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpus", "namespace": "default"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpu",
                                    "exactly": {
                                        "deviceClassName": "gpu.nvidia.com",
                                        "count": claims,
                                    },
                                }
                            ]
                        }
                    }
                },
            },
        )
    pod = {"metadata": {"namespace": "default"}, "spec": spec}
    return simulator.cluster.create_pod(pod, name, time.time(), admission=False)


def _node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"].get("nodeName", ""))


def _unschedulable(pod: dict[str, Any]) -> str:
    return str(pod["status"]["conditions"][0]["message"])


def test_it_places_hami_vgpus_only_on_hami_nodes(simulator: Simulator) -> None:
    # No memory asked: HAMi gives the slot the whole card.
    vgpu = _place(simulator, "vgpu", {"nvidia.com/vgpu": "1"})
    assert _node_of(vgpu).startswith("h200-hami-")
    allocated = vgpu["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    assert allocated.split(",")[2] == "143771"
    # Memory alone: HAMi's webhook adds one vGPU.
    memory = _place(simulator, "memory", {"nvidia.com/gpumem": "10000"})
    assert _node_of(memory).startswith("h200-hami-")
    # A HAMi node advertises no nvidia.com/gpu, and a whole-GPU node no vGPU slots.
    whole = _place(simulator, "whole", {"nvidia.com/gpu": "1"}, pool="h200-hami")
    assert not _node_of(whole)
    assert "4 Insufficient nvidia.com/gpu" in _unschedulable(whole)
    slot = _place(simulator, "slot", {"nvidia.com/vgpu": "1"}, pool="h200")
    assert not _node_of(slot)
    assert "8 Insufficient nvidia.com/vgpu" in _unschedulable(slot)


def test_it_places_dra_claims_only_on_dra_nodes(simulator: Simulator) -> None:
    claimed = _place(simulator, "claimed", {}, claims=8)
    assert _node_of(claimed).startswith("h200-dra-")
    # A DRA node runs no device plugin: nothing there serves nvidia.com/gpu.
    whole = _place(simulator, "whole", {"nvidia.com/gpu": "1"}, pool="h200-dra")
    assert not _node_of(whole)
    assert "2 Insufficient nvidia.com/gpu" in _unschedulable(whole)
    # ... and the whole-GPU nodes no DRA driver.
    on_whole = _place(simulator, "on-whole", {}, pool="h200", claims=1)
    assert not _node_of(on_whole)
    assert "cannot allocate all claims" in _unschedulable(on_whole)


def test_it_puts_the_nodes_in_two_nvlink_domains(kube: client.ApiClient) -> None:
    nodes = core(kube).list_node().items
    cliques: dict[str, set[str]] = {}
    for node in nodes:
        labels = node.metadata.labels
        if labels["ai-factory.io/pool"] == "system":
            # CPU-only nodes have no GPUs, so no NVLink clique.
            assert "nvidia.com/gpu.clique" not in labels
            assert not node.spec.taints
            continue
        cliques.setdefault(labels["network.topology.kubernetes.io/block"], set()).add(
            labels["nvidia.com/gpu.clique"]
        )
    assert sorted(cliques) == ["block-1", "block-2"]
    assert all(len(values) == 1 for values in cliques.values())
    assert cliques["block-1"] != cliques["block-2"]


def test_it_matches_the_portals_demo_fleet() -> None:
    config = SimConfig.demo()
    for flavor in demo_fleet().flavors:
        group = config.pool(flavor.name)
        assert group is not None, flavor.name
        assert group.nodes * group.gpus_per_node == flavor.gpus
        assert (group.mode, group.product, group.gpu_memory_mib) == (
            flavor.mode,
            flavor.product,
            flavor.gpu_memory_mib,
        )
        assert set(flavor.node_labels) - {("nvidia.com/mig.config", "all-balanced")} <= set(
            group.labels
        )
        pool_slices = {profile: count * flavor.gpus for profile, count in group.mig_profiles}
        assert pool_slices == dict(flavor.mig_profiles)


def test_it_runs_the_seed_workloads_as_controller_pods(kube: client.ApiClient) -> None:
    pods = core(kube).list_pod_for_all_namespaces().items
    assert {p.metadata.namespace for p in pods} == {"vision", "llm-platform"}
    for pod in pods:
        assert pod.status.phase == "Running" and pod.spec.node_name
        assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "gpu"
        assert pod.metadata.owner_references[0].controller
        assert pod.metadata.owner_references[0].kind in ("Job", "ReplicaSet")
    training = [p for p in pods if p.metadata.name.startswith("finetune-vit-")]
    assert len({p.spec.node_name for p in training}) == 2
    hami = [p for p in pods if p.metadata.namespace == "llm-platform"]
    assert all(p.spec.node_name.startswith("h200-hami-") for p in hami)
    assert all(p.metadata.annotations["hami.io/vgpu-node"] == p.spec.node_name for p in hami)
    namespaces = {n.metadata.name for n in core(kube).list_namespace().items}
    assert {"default", "kube-system", "vision", "llm-platform"} <= namespaces


def test_it_filters_lists_by_label_and_field_selectors(kube: client.ApiClient) -> None:
    api = core(kube)

    def names(**query: str) -> set[str]:
        return {n.metadata.name for n in api.list_node(**query).items}

    assert names(label_selector=f"{POOL_LABEL}=h200-mig") == {"h200-mig-01", "h200-mig-02"}
    assert len(names(label_selector="gpu")) == 4
    assert (
        len(names(label_selector=f"{POOL_LABEL}!=h200")) == 10
    )  # MIG, HAMi, DRA and the CPU-only system nodes
    assert len(names(label_selector=f"{POOL_LABEL} in (h200-mig, h200-hami),!gpu")) == 2
    assert names(field_selector="metadata.name=h200-07") == {"h200-07"}

    on_node = api.list_pod_for_all_namespaces(field_selector="spec.nodeName=h200-01").items
    assert [p.metadata.name.rsplit("-", 1)[0] for p in on_node] == ["finetune-vit"]
    running = api.list_namespaced_pod("vision", field_selector="status.phase=Running").items
    assert len(running) == 6
    assert api.list_namespaced_pod("vision", field_selector="status.phase=Pending").items == []
    assert api.list_namespaced_pod("nowhere").items == []

    with pytest.raises(ApiException) as caught:
        api.list_node(field_selector="spec.color=blue")
    assert caught.value.status == 400
    assert status_of(caught.value)["reason"] == "BadRequest"


def test_it_cordons_and_labels_nodes_with_patches(kube: client.ApiClient) -> None:
    api = core(kube)
    before = api.read_node("h200-04").metadata.resource_version
    node = api.patch_node("h200-04", {"spec": {"unschedulable": True}})
    assert node.spec.unschedulable is True
    assert "node.kubernetes.io/unschedulable" in {t.key for t in node.spec.taints}
    assert int(node.metadata.resource_version) > int(before)

    patched = api.patch_node(
        "h200-04",
        [{"op": "add", "path": "/metadata/labels/team", "value": "infra"}],
    )
    assert patched.metadata.labels["team"] == "infra"
    merged = api.patch_node(
        "h200-04",
        {"metadata": {"labels": {"team": None}}, "spec": {"unschedulable": False}},
        _content_type="application/merge-patch+json",
    )
    assert "team" not in merged.metadata.labels
    assert not merged.spec.unschedulable
    assert {t.key for t in merged.spec.taints} == {"nvidia.com/gpu"}


# --- eviction --------------------------------------------------------------------------------


def test_it_evicts_a_pod_and_its_controller_recreates_it_elsewhere(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    api = core(kube)
    victim = vision_pod_on(kube, "h200-01")
    api.patch_node("h200-01", {"spec": {"unschedulable": True}})

    api.create_namespaced_pod_eviction(
        victim.metadata.name,
        "vision",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim.metadata.name}},
    )

    with pytest.raises(ApiException) as caught:
        api.read_namespaced_pod(victim.metadata.name, "vision")
    assert caught.value.status == 404
    simulator.tick()
    replacements = [
        p
        for p in api.list_namespaced_pod(
            "vision", label_selector="batch.kubernetes.io/job-name"
        ).items
        if p.metadata.name.startswith("finetune-vit-")
    ]
    assert len(replacements) == 2
    new = next(p for p in replacements if p.metadata.name != victim.metadata.name)
    assert new.spec.node_name not in ("h200-01", None)
    assert new.status.phase == "Running"
    assert new.metadata.owner_references[0].name == "finetune-vit"
    assert new.metadata.labels["kueue.x-k8s.io/queue-name"] == "gpu"


def test_it_leaves_a_recreated_pod_pending_when_no_node_fits(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    api = core(kube)
    for node in ("h200-mig-01", "h200-mig-02"):
        api.patch_node(node, {"spec": {"unschedulable": True}})
    victim = next(
        p
        for p in api.list_namespaced_pod("vision").items
        if p.metadata.name.startswith("eval-vit-large-")
    )
    api.create_namespaced_pod_eviction(
        victim.metadata.name, "vision", client.V1Eviction(metadata={"name": victim.metadata.name})
    )
    simulator.tick()

    pending = api.list_namespaced_pod("vision", field_selector="status.phase=Pending").items
    assert len(pending) == 1
    assert pending[0].spec.node_name is None
    scheduled = pending[0].status.conditions[0]
    assert (scheduled.type, scheduled.status, scheduled.reason) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    assert scheduled.message.startswith("0/18 nodes are available:")
    assert "2 node(s) were unschedulable" in scheduled.message

    api.patch_node("h200-mig-02", {"spec": {"unschedulable": False}})
    simulator.tick()
    placed = api.read_namespaced_pod(pending[0].metadata.name, "vision")
    assert (placed.status.phase, placed.spec.node_name) == ("Running", "h200-mig-02")


def test_it_refuses_an_eviction_the_disruption_budget_forbids(
    kube: client.ApiClient, simulator: Simulator
) -> None:
    """A real policy/v1 PodDisruptionBudget: none allowed while every selected pod is needed,
    one once minAvailable leaves room (kubernetes pkg/registry/core/pod/storage/eviction.go)."""
    api = core(kube)
    pod = vision_pod_on(kube, "h200-02")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-all", "namespace": "vision", "generation": 1},
        "spec": {"selector": {"matchLabels": dict(pod.metadata.labels)}, "minAvailable": "100%"},
    }
    simulator.put_object("poddisruptionbudgets", budget)
    simulator.tick()  # the disruption controller writes the status
    status = simulator.get_object("poddisruptionbudgets", "vision", "keep-all")["status"]
    assert status["disruptionsAllowed"] == 0 and status["currentHealthy"] >= 1
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_pod_eviction(pod.metadata.name, "vision", {"kind": "Eviction"})
    assert caught.value.status == 429
    body = status_of(caught.value)
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "TooManyRequests",
        429,
    )
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs" in body["details"]["causes"][0]["message"]
    assert api.read_namespaced_pod(pod.metadata.name, "vision").spec.node_name == "h200-02"
    budget["spec"]["minAvailable"] = 0
    budget["metadata"]["generation"] = 2
    simulator.put_object("poddisruptionbudgets", budget)
    simulator.tick()
    api.create_namespaced_pod_eviction(pod.metadata.name, "vision", {"kind": "Eviction"})
    after = simulator.get_object("poddisruptionbudgets", "vision", "keep-all")["status"]
    assert pod.metadata.name in after["disruptedPods"]


def test_it_answers_a_not_found_status_for_evicting_a_missing_pod(kube: client.ApiClient) -> None:
    with pytest.raises(ApiException) as caught:
        core(kube).create_namespaced_pod_eviction("ghost", "vision", {"kind": "Eviction"})
    assert caught.value.status == 404
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "ghost" not found',
        "reason": "NotFound",
        "details": {"name": "ghost", "kind": "pods"},
        "code": 404,
    }


def test_it_answers_a_success_status_for_an_eviction(simulator: Simulator) -> None:
    pod = simulator.store.list(RESOURCES["pods"], "llm-platform")[0]
    name = pod["metadata"]["name"]
    response = requests.post(
        f"{simulator.url}/api/v1/namespaces/llm-platform/pods/{name}/eviction",
        json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}},
        timeout=5,
    )
    assert response.status_code == 201
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


# --- errors ----------------------------------------------------------------------------------


def test_it_answers_status_objects_for_bad_requests_and_keeps_serving(
    simulator: Simulator,
) -> None:
    url = simulator.url

    def call(method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{url}{path}", timeout=5, **kwargs)

    missing = call("GET", "/api/v1/widgets")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound" and missing.json()["kind"] == "Status"
    assert call("GET", "/no/such/thing").status_code == 404
    unknown_node = call("GET", "/api/v1/nodes/h200-99").json()
    assert unknown_node["message"] == 'nodes "h200-99" not found'
    missing_isvc = call(
        "GET", "/apis/serving.kserve.io/v1beta1/namespaces/alpha/inferenceservices/chat"
    ).json()
    assert missing_isvc["message"] == 'inferenceservices.serving.kserve.io "chat" not found'

    merge = {"Content-Type": "application/merge-patch+json"}
    bad_json = call("PATCH", "/api/v1/nodes/h200-01", data=b"{not json", headers=merge)
    assert bad_json.status_code == 400
    assert (bad_json.json()["reason"], bad_json.json()["status"]) == ("BadRequest", "Failure")
    eviction = "/api/v1/namespaces/vision/pods/x/eviction"
    truncated = call("POST", eviction, data=b"[1, 2", headers={"Content-Type": JSON})
    assert truncated.json()["code"] == 400
    unsupported = call("PATCH", "/api/v1/nodes/h200-01", data=b"{}", headers={"Content-Type": "x"})
    assert unsupported.status_code == 415
    bad_selector = call("GET", "/api/v1/pods", params={"labelSelector": "a b c"})
    assert bad_selector.status_code == 400
    assert call("DELETE", "/api/v1/nodes/h200-01").status_code == 405
    assert call("POST", "/sim/faults", data=b"\xff\xfe").status_code == 400
    widget = {"resource": "widgets", "object": {}}
    assert call("PUT", "/sim/objects", json=widget).status_code == 400

    assert call("GET", "/healthz").text == "ok"
    assert len(call("GET", "/api/v1/nodes").json()["items"]) == 18


def test_it_requires_the_bearer_token_when_one_is_configured() -> None:
    config = dataclasses.replace(SimConfig.demo(), seed_workloads=())
    with Simulator(config, token="s3cret") as sim:
        url = sim.start(tick_seconds=None)
        refused = requests.get(f"{url}/api/v1/nodes", timeout=5)
        assert refused.status_code == 401
        assert refused.json()["reason"] == "Unauthorized"
        cfg = client.Configuration()
        cfg.host = url
        cfg.api_key = {"authorization": "s3cret"}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        with client.ApiClient(cfg) as api:
            assert len(client.CoreV1Api(api).list_node().items) == 18
        assert requests.post(f"{url}/sim/tick", timeout=5).status_code == 200


def test_it_serves_discovery_like_an_api_server(kube: client.ApiClient) -> None:
    version = client.VersionApi(kube).get_code()
    assert (version.major, version.minor) == ("1", "34")
    assert client.CoreApi(kube).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(kube).get_api_versions().groups}
    assert {"kustomize.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io", "serving.kserve.io"} <= groups
    resources = {r.name for r in core(kube).get_api_resources().resources}
    assert {"nodes", "pods", "namespaces", "pods/eviction"} <= resources


# --- Flux ------------------------------------------------------------------------------------


def test_it_does_nothing_until_the_repository_has_a_commit(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    simulator.tick()
    assert kustomizations(kube) == {}
    repository(settings)
    simulator.tick()
    assert kustomizations(kube) == {}


def test_it_plays_flux_from_the_portals_repository(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    repo = repository(settings)
    sha = commit(repo, render_repository(demo_fleet(), [ALPHA]), None)
    started = time.monotonic()
    simulator.tick()
    assert time.monotonic() - started < 5

    revision = f"main@sha1:{sha}"
    found = kustomizations(kube)
    assert set(found) == {
        "flux-system/flux-system",
        "flux-system/infra-controllers",
        "flux-system/infra-configs",
        "flux-system/tenants",
        "alpha/alpha-workloads",
    }
    for name, kustomization in found.items():
        ready = condition(kustomization, "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "ReconciliationSucceeded"), name
        assert ready["message"] == f"Applied revision: {revision}"
        assert kustomization["status"]["lastAppliedRevision"] == revision
        assert kustomization["status"]["lastAttemptedRevision"] == revision
        assert kustomization["status"]["observedGeneration"] == 1
    workloads = found["alpha/alpha-workloads"]
    assert workloads["spec"]["path"] == "./tenants/alpha/workloads"
    assert workloads["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "alpha"}
    entries = {e["id"]: e["v"] for e in workloads["status"]["inventory"]["entries"]}
    assert entries["alpha_chat_serving.kserve.io_InferenceService"] == "v1beta1"
    assert entries["alpha_chat_gateway.networking.k8s.io_HTTPRoute"] == "v1"
    tenants = found["flux-system/tenants"]["status"]["inventory"]["entries"]
    assert {"id": "_alpha__Namespace", "v": "v1"} in tenants

    release = custom(kube).get_namespaced_custom_object(
        *HELM[:2], "flux-system", HELM[2], "alpha-dev"
    )
    released = condition(release, "Released")
    assert (condition(release, "Ready")["status"], released["reason"]) == (
        "True",
        "InstallSucceeded",
    )
    assert released["message"] == (
        "Helm install succeeded for release alpha/dev.v1 with chart vcluster@0.35.3"
    )
    assert release["status"]["lastAttemptedRevision"] == "0.35.3"

    isvc = custom(kube).get_namespaced_custom_object(*KSERVE[:2], "alpha", KSERVE[2], "chat")
    assert condition(isvc, "Ready")["status"] == "True"
    assert condition(isvc, "PredictorReady")["status"] == "True"
    assert isvc["status"]["url"] == "https://alpha.models.ai-factory.example.com/chat"
    assert isvc["status"]["address"]["url"] == "http://chat-predictor.alpha.svc.cluster.local"
    predictors = core(kube).list_namespaced_pod(
        "alpha", label_selector="serving.kserve.io/inferenceservice=chat"
    )
    assert len(predictors.items) == 1
    pod = predictors.items[0]
    assert pod.status.phase == "Running"
    assert pod.spec.node_name.startswith("h200-hami-")
    assert pod.spec.scheduler_name == "hami-scheduler"
    assert pod.metadata.owner_references[0].kind == "ReplicaSet"
    assert pod.metadata.labels["kueue.x-k8s.io/queue-name"] == "gpu"

    source = custom(kube).get_namespaced_custom_object(
        "source.toolkit.fluxcd.io", "v1", "alpha", "gitrepositories", "alpha"
    )
    assert source["status"]["artifact"]["revision"] == revision


def test_it_stalls_on_a_broken_build_and_keeps_the_applied_revision(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    repo = repository(settings)
    good = commit(repo, render_repository(demo_fleet(), [ALPHA]), None)
    simulator.tick()
    broken = commit(
        repo,
        {"tenants/alpha/workloads/kustomization.yaml": b"resources:\n- missing.yaml\n"},
        good,
    )
    simulator.tick()

    workloads = kustomizations(kube)["alpha/alpha-workloads"]
    ready, stalled = condition(workloads, "Ready"), condition(workloads, "Stalled")
    assert (ready["status"], ready["reason"]) == ("False", "BuildFailed")
    assert (stalled["status"], stalled["reason"]) == ("True", "BuildFailed")
    assert "missing.yaml" in ready["message"] and ready["message"] == stalled["message"]
    assert workloads["status"]["lastAttemptedRevision"] == f"main@sha1:{broken}"
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{good}"
    # Nothing was pruned: the endpoint keeps running.
    isvc = custom(kube).get_namespaced_custom_object(*KSERVE[:2], "alpha", KSERVE[2], "chat")
    assert condition(isvc, "Ready")["status"] == "True"
    # The other Kustomizations applied the new revision.
    tenants = kustomizations(kube)["flux-system/tenants"]
    assert tenants["status"]["lastAppliedRevision"] == f"main@sha1:{broken}"


DRA = ("resource.k8s.io", "v1", "resourceclaimtemplates")
FORCE = "kustomize.toolkit.fluxcd.io/force"


def _with_claims(count: int) -> TenantSpec:
    return TenantSpec(
        slug="alpha", shares=(GpuShare(name="claims", flavor="h200-dra", kind="dra", count=count),)
    )


def _template_count(kube: client.ApiClient) -> int:
    template = custom(kube).get_namespaced_custom_object(*DRA[:2], "alpha", DRA[2], "claims")
    return int(template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"])


def test_it_refuses_to_change_a_claim_templates_spec_unless_forced(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    repo = repository(settings)
    path = "tenants/alpha/workloads/gpu-shares/claims.yaml"

    def unforced(count: int) -> dict[str, bytes]:
        """The tree as rendered before the force annotation (on the new and live object)."""
        files = render_repository(demo_fleet(), [_with_claims(count)])
        files[path] = files[path].replace(f"{FORCE}: enabled".encode(), b"example.com/note: x")
        return files

    first = commit(repo, unforced(2), None)
    simulator.tick()
    assert _template_count(kube) == 2

    # The same template with a new count: the API server refuses the update, and
    # kustomize-controller reports the dry-run error.
    refused = commit(repo, {path: unforced(3)[path]}, first)
    simulator.tick()
    workloads = kustomizations(kube)["alpha/alpha-workloads"]
    ready = condition(workloads, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReconciliationFailed")
    assert ready["message"].startswith(
        "ResourceClaimTemplate/alpha/claims dry-run failed (Invalid): "
    )
    assert "field is immutable" in ready["message"]
    assert workloads["status"]["lastAttemptedRevision"] == f"main@sha1:{refused}"
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
    assert _template_count(kube) == 2

    # As rendered (force annotation on): Flux deletes and recreates it.
    forced = commit(repo, render_repository(demo_fleet(), [_with_claims(4)]), refused)
    simulator.tick()
    workloads = kustomizations(kube)["alpha/alpha-workloads"]
    assert condition(workloads, "Ready")["status"] == "True"
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{forced}"
    assert _template_count(kube) == 4


def test_it_creates_tenant_workloads_only_once_the_tenants_kustomization_applied(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    repo = repository(settings)
    files = render_repository(demo_fleet(), [ALPHA])
    files["tenants/alpha/kustomization.yaml"] = b"resources: [nowhere.yaml]\n"
    first = commit(repo, files, None)
    simulator.tick()
    found = kustomizations(kube)
    assert "alpha/alpha-workloads" not in found
    assert condition(found["flux-system/tenants"], "Stalled")["status"] == "True"
    assert "lastAppliedRevision" not in found["flux-system/tenants"]["status"]

    fixed = render_repository(demo_fleet(), [ALPHA])["tenants/alpha/kustomization.yaml"]
    commit(repo, {"tenants/alpha/kustomization.yaml": fixed}, first)
    simulator.tick()
    assert condition(kustomizations(kube)["alpha/alpha-workloads"], "Ready")["status"] == "True"


def test_it_prunes_what_leaves_the_repository(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    repo = repository(settings)
    first = commit(repo, render_repository(demo_fleet(), [ALPHA]), None)
    simulator.tick()
    without_endpoint = dataclasses.replace(ALPHA, endpoints=(), clusters=())
    rendered = render_repository(demo_fleet(), [without_endpoint])
    old = render_repository(demo_fleet(), [ALPHA])
    changes: dict[str, bytes | None] = {p: None for p in old if p not in rendered}
    changes.update(rendered)
    second = commit(repo, changes, first)
    simulator.tick()

    assert (
        custom(kube).list_namespaced_custom_object(*KSERVE[:2], "alpha", KSERVE[2])["items"] == []
    )
    assert core(kube).list_namespaced_pod("alpha").items == []
    assert custom(kube).list_cluster_custom_object(*HELM)["items"] == []

    bare = {p: None for p in rendered if p.startswith("tenants/alpha/")}
    bare["tenants/kustomization.yaml"] = render_repository(demo_fleet(), [])[
        "tenants/kustomization.yaml"
    ]
    commit(repo, bare, second)
    simulator.tick()
    assert "alpha/alpha-workloads" not in kustomizations(kube)
    assert "alpha" not in {n.metadata.name for n in core(kube).list_namespace().items}


def test_it_waits_for_the_configured_delays(settings: Any) -> None:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=2.0, ready_delay=1.0)
    sim = Simulator(config, repo_path=settings.GITOPS_REPO_PATH)
    git_secret(sim)
    commit(repository(settings), render_repository(demo_fleet(), [ALPHA]), None)
    now = time.time()
    sim.tick(now)
    assert sim.store.list(RESOURCES["kustomizations"]) == []
    sim.tick(now + 2.0)
    assert len(sim.store.list(RESOURCES["kustomizations"])) == 5
    isvc = sim.get_object("inferenceservices", "alpha", "chat")
    assert condition(isvc, "Ready")["status"] == "Unknown"
    sim.tick(now + 3.0)
    isvc = sim.get_object("inferenceservices", "alpha", "chat")
    assert condition(isvc, "Ready")["status"] == "True"


def test_a_commit_landing_during_a_reconcile_is_applied_next(
    simulator: Simulator, settings: Any
) -> None:
    git_secret(simulator)
    repo = repository(settings)
    first = commit(repo, render_repository(demo_fleet(), [ALPHA]), None)
    simulator.tick()
    second = commit(repo, {"README.md": b"second\n"}, first)
    reconcile = simulator.flux.reconcile
    landed: list[str] = []

    def merge_meanwhile(now: float) -> None:
        reconcile(now)  # applies ``second``...
        landed.append(commit(repo, {"README.md": b"third\n"}, second))  # ...as a merge lands

    simulator.flux.reconcile = merge_meanwhile  # type: ignore[method-assign]
    simulator.tick()
    simulator.flux.reconcile = reconcile  # type: ignore[method-assign]
    root = simulator.get_object("kustomizations", "flux-system", "flux-system")
    assert root["status"]["lastAppliedRevision"] == f"main@sha1:{second}"
    simulator.tick()
    root = simulator.get_object("kustomizations", "flux-system", "flux-system")
    assert root["status"]["lastAppliedRevision"] == f"main@sha1:{landed[0]}"


def test_it_reconciles_again_when_asked_through_the_annotation(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    commit(repository(settings), render_repository(demo_fleet(), [ALPHA]), None)
    simulator.tick()
    custom(kube).patch_namespaced_custom_object(
        *FLUX[:2],
        "flux-system",
        FLUX[2],
        "flux-system",
        {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "2026-01-01T00:00:00Z"}}},
    )
    simulator.tick()
    root = kustomizations(kube)["flux-system/flux-system"]
    assert root["status"]["lastHandledReconcileAt"] == "2026-01-01T00:00:00Z"


def test_it_keeps_the_resource_version_while_nothing_happens(
    simulator: Simulator, settings: Any
) -> None:
    commit(repository(settings), render_repository(demo_fleet(), [ALPHA]), None)
    simulator.tick()
    simulator.tick()
    version = simulator.store.resource_version
    simulator.tick()
    simulator.tick()
    assert simulator.store.resource_version == version


# --- faults ----------------------------------------------------------------------------------


def test_it_shows_an_xid_on_the_node_and_in_the_metrics(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    response = requests.post(
        f"{simulator.url}/sim/faults",
        json={"kind": "xid", "node": "h200-05", "gpu": 3, "xid": 79},
        timeout=5,
    )
    assert response.status_code == 200
    simulator.inject_xid("h200-hami-02", 1, 48)
    simulator.inject_xid("h200-mig-02", 0, 94)

    node = core(kube).read_node("h200-05")
    fallen = next(c for c in node.status.conditions if c.type == "SysLogsGPUFallenOff")
    uuid = next(s.uuid for s in simulator.gpu_samples() if (s.hostname, s.gpu) == ("h200-05", 3))
    assert (fallen.status, fallen.reason) == ("True", "XID79")
    assert fallen.message == f"GPU 3 ({uuid}) has fallen off the bus (XID 79)"
    assert (node.status.capacity["nvidia.com/gpu"], node.status.allocatable["nvidia.com/gpu"]) == (
        "8",
        "7",
    )

    hami = core(kube).read_node("h200-hami-02")
    xid = next(c for c in hami.status.conditions if c.type == "SysLogsXIDError")
    assert (xid.status, xid.reason) == ("True", "XID48")
    assert "XID 48" in xid.message
    assert hami.status.allocatable["nvidia.com/vgpu"] == "70"
    assert ",false:" in hami.metadata.annotations["hami.io/node-nvidia-register"]

    mig = core(kube).read_node("h200-mig-02").status.allocatable
    assert (mig["nvidia.com/mig-1g.18gb"], mig["nvidia.com/mig-3g.71gb"]) == ("14", "7")

    metrics = requests.get(f"{simulator.url}/metrics", timeout=5)
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    line = next(
        row
        for row in metrics.text.splitlines()
        if row.startswith("DCGM_FI_DEV_XID_ERRORS{") and f'UUID="{uuid}"' in row
    )
    assert line.endswith(" 79")

    assert requests.delete(f"{simulator.url}/sim/faults", timeout=5).status_code == 200
    node = core(kube).read_node("h200-05")
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert "SysLogsGPUFallenOff" not in {c.type for c in node.status.conditions}


def test_it_takes_a_node_that_stops_reporting_out_of_scheduling(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    requests.post(
        f"{simulator.url}/sim/faults", json={"kind": "not-ready", "node": "h200-08"}, timeout=5
    )
    node = core(kube).read_node("h200-08")
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        found = next(c for c in node.status.conditions if c.type == kind)
        assert (found.status, found.reason, found.message) == (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
    taints = {(t.key, t.effect) for t in node.spec.taints}
    assert {
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
    } <= taints

    simulator.set_node_ready("h200-08", True)
    node = core(kube).read_node("h200-08")
    assert next(c for c in node.status.conditions if c.type == "Ready").status == "True"
    assert {t.key for t in node.spec.taints} == {"nvidia.com/gpu"}


def test_it_stores_malformed_objects_exactly_as_given(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    odd = {"metadata": {"name": "odd-1", "labels": ["not", "a", "map"]}, "status": "broken"}
    response = requests.put(
        f"{simulator.url}/sim/objects", json={"resource": "nodes", "object": odd}, timeout=5
    )
    assert response.status_code == 200
    simulator.put_object("pods", {"metadata": {"name": "half", "namespace": "vision"}})
    simulator.put_object("nodes", {"kind": "Node"})

    assert requests.get(f"{simulator.url}/api/v1/nodes/odd-1", timeout=5).json() == odd
    listed = requests.get(f"{simulator.url}/api/v1/nodes", timeout=5).json()["items"]
    assert odd in listed and {"kind": "Node"} in listed
    simulator.tick()  # the controllers survive the half-made pod
    assert simulator.get_object("pods", "vision", "half") == {
        "metadata": {"name": "half", "namespace": "vision"}
    }


def test_it_serves_dcgm_metrics_with_the_pods_on_each_gpu(simulator: Simulator) -> None:
    text = requests.get(f"{simulator.url}/metrics", timeout=5).text
    util = [row for row in text.splitlines() if row.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == 14 * 8  # MIG instances have no GPU_UTIL
    assert any('namespace="vision"' in row and 'pod="finetune-vit-' in row for row in util)
    samples = simulator.gpu_samples()
    assert len(samples) == 14 * 8 + 2 * 8 * 4
    mig = [s for s in samples if s.mig_profile == "3g.71gb" and s.busy]
    assert [(s.namespace, s.pod.rsplit("-", 1)[0]) for s in mig] == [("vision", "eval-vit-large")]
    assert any('GPU_I_PROFILE="1g.18gb"' in row for row in text.splitlines())


# --- configuration and command ---------------------------------------------------------------


def test_it_loads_another_fleet_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "fleet_name: lab\n"
        "node_groups:\n"
        "  - pool: acme\n"
        "    nodes: 3\n"
        "    product: ACME-X1\n"
        "    model_name: ACME X1\n"
        "    gpus_per_node: 4\n"
        "    gpu_memory_mib: 65536\n"
        "    labels: {ai-factory.io/pool: acme}\n"
        "seed_workloads:\n"
        "  - {namespace: lab, name: train, pods: 1, resources: {nvidia.com/gpu: 4}}\n"
    )
    config = load_config(path)
    sim = Simulator(config)
    nodes = sim.store.list(RESOURCES["nodes"])
    assert [n["metadata"]["name"] for n in nodes] == ["acme-01", "acme-02", "acme-03"]
    labels = nodes[0]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "ACME-X1"
    assert "nvidia.com/gpu.family" not in labels
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    pod = sim.store.list(RESOURCES["pods"], "lab")[0]
    assert pod["spec"]["nodeName"] == "acme-01"

    path.write_text("node_groups:\n  - pool: x\n    nodes: 1\n    gpus: 8\n")
    with pytest.raises(ConfigError, match=r"node_groups\[0\]\.gpus: unknown key"):
        load_config(path)


def test_it_refuses_a_bad_address_or_config_on_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="host:port"):
        call_command("simulator", "--addr", "localhost:http")
    bad = tmp_path / "bad.yaml"
    bad.write_text("speed: 11\n")
    with pytest.raises(CommandError, match="speed: unknown key"):
        call_command("simulator", "--config", str(bad))
