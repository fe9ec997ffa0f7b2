"""A tenant's directory: which files, and the key fields of each kind of object in them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render import kserve, kueue, kyverno, network, quota, rbac, resources, vcluster
from gitops.render.tree import objects_for, render_tenant_tree
from gitops.render.validate import validate_fleet
from gitops.render.yamlio import load_documents
from gitops.specs import SpecError, TenantClusterSpec, TenantSpec
from tests.cluster_oidc import fleet_with_oidc
from tests.gitops.render_samples import (
    CLAIMED,
    DEV,
    FRACTIONS,
    LLAMA,
    PRIVATE,
    SMALL,
    TRAIN,
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
    # (and the spec they come from: tests/gitops/test_render_specfiles.py)
    assert sorted(p for p in files if not p.startswith("tenants/alpha/spec/")) == [
        "tenants/alpha/clusters/dev.yaml",
        "tenants/alpha/gateway-auth.yaml",
        "tenants/alpha/kustomization.yaml",
        "tenants/alpha/kyverno-policy.yaml",
        "tenants/alpha/litellm/claimed.yaml",
        "tenants/alpha/litellm/llama.yaml",
        "tenants/alpha/litellm/small.yaml",
        "tenants/alpha/model-credentials.yaml",
        "tenants/alpha/monitoring.yaml",
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
        "gateway-auth.yaml",
        "monitoring.yaml",
        "model-credentials.yaml",
        "litellm/claimed.yaml",
        "litellm/llama.yaml",
        "litellm/small.yaml",
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


def test_it_lets_the_portal_reach_only_its_secrets_in_the_tenant_namespace() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    role, binding = _docs(files, "tenants/alpha/portal-access.yaml")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "alpha")
    assert role["rules"] == [
        # The Secrets the portal writes: Git credentials and the gateway key.
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "update", "delete"],
            "resourceNames": ["flux-git-auth", "gateway-api-key"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        # The kubeconfigs of the tenant's clusters, read when a member downloads one.
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["dev-kubeconfig"],
        },
        # A sleeping cluster's synced pods, deleted as ``vcluster pause`` does (fleet.sleep).
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "portal-system"}
    ]
    # No clusters: the Secrets the portal writes, no kubeconfig, no pods.
    without = render_tenant_tree(dataclasses.replace(rich_tenant(), clusters=()), FLEET)
    role, _ = _docs(without, "tenants/alpha/portal-access.yaml")
    assert [rule.get("resourceNames") for rule in role["rules"]] == [
        ["flux-git-auth", "gateway-api-key"],
        None,
    ]
    assert all(rule["resources"] == ["secrets"] for rule in role["rules"])


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
    account, binding, *jobs = rbac.tenant_objects(rich_tenant(), FLEET)
    assert jobs == [
        *rbac.job_accounts(rich_tenant()),
        *rbac.job_bindings(rich_tenant()),
        *rbac.portal_impersonation_objects(rich_tenant(), FLEET),
    ]
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


def test_it_sizes_the_gpu_quota_to_what_kueue_may_admit_and_zeroes_the_rest() -> None:
    hard = quota.resource_quota(rich_tenant(), FLEET)["spec"]["hard"]
    hami = next(f for f in FLEET.flavors if f.mode == "hami")
    assert hard == {
        "requests.cpu": "64",
        "requests.memory": "512Gi",
        "requests.ephemeral-storage": "500Gi",
        "limits.ephemeral-storage": "500Gi",
        "requests.storage": "1000Gi",
        "count/pods": "200",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
        # whole GPUs only: 16 nominal + a borrowing limit of 8
        "requests.nvidia.com/gpu": "24",
        # the other shares borrow without limit, so up to their pool
        "requests.nvidia.com/vgpu": str(hami.gpus * hami.hami_split),
        "requests.nvidia.com/gpumem": str(hami.gpus * hami.gpu_memory_mib),
        "limits.nvidia.com/gpumem": str(hami.gpus * hami.gpu_memory_mib),
        "requests.nvidia.com/gpucores": str(hami.gpus * 100),
        "limits.nvidia.com/gpucores": str(hami.gpus * 100),
        "requests.nvidia.com/mig-1g.18gb": "32",
        "requests.nvidia.com/mig-2g.35gb": "0",
        "requests.nvidia.com/mig-3g.71gb": "0",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "16",
    }
    dedicated = quota.resource_quota(dedicated_tenant(), FLEET)["spec"]["hard"]
    assert dedicated["limits.nvidia.com/gpumem"] == "0"
    assert dedicated["requests.nvidia.com/vgpu"] == "0"
    assert dedicated["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "0"


def test_the_gpu_quota_is_nominal_plus_borrowing_when_borrowing_is_limited() -> None:
    # Finding 8: the quota used to stop at the nominal 16, so a borrowing admission's pods
    # were refused at creation.
    share = dataclasses.replace(TRAIN, borrowing_limit=8, lending_limit=None)
    none = dataclasses.replace(TRAIN, name="none", count=2, borrowing_limit=0, lending_limit=None)
    tenant = TenantSpec(slug="t", shares=(share, none))
    hard = quota.resource_quota(tenant, FLEET)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "26"  # 16 + 8 + 2 + 0
    assert hard["requests.nvidia.com/vgpu"] == "0"


def test_whole_gpus_and_hami_slots_have_distinct_quota_keys() -> None:
    # Finding 8: one key used to count whole GPUs and vGPU slots alike.
    tenant = TenantSpec(
        slug="t",
        shares=(
            dataclasses.replace(TRAIN, count=2, borrowing_limit=0),
            dataclasses.replace(FRACTIONS, count=5),
        ),
    )
    hard = quota.resource_quota(tenant, FLEET)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "2"
    assert int(hard["requests.nvidia.com/vgpu"]) >= 5


def test_ephemeral_storage_has_a_default_request_but_no_default_limit() -> None:
    (item,) = quota.limit_range(rich_tenant())["spec"]["limits"]
    assert item["defaultRequest"]["ephemeral-storage"] == "1Gi"
    # A default limit would get pods evicted when KServe's model download fills the emptyDir.
    assert "ephemeral-storage" not in item["default"]


def test_the_limit_range_default_limit_is_the_cap() -> None:
    # Issue 26 finding 7: a default below what a container requests makes it invalid.
    tenant = dataclasses.replace(rich_tenant(), memory_gib=256, cpu_quota=48)
    (item,) = quota.limit_range(tenant)["spec"]["limits"]
    assert item["default"] == item["max"] == {"cpu": "48", "memory": "256Gi"}


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
    # Envoy Gateway's proxies run in its own namespace, not in the Gateway's (gateway-system).
    (gateway,) = policies["allow-gateway"]["ingress"]
    assert gateway["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}
            },
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/component": "proxy",
                    "app.kubernetes.io/managed-by": "envoy-gateway",
                    "app.kubernetes.io/name": "envoy",
                }
            },
        }
    ]
    (litellm,) = policies["allow-litellm"]["ingress"]
    assert litellm["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "litellm"}}}
    ]
    (download,) = policies["allow-model-download"]["egress"]
    assert "169.254.0.0/16" in download["to"][0]["ipBlock"]["except"]
    # Models from a PVC only: nothing to download.
    local = dataclasses.replace(rich_tenant(), endpoints=(PRIVATE,))
    assert "allow-model-download" not in {
        p["metadata"]["name"] for p in network.tenant_objects(local, FLEET)
    }


def test_it_admits_cilium_gateway_traffic_by_its_ingress_identity_with_the_key() -> None:
    fleet = dataclasses.replace(
        FLEET, gateway=dataclasses.replace(FLEET.gateway, implementation="cilium")
    )
    objs = {p["metadata"]["name"]: p for p in network.tenant_objects(rich_tenant(), fleet)}
    policy = objs["allow-gateway"]
    assert (policy["apiVersion"], policy["kind"]) == ("cilium.io/v2", "CiliumNetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["fromEntities"] == ["ingress"]
    (port,) = rule["toPorts"]
    assert port["ports"] == [{"port": "8080", "protocol": "TCP"}]
    assert port["rules"]["http"] == [
        {
            "headerMatches": [
                {"name": "x-api-key", "secret": {"namespace": "alpha", "name": "gateway-api-key"}}
            ]
        }
    ]
    # Cilium has no SecurityPolicy: the key check is the policy's L7 rule.
    assert "tenants/alpha/gateway-auth.yaml" not in render_tenant_tree(rich_tenant(), fleet)


def test_it_asks_envoy_gateway_for_the_tenant_key_on_every_tenant_route() -> None:
    (policy,) = _docs(render_tenant_tree(rich_tenant(), FLEET), "tenants/alpha/gateway-auth.yaml")
    assert policy["kind"] == "SecurityPolicy" and policy["metadata"]["namespace"] == "alpha"
    assert policy["spec"]["targetSelectors"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "matchLabels": {"ai-factory.io/tenant": "alpha"},
        }
    ]
    assert policy["spec"]["apiKeyAuth"] == {
        "credentialRefs": [{"group": "", "kind": "Secret", "name": "gateway-api-key"}],
        "extractFrom": [{"headers": ["x-api-key"]}],
        "sanitize": True,
    }


def test_it_confines_tenant_routes_to_the_tenant_host_in_the_cluster_too() -> None:
    policy = kyverno.tenant_policy(rich_tenant(), FLEET)
    (rule,) = [r for r in policy["spec"]["rules"] if r["name"] == "confine-http-routes"]
    assert rule["match"] == {
        "any": [{"resources": {"kinds": ["gateway.networking.k8s.io/v1/HTTPRoute"]}}]
    }
    conditions = rule["validate"]["deny"]["conditions"]["any"]
    assert {
        "key": "{{ request.object.spec.hostnames || `[]` }}",
        "operator": "AnyNotIn",
        "value": ["alpha.models.ai-factory.example.com"],
    } in conditions
    assert any(c["operator"] == "NotEquals" and c["value"] == "alpha" for c in conditions)
    protect = {p["metadata"]["name"]: p for p in kyverno.cluster_policies()}
    (litellm,) = protect["protect-litellm-config"]["spec"]["rules"]
    assert litellm["validate"]["deny"] == {}
    assert litellm["match"]["any"][0]["resources"]["selector"] == {
        "matchLabels": {"ai-factory.io/litellm-model": "?*"}
    }


def test_it_guards_tenant_pods_with_a_kyverno_policy() -> None:
    policy = kyverno.tenant_policy(rich_tenant(), FLEET)
    assert policy["kind"] == "Policy" and policy["metadata"]["namespace"] == "alpha"
    assert "validationFailureAction" not in policy["spec"]
    rules = {rule["name"]: rule for rule in policy["spec"]["rules"]}
    assert set(rules) == {
        "request-topology-aware-scheduling",
        "require-queue-name",
        "disallow-privileged",
        "forbid-hami-bypass-env",
        "forbid-envfrom-with-hami",
        "require-hami-limits",
        "cap-hami-slot-size",
        "restrict-image-registries",
        "limit-gpus-per-pod",
        "confine-http-routes",
        "confine-route-backends",
        "restrict-priority-classes",
        "inference-priority-for-model-servers",
        "confine-reserved-tolerations",
    }
    for rule in rules.values():
        assert "mutate" in rule or rule["validate"]["failureAction"] == "Enforce"
    assert rules["require-queue-name"]["validate"]["pattern"] == {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "?*"}}
    }
    env = rules["forbid-hami-bypass-env"]["validate"]["deny"]["conditions"]["any"][0]
    assert "CUDA_DISABLE_CONTROL" in env["value"]
    images = rules["restrict-image-registries"]["validate"]["pattern"]["spec"]["containers"][0]
    # With a cluster: the vCluster images, and exactly the rewrite-hosts image its syncer adds.
    assert images["image"] == (
        "coredns/coredns:* | docker.io/vllm/* | ghcr.io/ai-factory/* | ghcr.io/loft-sh/* "
        "| kserve/* | mirror.gcr.io/library/alpine:3.20"
    )
    cap = rules["limit-gpus-per-pod"]["validate"]["deny"]["conditions"]["any"][0]
    assert cap["value"] == 16  # whole GPUs; HAMi slots are nvidia.com/vgpu


def test_it_caps_gpus_per_pod_at_the_fleet_limit_and_drops_vcluster_images() -> None:
    fleet = dataclasses.replace(FLEET, max_gpus_per_tenant=30)
    tenant = dataclasses.replace(
        dedicated_tenant(), shares=(dataclasses.replace(dedicated_tenant().shares[0], count=40),)
    )
    assert kyverno.gpu_cap(tenant, fleet) == 30
    assert "loft-sh" not in kyverno.image_patterns(dedicated_tenant(), FLEET)


def test_it_protects_hami_fleet_wide() -> None:
    policies = {p["metadata"]["name"]: p for p in kyverno.cluster_policies()}
    assert set(policies) == {
        "forbid-hami-bypass-env",
        "protect-hami-annotations",
        "protect-litellm-config",
    }
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
    # Pinned to its pools by the pods syncer's node selector, with fake nodes: no node sync, so
    # no ClusterRole with fleet-wide pod reads and nodes/proxy.
    assert values["sync"]["fromHost"]["nodes"]["enabled"] is False
    assert values["rbac"] == {
        "clusterRole": {"enabled": False},
        "enableVolumeSnapshotRules": {"enabled": False},
    }
    assert values["networking"]["advanced"]["proxyKubelets"] == {"byHostname": False, "byIP": False}
    assert values["sync"]["toHost"]["pods"]["rewriteHosts"]["initContainer"]["image"] == {
        "registry": "mirror.gcr.io",
        "repository": "library/alpine",
        "tag": "3.20",
    }
    # The chart's own quota and limit range would land in the tenant namespace: off.
    policies = values["policies"]
    assert policies["resourceQuota"] == {"enabled": False}
    assert policies["limitRange"] == {"enabled": False}
    # Issue 26 finding 6: the chart's policies opened public egress and the control plane.
    assert policies["networkPolicy"] == {"enabled": False}
    # Finding 5: a selectorless virtual Service's endpoints would be copied to the host.
    to_host = values["sync"]["toHost"]
    assert to_host["endpoints"] == to_host["endpointSlices"] == {"enabled": False}
    assert values["exportKubeConfig"]["secret"] == {"name": "dev-kubeconfig"}


def test_it_selects_several_pools_by_their_common_labels_only() -> None:
    h200, mig, hami, dra = FLEET.flavors
    assert vcluster.node_selector([h200], FLEET) == {
        "ai-factory.io/pool": "h200",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }
    # The four pools share only the product label, which selects all of them: fine together...
    assert vcluster.node_selector([h200, mig, hami, dra], FLEET) == {
        "nvidia.com/gpu.product": "NVIDIA-H200"
    }
    # ... but two of them cannot be told from the others.
    assert vcluster.node_selector([h200, mig], FLEET) is None


def test_it_gives_a_cluster_without_pools_no_node_sync() -> None:
    cluster = TenantClusterSpec(name="cpu-only")
    values = vcluster.values(cluster, rich_tenant(), FLEET)
    nodes = values["sync"]["fromHost"]["nodes"]
    assert nodes == {"enabled": False}
    assert "enforceTolerations" not in values["sync"]["toHost"]["pods"]


def test_it_serves_a_whole_gpu_endpoint_with_vllm_on_kserve() -> None:
    isvc, route = kserve.endpoint_objects(rich_tenant(), LLAMA, FLEET)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    predictor = isvc["spec"]["predictor"]
    assert predictor["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
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
    # The tenant's own host: no other tenant's route can match its requests.
    assert route["spec"]["hostnames"] == ["alpha.models.ai-factory.example.com"]
    assert route["metadata"]["labels"]["ai-factory.io/tenant"] == "alpha"
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/llama"}}]
    assert rule["backendRefs"] == [{"name": "llama-predictor", "port": 80}]

    (config,) = _docs(render_tenant_tree(rich_tenant(), FLEET), "tenants/alpha/litellm/llama.yaml")
    assert config["kind"] == "ConfigMap" and config["metadata"]["namespace"] == "alpha"
    assert config["metadata"]["labels"]["ai-factory.io/litellm-model"] == "true"
    assert yaml.safe_load(config["data"]["model_list.yaml"]) == [
        {
            "model_name": "alpha/llama",
            "litellm_params": {
                "model": "hosted_vllm/llama-3.1-8b",
                "api_base": "http://llama-predictor.alpha.svc.cluster.local/openai/v1",
            },
            "model_info": {"id": "alpha/llama"},
        }
    ]


def test_it_gives_hami_endpoints_memory_and_cores_and_cpu_scaling() -> None:
    isvc, _ = kserve.endpoint_objects(rich_tenant(), SMALL, FLEET)
    predictor = isvc["spec"]["predictor"]
    assert predictor["model"]["resources"]["limits"] == {
        "cpu": "8",
        "memory": "64Gi",
        "nvidia.com/vgpu": "1",
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
    template, isvc, _ = kserve.endpoint_objects(rich_tenant(), CLAIMED, FLEET)
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
    # A DRA pool whose GPUs the MIG manager partitioned: the driver hands out MIG devices.
    mig = dataclasses.replace(
        FLEET.flavors[1],
        mode="dra",
        node_labels=(
            *FLEET.flavors[1].node_labels,
            ("nvidia.com/gpu.deploy.device-plugin", "false"),
        ),
    )
    fleet = dataclasses.replace(FLEET, flavors=(FLEET.flavors[0], mig))
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
    # The share borrows without limit, so the quota admits up to the flavor's MIG devices.
    assert hard["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "64"


def test_it_renders_a_dedicated_tenant_without_workloads_it_did_not_ask_for() -> None:
    files = render_tenant_tree(dedicated_tenant(), FLEET)
    assert not any("/clusters/" in path or "/gpu-shares/" in path for path in files)
    kinds = [obj["kind"] for obj in objects_for(files)]
    assert "HelmRelease" not in kinds
    assert kinds.count("InferenceService") == 1


def test_it_keeps_tenant_workloads_off_the_vcluster_service_accounts() -> None:
    guardrails, creators, accounts = kyverno.tenant_policies(rich_tenant(), FLEET)
    assert guardrails["metadata"]["name"] == "tenant-guardrails"
    assert creators["metadata"]["name"] == "tenant-creators"
    assert accounts["metadata"]["name"] == "vcluster-accounts"
    # userInfo is not available to background scans: Kyverno refuses it there.
    assert accounts["spec"]["background"] is False
    gate, pods, templates = accounts["spec"]["rules"]
    # The syncer copies the virtual pod's (empty) scheduling gates over Kueue's: every one of
    # Kueue's gates is protected, the topology gate too (issue 26 finding 8).
    assert gate["name"] == "vcluster-keeps-kueue-gates"
    assert gate["preconditions"]["all"][0]["value"] == ["system:serviceaccount:alpha:vc-dev"]
    (dropped,) = gate["validate"]["deny"]["conditions"]["all"]
    assert dropped == {
        "key": "{{ request.oldObject.spec.schedulingGates[?starts_with(name, "
        "'kueue.x-k8s.io/')].name || `[]` }}",
        "operator": "AnyNotIn",
        "value": "{{ request.object.spec.schedulingGates[].name || `[]` }}",
    }
    [named, creator] = pods["validate"]["deny"]["conditions"]["all"]
    assert named["value"] == ["vc-dev"]
    assert creator == {
        "key": "{{ request.userInfo.username }}",
        "operator": "NotEquals",
        "value": "system:serviceaccount:kube-system:statefulset-controller",
    }
    assert "StatefulSet" in templates["match"]["any"][0]["resources"]["kinds"]
    [_, installer] = templates["validate"]["deny"]["conditions"]["all"]
    assert installer["value"] == "system:serviceaccount:flux-system:helm-controller"
    # No clusters, no guard.
    plain = dataclasses.replace(rich_tenant(), clusters=())
    assert [p["metadata"]["name"] for p in kyverno.tenant_policies(plain, FLEET)] == [
        "tenant-guardrails",
        "tenant-creators",
    ]


def test_it_gives_the_storage_initializer_a_restricted_security_context() -> None:
    storage = kserve.cluster_storage_container()
    assert storage["kind"] == "ClusterStorageContainer"
    # Named like KServe chart's own, so ours replaces it instead of racing it for hf://.
    assert storage["metadata"]["name"] == "default"
    container = storage["spec"]["container"]
    assert container["name"] == "storage-initializer"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    prefixes = {f.get("prefix") for f in storage["spec"]["supportedUriFormats"]}
    assert {"hf://", "s3://"} <= prefixes


def test_it_rolls_gpu_endpoints_out_without_a_surge_pod() -> None:
    # Finding 19: KServe's default 25% surge needs GPUs the quota does not hold.
    for endpoint in (LLAMA, SMALL, PRIVATE, CLAIMED):
        isvc = next(
            o
            for o in kserve.endpoint_objects(rich_tenant(), endpoint, FLEET)
            if o["kind"] == "InferenceService"
        )
        assert isvc["spec"]["predictor"]["deploymentStrategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }


def _foreach_rule(name: str) -> dict[str, Any]:
    rules = {r["name"]: r for r in kyverno.tenant_policy(rich_tenant(), FLEET)["spec"]["rules"]}
    return rules[name]


def test_it_requires_memory_and_cores_with_every_hami_slot() -> None:
    # Finding 7: a container naming only a slot got the whole card from HAMi's defaults.
    rule = _foreach_rule("require-hami-limits")
    (each,) = rule["validate"]["foreach"]
    assert each["list"] == "request.object.spec.[initContainers, containers][]"
    for condition in each["preconditions"]["any"]:
        assert condition["operator"] == "AnyIn"
        assert set(condition["value"]) == {
            "nvidia.com/vgpu",
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
        }
    denied = {(c["key"], c["operator"]) for c in each["deny"]["conditions"]["any"]}
    assert denied == {
        ("nvidia.com/vgpu", "AnyNotIn"),
        ("nvidia.com/gpumem", "AnyNotIn"),
        ("nvidia.com/gpucores", "AnyNotIn"),
        ("nvidia.com/gpumem-percentage", "AnyIn"),
    }


def test_it_forbids_env_from_in_hami_containers_in_tenant_and_fleet_policies() -> None:
    # Finding 7: envFrom injects variables the env-name rule cannot see.
    rule = _foreach_rule("forbid-envfrom-with-hami")
    (each,) = rule["validate"]["foreach"]
    (condition,) = each["deny"]["conditions"]["any"]
    assert condition["key"] == "{{ length(element.envFrom || `[]`) }}"
    fleet_wide = {p["metadata"]["name"]: p for p in kyverno.cluster_policies()}
    names = [r["name"] for r in fleet_wide["forbid-hami-bypass-env"]["spec"]["rules"]]
    assert names == ["forbid-hami-bypass-env", "forbid-envfrom-with-hami"]


def test_no_credential_is_rendered_into_git() -> None:
    files = render_tenant_tree(rich_tenant(), FLEET)
    secrets = [
        path
        for path, data in files.items()
        if path.endswith(".yaml")
        for doc in _docs(files, path)
        if doc["kind"] == "Secret"
    ]
    assert secrets == []
    assert not any(b"password" in data or b"bearerToken" in data for data in files.values())


def test_it_exposes_tenant_clusters_through_the_gateway_when_the_fleet_has_a_domain() -> None:
    # Finding 12: a kubeconfig naming dev.alpha.svc works only inside the host cluster.
    internal = dataclasses.replace(FLEET, vcluster_api_domain="")
    inside = vcluster.values(DEV, rich_tenant(), internal)
    assert inside["exportKubeConfig"]["server"] == "https://dev.alpha.svc:443"
    assert "tlsRoute" not in inside["controlPlane"]
    exposed = dataclasses.replace(FLEET, vcluster_api_domain="clusters.example.com")
    values = vcluster.values(DEV, rich_tenant(), exposed)
    assert values["exportKubeConfig"]["server"] == "https://dev.alpha.clusters.example.com"
    assert "dev.alpha.clusters.example.com" in values["controlPlane"]["proxy"]["extraSANs"]
    route = values["controlPlane"]["tlsRoute"]
    assert (route["enabled"], route["host"]) == (True, "dev.alpha.clusters.example.com")
    assert route["parentRefs"][0]["sectionName"] == "vcluster-api"
    policies = {p["metadata"]["name"]: p for p in network.tenant_objects(rich_tenant(), exposed)}
    api = policies["allow-vcluster-api"]
    assert api["spec"]["podSelector"] == {"matchLabels": {"app": "vcluster"}}
    assert api["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert "allow-vcluster-api" not in {
        p["metadata"]["name"] for p in network.tenant_objects(rich_tenant(), internal)
    }


def test_pods_on_topology_aware_flavors_ask_for_it_when_the_queue_mixes_flavors() -> None:
    # Issue 26 finding 1: alpha's queue holds h200 and h200-mig (topology-aware) and h200-hami
    # and h200-dra (not); Kueue implies TAS only when every flavor has it (isTASOnly).
    tenant = rich_tenant()
    assert kueue.tas_resources(tenant, FLEET) == ("nvidia.com/gpu", "nvidia.com/mig-1g.18gb")
    rules = {r["name"]: r for r in kyverno.tenant_policy(tenant, FLEET)["spec"]["rules"]}
    rule = rules["request-topology-aware-scheduling"]
    assert rule["preconditions"]["any"][0]["value"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"]
    assert rule["mutate"]["patchStrategicMerge"] == {
        "metadata": {"annotations": {"+(kueue.x-k8s.io/podset-unconstrained-topology)": "true"}}
    }
    for endpoint in tenant.endpoints:
        share = tenant.share(endpoint.share)
        assert share is not None
        predictor = kserve.inference_service(tenant, endpoint, share, FLEET)["spec"]["predictor"]
        asks = predictor.get("annotations") == {
            "kueue.x-k8s.io/podset-unconstrained-topology": "true"
        }
        assert asks == (share.kind in ("whole", "mig")), endpoint.name
    # A tenant with no topology-aware share gets no such rule.
    hami_only = TenantSpec(slug="delta", shares=(FRACTIONS,))
    assert kueue.tas_resources(hami_only, FLEET) == ()
    names = [r["name"] for r in kyverno.tenant_policy(hami_only, FLEET)["spec"]["rules"]]
    assert "request-topology-aware-scheduling" not in names


def test_each_hami_container_asks_at_most_one_slot_per_vgpu() -> None:
    # Issue 26 finding 4: HAMi gives every vGPU of a container the memory it names, Kueue and
    # the quota charge it once: vgpu 4 x gpumem 96000 held 384000 MiB on a 96000 MiB charge.
    wide = dataclasses.replace(FRACTIONS, name="wide", count=2, gpumem_mib=40_000)
    tenant = dataclasses.replace(rich_tenant(), shares=(*rich_tenant().shares, wide))
    assert resources.hami_slot_caps(tenant.shares) == (40_000, 30)
    rules = [r["name"] for r in kyverno.tenant_policy(tenant, FLEET)["spec"]["rules"]]
    assert rules.index("cap-hami-slot-size") == rules.index("require-hami-limits") + 1
    rule = {r["name"]: r for r in kyverno.tenant_policy(tenant, FLEET)["spec"]["rules"]}[
        "cap-hami-slot-size"
    ]
    (each,) = rule["validate"]["foreach"]
    assert each["list"] == "request.object.spec.[initContainers, containers][]"
    assert each["deny"]["conditions"]["any"] == [
        {
            "key": "{{ element.resources.limits.\"nvidia.com/gpumem\" || '0' }}",
            "operator": "GreaterThan",
            "value": "40000",
        },
        {
            "key": "{{ element.resources.limits.\"nvidia.com/gpucores\" || '0' }}",
            "operator": "GreaterThan",
            "value": "30",
        },
    ]
    assert "40000 MiB and 30 %" in rule["validate"]["message"]
    # No HAMi share, no rule.
    plain = dataclasses.replace(tenant, shares=(TRAIN,), endpoints=(), clusters=())
    assert resources.hami_slot_caps(plain.shares) is None
    names = [r["name"] for r in kyverno.tenant_policy(plain, FLEET)["spec"]["rules"]]
    assert "cap-hami-slot-size" not in names


def test_tenant_clusters_get_the_platforms_network_policies_not_the_charts() -> None:
    # Issue 26 finding 6: the chart's vc-work/vc-cp policies opened 0.0.0.0/0 (metadata
    # address included) and 8443 from anywhere; the platform renders its own instead.
    policies = {p["metadata"]["name"]: p for p in network.tenant_objects(rich_tenant(), FLEET)}
    control = policies["allow-vcluster-control-plane"]["spec"]
    assert control["podSelector"] == {
        "matchLabels": {"app": "vcluster"},
        "matchExpressions": [{"key": "release", "operator": "In", "values": ["dev"]}],
    }
    (egress,) = control["egress"]
    assert egress["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]
    assert egress["ports"] == [
        {"protocol": "TCP", "port": 443},
        {"protocol": "TCP", "port": 6443},
    ]
    assert "ingress" not in control
    pinned = dataclasses.replace(FLEET, api_server_cidrs=("10.0.0.1/32",))
    spec = {p["metadata"]["name"]: p for p in network.tenant_objects(rich_tenant(), pinned)}[
        "allow-vcluster-control-plane"
    ]["spec"]
    assert spec["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    # With members' access, kustomize-controller applies their bindings through the API.
    oidc_fleet = fleet_with_oidc()
    oidc = {p["metadata"]["name"]: p for p in network.tenant_objects(rich_tenant(), oidc_fleet)}
    (ingress,) = oidc["allow-vcluster-control-plane"]["spec"]["ingress"]
    assert ingress == {
        "from": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "flux-system"}
                },
                "podSelector": {"matchLabels": {"app": "kustomize-controller"}},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 8443}],
    }
    plain = dataclasses.replace(rich_tenant(), clusters=())
    assert "allow-vcluster-control-plane" not in {
        p["metadata"]["name"] for p in network.tenant_objects(plain, FLEET)
    }


def test_the_api_server_addresses_must_be_cidrs() -> None:
    with pytest.raises(SpecError) as caught:
        validate_fleet(dataclasses.replace(FLEET, api_server_cidrs=("10.0.0.1/33",)))
    assert "api_server_cidrs[0]" in caught.value.errors


def test_tenant_accounts_may_not_forge_platform_labels_or_selectorless_services() -> None:
    # Issue 26 findings 5 and 11: a synced selectorless Service could point a route at another
    # tenant's model server; a pod labelled as a model server got its public egress.
    _, creators, _ = kyverno.tenant_policies(rich_tenant(), FLEET)
    assert creators["spec"]["background"] is False
    labels, services = creators["spec"]["rules"]
    for rule in (labels, services):
        assert rule["preconditions"]["all"][0]["value"] == [
            "system:serviceaccount:{{ request.namespace }}:*"
        ]
    assert set(labels["match"]["any"][0]["resources"]["kinds"]) >= {"Pod", "Deployment", "Job"}
    key, app = labels["validate"]["deny"]["conditions"]["any"]
    assert (key["operator"], key["value"]) == ("AnyIn", ["serving.kserve.io/inferenceservice"])
    assert "spec.template.metadata.labels" in key["key"]
    assert (app["operator"], app["value"]) == ("AnyIn", ["vcluster"])
    external, selector = services["validate"]["deny"]["conditions"]["any"]
    assert (external["operator"], external["value"]) == ("Equals", "ExternalName")
    assert selector["key"] == "{{ length(request.object.spec.selector || `{}`) }}"
    rules = {r["name"]: r for r in kyverno.tenant_policy(rich_tenant(), FLEET)["spec"]["rules"]}
    backends = rules["confine-route-backends"]["validate"]["deny"]["conditions"]["any"]
    assert [(c["operator"], c["value"]) for c in backends] == [
        ("AnyNotIn", ["Service"]),
        ("AnyNotIn", ["", "core"]),
        ("AnyNotIn", ["alpha"]),
    ]


def test_pods_name_the_priority_classes_their_trust_level_allows() -> None:
    # Issue 26 finding 9: inference-critical preempts, and every tenant pod could name it.
    rules = {r["name"]: r for r in kyverno.tenant_policy(rich_tenant(), FLEET)["spec"]["rules"]}
    allowed = rules["restrict-priority-classes"]["validate"]["deny"]["conditions"]["any"]
    assert [c["key"] for c in allowed] == [
        "{{ request.object.spec.priorityClassName || '' }}",
        "{{ request.object.metadata.labels.\"kueue.x-k8s.io/priority-class\" || '' }}",
    ]
    assert {tuple(c["value"]) for c in allowed} == {
        ("", "batch-low", "inference-critical", "training")
    }
    model_servers = rules["inference-priority-for-model-servers"]
    assert [c["value"] for c in model_servers["preconditions"]["any"]] == [
        "inference-critical",
        "inference-critical",
    ]
    (unlabelled,) = model_servers["validate"]["deny"]["conditions"]["all"]
    assert "serving.kserve.io/inferenceservice" in unlabelled["key"]
    assert "system-cluster-critical" not in str(allowed)
    # The label the rule trusts is one the tenant's own accounts may not set.
    assert "serving.kserve.io/inferenceservice" in kyverno.RESERVED_LABEL_KEYS
