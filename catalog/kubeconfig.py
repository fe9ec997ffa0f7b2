"""A member's kubeconfig for a running tenant cluster: the cluster's address and CA, and a
kubectl credential plugin (kubelogin) that signs the person in at the identity provider.

There is no credential in it: kubectl runs ``kubectl oidc-login get-token``, which signs in
through the browser and hands kubectl the ID token the provider issues to the fleet's cluster
client (``cluster_oidc``); the virtual API server accepts that token as ``oidc:<claim>`` and
lets in whom the tenant's bindings name (``gitops.render.cluster_access``). Removing a member
removes their binding, and their next request is refused, whatever they downloaded.

The admin kubeconfig vCluster exports is never handed out: it is a client certificate that no
membership change can revoke. The portal reads the Secret it is in (by name: its RBAC grants
``get`` on the tenant's kubeconfig Secrets, never ``list``) for the cluster's CA only.
Without ``cluster_oidc`` there is nothing personal to give, and the download says so.

Who may download is the caller's decision (the tenant access helper); this module says whether
there is one to give this person, and why not in words they can act on.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from django.conf import settings

from catalog.models import Kind, Resource
from catalog.specs import from_json
from fleet.kube import Kube, KubeError
from gitops.fleet import configured_fleet
from gitops.render.cluster_access import cluster_user
from gitops.render.vcluster import api_server_url, kubeconfig_secret
from gitops.render.yamlio import dump_value
from gitops.specs import ClusterOidc, SpecError, TenantClusterSpec, TenantSpec
from tenants.specs import cluster_members

logger = logging.getLogger(__name__)

# The key vCluster writes the cluster's CA under, beside the kubeconfig, the client certificate
# and key (pkg/util/kubeconfig ``WriteKubeConfig``, CADataSecretKey).
CA_KEY = "certificate-authority"
# The credential plugin API kubectl speaks to kubelogin, and kubelogin's own advice for it
# (its setup instructions write --exec-api-version=client.authentication.k8s.io/v1 and
# --exec-interactive-mode=Never: it signs in through the browser, not on stdin).
EXEC_API_VERSION = "client.authentication.k8s.io/v1"


class KubeconfigUnavailable(Exception):
    """There is no kubeconfig to give for this resource now; the message says why."""


def member_kubeconfig(*, name: str, server: str, ca: bytes, oidc: ClusterOidc) -> dict[str, Any]:
    """The kubeconfig as data: one cluster, one kubelogin user, one context, all ``name``."""
    args = [
        "oidc-login",
        "get-token",
        f"--oidc-issuer-url={oidc.issuer_url}",
        f"--oidc-client-id={oidc.client_id}",
    ]
    if oidc.username_claim == "email":
        args.append("--oidc-extra-scope=email")  # the claim is released with this scope
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode("ascii"),
                },
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": EXEC_API_VERSION,
                        "command": "kubectl",
                        "args": args,
                        "interactiveMode": "Never",
                        "provideClusterInfo": False,
                    }
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }


def kubeconfig_for(resource: Resource, user: Any) -> bytes:
    """``user``'s kubeconfig (YAML) for an active tenant cluster."""
    if resource.kind != Kind.CLUSTER:
        raise KubeconfigUnavailable(f"{resource} has no kubeconfig: only tenant clusters have one.")
    if resource.state == Resource.State.PENDING:
        raise KubeconfigUnavailable(
            f"Cluster {resource.name} does not exist yet: its kubeconfig can be downloaded "
            "once its request is merged and the cluster has started."
        )
    if resource.state != Resource.State.ACTIVE:
        raise KubeconfigUnavailable(
            f"Cluster {resource.name} is {resource.get_state_display().lower()}: only an "
            "active cluster's kubeconfig can be downloaded."
        )
    fleet = configured_fleet()
    oidc = fleet.cluster_oidc
    if oidc is None:
        raise KubeconfigUnavailable(
            "This fleet's clusters do not sign people in through the identity provider, so the "
            "portal has no personal kubeconfig to give; it does not hand out the cluster's "
            "admin credential, which no membership change could take back. Ask the platform "
            "team to set cluster_oidc in the fleet file (see the operator guide)."
        )
    tenant = resource.tenant
    _require_identity(tenant, user, oidc)
    try:
        spec: TenantClusterSpec = from_json(Kind.CLUSTER, resource.spec)
    except SpecError as exc:
        raise KubeconfigUnavailable(
            f"The spec of cluster {resource.name} cannot be read ({exc}); "
            "ask the platform team to look at it."
        ) from exc
    ca = _cluster_ca(tenant.slug, resource.name, kubeconfig_secret(spec))
    config = member_kubeconfig(
        name=f"{tenant.slug}-{spec.name}",
        server=api_server_url(spec, TenantSpec(slug=tenant.slug), fleet),
        ca=ca,
        oidc=oidc,
    )
    return dump_value(config).encode("utf-8")


def _require_identity(tenant: Any, user: Any, oidc: ClusterOidc) -> None:
    """The person must be a member the clusters can recognise: their kubeconfig would get
    them nothing otherwise, and they should hear why now, not from a 403 later."""
    username = user.get_username()
    member = next((m for m in cluster_members(tenant) if m.name == username), None)
    if member is not None and cluster_user(member, oidc) is not None:
        return
    if not tenant.memberships.filter(user=user).exists():
        raise KubeconfigUnavailable(
            f"You are not a member of {tenant.slug}: its clusters let in its members, by the "
            "role they have in the tenant. Ask one of its admins to add you."
        )
    provider = settings.OIDC_PROVIDER_NAME
    if member is None:
        raise KubeconfigUnavailable(
            f"Your portal account is not linked to {provider} yet, so the clusters cannot "
            f"recognise you: sign out and sign in again with {provider}. The change that adds "
            "you to the clusters then waits for a platform admin's approval."
        )
    raise KubeconfigUnavailable(
        f"The clusters recognise people by their {oidc.username_claim} at {oidc.issuer_url}, "
        f"and {provider} has not given the portal one for you"
        + (" (a verified e-mail address)" if oidc.username_claim == "email" else "")
        + "; ask the platform team."
    )


def _cluster_ca(namespace: str, cluster: str, name: str) -> bytes:
    """The cluster's CA certificate, from the Secret vCluster exports (and nothing else)."""
    try:
        kube = Kube()
    except Exception as exc:  # a broken kubeconfig of the portal's own
        logger.warning("cannot configure the Kubernetes client: %s", exc)
        raise KubeconfigUnavailable(
            "The portal cannot reach the cluster (its Kubernetes client is misconfigured); "
            "ask the platform team."
        ) from exc
    with kube:
        try:
            data = kube.read_secret(namespace, name)
        except KubeError as exc:
            raise _unavailable(cluster, f"{namespace}/{name}", exc) from exc
    ca = data.get(CA_KEY)
    if not ca:
        raise KubeconfigUnavailable(
            f"Secret {namespace}/{name} holds no CA certificate, so it is not the kubeconfig "
            f"of cluster {cluster}; ask the platform team to look at it."
        )
    return ca


def _unavailable(cluster: str, secret: str, exc: KubeError) -> KubeconfigUnavailable:
    if exc.status == 404:
        return KubeconfigUnavailable(
            f"Cluster {cluster} has not started yet: it writes its address and certificate "
            f"(Secret {secret}) once it runs, a few minutes after its change is applied. "
            "Try again shortly; if it stays missing, ask the platform team."
        )
    logger.warning("cannot read the kubeconfig Secret %s: %s", secret, exc)
    if exc.status == 403:
        return KubeconfigUnavailable(
            f"The portal is not allowed to read Secret {secret}; ask the platform team to "
            "grant it get on the tenant's kubeconfig Secrets."
        )
    return KubeconfigUnavailable(
        f"The kubeconfig of cluster {cluster} cannot be read right now: {exc} "
        "Try again in a minute."
    )
