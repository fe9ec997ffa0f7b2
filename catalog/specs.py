"""Between the catalog's JSON specs and the gitops dataclasses, and the tenant's whole spec.

A resource's spec is stored as the JSON of its dataclass (``GpuShare``, ``TenantClusterSpec``,
``EndpointSpec``): a tuple becomes a list and back. ``desired_tenant`` is the tenant as it
would run with one request applied to what main holds; gitops renders and validates it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from django.db.models import QuerySet

from catalog.models import Kind, Resource, ResourceRequest
from gitops import services as gitops
from gitops.render import specfiles
from gitops.render.specfiles import to_json as to_json  # what the API and billing use
from gitops.specs import (
    ClusterMember,
    EndpointSpec,
    Flavor,
    FleetSpec,
    GpuShare,
    SpecError,
    TenantClusterSpec,
    TenantSpec,
)
from tenants.models import Tenant
from tenants.specs import tenant_spec

SpecClass = type[GpuShare] | type[TenantClusterSpec] | type[EndpointSpec]
CLASSES: dict[str, Any] = {
    Kind.GPU_SHARE: GpuShare,
    Kind.CLUSTER: TenantClusterSpec,
    Kind.ENDPOINT: EndpointSpec,
}
# Where each kind sits in a TenantSpec, and so in validate_tenant's error paths.
COLLECTION: dict[str, str] = {
    Kind.GPU_SHARE: "shares",
    Kind.CLUSTER: "clusters",
    Kind.ENDPOINT: "endpoints",
}


def from_json(kind: str, data: dict[str, Any]) -> Any:
    """The dataclass of ``kind`` from stored JSON; unknown keys are an error, not ignored."""
    return specfiles.from_json(CLASSES[kind], data)


def offered_flavors(fleet: FleetSpec, *, dedicated: bool, mig: bool = True) -> list[Flavor]:
    """The flavors a tenant may ask for: a dedicated tenant never shares a GPU with another
    (no HAMi pool), and gets no MIG pool (nor DRA on one) unless ``mig`` (``mig_opt_in``)."""
    return [
        f
        for f in fleet.flavors
        if not (dedicated and f.mode == "hami") and (mig or not (f.mode == "mig" or f.mig_profiles))
    ]


def mig_opt_in(tenant: Tenant) -> bool:
    """Whether the tenant may have MIG slices: a shared tenant always; a dedicated one only
    when main's spec holds the platform admin's opt-in (``TenantSpec.mig_allowed``, the same
    rule the render applies: ``gitops.render.validate.mig_allowed``)."""
    if tenant.trust_level != Tenant.TrustLevel.DEDICATED:
        return True
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    return on_main is not None and on_main.mig_allowed


def live_resources(tenant: Tenant) -> QuerySet[Resource]:
    return tenant.resources.filter(
        state__in=[Resource.State.ACTIVE, Resource.State.DECOMMISSIONING]
    )


# The TenantSpec fields the portal's settings decide (tenants.specs.tenant_spec).
SETTINGS_FIELDS = ("display_name", "trust_level", "cost_centre", "cpu_quota", "memory_gib")


def desired_tenant(
    tenant: Tenant,
    *,
    kind: str = "",
    name: str = "",
    spec: dict[str, Any] | None = None,
    remove: bool = False,
    settings: bool = False,
    members: bool = False,
) -> TenantSpec:
    """The tenant as main holds it, with resource (``kind``, ``name``) set to ``spec`` (or
    removed): what a request's change makes of main. ``settings``: with the settings the
    portal holds now (a settings change); ``members``: with its members now (an access sync).

    Git is the truth of what the tenant has (``gitops.render.specfiles``): a resource whose
    request merged is there from the merge on, whether or not the cluster reported it ready
    and the database followed. Only a tenant main holds no spec of (its onboarding is not
    merged yet, or its directory was written before it carried its spec) is read from the
    database: its resources there that are active."""
    now = tenant_spec(tenant)
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    if on_main is None:
        base = dataclasses.replace(now, **_from_database(tenant))
    else:
        base = on_main
        if settings:
            base = dataclasses.replace(base, **{f: getattr(now, f) for f in SETTINGS_FIELDS})
        # Who may use its clusters: as on main (a grant goes through its own review), less
        # whom the portal has removed since or gave a narrower role (never kept in longer).
        # A new cluster is bound for the members the portal has now: its approver reviews
        # their bindings with it (and the access sync after its merge corrects any drift).
        new_cluster = (
            kind == Kind.CLUSTER and not remove and all(c.name != name for c in base.clusters)
        )
        base = dataclasses.replace(
            base,
            members=now.members if members or new_cluster else narrowed(base.members, now.members),
        )
    if not kind:
        return base
    collection = COLLECTION[kind]
    items = [item for item in getattr(base, collection) if item.name != name]
    if not remove and spec is not None:
        items.append(from_json(kind, spec))
    changed: dict[str, Any] = {collection: tuple(items)}
    return specfiles.canonical(dataclasses.replace(base, **changed))


def narrowed(
    on_main: tuple[ClusterMember, ...], now: tuple[ClusterMember, ...]
) -> tuple[ClusterMember, ...]:
    """The members of ``on_main`` who are still members ``now``, each with the narrower of
    the two roles: what may be written without a review of who gets access."""
    rank = {"viewer": 0, "member": 1, "admin": 2}
    current = {(m.issuer, m.subject, m.email, m.name): m for m in now}
    kept = []
    for member in on_main:
        same = current.get((member.issuer, member.subject, member.email, member.name))
        if same is not None:
            kept.append(same if rank[same.role] < rank[member.role] else member)
    return tuple(kept)


def _from_database(tenant: Tenant) -> dict[str, Any]:
    collections: dict[str, list[Any]] = {"shares": [], "clusters": [], "endpoints": []}
    for resource in live_resources(tenant).order_by("created_at", "pk"):
        collections[COLLECTION[resource.kind]].append(from_json(resource.kind, resource.spec))
    return {key: tuple(items) for key, items in collections.items()}


def request_tenant(request: ResourceRequest) -> TenantSpec:
    """The tenant as it runs once ``request`` is merged."""
    resource = request.resource
    return desired_tenant(
        request.tenant,
        kind=resource.kind,
        name=resource.name,
        spec=request.spec,
        remove=request.action == ResourceRequest.Action.DECOMMISSION,
    )


_PATH = re.compile(r"^(shares|clusters|endpoints)\[(\d+)\](?:\.(\w+))?")


def errors_for(tenant: TenantSpec, kind: str, name: str, error: SpecError) -> dict[str, str]:
    """``validate_tenant``'s errors as {field of this resource's form: message}; errors about
    other resources or the tenant as a whole go under "" (shown above the form)."""
    collection = COLLECTION[kind]
    items = getattr(tenant, collection)
    index = next((i for i, item in enumerate(items) if item.name == name), -1)
    mapped: dict[str, str] = {}
    for path, message in error.errors.items():
        match = _PATH.match(path)
        if match and match.group(1) == collection and int(match.group(2)) == index:
            field = match.group(3) or ""
        else:
            field = ""
            if match:
                other = getattr(tenant, match.group(1))[int(match.group(2))]
                message = f"{match.group(1)[:-1]} {other.name}: {message}"
        mapped[field] = f"{mapped[field]} {message}".strip() if field in mapped else message
    return mapped
