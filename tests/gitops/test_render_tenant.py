"""A tenant's directory: which files, and the key fields of each kind of object in them."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from gitops.fleet import demo_fleet
from gitops.render import kserve, kyverno, network, quota, rbac, vcluster
from gitops.render.tree import objects_for, render_tenant_tree
from gitops.render.yamlio import load_documents
from gitops.specs import TenantClusterSpec
from tests.gitops.render_samples import (
    CLAIMED,
    DEV,
    LLAMA,
    PRIVATE,
    SMALL,
    dedicated_tenant,
    rich_tenant,
)

FLEET = demo_fleet()


def _docs(files: dict[str, bytes], path: str) -> list[dict[str, Any]]:
    return load_documents(files[path])


def _by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objs}


def test_it_writes_the_platform_and_workload_files_of_a_tenant() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    assert sorted(files) == [
        "tenants/alpha/clusters/dev.yaml",
        "tenants/alpha/kustomization.yaml",
        "tenants/alpha/kyverno-policy.yaml",
        "tenants/alpha/namespace.yaml",
        "tenants/alpha/network-policy.yaml",
        "tenants/alpha/portal-access.yaml",
        "tenants/alpha/queues.yaml",
        "tenants/alpha/quota.yaml",
        "tenants/alpha/rbac.yaml",
        "tenants/alpha/sync.yaml",
        "tenants/alpha/workloads/endpoints/claimed.yaml",
        "tenants/alpha/workloads/endpoints/llama.yaml",
        "tenants/alpha/workloads/endpoints/private.yaml",
        "tenants/alpha/workloads/endpoints/small.yaml",
        "tenants/alpha/workloads/gpu-shares/claims.yaml",
        "tenants/alpha/workloads/kustomization.yaml",
    ]
    (platform,) = _docs(files, "tenants/alpha/kustomization.yaml")
    assert platform["resources"] == [
        "namespace.yaml",
        "rbac.yaml",
        "quota.yaml",
        "network-policy.yaml",
        "kyverno-policy.yaml",
        "queues.yaml",
        "sync.yaml",
        "clusters/dev.yaml",
        "portal-access.yaml",
    ]
    (workloads,) = _docs(files, "tenants/alpha/workloads/kustomization.yaml")
    assert workloads["resources"] == [
        "gpu-shares/claims.yaml",
        "endpoints/claimed.yaml",
        "endpoints/llama.yaml",
        "endpoints/private.yaml",
        "endpoints/small.yaml",
    ]


def test_it_lets_the_portal_read_only_the_kubeconfigs_of_the_tenants_clusters() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    role, binding = _docs(files, "tenants/alpha/portal-access.yaml")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "alpha")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["dev-kubeconfig"],
        }
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "portal-system"}
    ]
    # no clusters, no access
    without = render_tenant_tree(dataclasses.replace(rich_tenant(), clusters=()), FLEET)
    assert "tenants/alpha/portal-access.yaml" not in without


def test_it_keeps_workloads_namespaced_in_the_tenant_namespace() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    workloads = {p: d for p, d in files.items() if "/workloads/" in p}
    for obj in objects_for(workloads):
        assert obj["metadata"]["namespace"] == "alpha", obj["kind"]
    for obj in objects_for(files):
        assert obj["metadata"]["labels"]["ai-factory.io/tenant"] == "alpha", obj["kind"]


def test_it_labels_the_namespace_for_pod_security_flux_and_kueue() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    (ns,) = _docs(files, "tenants/alpha/namespace.yaml")
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    assert labels["toolkit.fluxcd.io/tenant"] == "alpha"
    assert labels["ai-factory.io/tenant"] == "alpha"
    assert ns["metadata"]["annotations"]["ai-factory.io/cost-centre"] == "CC-4711"


def test_it_binds_the_tenant_account_to_the_reconciler_role() -> None:
    account, binding = rbac.tenant_objects(rich_tenant())
    assert account["metadata"] == {
        "name": "alpha",
        "namespace": "alpha",
        "labels": {
            "app.kubernetes.io/managed-by": "ai-factory-portal",
            "ai-factory.io/tenant": "alpha",
            "toolkit.fluxcd.io/tenant": "alpha",
        },
    }
    assert binding["metadata"]["name"] == "gotk-reconciler"
    assert binding["roleRef"]["name"] == rbac.TENANT_RECONCILER_ROLE
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "gotk:alpha:reconciler"},
        {"kind": "ServiceAccount", "name": "alpha", "namespace": "alpha"},
    ]
    rules = rbac.tenant_reconciler_role()["rules"]
    granted = {(r["apiGroups"][0], res) for r in rules for res in r["resources"]}
    assert ("serving.kserve.io", "inferenceservices") in granted
    assert ("resource.k8s.io", "resourceclaimtemplates") in granted
    for forbidden in ("networkpolicies", "rolebindings", "resourcequotas", "policies", "secrets"):
        assert forbidden not in {res for _, res in granted}


def test_it_sums_the_quota_from_the_shares_and_zeroes_the_rest() -> None:
    hard = quota.resource_quota(rich_tenant(), FLEET)["spec"]["hard"]
    assert hard == {
        "requests.cpu": "64",
        "requests.memory": "512Gi",
        "count/pods": "200",
        # 16 whole GPUs + 10 HAMi vGPUs
        "requests.nvidia.com/gpu": "26",
        "requests.nvidia.com/gpumem": "200000",
        "limits.nvidia.com/gpumem": "200000",
        "requests.nvidia.com/gpucores": "300",
        "limits.nvidia.com/gpucores": "300",
        "requests.nvidia.com/mig-1g.18gb": "8",
        "requests.nvidia.com/mig-2g.35gb": "0",
        "requests.nvidia.com/mig-3g.71gb": "0",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "8",
    }
    dedicated = quota.resource_quota(dedicated_tenant(), FLEET)["spec"]["hard"]
    assert dedicated["limits.nvidia.com/gpumem"] == "0"
    assert dedicated["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "0"


def test_it_keeps_limit_range_defaults_under_the_max() -> None:
    tiny = dataclasses.replace(rich_tenant(), memory_gib=1, cpu_quota=1)
    (item,) = quota.limit_range(tiny)["spec"]["limits"]
    assert item["default"] == {"cpu": "1", "memory": "1Gi"}
    assert item["max"] == {"cpu": "1", "memory": "1Gi"}


def test_it_denies_all_traffic_then_opens_dns_namespace_gateway_and_downloads() -> None:
    policies = {
        p["metadata"]["name"]: p["spec"] for p in network.tenant_objects(rich_tenant(), FLEET)
    }
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    (dns,) = policies["allow-dns"]["egress"]
    assert dns["to"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
    }
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert policies["allow-same-namespace"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    (gateway,) = policies["allow-gateway"]["ingress"]
    assert gateway["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}
    ]
    (download,) = policies["allow-model-download"]["egress"]
    assert "169.254.0.0/16" in download["to"][0]["ipBlock"]["except"]
    # Models from a PVC only: nothing to download.
    local = dataclasses.replace(rich_tenant(), endpoints=(PRIVATE,))
    assert "allow-model-download" not in {
        p["metadata"]["name"] for p in network.tenant_objects(local, FLEET)
    }


def test_it_guards_tenant_pods_with_a_kyverno_policy() -> None:
    policy = kyverno.tenant_policy(rich_tenant(), FLEET)
    assert policy["kind"] == "Policy" and policy["metadata"]["namespace"] == "alpha"
    assert "validationFailureAction" not in policy["spec"]
    rules = {rule["name"]: rule for rule in policy["spec"]["rules"]}
    assert set(rules) == {
        "require-queue-name",
        "disallow-privileged",
        "forbid-hami-bypass-env",
        "restrict-image-registries",
        "limit-gpus-per-pod",
    }
    for rule in rules.values():
        assert rule["validate"]["failureAction"] == "Enforce"
    assert rules["require-queue-name"]["validate"]["pattern"] == {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "?*"}}
    }
    env = rules["forbid-hami-bypass-env"]["validate"]["deny"]["conditions"]["any"][0]
    assert "CUDA_DISABLE_CONTROL" in env["value"]
    images = rules["restrict-image-registries"]["validate"]["pattern"]["spec"]["containers"][0]
    assert images["image"] == (
        "coredns/coredns:* | docker.io/vllm/* | ghcr.io/ai-factory/* | ghcr.io/loft-sh/* | kserve/*"
    )
    cap = rules["limit-gpus-per-pod"]["validate"]["deny"]["conditions"]["any"][0]
    assert cap["value"] == 26


def test_it_caps_gpus_per_pod_at_the_fleet_limit_and_drops_vcluster_images() -> None:
    fleet = dataclasses.replace(FLEET, max_gpus_per_tenant=30)
    tenant = dataclasses.replace(
        dedicated_tenant(), shares=(dataclasses.replace(dedicated_tenant().shares[0], count=40),)
    )
    assert kyverno.gpu_cap(tenant, fleet) == 30
    assert "loft-sh" not in kyverno.image_patterns(dedicated_tenant(), FLEET)


def test_it_protects_hami_fleet_wide() -> None:
    policies = {p["metadata"]["name"]: p for p in kyverno.cluster_policies()}
    assert set(policies) == {"forbid-hami-bypass-env", "protect-hami-annotations"}
    for policy in policies.values():
        assert policy["kind"] == "ClusterPolicy"
        assert "namespace" not in policy["metadata"]
    create, update = policies["protect-hami-annotations"]["spec"]["rules"]
    keys = [c["key"] for c in create["validate"]["deny"]["conditions"]["any"]]
    assert "{{ request.object.metadata.annotations.\"hami.io/vgpu-node\" || '' }}" in keys
    assert update["match"]["any"][0]["resources"]["operations"] == ["UPDATE"]


def test_it_syncs_the_tenant_workloads_as_the_tenant() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    kinds = _by_kind(_docs(files, "tenants/alpha/sync.yaml"))
    repo, sync = kinds["GitRepository"], kinds["Kustomization"]
    assert repo["metadata"]["namespace"] == "alpha"
    # The tenant's own read-only projection, never the fleet repository (every tenant's files
    # and every open change), read with the token the portal writes into the namespace.
    assert repo["spec"]["url"] == "http://portal.portal-system.svc/git/tenants/alpha.git"
    assert repo["spec"]["secretRef"] == {"name": "flux-git-auth"}
    assert repo["spec"]["ref"] == {"branch": "main"}
    assert sync["metadata"] == {
        "name": "alpha-workloads",
        "namespace": "alpha",
        "labels": {
            "app.kubernetes.io/managed-by": "ai-factory-portal",
            "ai-factory.io/tenant": "alpha",
            "toolkit.fluxcd.io/tenant": "alpha",
        },
    }
    assert sync["spec"]["serviceAccountName"] == "alpha"
    assert sync["spec"]["path"] == "./tenants/alpha/workloads"
    assert sync["spec"]["prune"] is True
    assert sync["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "alpha"}
    assert sync["spec"]["targetNamespace"] == "alpha"


def test_it_releases_the_vcluster_from_flux_system_into_the_tenant_namespace() -> None:
    release = vcluster.helm_release(DEV, rich_tenant(), FLEET)
    assert release["metadata"]["name"] == "alpha-dev"
    assert release["metadata"]["namespace"] == "flux-system"
    spec = release["spec"]
    assert spec["chart"]["spec"]["version"] == FLEET.vcluster_chart_version
    assert spec["chart"]["spec"]["sourceRef"] == {"kind": "HelmRepository", "name": "vcluster"}
    assert (spec["targetNamespace"], spec["storageNamespace"]) == ("alpha", "alpha")
    assert spec["releaseName"] == "dev"
    assert spec["serviceAccountName"] == "helm-controller"
    values = spec["values"]
    assert values["controlPlane"]["distro"]["k8s"]["image"]["tag"] == "v1.33.4"
    assert values["controlPlane"]["statefulSet"]["resources"] == vcluster.SIZES["medium"]
    assert values["sync"]["fromHost"]["nodes"]["selector"]["labels"] == {
        "ai-factory.io/pool": "h200",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }
    assert values["sync"]["toHost"]["pods"]["enforceTolerations"] == ["nvidia.com/gpu:NoSchedule"]
    policies = values["policies"]
    assert policies["resourceQuota"]["quota"]["requests.nvidia.com/gpu"] == "8"
    assert policies["resourceQuota"]["quota"]["requests.cpu"] == "16"
    assert policies["limitRange"]["enabled"] is True
    assert policies["networkPolicy"]["enabled"] is True
    assert values["exportKubeConfig"]["secret"] == {"name": "dev-kubeconfig"}


def test_it_selects_several_pools_by_their_common_labels_only() -> None:
    h200, mig, hami = FLEET.flavors
    assert vcluster.node_selector([h200], FLEET) == {
        "ai-factory.io/pool": "h200",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }
    # The three pools share only the product label, which selects all of them: fine together...
    assert vcluster.node_selector([h200, mig, hami], FLEET) == {
        "nvidia.com/gpu.product": "NVIDIA-H200"
    }
    # ... but two of them cannot be told from the third.
    assert vcluster.node_selector([h200, mig], FLEET) is None


def test_it_gives_a_cluster_without_pools_no_node_sync() -> None:
    cluster = TenantClusterSpec(name="cpu-only")
    values = vcluster.values(cluster, rich_tenant(), FLEET)
    assert "sync" not in values
    assert values["policies"]["resourceQuota"]["quota"]["requests.nvidia.com/gpu"] == "0"


def test_it_serves_a_whole_gpu_endpoint_with_vllm_on_kserve() -> None:
    isvc, route, config = kserve.endpoint_objects(rich_tenant(), LLAMA, FLEET)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    predictor = isvc["spec"]["predictor"]
    assert predictor["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 4)
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "huggingface"}
    assert model["storageUri"] == LLAMA.model_uri
    assert model["args"] == [
        "--model_name=llama-3.1-8b",
        "--max-model-len=8192",
        "--tensor-parallel-size=2",
    ]
    assert model["resources"]["limits"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"}
    assert model["resources"]["requests"] == model["resources"]["limits"]
    # Concurrency scaling: KEDA on vLLM's metrics, per replica.
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    (metric,) = predictor["autoScaling"]["metrics"]
    assert metric["external"]["metric"]["serverAddress"] == FLEET.prometheus_url
    assert 'namespace="alpha",pod=~"llama-predictor-.*"' in metric["external"]["metric"]["query"]
    assert metric["external"]["target"] == {"type": "Value", "value": "8"}

    assert route["kind"] == "HTTPRoute"
    assert route["spec"]["parentRefs"][0]["namespace"] == "gateway-system"
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/alpha/llama"}}]
    assert rule["backendRefs"] == [{"name": "llama-predictor", "port": 80}]

    assert config["kind"] == "ConfigMap"
    assert config["metadata"]["labels"]["ai-factory.io/litellm-model"] == "true"
    assert yaml.safe_load(config["data"]["model_list.yaml"]) == [
        {
            "model_name": "alpha/llama",
            "litellm_params": {
                "model": "hosted_vllm/llama-3.1-8b",
                "api_base": "https://models.ai-factory.example.com/alpha/llama/v1",
            },
            "model_info": {"id": "alpha/llama"},
        }
    ]


def test_it_gives_hami_endpoints_memory_and_cores_and_cpu_scaling() -> None:
    isvc, _, _ = kserve.endpoint_objects(rich_tenant(), SMALL, FLEET)
    predictor = isvc["spec"]["predictor"]
    assert predictor["model"]["resources"]["limits"] == {
        "cpu": "8",
        "memory": "64Gi",
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "20000",
        "nvidia.com/gpucores": "30",
    }
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("cpu", 70)


def test_it_keeps_an_unexposed_mig_endpoint_in_the_cluster() -> None:
    (isvc,) = kserve.endpoint_objects(rich_tenant(), PRIVATE, FLEET)
    limits = isvc["spec"]["predictor"]["model"]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.18gb"] == "1"
    assert isvc["metadata"]["labels"]["networking.kserve.io/visibility"] == "cluster-local"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"


def test_it_claims_dra_gpus_for_an_endpoint_per_replica() -> None:
    template, isvc, _, _ = kserve.endpoint_objects(rich_tenant(), CLAIMED, FLEET)
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"]["name"] == "claimed-gpus"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 2
    predictor = isvc["spec"]["predictor"]
    assert predictor["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "claimed-gpus"}
    ]
    resources = predictor["model"]["resources"]
    assert resources["claims"] == [{"name": "gpu"}]
    assert "nvidia.com/gpu" not in resources["limits"]


def test_it_renders_a_claim_template_per_dra_share() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    (template,) = _docs(files, "tenants/alpha/workloads/gpu-shares/claims.yaml")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert (exactly["deviceClassName"], exactly["allocationMode"], exactly["count"]) == (
        "gpu.nvidia.com",
        "ExactCount",
        8,
    )
    assert "productName" in exactly["selectors"][0]["cel"]["expression"]
    assert "'nvidia-h200'" in exactly["selectors"][0]["cel"]["expression"]


def test_it_claims_mig_devices_by_profile() -> None:
    fleet = dataclasses.replace(
        FLEET, flavors=(FLEET.flavors[0], dataclasses.replace(FLEET.flavors[1], dra=True))
    )
    share = dataclasses.replace(rich_tenant().shares[1], kind="dra", name="mig-claims")
    tenant = dataclasses.replace(rich_tenant(), shares=(share,), endpoints=(), clusters=())
    files = render_tenant_tree(tenant, fleet)
    (template,) = _docs(files, "tenants/alpha/workloads/gpu-shares/mig-claims.yaml")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "mig"
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["selectors"] == [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.18gb'"}}
    ]
    (hard,) = [o["spec"]["hard"] for o in objects_for(files) if o["kind"] == "ResourceQuota"]
    assert hard["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "8"


def test_it_renders_a_dedicated_tenant_without_workloads_it_did_not_ask_for() -> None:
    files = render_tenant_tree(dedicated_tenant(), FLEET)
    assert not any("/clusters/" in path or "/gpu-shares/" in path for path in files)
    kinds = [obj["kind"] for obj in objects_for(files)]
    assert "HelmRelease" not in kinds
    assert kinds.count("InferenceService") == 1


def test_no_credential_is_rendered_into_git() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    secrets = [
        path
        for path, data in files.items()
        for doc in _docs(files, path)
        if doc["kind"] == "Secret"
    ]
    assert secrets == []
    assert not any(b"password" in data or b"bearerToken" in data for data in files.values())
