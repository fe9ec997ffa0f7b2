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


# --- batch jobs, submitted by the portal as a tenant service account ------------------------
#
# The portal submits a tenant's batch jobs to the API server impersonating a service account
# of the tenant's namespace, chosen by the member's role (``catalog.jobs``): RBAC, admission
# (Kueue's, Kyverno's, Pod Security) and the API server's audit log then see a tenant identity,
# not the portal. The portal's own account may impersonate exactly these two accounts of each
# tenant (a Role here, per namespace) and nothing else: no user, no group, so neither
# ``system:masters`` nor another tenant's identity. Who the member was travels as a user extra,
# ``ai-factory.io/member``, which the audit log records with the impersonated user; RBAC and
# admission never read it (``gitops.render.portal`` grants it cluster-wide).
#
# k8s.io/apiserver ``pkg/endpoints/filters/impersonation.go`` (v0.34.x), ``WithImpersonation``
# and ``buildImpersonationRequests``: an ``Impersonate-User`` that splits as
# ``system:serviceaccount:<ns>:<name>`` is checked as ``impersonate`` on ``serviceaccounts``
# named ``<name>`` *in namespace* ``<ns>`` (so a Role there can grant it), and without any
# ``Impersonate-Group`` the account gets ``system:serviceaccounts`` and
# ``system:serviceaccounts:<ns>`` (``serviceaccount.MakeGroupNames``) plus
# ``system:authenticated``. Sending groups would need ``impersonate`` on ``groups``, which is
# exactly the grant this design removes; so the portal sends none.

JOB_RUNNER_ROLE = "ai-factory:job-runner"
JOB_READER_ROLE = "ai-factory:job-reader"
JOB_RUNNERS_BINDING = "ai-factory:job-runners"
JOB_READERS_BINDING = "ai-factory:job-readers"
JOB_RUNNER_ACCOUNT = "ai-factory-job-runner"
JOB_READER_ACCOUNT = "ai-factory-job-reader"
JOB_ACCOUNTS = (JOB_RUNNER_ACCOUNT, JOB_READER_ACCOUNT)
PORTAL_IMPERSONATION_ROLE = "ai-factory-portal-jobs"
# The user extra that names the member (lower case: the API server lowercases the header's
# key before it checks or records it).
MEMBER_EXTRA = "ai-factory.io/member"
# Tenant roles that run jobs, and those that only read them (tenants.access RUN_JOB, VIEW).
RUNNER_ROLES = ("admin", "member")
READER_ROLES = ("viewer",)
_READ = ["get", "list", "watch"]


def job_account(role: str) -> str:
    """The tenant service account the portal acts as for a member holding ``role``."""
    if role in RUNNER_ROLES:
        return JOB_RUNNER_ACCOUNT
    if role in READER_ROLES:
        return JOB_READER_ACCOUNT
    raise ValueError(f"{role!r} is not a tenant role")


def job_account_user(slug: str, role: str) -> str:
    """The user name of ``job_account(role)`` in tenant ``slug``'s namespace, as the API
    server authenticates (and the portal impersonates) it."""
    return f"system:serviceaccount:{slug}:{job_account(role)}"


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


def job_accounts(tenant: TenantSpec) -> list[dict[str, Any]]:
    """The two identities the portal acts as in the tenant's namespace. No pod runs as them
    (no token is mounted, and the isolation check refuses a tenant pod naming them): the
    API server authenticates them only through the portal's impersonation."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(name, tenant.slug, tenant=tenant.slug),
            "automountServiceAccountToken": False,
        }
        for name in JOB_ACCOUNTS
    ]


def job_bindings(tenant: TenantSpec) -> list[dict[str, Any]]:
    """The tenant's job accounts bound to the job roles in its namespace, and nowhere else."""
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
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": tenant.slug}],
        }
        for name, role, account in (
            (JOB_RUNNERS_BINDING, JOB_RUNNER_ROLE, JOB_RUNNER_ACCOUNT),
            (JOB_READERS_BINDING, JOB_READER_ROLE, JOB_READER_ACCOUNT),
        )
    ]


def portal_impersonation_rule() -> dict[str, Any]:
    """The one impersonation grant a tenant directory may hold (``gitops.checks.isolation``
    refuses any other): the job accounts by name, never the tenant's Flux account or one a
    tenant created."""
    return {
        "apiGroups": [""],
        "resources": ["serviceaccounts"],
        "verbs": ["impersonate"],
        "resourceNames": list(JOB_ACCOUNTS),
    }


def portal_impersonation_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """The portal's service account may impersonate the tenant's job accounts: a Role of the
    tenant's namespace, as the API server checks a service account's impersonation in the
    account's namespace (see above)."""
    role = {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": metadata(PORTAL_IMPERSONATION_ROLE, tenant.slug, tenant=tenant.slug),
        "rules": [portal_impersonation_rule()],
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": metadata(PORTAL_IMPERSONATION_ROLE, tenant.slug, tenant=tenant.slug),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": PORTAL_IMPERSONATION_ROLE,
        },
        "subjects": [_portal_subject(fleet)],
    }
    return [role, binding]


def _portal_subject(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "kind": "ServiceAccount",
        "name": fleet.portal_service_account,
        "namespace": fleet.portal_namespace,
    }


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    return [
        service_account(tenant),
        role_binding(tenant),
        *job_accounts(tenant),
        *job_bindings(tenant),
        *portal_impersonation_objects(tenant, fleet),
    ]


PORTAL_ACCESS_ROLE = "ai-factory-portal"
# The Secrets the portal writes into every tenant namespace through the Kubernetes API: the
# tenant's Git credentials and its gateway key (never in Git).
PORTAL_WRITTEN_SECRETS = (TENANT_SOURCE_SECRET, API_KEY_SECRET)


def portal_access_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """What the portal's service account may do in the tenant's namespace, and nothing
    outside it: ``get``/``update``/``delete`` exactly the Secrets it writes, ``create`` Secrets
    (RBAC cannot limit create to a name, and create gives no read access), and ``get`` the
    kubeconfig Secrets of the tenant's clusters to hand them to its members; with a cluster,
    ``delete`` pods (a sleeping cluster's, ``fleet.sleep``). RBAC names are exact, never
    patterns. Bound here, per tenant, instead of a cluster-wide grant."""
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
        # A sleeping cluster's synced pods are deleted as ``vcluster pause`` does (fleet.sleep;
        # the pods are read under the ClusterRole's cluster-wide get/list). RBAC cannot name
        # them by label, so: delete on pods, in the namespaces of tenants with a cluster only.
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]})
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
        "subjects": [_portal_subject(fleet)],
    }
    return [role, binding]
