"""The LiteLLM route for an exposed endpoint, as a ConfigMap in the tenant's namespace.

LiteLLM's ``model_list`` is the proxy's own configuration, so the tenant cannot edit it; each
exposed endpoint instead carries a ConfigMap labelled ``ai-factory.io/litellm-model: "true"``
with one ``model_list`` entry under the key ``model_list.yaml``, and the platform's collector in
the LiteLLM namespace merges them. Clients ask for ``<slug>/<endpoint>``; LiteLLM calls the
endpoint through the gateway with the ``hosted_vllm`` provider, which appends
``/chat/completions`` to ``api_base`` (``.../<slug>/<endpoint>/v1``).
"""

from __future__ import annotations

from typing import Any

from gitops.render.gateway import public_url
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
            "api_base": f"{public_url(tenant, endpoint, fleet)}/v1",
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
