"""The portal's rendered Kyverno policies, played through the simulated Flux into the simulated
API, acting on the pods controllers create there (and on what Flux applies)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render.tree import render_repository
from gitops.repo import GitRepository
from simulator import Simulator
from simulator.admission import Rejected
from simulator.store import CLUSTER_POLICIES, KUSTOMIZATIONS, NAMESPACES, POLICIES
from tests.simulator.test_simulator import commit
from tests.simulator.test_simulator_admission import MIXED, edit, play

Files = dict[str, bytes]
SLUG = MIXED.slug
QUEUE = "kueue.x-k8s.io/queue-name"
TAS = "kueue.x-k8s.io/podset-unconstrained-topology"
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _container(name: str = "main", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "kserve/huggingfaceserver:v0.20.0",
        "securityContext": dict(RESTRICTED),
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        **extra,
    }


def _pod(*, labels: dict[str, str] | None = None, init: bool = True, **main: Any) -> dict[str, Any]:
    """A pod of a ReplicaSet in the tenant's namespace (with an init container unless not)."""
    spec: dict[str, Any] = {"containers": [_container(**main)]}
    if init:
        spec["initContainers"] = [_container("fetch")]
    return {
        "metadata": {
            "namespace": SLUG,
            "labels": labels or {},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}
            ],
        },
        "spec": spec,
    }


def _gpu(resources: dict[str, Any]) -> dict[str, Any]:
    return {"resources": {"limits": {"cpu": "1", "memory": "1Gi", **resources}}}


def _create(simulator: Simulator, pod: dict[str, Any]) -> dict[str, Any]:
    return simulator.cluster.create_pod(pod, "web-1", time.time())


def _refusal(simulator: Simulator, pod: dict[str, Any]) -> dict[str, Any]:
    """The failing rules by policy, read back from the API server's message."""
    with pytest.raises(Rejected) as caught:
        _create(simulator, pod)
    message = str(caught.value)
    prefix = 'admission webhook "validate.kyverno.svc-fail" denied the request: \n\nresource Pod/'
    assert message.startswith(prefix), message
    failures: dict[str, Any] = yaml.safe_load(message.split("policies \n\n", 1)[1])
    return failures


@pytest.fixture
def rendered(simulator: Simulator, settings: Any) -> Simulator:
    play(simulator, settings, render_repository(demo_fleet(), [MIXED]))
    assert simulator.store.list(POLICIES, SLUG)
    assert simulator.store.list(CLUSTER_POLICIES)
    return simulator


def test_a_compliant_gpu_pod_is_admitted_and_asks_for_topology(rendered: Simulator) -> None:
    pod = _create(rendered, _pod(labels={QUEUE: "gpu"}, **_gpu({"nvidia.com/gpu": "1"})))
    # request-topology-aware-scheduling: the tenant's whole GPUs are only on TAS flavors.
    assert pod["metadata"]["annotations"][TAS] == "true"
    cpu_only = _create(rendered, _pod())
    assert TAS not in cpu_only["metadata"].get("annotations", {})


def test_an_image_from_another_registry_is_refused(rendered: Simulator) -> None:
    failures = _refusal(rendered, _pod(image="evil.example/miner:1"))
    reason = failures["tenant-guardrails"]["restrict-image-registries"]
    assert reason.startswith("validation error: Images must come from an allowed registry: ")
    assert reason.endswith(
        "rule restrict-image-registries failed at path /spec/containers/0/image/"
    )


def test_a_gpu_pod_without_the_queue_label_is_refused(rendered: Simulator) -> None:
    failures = _refusal(rendered, _pod(**_gpu({"nvidia.com/gpu": "1"})))
    assert failures == {
        "tenant-guardrails": {
            "require-queue-name": "validation error: Pods that use GPUs must carry the label "
            f"{QUEUE} (the tenant's queue is named 'gpu'). rule require-queue-name failed at "
            f"path /metadata/labels/{QUEUE}/"
        }
    }


def test_the_gpu_preconditions_hold_for_pods_without_init_containers(
    rendered: Simulator,
) -> None:
    # The preconditions used to read `spec.[initContainers, containers][]...keys(@)[]`: with
    # no initContainers the list held a null, keys(@) failed on it, Kyverno's JMESPath turned
    # the failing flatten into null and `|| []` won, so such pods were neither required to
    # carry the queue label nor given the TAS annotation. The rendered key now filters first.
    failures = _refusal(rendered, _pod(init=False, **_gpu({"nvidia.com/gpu": "1"})))
    assert set(failures["tenant-guardrails"]) == {"require-queue-name"}
    pod = _create(
        rendered, _pod(init=False, labels={QUEUE: "gpu"}, **_gpu({"nvidia.com/gpu": "1"}))
    )
    assert pod["metadata"]["annotations"][TAS] == "true"


def test_a_hami_container_without_memory_and_cores_is_refused(rendered: Simulator) -> None:
    failures = _refusal(rendered, _pod(labels={QUEUE: "gpu"}, **_gpu({"nvidia.com/vgpu": "1"})))
    reason = failures["tenant-guardrails"]["require-hami-limits"]
    assert reason.startswith(
        "validation failure: A container on shared GPUs must set the limits nvidia.com/vgpu, "
        "nvidia.com/gpumem, nvidia.com/gpucores"
    )
    limits = {"nvidia.com/vgpu": "1", "nvidia.com/gpumem": "24000", "nvidia.com/gpucores": "30"}
    _create(rendered, _pod(labels={QUEUE: "gpu"}, **_gpu(limits)))


def test_the_bypass_variable_is_refused_by_both_policies(rendered: Simulator) -> None:
    env = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    failures = _refusal(rendered, _pod(env=env))
    assert set(failures) == {"forbid-hami-bypass-env", "tenant-guardrails"}
    assert failures["forbid-hami-bypass-env"]["forbid-hami-bypass-env"].startswith(
        "The environment variables CUDA_DISABLE_CONTROL, GPU_CORE_UTILIZATION_POLICY"
    )


def test_pod_security_refuses_a_privileged_container_before_kyverno(rendered: Simulator) -> None:
    # The tenant's namespace enforces "restricted"; PodSecurity runs before the webhooks.
    privileged = {**RESTRICTED, "privileged": True}
    with pytest.raises(Rejected, match='violates PodSecurity "restricted:latest"'):
        _create(rendered, _pod(securityContext=privileged))


def test_a_privileged_container_is_refused_by_kyverno_without_pod_security(
    simulator: Simulator, settings: Any
) -> None:
    def privileged_namespace(docs: list[Any]) -> None:
        for doc in docs:
            if doc["kind"] == "Namespace":
                doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"

    files = render_repository(demo_fleet(), [MIXED])
    play(simulator, settings, edit(files, f"tenants/{SLUG}/namespace.yaml", privileged_namespace))
    labels = simulator.store.get(NAMESPACES, "", SLUG)["metadata"]["labels"]  # type: ignore[index]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    failures = _refusal(simulator, _pod(securityContext={"privileged": True}))
    assert failures["tenant-guardrails"]["disallow-privileged"] == (
        "validation error: Privileged containers are not allowed. rule disallow-privileged "
        "failed at path /spec/containers/0/securityContext/privileged/"
    )


def test_a_route_on_another_host_fails_the_tenants_apply(
    rendered: Simulator, settings: Any
) -> None:
    path = f"tenants/{SLUG}/workloads/endpoints/chat.yaml"
    repo = GitRepository.open_or_init(settings.GITOPS_REPO_PATH)
    files = render_repository(demo_fleet(), [MIXED])

    def other_host(docs: list[Any]) -> None:
        for doc in docs:
            if doc["kind"] == "HTTPRoute":
                doc["spec"]["hostnames"] = ["someone-else.example.com"]

    changed = edit(files, path, other_host)
    commit(repo, {path: changed[path]}, repo.head("main"))
    rendered.tick()
    workloads = rendered.store.get(KUSTOMIZATIONS, SLUG, f"{SLUG}-workloads")
    assert workloads is not None
    ready = next(c for c in workloads["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["message"].startswith(
        f'HTTPRoute/{SLUG}/chat dry-run failed: admission webhook "validate.kyverno.svc-fail" '
        f"denied the request: \n\nresource HTTPRoute/{SLUG}/chat was blocked"
    )
    failures = yaml.safe_load(ready["message"].split("policies \n\n", 1)[1])
    assert failures["tenant-guardrails"]["confine-http-routes"].startswith(
        "HTTPRoutes of this tenant must list exactly the host "
    )
    # Nothing of the revision was applied: the route still names the tenant's host.
    route = rendered.get_object("httproutes", SLUG, "chat")
    assert route["spec"]["hostnames"] != ["someone-else.example.com"]


def test_a_hami_container_may_not_ask_more_than_a_slot_per_vgpu(rendered: Simulator) -> None:
    # Issue 26 finding 4: HAMi gives each of 4 vGPUs 96000 MiB, charged once. The API server
    # hands Kyverno "96k", which only compares as a quantity: the rule's cap is one.
    slot = {"nvidia.com/vgpu": "4", "nvidia.com/gpucores": "30"}
    failures = _refusal(
        rendered,
        _pod(labels={QUEUE: "gpu"}, **_gpu({**slot, "nvidia.com/gpumem": "96000"})),
    )
    assert set(failures["tenant-guardrails"]) == {"cap-hami-slot-size"}
    assert "at most 24000 MiB and 30 %" in failures["tenant-guardrails"]["cap-hami-slot-size"]
    _create(rendered, _pod(labels={QUEUE: "gpu"}, **_gpu({**slot, "nvidia.com/gpumem": "24000"})))


def test_only_model_servers_name_the_inference_priority(rendered: Simulator) -> None:
    # Issue 26 finding 9: a tenant pod naming inference-critical would preempt other tenants.
    critical = {"priorityClassName": "inference-critical"}
    failures = _refusal(rendered, {**_pod(), "spec": {**_pod()["spec"], **critical}})
    assert set(failures["tenant-guardrails"]) == {"inference-priority-for-model-servers"}
    foreign = _refusal(rendered, {**_pod(), "spec": {**_pod()["spec"], "priorityClassName": "x"}})
    assert set(foreign["tenant-guardrails"]) == {"restrict-priority-classes"}
    _create(rendered, {**_pod(), "spec": {**_pod()["spec"], "priorityClassName": "training"}})
    # A model server (KServe's predictor pods carry the label) may.
    server = _pod(labels={"serving.kserve.io/inferenceservice": "chat"})
    _create(rendered, {**server, "spec": {**server["spec"], **critical}})
