"""Per-person access to tenant clusters, as rendered: the API server's OIDC flags, the member
bindings and the Flux Kustomization that applies them into the virtual cluster, validated
against the upstream schemas and the chart's values schema, built and checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.checks import run_checks
from gitops.checks.kustomize import kustomize_build
from gitops.checks.schema import validate_objects
from gitops.fleet import demo_fleet, parse_fleet
from gitops.render import objects_for, render_repository, render_tenant_tree
from gitops.render.tree import render_cluster_access
from gitops.render.yamlio import load_documents
from gitops.specs import ClusterMember, ClusterOidc, SpecError, TenantSpec
from tests.cluster_oidc import ISSUER, fleet_with_oidc
from tests.gitops.render_samples import rich_tenant

ANN = ClusterMember("ann", "admin", ISSUER, "sub-ann", "ann@example.com")
BOB = ClusterMember("bob", "member", ISSUER + "/", "sub-bob")  # a trailing slash: same issuer
VIC = ClusterMember("vic", "viewer", ISSUER, "sub-vic", "vic@example.com")
# Known to another provider only: a subject means nothing without its issuer.
OTTO = ClusterMember("otto", "admin", "https://elsewhere.example.com", "sub-ann")


def tenant(*members: ClusterMember) -> TenantSpec:
    return dataclasses.replace(rich_tenant(), members=members)


def docs(files: dict[str, bytes], path: str) -> list[Any]:
    return load_documents(files[f"tenants/alpha/{path}"])


def release_values(files: dict[str, bytes]) -> dict[str, Any]:
    release = next(d for d in docs(files, "clusters/dev.yaml") if d["kind"] == "HelmRelease")
    return dict(release["spec"]["values"])


def test_without_cluster_oidc_nothing_trusts_a_provider_and_no_binding_is_rendered() -> None:
    files = render_tenant_tree(tenant(ANN, BOB), demo_fleet())
    values = release_values(files)
    assert "apiServer" not in values["controlPlane"]["distro"]["k8s"]
    assert "experimental" not in values
    assert values["exportKubeConfig"]["secret"] == {"name": "dev-kubeconfig"}
    assert not [p for p in files if "/cluster-access/" in p]
    assert [d["kind"] for d in docs(files, "clusters/dev.yaml")] == ["HelmRelease"]
    # With it, the same tenant renders all three.
    with_oidc = render_tenant_tree(tenant(ANN, BOB), fleet_with_oidc())
    assert "apiServer" in release_values(with_oidc)["controlPlane"]["distro"]["k8s"]
    assert "tenants/alpha/cluster-access/dev/bindings.yaml" in with_oidc


def test_the_api_server_trusts_the_provider_with_prefixed_names() -> None:
    files = render_tenant_tree(tenant(ANN), fleet_with_oidc(groups_claim="groups"))
    values = release_values(files)
    assert values["controlPlane"]["distro"]["k8s"]["apiServer"] == {
        "extraArgs": [
            f"--oidc-issuer-url={ISSUER}",
            "--oidc-client-id=ai-factory-clusters",
            "--oidc-username-claim=sub",
            "--oidc-username-prefix=oidc:",
            "--oidc-groups-claim=groups",
            "--oidc-groups-prefix=oidc:",
        ]
    }
    # Flux reads vc-dev (the in-cluster address); members' kubeconfigs keep the gateway's.
    assert values["exportKubeConfig"] == {
        "server": "https://dev.alpha.svc:443",
        "additionalSecrets": [
            {
                "name": "dev-kubeconfig",
                "server": "https://dev.alpha.clusters.ai-factory.example.com",
            }
        ],
    }
    bootstrap = yaml.safe_load_all(values["experimental"]["deploy"]["vcluster"]["manifests"])
    role, binding = list(bootstrap)
    assert role["kind"] == "ClusterRole"
    assert role["rules"][1] == {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "verbs": ["bind"],
        "resourceNames": ["cluster-admin", "edit", "view"],
    }
    # Not a name any service account can have: members, whose edit role lets them act as any
    # service account, cannot act as the reconciler.
    assert binding["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "system:serviceaccount:alpha:cluster-access:platform",
        }
    ]
    # The manifests depend on the tenant alone: members never change the release's values,
    # so a membership change never rolls the control plane.
    assert release_values(render_tenant_tree(tenant(BOB, VIC), fleet_with_oidc())) == (
        release_values(render_tenant_tree(tenant(), fleet_with_oidc()))
    )


def test_the_access_kustomization_applies_the_bindings_into_the_virtual_cluster() -> None:
    files = render_tenant_tree(tenant(ANN), fleet_with_oidc())
    release, access = docs(files, "clusters/dev.yaml")
    assert release["kind"] == "HelmRelease"
    assert access["metadata"]["namespace"] == "alpha"
    assert access["spec"] == {
        "deletionPolicy": "Orphan",
        "interval": "10m0s",
        "kubeConfig": {"secretRef": {"key": "config", "name": "vc-dev"}},
        "path": "./tenants/alpha/cluster-access/dev",
        "prune": True,
        "retryInterval": "1m0s",
        "serviceAccountName": "cluster-access:platform",
        "sourceRef": {"kind": "GitRepository", "name": "alpha"},
        "timeout": "5m0s",
    }
    # Not built by the host's Kustomizations: neither kustomization lists it.
    platform = yaml.safe_load(files["tenants/alpha/kustomization.yaml"])
    assert not [r for r in platform["resources"] if "cluster-access" in r]
    assert yaml.safe_load(files["tenants/alpha/cluster-access/dev/kustomization.yaml"]) == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["bindings.yaml"],
    }


def test_each_member_with_an_identity_at_the_issuer_gets_the_role_of_their_membership() -> None:
    files = render_tenant_tree(tenant(ANN, BOB, VIC, OTTO), fleet_with_oidc())
    bindings = docs(files, "cluster-access/dev/bindings.yaml")
    granted = {
        (
            b["subjects"][0]["name"],
            b["roleRef"]["name"],
            b["metadata"]["annotations"]["ai-factory.io/member"],
        )
        for b in bindings
    }
    assert granted == {
        ("oidc:sub-ann", "cluster-admin", "ann"),
        ("oidc:sub-bob", "edit", "bob"),
        ("oidc:sub-vic", "view", "vic"),
    }
    for binding in bindings:
        assert binding["metadata"]["name"].startswith(f"ai-factory:{binding['roleRef']['name']}:")
        assert binding["subjects"][0]["kind"] == "User"
    # By e-mail: only members whose address the provider verified.
    by_email = render_tenant_tree(tenant(ANN, BOB, VIC), fleet_with_oidc(username_claim="email"))
    users = {b["subjects"][0]["name"] for b in docs(by_email, "cluster-access/dev/bindings.yaml")}
    assert users == {"oidc:ann@example.com", "oidc:vic@example.com"}
    # A role change is a new binding name: roleRef cannot be changed in place.
    promoted = render_tenant_tree(tenant(dataclasses.replace(BOB, role="admin")), fleet_with_oidc())
    (before,) = [b for b in bindings if b["subjects"][0]["name"] == "oidc:sub-bob"]
    (after,) = docs(promoted, "cluster-access/dev/bindings.yaml")
    assert before["metadata"]["name"] != after["metadata"]["name"]


def test_a_membership_change_rewrites_only_the_bindings() -> None:
    fleet = fleet_with_oidc()
    whole = render_tenant_tree(tenant(ANN, BOB), fleet)
    access = render_cluster_access(tenant(ANN, BOB), ["dev"], fleet)
    assert access == {p: b for p, b in whole.items() if "/cluster-access/" in p}
    smaller = render_cluster_access(tenant(ANN), ["dev"], fleet)
    changed = {p for p in access if access[p] != smaller[p]}
    assert changed == {"tenants/alpha/cluster-access/dev/bindings.yaml"}
    assert render_cluster_access(tenant(ANN), ["dev"], demo_fleet()) == {}


def test_it_renders_what_the_schemas_accept_and_the_checks_pass(schema_dir: Path) -> None:
    fleet = fleet_with_oidc(groups_claim="groups")
    files = render_repository(fleet, [tenant(ANN, BOB, VIC)])
    objs = objects_for(files)
    kinds = {o["kind"] for o in objs}
    assert {"ClusterRoleBinding", "Kustomization", "HelmRelease"} <= kinds
    errors = validate_objects(objs, schema_dir)  # the chart's values schema included
    assert not errors, "\n".join(map(str, errors))
    results = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    for name in ("schemas", "kustomize", "isolation"):
        assert results[name].status == "passed", (name, results[name].details)
    # What the access Kustomization applies: the bindings, as kustomize builds them.
    built = kustomize_build(files, "tenants/alpha/cluster-access/dev")
    assert built.ok, built.error_text
    assert sorted(o["subjects"][0]["name"] for o in built.output_objects) == [
        "oidc:sub-ann",
        "oidc:sub-bob",
        "oidc:sub-vic",
    ]


@pytest.mark.parametrize(
    ("oidc", "field", "words"),
    [
        (ClusterOidc("http://idp.example.com", "c"), "cluster_oidc.issuer_url", "https://"),
        (ClusterOidc("https://idp.example.com?x=1", "c"), "cluster_oidc.issuer_url", "query"),
        (ClusterOidc(ISSUER, "two words"), "cluster_oidc.client_id", "without spaces"),
        (ClusterOidc(ISSUER, "c", "name"), "cluster_oidc.username_claim", "sub, email"),  # type: ignore[arg-type]
        (ClusterOidc(ISSUER, "c", groups_claim="a b"), "cluster_oidc.groups_claim", "claim"),
    ],
)
def test_a_fleet_setting_the_api_server_would_refuse_is_an_error(
    oidc: ClusterOidc, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        render_tenant_tree(tenant(), dataclasses.replace(demo_fleet(), cluster_oidc=oidc))
    assert words in refused.value.errors[field]


def test_members_must_be_single_line_and_distinct_in_the_clusters() -> None:
    fleet = fleet_with_oidc()
    with pytest.raises(SpecError) as twice:
        render_tenant_tree(tenant(ANN, dataclasses.replace(BOB, subject="sub-ann")), fleet)
    assert (
        "same identity in the clusters (oidc:sub-ann)" in twice.value.errors["members[1].subject"]
    )
    with pytest.raises(SpecError) as broken:
        render_tenant_tree(tenant(dataclasses.replace(BOB, name="bob\nkind: x")), fleet)
    assert "line breaks" in broken.value.errors["members[0].name"]
    with pytest.raises(SpecError) as role:
        render_tenant_tree(tenant(dataclasses.replace(BOB, role="owner")), fleet)  # type: ignore[arg-type]
    assert "admin, member, viewer" in role.value.errors["members[0].role"]


def test_the_fleet_file_takes_the_setting_and_names_a_wrong_key() -> None:
    data = {"name": "lab", "cluster_oidc": {"issuer_url": ISSUER, "client_id": "kubectl"}}
    assert parse_fleet(data).cluster_oidc == ClusterOidc(ISSUER, "kubectl")
    with pytest.raises(SpecError) as typo:
        parse_fleet({"name": "lab", "cluster_oidc": {"issuer": ISSUER, "client_id": "k"}})
    assert "Unknown key 'issuer'" in typo.value.errors["cluster_oidc.issuer"]
