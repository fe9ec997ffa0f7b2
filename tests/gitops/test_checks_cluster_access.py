"""The rules for tenant clusters' member bindings, and which changes only take access away."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from gitops.checks.cluster_access import narrows_only
from gitops.checks.findings import Finding
from gitops.checks.isolation import check_isolation, platform_sources_in
from gitops.render import render_repository
from gitops.render.yamlio import dump_documents, load_documents
from gitops.specs import ClusterMember, TenantSpec
from tests.cluster_oidc import ISSUER, fleet_with_oidc
from tests.gitops.render_samples import rich_tenant

BINDINGS = "tenants/alpha/cluster-access/dev/bindings.yaml"
ACCESS = "tenants/alpha/clusters/dev.yaml"


def members(**roles: str) -> tuple[ClusterMember, ...]:
    return tuple(ClusterMember(name, role, ISSUER, f"sub-{name}") for name, role in roles.items())  # type: ignore[arg-type]


def tree(**roles: str) -> dict[str, bytes]:
    tenant: TenantSpec = dataclasses.replace(rich_tenant(), members=members(**roles))
    return dict(render_repository(fleet_with_oidc(), [tenant]))


def check(files: dict[str, bytes]) -> list[Finding]:
    fleet = fleet_with_oidc()
    return check_isolation(
        files,
        gateway_namespace=fleet.gateway.namespace,
        platform_sources=platform_sources_in(files),
        gateway_domain=fleet.gateway.hostname,
        portal_subject=(fleet.portal_namespace, fleet.portal_service_account),
        tenant_source_url=fleet.tenant_git_url,
    )


def edited(files: dict[str, bytes], path: str, change: Any) -> dict[str, bytes]:
    objs = load_documents(files[path])
    change(objs)
    return {**files, path: dump_documents(objs)}


def test_the_rendered_tree_passes() -> None:
    assert check(tree(ann="admin", bob="member")) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # A binding to a service account: a credential nobody can take back with membership.
        (
            lambda objs: objs[0].update(
                subjects=[{"kind": "ServiceAccount", "name": "ci", "namespace": "default"}]
            ),
            "must be a User whose name starts with 'oidc:'",
        ),
        # A user of another authenticator (a client certificate's CN, a system user).
        (
            lambda objs: objs[0]["subjects"][0].update(name="system:kube-controller-manager"),
            "must be a User whose name starts with 'oidc:'",
        ),
        (
            lambda objs: objs[0].update(roleRef={**objs[0]["roleRef"], "name": "system:node"}),
            "roleRef must be one of the ClusterRoles cluster-admin, edit, view",
        ),
        (
            lambda objs: objs.append(
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}}
            ),
            "only ClusterRoleBindings",
        ),
    ],
)
def test_only_member_bindings_go_into_the_virtual_cluster(change: Any, words: str) -> None:
    findings = check(edited(tree(ann="admin"), BINDINGS, change))
    assert [f.rule for f in findings] == ["cluster-access"]
    assert words in findings[0].message


def test_a_remote_kustomization_applies_only_bindings_and_a_host_one_never_does() -> None:
    files = tree(ann="admin")

    def host(objs: list[Any]) -> None:
        del objs[1]["spec"]["kubeConfig"]

    findings = check(edited(files, ACCESS, host))
    assert [f.rule for f in findings] == ["cluster-access-target"]
    assert "would give the members rights there" in findings[0].message

    def elsewhere(objs: list[Any]) -> None:
        objs[1]["spec"]["path"] = "./tenants/alpha/workloads"

    findings = check(edited(files, ACCESS, elsewhere))
    assert [f.rule for f in findings] == ["cluster-access-target"]
    assert "may only apply tenants/alpha/cluster-access/" in findings[0].message


def test_a_bindings_directory_includes_only_its_own_files() -> None:
    files = tree(ann="admin")
    path = "tenants/alpha/cluster-access/dev/kustomization.yaml"
    kustomization = yaml.safe_load(files[path])
    kustomization["resources"].append("../../namespace.yaml")
    findings = check({**files, path: yaml.safe_dump(kustomization).encode()})
    assert [f.rule for f in findings] == ["kustomize-escape"]
    assert "a cluster's bindings directory may only include its own files" in findings[0].message


def _narrows(before: dict[str, bytes], after: dict[str, bytes]) -> tuple[bool, str]:
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    return narrows_only(before, after, changed)


def test_removing_a_member_or_narrowing_a_role_only_takes_access_away() -> None:
    before = tree(ann="admin", bob="member", vic="viewer")
    assert _narrows(before, tree(ann="admin", vic="viewer")) == (
        True,
        "takes away: oidc:sub-bob (edit in dev)",
    )
    narrows, summary = _narrows(before, tree(ann="member", bob="member", vic="viewer"))
    assert narrows and "oidc:sub-ann (cluster-admin in dev)" in summary


@pytest.mark.parametrize(
    "after",
    [
        {"ann": "admin", "bob": "admin", "vic": "viewer"},  # wider
        {"ann": "admin", "bob": "member", "vic": "viewer", "carl": "viewer"},  # someone new
    ],
)
def test_a_grant_is_not_a_revocation(after: dict[str, str]) -> None:
    narrows, why = _narrows(tree(ann="admin", bob="member", vic="viewer"), tree(**after))
    assert not narrows
    assert "which they did not have" in why


def test_anything_besides_existing_bindings_files_needs_a_review() -> None:
    before = tree(ann="admin", bob="member")
    after = tree(ann="admin")
    after["tenants/alpha/quota.yaml"] = b"apiVersion: v1\nkind: ConfigMap\n"
    assert _narrows(before, after) == (
        False,
        "tenants/alpha/quota.yaml is not a cluster's bindings file",
    )
    # Removed bindings smuggled next to a binding of another kind of subject.
    sneaky = edited(
        tree(ann="admin"),
        BINDINGS,
        lambda objs: objs[0]["subjects"].append({"kind": "Group", "name": "system:masters"}),
    )
    assert not _narrows(before, sneaky)[0]
    # A cluster's first bindings file is a grant, whatever it holds.
    new = {p: b for p, b in before.items() if p != BINDINGS}
    assert not _narrows(new, before)[0]
