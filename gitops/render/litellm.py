"""The LiteLLM route for an exposed endpoint, as a ConfigMap in the tenant's namespace.

Each exposed endpoint has a ConfigMap labelled ``ai-factory.io/litellm-model: "true"`` with one
``model_list`` entry under the key ``model_list.yaml``; the platform's collector in the LiteLLM
namespace merges them into the proxy's configuration. That configuration is powerful: LiteLLM
sends requests (and the prompts in them) to whatever ``api_base`` says, and it replaces any
value written ``os.environ/NAME`` with the proxy's own environment variable, its secrets
included (LiteLLM docs, "Proxy Config.yaml", https://docs.litellm.ai/docs/proxy/configs).
So the ConfigMaps are platform-owned (``tenants/<slug>/litellm/<endpoint>.yaml``, applied by
the platform, never by the tenant's Flux), the isolation check refuses a labelled ConfigMap in
the tenant's ``workloads/`` and any ``os.environ/`` or foreign ``api_base`` in the platform's,
and a Kyverno ClusterPolicy stops the tenant's own service accounts from writing one.

Clients ask for ``<slug>/<endpoint>``; LiteLLM calls the predictor inside the cluster (its own
virtual keys guard this route, so it does not need the tenant's gateway key) with the
``hosted_vllm`` provider, which appends ``/chat/completions`` to ``api_base``
(``http://<endpoint>-predictor.<slug>.svc.cluster.local/openai/v1``).
"""

from __future__ import annotations

from typing import Any

from gitops.render.gateway import cluster_url
from gitops.render.meta import LITELLM_MODEL_LABEL, metadata
from gitops.render.yamlio import dump_value
from gitops.specs import EndpointSpec, FleetSpec, TenantSpec

DATA_KEY = "model_list.yaml"


def model_name(tenant: TenantSpec, endpoint: EndpointSpec) -> str:
    return f"{tenant.slug}/{endpoint.name}"


def served_name(endpoint: EndpointSpec) -> str:
    return endpoint.served_model_name or endpoint.name


def model_entry(tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "model_name": model_name(tenant, endpoint),
        "litellm_params": {
            "model": f"hosted_vllm/{served_name(endpoint)}",
            "api_base": f"{cluster_url(tenant, endpoint)}/v1",
        },
        "model_info": {"id": model_name(tenant, endpoint)},
    }


def config_map(tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            f"{endpoint.name}-litellm",
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={LITELLM_MODEL_LABEL: "true"},
        ),
        "data": {DATA_KEY: dump_value([model_entry(tenant, endpoint, fleet)])},
    }
