"""Between the catalog's JSON specs and the gitops dataclasses, and the tenant's whole spec.

A resource's spec is stored as the JSON of its dataclass (``GpuShare``, ``TenantClusterSpec``,
``EndpointSpec``): a tuple becomes a list and back. ``desired_tenant`` is the tenant as it
would run with one request applied to what is on main; gitops renders and validates it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, get_type_hints

from django.db.models import QuerySet

from catalog.models import Kind, Resource, ResourceRequest
from gitops.specs import EndpointSpec, GpuShare, SpecError, TenantClusterSpec, TenantSpec
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


def to_json(spec: Any) -> dict[str, Any]:
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in dataclasses.asdict(spec).items()
    }


@functools.cache
def _shape(cls: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A dataclass's type hints and field names (slow to compute, so once per class)."""
    return get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls))


def from_json(kind: str, data: dict[str, Any]) -> Any:
    """The dataclass of ``kind`` from stored JSON; unknown keys are an error, not ignored."""
    cls = CLASSES[kind]
    hints, fields = _shape(cls)
    unknown = set(data) - fields
    if unknown:
        raise SpecError({key: "Unknown field." for key in sorted(unknown)})
    values = {
        key: tuple(value)
        if isinstance(value, list) and "tuple" in str(hints.get(key, ""))
        else value
        for key, value in data.items()
    }
    try:
        return cls(**values)
    except TypeError as exc:
        raise SpecError({"": str(exc)}) from exc


def live_resources(tenant: Tenant) -> QuerySet[Resource]:
    return tenant.resources.filter(
        state__in=[Resource.State.ACTIVE, Resource.State.DECOMMISSIONING]
    )


def desired_tenant(
    tenant: Tenant,
    *,
    kind: str = "",
    name: str = "",
    spec: dict[str, Any] | None = None,
    remove: bool = False,
) -> TenantSpec:
    """The tenant with what is on main, and resource (``kind``, ``name``) set to ``spec``
    (or removed). Resources keep their creation order, so the render is stable."""
    collections: dict[str, list[Any]] = {"shares": [], "clusters": [], "endpoints": []}
    replaced = False
    for resource in live_resources(tenant).order_by("created_at", "pk"):
        if resource.kind == kind and resource.name == name:
            replaced = True
            if remove or spec is None:
                continue
            collections[COLLECTION[kind]].append(from_json(kind, spec))
        else:
            collections[COLLECTION[resource.kind]].append(from_json(resource.kind, resource.spec))
    if kind and not replaced and not remove and spec is not None:
        collections[COLLECTION[kind]].append(from_json(kind, spec))
    base = tenant_spec(tenant)
    return dataclasses.replace(
        base,
        shares=tuple(collections["shares"]),
        clusters=tuple(collections["clusters"]),
        endpoints=tuple(collections["endpoints"]),
    )


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
