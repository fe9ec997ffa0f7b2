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


# --- batch jobs, submitted by the portal as the member -------------------------------------
#
# The portal submits a tenant's batch jobs to the API server impersonating the member
# (``catalog.jobs``), so RBAC, admission (Kueue's, Kyverno's, Pod Security) and the API
# server's audit log decide and record as that person, not as the portal. The user name is one
# no identity provider can issue: the host's API server gives OIDC users the ``oidc:`` prefix
# (``gitops.render.cluster_access``) and service accounts ``system:serviceaccount:``, so
# ``ai-factory:member:<username>`` can only be the portal's doing. It is not the member's OIDC
# identity: members with local accounts have none, and the host cluster need not trust the
# portal's provider at all. What the person may do comes from a group per tenant and role,
# bound here in the tenant's namespace only.

MEMBER_USER_PREFIX = "ai-factory:member:"
JOB_RUNNER_ROLE = "ai-factory:job-runner"
JOB_READER_ROLE = "ai-factory:job-reader"
JOB_RUNNERS_BINDING = "ai-factory:job-runners"
JOB_READERS_BINDING = "ai-factory:job-readers"
# Tenant roles that run jobs, and those that only read them (tenants.access RUN_JOB, VIEW).
RUNNER_ROLES = ("admin", "member")
READER_ROLES = ("viewer",)
_READ = ["get", "list", "watch"]


def member_user(username: str) -> str:
    """The user the portal impersonates for ``username`` (see above)."""
    return f"{MEMBER_USER_PREFIX}{username}"


def tenant_group(slug: str, role: str) -> str:
    """The group of ``role`` holders of tenant ``slug``, as the portal impersonates it."""
    return f"ai-factory:tenant:{slug}:{role}"


def job_roles() -> list[dict[str, Any]]:
    """What a job runner and a job reader may do in a tenant namespace they are bound in: the
    runner creates, reads and deletes Jobs and JobSets, the reader only reads them; both read
    their pods, the pods' logs and Kueue's Workloads (status and queue position)."""
    reads: list[dict[str, Any]] = [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": list(_READ)},
    ]
    runner = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*_READ, "create", "delete"]},
        {
            "apiGroups": ["jobset.x-k8s.io"],
            "resources": ["jobsets"],
            "verbs": [*_READ, "create", "delete"],
        },
        *reads,
    ]
    reader = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": list(_READ)},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": list(_READ)},
        *reads,
    ]
    return [
        {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": metadata(name), "rules": rules}
        for name, rules in ((JOB_RUNNER_ROLE, runner), (JOB_READER_ROLE, reader))
    ]


def job_bindings(tenant: TenantSpec) -> list[dict[str, Any]]:
    """The tenant's groups bound to the job roles in its namespace, and nowhere else."""
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": metadata(name, tenant.slug, tenant=tenant.slug),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Group",
                    "name": tenant_group(tenant.slug, held),
                }
                for held in roles
            ],
        }
        for name, role, roles in (
            (JOB_RUNNERS_BINDING, JOB_RUNNER_ROLE, RUNNER_ROLES),
            (JOB_READERS_BINDING, JOB_READER_ROLE, READER_ROLES),
        )
    ]


def tenant_objects(tenant: TenantSpec) -> list[dict[str, Any]]:
    return [service_account(tenant), role_binding(tenant), *job_bindings(tenant)]


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
