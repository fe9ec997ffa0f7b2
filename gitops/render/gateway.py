"""Gateway API HTTPRoute (``gateway.networking.k8s.io/v1``) that publishes a model endpoint.

The route attaches to the fleet's shared Gateway (a ``parentRef`` into the gateway's namespace
is how Gateway API is meant to be used; the Gateway's ``allowedRoutes`` decides which
namespaces may attach) and sends ``https://<gateway host>/<slug>/<endpoint>/...`` to the
predictor Service, rewriting the prefix to ``/openai`` where KServe serves the OpenAI API. So
``/<slug>/<endpoint>/v1/chat/completions`` reaches ``/openai/v1/chat/completions``. The
backend is in the route's own namespace: no ReferenceGrant is needed.

Model responses stream for minutes, longer than the default timeout of several gateway
implementations, hence the explicit request timeout.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.specs import EndpointSpec, FleetSpec, TenantSpec

API = "gateway.networking.k8s.io/v1"
OPENAI_PREFIX = "/openai"
PREDICTOR_PORT = 80
REQUEST_TIMEOUT = "600s"


def path_prefix(tenant: TenantSpec, endpoint: EndpointSpec) -> str:
    return f"/{tenant.slug}/{endpoint.name}"


def public_url(tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec) -> str:
    """Where clients (and LiteLLM) reach the endpoint; append ``/v1`` for the OpenAI API."""
    return f"https://{fleet.gateway.hostname}{path_prefix(tenant, endpoint)}"


def predictor_service(endpoint: EndpointSpec) -> str:
    # KServe's Service for the predictor in Standard deployment mode.
    return f"{endpoint.name}-predictor"


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
            "hostnames": [fleet.gateway.hostname],
            "rules": [
                {
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": path_prefix(tenant, endpoint)}}
                    ],
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
