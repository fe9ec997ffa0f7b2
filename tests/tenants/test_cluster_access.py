"""Tenant membership drives the bindings in the tenant's clusters: every change of a member,
in the portal or through the provider's groups at sign-in, opens the change that makes the
clusters agree, on a real bare repository with the real checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied

from gitops import services as gitops
from gitops.models import ChangeRequest
from gitops.specs import ClusterMember, GpuShare, TenantClusterSpec
from portal.models import Job
from tenants.models import Membership, Role, Source
from tenants.services import (
    ACCESS_TITLE,
    do_add_member,
    do_change_member_role,
    do_remove_member,
    do_sync_cluster_access,
    do_sync_identity_groups,
)
from tenants.specs import tenant_spec
from tests import cluster_oidc
from tests.cluster_oidc import ISSUER

BINDINGS = "tenants/alpha/cluster-access/dev/bindings.yaml"
TITLE = ACCESS_TITLE.format(slug="alpha")


@pytest.fixture
def linked(world: dict[str, Any], settings: Any, tmp_path: Path) -> dict[str, Any]:
    """The fleet's clusters trust the portal's provider; alice, bob and vic signed in through
    it; alpha runs cluster dev with them bound (as its catalog change left main)."""
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc())
    for name in ("alice", "bob", "vic"):
        cluster_oidc.link(world[name], f"sub-{name}", email=f"{name}@example.com")
    return world


@pytest.fixture
def on_main(linked: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, Any]:
    spec = dataclasses.replace(
        tenant_spec(linked["alpha"]),
        shares=(GpuShare(name="infer", flavor="h200", kind="whole", count=2),),
        clusters=(TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2),),
    )
    merged_change(spec)
    return linked


def bound() -> dict[str, str]:
    """user -> ClusterRole in dev's bindings on main."""
    data = gitops.repository().read_file(gitops.main_sha() or "", BINDINGS) or b""
    return {d["subjects"][0]["name"]: d["roleRef"]["name"] for d in yaml.safe_load_all(data) if d}


def access_changes() -> list[ChangeRequest]:
    return list(ChangeRequest.objects.filter(title=TITLE).order_by("pk"))


@pytest.mark.django_db
def test_the_spec_names_members_by_their_provider_identity(
    linked: dict[str, Any], settings: Any
) -> None:
    cluster_oidc.link(linked["charlie"], "sub-charlie", email="c@example.com", verified=False)
    Membership.objects.create(user=linked["charlie"], tenant=linked["alpha"], role=Role.VIEWER)
    nora = linked["nora"]  # a member who never signed in through the provider
    Membership.objects.create(user=nora, tenant=linked["alpha"], role=Role.MEMBER)
    members = {m.name: m for m in tenant_spec(linked["alpha"]).members}
    assert set(members) == {"alice", "bob", "vic", "charlie"}
    assert members["bob"] == ClusterMember("bob", "member", ISSUER, "sub-bob", "bob@example.com")
    assert members["charlie"].email == ""  # the provider did not say it is verified
    get_user_model().objects.filter(pk=linked["vic"].pk).update(is_active=False)
    assert "vic" not in {m.name for m in tenant_spec(linked["alpha"]).members}
    settings.OIDC_SERVER_URL = ""
    assert tenant_spec(linked["alpha"]).members == ()


@pytest.mark.django_db
def test_removing_a_member_takes_them_out_of_the_clusters_without_a_review(
    on_main: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    assert bound() == {
        "oidc:sub-alice": "cluster-admin",
        "oidc:sub-bob": "edit",
        "oidc:sub-vic": "view",
    }
    bob = Membership.objects.get(user=on_main["bob"], tenant=on_main["alpha"])
    with django_capture_on_commit_callbacks(execute=True):
        do_remove_member(bob, acting_user=on_main["alice"])
    (change,) = access_changes()
    assert change.status == ChangeRequest.Status.MERGED, list(change.checks.values())
    assert change.requested_by == on_main["alice"]
    assert change.files_changed == [BINDINGS, "tenants/alpha/spec/members.json"]
    assert bound() == {"oidc:sub-alice": "cluster-admin", "oidc:sub-vic": "view"}


@pytest.mark.django_db
def test_a_new_member_or_a_wider_role_waits_for_a_platform_admin(
    on_main: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    cluster_oidc.link(on_main["charlie"], "sub-charlie")
    with django_capture_on_commit_callbacks(execute=True):
        do_add_member(
            on_main["alpha"], acting_user=on_main["alice"], user=on_main["charlie"], role="viewer"
        )
    (first,) = access_changes()
    assert first.status == ChangeRequest.Status.OPEN
    assert first.checks_state == ChangeRequest.Checks.PASSED
    vic = Membership.objects.get(user=on_main["vic"], tenant=on_main["alpha"])
    with django_capture_on_commit_callbacks(execute=True):
        do_change_member_role(vic, acting_user=on_main["alice"], role=Role.MEMBER)
    # One open change at a time, holding everything: the older one is superseded.
    first.refresh_from_db()
    older, newer = access_changes()
    assert older.pk == first.pk and first.status == ChangeRequest.Status.CLOSED
    assert newer.status == ChangeRequest.Status.OPEN
    head = gitops.repository().read_file(newer.head_sha, BINDINGS) or b""
    roles = {d["subjects"][0]["name"]: d["roleRef"]["name"] for d in yaml.safe_load_all(head) if d}
    assert roles["oidc:sub-charlie"] == "view" and roles["oidc:sub-vic"] == "edit"
    # Asking again for the same keeps it.
    assert do_sync_cluster_access(on_main["alpha"], acting_user=None) == newer
    assert newer.pk == access_changes()[-1].pk
    assert bound()["oidc:sub-vic"] == "view"  # nothing applied before it is approved


@pytest.mark.django_db
def test_dropping_a_group_at_the_provider_revokes_at_the_next_sign_in(
    on_main: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    bob = on_main["bob"]
    Membership.objects.filter(user=bob).update(source=Source.OIDC)
    with django_capture_on_commit_callbacks(execute=True):
        do_sync_identity_groups(bob, ["/tenants/bravo/member"])
    assert not Membership.objects.filter(user=bob, tenant=on_main["alpha"]).exists()
    (change,) = access_changes()
    assert change.status == ChangeRequest.Status.MERGED
    assert "oidc:sub-bob" not in bound()


@pytest.mark.django_db
def test_a_member_linked_to_the_provider_later_is_bound_at_that_sign_in(
    on_main: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    nora = on_main["nora"]
    Membership.objects.create(user=nora, tenant=on_main["alpha"], role=Role.VIEWER)
    cluster_oidc.link(nora, "sub-nora")
    with django_capture_on_commit_callbacks(execute=True):
        do_sync_identity_groups(nora, [])  # local membership: kept, and now bindable
    (change,) = access_changes()
    assert change.status == ChangeRequest.Status.OPEN  # a grant
    head = gitops.repository().read_file(change.head_sha, BINDINGS) or b""
    assert b"oidc:sub-nora" in head


@pytest.mark.django_db
def test_nothing_is_opened_without_cluster_oidc_or_without_clusters(
    linked: dict[str, Any],
    merged_change: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    merged_change(tenant_spec(linked["alpha"]))  # onboarded, no cluster yet
    bob = Membership.objects.get(user=linked["bob"], tenant=linked["alpha"])
    with django_capture_on_commit_callbacks(execute=True):
        do_change_member_role(bob, acting_user=linked["alice"], role=Role.VIEWER)
    assert Job.objects.filter(task="tenants.sync_cluster_access").count() == 1
    assert access_changes() == []
    settings.GITOPS_FLEET_FILE = ""  # the demo fleet: no cluster_oidc
    with django_capture_on_commit_callbacks(execute=True):
        do_change_member_role(bob, acting_user=linked["alice"], role=Role.MEMBER)
    assert Job.objects.filter(task="tenants.sync_cluster_access").count() == 1


@pytest.mark.django_db
def test_nobody_closes_the_change_that_takes_their_access(
    on_main: dict[str, Any], settings: Any
) -> None:
    """Issue 25: alice, demoted from admin to member by the provider's groups, would close the
    revocation her own sign-in opened (she is its requester and still writes in alpha)."""
    settings.GITOPS_AUTO_MERGE_REVOCATIONS = False
    alpha, alice = on_main["alpha"], on_main["alice"]
    Membership.objects.create(user=on_main["nora"], tenant=alpha, role=Role.ADMIN)
    Membership.objects.filter(user=alice, tenant=alpha).update(source=Source.OIDC)
    do_sync_identity_groups(alice, ["/tenants/alpha/member"])
    assert Membership.objects.get(user=alice, tenant=alpha).role == Role.MEMBER
    change = do_sync_cluster_access(alpha, acting_user=alice)
    assert change is not None and change.requested_by == alice
    assert change.close_action == "manage_members" and alice.pk in change.close_barred
    with pytest.raises(PermissionDenied, match="takes access away from you"):
        gitops.do_close(change, acting_user=alice)
    # Made admin again in the portal, she still may not close her own revocation.
    Membership.objects.filter(user=alice, tenant=alpha).update(role=Role.ADMIN)
    with pytest.raises(PermissionDenied, match="takes access away from you"):
        gitops.do_close(change, acting_user=alice)
    with pytest.raises(PermissionDenied):
        gitops.do_close(change, acting_user=on_main["bob"])  # a member
    assert ChangeRequest.objects.get(pk=change.pk).status == "open"
    gitops.do_close(change, acting_user=on_main["nora"])  # another admin decides
