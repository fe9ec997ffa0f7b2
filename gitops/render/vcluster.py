"""A tenant's virtual cluster: one Flux HelmRelease of the vCluster chart.

Where the HelmRelease lives (decided here, see also ``gitops-prior-art.md`` (d)): in
``flux-system``, reconciled as ``helm-controller``, installing into the tenant's namespace
(``targetNamespace`` *and* ``storageNamespace`` set to the tenant, as vcluster#3061 advises).
The two alternatives fail:

- a HelmRelease in the tenant namespace pointing at ``HelmRepository flux-system/vcluster`` is
  a cross-namespace reference, which the ``--no-cross-namespace-refs`` lockdown makes
  helm-controller refuse;
- a HelmRelease in the tenant namespace with a HelmRepository of its own is allowed, but under
  ``--default-service-account`` it is installed as a service account of that namespace, which
  would then need to create Roles and RoleBindings (the chart's ``role.yaml`` grants the control
  plane pods, pods/exec and secrets): the tenant's own Flux Kustomization, or any pod in the
  namespace running as that account, could grant itself the same.

So the release is platform-owned: the file sits in the tenant's directory (one diff per change)
but the object is in ``flux-system``, named ``<slug>-<cluster>``; the "tenants" Kustomization,
which runs as ``kustomize-controller``, applies it. That name is joined with '-', so tenant
``llm`` with cluster ``platform-x`` and tenant ``llm-platform`` with cluster ``x`` would share
it: the catalog refuses the second cluster when it is asked for, and the duplicates check
(``gitops.checks.duplicates``) fails any change that writes both.

Values (for chart ``CHART_VERSION``, the version whose ``values.schema.json`` the schema check
validates against; the facts below are read from loft-sh/vcluster at that tag):

- the Kubernetes image pinned per minor version (``config/default_extra_values.go``
  ``K8SVersionMap``), control-plane resources by size, Pod Security "restricted"-compatible
  security contexts (the tenant namespace enforces it);
- ``policies.resourceQuota`` and ``policies.limitRange`` **off**. With ``enabled: auto`` or
  ``true`` the chart renders ``vc-<release>`` ResourceQuota and LimitRange into the *host*
  namespace (``chart/templates/resourcequota.yaml``, ``limitrange.yaml``), with the chart's
  default keys merged into ours by Helm (``limits.memory: 40Gi``, ``requests.ephemeral-storage``,
  ``count/pods: 20``, ...). The host namespace is the tenant's, so that quota also counts the
  tenant's own model endpoints and rejects them. The tenant's ResourceQuota and LimitRange
  (``quota.py``) already bound the namespace, the cluster included;
- no real-node sync and no ClusterRole. ``sync.fromHost.nodes.enabled`` makes the chart grant
  the control plane's service account cluster-wide ``pods``/``nodes`` reads and, with
  ``networking.advanced.proxyKubelets`` (on by default), ``nodes/proxy`` (``_rbac.tpl``,
  ``clusterrole.yaml``): a tenant pod running as that account could read every pod of the fleet
  and reach any kubelet. The pods syncer applies ``sync.fromHost.nodes.selector.labels`` as the
  host pods' node selector whether or not nodes are synced
  (``pkg/controllers/resources/pods/syncer.go``), so the cluster stays on its pools with fake
  nodes. ``rbac.clusterRole.enabled: false`` and ``rbac.enableVolumeSnapshotRules: false``
  (the latter alone makes ``auto`` create a ClusterRole) leave the release namespaced;
- no NetworkPolicies from the chart (``policies.networkPolicy.enabled: false``). Its
  ``vc-work-<release>`` lets the cluster's workloads reach ``0.0.0.0/0`` on any port but five
  private ranges (the link-local metadata address among what stays open), and its
  ``vc-cp-<release>`` lets the control plane reach any address on 443, 6443 and 8443 and be
  reached on 8443 from anywhere (``chart/templates/networkpolicy.yaml``); policies only add,
  so they undid the namespace's default-deny. The tenant's own policies
  (``gitops.render.network``) give the control plane the host API server and the gateway's
  and Flux's way in, and the workloads what every tenant pod has;
- no Endpoints or EndpointSlices synced to the host (``sync.toHost.endpoints`` and
  ``endpointSlices`` off). The syncers copy the endpoints of a *selectorless* virtual Service
  verbatim, addresses included (``pkg/controllers/resources/endpoints/syncer.go``
  ``ReconcileStart``, ``translate.go``): a Service pointing at another tenant's model server or
  at the metadata address, which a route through the fleet gateway would then reach. Services
  with a selector are unaffected: the host's endpoint controller fills theirs from the synced
  pods;
- the pools' GPU taint tolerated, the rewrite-hosts init container's image pinned to the fleet's
  ``vcluster_hosts_image`` (vCluster adds it to every pod with a ``subdomain`` it syncs, which
  StatefulSet pods have: ``pkg/controllers/resources/pods/translate/translator.go``,
  ``hosts.go``; it is restricted-compliant but its registry, ``mirror.gcr.io``, is none of the
  tenant's, so the tenant policy allows exactly this image), and the kubeconfig exported as
  ``<name>-kubeconfig``;
- with the fleet's ``cluster_oidc``: the API server trusts the identity provider, the
  kubeconfig Flux applies the members' bindings with is exported for the in-cluster address
  too, and the bindings' reconciler is bound from the first start (``cluster_access.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gitops.render import cluster_access
from gitops.render.meta import FLUX_NAMESPACE, metadata
from gitops.render.reservations import RESERVED_KEY
from gitops.specs import Flavor, FleetSpec, TenantClusterSpec, TenantSpec

CHART = "vcluster"
HELM_REPOSITORY = "vcluster"
HELM_REPOSITORY_URL = "https://charts.loft.sh"
# The chart version the values are written for, and whose values.schema.json validates them.
CHART_VERSION = "0.35.3"
# The Kubernetes image vCluster runs for each supported minor, as chart 0.35.3 maps them
# (loft-sh/vcluster config/default_extra_values.go K8SVersionMap at v0.35.3).
KUBERNETES_IMAGE_TAGS = {
    "1.32": "v1.32.1",
    "1.33": "v1.33.4",
    "1.34": "v1.34.0",
    "1.35": "v1.35.0",
    "1.36": "v1.36.0",
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


def default_kubeconfig_secret(cluster: TenantClusterSpec) -> str:
    """The Secret vCluster always writes, with the top-level ``exportKubeConfig`` settings
    (``pkg/setup/controllers.go`` ``WriteKubeConfigToSecret``, ``GetDefaultSecretName``)."""
    return f"vc-{cluster.name}"


# The Gateway listener (TLS passthrough on 443, hostname *.<vcluster_api_domain>) that carries
# tenant clusters' API traffic.
API_LISTENER = "vcluster-api"
# The control plane's container port behind the chart's Service port 443.
API_SERVER_PORT = 8443


def api_hostname(cluster: TenantClusterSpec, tenant: TenantSpec, fleet: FleetSpec) -> str:
    """Where members reach the cluster's API from outside (``<cluster>.<slug>.<domain>``), or
    "" when the fleet exposes tenant clusters inside the host cluster only."""
    if not fleet.vcluster_api_domain:
        return ""
    return f"{cluster.name}.{tenant.slug}.{fleet.vcluster_api_domain}"


def service_url(cluster: TenantClusterSpec, tenant: TenantSpec) -> str:
    """The API server inside the host cluster: the chart's Service, port 443."""
    return f"https://{cluster.name}.{tenant.slug}.svc:443"


def api_server_url(cluster: TenantClusterSpec, tenant: TenantSpec, fleet: FleetSpec) -> str:
    """Where members' kubeconfigs point: through the gateway when the fleet has an API domain,
    else the in-cluster Service."""
    host = api_hostname(cluster, tenant, fleet)
    return f"https://{host}" if host else service_url(cluster, tenant)


def service_account(cluster: TenantClusterSpec) -> str:
    """The control plane's service account (``chart/templates/serviceaccount.yaml``): it holds
    the chart's Role in the tenant namespace (pods, pods/exec, secrets), so no tenant workload
    may run as it."""
    return f"vc-{cluster.name}"


def image_parts(image: str) -> dict[str, str]:
    """``registry/repository:tag`` as the chart's ``Image`` values (registry, repository, tag)."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    registry, _, repository = name.partition("/")
    return {"registry": registry, "repository": repository, "tag": tag}


def values(cluster: TenantClusterSpec, tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    """The chart values (they must validate against the chart's ``values.schema.json``)."""
    pools = [flavor for name in cluster.node_pools if (flavor := fleet.flavor(name)) is not None]
    service_host = f"{cluster.name}.{tenant.slug}.svc"
    api_host = api_hostname(cluster, tenant, fleet)
    pods: dict[str, Any] = {
        "rewriteHosts": {"initContainer": {"image": image_parts(fleet.vcluster_hosts_image)}}
    }
    nodes: dict[str, Any] = {"enabled": False}
    selector = node_selector(pools, fleet)
    if pools and selector:
        tolerations = {f"{pool.taint_key}:NoSchedule" for pool in pools}
        reserved = {r.flavor for r in tenant.reservations}
        if reserved and all(pool.name in reserved for pool in pools):
            # The tenant's own nodes only: the reservation label joins the synced pods' node
            # selector, and their toleration is "key=value:Effect", which vCluster v0.35.3
            # pkg/util/toleration/toleration.go ParseToleration reads as operator Equal (the
            # pods syncer adds enforceTolerations to every host pod: pkg/controllers/
            # resources/pods/translate/diff.go). The tenant policy allows exactly that value.
            selector = {**selector, RESERVED_KEY: tenant.slug}
            tolerations.add(f"{RESERVED_KEY}={tenant.slug}:NoSchedule")
        nodes["selector"] = {"labels": selector}
        pods["enforceTolerations"] = sorted(tolerations)
    out: dict[str, Any] = {
        "controlPlane": {
            "distro": {
                "k8s": {
                    "enabled": True,
                    "image": {"tag": KUBERNETES_IMAGE_TAGS[cluster.kubernetes_version]},
                    # The init container that copies the Kubernetes binaries takes this, not
                    # the StatefulSet's security context, and the chart leaves it empty
                    # (_init-containers.tpl): restricted would refuse the pod.
                    "securityContext": _CONTAINER_SECURITY,
                }
            },
            "statefulSet": {
                # Asleep: no control plane pod. vCluster v0.35.3's own sleep mode (``sleep``
                # in values.schema.json) is a Platform feature (config/config.go
                # ``IsProFeatureEnabled`` lists ``c.Sleep``), so the open-source way is the
                # StatefulSet's replicas (chart/templates/statefulset.yaml ``replicas:
                # {{ .Values.controlPlane.statefulSet.highAvailability.replicas }}``).
                **({"highAvailability": {"replicas": 0}} if cluster.asleep else {}),
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
            "proxy": {"extraSANs": [service_host, *([api_host] if api_host else [])]},
        },
        "policies": {
            "podSecurityStandard": "restricted",
            "resourceQuota": {"enabled": False},
            "limitRange": {"enabled": False},
            # The chart's policies open what default-deny closes (see the module docstring);
            # the tenant's NetworkPolicies cover the cluster (gitops.render.network).
            "networkPolicy": {"enabled": False},
        },
        "rbac": {
            "clusterRole": {"enabled": False},
            "enableVolumeSnapshotRules": {"enabled": False},
        },
        "networking": {"advanced": {"proxyKubelets": {"byHostname": False, "byIP": False}}},
        "sync": {
            "fromHost": {"nodes": nodes},
            "toHost": {
                "pods": pods,
                # Only selectorless Services' endpoints are synced (see the module docstring).
                "endpoints": {"enabled": False},
                "endpointSlices": {"enabled": False},
            },
        },
        "exportKubeConfig": {
            "server": api_server_url(cluster, tenant, fleet),
            "secret": {"name": kubeconfig_secret(cluster)},
        },
    }
    if fleet.cluster_oidc is not None:
        k8s = out["controlPlane"]["distro"]["k8s"]
        k8s["apiServer"] = {"extraArgs": cluster_access.api_server_args(fleet.cluster_oidc)}
        out["experimental"] = {
            "deploy": {"vcluster": {"manifests": cluster_access.bootstrap_manifests(tenant)}}
        }
        # kustomize-controller reads the default Secret (vc-<name>), so it gets the in-cluster
        # address, not one that needs the gateway's DNS name to resolve inside the cluster; the
        # named one keeps the address members use. The deprecated ``secret`` would hide
        # ``additionalSecrets`` (config.go ``GetAdditionalSecrets``), so it gives way to them.
        out["exportKubeConfig"] = {
            "server": service_url(cluster, tenant),
            "additionalSecrets": [
                {
                    "name": kubeconfig_secret(cluster),
                    "server": api_server_url(cluster, tenant, fleet),
                }
            ],
        }
    if api_host:
        # The chart's TLSRoute (chart/templates/tlsroute.yaml): the fleet gateway passes TLS
        # through to the API server, which holds the certificate for api_host (extraSANs).
        out["controlPlane"]["tlsRoute"] = {
            "enabled": True,
            "host": api_host,
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": fleet.gateway.name,
                    "namespace": fleet.gateway.namespace,
                    "sectionName": API_LISTENER,
                }
            ],
        }
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
