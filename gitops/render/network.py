"""NetworkPolicies of a tenant namespace: deny by default, then open what the platform needs.

- ``default-deny``: no ingress, no egress;
- ``allow-dns``: egress to kube-dns in kube-system, UDP and TCP 53;
- ``allow-same-namespace``: pods of the namespace talk to each other (a vCluster's control
  plane and its synced pods, a model and its clients);
- ``allow-gateway``: the fleet gateway's namespace reaches model servers on their port, which
  is the only way in from outside the namespace (LiteLLM goes through the gateway too);
- ``allow-monitoring``: Prometheus scrapes model servers' metrics (autoscaling reads them);
- ``allow-model-download``: only when an endpoint loads from ``hf://`` or ``s3://``: model
  server pods (where KServe's storage initializer runs) reach public HTTPS, never private
  ranges or the cloud metadata address.

A vCluster adds policies of its own (``policies.networkPolicy`` in its values) for its control
plane; policies only ever add allowed traffic, so they combine with these.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.specs import FleetSpec, TenantSpec

API = "networking.k8s.io/v1"
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


def _model_server_ingress(namespace: str) -> dict[str, Any]:
    return {
        "podSelector": _MODEL_SERVERS,
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [_from_namespace(namespace)],
                "ports": [{"protocol": "TCP", "port": MODEL_SERVER_PORT}],
            }
        ],
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    objs = [
        _policy(tenant, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(
            tenant,
            "allow-dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                **_from_namespace("kube-system"),
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [
                            {"protocol": "UDP", "port": 53},
                            {"protocol": "TCP", "port": 53},
                        ],
                    }
                ],
            },
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
        _policy(tenant, "allow-gateway", _model_server_ingress(fleet.gateway.namespace)),
        _policy(tenant, "allow-monitoring", _model_server_ingress(fleet.monitoring_namespace)),
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
    return objs
