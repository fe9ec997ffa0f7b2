"""Names, labels and metadata shared by every renderer.

One place for the label keys other parts of the platform select on (the ClusterQueue's
namespace selector, the LiteLLM config collector, the portal's inventory), so a renderer and
its reader cannot drift apart.
"""

from __future__ import annotations

from typing import Any

PORTAL = "ai-factory-portal"
MANAGED_BY = "app.kubernetes.io/managed-by"
# On the tenant's namespace and on every object rendered for a tenant. The ClusterQueue selects
# namespaces by it, so only the platform may set it (tenants cannot edit their Namespace).
TENANT_LABEL = "ai-factory.io/tenant"
FLUX_TENANT_LABEL = "toolkit.fluxcd.io/tenant"
DISPLAY_NAME_ANNOTATION = "ai-factory.io/display-name"
COST_CENTRE_ANNOTATION = "ai-factory.io/cost-centre"
# Whether the tenant may share GPUs with others (HAMi): on its namespace, so that a change of
# trust is a change in Git that is reviewed, and policies can select by it.
TRUST_LEVEL_LABEL = "ai-factory.io/trust-level"
UNTIL_ANNOTATION = "ai-factory.io/reservations-until"
# LiteLLM's config collector picks up ConfigMaps with this label in any namespace.
LITELLM_MODEL_LABEL = "ai-factory.io/litellm-model"

FLUX_NAMESPACE = "flux-system"
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
# Not "default": Kueue's LocalQueueDefaulting (stable since v0.17, kubernetes-sigs/kueue
# site/content/en/docs/tasks/manage/enforce_job_management/setup_default_local_queue.md) gives a
# LocalQueue named "default" every workload of its namespace that names no queue, the vCluster
# control plane and its CoreDNS included, and they would then be admitted on a GPU flavor (or
# never, by a ClusterQueue without CPU-only capacity). GPU pods name this queue explicitly (the
# tenant policy requires it); everything else is left to the default scheduler.
LOCAL_QUEUE = "gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def labels(tenant: str | None = None) -> dict[str, str]:
    """The labels every rendered object carries; the tenant's too for tenant objects."""
    out = {MANAGED_BY: PORTAL}
    if tenant is not None:
        out[TENANT_LABEL] = tenant
    return out


def metadata(
    name: str,
    namespace: str | None = None,
    *,
    tenant: str | None = None,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``metadata`` for a rendered object: name, namespace (namespaced kinds only), labels."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {**labels(tenant), **(extra_labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def kustomization(resources: list[str], **fields: Any) -> dict[str, Any]:
    """A kustomize ``kustomization.yaml`` (not the Flux Kustomization custom resource)."""
    return {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": resources, **fields}
