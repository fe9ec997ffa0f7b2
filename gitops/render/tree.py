"""Files of the fleet repository, rendered from specs: ``{path: bytes}`` with POSIX paths
relative to the repository root.

Layout (flux2-multi-tenancy)::

    clusters/<fleet>/kustomization.yaml        flux-system/, infrastructure.yaml, tenants.yaml
    clusters/<fleet>/flux-system/              gotk-sync.yaml (+ gotk-components.yaml), lockdown
    clusters/<fleet>/infrastructure.yaml       Kustomizations infra-controllers, infra-configs
    clusters/<fleet>/tenants.yaml              Kustomization tenants
    clusters/<fleet>/portal.yaml               opt-in: Kustomizations portal-setup, portal
    infrastructure/controllers/                Flux sources the portal's objects use and, with
                                               the fleet's ``stack``, the platform's controllers
                                               (one file per component, gitops/render/stack.py)
    infrastructure/configs/                    Kueue flavors/topology/cohort/priorities and
                                               manager configuration (without the stack),
                                               alerts (PrometheusRule), pod PriorityClasses,
                                               Kyverno ClusterPolicies, the tenant reconciler
                                               role, the Gateway, GPU exporters' monitors,
                                               the GPU Operator's ClusterPolicy
    infrastructure/portal/{setup,app}/         opt-in: the portal's own deployment
    tenants/kustomization.yaml                 one entry per tenant directory
    tenants/<slug>/                            platform-owned, applied by "tenants"
    tenants/<slug>/workloads/                  tenant-owned, applied as the tenant's account
    tenants/<slug>/cluster-access/<cluster>/   the members' bindings, applied into the virtual
                                               cluster (only with the fleet's cluster_oidc)
tenants/<slug>/spec/                       the spec the directory is rendered from (JSON, never
                                               applied; gitops/render/specfiles.py)

Every directory a Flux Kustomization points at has a ``kustomization.yaml`` and builds with
``kustomize build``. A tenant's directory is a function of its spec alone, so re-rendering it
and diffing against Git gives exactly the change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gitops.render import (
    alerts,
    cluster_access,
    dra,
    fabric,
    flux,
    gateway,
    gpu_operator,
    kserve,
    kueue,
    kueue_config,
    kyverno,
    litellm,
    monitoring,
    namespace,
    network,
    priority,
    quota,
    rbac,
    secrets,
    specfiles,
    stack,
    vcluster,
)
from gitops.render.meta import kustomization
from gitops.render.portal import PORTAL_FLUX_FILE, render_portal_component
from gitops.render.validate import DNS1123_LABEL, validate_fleet, validate_tenant
from gitops.render.yamlio import dump_documents, load_documents
from gitops.specs import FleetSpec, PortalDeploySpec, SpecError, TenantSpec

KUSTOMIZATION = "kustomization.yaml"
WORKLOADS = "workloads"
Entries = list[tuple[str, list[dict[str, Any]]]]


def _files(entries: Iterable[tuple[str, list[dict[str, Any]]]]) -> dict[str, bytes]:
    return {path: dump_documents(objs) for path, objs in sorted(entries)}


def render_cluster_bootstrap(
    fleet: FleetSpec, include_components: bool = False
) -> dict[str, bytes]:
    """``clusters/<fleet>/``. ``include_components``: ``gotk-components.yaml`` is in the
    repository (written by ``flux bootstrap``) and the flux-system kustomization lists it."""
    validate_fleet(fleet)
    base = f"clusters/{fleet.name}"
    return _files(
        [
            (f"{base}/{KUSTOMIZATION}", [cluster_kustomization()]),
            (
                f"{base}/flux-system/{KUSTOMIZATION}",
                [flux.flux_system_kustomization(include_components)],
            ),
            (f"{base}/flux-system/gotk-sync.yaml", flux.gotk_sync(fleet)),
            (f"{base}/infrastructure.yaml", flux.infrastructure()),
            (f"{base}/tenants.yaml", [flux.tenants()]),
        ]
    )


CLUSTER_RESOURCES = ("flux-system", "infrastructure.yaml", "tenants.yaml")


def cluster_kustomization(extra: Iterable[str] = ()) -> dict[str, Any]:
    """``clusters/<fleet>/kustomization.yaml``: the bootstrap's entries, then ``extra`` (opt-in
    platform components such as ``portal.yaml``) in order, each once."""
    resources = list(CLUSTER_RESOURCES)
    resources += [name for name in dict.fromkeys(extra) if name not in resources]
    return kustomization(resources)


def render_portal_deployment(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, bytes]:
    """The portal's own deployment (``gitops.render.portal``) for a freshly bootstrapped
    repository: the component, its Flux Kustomizations and the cluster's kustomization listing
    them. A repository whose cluster kustomization lists more than the bootstrap's entries keeps
    them (``gitops.services.portal_deployment_changes``). Raises ``SpecError``."""
    files = render_portal_component(spec, fleet)
    files[f"clusters/{fleet.name}/{KUSTOMIZATION}"] = dump_documents(
        [cluster_kustomization([PORTAL_FLUX_FILE])]
    )
    return dict(sorted(files.items()))


def render_infrastructure(fleet: FleetSpec) -> dict[str, bytes]:
    """``infrastructure/controllers`` and ``infrastructure/configs``. With the fleet's
    ``stack`` the controllers are installed from here too (``gitops.render.stack``), and
    Kueue's configuration goes into its HelmRelease instead of a ConfigMap of its own."""
    validate_fleet(fleet)
    controllers: Entries = [("helm-repositories.yaml", [vcluster.helm_repository()])]
    if fleet.stack:
        controllers += stack.controller_files(fleet)
    configs: Entries = [
        ("alerts.yaml", alerts.fleet_objects(fleet)),
        ("gateway.yaml", gateway.fleet_objects(fleet)),
        ("gpu-operator.yaml", [gpu_operator.cluster_policy(fleet)]),
        ("kserve-storage.yaml", [kserve.cluster_storage_container()]),
        ("kueue.yaml", kueue.fleet_objects(fleet)),
        ("kyverno-policies.yaml", kyverno.cluster_policies()),
        ("monitoring.yaml", monitoring.fleet_objects(fleet)),
        ("priority-classes.yaml", priority.priority_classes()),
        ("rbac.yaml", [rbac.tenant_reconciler_role(), *rbac.job_roles()]),
    ]
    if not fleet.stack:
        configs.append(("kueue-manager-config.yaml", [kueue_config.manager_config_map(fleet)]))
    entries: Entries = []
    for folder, files in (("controllers", controllers), ("configs", configs)):
        files = sorted(files)
        files.append((KUSTOMIZATION, [kustomization([name for name, _ in files])]))
        entries += [(f"infrastructure/{folder}/{name}", objs) for name, objs in files]
    return _files(entries)


def render_tenants_index(slugs: Iterable[str]) -> dict[str, bytes]:
    """``tenants/kustomization.yaml`` listing the tenant directories."""
    unique = sorted(set(slugs))
    errors = {
        f"slugs[{index}]": f"{slug!r} is not a tenant directory name (a DNS label)."
        for index, slug in enumerate(unique)
        if not isinstance(slug, str) or len(slug) > 63 or not DNS1123_LABEL.fullmatch(slug)
    }
    if errors:
        raise SpecError(errors)
    return _files([(f"tenants/{KUSTOMIZATION}", [kustomization(unique)])])


def _platform_entries(tenant: TenantSpec, fleet: FleetSpec) -> Entries:
    """(path under ``tenants/<slug>/``, objects) of the platform-owned files."""
    entries: Entries = [
        ("namespace.yaml", [namespace.namespace(tenant)]),
        ("rbac.yaml", rbac.tenant_objects(tenant, fleet)),
        ("quota.yaml", quota.tenant_objects(tenant, fleet)),
        ("network-policy.yaml", network.tenant_objects(tenant, fleet)),
        ("kyverno-policy.yaml", kyverno.tenant_policies(tenant, fleet)),
        ("queues.yaml", kueue.tenant_objects(tenant, fleet)),
        ("sync.yaml", flux.tenant_sync(tenant, fleet)),
    ]
    auth = gateway.tenant_objects(tenant, fleet)
    if auth:
        entries.append(("gateway-auth.yaml", auth))
    monitors = monitoring.tenant_objects(tenant)
    if monitors:
        entries.append(("monitoring.yaml", monitors))
    credentials = secrets.tenant_objects(tenant, fleet)
    if credentials:
        entries.append(("model-credentials.yaml", credentials))
    attachments = fabric.tenant_objects(tenant, fleet)
    if attachments:
        entries.append(("fabric.yaml", attachments))
    # LiteLLM configuration is platform-owned: LiteLLM follows its api_base and expands
    # os.environ/ references, so a tenant must not be able to write it.
    entries += [
        (f"litellm/{endpoint.name}.yaml", [litellm.config_map(tenant, endpoint, fleet)])
        for endpoint in sorted(tenant.endpoints, key=lambda e: e.name)
        if endpoint.expose
    ]
    for cluster in sorted(tenant.clusters, key=lambda c: c.name):
        objects = [vcluster.helm_release(cluster, tenant, fleet)]
        if fleet.cluster_oidc is not None:
            objects.append(
                cluster_access.access_kustomization(
                    cluster.name, tenant, vcluster.default_kubeconfig_secret(cluster)
                )
            )
        entries.append((f"clusters/{cluster.name}.yaml", objects))
    entries.append(("portal-access.yaml", rbac.portal_access_objects(tenant, fleet)))
    return entries


def _workload_entries(tenant: TenantSpec, fleet: FleetSpec) -> Entries:
    """(path under ``tenants/<slug>/workloads/``, objects) of the tenant-owned files."""
    entries: Entries = []
    for share in sorted(tenant.shares, key=lambda s: s.name):
        flavor = fleet.flavor(share.flavor)
        if share.kind == "dra" and flavor is not None:
            entries.append(
                (f"gpu-shares/{share.name}.yaml", [dra.share_template(tenant, share, flavor)])
            )
    entries += [
        (f"endpoints/{endpoint.name}.yaml", kserve.endpoint_objects(tenant, endpoint, fleet))
        for endpoint in sorted(tenant.endpoints, key=lambda e: e.name)
    ]
    return entries


def _access_entries(tenant: TenantSpec, fleet: FleetSpec) -> Entries:
    """(path under ``tenants/<slug>/``, objects) of the clusters' access directories: neither
    kustomization lists them, since they are applied into the virtual clusters."""
    return cluster_access.access_files(tenant, [c.name for c in tenant.clusters], fleet)


def tenant_file_objects(tenant: TenantSpec, fleet: FleetSpec) -> Entries:
    """(path, objects) of every object file under ``tenants/<slug>/`` (kustomization files
    left out); the spec must be valid."""
    base = f"tenants/{tenant.slug}"
    access = [(p, o) for p, o in _access_entries(tenant, fleet) if not is_kustomization(p)]
    return (
        [(f"{base}/{path}", objs) for path, objs in _platform_entries(tenant, fleet)]
        + [(f"{base}/{WORKLOADS}/{path}", objs) for path, objs in _workload_entries(tenant, fleet)]
        + [(f"{base}/{path}", objs) for path, objs in access]
    )


def render_tenant_tree(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, bytes]:
    """Every file under ``tenants/<slug>/``. Raises ``SpecError`` for an invalid spec."""
    validate_fleet(fleet)
    validate_tenant(tenant, fleet)
    tenant = specfiles.canonical(tenant)
    base = f"tenants/{tenant.slug}"
    platform = _platform_entries(tenant, fleet)
    workloads = _workload_entries(tenant, fleet)
    # workloads/ is left out of the platform's list: the tenant's own Kustomization applies
    # it, as the tenant's service account.
    platform.append((KUSTOMIZATION, [kustomization([path for path, _ in platform])]))
    workloads.append((KUSTOMIZATION, [kustomization([path for path, _ in workloads])]))
    files = _files(
        [(f"{base}/{path}", objs) for path, objs in platform]
        + [(f"{base}/{WORKLOADS}/{path}", objs) for path, objs in workloads]
        + [(f"{base}/{path}", objs) for path, objs in _access_entries(tenant, fleet)]
    )
    # What it was rendered from, so the next change starts from main (gitops/render/specfiles).
    files.update({f"{base}/{p}": b for p, b in specfiles.render_spec_files(tenant).items()})
    return dict(sorted(files.items()))


def render_cluster_access(
    tenant: TenantSpec, cluster_names: list[str], fleet: FleetSpec
) -> dict[str, bytes]:
    """Only the access directories of ``cluster_names`` (the clusters main has), as
    ``render_tenant_tree`` writes them: what a membership change rewrites."""
    validate_fleet(fleet)
    validate_tenant(tenant, fleet)
    base = f"tenants/{tenant.slug}"
    entries = cluster_access.access_files(tenant, cluster_names, fleet)
    return _files([(f"{base}/{path}", objs) for path, objs in entries])


def render_repository(fleet: FleetSpec, tenants: Iterable[TenantSpec]) -> dict[str, bytes]:
    """The whole repository for a fleet and its tenants (bootstrap without components)."""
    tenant_list = list(tenants)
    errors: dict[str, str] = {}
    seen: dict[str, int] = {}
    releases: dict[str, str] = {}
    for index, tenant in enumerate(tenant_list):
        if tenant.slug in seen:
            errors[f"tenants[{index}].slug"] = f"Tenant {tenant.slug!r} is listed twice."
        seen.setdefault(tenant.slug, index)
        for cluster in tenant.clusters:
            name = vcluster.release_name(tenant, cluster)
            owner = releases.setdefault(name, tenant.slug)
            if owner != tenant.slug:
                errors[f"tenants[{index}].clusters"] = (
                    f"The cluster {cluster.name!r} would be released as {name!r}, like one of "
                    f"tenant {owner!r}; rename the cluster."
                )
    if errors:
        raise SpecError(errors)
    files = render_cluster_bootstrap(fleet)
    files.update(render_infrastructure(fleet))
    files.update(render_tenants_index(tenant.slug for tenant in tenant_list))
    for tenant in tenant_list:
        files.update(render_tenant_tree(tenant, fleet))
    return dict(sorted(files.items()))


def is_kustomization(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == KUSTOMIZATION


def objects_for(files: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """The Kubernetes objects in rendered files (kustomization.yaml files left out), in path
    order: what a schema check validates."""
    objs: list[dict[str, Any]] = []
    for path in sorted(files):
        if path.endswith((".yaml", ".yml")) and not is_kustomization(path):
            objs.extend(doc for doc in load_documents(files[path]) if isinstance(doc, dict))
    return objs
