"""A tenant's spec, kept in its own directory on main: ``tenants/<slug>/spec/``.

Git is the truth of what a tenant has. Every change to a tenant's directory writes, beside the
manifests, the spec they were rendered from, one small JSON file per part:

    tenants/<slug>/spec/tenant.json               settings (display name, trust, quotas, ...)
    tenants/<slug>/spec/members.json              who may use its clusters (ClusterMember)
    tenants/<slug>/spec/shares/<name>.json        one per GpuShare
    tenants/<slug>/spec/clusters/<name>.json      one per TenantClusterSpec
    tenants/<slug>/spec/endpoints/<name>.json     one per EndpointSpec
    tenants/<slug>/spec/reservations/<node>.json  one per NodeReservation (a whole node)

So the next change of the tenant is rendered from what main holds plus its own request
(``parse_spec_files``), never from a database that lags behind the merges; and two changes of
one tenant opened side by side touch different spec files, so one can be replayed onto the
other (``gitops.services.replaying``). No kustomization lists these files: Flux never applies
them, and the manifest checks read only ``*.yaml``.

The files are data, written by ``json.dumps`` (sorted keys): nothing typed is pasted into text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, get_type_hints

from gitops.specs import (
    ClusterMember,
    EndpointSpec,
    GpuShare,
    NodeReservation,
    SpecError,
    TenantClusterSpec,
    TenantSpec,
)

SPEC_DIR = "spec"
SETTINGS_FILE = f"{SPEC_DIR}/tenant.json"
MEMBERS_FILE = f"{SPEC_DIR}/members.json"
# TenantSpec field -> the dataclass of its items (each its own file, by name).
COLLECTIONS: dict[str, Any] = {
    "shares": GpuShare,
    "clusters": TenantClusterSpec,
    "endpoints": EndpointSpec,
    "reservations": NodeReservation,
}
# What a file of a collection is named: the item's name, a DNS label (validate_tenant).
# Reserved nodes are named after the node, which may be a DNS subdomain (dots).
_ITEM = re.compile(
    r"^spec/(shares|clusters|endpoints|reservations)/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)\.json$"
)
_NOT_SETTINGS = frozenset({"slug", "members", *COLLECTIONS})


def canonical(tenant: TenantSpec) -> TenantSpec:
    """``tenant`` with each collection in name order (and its members by subject): the order
    resources were asked for in never shows in what is rendered, so two changes that add
    different resources render the same tenant whichever merges first."""
    return dataclasses.replace(
        tenant,
        shares=tuple(sorted(tenant.shares, key=lambda s: s.name)),
        clusters=tuple(sorted(tenant.clusters, key=lambda c: c.name)),
        endpoints=tuple(sorted(tenant.endpoints, key=lambda e: e.name)),
        reservations=tuple(sorted(tenant.reservations, key=lambda r: r.name)),
        members=tuple(sorted(tenant.members, key=lambda m: (m.subject, m.name))),
    )


def to_json(item: Any) -> dict[str, Any]:
    """A spec dataclass as JSON data: tuples become lists."""
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in dataclasses.asdict(item).items()
    }


@functools.cache
def _shape(cls: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A dataclass's type hints and field names (slow to compute, so once per class)."""
    return get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls))


def from_json(
    cls: Any,
    data: Any,
    *,
    exclude: frozenset[str] = frozenset(),
    given: Mapping[str, Any] | None = None,
) -> Any:
    """The dataclass ``cls`` from JSON data; an unknown key is an error, not ignored. Fields in
    ``exclude`` may not be in ``data``; ``given`` sets fields the data does not hold."""
    if not isinstance(data, dict):
        raise SpecError({"": f"expected an object for {cls.__name__}"})
    hints, fields = _shape(cls)
    unknown = set(data) - (fields - exclude)
    if unknown:
        raise SpecError({key: "Unknown field." for key in sorted(unknown)})
    data = {**data, **(given or {})}
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


def _dump(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def render_spec_files(tenant: TenantSpec) -> dict[str, bytes]:
    """``{path under tenants/<slug>/: bytes}`` of the tenant's spec."""
    settings = {key: value for key, value in to_json(tenant).items() if key not in _NOT_SETTINGS}
    if not tenant.mig_allowed:
        # Absent by default, so the tenants that never had it keep their settings file as is
        # (a new key in every file would be a settings change no request of theirs asked for).
        del settings["mig_allowed"]
    files = {
        SETTINGS_FILE: _dump(settings),
        MEMBERS_FILE: _dump([to_json(m) for m in canonical(tenant).members]),
    }
    for collection in COLLECTIONS:
        for item in getattr(tenant, collection):
            files[f"{SPEC_DIR}/{collection}/{item.name}.json"] = _dump(to_json(item))
    return files


def is_spec_path(path: str) -> bool:
    """Whether ``path`` (relative to the tenant's directory) is one of its spec files."""
    return path.startswith(f"{SPEC_DIR}/")


def item_of(path: str) -> tuple[str, str] | None:
    """(collection, name) of a spec file of one resource; None for any other path."""
    match = _ITEM.match(path)
    return (match.group(1), match.group(2)) if match else None


def parse_spec_files(slug: str, files: Mapping[str, bytes]) -> TenantSpec:
    """The tenant whose spec files (paths relative to its directory) are ``files``; a file
    that is not JSON of the right shape, or that is not where a spec file may be, is a
    ``SpecError`` naming it."""
    errors: dict[str, str] = {}
    collections: dict[str, list[Any]] = {name: [] for name in COLLECTIONS}

    def load(path: str, cls: Any, **kwargs: Any) -> Any:
        try:
            return from_json(cls, json.loads(files[path]), **kwargs)
        except SpecError as exc:
            errors[f"tenants/{slug}/{path}"] = str(exc)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            errors[f"tenants/{slug}/{path}"] = f"not JSON: {exc}"
        return None

    if SETTINGS_FILE not in files:
        raise SpecError({f"tenants/{slug}/{SETTINGS_FILE}": "missing"})
    settings = load(SETTINGS_FILE, TenantSpec, exclude=_NOT_SETTINGS, given={"slug": slug})
    members: list[ClusterMember] = []
    if MEMBERS_FILE in files:
        try:
            raw: Any = json.loads(files[MEMBERS_FILE])
        except ValueError as exc:
            errors[f"tenants/{slug}/{MEMBERS_FILE}"] = f"not JSON: {exc}"
            raw = []
        if not isinstance(raw, list):
            errors[f"tenants/{slug}/{MEMBERS_FILE}"] = "expected a list of members"
            raw = []
        for index, entry in enumerate(raw):
            try:
                members.append(from_json(ClusterMember, entry))
            except SpecError as exc:
                errors[f"tenants/{slug}/{MEMBERS_FILE}[{index}]"] = str(exc)
    for path in sorted(files):
        if path in (SETTINGS_FILE, MEMBERS_FILE):
            continue
        where = item_of(path)
        if where is None:
            errors[f"tenants/{slug}/{path}"] = "not a spec file (spec/<collection>/<name>.json)"
            continue
        collection, name = where
        item = load(path, COLLECTIONS[collection])
        if item is not None and item.name != name:
            errors[f"tenants/{slug}/{path}"] = f"holds {collection} item {item.name!r}"
        elif item is not None:
            collections[collection].append(item)
    if errors or settings is None:
        raise SpecError(errors)
    return canonical(
        dataclasses.replace(
            settings,
            slug=slug,
            members=tuple(members),
            **{name: tuple(items) for name, items in collections.items()},
        )
    )
