"""The namespace's hard limits: a ResourceQuota summed from the tenant's shares, a LimitRange.

The quota is the ceiling that holds whatever happens in Kueue (borrowing, pods that skip the
queue): CPU, memory and pod count from the tenant spec, and every GPU resource the fleet offers
(0 where the tenant has no share; see ``gitops.render.resources``). HAMi's scheduler reads the
``limits.nvidia.com/gpumem|gpucores`` keys itself; DRA devices are counted per DeviceClass.

The LimitRange gives containers that set nothing a small default, so a quota on
``requests.cpu`` does not reject them, and caps one container at the namespace budget.
"""

from __future__ import annotations

from typing import Any

from gitops.render import resources
from gitops.render.meta import metadata
from gitops.specs import FleetSpec, TenantSpec

QUOTA_NAME = "tenant-quota"
LIMIT_RANGE_NAME = "tenant-limits"
DEFAULT_LIMIT = {"cpu": "1"}
DEFAULT_REQUEST = {"cpu": "250m", "memory": "512Mi"}


def hard_limits(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, int]:
    """GPU quota keys and their totals (every fleet key, 0 when the tenant has none)."""
    hard = dict.fromkeys(resources.fleet_quota_keys(fleet), 0)
    for share in tenant.shares:
        for key, amount in resources.quota_usage(share).items():
            hard[key] = hard.get(key, 0) + amount
    return hard


def resource_quota(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    hard = {
        "requests.cpu": str(tenant.cpu_quota),
        "requests.memory": f"{tenant.memory_gib}Gi",
        "count/pods": str(tenant.max_pods),
    }
    hard.update({key: str(amount) for key, amount in hard_limits(tenant, fleet).items()})
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, tenant.slug, tenant=tenant.slug),
        "spec": {"hard": hard},
    }


def limit_range(tenant: TenantSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata(LIMIT_RANGE_NAME, tenant.slug, tenant=tenant.slug),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    # A default above the max would make the API server reject the object.
                    "default": {
                        **DEFAULT_LIMIT,
                        "memory": "2Gi" if tenant.memory_gib >= 2 else "1Gi",
                    },
                    "defaultRequest": dict(DEFAULT_REQUEST),
                    "max": {"cpu": str(tenant.cpu_quota), "memory": f"{tenant.memory_gib}Gi"},
                }
            ]
        },
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    return [resource_quota(tenant, fleet), limit_range(tenant)]
