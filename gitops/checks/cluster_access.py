"""Rules for the members' bindings in tenant clusters (``gitops.render.cluster_access``), and
whether a change does nothing but take cluster access away.

``tenants/<slug>/cluster-access/<cluster>/`` is applied into the tenant's *virtual* cluster,
with the platform's identity there, by a Flux Kustomization whose ``spec.kubeConfig`` names the
cluster's kubeconfig Secret. So:

- ``cluster-access``: an object there may only be a ClusterRoleBinding of one of the three roles
  the portal hands out, to users carrying the identity provider's prefix. Anything else has no
  business in a virtual cluster the platform writes to, and a binding to any other subject
  would give cluster access to someone the portal does not know as a member;
- ``cluster-access-target``: a Kustomization that applies to a remote cluster must read a
  tenant's ``cluster-access/``, and one that applies to the host must not: the host's API
  server may trust the same provider, and the bindings give ``cluster-admin``.

``narrows_only`` is the rule for merging without a review: every changed file is an existing
bindings file, still valid, and every (user, role) it grants afterwards was granted before with
that role or a wider one. Such a change can only take access away, so holding it for a reviewer
would only keep a removed member in the cluster longer.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gitops.checks.findings import Finding, mapping, object_ref, sequence
from gitops.checks.manifests import load_documents
from gitops.render.cluster_access import (
    ACCESS_DIR,
    BINDINGS_FILE,
    CLUSTER_ROLES,
    RBAC_API,
    RBAC_GROUP,
    ROLE_ORDER,
    USERNAME_PREFIX,
)
from gitops.render.specfiles import MEMBERS_FILE

ALLOWED_ROLES = frozenset(CLUSTER_ROLES.values())
RANK = {role: index for index, role in enumerate(ROLE_ORDER)}


def access_dir(path: str) -> str | None:
    """``tenants/<slug>/cluster-access/<cluster>`` for a path inside one, else None."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[0] == "tenants" and parts[2] == ACCESS_DIR:
        return "/".join(parts[:4])
    return None


def is_bindings_file(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 5 and access_dir(path) is not None and parts[4] == BINDINGS_FILE


def object_findings(path: str, obj: Mapping[str, Any]) -> list[Finding]:
    """What an object applied into a virtual cluster may not be."""
    ref = object_ref(obj)

    def finding(message: str) -> Finding:
        return Finding(path, ref, "cluster-access", message)

    if obj.get("apiVersion") != RBAC_API or obj.get("kind") != "ClusterRoleBinding":
        return [
            finding(
                f"only ClusterRoleBindings ({RBAC_API}) of members belong in {ACCESS_DIR}/, "
                f"not {obj.get('apiVersion')} {obj.get('kind')}"
            )
        ]
    findings: list[Finding] = []
    role_ref = mapping(obj.get("roleRef"))
    if role_ref.get("kind") != "ClusterRole" or role_ref.get("name") not in ALLOWED_ROLES:
        findings.append(
            finding(
                f"roleRef must be one of the ClusterRoles {', '.join(sorted(ALLOWED_ROLES))}, "
                f"not {role_ref.get('kind')} {role_ref.get('name')!r}"
            )
        )
    subjects = sequence(obj.get("subjects"))
    if not subjects:
        findings.append(finding("a member binding names its member in subjects"))
    for index, subject in enumerate(subjects):
        subject = mapping(subject)
        name = subject.get("name")
        if (
            subject.get("kind") != "User"
            or subject.get("apiGroup") != RBAC_GROUP
            or not isinstance(name, str)
            or not name.startswith(USERNAME_PREFIX)
            or len(name) == len(USERNAME_PREFIX)
        ):
            findings.append(
                finding(
                    f"subjects[{index}] must be a User whose name starts with "
                    f"{USERNAME_PREFIX!r} (a person the identity provider vouches for)"
                )
            )
    return findings


def kustomization_findings(path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
    """A tenant's Flux Kustomization: remote ones apply bindings, and only they do."""
    spec = mapping(obj.get("spec"))
    raw = spec.get("path")
    target = posixpath.normpath(raw.removeprefix("./")) if isinstance(raw, str) and raw else "."
    into_access = target == f"tenants/{slug}/{ACCESS_DIR}" or target.startswith(
        f"tenants/{slug}/{ACCESS_DIR}/"
    )
    remote = spec.get("kubeConfig") is not None
    if remote and not into_access:
        message = (
            f"a Kustomization with spec.kubeConfig applies to another cluster with the "
            f"platform's identity there; it may only apply tenants/{slug}/{ACCESS_DIR}/"
        )
    elif into_access and not remote:
        message = (
            f"{ACCESS_DIR}/ holds bindings for the tenant's virtual clusters; applied to the "
            "host cluster they would give the members rights there (set spec.kubeConfig)"
        )
    else:
        return []
    return [Finding(path, object_ref(obj), "cluster-access-target", message)]


def is_access_file(path: str) -> bool:
    """A file a change of who may use the tenant's clusters writes: a cluster's bindings, or
    the members they are rendered from."""
    return is_bindings_file(path) or _is_members_file(path)


def _is_members_file(path: str) -> bool:
    """``tenants/<slug>/spec/members.json``: the members the bindings are rendered from."""
    parts = path.split("/")
    return len(parts) == 4 and parts[0] == "tenants" and "/".join(parts[2:]) == MEMBERS_FILE


def _members_narrowed(before: bytes | None, after: bytes | None) -> str:
    """ "" when the members list ``after`` only drops members of ``before`` or gives them a
    narrower role; else why not."""
    try:
        old, new = json.loads(before or b"null"), json.loads(after or b"null")
    except ValueError:
        return "is not JSON"
    if not isinstance(old, list) or not isinstance(new, list):
        return "is new, deleted or not a list of members"

    def key(entry: Any) -> str:
        return json.dumps({k: v for k, v in entry.items() if k != "role"}, sort_keys=True)

    try:
        widest: dict[str, int] = {}
        for entry in old:
            widest[key(entry)] = max(widest.get(key(entry), -1), RANK[CLUSTER_ROLES[entry["role"]]])
        for entry in new:
            if RANK[CLUSTER_ROLES[entry["role"]]] > widest.get(key(entry), -1):
                return f"gives {entry.get('name', '?')} {entry['role']}, which they did not have"
    except (AttributeError, KeyError, TypeError):
        return "is not a list of members"
    return ""


def _grants(data: bytes | None) -> set[tuple[str, str]] | None:
    """(user, ClusterRole) pairs of a bindings file, or None when it is not one."""
    if data is None:
        return None
    try:
        docs = load_documents(data)
    except yaml.YAMLError:
        return None
    grants: set[tuple[str, str]] = set()
    for doc in docs:
        if not isinstance(doc, dict) or object_findings("", doc):
            return None
        role = str(mapping(doc.get("roleRef")).get("name"))
        for subject in sequence(doc.get("subjects")):
            grants.add((str(mapping(subject).get("name")), role))
    return grants


def narrows_only(
    base: Mapping[str, bytes], head: Mapping[str, bytes], changed: Iterable[str]
) -> tuple[bool, str]:
    """(True, what it takes away) when the change between ``base`` and ``head`` only removes
    members from tenant clusters or gives them a narrower role; else (False, why not)."""
    paths = sorted(set(changed))
    if not paths:
        return False, "the change changes nothing"
    removed: list[str] = []
    for path in paths:
        if _is_members_file(path):
            why = _members_narrowed(base.get(path), head.get(path))
            if why:
                return False, f"{path} {why}"
            continue
        if not is_bindings_file(path):
            return False, f"{path} is not a cluster's bindings file"
        before, after = _grants(base.get(path)), _grants(head.get(path))
        if before is None or after is None:
            return False, f"{path} is new, deleted or not only member bindings"
        widest: dict[str, int] = {}
        for user, role in before:
            widest[user] = max(widest.get(user, -1), RANK[role])
        for user, role in sorted(after):
            if RANK[role] > widest.get(user, -1):
                return False, f"{path} gives {user} {role}, which they did not have"
        cluster = path.split("/")[3]
        for user, role in sorted(before - after):
            removed.append(f"{user} ({role} in {cluster})")
    return True, "takes away: " + ", ".join(removed) if removed else "changes no grant"
