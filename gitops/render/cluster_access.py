"""Who may use a tenant's clusters: each member, bound in every virtual cluster of the tenant by
the identity the platform's identity provider gives them, with the role the portal gives them.

Rendered only when the fleet sets ``cluster_oidc``. How it works, each point read from upstream
at the versions the portal pins (vCluster chart 0.35.3, Flux 2.9 / kustomize-controller 1.9):

- **Authentication.** The virtual API server trusts the provider through
  ``controlPlane.distro.k8s.apiServer.extraArgs``: vCluster's k8s distro merges them into the
  kube-apiserver command line (loft-sh/vcluster ``pkg/k8s/k8s.go``, ``command.MergeArgs``), and
  its proxy, which is what the gateway and the Service reach, authenticates bearer tokens with a
  TokenReview against that API server (``pkg/server/server.go``, ``delegatingauthenticator``).
  So an ID token issued to ``cluster_oidc.client_id`` is a user ``oidc:<claim>``. The prefix
  keeps those names away from ``system:`` users and service accounts, whatever the provider
  puts in the claim; groups, when passed at all, get the same prefix, so no provider group can
  be ``system:masters``.
- **Authorisation.** One ClusterRoleBinding per member and virtual cluster: admin ->
  ``cluster-admin``, member -> ``edit``, viewer -> ``view`` (the built-in roles). The role is
  part of the binding's name because ``roleRef`` cannot be changed in place (the API server
  refuses it): a new role is a new binding, and the old one is pruned.
- **Delivery, without restarting the cluster.** The bindings are files under
  ``tenants/<slug>/cluster-access/<cluster>/``, applied into the virtual cluster by a Flux
  Kustomization in the tenant's namespace whose ``spec.kubeConfig`` names the kubeconfig Secret
  vCluster exports; with ``prune`` a removed member's binding is deleted at the next reconcile.
  The chart's own ``experimental.deploy.vcluster.manifests`` was not used for them: every change
  of the release's values changes the pod template's ``vClusterConfigHash`` annotation (a hash
  of all values, ``chart/templates/_vclusterconfighash.tpl``), so each membership change would
  roll the control plane's StatefulSet and take the tenant's API server down, and the manifests
  are applied only when the control plane starts (``pkg/controllers/deploy/start.go``).
- **The Kustomization's identity inside the virtual cluster.** kustomize-controller uses the
  kubeconfig's credentials (the admin certificate, which never leaves the platform) to act as
  ``system:serviceaccount:<namespace>:<serviceAccountName>``, or the lockdown's default account
  (fluxcd/pkg ``runtime/client/impersonator.go``, ``setImpersonationConfig``). That identity is
  bound once, when the cluster starts, through ``experimental.deploy.vcluster.manifests``: a
  role that may manage ClusterRoleBindings and bind exactly the three roles above. These
  manifests depend on the tenant alone, so they change only with the fleet setting.
  The name given, ``cluster-access:platform``, is one no service account can have (it holds a
  colon): the built-in ``edit`` role members get lets them impersonate *any service account*,
  and as the reconciler a removed member could have left a binding of their own behind. The
  API server impersonates a name that does not split into namespace and service account as a
  plain user (k8s.io/apiserver ``filters/impersonation.go``, ``serviceaccount.SplitUsername``),
  which needs ``impersonate`` on ``users``: nobody but ``cluster-admin`` has that.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gitops.render.meta import FLUX_TENANT_LABEL, kustomization, metadata
from gitops.render.yamlio import dump_documents
from gitops.specs import ClusterMember, ClusterOidc, FleetSpec, TenantSpec

RBAC_API = "rbac.authorization.k8s.io/v1"
RBAC_GROUP = "rbac.authorization.k8s.io"
FLUX_KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
# kube-apiserver --oidc-username-prefix / --oidc-groups-prefix.
USERNAME_PREFIX = "oidc:"
GROUPS_PREFIX = "oidc:"
# The portal role -> the built-in ClusterRole a member gets in the tenant's virtual clusters.
CLUSTER_ROLES = {"admin": "cluster-admin", "member": "edit", "viewer": "view"}
# Narrowest first: a change that only moves people down this list (or out) takes access away.
ROLE_ORDER = ("view", "edit", "cluster-admin")
# Where a tenant's bindings live, one directory per cluster, outside what the tenant's own
# Kustomizations build on the host.
ACCESS_DIR = "cluster-access"
BINDINGS_FILE = "bindings.yaml"
# The service account name kustomize-controller impersonates inside the virtual cluster: not a
# valid service account name on purpose (see the module's docstring).
RECONCILER = "cluster-access:platform"
RECONCILER_ROLE = "ai-factory:cluster-access"
BINDING_PREFIX = "ai-factory:"
MEMBER_ANNOTATION = "ai-factory.io/member"


def normalise_issuer(url: str) -> str:
    """Issuer URLs compared as the portal and the API server would both accept them."""
    return url.rstrip("/")


def api_server_args(oidc: ClusterOidc) -> list[str]:
    """The kube-apiserver flags that make it accept the provider's ID tokens."""
    args = [
        f"--oidc-issuer-url={oidc.issuer_url}",
        f"--oidc-client-id={oidc.client_id}",
        f"--oidc-username-claim={oidc.username_claim}",
        f"--oidc-username-prefix={USERNAME_PREFIX}",
    ]
    if oidc.groups_claim:
        args += [
            f"--oidc-groups-claim={oidc.groups_claim}",
            f"--oidc-groups-prefix={GROUPS_PREFIX}",
        ]
    return args


def cluster_user(member: ClusterMember, oidc: ClusterOidc) -> str | None:
    """The user name the virtual API server gives this member's ID tokens, or None when the
    member has no identity at this issuer (never signed in through it, or, for ``email``, no
    address the provider called verified)."""
    if normalise_issuer(member.issuer) != normalise_issuer(oidc.issuer_url):
        return None
    claim = member.subject if oidc.username_claim == "sub" else member.email
    return f"{USERNAME_PREFIX}{claim}" if claim else None


def member_bindings(tenant: TenantSpec, oidc: ClusterOidc) -> list[dict[str, Any]]:
    """One ClusterRoleBinding per member with an identity, in a stable order."""
    bindings = []
    for member in tenant.members:
        user = cluster_user(member, oidc)
        if user is None:
            continue
        role = CLUSTER_ROLES[member.role]
        digest = hashlib.sha256(user.encode("utf-8")).hexdigest()[:16]
        bindings.append(
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRoleBinding",
                "metadata": metadata(
                    f"{BINDING_PREFIX}{role}:{digest}",
                    tenant=tenant.slug,
                    annotations={MEMBER_ANNOTATION: member.name},
                ),
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
            }
        )
    return sorted(bindings, key=lambda b: str(b["metadata"]["name"]))


def reconciler_user(tenant: TenantSpec) -> str:
    """Who kustomize-controller is inside the tenant's virtual clusters."""
    return f"system:serviceaccount:{tenant.slug}:{RECONCILER}"


def bootstrap_objects(tenant: TenantSpec) -> list[dict[str, Any]]:
    """What the virtual cluster holds from its first start: the right of the Flux reconciler's
    identity to manage the member bindings, and no more (``bind`` names the three roles)."""
    role = {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(RECONCILER_ROLE, tenant=tenant.slug),
        "rules": [
            {
                "apiGroups": [RBAC_GROUP],
                "resources": ["clusterrolebindings"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
            {
                "apiGroups": [RBAC_GROUP],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": sorted(CLUSTER_ROLES.values()),
            },
        ],
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": metadata(RECONCILER_ROLE, tenant=tenant.slug),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": RECONCILER_ROLE},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": reconciler_user(tenant)}],
    }
    return [role, binding]


def bootstrap_manifests(tenant: TenantSpec) -> str:
    """``bootstrap_objects`` as the multi-document text the chart value takes."""
    return dump_documents(bootstrap_objects(tenant)).decode("utf-8")


def access_path(tenant: TenantSpec, cluster_name: str) -> str:
    return f"tenants/{tenant.slug}/{ACCESS_DIR}/{cluster_name}"


def access_kustomization(
    cluster_name: str, tenant: TenantSpec, kubeconfig_secret: str
) -> dict[str, Any]:
    """The Flux Kustomization, in the tenant's namespace, that applies the cluster's bindings
    into the virtual cluster. It reads the tenant's own projection repository (the only source
    in that namespace; it holds ``cluster-access/`` too) and, deleted, leaves the virtual
    cluster alone (``Orphan``): it goes with the cluster, whose API server goes too."""
    return {
        "apiVersion": FLUX_KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": metadata(
            f"{cluster_name}-access",
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={FLUX_TENANT_LABEL: tenant.slug},
        ),
        "spec": {
            "interval": "10m0s",
            "retryInterval": "1m0s",
            "timeout": "5m0s",
            "path": f"./{access_path(tenant, cluster_name)}",
            "prune": True,
            "deletionPolicy": "Orphan",
            "sourceRef": {"kind": "GitRepository", "name": tenant.slug},
            "serviceAccountName": RECONCILER,
            "kubeConfig": {"secretRef": {"name": kubeconfig_secret, "key": "config"}},
        },
    }


def access_files(
    tenant: TenantSpec, cluster_names: list[str], fleet: FleetSpec
) -> list[tuple[str, list[dict[str, Any]]]]:
    """(path under ``tenants/<slug>/``, objects) of each cluster's access directory; none
    without ``cluster_oidc``. The bindings file is there even with no bindings, so the
    directory builds the same way whoever is in it."""
    if fleet.cluster_oidc is None:
        return []
    bindings = member_bindings(tenant, fleet.cluster_oidc)
    entries: list[tuple[str, list[dict[str, Any]]]] = []
    for name in sorted(cluster_names):
        entries.append((f"{ACCESS_DIR}/{name}/{BINDINGS_FILE}", bindings))
        entries.append(
            (f"{ACCESS_DIR}/{name}/kustomization.yaml", [kustomization([BINDINGS_FILE])])
        )
    return entries
