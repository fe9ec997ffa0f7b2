"""Kubernetes RBAC as the API server evaluates it, for the host API (``server.py``) and the
tenants' virtual clusters (``virtual.py``).

- **Rule matching** is kubernetes ``plugin/pkg/auth/authorizer/rbac/rbac.go`` ``RuleAllows``
  with the helpers of ``pkg/apis/rbac/v1/evaluation_helpers.go`` (v1.34): ``*`` matches any
  verb, API group or resource; a rule's resource matches the request's ``resource/subresource``
  exactly, and ``*/<subresource>`` matches that subresource of any resource; a rule without
  ``resourceNames`` matches every name; non-resource URLs match exactly or by a ``*`` suffix.
- **Rule resolution** is ``pkg/registry/rbac/validation/rule.go`` ``VisitRulesFor``: the rules
  of every ClusterRoleBinding whose subjects include the user, then, for a request in a
  namespace, of every RoleBinding there, whose ``roleRef`` names a Role of that namespace or a
  ClusterRole; a subject applies by ``appliesToUser`` (a User by name, a Group by membership, a
  ServiceAccount by its ``system:serviceaccount:<ns>:<name>`` user name, its namespace the
  binding's when left out). A binding to a missing role grants nothing. ClusterRole
  ``aggregationRule`` is not evaluated: an aggregated role has the rules written in it.
- **Refusals** carry ``forbiddenMessage`` of k8s.io/apiserver ``pkg/endpoints/handlers/
  responsewriters/errors.go`` inside ``apierrors.NewForbidden``.
- **Impersonation** (k8s.io/apiserver ``pkg/endpoints/filters/impersonation.go``, v0.34):
  ``Impersonate-User``, ``Impersonate-Group`` (repeated), ``Impersonate-Extra-<key>`` (a value
  per header value) and ``Impersonate-Uid``, each authorised for the requester; see
  ``impersonated``.

The bootstrap roles are those of ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``
(``cluster-admin``; ``admin``, ``edit`` and ``view`` with the rules aggregated into them, abridged
to the core workload kinds; ``system:basic-user`` and ``system:discovery`` for every
authenticated user).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from simulator.store import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
    JsonObject,
    Store,
    as_dict,
    as_list,
)

RBAC_GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_VIEW_CORE = [
    "configmaps",
    "endpoints",
    "events",
    "limitranges",
    "namespaces",
    "persistentvolumeclaims",
    "pods",
    "pods/log",
    "pods/status",
    "replicationcontrollers",
    "resourcequotas",
    "serviceaccounts",
    "services",
]
_APPS = ["daemonsets", "deployments", "deployments/scale", "replicasets", "statefulsets"]
_BATCH = ["cronjobs", "jobs"]
_VIEW: list[JsonObject] = [
    {"apiGroups": [""], "resources": _VIEW_CORE, "verbs": _READ},
    {"apiGroups": ["apps"], "resources": _APPS, "verbs": _READ},
    {"apiGroups": ["batch"], "resources": _BATCH, "verbs": _READ},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _READ},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses", "networkpolicies"],
        "verbs": _READ,
    },
]
_EDIT: list[JsonObject] = [
    *_VIEW,
    {"apiGroups": [""], "resources": ["secrets", "pods/exec", "pods/attach"], "verbs": _READ},
    {
        "apiGroups": [""],
        "resources": [
            "configmaps",
            "persistentvolumeclaims",
            "pods",
            "pods/attach",
            "pods/exec",
            "pods/portforward",
            "secrets",
            "serviceaccounts",
            "services",
        ],
        "verbs": _WRITE,
    },
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": _APPS, "verbs": _WRITE},
    {"apiGroups": ["batch"], "resources": _BATCH, "verbs": _WRITE},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses", "networkpolicies"],
        "verbs": _WRITE,
    },
]
_ADMIN: list[JsonObject] = [
    *_EDIT,
    {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": [*_READ, *_WRITE]},
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["localsubjectaccessreviews"],
        "verbs": ["create"],
    },
]
BOOTSTRAP_ROLES: dict[str, list[JsonObject]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "admin": _ADMIN,
    "edit": _EDIT,
    "view": _VIEW,
    "system:basic-user": [
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["selfsubjectreviews"],
            "verbs": ["create"],
        },
    ],
    "system:discovery": [
        {
            "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/version"],
            "verbs": ["get"],
        }
    ],
}
BOOTSTRAP_BINDINGS: dict[str, str] = {
    "cluster-admin": MASTERS,
    "system:basic-user": AUTHENTICATED,
    "system:discovery": AUTHENTICATED,
}


@dataclass(frozen=True)
class UserInfo:
    """Who a request comes from once authenticated (and impersonated)."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    # user.Info's Extra: (key, values) pairs, as an impersonating requester set them.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def all_groups(self) -> tuple[str, ...]:
        """The groups with ``system:authenticated``, which every authenticated user is in."""
        if AUTHENTICATED in self.groups or UNAUTHENTICATED in self.groups:
            return self.groups
        return (*self.groups, AUTHENTICATED)


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do, as the authorizer sees it."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of ``system:serviceaccount:<namespace>:<name>``, or None when the
    name is not one (k8s.io/apiserver ``pkg/authentication/serviceaccount`` ``SplitUsername``:
    exactly two parts, a namespace and a valid service account name)."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    parts = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":")
    if len(parts) != 2:
        return None
    namespace, name = parts
    if not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        return None
    return namespace, name


def service_account_groups(namespace: str) -> tuple[str, ...]:
    """k8s.io/apiserver ``serviceaccount.MakeGroupNames``."""
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


# --- rule matching (pkg/apis/rbac/v1/evaluation_helpers.go) ---------------------------------


def _listed(values: Iterable[Any], wanted: str) -> bool:
    """``VerbMatches``/``APIGroupMatches``: the value itself or ``*``."""
    listed = [str(v) for v in values]
    return "*" in listed or wanted in listed


def resource_matches(rule: Mapping[str, Any], combined: str, subresource: str) -> bool:
    """``ResourceMatches``: ``*``, the ``resource/subresource`` exactly, or ``*/subresource``."""
    for resource in (str(r) for r in as_list(rule.get("resources"))):
        if resource in ("*", combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def non_resource_url_matches(rule: Mapping[str, Any], path: str) -> bool:
    """``NonResourceURLMatches``: ``*``, the path exactly, or a prefix ending in ``*``."""
    for url in (str(u) for u in as_list(rule.get("nonResourceURLs"))):
        if url in ("*", path) or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], request: Attributes) -> bool:
    """rbac.go ``RuleAllows``: verb, API group, resource (with its subresource) and name, or
    verb and non-resource path."""
    if not _listed(as_list(rule.get("verbs")), request.verb):
        return False
    if not request.is_resource:
        return non_resource_url_matches(rule, request.path)
    combined = (
        f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    )
    names = [str(n) for n in as_list(rule.get("resourceNames"))]
    return (
        _listed(as_list(rule.get("apiGroups")), request.group)
        and resource_matches(rule, combined, request.subresource)
        and (not names or request.name in names)
    )


# --- rule resolution (pkg/registry/rbac/validation/rule.go) ---------------------------------


def applies_to_user(user: UserInfo, subject: Any, namespace: str) -> bool:
    """``appliesToUser``: does binding ``subject`` name ``user``? A ServiceAccount subject
    without a namespace is one of the binding's namespace (``namespace``, "" for a
    ClusterRoleBinding, where it then names nobody)."""
    subject = as_dict(subject)
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.all_groups
    if kind == "ServiceAccount":
        account_namespace = str(subject.get("namespace") or namespace)
        if not account_namespace:
            return False
        return user.name == f"{SERVICE_ACCOUNT_PREFIX}{account_namespace}:{name}"
    return False


def _role_rules(store: Store, role_ref: Any, namespace: str) -> list[JsonObject]:
    """``GetRoleReferenceRules``: the rules of a binding's Role (in ``namespace``) or
    ClusterRole; none when it is missing."""
    ref = as_dict(role_ref)
    name = str(ref.get("name") or "")
    if ref.get("kind") == "Role" and namespace:
        role = store.get(ROLES, namespace, name)
    elif ref.get("kind") == "ClusterRole":
        role = store.get(CLUSTER_ROLES, "", name)
    else:
        role = None
    return [as_dict(rule) for rule in as_list(as_dict(role).get("rules"))] if role else []


def rules_for(store: Store, user: UserInfo, namespace: str) -> list[JsonObject]:
    """``VisitRulesFor``: every rule bound to ``user`` cluster-wide and, for a namespace, in
    it."""
    rules: list[JsonObject] = []
    with store.lock:
        for binding in store.list(CLUSTER_ROLE_BINDINGS):
            if any(applies_to_user(user, s, "") for s in as_list(binding.get("subjects"))):
                rules += _role_rules(store, binding.get("roleRef"), "")
        if namespace:
            for binding in store.list(ROLE_BINDINGS, namespace):
                subjects = as_list(binding.get("subjects"))
                if any(applies_to_user(user, s, namespace) for s in subjects):
                    rules += _role_rules(store, binding.get("roleRef"), namespace)
    return rules


def allowed(store: Store, user: UserInfo, request: Attributes) -> bool:
    """``RBACAuthorizer.Authorize``: allowed when one rule bound to the user allows it."""
    return any(rule_allows(rule, request) for rule in rules_for(store, user, request.namespace))


def bootstrap_objects() -> list[JsonObject]:
    """The bootstrap ClusterRoles and ClusterRoleBindings an API server creates at start."""
    objects: list[JsonObject] = [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        }
        for name, rules in BOOTSTRAP_ROLES.items()
    ]
    objects += [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group}],
        }
        for name, group in BOOTSTRAP_BINDINGS.items()
    ]
    return objects


# --- impersonation (k8s.io/apiserver pkg/endpoints/filters/impersonation.go) ----------------

IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"
IMPERSONATE_UID = "Impersonate-Uid"
IMPERSONATE_EXTRA_PREFIX = "Impersonate-Extra-"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def extra_key(header: str) -> str | None:
    """The user extra key an ``Impersonate-Extra-<key>`` header sets, None for any other
    header: ``buildImpersonationRequests`` lowercases the rest of the name and
    ``unescapeExtraKey`` percent-decodes it (url.PathUnescape), keeping it as it is when that
    fails."""
    if header[: len(IMPERSONATE_EXTRA_PREFIX)].lower() != IMPERSONATE_EXTRA_PREFIX.lower():
        return None
    key = header[len(IMPERSONATE_EXTRA_PREFIX) :].lower()
    return key if _BAD_ESCAPE.search(key) else unquote(key)


class ImpersonationInvalid(ValueError):
    """Impersonation headers the filter refuses before authorising them (HTTP 500, as
    ``buildImpersonationRequests``'s error is answered with ``InternalError``)."""


@dataclass(frozen=True)
class Impersonation:
    """What the headers ask to act as, and what the requester must be allowed to
    ``impersonate`` for it (one Attributes per user, group and uid)."""

    user: UserInfo
    checks: tuple[Attributes, ...]


def impersonated(
    username: str,
    groups: Sequence[str],
    uid: str,
    extra: Sequence[tuple[str, str]] = (),
) -> Impersonation | None:
    """The user the request acts as, from its impersonation headers; None without them.

    ``buildImpersonationRequests``: a user name that splits as a service account is one
    (``impersonate`` on ``serviceaccounts`` named so *in its namespace*, and its groups when
    none are given), any other a user (``impersonate`` on ``users``); groups (``groups``),
    each (key, value) of ``extra`` (``userextras`` with the key as the subresource and the
    value as the name, in ``authentication.k8s.io``, cluster-wide) and the uid (``uids`` in
    ``authentication.k8s.io``) need a user. ``WithImpersonation`` then adds
    ``system:authenticated`` unless a group says ``system:authenticated`` or
    ``system:unauthenticated`` already."""
    if not username:
        if groups or uid or extra:
            asked = (
                [f"Group {g}" for g in groups]
                + [f"UserExtra {key}={value}" for key, value in extra]
                + ([f"UID {uid}"] if uid else [])
            )
            raise ImpersonationInvalid(
                f"requested [{' '.join(asked)}] without impersonating a user"
            )
        return None
    checks: list[Attributes] = []
    found: list[str] = []
    account = split_service_account(username)
    if account is not None:
        checks.append(
            Attributes("impersonate", "", "serviceaccounts", namespace=account[0], name=account[1])
        )
        if not groups:
            found += service_account_groups(account[0])
    else:
        checks.append(Attributes("impersonate", "", "users", name=username))
    for group in groups:
        checks.append(Attributes("impersonate", "", "groups", name=group))
        found.append(group)
    extras: dict[str, list[str]] = {}
    for key, value in extra:
        checks.append(
            Attributes(
                "impersonate", "authentication.k8s.io", "userextras", subresource=key, name=value
            )
        )
        extras.setdefault(key, []).append(value)
    if uid:
        checks.append(Attributes("impersonate", "authentication.k8s.io", "uids", name=uid))
    if username == ANONYMOUS:
        if UNAUTHENTICATED not in found:
            found.append(UNAUTHENTICATED)
    elif not {AUTHENTICATED, UNAUTHENTICATED} & set(found):
        found.append(AUTHENTICATED)
    user = UserInfo(
        username,
        tuple(found),
        uid,
        tuple((key, tuple(values)) for key, values in extras.items()),
    )
    return Impersonation(user, tuple(checks))


def forbidden_message(user: UserInfo, request: Attributes) -> str:
    """The API server's Forbidden message (``handlers/responsewriters/errors.go``
    ``forbiddenMessage``, wrapped by ``apierrors.NewForbidden``)."""
    if not request.is_resource:
        who, path = json.dumps(user.name), json.dumps(request.path)
        return f"forbidden: User {who} cannot {request.verb} path {path}"
    resource = (
        f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    )
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    what = f'{qualified} "{request.name}"' if request.name else qualified
    where = (
        f"in the namespace {json.dumps(request.namespace)}"
        if request.namespace
        else "at the cluster scope"
    )
    return (
        f"{what} is forbidden: User {json.dumps(user.name)} cannot {request.verb} resource "
        f"{json.dumps(resource)} in API group {json.dumps(request.group)} {where}"
    )
