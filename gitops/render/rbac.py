"""RBAC for Flux impersonation: what a tenant's own Kustomization may apply.

As in flux2-multi-tenancy, the tenant's Kustomization runs as the service account ``<slug>``
in its namespace, bound by a RoleBinding ``gotk-reconciler`` (the legacy impersonation user
``gotk:<ns>:reconciler`` is bound too). The reference binds ``cluster-admin``; so would the
built-in ``admin`` role, in effect, for what matters here: both let the account write
NetworkPolicies (opening the namespace), RoleBindings, and, through aggregated roles, Kyverno
Policies, all of which the platform renders in the same namespace.

The binding therefore refers to ``ai-factory:tenant-reconciler``, a ClusterRole (rendered in
``infrastructure/configs``) that lists exactly the kinds a tenant's ``workloads/`` directory
holds: model endpoints, routes, GPU claims, config and the workload controllers Kueue queues.
A merged tenant file that reaches for anything else fails to apply, on top of the isolation
checks that reject it before merge.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import FLUX_TENANT_LABEL, metadata
from gitops.render.vcluster import kubeconfig_secret
from gitops.specs import FleetSpec, TenantSpec

RBAC_API = "rbac.authorization.k8s.io/v1"
TENANT_RECONCILER_ROLE = "ai-factory:tenant-reconciler"
ROLE_BINDING = "gotk-reconciler"
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
# (API group, resources) a tenant's workloads/ may contain.
TENANT_RESOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("configmaps", "persistentvolumeclaims", "serviceaccounts", "services")),
    ("apps", ("deployments", "statefulsets")),
    ("batch", ("cronjobs", "jobs")),
    ("gateway.networking.k8s.io", ("httproutes",)),
    ("jobset.x-k8s.io", ("jobsets",)),
    ("policy", ("poddisruptionbudgets",)),
    ("resource.k8s.io", ("resourceclaims", "resourceclaimtemplates")),
    ("serving.kserve.io", ("inferenceservices",)),
)


def tenant_reconciler_role() -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(TENANT_RECONCILER_ROLE),
        "rules": [
            {"apiGroups": [group], "resources": list(names), "verbs": list(_WRITE)}
            for group, names in TENANT_RESOURCES
        ],
    }


def service_account(tenant: TenantSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(
            tenant.slug,
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={FLUX_TENANT_LABEL: tenant.slug},
        ),
    }


def role_binding(tenant: TenantSpec) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": metadata(
            ROLE_BINDING,
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={FLUX_TENANT_LABEL: tenant.slug},
        ),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": TENANT_RECONCILER_ROLE,
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": f"gotk:{tenant.slug}:reconciler",
            },
            {"kind": "ServiceAccount", "name": tenant.slug, "namespace": tenant.slug},
        ],
    }


def tenant_objects(tenant: TenantSpec) -> list[dict[str, Any]]:
    return [service_account(tenant), role_binding(tenant)]


PORTAL_KUBECONFIG_ROLE = "ai-factory-portal-kubeconfigs"


def portal_kubeconfig_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """Let the portal hand out the tenant's vCluster kubeconfigs to its members: ``get`` on
    exactly those Secrets (RBAC names are exact, never patterns), nothing else in the
    namespace. Rendered only while the tenant has clusters."""
    if not tenant.clusters:
        return []
    names = sorted(kubeconfig_secret(cluster) for cluster in tenant.clusters)
    role = {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": metadata(PORTAL_KUBECONFIG_ROLE, tenant.slug, tenant=tenant.slug),
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": names}
        ],
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": metadata(PORTAL_KUBECONFIG_ROLE, tenant.slug, tenant=tenant.slug),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": PORTAL_KUBECONFIG_ROLE,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": fleet.portal_service_account,
                "namespace": fleet.portal_namespace,
            }
        ],
    }
    return [role, binding]
