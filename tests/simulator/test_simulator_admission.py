"""The simulator refuses what a real cluster refuses (issue 9): Pod Security on injected
containers, the vCluster chart's own quota, Kueue's queue defaulting. Each test plays the
portal's rendered repository through the simulated Flux, then breaks it the way the portal
used to render it, and shows the failure instead of "ready"."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render.quota import limit_range, resource_quota
from gitops.render.tree import render_repository
from gitops.repo import GitRepository, Identity
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec, TenantSpec
from simulator import Simulator
from simulator.admission import (
    Rejected,
    admit_pod,
    apply_limit_defaults,
    pod_security_problems,
    pod_usage,
)
from simulator.hami import HamiWebhook
from simulator.store import LIMIT_RANGES, NAMESPACES, PODS, RESOURCE_QUOTAS, Store
from tests.simulator.test_simulator import git_secret

AUTHOR = Identity("Test Author", "author@example.com")
BETA = TenantSpec(
    slug="beta",
    shares=(GpuShare(name="serve", flavor="h200", kind="whole", count=2),),
    endpoints=(EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="serve"),),
    clusters=(TenantClusterSpec(name="dev", node_pools=("h200",)),),
)
CPU_ONLY = TenantSpec(slug="gamma", clusters=(TenantClusterSpec(name="ci"),))

Files = dict[str, bytes]


def play(simulator: Simulator, settings: Any, files: Files) -> None:
    for slug in {
        path.split("/")[1] for path in files if path.startswith("tenants/") and path.count("/") > 1
    }:
        git_secret(simulator, slug)
    repo = GitRepository.open_or_init(settings.GITOPS_REPO_PATH)
    repo.commit(files, message="Change\n", author=AUTHOR, branch="main", expected_parent=None)
    for _ in range(3):
        simulator.tick()


def edit(files: Files, path: str, change: Callable[[list[Any]], None]) -> Files:
    docs = list(yaml.safe_load_all(files[path]))
    change(docs)
    return {**files, path: yaml.safe_dump_all(docs).encode()}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def endpoint_ready(simulator: Simulator, namespace: str, name: str) -> dict[str, Any]:
    return condition(simulator.get_object("inferenceservices", namespace, name), "Ready")


def release_ready(simulator: Simulator, name: str) -> dict[str, Any]:
    return condition(simulator.get_object("helmreleases", "flux-system", name), "Ready")


def release_values(docs: list[Any]) -> dict[str, Any]:
    values: dict[str, Any] = docs[0]["spec"]["values"]
    return values


# --- finding 4: the storage initializer under Pod Security "restricted" ----------------------


def test_the_rendered_endpoint_starts_with_a_restricted_storage_initializer(
    simulator: Simulator, settings: Any
) -> None:
    play(simulator, settings, render_repository(demo_fleet(), [BETA]))
    assert endpoint_ready(simulator, "beta", "chat")["status"] == "True"
    [pod] = [
        p
        for p in simulator.store.list(PODS, "beta")
        if p["metadata"]["labels"].get("serving.kserve.io/inferenceservice") == "chat"
    ]
    [init] = pod["spec"]["initContainers"]
    assert init["name"] == "storage-initializer"
    assert init["args"] == ["hf://org/chat-model", "/mnt/models"]
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_without_the_storage_container_pod_security_refuses_the_endpoint(
    simulator: Simulator, settings: Any
) -> None:
    files = render_repository(demo_fleet(), [BETA])
    files.pop("infrastructure/configs/kserve-storage.yaml")

    def unlist(docs: list[Any]) -> None:
        docs[0]["resources"].remove("kserve-storage.yaml")

    files = edit(files, "infrastructure/configs/kustomization.yaml", unlist)
    play(simulator, settings, files)
    ready = endpoint_ready(simulator, "beta", "chat")
    assert ready["status"] == "False"
    assert ready["reason"] == "FailedCreate"
    assert 'violates PodSecurity "restricted:latest"' in ready["message"]
    assert 'container "storage-initializer" must set' in ready["message"]
    assert not [p for p in simulator.store.list(PODS, "beta") if "chat" in p["metadata"]["name"]]


# --- finding 2: the vCluster chart's own quota in the tenant's namespace --------------------


def test_the_charts_quota_would_reject_the_tenants_own_endpoint(
    simulator: Simulator, settings: Any
) -> None:
    files = render_repository(demo_fleet(), [BETA])
    path = "tenants/beta/clusters/dev.yaml"

    def chart_quota(docs: list[Any]) -> None:
        # What the portal rendered before: the cluster's quota through the chart's policies.
        release_values(docs)["policies"]["resourceQuota"] = {
            "enabled": True,
            "quota": {"requests.cpu": "16", "requests.nvidia.com/gpu": "0"},
        }
        release_values(docs)["policies"]["limitRange"] = {"enabled": True}

    play(simulator, settings, edit(files, path, chart_quota))
    quota = simulator.get_object("resourcequotas", "beta", "vc-dev")
    # Helm merged the chart's defaults in: limits the portal never asked for.
    assert quota["spec"]["hard"]["limits.memory"] == "40Gi"
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    ready = endpoint_ready(simulator, "beta", "chat")
    assert ready["status"] == "False"
    # Refused by the chart's quota: its GPU key says 0, and its merged-in limits.memory (40Gi)
    # is below what the model server asks for.
    assert "exceeded quota: vc-dev" in ready["message"]


def test_the_rendered_cluster_leaves_the_namespace_quota_to_the_tenant(
    simulator: Simulator, settings: Any
) -> None:
    play(simulator, settings, render_repository(demo_fleet(), [BETA]))
    assert [q["metadata"]["name"] for q in simulator.store.list(RESOURCE_QUOTAS, "beta")] == [
        "tenant-quota"
    ]
    assert simulator.store.list(LIMIT_RANGES, "beta")[0]["metadata"]["name"] == "tenant-limits"
    assert release_ready(simulator, "beta-dev")["status"] == "True"
    assert endpoint_ready(simulator, "beta", "chat")["status"] == "True"
    # The control plane runs on a CPU node, not on the tenant's GPUs.
    control_plane = simulator.get_object("pods", "beta", "dev-0")
    assert control_plane["spec"]["nodeName"].startswith("system-")


def test_the_control_planes_init_container_needs_its_own_security_context(
    simulator: Simulator, settings: Any
) -> None:
    files = render_repository(demo_fleet(), [BETA])

    def chart_default(docs: list[Any]) -> None:
        del release_values(docs)["controlPlane"]["distro"]["k8s"]["securityContext"]

    play(simulator, settings, edit(files, "tenants/beta/clusters/dev.yaml", chart_default))
    ready = release_ready(simulator, "beta-dev")
    assert (ready["status"], ready["reason"]) == ("False", "InstallFailed")
    assert 'container "kubernetes" must set' in ready["message"]


# --- finding 5: a LocalQueue named "default" ----------------------------------------------


def _default_queue(docs: list[Any]) -> None:
    for doc in docs:
        if doc["kind"] == "LocalQueue":
            doc["metadata"]["name"] = "default"


def test_a_default_local_queue_gates_a_cpu_only_control_plane_forever(
    simulator: Simulator, settings: Any
) -> None:
    files = render_repository(demo_fleet(), [CPU_ONLY])
    play(simulator, settings, edit(files, "tenants/gamma/queues.yaml", _default_queue))
    pod = simulator.get_object("pods", "gamma", "ci-0")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    ready = release_ready(simulator, "gamma-ci")
    assert ready["status"] == "False"
    assert "resource cpu unavailable in ClusterQueue" in ready["message"]


def test_a_default_local_queue_pins_the_control_plane_to_a_gpu_flavor(
    simulator: Simulator, settings: Any
) -> None:
    files = render_repository(demo_fleet(), [BETA])
    play(simulator, settings, edit(files, "tenants/beta/queues.yaml", _default_queue))
    pod = simulator.get_object("pods", "beta", "dev-0")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    # Admitted on the tenant's GPU flavor, whose cpu and memory cover it: it now runs on a
    # GPU node, next to the GPUs it does not use.
    assert pod["spec"]["nodeSelector"]["ai-factory.io/pool"] == "h200"
    assert pod["spec"]["nodeName"].startswith("h200-")


def test_the_rendered_queue_leaves_pods_without_a_queue_alone(
    simulator: Simulator, settings: Any
) -> None:
    play(simulator, settings, render_repository(demo_fleet(), [CPU_ONLY, BETA]))
    for slug, name in (("gamma", "ci-0"), ("beta", "dev-0")):
        pod = simulator.get_object("pods", slug, name)
        assert "kueue.x-k8s.io/queue-name" not in pod["metadata"]["labels"]
        assert "schedulingGates" not in pod["spec"]
    assert release_ready(simulator, "gamma-ci")["status"] == "True"
    # The endpoint names the queue, and Kueue admits it on the share's flavor.
    [endpoint_pod] = [
        p for p in simulator.store.list(PODS, "beta") if "chat" in p["metadata"]["name"]
    ]
    assert endpoint_pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert endpoint_pod["spec"]["nodeSelector"]["ai-factory.io/pool"] == "h200"


# --- the admission chain on its own -----------------------------------------------------------


def _pod(**container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "t"},
        "spec": {"containers": [{"name": "main", "image": "x", **container}]},
    }


def test_pod_security_restricted_names_each_offending_container() -> None:
    pod = _pod()
    problems = pod_security_problems(pod, "restricted")
    assert any(p.startswith("allowPrivilegeEscalation != false") for p in problems)
    assert any(p.startswith("runAsNonRoot != true") for p in problems)
    assert any(p.startswith("seccompProfile") for p in problems)
    assert pod_security_problems(pod, "privileged") == []
    safe = _pod(
        securityContext={
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    )
    assert pod_security_problems(safe, "restricted") == []
    safe["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    assert any("hostPath" in p for p in pod_security_problems(safe, "restricted"))


def test_quota_counts_the_larger_of_init_and_main_containers() -> None:
    pod = _pod(resources={"requests": {"cpu": "1", "nvidia.com/gpu": "2"}})
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
    usage = pod_usage(pod)
    assert usage["requests.cpu"] == Decimal(3)
    assert usage["requests.nvidia.com/gpu"] == Decimal(2)
    assert usage["count/pods"] == Decimal(1)


def test_limit_ranges_default_limits_and_requests() -> None:
    pod = _pod()
    apply_limit_defaults(
        pod, [("l", {"default": {"memory": "1Gi"}, "defaultRequest": {"cpu": "100m"}})]
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "1Gi"}
    assert resources["requests"] == {"cpu": "100m", "memory": "1Gi"}


def _limited_store(item: dict[str, Any]) -> Store:
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": "t"}}, 0)
    store.apply(
        LIMIT_RANGES,
        {"metadata": {"name": "l", "namespace": "t"}, "spec": {"limits": [item]}},
        0,
    )
    return store


# The LimitRange the portal rendered before issue 26 (finding 7), for a 64-CPU namespace.
OLD_LIMITS = {
    "type": "Container",
    "default": {"cpu": "1", "memory": "2Gi"},
    "defaultRequest": {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
    "max": {"cpu": "64", "memory": "512Gi"},
}


def test_a_default_limit_below_the_request_makes_the_pod_invalid() -> None:
    # LimitRanger fills the missing limit from `default` whatever the request; the API
    # server's validation then refuses request > limit (ValidateResourceRequirements).
    pod = _pod(resources={"requests": {"cpu": "4", "memory": "8Gi"}})
    with pytest.raises(Rejected) as caught:
        admit_pod(_limited_store(OLD_LIMITS), pod)
    assert "must be less than or equal to cpu limit of 1" in str(caught.value)
    assert "must be less than or equal to memory limit of 2Gi" in str(caught.value)


def test_a_max_without_a_default_limit_refuses_containers_without_limits() -> None:
    # limitranger/admission.go maxConstraint: "No limit is specified".
    item = {"type": "Container", "max": {"cpu": "64"}}
    with pytest.raises(Rejected) as caught:
        admit_pod(_limited_store(item), _pod(resources={"requests": {"cpu": "4"}}))
    assert "Maximum cpu usage per Container is 64.  No limit is specified." in str(caught.value)


def test_the_rendered_limit_range_admits_pods_that_ask_for_more_without_limits() -> None:
    tenant = TenantSpec(slug="t", cpu_quota=64, memory_gib=512)
    (item,) = limit_range(tenant)["spec"]["limits"]
    pod = admit_pod(
        _limited_store(item), _pod(resources={"requests": {"cpu": "4", "memory": "8Gi"}})
    )
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "64", "memory": "512Gi"}
    # ...and a container asking for more than one container may have is still refused.
    with pytest.raises(Rejected) as caught:
        admit_pod(_limited_store(item), _pod(resources={"limits": {"cpu": "65"}}))
    assert "Maximum cpu usage per Container is 64, but limit is 65." in str(caught.value)


@pytest.mark.parametrize(
    ("hard", "message"),
    [
        ({"limits.memory": "4Gi"}, "failed quota: q: must specify limits.memory for: main"),
        (
            {"requests.nvidia.com/gpu": "1"},
            "exceeded quota: q, requested: requests.nvidia.com/gpu=2",
        ),
    ],
)
def test_resource_quota_refuses_and_says_why(hard: dict[str, str], message: str) -> None:
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": "t"}}, 0)
    store.apply(
        RESOURCE_QUOTAS, {"metadata": {"name": "q", "namespace": "t"}, "spec": {"hard": hard}}, 0
    )
    pod = _pod(resources={"limits": {"nvidia.com/gpu": "2"}})
    with pytest.raises(Rejected) as caught:
        admit_pod(store, pod)
    assert message in str(caught.value)


# --- finding 6: topology-aware scheduling ------------------------------------------------


HAMI = TenantSpec(
    slug="delta",
    shares=(
        GpuShare(
            name="frac",
            flavor="h200-hami",
            kind="hami",
            count=4,
            gpumem_mib=24000,
            gpucores_percent=30,
        ),
    ),
    endpoints=(EndpointSpec(name="small", model_uri="pvc://models/small", share="frac"),),
)


def _topology_on(flavor: str) -> Callable[[list[Any]], None]:
    def change(docs: list[Any]) -> None:
        for doc in docs:
            if doc["kind"] == "ResourceFlavor" and doc["metadata"]["name"] == flavor:
                doc["spec"]["topologyName"] = "default"

    return change


def test_a_hami_endpoint_runs_on_a_flavor_without_topology(
    simulator: Simulator, settings: Any
) -> None:
    play(simulator, settings, render_repository(demo_fleet(), [HAMI]))
    assert endpoint_ready(simulator, "delta", "small")["status"] == "True"


def test_topology_aware_hami_admits_nothing(simulator: Simulator, settings: Any) -> None:
    # TAS fits pods against node allocatable, where HAMi's gpumem and gpucores never appear.
    files = render_repository(demo_fleet(), [HAMI])
    play(
        simulator,
        settings,
        edit(files, "infrastructure/configs/kueue.yaml", _topology_on("h200-hami")),
    )
    ready = endpoint_ready(simulator, "delta", "small")
    assert ready["status"] == "False"
    assert 'topology "default" doesn\'t allow to fit' in ready["message"]


def test_topology_drops_nodes_without_its_level_labels(simulator: Simulator, settings: Any) -> None:
    files = render_repository(demo_fleet(), [BETA])

    def extra_level(docs: list[Any]) -> None:
        for doc in docs:
            if doc["kind"] == "Topology":
                doc["spec"]["levels"].insert(0, {"nodeLabel": "topology.example.com/zone"})

    play(simulator, settings, edit(files, "infrastructure/configs/kueue.yaml", extra_level))
    ready = endpoint_ready(simulator, "beta", "chat")
    assert ready["status"] == "False"
    assert "topology" in ready["message"]


# --- issue 26 finding 1: a queue mixing topology-aware and other flavors ----------------------

MIXED = TenantSpec(
    slug="epsilon",
    shares=(
        GpuShare(name="whole", flavor="h200", kind="whole", count=1),
        *HAMI.shares,
    ),
    endpoints=(
        EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="whole"),
        EndpointSpec(name="small", model_uri="pvc://models/small", share="frac"),
    ),
)
MIXED_CHAT = "tenants/epsilon/workloads/endpoints/chat.yaml"
MIXED_POLICY = "tenants/epsilon/kyverno-policy.yaml"


def test_a_tenant_with_whole_and_hami_shares_runs_both_endpoints(
    simulator: Simulator, settings: Any
) -> None:
    # Kueue implies TAS only when every flavor of the queue has a topology (isTASOnly); the
    # whole-GPU predictor asks for it explicitly, the HAMi one does not need it.
    files = render_repository(demo_fleet(), [MIXED])
    play(simulator, settings, files)
    assert endpoint_ready(simulator, "epsilon", "chat")["status"] == "True"
    assert endpoint_ready(simulator, "epsilon", "small")["status"] == "True"


def test_without_the_topology_request_the_whole_gpu_endpoint_waits_for_ever(
    simulator: Simulator, settings: Any
) -> None:
    # What the portal rendered before issue 26: no annotation on the whole-GPU predictor, and
    # no Kyverno rule adding it.
    def unannotated(docs: list[Any]) -> None:
        for doc in docs:
            if doc["kind"] == "InferenceService":
                assert doc["spec"]["predictor"].pop("annotations")

    def no_mutation(docs: list[Any]) -> None:
        rules = docs[0]["spec"]["rules"]
        assert rules.pop(0)["name"] == "request-topology-aware-scheduling"

    files = render_repository(demo_fleet(), [MIXED])
    files = edit(edit(files, MIXED_CHAT, unannotated), MIXED_POLICY, no_mutation)
    play(simulator, settings, files)
    ready = endpoint_ready(simulator, "epsilon", "chat")
    assert ready["status"] == "False"
    assert 'Flavor "h200" supports only TopologyAwareScheduling' in ready["message"]
    assert endpoint_ready(simulator, "epsilon", "small")["status"] == "True"


# --- issue 26 finding 4: HAMi charges memory and cores per vGPU device -----------------------


def _hami_pod(name: str, vgpu: str, gpumem: str, *, node: str = "") -> dict[str, Any]:
    pod = _pod(
        resources={
            "limits": {
                "nvidia.com/vgpu": vgpu,
                "nvidia.com/gpumem": gpumem,
                "cpu": "1",
                "memory": "1Gi",
            },
        }
    )
    pod["metadata"] = {"name": name, "namespace": "t"}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _hami_store(tenant: TenantSpec) -> Store:
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": "t"}}, 0)
    quota = resource_quota(tenant, demo_fleet())
    quota["metadata"]["namespace"] = "t"
    store.apply(RESOURCE_QUOTAS, quota, 0)
    return store


# Four slots of 24000 MiB that borrow nothing: the quota's limits.nvidia.com/gpumem is 96000.
CAPPED = TenantSpec(
    slug="t",
    cpu_quota=64,
    memory_gib=512,
    shares=(dataclasses.replace(HAMI.shares[0], borrowing_limit=0),),
)


def test_hamis_quota_counts_every_vgpu_of_a_container() -> None:
    store = _hami_store(CAPPED)
    assert store.list(RESOURCE_QUOTAS, "t")[0]["spec"]["hard"]["limits.nvidia.com/gpumem"] == (
        "96000"
    )
    hami = HamiWebhook(store)
    # One container's value is 96000, within the API server's quota; its four devices hold
    # 384000 MiB (HAMi v2.10.0 webhook.go fitResourceQuota: Memreq x Nums).
    escape = admit_pod(store, _hami_pod("escape", "4", "96000"))
    with pytest.raises(Rejected) as caught:
        hami(escape)
    assert str(caught.value) == (
        'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    )
    hami(_hami_pod("fits", "4", "24000"))
    # What the scheduler already allocated (bound pods) counts; pending ones do not.
    store.apply(PODS, _hami_pod("running", "2", "24000", node="n1"), 0)
    store.apply(PODS, _hami_pod("pending", "2", "24000"), 0)
    hami(_hami_pod("two-more", "2", "24000"))
    with pytest.raises(Rejected):
        hami(_hami_pod("three-more", "3", "24000"))


def test_the_simulator_runs_hamis_webhook_when_it_creates_pods(
    simulator: Simulator, settings: Any
) -> None:
    play(simulator, settings, render_repository(demo_fleet(), [CAPPED_DELTA]))
    # Two vGPUs of 96000 MiB: the API server's quota sees 96000 of 96000, HAMi 192000.
    escape = _hami_pod("escape", "2", "96000")
    escape["metadata"]["namespace"] = "delta"
    escape["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    with pytest.raises(Rejected) as caught:
        simulator.cluster.create_pod(escape, "escape", time.time())
    assert str(caught.value) == (
        'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota'
    )


CAPPED_DELTA = dataclasses.replace(HAMI, shares=CAPPED.shares, endpoints=())
