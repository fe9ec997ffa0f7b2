"""A running tenant cluster's kubeconfig, as its vCluster exports it into the tenant namespace.

The release (``gitops.render.vcluster``) sets ``exportKubeConfig.secret.name``, so the Secret is
``<namespace>/<cluster>-kubeconfig``; the syncer writes it once the virtual control plane runs,
the kubeconfig under the key ``config`` (loft-sh/vcluster ``pkg/util/kubeconfig``). The portal
reads just that Secret by name: its RBAC grants ``get`` on Secrets, never ``list``.

Who may download it is the caller's decision (the tenant access helper); this module only says
whether there is one to give, and why not in words a person can act on.
"""

from __future__ import annotations

import logging

from catalog.models import Kind, Resource
from catalog.specs import from_json
from fleet.kube import Kube, KubeError
from gitops.render.vcluster import kubeconfig_secret
from gitops.specs import SpecError

logger = logging.getLogger(__name__)

# The key vCluster writes the kubeconfig under (it also writes the CA, certificate and key).
KUBECONFIG_KEY = "config"


class KubeconfigUnavailable(Exception):
    """There is no kubeconfig to give for this resource now; the message says why."""


def kubeconfig_for(resource: Resource) -> bytes:
    """The kubeconfig (YAML) of an active tenant cluster, read from the fleet's API server."""
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
    try:
        spec = from_json(Kind.CLUSTER, resource.spec)
    except SpecError as exc:
        raise KubeconfigUnavailable(
            f"The spec of cluster {resource.name} cannot be read ({exc}); "
            "ask the platform team to look at it."
        ) from exc
    namespace, name = resource.tenant.slug, kubeconfig_secret(spec)
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
            raise _unavailable(resource.name, f"{namespace}/{name}", exc) from exc
    config = data.get(KUBECONFIG_KEY)
    if not config:
        raise KubeconfigUnavailable(
            f"Secret {namespace}/{name} has no '{KUBECONFIG_KEY}' entry, so it is not the "
            f"kubeconfig of cluster {resource.name}; ask the platform team to look at it."
        )
    return config


def _unavailable(cluster: str, secret: str, exc: KubeError) -> KubeconfigUnavailable:
    if exc.status == 404:
        return KubeconfigUnavailable(
            f"The kubeconfig of cluster {cluster} is not there yet: the cluster writes it "
            f"(Secret {secret}) once it has started, a few minutes after its change is applied. "
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
