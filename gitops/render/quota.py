"""The namespace's hard limits: a ResourceQuota and a LimitRange.

The quota is the ceiling that holds whatever happens in Kueue: CPU, memory, pods and storage
from the tenant spec, no Services of type LoadBalancer or NodePort (tenants are reached through
the fleet gateway only), and every GPU resource the fleet offers (see
``gitops.render.resources``). The GPU keys are what Kueue may admit for the tenant's
ClusterQueue, nominal quota *plus borrowing* (``gitops.render.kueue.admissible``): a quota at
the nominal amount would let Kueue admit a borrowing workload whose pods the API server then
refuses. Keys the tenant can never be admitted are 0, since an extended resource missing from
a quota is unlimited. HAMi's scheduler reads the ``limits.nvidia.com/gpumem|gpucores`` keys
itself; DRA devices are counted per DeviceClass.

The ResourceQuota admission plugin makes every new container state the cpu and memory it
quotas, and only those (kubernetes pkg/quota/v1/evaluator/core/pods.go ``validationSet``): a
container without ``ephemeral-storage`` is admitted and counts 0. So the LimitRange gives
containers that set nothing a small default request for cpu, memory and ephemeral storage,
so that they pass and are counted, and caps one container at the namespace budget. It sets no
default ephemeral-storage *limit*: the kubelet evicts a pod whose emptyDir use exceeds the sum
of its containers' limits, and KServe downloads a model into an emptyDir.

The default cpu and memory *limits* are that same cap. LimitRanger needs a limit on every
container once ``max`` is set ("Maximum cpu usage per Container is ... No limit is specified",
kubernetes plugin/pkg/admission/limitranger/admission.go ``maxConstraint``), and fills a missing
one from ``default`` whatever the container requests; a default below a request then makes the
pod invalid ("must be less than or equal to cpu limit", pkg/apis/core/validation
``ValidateResourceRequirements``). A small default (it was 1 CPU and 2Gi) refused every ordinary
pod asking for more without a limit, and held the vCluster control plane of the ``large`` size
to 1 CPU. With the cap as the default a container without a limit may use up to the budget,
which is what "no limit" means inside a namespace whose requests the quota bounds.
"""

from __future__ import annotations

from typing import Any

from gitops.render import kueue, resources
from gitops.render.meta import metadata
from gitops.specs import FleetSpec, TenantSpec

QUOTA_NAME = "tenant-quota"
LIMIT_RANGE_NAME = "tenant-limits"
DEFAULT_REQUEST = {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
# Kinds of Service a tenant may not create: they would open node ports or an external address
# next to the fleet gateway.
FORBIDDEN_SERVICES = ("services.loadbalancers", "services.nodeports")


def hard_limits(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, int]:
    """GPU quota keys and their totals (every fleet key, 0 when the tenant has none)."""
    hard = dict.fromkeys(resources.fleet_quota_keys(fleet), 0)
    for name, amount in kueue.admissible(tenant, fleet).items():
        for key in resources.quota_keys(name):
            hard[key] = hard.get(key, 0) + amount
    return hard


def resource_quota(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    hard = {
        "requests.cpu": str(tenant.cpu_quota),
        "requests.memory": f"{tenant.memory_gib}Gi",
        "requests.ephemeral-storage": f"{tenant.ephemeral_storage_gib}Gi",
        "limits.ephemeral-storage": f"{tenant.ephemeral_storage_gib}Gi",
        "requests.storage": f"{tenant.storage_gib}Gi",
        "count/pods": str(tenant.max_pods),
        **dict.fromkeys(FORBIDDEN_SERVICES, "0"),
    }
    hard.update({key: str(amount) for key, amount in hard_limits(tenant, fleet).items()})
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, tenant.slug, tenant=tenant.slug),
        "spec": {"hard": hard},
    }


def limit_range(tenant: TenantSpec) -> dict[str, Any]:
    cap = {"cpu": str(tenant.cpu_quota), "memory": f"{tenant.memory_gib}Gi"}
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata(LIMIT_RANGE_NAME, tenant.slug, tenant=tenant.slug),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    # The default limit is the cap (see the module docstring).
                    "default": dict(cap),
                    "defaultRequest": dict(DEFAULT_REQUEST),
                    "max": dict(cap),
                }
            ]
        },
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    return [resource_quota(tenant, fleet), limit_range(tenant)]
