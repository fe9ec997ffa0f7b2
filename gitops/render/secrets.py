"""Model-download credentials: an External Secrets ``ExternalSecret``
(``external-secrets.io/v1``) in each tenant's namespace, platform-owned.

Gated Hugging Face models and private S3 buckets need credentials in KServe's storage
initializer. The fleet's ``secret_store`` names a ClusterSecretStore the operator configures
(Vault, AWS Secrets Manager, ...); each tenant's ExternalSecret reads the one remote secret
``ai-factory/tenants/<slug>/model-download`` from it and writes every property of it
(``dataFrom.extract``) into the Secret ``model-download-credentials`` of the tenant's
namespace. The properties the storage initializer uses are ``HF_TOKEN`` (read by
``huggingface_hub``; KServe's hint for a gated model is "Set HF_TOKEN", kserve v0.20.0
python/storage/kserve_storage/storage_errors.py) and ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION`` (read with
``os.getenv`` in python/storage/kserve_storage/kserve_storage.py); the ClusterStorageContainer
(``gitops.render.kserve``) maps them to environment variables, each optional, so a tenant
without credentials still downloads public models.

Why a ClusterSecretStore here although the isolation check refuses one in tenant-owned files:
the ExternalSecret is platform-owned and names only the tenant's own remote key; the check
holds platform-owned ExternalSecrets to keys under ``ai-factory/tenants/<slug>/``
(``gitops.checks.isolation``). With no ``secret_store`` nothing is rendered and the operator
may create the Secret by hand.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.specs import FleetSpec, TenantSpec

API = "external-secrets.io/v1"
SECRET = "model-download-credentials"
REMOTE_PREFIX = "ai-factory/tenants/"
# The variables the storage initializer reads (see the module docstring).
ENV_KEYS = (
    "HF_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
)
REFRESH_INTERVAL = "1h"


def remote_prefix(slug: str) -> str:
    """Every remote key a tenant's platform-owned ExternalSecret may read starts with this."""
    return f"{REMOTE_PREFIX}{slug}/"


def remote_key(slug: str) -> str:
    return f"{remote_prefix(slug)}model-download"


def model_download_secret(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ExternalSecret",
        "metadata": metadata(SECRET, tenant.slug, tenant=tenant.slug),
        "spec": {
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": fleet.secret_store},
            "refreshInterval": REFRESH_INTERVAL,
            "target": {"name": SECRET, "creationPolicy": "Owner"},
            "dataFrom": [{"extract": {"key": remote_key(tenant.slug)}}],
        },
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    return [model_download_secret(tenant, fleet)] if fleet.secret_store else []
