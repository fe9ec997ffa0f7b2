"""Flux objects: the cluster bootstrap, the platform Kustomizations and each tenant's sync.

The layout follows flux2-multi-tenancy. ``clusters/<fleet>/flux-system`` holds what
``flux bootstrap`` writes (``gotk-sync.yaml``, and ``gotk-components.yaml``, the controllers
as ``flux install --export`` renders them, once the operator has committed it) plus the
multi-tenancy lockdown as kustomize patches on the controller Deployments in
``gotk-components.yaml``:

- ``--no-cross-namespace-refs=true`` on every controller that follows references, so a tenant
  object can only use sources in its own namespace;
- ``--no-remote-bases=true`` on kustomize-controller: a build reads only the repository;
- ``--default-service-account=default`` on kustomize- and helm-controller: an object that
  names no service account is applied with the (powerless) ``default`` account of its
  namespace, never with the controller's own rights;
- ``serviceAccountName: kustomize-controller`` on the ``flux-system`` Kustomization, which
  must keep full rights (patched rather than written into ``gotk-sync.yaml``, so a re-run of
  ``flux bootstrap`` keeps it).

The Deployment patches are rendered only together with ``gotk-components.yaml``: kustomize
applies a patch whose target selects nothing to nothing, without an error, so without the
components they were a lockdown in name only. The kustomize check now fails such a patch.

The platform Kustomizations (``infra-controllers`` -> ``infra-configs`` -> ``tenants``) name
``kustomize-controller`` explicitly for the same reason. Each tenant gets a GitRepository and a
Kustomization in its own namespace that apply ``tenants/<slug>/workloads`` as the tenant's
service account.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import FLUX_NAMESPACE, FLUX_TENANT_LABEL, kustomization, metadata
from gitops.render.yamlio import dump_value
from gitops.specs import FleetSpec, TenantSpec

FLUX_KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
SOURCE_API = "source.toolkit.fluxcd.io/v1"
FLUX_SYSTEM = "flux-system"
COMPONENTS = "gotk-components.yaml"
KUSTOMIZE_CONTROLLER = "kustomize-controller"
CROSS_NAMESPACE_CONTROLLERS = (
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
)
IMPERSONATING_CONTROLLERS = ("kustomize-controller", "helm-controller")


# The Secret (keys ``username`` and ``password``) a tenant's GitRepository authenticates with.
# The portal writes it into the tenant namespace through the Kubernetes API; it is never in
# Git. Those are the key names source-controller reads for HTTP basic auth (fluxcd/pkg
# git/options.go, NewAuthOptions), and it sends them over plain http:// too: its
# gitrepository_controller.go (gitCheckout) turns on WithInsecureCredentialsOverHTTP for the
# http transport, so the in-cluster portal URL works without TLS.
TENANT_SOURCE_SECRET = "flux-git-auth"


def git_repository(
    name: str, namespace: str, fleet: FleetSpec, *, url: str | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": SOURCE_API,
        "kind": "GitRepository",
        "metadata": metadata(name, namespace),
        "spec": {
            "interval": "1m0s",
            "url": url or fleet.git_url,
            "ref": {"branch": fleet.git_branch},
            **spec,
        },
    }


def flux_kustomization(
    name: str,
    namespace: str,
    path: str,
    *,
    source: str,
    service_account: str,
    interval: str = "10m0s",
    depends_on: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "interval": interval,
        "retryInterval": "1m0s",
        "timeout": "5m0s",
        "path": path,
        "prune": True,
        "sourceRef": {"kind": "GitRepository", "name": source},
        "serviceAccountName": service_account,
        **spec,
    }
    if depends_on:
        body["dependsOn"] = [{"name": depends_on}]
    return {
        "apiVersion": FLUX_KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": metadata(name, namespace),
        "spec": body,
    }


def gotk_sync(fleet: FleetSpec) -> list[dict[str, Any]]:
    """What ``flux bootstrap`` writes: the repository and the Kustomization of this cluster."""
    repo = git_repository(FLUX_SYSTEM, FLUX_NAMESPACE, fleet, secretRef={"name": FLUX_SYSTEM})
    sync = {
        "apiVersion": FLUX_KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": metadata(FLUX_SYSTEM, FLUX_NAMESPACE),
        "spec": {
            "interval": "10m0s",
            "path": f"./clusters/{fleet.name}",
            "prune": True,
            "sourceRef": {"kind": "GitRepository", "name": FLUX_SYSTEM},
        },
    }
    return [repo, sync]


def _patch(ops: list[dict[str, Any]], **target: str) -> dict[str, Any]:
    return {"patch": dump_value(ops), "target": dict(target)}


def _arg(value: str, position: str) -> dict[str, Any]:
    return {
        "op": "add",
        "path": f"/spec/template/spec/containers/0/args/{position}",
        "value": value,
    }


def lockdown_patches(include_components: bool = True) -> list[dict[str, Any]]:
    """The flux2-multi-tenancy lockdown: the controllers' arguments (only with
    ``gotk-components.yaml``, which holds their Deployments) and the flux-system
    Kustomization's service account (in ``gotk-sync.yaml``)."""
    service_account = _patch(
        [{"op": "add", "path": "/spec/serviceAccountName", "value": KUSTOMIZE_CONTROLLER}],
        kind="Kustomization",
        name=FLUX_SYSTEM,
    )
    if not include_components:
        return [service_account]
    return [
        _patch(
            [_arg("--no-cross-namespace-refs=true", "0")],
            kind="Deployment",
            name=f"({'|'.join(CROSS_NAMESPACE_CONTROLLERS)})",
        ),
        _patch([_arg("--no-remote-bases=true", "-")], kind="Deployment", name=KUSTOMIZE_CONTROLLER),
        _patch(
            [_arg("--default-service-account=default", "0")],
            kind="Deployment",
            name=f"({'|'.join(IMPERSONATING_CONTROLLERS)})",
        ),
        service_account,
    ]


def flux_system_kustomization(include_components: bool) -> dict[str, Any]:
    files = [COMPONENTS, "gotk-sync.yaml"] if include_components else ["gotk-sync.yaml"]
    return kustomization(files, patches=lockdown_patches(include_components))


def infrastructure() -> list[dict[str, Any]]:
    controllers = flux_kustomization(
        "infra-controllers",
        FLUX_NAMESPACE,
        "./infrastructure/controllers",
        source=FLUX_SYSTEM,
        service_account=KUSTOMIZE_CONTROLLER,
        wait=True,
    )
    configs = flux_kustomization(
        "infra-configs",
        FLUX_NAMESPACE,
        "./infrastructure/configs",
        source=FLUX_SYSTEM,
        service_account=KUSTOMIZE_CONTROLLER,
        depends_on="infra-controllers",
    )
    return [controllers, configs]


def tenants() -> dict[str, Any]:
    return flux_kustomization(
        "tenants",
        FLUX_NAMESPACE,
        "./tenants",
        source=FLUX_SYSTEM,
        service_account=KUSTOMIZE_CONTROLLER,
        interval="5m0s",
        depends_on="infra-configs",
    )


def workloads_path(tenant: TenantSpec) -> str:
    return f"./tenants/{tenant.slug}/workloads"


def tenant_sync(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """The tenant's own source and Kustomization, in its namespace, as its service account.

    The source is the tenant's projection repository (only ``tenants/<slug>/workloads``, at
    the same path), read with the tenant's own token: the fleet repository holds every
    tenant's files and every open change, which no tenant may read.
    """
    repo = git_repository(
        tenant.slug,
        tenant.slug,
        fleet,
        url=fleet.tenant_git_url(tenant.slug),
        secretRef={"name": TENANT_SOURCE_SECRET},
    )
    workloads = flux_kustomization(
        f"{tenant.slug}-workloads",
        tenant.slug,
        workloads_path(tenant),
        source=tenant.slug,
        service_account=tenant.slug,
        interval="5m0s",
        targetNamespace=tenant.slug,
    )
    for obj in (repo, workloads):
        obj["metadata"] = metadata(
            obj["metadata"]["name"],
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={FLUX_TENANT_LABEL: tenant.slug},
        )
    return [repo, workloads]
