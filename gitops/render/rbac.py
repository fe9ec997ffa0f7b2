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

from gitops.render.flux import TENANT_SOURCE_SECRET
from gitops.render.gateway import API_KEY_SECRET
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


PORTAL_ACCESS_ROLE = "ai-factory-portal"
# The Secrets the portal writes into every tenant namespace through the Kubernetes API: the
# tenant's Git credentials and its gateway key (never in Git).
PORTAL_WRITTEN_SECRETS = (TENANT_SOURCE_SECRET, API_KEY_SECRET)


def portal_access_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """What the portal's service account may do in the tenant's namespace, and nothing
    outside it: ``get``/``update``/``delete`` exactly the Secrets it writes, ``create`` Secrets
    (RBAC cannot limit create to a name, and create gives no read access), and ``get`` the
    kubeconfig Secrets of the tenant's clusters to hand them to its members. RBAC names are
    exact, never patterns. Bound here, per tenant, instead of a cluster-wide grant."""
    kubeconfigs = sorted(kubeconfig_secret(cluster) for cluster in tenant.clusters)
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "update", "delete"],
            "resourceNames": sorted(PORTAL_WRITTEN_SECRETS),
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    if kubeconfigs:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": kubeconfigs,
            }
        )
    role = {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": metadata(PORTAL_ACCESS_ROLE, tenant.slug, tenant=tenant.slug),
        "rules": rules,
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": metadata(PORTAL_ACCESS_ROLE, tenant.slug, tenant=tenant.slug),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": PORTAL_ACCESS_ROLE,
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
