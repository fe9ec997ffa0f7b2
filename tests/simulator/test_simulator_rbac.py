"""RBAC rule matching and resolution (``simulator/rbac.py``), transcribed from kubernetes
``plugin/pkg/auth/authorizer/rbac/rbac_test.go`` (``TestAuthorizer``, ``TestRuleMatches``) and
``pkg/apis/rbac/v1/evaluation_helpers.go`` (``*/subresource``), and the impersonation filter's
user (k8s.io/apiserver ``pkg/endpoints/filters/impersonation.go``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from simulator.rbac import (
    Attributes,
    ImpersonationInvalid,
    UserInfo,
    allowed,
    extra_key,
    impersonated,
    rule_allows,
)
from simulator.store import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, Store

RBAC = "rbac.authorization.k8s.io"


def rule(verbs: str, groups: str, resources: str, urls: str = "") -> dict[str, Any]:
    """rbac_test.go ``newRule``: comma-separated lists."""
    return {
        "verbs": verbs.split(","),
        "apiGroups": groups.split(","),
        "resources": resources.split(","),
        "nonResourceURLs": urls.split(","),
    }


def subjects(*given: str) -> list[dict[str, str]]:
    kinds = [s.split(":", 1) for s in given]
    return [{"apiGroup": RBAC, "kind": kind, "name": name} for kind, name in kinds]


def store(
    cluster_roles: dict[str, list[dict[str, Any]]],
    role_bindings: Sequence[tuple[str, str, list[str]]] = (),
    cluster_role_bindings: Sequence[tuple[str, list[str]]] = (),
) -> Store:
    found = Store()
    for name, rules in cluster_roles.items():
        found.apply(CLUSTER_ROLES, {"metadata": {"name": name}, "rules": rules}, 0)
    for index, (namespace, role, who) in enumerate(role_bindings):
        found.apply(
            ROLE_BINDINGS,
            {
                "metadata": {"name": f"b{index}", "namespace": namespace},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                "subjects": subjects(*who),
            },
            0,
        )
    for index, (role, who) in enumerate(cluster_role_bindings):
        found.apply(
            CLUSTER_ROLE_BINDINGS,
            {
                "metadata": {"name": f"c{index}"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                "subjects": subjects(*who),
            },
            0,
        )
    return found


def attributes(
    user: str, groups: str, verb: str, resource: str, subresource: str, namespace: str
) -> tuple[UserInfo, Attributes]:
    """rbac_test.go ``defaultAttributes`` (groups comma-separated, as it splits them)."""
    return UserInfo(user, tuple(groups.split(","))), Attributes(
        verb, "", resource, subresource, namespace
    )


def test_authorizer_role_binding_to_a_cluster_role() -> None:
    """TestAuthorizer, case 0: admin bound in ns1 to a User and a Group."""
    rbac = store(
        {"admin": [rule("*", "*", "*", "*")]},
        role_bindings=[("ns1", "admin", ["User:admin", "Group:admins"])],
    )
    for case in [
        ("admin", "", "get", "Pods", "", "ns1"),
        ("admin", "", "watch", "Pods", "", "ns1"),
        ("admin", "group1", "watch", "Foobar", "", "ns1"),
        ("joe", "admins", "watch", "Foobar", "", "ns1"),
        ("joe", "group1,admins", "watch", "Foobar", "", "ns1"),
    ]:
        assert allowed(rbac, *attributes(*case)), case
    for case in [
        ("admin", "", "GET", "Pods", "", "ns2"),
        ("admin", "", "GET", "Nodes", "", ""),
        ("admin", "admins", "GET", "Pods", "", "ns2"),
        ("admin", "admins", "GET", "Nodes", "", ""),
    ]:
        assert not allowed(rbac, *attributes(*case)), case


def test_authorizer_non_resource_urls() -> None:
    """TestAuthorizer, case 1: ClusterRoleBindings of non-resource URL rules."""
    rbac = store(
        {
            "non-resource-url-getter": [rule("get", "", "", "/apis")],
            "non-resource-url": [rule("*", "", "", "/apis")],
            "non-resource-url-prefix": [rule("get", "", "", "/apis/*")],
        },
        cluster_role_bindings=[
            ("non-resource-url-getter", ["User:foo", "Group:bar"]),
            ("non-resource-url", ["User:admin", "Group:admin"]),
            ("non-resource-url-prefix", ["User:prefixed", "Group:prefixed"]),
        ],
    )

    def may(name: str, groups: tuple[str, ...], verb: str, path: str) -> bool:
        return allowed(rbac, UserInfo(name, groups), Attributes(verb, path=path))

    assert may("foo", (), "get", "/apis")
    assert may("", ("bar",), "get", "/apis")
    assert may("admin", (), "watch", "/apis")
    assert may("", ("admin",), "watch", "/apis")
    assert may("prefixed", (), "get", "/apis/v1")
    assert may("", ("prefixed",), "get", "/apis/v1/foobar")
    assert not may("foo", (), "watch", "/apis")  # wrong verb
    assert not may("", ("bar",), "get", "/api/v1")  # wrong path
    assert not may("admin", (), "get", "/api/v1")
    assert not may("prefixed", (), "get", "/api/v1")  # not covered by the prefix


@pytest.mark.parametrize(
    ("resources", "passes", "fails"),
    [
        # TestAuthorizer, cases 2 and 3: subresource resolution.
        ("pods", ("pods", ""), ("pods", "status")),
        ("pods/status", ("pods", "status"), ("pods", "")),
    ],
)
def test_authorizer_subresource_resolution(
    resources: str, passes: tuple[str, str], fails: tuple[str, str]
) -> None:
    rbac = store(
        {"admin": [rule("*", "*", resources, "*")]},
        role_bindings=[("ns1", "admin", ["User:admin", "Group:admins"])],
    )
    assert allowed(rbac, *attributes("admin", "", "get", *passes, "ns1"))
    assert not allowed(rbac, *attributes("admin", "", "get", *fails, "ns1"))


def request(verb: str, group: str, resource: str, subresource: str = "") -> Attributes:
    return Attributes(verb, group, resource, subresource)


CASES = {
    "star verb, exact match other": (
        {"verbs": ["*"], "apiGroups": ["group1"], "resources": ["resource1"]},
        {("verb1", "group1", "resource1"), ("verb2", "group1", "resource1")},
    ),
    "star group, exact match other": (
        {"verbs": ["verb1"], "apiGroups": ["*"], "resources": ["resource1"]},
        {("verb1", "group1", "resource1"), ("verb1", "group2", "resource1")},
    ),
    "star resource, exact match other": (
        {"verbs": ["verb1"], "apiGroups": ["group1"], "resources": ["*"]},
        {("verb1", "group1", "resource1"), ("verb1", "group1", "resource2")},
    ),
    "tuple expansion": (
        {
            "verbs": ["verb1", "verb2"],
            "apiGroups": ["group1", "group2"],
            "resources": ["resource1", "resource2"],
        },
        {
            (verb, group, resource)
            for verb in ("verb1", "verb2")
            for group in ("group1", "group2")
            for resource in ("resource1", "resource2")
        },
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches(name: str) -> None:
    """TestRuleMatches: every combination of two verbs, groups and resources, allowed exactly
    when listed."""
    policy, expected = CASES[name]
    for verb in ("verb1", "verb2"):
        for group in ("group1", "group2"):
            for resource in ("resource1", "resource2"):
                wanted = (verb, group, resource) in expected
                assert rule_allows(policy, request(verb, group, resource)) == wanted


def test_rule_matches_subresource_expansion() -> None:
    """TestRuleMatches "subresource expansion", and ``*/<subresource>``
    (evaluation_helpers.go ``ResourceMatches``)."""
    policy = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["resource1/subresource1"]}
    assert rule_allows(policy, request("verb1", "group1", "resource1", "subresource1"))
    assert not rule_allows(policy, request("verb1", "group2", "resource1", "subresource2"))
    assert not rule_allows(policy, request("verb1", "group1", "resource2", "subresource1"))
    assert not rule_allows(policy, request("verb1", "group1", "resource1"))
    any_log = {"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}
    assert rule_allows(any_log, request("get", "", "pods", "log"))
    assert not rule_allows(any_log, request("get", "", "pods"))
    assert not rule_allows(any_log, request("get", "", "pods", "status"))


def test_rule_matches_non_resource_urls() -> None:
    """TestRuleMatches "star nonresource, exact match other" and "star nonresource subpath"."""
    star = {"verbs": ["verb1"], "nonResourceURLs": ["*"]}
    for url in ("/foo", "/foo/bar", "/foo/baz", "/foo/bar/one", "/foo/baz/one"):
        assert rule_allows(star, Attributes("verb1", path=url))
        assert not rule_allows(star, Attributes("verb2", path=url))
    sub = {"verbs": ["verb1"], "nonResourceURLs": ["/foo/*"]}
    assert not rule_allows(sub, Attributes("verb1", path="/foo"))
    assert rule_allows(sub, Attributes("verb1", path="/foo/bar"))
    assert rule_allows(sub, Attributes("verb1", path="/foo/bar/one"))


def test_resource_names_narrow_a_rule() -> None:
    policy = {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]}
    assert rule_allows(policy, Attributes("get", "", "secrets", name="a"))
    assert not rule_allows(policy, Attributes("get", "", "secrets", name="b"))
    assert not rule_allows(policy, Attributes("list", "", "secrets"))


def test_the_impersonated_user() -> None:
    assert impersonated("", (), "") is None
    member = impersonated("ann", ("tenant:a",), "u1")
    assert member is not None
    assert member.user == UserInfo("ann", ("tenant:a", "system:authenticated"), "u1")
    assert [(c.resource, c.name) for c in member.checks] == [
        ("users", "ann"),
        ("groups", "tenant:a"),
        ("uids", "u1"),
    ]
    account = impersonated("system:serviceaccount:ns:runner", (), "")
    assert account is not None
    assert account.user.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:ns",
        "system:authenticated",
    )
    assert account.checks[0] == Attributes(
        "impersonate", "", "serviceaccounts", namespace="ns", name="runner"
    )
    anonymous = impersonated("system:anonymous", (), "")
    assert anonymous is not None and anonymous.user.groups == ("system:unauthenticated",)
    with pytest.raises(ImpersonationInvalid, match="without impersonating a user"):
        impersonated("", ("g",), "")
    with pytest.raises(ImpersonationInvalid, match="without impersonating a user"):
        impersonated("", (), "", [("ai-factory.io/member", "bob")])


def test_user_extras_are_impersonated_per_value_at_the_cluster_scope() -> None:
    asked = impersonated(
        "system:serviceaccount:ns:runner",
        (),
        "",
        [("ai-factory.io/member", "bob"), ("scopes", "a"), ("scopes", "b")],
    )
    assert asked is not None
    assert asked.user.extra == (("ai-factory.io/member", ("bob",)), ("scopes", ("a", "b")))
    # No groups sent: the account's own, still (extras are not groups).
    assert "system:serviceaccounts:ns" in asked.user.groups
    assert asked.checks[1:] == (
        Attributes(
            "impersonate",
            "authentication.k8s.io",
            "userextras",
            subresource="ai-factory.io/member",
            name="bob",
        ),
        Attributes(
            "impersonate", "authentication.k8s.io", "userextras", subresource="scopes", name="a"
        ),
        Attributes(
            "impersonate", "authentication.k8s.io", "userextras", subresource="scopes", name="b"
        ),
    )
    # A rule on one key, with or without names (RBAC's resource/subresource match).
    grant = {
        "verbs": ["impersonate"],
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["userextras/ai-factory.io/member"],
    }
    assert rule_allows(grant, asked.checks[1])
    assert not rule_allows(grant, asked.checks[2])


@pytest.mark.parametrize(
    ("header", "key"),
    [
        # buildImpersonationRequests lowercases, unescapeExtraKey percent-decodes.
        ("Impersonate-Extra-AI-Factory.io%2Fmember", "ai-factory.io/member"),
        ("impersonate-extra-scopes", "scopes"),
        # A malformed escape is kept as it is (url.PathUnescape fails).
        ("Impersonate-Extra-100%zz", "100%zz"),
        ("Impersonate-User", None),
    ],
)
def test_extra_keys_from_headers(header: str, key: str | None) -> None:
    assert extra_key(header) == key
