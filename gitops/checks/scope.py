"""What a change may touch of a tenant: only what its requests ask for.

Each change names its scope (``ChangeRequest.scope``): per tenant, the items it was asked to
add, change or remove, such as ``endpoints/chat``, ``shares/train``, ``settings`` (the
tenant's own settings) or ``members`` (who may use its clusters), or ``*`` for the whole
directory (onboarding, offboarding, a platform change made by hand). This check reads the
change's diff against its actual base and fails it when it adds, alters or deletes a file of
an item outside that scope: "this change deletes endpoint chat, which none of its requests
asks for". The merge queue runs it on a batch's combined tree with the union of its members'
scopes.

Files derived from the tenant's whole spec (its quota, queues, namespace, policies, the
kustomization) carry no item: they change with any request. What keeps them honest is the
second rule: a tenant directory the change touches must be exactly what its spec files
(``gitops.render.specfiles``) render to; a directory that is not is reported as a warning in
the details, since the next change of the tenant renders it again.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gitops.checks import partition
from gitops.render.specfiles import MEMBERS_FILE, SETTINGS_FILE, SPEC_DIR, parse_spec_files
from gitops.specs import FleetSpec, SpecError

EVERYTHING = "*"
# Whose directory: every tenant the scopes do not name (a change with no tenant of its own).
ANY_TENANT = "*"
_NAME = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?)"
# A file that belongs to one item (path under tenants/<slug>/ -> item). Everything else in a
# tenant's directory is derived from the whole spec.
# A reserved node is named after the node, which may hold dots.
_NODE = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?)"
_ITEMS = [
    (re.compile(rf"^{SPEC_DIR}/(shares|clusters|endpoints)/{_NAME}\.json$"), r"\1/\2"),
    (re.compile(rf"^{SPEC_DIR}/reservations/{_NODE}\.json$"), r"reservations/\1"),
    (re.compile(rf"^workloads/endpoints/{_NAME}\.yaml$"), r"endpoints/\1"),
    (re.compile(rf"^litellm/{_NAME}\.yaml$"), r"endpoints/\1"),
    (re.compile(rf"^workloads/gpu-shares/{_NAME}\.yaml$"), r"shares/\1"),
    (re.compile(rf"^clusters/{_NAME}\.yaml$"), r"clusters/\1"),
    (re.compile(rf"^cluster-access/{_NAME}/"), r"clusters/\1"),
]
_NOUN = {
    "shares": "GPU share",
    "clusters": "cluster",
    "endpoints": "endpoint",
    "reservations": "the reservation of node",
}


@dataclass(frozen=True)
class Violation:
    path: str
    verb: str  # adds, alters, deletes
    item: str

    def __str__(self) -> str:
        return (
            f"{self.path}: this change {self.verb} {describe(self.item)}, which none of its "
            "requests asks for"
        )


def item_of(relative: str) -> str | None:
    """The item a file of a tenant's directory belongs to (``endpoints/chat``, ``settings``,
    ``members``), or None for a file derived from the whole spec."""
    if relative == SETTINGS_FILE:
        return "settings"
    if relative == MEMBERS_FILE:
        return "members"
    for pattern, template in _ITEMS:
        match = pattern.match(relative)
        if match:
            return match.expand(template)
    return None


def describe(item: str) -> str:
    if item == "settings":
        return "the tenant's settings"
    if item == "members":
        return "who may use the tenant's clusters"
    kind, _, name = item.partition("/")
    return f"{_NOUN.get(kind, kind)} {name}"


def allowed(item: str, relative: str, scope: Collection[str]) -> bool:
    if EVERYTHING in scope or item in scope:
        return True
    # A cluster's bindings are rendered from the members: a members change rewrites them.
    return relative.startswith("cluster-access/") and "members" in scope


def violations(
    base: Mapping[str, bytes] | None,
    head: Mapping[str, bytes],
    changed: Iterable[str],
    scopes: Mapping[str, Collection[str]],
) -> list[Violation]:
    """Every file of an item outside the scope of its tenant that the change touches."""
    found = []
    for path in sorted(set(changed)):
        slug = partition.slug_of(path)
        if slug is None:
            continue
        scope = scopes.get(slug, scopes.get(ANY_TENANT, ()))
        relative = path.split("/", 2)[2]
        item = item_of(relative)
        if item is None or allowed(item, relative, scope):
            continue
        before = base.get(path) if base is not None else None
        after = head.get(path)
        if before == after and base is not None:
            continue
        verb = "deletes" if after is None else "adds" if before is None and base else "alters"
        found.append(Violation(path, verb, item))
    return found


def drift(head: Mapping[str, bytes], changed: Iterable[str], fleet: FleetSpec) -> list[str]:
    """For each tenant directory the change touches that carries its spec: the files that are
    not what the spec renders to (or the spec's own errors), as warnings."""
    notes = []
    fleet_key = repr(fleet).encode()
    for slug in sorted({s for s in map(partition.slug_of, changed) if s is not None}):
        prefix = f"tenants/{slug}/"
        files = {p: b for p, b in head.items() if p.startswith(prefix)}
        digest = hashlib.blake2b(fleet_key, digest_size=20)
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path] + b"\0")
        key = digest.digest()
        if key not in _DRIFT:
            _DRIFT[key] = _drift_of(slug, files, fleet)
            while len(_DRIFT) > 20_000:
                _DRIFT.popitem(last=False)
        notes += _DRIFT[key]
    return notes


# A directory's verdict by its content and the fleet: a batch checked again after one of its
# changes is left out renders none of the others again.
_DRIFT: OrderedDict[bytes, list[str]] = OrderedDict()


def _drift_of(slug: str, files: Mapping[str, bytes], fleet: FleetSpec) -> list[str]:
    from gitops.render.tree import render_tenant_tree  # the renderers import the checks' kin

    prefix = f"tenants/{slug}/"
    spec_prefix = f"{prefix}{SPEC_DIR}/"
    spec = {p[len(prefix) :]: b for p, b in files.items() if p.startswith(spec_prefix)}
    if not spec:
        return []  # written before directories carried their spec, or removed whole
    try:
        wanted = render_tenant_tree(parse_spec_files(slug, spec), fleet)
    except SpecError as exc:
        return [f"{prefix}{SPEC_DIR}: warning: the spec does not render: {exc}"]
    differ = sorted(p for p in set(files) | set(wanted) if files.get(p) != wanted.get(p))
    if not differ:
        return []
    shown = ", ".join(posixpath.relpath(p, prefix) for p in differ[:5])
    more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
    return [
        f"{prefix}: warning: {shown}{more} differ from what {prefix}{SPEC_DIR} renders "
        "(edited by hand?); the next change of the tenant renders them again"
    ]
