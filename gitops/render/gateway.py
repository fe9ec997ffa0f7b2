"""Gateway API HTTPRoute (``gateway.networking.k8s.io/v1``) that publishes a model endpoint, and
the per-tenant API key check in front of it.

Every tenant has its own host, ``<slug>.<gateway base domain>``, on the fleet's shared Gateway
(a wildcard listener ``*.<domain>``). A shared host would not isolate tenants: Gateway API gives
the longest matching path prefix precedence across *all* routes attached to a hostname
(HTTPRouteRule "precedence" in the Gateway API spec,
https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule), so tenant B could publish
``/a/model`` and receive tenant A's prompts. Hosts are matched before paths (HTTPRouteSpec
``hostnames``: the route with the most specific matching hostname wins), and the isolation check
and the tenant's Kyverno policy refuse a tenant route whose hostnames are not exactly the
tenant's own; a route with no hostnames would inherit the wildcard and is refused too.

The route sends ``https://<slug>.<domain>/<endpoint>/...`` to the predictor Service, rewriting
the prefix to ``/openai`` where KServe serves the OpenAI API; the backend is in the route's own
namespace, so no ReferenceGrant is needed. Model responses stream for minutes, longer than the
default timeout of several gateway implementations, hence the explicit request timeout.

A request must carry the tenant's key in the ``x-api-key`` header. The key lives only in the
Secret ``gateway-api-key`` of the tenant's namespace, which the portal writes through the
Kubernetes API (never Git), with exactly one entry ``<slug>: <key>``:

- Envoy Gateway: a platform-owned ``SecurityPolicy`` with ``apiKeyAuth`` selecting every HTTPRoute
  labelled with the tenant (``targetSelectors``); the Secret is "an Opaque secret, with each API
  key stored under a key corresponding to the client ID"
  (https://gateway.envoyproxy.io/v1.9/tasks/security/apikey-auth/). ``sanitize`` strips the key
  before the request reaches the model server.
- Cilium: its Gateway has no request authentication, so the check is an L7 rule of the
  ``allow-gateway`` CiliumNetworkPolicy (``gitops.render.network``): ``headerMatches`` with a
  ``secret`` ("The secret must only contain one entry. If the referred secret does not exist
  ... the match will fail", CiliumNetworkPolicy CRD, HeaderMatch), and a mismatch drops the
  request.

The Gateway itself (``infrastructure/configs/gateway.yaml``): one HTTPS listener on port 443
for ``*.<hostname>`` terminating TLS with the wildcard certificate in the Secret
``gateway.tls_secret`` of its namespace. A wildcard listener hostname is a suffix match
("``*.example.com`` would match both ``test.example.com``, and ``foo.test.example.com``",
Gateway API v1.6.1 Gateway CRD, ``listeners.hostname``), so every tenant host is served and
each route's own hostname picks the tenant. Routes may attach only from namespaces carrying the
tenant label (``allowedRoutes.namespaces.from: Selector``), which only the platform sets, and
only HTTPRoutes. With ``gateway.cluster_issuer`` the Gateway carries cert-manager's
``cert-manager.io/cluster-issuer`` annotation, and cert-manager (with its Gateway API support
on) issues the listener's certificate into that Secret.

The GatewayClass follows ``gateway.implementation``: Envoy Gateway's chart installs none, so
the platform renders ``eg`` with Envoy Gateway's controller name
``gateway.envoyproxy.io/gatewayclass-controller`` (envoyproxy/gateway v1.9.0
api/v1alpha1/envoygateway_types.go ``GatewayControllerName``; ``eg`` is the name its
quickstart uses). Cilium creates its own class ``cilium`` (controller
``io.cilium/gateway-controller``) when its Gateway API support is on (cilium
install/kubernetes/cilium/templates/cilium-gateway-api-class.yaml), so none is rendered.
"""

from __future__ import annotations

from typing import Any

from gitops.render import vcluster
from gitops.render.meta import TENANT_LABEL, metadata
from gitops.specs import EndpointSpec, FleetSpec, GatewayImplementation, TenantSpec

API = "gateway.networking.k8s.io/v1"
SECURITY_POLICY_API = "gateway.envoyproxy.io/v1alpha1"
SECURITY_POLICY = "tenant-api-key"
API_KEY_HEADER = "x-api-key"
API_KEY_SECRET = "gateway-api-key"
OPENAI_PREFIX = "/openai"
PREDICTOR_PORT = 80
REQUEST_TIMEOUT = "600s"
CLUSTER_DOMAIN = "svc.cluster.local"
HTTPS_PORT = 443
LISTENER = "tenants-https"
CLUSTER_ISSUER_ANNOTATION = "cert-manager.io/cluster-issuer"
# (GatewayClass name, controllerName) per implementation; see the module docstring.
GATEWAY_CLASSES: dict[GatewayImplementation, tuple[str, str]] = {
    "envoy-gateway": ("eg", "gateway.envoyproxy.io/gatewayclass-controller"),
    "cilium": ("cilium", "io.cilium/gateway-controller"),
}


def tenant_host(slug: str, fleet: FleetSpec) -> str:
    """The tenant's own host on the fleet gateway; its routes may use no other."""
    return f"{slug}.{fleet.gateway.hostname}"


def path_prefix(endpoint: EndpointSpec) -> str:
    return f"/{endpoint.name}"


def public_url(tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec) -> str:
    """Where clients reach the endpoint (with the tenant's key); append ``/v1`` for the
    OpenAI API."""
    return f"https://{tenant_host(tenant.slug, fleet)}{path_prefix(endpoint)}"


def predictor_service(endpoint: EndpointSpec) -> str:
    # KServe's Service for the predictor in Standard deployment mode: ``<isvc>-predictor`` for a
    # predictor without its own name (kserve v0.20.0 pkg/constants/constants.go
    # ``PredictorServiceName``); its in-cluster host is that Service's DNS name in the
    # InferenceService's namespace (ingress/httproute_reconciler.go ``getRawServiceHost``,
    # whose test expects ``test-isvc-predictor.default.svc.cluster.local``).
    return f"{endpoint.name}-predictor"


def cluster_url(tenant: TenantSpec, endpoint: EndpointSpec) -> str:
    """The predictor's OpenAI API base inside the cluster (append ``/v1``): what LiteLLM
    calls, and what pods of the tenant's own namespace may call without a key."""
    # The Service listens on port 80 (PREDICTOR_PORT), so the URL names no port.
    return f"http://{predictor_service(endpoint)}.{tenant.slug}.{CLUSTER_DOMAIN}{OPENAI_PREFIX}"


def http_route(tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "HTTPRoute",
        "metadata": metadata(endpoint.name, tenant.slug, tenant=tenant.slug),
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": fleet.gateway.name,
                    "namespace": fleet.gateway.namespace,
                }
            ],
            "hostnames": [tenant_host(tenant.slug, fleet)],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path_prefix(endpoint)}}],
                    "filters": [
                        {
                            "type": "URLRewrite",
                            "urlRewrite": {
                                "path": {
                                    "type": "ReplacePrefixMatch",
                                    "replacePrefixMatch": OPENAI_PREFIX,
                                }
                            },
                        }
                    ],
                    "backendRefs": [{"name": predictor_service(endpoint), "port": PREDICTOR_PORT}],
                    "timeouts": {"request": REQUEST_TIMEOUT},
                }
            ],
        },
    }


def security_policy(tenant: TenantSpec) -> dict[str, Any]:
    """Envoy Gateway: every route of the tenant needs the tenant's key. Platform-owned, and it
    selects routes by the tenant label, which the isolation check and Kyverno require on every
    tenant route, so a route the tenant adds by hand is covered as well."""
    return {
        "apiVersion": SECURITY_POLICY_API,
        "kind": "SecurityPolicy",
        "metadata": metadata(SECURITY_POLICY, tenant.slug, tenant=tenant.slug),
        "spec": {
            "targetSelectors": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "HTTPRoute",
                    "matchLabels": {TENANT_LABEL: tenant.slug},
                }
            ],
            "apiKeyAuth": {
                "credentialRefs": [{"group": "", "kind": "Secret", "name": API_KEY_SECRET}],
                "extractFrom": [{"headers": [API_KEY_HEADER]}],
                "sanitize": True,
            },
        },
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """Platform-owned gateway objects of the tenant (``gateway-auth.yaml``)."""
    if fleet.gateway.implementation == "envoy-gateway":
        return [security_policy(tenant)]
    return []


def gateway_class_name(fleet: FleetSpec) -> str:
    return GATEWAY_CLASSES[fleet.gateway.implementation][0]


def gateway_class(fleet: FleetSpec) -> dict[str, Any]:
    name, controller = GATEWAY_CLASSES[fleet.gateway.implementation]
    return {
        "apiVersion": API,
        "kind": "GatewayClass",
        "metadata": metadata(name),
        "spec": {"controllerName": controller},
    }


def gateway_namespace(fleet: FleetSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(fleet.gateway.namespace)}


def gateway(fleet: FleetSpec) -> dict[str, Any]:
    """The fleet's shared Gateway (see the module docstring)."""
    ref = fleet.gateway
    annotations = {CLUSTER_ISSUER_ANNOTATION: ref.cluster_issuer} if ref.cluster_issuer else None
    return {
        "apiVersion": API,
        "kind": "Gateway",
        "metadata": metadata(ref.name, ref.namespace, annotations=annotations),
        "spec": {
            "gatewayClassName": gateway_class_name(fleet),
            "listeners": [
                {
                    "name": LISTENER,
                    "protocol": "HTTPS",
                    "port": HTTPS_PORT,
                    "hostname": f"*.{ref.hostname}",
                    "tls": {
                        "mode": "Terminate",
                        "certificateRefs": [
                            {"group": "", "kind": "Secret", "name": ref.tls_secret}
                        ],
                    },
                    "allowedRoutes": {
                        "namespaces": {
                            "from": "Selector",
                            "selector": {
                                "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
                            },
                        },
                        "kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                    },
                },
                *_cluster_api_listeners(fleet),
            ],
        },
    }


def _cluster_api_listeners(fleet: FleetSpec) -> list[dict[str, Any]]:
    """With ``vcluster_api_domain``: TLS passthrough on the same port for tenant clusters' API
    servers, which hold their own certificates (the vCluster chart's TLSRoute attaches here by
    ``sectionName``, see ``gitops.render.vcluster``). Listeners on one port are told apart by
    hostname (SNI), and a TLS and an HTTPS listener may share a port (Gateway API Listener
    ``port`` docs)."""
    if not fleet.vcluster_api_domain:
        return []
    return [
        {
            "name": vcluster.API_LISTENER,
            "protocol": "TLS",
            "port": HTTPS_PORT,
            "hostname": f"*.{fleet.vcluster_api_domain}",
            "tls": {"mode": "Passthrough"},
            "allowedRoutes": {
                "namespaces": {
                    "from": "Selector",
                    "selector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]},
                },
                "kinds": [{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}],
            },
        }
    ]


def fleet_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """``infrastructure/configs/gateway.yaml``: namespace, class (Envoy Gateway), Gateway."""
    objs = [gateway_namespace(fleet)]
    if fleet.gateway.implementation == "envoy-gateway":
        objs.append(gateway_class(fleet))
    objs.append(gateway(fleet))
    return objs
