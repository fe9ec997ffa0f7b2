"""Hand-built manifests for the check tests: one valid object per kind the portal writes, and
a small fleet repository tree (flux2-multi-tenancy layout) made of them.

Each function returns a fresh dict, so a test can break one field without touching others.
"""

from __future__ import annotations

from typing import Any

import yaml

from gitops.specs import Flavor, FleetSpec

FLEET = FleetSpec(
    name="ai-factory",
    flavors=(
        Flavor(name="h200", product="NVIDIA-H200", mode="whole", gpus=16, gpu_memory_mib=143_771),
        Flavor(
            name="a100-mig",
            product="NVIDIA-A100-SXM4-80GB",
            mode="mig",
            gpus=4,
            gpu_memory_mib=81_920,
            mig_profiles=(("1g.10gb", 28), ("3g.40gb", 8)),
        ),
        Flavor(
            name="l40s-shared",
            product="NVIDIA-L40S",
            mode="hami",
            gpus=8,
            gpu_memory_mib=46_068,
            hami_split=4,
            node_labels=(("nvidia.com/gpu.deploy.device-plugin", "false"),),
        ),
    ),
)


def dump(*objs: dict[Any, Any]) -> bytes:
    return yaml.safe_dump_all(list(objs), sort_keys=False).encode()


def namespace(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": slug,
            "labels": {
                "toolkit.fluxcd.io/tenant": slug,
                "pod-security.kubernetes.io/enforce": "restricted",
            },
        },
    }


def resource_quota(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute", "namespace": slug},
        # Numbers and strings are both quantities to the API server.
        "spec": {"hard": {"requests.cpu": 64, "requests.memory": "512Gi", "count/pods": "200"}},
    }


def limit_range(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "defaults", "namespace": slug},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "1", "memory": "512Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                }
            ]
        },
    }


def network_policy(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": slug},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}
                            }
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 8080}, {"port": "http"}],
                }
            ],
        },
    }


def service_account(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "flux-reconciler", "namespace": slug},
    }


def role_binding(
    slug: str = "alpha", *, role_kind: str = "ClusterRole", role: str = "admin"
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "flux-reconciler", "namespace": slug},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "flux-reconciler", "namespace": slug}],
    }


def resource_flavor(name: str = "h200", *, topology: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H200"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if topology:
        spec["topologyName"] = "default"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def topology(levels: tuple[str, ...] = FLEET.topology_levels) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def cluster_queue(
    slug: str = "alpha", *, gpus: int | str = 8, flavor: str = "h200", resource: str = ""
) -> dict[str, Any]:
    gpu_resource = resource or "nvidia.com/gpu"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": slug},
        "spec": {
            "cohortName": "gpu-fleet",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": slug}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", gpu_resource],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "512Gi"},
                                {"name": gpu_resource, "nominalQuota": gpus, "borrowingLimit": 8},
                            ],
                        }
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        },
    }


def local_queue(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gpu", "namespace": slug},
        "spec": {"clusterQueue": slug},
    }


ENV_NAMES = "{{ request.object.spec.containers[].env[].name }}"


def kyverno_policy(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": {"name": "gpu-tenancy", "namespace": slug},
        "spec": {
            "background": True,
            "rules": [
                {
                    "name": "forbid-hami-bypass",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": {
                        "failureAction": "Enforce",
                        "message": "CUDA_DISABLE_CONTROL is not allowed",
                        "deny": {
                            "conditions": {
                                "any": [
                                    {
                                        "key": "CUDA_DISABLE_CONTROL",
                                        "operator": "AnyIn",
                                        "value": ENV_NAMES,
                                    }
                                ]
                            }
                        },
                    },
                }
            ],
        },
    }


def git_repository(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": slug},
        "spec": {
            "interval": "1m",
            "url": f"http://portal.portal-system.svc/git/tenants/{slug}.git",
            "ref": {"branch": "main"},
            "secretRef": {"name": "flux-git-auth"},
        },
    }


def flux_kustomization(
    slug: str = "alpha", *, path: str = "", namespace: str = "", source_namespace: str = ""
) -> dict[str, Any]:
    source_ref: dict[str, Any] = {"kind": "GitRepository", "name": "fleet"}
    if source_namespace:
        source_ref["namespace"] = source_namespace
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": f"{slug}-workloads", "namespace": namespace or slug},
        "spec": {
            "interval": "5m",
            "path": path or f"./tenants/{slug}/workloads",
            "prune": True,
            "serviceAccountName": "flux-reconciler",
            "targetNamespace": slug,
            "sourceRef": source_ref,
        },
    }


def vcluster_release(slug: str = "alpha", name: str = "dev") -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": f"{slug}-{name}", "namespace": slug},
        "spec": {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": "vcluster",
                    "version": "0.35.3",
                    "sourceRef": {
                        "kind": "HelmRepository",
                        "name": "vcluster",
                        "namespace": "flux-system",
                    },
                }
            },
            "values": {
                "controlPlane": {
                    "distro": {"k8s": {"enabled": True}},
                    "backingStore": {"etcd": {"embedded": {"enabled": True}}},
                },
                "sync": {
                    "fromHost": {
                        "nodes": {"enabled": False, "selector": {"labels": {"pool": "h200"}}}
                    }
                },
                "rbac": {"clusterRole": {"enabled": False}},
                "policies": {
                    "resourceQuota": {"enabled": False},
                    "limitRange": {"enabled": False},
                },
                "exportKubeConfig": {"secret": {"name": f"{name}-kubeconfig"}},
            },
        },
    }


def inference_service(slug: str = "alpha", name: str = "llama3-8b") -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": slug,
            "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
            "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 2,
                "scaleMetric": "concurrency",
                "scaleTarget": 8,
                "deploymentStrategy": {"type": "Recreate"},
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "storageUri": "hf://meta-llama/meta-llama-3-8b-instruct",
                    "args": ["--model_name=llama3"],
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": 8, "memory": "64Gi", "nvidia.com/gpu": 1},
                    },
                },
            }
        },
    }


# The fleet gateway's base domain: tenant alpha is served on alpha.<domain>.
GATEWAY_DOMAIN = "models.ai-factory.example.com"


def http_route(
    slug: str = "alpha",
    name: str = "llama3-8b",
    *,
    gateway_namespace: str = "gateway-system",
    backend_namespace: str = "",
) -> dict[str, Any]:
    backend: dict[str, Any] = {"name": f"{name}-predictor", "port": 80}
    if backend_namespace:
        backend["namespace"] = backend_namespace
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": slug, "labels": {"ai-factory.io/tenant": slug}},
        "spec": {
            "parentRefs": [{"name": "ai-gateway", "namespace": gateway_namespace}],
            "hostnames": [f"{slug}.{GATEWAY_DOMAIN}"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": f"/{name}"}}],
                    "backendRefs": [backend],
                }
            ],
        },
    }


def litellm_config(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "litellm-routes", "namespace": slug},
        "data": {"config.yaml": "model_list: []\n"},
    }


def resource_claim_template(slug: str = "alpha") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "single-gpu", "namespace": slug},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            }
        },
    }


def kustomization(resources: list[str], namespace: str = "") -> bytes:
    config: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
    }
    if namespace:
        config["namespace"] = namespace
    config["resources"] = resources
    return yaml.safe_dump(config, sort_keys=False).encode()


def tenant_tree(slug: str = "alpha", *, gpus: int = 8) -> dict[str, bytes]:
    base = f"tenants/{slug}"
    return {
        f"{base}/kustomization.yaml": kustomization(
            [
                "namespace.yaml",
                "rbac.yaml",
                "quota.yaml",
                "network-policy.yaml",
                "policy.yaml",
                "queues.yaml",
                "sync.yaml",
                "clusters/dev.yaml",
            ]
        ),
        f"{base}/namespace.yaml": dump(namespace(slug)),
        f"{base}/rbac.yaml": dump(service_account(slug), role_binding(slug)),
        f"{base}/quota.yaml": dump(resource_quota(slug), limit_range(slug)),
        f"{base}/network-policy.yaml": dump(network_policy(slug)),
        f"{base}/policy.yaml": dump(kyverno_policy(slug)),
        f"{base}/queues.yaml": dump(cluster_queue(slug, gpus=gpus), local_queue(slug)),
        f"{base}/sync.yaml": dump(git_repository(slug), flux_kustomization(slug)),
        f"{base}/clusters/dev.yaml": dump(vcluster_release(slug)),
        f"{base}/workloads/kustomization.yaml": kustomization(
            ["endpoints/llama3-8b.yaml", "claims.yaml"], namespace=slug
        ),
        f"{base}/workloads/endpoints/llama3-8b.yaml": dump(
            inference_service(slug), http_route(slug), litellm_config(slug)
        ),
        f"{base}/workloads/claims.yaml": dump(resource_claim_template(slug)),
    }


def fleet_tree(*slugs: str) -> dict[str, bytes]:
    """A whole repository: the fleet's Flux entry points, infrastructure and tenants."""
    tenants_ks = flux_kustomization("tenants", path="./tenants", namespace="flux-system")
    tenants_ks["metadata"]["name"] = "tenants"
    del tenants_ks["spec"]["targetNamespace"]
    tenants_ks["spec"]["serviceAccountName"] = "kustomize-controller"
    infra_ks = flux_kustomization("infra", path="./infrastructure", namespace="flux-system")
    infra_ks["metadata"]["name"] = "infrastructure"
    del infra_ks["spec"]["targetNamespace"]
    infra_ks["spec"]["serviceAccountName"] = "kustomize-controller"
    helm_repository = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": "vcluster", "namespace": "flux-system"},
        "spec": {"interval": "1h", "url": "https://charts.loft.sh"},
    }
    tree: dict[str, bytes] = {
        "clusters/ai-factory/infrastructure.yaml": dump(infra_ks),
        "clusters/ai-factory/tenants.yaml": dump(tenants_ks),
        "infrastructure/kustomization.yaml": kustomization(["flavors.yaml", "sources.yaml"]),
        "infrastructure/flavors.yaml": dump(
            resource_flavor("h200"),
            resource_flavor("a100-mig"),
            # A HAMi pool is never topology-aware (gitops.checks.controllers, tas-hami).
            resource_flavor("l40s-shared", topology=False),
            topology(),
        ),
        "infrastructure/sources.yaml": dump(helm_repository),
        "tenants/kustomization.yaml": kustomization(list(slugs)),
    }
    for slug in slugs:
        tree.update(tenant_tree(slug))
    return tree
