"""A tenant's virtual cluster: one Flux HelmRelease of the vCluster chart.

Where the HelmRelease lives (decided here, see also ``gitops-prior-art.md`` (d)): in
``flux-system``, reconciled as ``helm-controller``, installing into the tenant's namespace
(``targetNamespace`` *and* ``storageNamespace`` set to the tenant, as vcluster#3061 advises).
The two alternatives fail:

- a HelmRelease in the tenant namespace pointing at ``HelmRepository flux-system/vcluster`` is
  a cross-namespace reference, which the ``--no-cross-namespace-refs`` lockdown makes
  helm-controller refuse;
- a HelmRelease in the tenant namespace with a HelmRepository of its own is allowed, but under
  ``--default-service-account`` it is installed as a service account of that namespace, and a
  vCluster that syncs host nodes (``sync.fromHost.nodes``, which is how it is kept on its GPU
  pools) needs a ClusterRole and ClusterRoleBinding (chart ``_rbac.tpl``). Granting a tenant
  namespace's service account the right to create those would let the tenant's own Flux
  Kustomization, or any pod in the namespace running as that account, grant itself anything.

So the release is platform-owned: the file sits in the tenant's directory (one diff per change)
but the object is in ``flux-system``, named ``<slug>-<cluster>``; the "tenants" Kustomization,
which runs as ``kustomize-controller``, applies it. Two tenants can never produce the same
name unnoticed: a kustomize build of ``tenants/`` fails on a duplicate object.

Values: the Kubernetes image pinned per minor version, control-plane resources by size,
Pod Security "restricted"-compatible security contexts (the tenant namespace enforces it),
``policies`` (quota, limit range, network policy) from the cluster spec, node sync restricted
to the chosen pools' labels (which vCluster also sets as the synced pods' node selector), the
pools' GPU taint tolerated, and the kubeconfig exported as ``<name>-kubeconfig`` with a server
address that works from the host cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gitops.render import resources
from gitops.render.meta import FLUX_NAMESPACE, metadata
from gitops.specs import Flavor, FleetSpec, TenantClusterSpec, TenantSpec

CHART = "vcluster"
HELM_REPOSITORY = "vcluster"
HELM_REPOSITORY_URL = "https://charts.loft.sh"
# The Kubernetes image vCluster runs for each supported minor (vcluster config K8SVersionMap).
KUBERNETES_IMAGE_TAGS = {
    "1.32": "v1.32.1",
    "1.33": "v1.33.4",
    "1.34": "v1.34.12",
    "1.35": "v1.35.9",
}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Control-plane pod resources per size (the API server, controller manager and syncer).
SIZES: dict[str, dict[str, dict[str, str]]] = {
    "small": {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
    "medium": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
    "large": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
}
# Any non-root id works: the images do not need a particular user.
_RUN_AS = 12345
_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": _RUN_AS,
    "runAsGroup": _RUN_AS,
    "fsGroup": _RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": _RUN_AS,
    "runAsGroup": _RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# CoreDNS binds port 53 inside its container; "restricted" allows adding just this capability.
_COREDNS_CONTAINER_SECURITY = {
    **_CONTAINER_SECURITY,
    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
}


def pool_labels(flavor: Flavor) -> dict[str, str]:
    """The node labels that select a flavor's nodes (as on its Kueue ResourceFlavor)."""
    return {**dict(flavor.node_labels), GPU_PRODUCT_LABEL: flavor.product}


def node_selector(pools: Sequence[Flavor], fleet: FleetSpec) -> dict[str, str] | None:
    """Labels shared by all ``pools`` that match no other flavor's nodes, or None.

    vCluster takes one label map for the nodes it syncs, so several pools can only be
    selected together through labels they have in common.
    """
    if not pools:
        return {}
    common = set(pool_labels(pools[0]).items())
    for pool in pools[1:]:
        common &= set(pool_labels(pool).items())
    if not common:
        return None
    chosen = {pool.name for pool in pools}
    for other in fleet.flavors:
        if other.name not in chosen and common <= set(pool_labels(other).items()):
            return None
    return dict(sorted(common))


def release_name(tenant: TenantSpec, cluster: TenantClusterSpec) -> str:
    return f"{tenant.slug}-{cluster.name}"


def kubeconfig_secret(cluster: TenantClusterSpec) -> str:
    return f"{cluster.name}-kubeconfig"


def _quota(
    cluster: TenantClusterSpec, tenant: TenantSpec, pools: Sequence[Flavor]
) -> dict[str, str]:
    quota = {
        "requests.cpu": str(cluster.cpu_quota),
        "requests.memory": f"{cluster.memory_gib}Gi",
        "count/pods": str(cluster.max_pods),
        f"requests.{resources.GPU}": str(cluster.gpu_quota),
    }
    pool_names = {pool.name for pool in pools}
    mig: dict[str, int] = {}
    for share in tenant.shares:
        if share.kind == "mig" and share.flavor in pool_names:
            key = f"requests.{resources.mig_resource(share.mig_profile)}"
            mig[key] = mig.get(key, 0) + share.count
    quota.update({key: str(value) for key, value in mig.items()})
    return quota


def values(cluster: TenantClusterSpec, tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    """The chart values (they must validate against the chart's ``values.schema.json``)."""
    pools = [flavor for name in cluster.node_pools if (flavor := fleet.flavor(name)) is not None]
    service_host = f"{cluster.name}.{tenant.slug}.svc"
    sync: dict[str, Any] = {}
    selector = node_selector(pools, fleet)
    if pools and selector:
        sync = {
            "fromHost": {"nodes": {"enabled": True, "selector": {"labels": selector}}},
            "toHost": {
                "pods": {
                    "enforceTolerations": sorted({f"{pool.taint_key}:NoSchedule" for pool in pools})
                }
            },
        }
    out: dict[str, Any] = {
        "controlPlane": {
            "distro": {
                "k8s": {
                    "enabled": True,
                    "image": {"tag": KUBERNETES_IMAGE_TAGS[cluster.kubernetes_version]},
                }
            },
            "statefulSet": {
                "resources": SIZES[cluster.size],
                "security": {
                    "podSecurityContext": _POD_SECURITY,
                    "containerSecurityContext": _CONTAINER_SECURITY,
                },
            },
            "coredns": {
                "security": {
                    "podSecurityContext": _POD_SECURITY,
                    "containerSecurityContext": _COREDNS_CONTAINER_SECURITY,
                }
            },
            "proxy": {"extraSANs": [service_host]},
        },
        "policies": {
            "podSecurityStandard": "restricted",
            "resourceQuota": {"enabled": True, "quota": _quota(cluster, tenant, pools)},
            "limitRange": {
                "enabled": True,
                "default": {"cpu": "1", "memory": "1Gi"},
                "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
            },
            "networkPolicy": {"enabled": True},
        },
        "exportKubeConfig": {
            "server": f"https://{service_host}:443",
            "secret": {"name": kubeconfig_secret(cluster)},
        },
    }
    if sync:
        out["sync"] = sync
    return out


def helm_release(
    cluster: TenantClusterSpec, tenant: TenantSpec, fleet: FleetSpec
) -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": metadata(release_name(tenant, cluster), FLUX_NAMESPACE, tenant=tenant.slug),
        "spec": {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": CHART,
                    "version": fleet.vcluster_chart_version,
                    "sourceRef": {"kind": "HelmRepository", "name": HELM_REPOSITORY},
                    "interval": "1h",
                }
            },
            "releaseName": cluster.name,
            "targetNamespace": tenant.slug,
            "storageNamespace": tenant.slug,
            # The lockdown's default service account has no rights: install as the controller.
            "serviceAccountName": "helm-controller",
            "install": {"createNamespace": False, "remediation": {"retries": 3}},
            "upgrade": {"remediation": {"retries": 3}},
            "values": values(cluster, tenant, fleet),
        },
    }


def helm_repository() -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": metadata(HELM_REPOSITORY, FLUX_NAMESPACE),
        "spec": {"interval": "1h", "url": HELM_REPOSITORY_URL},
    }
