"""NetworkPolicies of a tenant namespace: deny by default, then open what the platform needs.

- ``default-deny``: no ingress, no egress;
- ``allow-dns``: egress to kube-dns in kube-system, UDP and TCP 53, and, on a fleet that runs
  NodeLocal DNSCache (``node_local_dns``), to the link-local address its node cache listens on
  (kubernetes cluster/addons/dns/nodelocaldns/README.md: a dummy interface with 169.254.20.10
  by default, where pods send their queries; the README notes that network policies need an
  extra rule for it). That cache runs with hostNetwork, so no pod or namespace selector
  matches it: only an ipBlock does;
- ``allow-same-namespace``: pods of the namespace talk to each other (a vCluster's control
  plane and its synced pods, a model and its clients);
- ``allow-gateway``: the fleet gateway's proxies reach model servers on their port. Where that
  traffic comes from depends on the implementation (``fleet.gateway.implementation``), and
  never from the Gateway object's own namespace:
  - Envoy Gateway runs its Envoy proxies in its own namespace, ``envoy-gateway-system`` by
    default, labelled ``app.kubernetes.io/{name: envoy, component: proxy, managed-by:
    envoy-gateway}`` (envoyproxy/gateway internal/infrastructure/kubernetes/proxy/resource.go
    ``EnvoyAppLabel``): a NetworkPolicy from those pods;
  - Cilium's Gateway is served by the node's Envoy, and its traffic to backends carries the
    reserved ``ingress`` identity, not a pod or a namespace (Cilium policy language, entity
    ``ingress``, https://docs.cilium.io/en/stable/security/policy/language/#entities-based):
    a CiliumNetworkPolicy ``fromEntities: [ingress]``, with an L7 rule that also checks the
    tenant's API key (see ``gitops.render.gateway``);
- ``allow-litellm``: LiteLLM calls exposed model servers inside the cluster (its own virtual
  keys guard that route, so it does not go through the gateway's key check);
- ``allow-monitoring``: Prometheus scrapes model servers' metrics (autoscaling reads them);
- ``allow-model-download``: only when an endpoint loads from ``hf://`` or ``s3://``: model
  server pods (where KServe's storage initializer runs) reach public HTTPS, never private
  ranges or the cloud metadata address.

- ``allow-vcluster-control-plane`` (with tenant clusters): their control planes reach the
  host API server, on the fleet's ``api_server_cidrs`` (without them: ports 443 and 6443 on any
  address outside the link-local range, where the metadata service answers), and, with the
  fleet's ``cluster_oidc``, kustomize-controller reaches their API servers (Flux applies the
  members' bindings through the exported kubeconfig, ``cluster_access.py``). The vCluster chart
  renders no policies of its own (``gitops.render.vcluster``);
- ``allow-vcluster-api`` (with ``vcluster_api_domain``): the gateway reaches the API servers.

- ``allow-kubelet-probes`` (on Cilium): the node's own host reaches the tenant's pods, for the
  kubelet's probes. See "Host-network pods" below.

Host-network pods (DaemonSets such as Cilium's agent, the SR-IOV device plugin, Multus, node
exporters) share their node's network namespace, so no namespace or pod selector ever matches
them: a NetworkPolicy peer selects pods by their own network identity. Cilium gives their
traffic the reserved identity ``host`` on their own node and ``remote-node`` on every other
(cilium/cilium ``pkg/policy/api/entity.go`` ``EntitySelectorMapping``: ``host`` is the local
node alone, ``remote-node`` all other nodes, and ``cluster``, ``all`` include both), and its
CIDR rules do not select nodes at all (``policy-cidr-match-mode`` unset). So none of the
policies above admits a host-network pod of another node, whatever runs on the tenant's nodes:
no ingress rule has an ``ipBlock``, a namespace selector without a named namespace, or an
entity other than ``ingress`` and ``host``. ``host`` is needed because the kubelet's probes
come from the node: Cilium admits the local host anyway unless ``allow-localhost: policy``
(daemon option ``AllowLocalhost``, "auto" means "always" under Kubernetes, which "demands that
the localhost can always reach local pods"), and with ``policy`` this rule keeps probes working.
It also admits the host-network pods of the pod's own node, which Pod Security (baseline) keeps
tenants from creating; on a dedicated tenant's nodes those are the platform's DaemonSets only.
``tests/gitops/test_render_network_hosts.py`` evaluates the rendered policies for host-network
peers.

The policies select pods by labels only the platform's controllers may set: the Kyverno policy
``tenant-creators`` (``gitops.render.kyverno``) refuses ``serving.kserve.io/inferenceservice``
and ``app: vcluster`` on pods and pod templates that the tenant's own accounts (its Flux, a
vCluster syncer, which copies a virtual pod's labels but ``release``) create, so a tenant pod
cannot take a model server's public egress or a control plane's way to the API server.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from gitops.render import vcluster
from gitops.render.gateway import API_KEY_HEADER, API_KEY_SECRET
from gitops.render.meta import FLUX_NAMESPACE, metadata
from gitops.specs import FleetSpec, TenantSpec

API = "networking.k8s.io/v1"
CILIUM_API = "cilium.io/v2"
ENVOY_PROXY_LABELS = {
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
    "app.kubernetes.io/name": "envoy",
}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"
MODEL_SERVER_PORT = 8080
PRIVATE_RANGES = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
)
DOWNLOAD_SCHEMES = ("hf://", "s3://")

_MODEL_SERVERS = {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]}


def _policy(tenant: TenantSpec, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "NetworkPolicy",
        "metadata": metadata(name, tenant.slug, tenant=tenant.slug),
        "spec": spec,
    }


def _from_namespace(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _model_server_ingress(peer: dict[str, Any]) -> dict[str, Any]:
    return {
        "podSelector": _MODEL_SERVERS,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": MODEL_SERVER_PORT}]}],
    }


def _from_gateway(
    tenant: TenantSpec,
    fleet: FleetSpec,
    name: str,
    pods: dict[str, Any],
    port: int,
    http: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A policy admitting the fleet gateway's traffic to ``pods`` on ``port``, in the form its
    implementation needs: Cilium's proxy traffic carries the reserved ``ingress`` identity (an
    L7 ``http`` rule can only be written there), Envoy Gateway's comes from its proxy pods in
    ``proxy_namespace``."""
    if fleet.gateway.implementation == "cilium":
        to_port: dict[str, Any] = {"ports": [{"port": str(port), "protocol": "TCP"}]}
        if http:
            to_port["rules"] = {"http": http}
        return {
            "apiVersion": CILIUM_API,
            "kind": "CiliumNetworkPolicy",
            "metadata": metadata(name, tenant.slug, tenant=tenant.slug),
            "spec": {
                "endpointSelector": pods,
                "ingress": [{"fromEntities": ["ingress"], "toPorts": [to_port]}],
            },
        }
    peer = {
        **_from_namespace(fleet.gateway.proxy_namespace),
        "podSelector": {"matchLabels": dict(ENVOY_PROXY_LABELS)},
    }
    return _policy(
        tenant,
        name,
        {
            "podSelector": pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": port}]}],
        },
    )


def gateway_policy(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    """``allow-gateway``: the gateway reaches the model servers; on Cilium the tenant's key is
    checked here too (``gitops.render.gateway``)."""
    key = [
        {
            "headerMatches": [
                {
                    "name": API_KEY_HEADER,
                    "secret": {"namespace": tenant.slug, "name": API_KEY_SECRET},
                }
            ]
        }
    ]
    return _from_gateway(tenant, fleet, "allow-gateway", _MODEL_SERVERS, MODEL_SERVER_PORT, key)


VCLUSTER_PODS = {"matchLabels": {"app": "vcluster"}}
# The host API server's ports (443 through the kubernetes Service, 6443 on the endpoints).
API_SERVER_PORTS = (443, 6443)
# kustomize-controller's pods (fluxcd/kustomize-controller config/manager/deployment.yaml).
KUSTOMIZE_CONTROLLER = {"matchLabels": {"app": "kustomize-controller"}}


def vcluster_api_policy(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any] | None:
    """``allow-vcluster-api``: the gateway's TLS passthrough reaches the tenant clusters' API
    servers (only when the fleet exposes them, ``vcluster_api_domain``)."""
    if not tenant.clusters or not fleet.vcluster_api_domain:
        return None
    return _from_gateway(
        tenant, fleet, "allow-vcluster-api", VCLUSTER_PODS, vcluster.API_SERVER_PORT
    )


def vcluster_control_plane_policy(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any] | None:
    """``allow-vcluster-control-plane`` (see the module docstring)."""
    if not tenant.clusters:
        return None
    pods = {
        "matchLabels": dict(VCLUSTER_PODS["matchLabels"]),
        "matchExpressions": [
            {
                "key": "release",
                "operator": "In",
                "values": sorted(cluster.name for cluster in tenant.clusters),
            }
        ],
    }
    blocks: list[dict[str, Any]] = [
        {"ipBlock": {"cidr": cidr}} for cidr in fleet.api_server_cidrs
    ] or [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]
    spec: dict[str, Any] = {
        "podSelector": pods,
        "policyTypes": ["Egress"],
        "egress": [
            {
                "to": blocks,
                "ports": [{"protocol": "TCP", "port": port} for port in API_SERVER_PORTS],
            }
        ],
    }
    if fleet.cluster_oidc is not None:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["ingress"] = [
            {
                "from": [{**_from_namespace(FLUX_NAMESPACE), "podSelector": KUSTOMIZE_CONTROLLER}],
                "ports": [{"protocol": "TCP", "port": vcluster.API_SERVER_PORT}],
            }
        ]
    return _policy(tenant, "allow-vcluster-control-plane", spec)


# The only Cilium entities a tenant policy admits traffic from (see "Host-network pods").
ADMITTED_ENTITIES = frozenset({"ingress", "host"})


def kubelet_probe_policy(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any] | None:
    """``allow-kubelet-probes``: on Cilium, the pod's own node (``host``), never other nodes
    (``remote-node``), so probes work with ``allow-localhost: policy`` too."""
    if fleet.gateway.implementation != "cilium":
        return None
    return {
        "apiVersion": CILIUM_API,
        "kind": "CiliumNetworkPolicy",
        "metadata": metadata("allow-kubelet-probes", tenant.slug, tenant=tenant.slug),
        "spec": {"endpointSelector": {}, "ingress": [{"fromEntities": ["host"]}]},
    }


DNS_PORTS = ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53})


def dns_egress(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The egress rules of ``allow-dns``."""
    rules: list[dict[str, Any]] = [
        {
            "to": [
                {
                    **_from_namespace("kube-system"),
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [dict(port) for port in DNS_PORTS],
        }
    ]
    if fleet.node_local_dns:
        bits = ipaddress.ip_address(fleet.node_local_dns).max_prefixlen
        rules.append(
            {
                "to": [{"ipBlock": {"cidr": f"{fleet.node_local_dns}/{bits}"}}],
                "ports": [dict(port) for port in DNS_PORTS],
            }
        )
    return rules


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    objs = [
        _policy(tenant, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(
            tenant,
            "allow-dns",
            {"podSelector": {}, "policyTypes": ["Egress"], "egress": dns_egress(fleet)},
        ),
        _policy(
            tenant,
            "allow-same-namespace",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        ),
        gateway_policy(tenant, fleet),
        _policy(
            tenant, "allow-litellm", _model_server_ingress(_from_namespace(fleet.litellm_namespace))
        ),
        _policy(
            tenant,
            "allow-monitoring",
            _model_server_ingress(_from_namespace(fleet.monitoring_namespace)),
        ),
    ]
    if any(endpoint.model_uri.startswith(DOWNLOAD_SCHEMES) for endpoint in tenant.endpoints):
        objs.append(
            _policy(
                tenant,
                "allow-model-download",
                {
                    "podSelector": _MODEL_SERVERS,
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}
                            ],
                            "ports": [{"protocol": "TCP", "port": 443}],
                        }
                    ],
                },
            )
        )
    for optional in (
        kubelet_probe_policy(tenant, fleet),
        vcluster_control_plane_policy(tenant, fleet),
        vcluster_api_policy(tenant, fleet),
    ):
        if optional is not None:
            objs.append(optional)
    return objs
