"""Issue 25, points 1-4: identities that cannot be claimed, robots bound to their tenant,
platform decisions tenants cannot veto, four eyes across edits.

Each test walks the attack the security review confirmed, through the real services (and the
real allauth pages where the attack used them), and asserts it no longer works."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.utils import timezone

from api import tokens
from catalog import services as catalog
from gitops import services as gitops
from gitops.models import ChangeRequest
from portal.models import AuditEvent
from tenants import access, services
from tenants.access import Action
from tenants.models import Invitation, Membership, PlatformRole, Role, Tenant
from tenants.specs import tenant_spec
from tests.conftest import PASSWORD

SHARE = {"flavor": "h200", "kind": "whole", "count": 1}


def _sign_in(username: str) -> Client:
    """Through allauth's login page, as a person does (the adapter's login hook runs)."""
    client = Client()
    response = client.post("/accounts/login/", {"login": username, "password": PASSWORD})
    assert response.status_code == 302, response.content[:500]
    return client


def _verified(user: Any, email: str | None = None) -> None:
    EmailAddress.objects.create(
        user=user, email=email or user.email, verified=True, primary=email is None
    )


# --- 1. identities that cannot be claimed ----------------------------------------------------


def test_an_address_someone_merely_claims_makes_them_nobody(
    world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    alpha, alice, bob = world["alpha"], world["alice"], world["bob"]
    _verified(bob)
    # bob claims the newcomer's address on allauth's own page and makes it his primary one.
    client = _sign_in("bob")
    client.post("/accounts/email/", {"action_add": "", "email": "newhire@example.com"})
    client.post("/accounts/email/", {"action_primary": "", "email": "newhire@example.com"})
    claimed = EmailAddress.objects.get(email="newhire@example.com")
    assert claimed.user == bob and not claimed.verified
    # Its confirmation mail went to the address, not to bob.
    assert any("newhire@example.com" in m.to for m in mail.outbox)

    # alice adds the newcomer as admin by e-mail: an invitation, not bob.
    added = services.do_add_member_by_identifier(
        alpha, acting_user=alice, identifier="NewHire@example.com", role=Role.ADMIN
    )
    assert isinstance(added, Invitation) and added.email == "newhire@example.com"
    assert Membership.objects.get(user=bob, tenant=alpha).role == Role.MEMBER
    _sign_in("bob")  # signing in with the address unconfirmed takes nothing up
    assert Membership.objects.get(user=bob, tenant=alpha).role == Role.MEMBER
    assert not access.may(bob, Action.MANAGE_MEMBERS, alpha)
    with pytest.raises(ValidationError, match="No user"):
        services.find_user("newhire@example.com")

    # The real newcomer signs in holding the address verified and joins as admin.
    newhire = make_user("newhire")
    _verified(newhire)
    _sign_in("newhire")
    assert Membership.objects.get(user=newhire, tenant=alpha).role == Role.ADMIN
    invitation = Invitation.objects.get(pk=added.pk)
    assert invitation.accepted_by == newhire and invitation.accepted_at is not None
    assert AuditEvent.objects.filter(action="invitation.accept", actor=newhire).exists()


def test_an_address_two_accounts_hold_verified_identifies_nobody(
    world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    alpha, alice = world["alpha"], world["alice"]
    one, two = make_user("one"), make_user("two")
    _verified(one, "shared@example.com")
    invitation = services.do_invite(
        alpha, acting_user=alice, email="shared@example.com", role=Role.VIEWER
    )
    _verified(two, "Shared@example.com")
    _sign_in("one")
    assert not Membership.objects.filter(user=one, tenant=alpha).exists()
    assert Invitation.objects.get(pk=invitation.pk).accepted_at is None
    with pytest.raises(ValidationError, match="More than one account"):
        services.do_add_member_by_identifier(
            alpha, acting_user=alice, identifier="shared@example.com", role=Role.VIEWER
        )
    with pytest.raises(ValidationError, match="More than one account"):
        services.find_user("shared@example.com")


def test_an_invitation_expires_and_can_be_withdrawn(
    world: dict[str, Any], make_user: Callable[..., Any], login: Callable[[str], Client]
) -> None:
    alpha, alice = world["alpha"], world["alice"]
    late, gone = make_user("late"), make_user("gone")
    _verified(late)
    _verified(gone)
    old = services.do_invite(alpha, acting_user=alice, email="late@example.com", role="member")
    Invitation.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    withdrawn = services.do_invite(alpha, acting_user=alice, email="gone@example.com", role="admin")
    response = login("alice").post(f"/t/alpha/invitations/{withdrawn.pk}/withdraw/")
    assert response.status_code == 200
    assert Invitation.objects.get(pk=withdrawn.pk).revoked_at is not None
    _sign_in("late")
    _sign_in("gone")
    assert not Membership.objects.filter(user__in=[late, gone], tenant=alpha).exists()
    # Another tenant's admin cannot see or withdraw alpha's invitations.
    third = services.do_invite(alpha, acting_user=alice, email="x@example.com", role="viewer")
    assert login("charlie").post(f"/t/alpha/invitations/{third.pk}/withdraw/").status_code == 404
    assert login("bob").post(f"/t/alpha/invitations/{third.pk}/withdraw/").status_code == 403
    assert Invitation.objects.get(pk=third.pk).revoked_at is None


def test_the_members_page_answers_an_address_alike_whoever_holds_it(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _verified(world["nora"])
    client = login("alice")
    answers = []
    for address in ("nora@example.com", "nobody@example.com"):
        page = client.post("/t/alpha/members/", {"user": address, "role": "viewer"})
        text = page.content.decode().replace(address, "ADDRESS")
        answers.append(text.count("is invited as viewer"))
        assert address in page.content.decode()
    assert answers == [1, 1]
    assert not Membership.objects.filter(user=world["nora"], tenant=world["alpha"]).exists()
    assert Invitation.objects.filter(tenant=world["alpha"]).count() == 2


# --- 2. a robot belongs to one tenant ---------------------------------------------------------


def _robot(tenant: Tenant, admin: Any, name: str = "ci") -> Any:
    return tokens.do_create_robot(tenant, acting_user=admin, name=name, role=Role.MEMBER)


def test_a_robot_cannot_join_another_tenant_or_act_there(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    alpha, bravo, charlie = world["alpha"], world["bravo"], world["charlie"]
    robot = _robot(alpha, world["alice"])
    for role in (Role.ADMIN, Role.MEMBER):
        with pytest.raises(ValidationError, match="robot of another tenant"):
            services.do_add_member(bravo, acting_user=charlie, user=robot.user, role=role)
    with pytest.raises(ValidationError, match="robot of another tenant"):
        services.do_add_member_by_identifier(
            bravo, acting_user=charlie, identifier=robot.user.username, role=Role.ADMIN
        )
    assert not Membership.objects.filter(user=robot.user, tenant=bravo).exists()

    # A membership made before this was refused grants nothing: no role, no page, no API.
    Membership.objects.create(user=robot.user, tenant=bravo, role=Role.ADMIN)
    assert access.role_in(robot.user, bravo) is None
    assert not access.may(robot.user, Action.MANAGE_MEMBERS, bravo)
    assert list(access.visible_tenants(robot.user)) == [alpha]
    _, text = tokens.do_create_token(
        acting_user=world["alice"], owner=robot.user, name="ci", scope="admin", expires_in_days=1
    )
    api = Client(HTTP_AUTHORIZATION=f"Bearer {text}")
    assert api.get("/api/v1/tenants/bravo/").status_code == 404
    response = api.post(
        "/api/v1/tenants/bravo/members/",
        {"user": "alice", "role": "admin"},
        content_type="application/json",
    )
    assert response.status_code == 404
    assert not Membership.objects.filter(user=world["alice"], tenant=bravo).exists()
    assert api.get("/api/v1/tenants/alpha/").status_code == 200


def test_a_robot_is_never_an_admin_and_never_the_last_one(world: dict[str, Any]) -> None:
    alpha, alice = world["alpha"], world["alice"]
    robot = _robot(alpha, alice)
    membership = Membership.objects.get(user=robot.user, tenant=alpha)
    with pytest.raises(ValidationError, match="never an admin"):
        services.do_change_member_role(membership, acting_user=alice, role=Role.ADMIN)
    assert Membership.objects.get(pk=membership.pk).role == Role.MEMBER
    # One made admin before the rule does not keep a tenant's last person admin company.
    Membership.objects.filter(pk=membership.pk).update(role=Role.ADMIN)
    alice_m = Membership.objects.get(user=alice, tenant=alpha)
    with pytest.raises(ValidationError, match="last admin"):
        services.do_remove_member(alice_m, acting_user=alice)
    with pytest.raises(ValidationError, match="robot"):
        services.do_grant_platform_role(robot.user, acting_user=world["pam"], role="finance")


def test_robot_tokens_die_with_the_standing_of_who_made_them(world: dict[str, Any]) -> None:
    alpha, alice, nora = world["alpha"], world["alice"], world["nora"]
    services.do_add_member(alpha, acting_user=alice, user=nora, role=Role.ADMIN)
    robot = _robot(alpha, alice)

    def mint(by: Any) -> Any:
        token, _ = tokens.do_create_token(
            acting_user=by, owner=robot.user, name="t", scope="request", expires_in_days=30
        )
        return token

    by_alice, by_nora, by_nora_too = mint(alice), mint(nora), mint(nora)
    # nora is demoted: hers stop; alice's go on.
    services.do_change_member_role(
        Membership.objects.get(user=nora, tenant=alpha), acting_user=alice, role=Role.MEMBER
    )
    by_alice.refresh_from_db(), by_nora.refresh_from_db(), by_nora_too.refresh_from_db()
    assert by_nora.revoked and by_nora_too.revoked and not by_alice.revoked
    # alice leaves (made nora admin again first): hers stop too.
    services.do_change_member_role(
        Membership.objects.get(user=nora, tenant=alpha), acting_user=alice, role=Role.ADMIN
    )
    again = mint(nora)
    services.do_remove_member(Membership.objects.get(user=alice, tenant=alpha), acting_user=nora)
    by_alice.refresh_from_db(), again.refresh_from_db()
    assert by_alice.revoked and not again.revoked
    # Leaving through the identity provider's groups counts the same.
    Membership.objects.filter(user=nora, tenant=alpha).update(source="oidc")
    Membership.objects.filter(user=world["bob"], tenant=alpha).update(role=Role.ADMIN)
    services.do_sync_identity_groups(nora, [])
    again.refresh_from_db()
    assert again.revoked
    # Removing the robot's membership kills its own tokens, whoever made them.
    fresh = mint(world["bob"])
    services.do_remove_member(
        Membership.objects.get(user=robot.user, tenant=alpha), acting_user=world["bob"]
    )
    fresh.refresh_from_db()
    assert fresh.revoked


# --- 3. platform decisions tenants cannot veto -----------------------------------------------


@pytest.fixture
def alpha_on_main(world: dict[str, Any], merged_change: Callable[..., Any]) -> Tenant:
    merged_change(tenant_spec(world["alpha"]))
    return world["alpha"]


def _open_settings_change(tenant: Tenant) -> ChangeRequest:
    return ChangeRequest.objects.get(
        status="open", tenant_slug=tenant.slug, kind="tenant", scope=["settings"]
    )


def test_a_tenant_admin_cannot_close_a_platform_admins_trust_change(
    alpha_on_main: Tenant, world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    alpha, alice, pam = alpha_on_main, world["alice"], world["pam"]
    services.do_update_tenant(alpha, acting_user=pam, cost_centre="CC-99")
    change = _open_settings_change(alpha)
    assert change.close_action == Action.CHANGE_TRUST
    with pytest.raises(PermissionDenied, match="trust level or cost centre"):
        gitops.do_close(change, acting_user=alice)
    response = login("alice").post(f"/changes/{change.pk}/close/")
    assert response.status_code in (302, 403)
    assert ChangeRequest.objects.get(pk=change.pk).status == "open"

    # alice renames the tenant: her change supersedes pam's and carries the cost centre too,
    # so she cannot close hers either.
    services.do_update_tenant(alpha, acting_user=alice, display_name="Alpha Renamed")
    assert ChangeRequest.objects.get(pk=change.pk).status == "closed"
    newer = _open_settings_change(alpha)
    assert newer.close_action == Action.CHANGE_TRUST
    with pytest.raises(PermissionDenied):
        gitops.do_close(newer, acting_user=alice)
    assert Tenant.objects.get(pk=alpha.pk).cost_centre == "CC-99"  # not reverted by superseding


def test_closing_a_settings_change_unmerged_takes_its_settings_back(
    alpha_on_main: Tenant, world: dict[str, Any]
) -> None:
    alpha, pam = alpha_on_main, world["pam"]
    services.do_update_tenant(alpha, acting_user=pam, cost_centre="CC-99", display_name="New")
    change = _open_settings_change(alpha)
    gitops.do_close(change, acting_user=pam)
    alpha.refresh_from_db()
    assert (alpha.cost_centre, alpha.display_name) == ("CC-1", "Alpha Team")
    event = AuditEvent.objects.get(action="tenant.revert")
    assert event.diff["cost_centre"] == ["CC-99", "CC-1"]
    # A tenant admin's own rename may be closed by them, and goes back too.
    services.do_update_tenant(alpha, acting_user=world["alice"], display_name="Alpha Two")
    mine = _open_settings_change(alpha)
    assert mine.close_action == Action.CHANGE_SETTINGS
    gitops.do_close(mine, acting_user=world["alice"])
    assert Tenant.objects.get(pk=alpha.pk).display_name == "Alpha Team"


def test_the_onboarding_change_is_the_platforms_to_close(world: dict[str, Any]) -> None:
    tenant = services.do_create_tenant(
        acting_user=world["pam"], slug="delta", display_name="Delta", admins=[world["nora"]]
    )
    change = ChangeRequest.objects.get(tenant_slug="delta", kind="onboarding")
    with pytest.raises(PermissionDenied):
        gitops.do_close(change, acting_user=world["nora"])
    assert access.may(world["nora"], Action.CLOSE, tenant)  # the plain rule would allow it
    gitops.do_close(change, acting_user=world["pam"])


# --- 4. four eyes across edits ---------------------------------------------------------------


def test_a_platform_admin_who_edited_a_request_cannot_approve_it(
    world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    alpha, pam = world["alpha"], world["pam"]
    request = catalog.do_create_request(
        alpha, acting_user=world["bob"], kind="gpu-share", spec={**SHARE, "name": "one"}
    )
    catalog.do_request_changes(request, acting_user=pam, note="make it bigger")
    catalog.do_update_request(request, acting_user=pam, spec={**SHARE, "name": "one", "count": 4})
    for decide in (
        lambda: catalog.do_approve(request, acting_user=pam),
        lambda: catalog.do_reject(request, acting_user=pam, note="no"),
        lambda: catalog.do_approve_many([request.pk], acting_user=pam),
    ):
        with pytest.raises(ValidationError, match=r"wrote part of it|asked for these"):
            decide()
    request.refresh_from_db()
    assert request.state == "submitted"
    assert not request.events.filter(to_state__in=["approved", "rejected"]).exists()
    # Another platform admin decides it.
    penny = make_user("penny")
    PlatformRole.objects.create(user=penny, role=PlatformRole.Name.PLATFORM_ADMIN)
    assert catalog.do_approve(request, acting_user=penny).state == "pr_open"


def test_a_robots_owner_cannot_approve_what_the_robot_asked_for(
    world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    alpha, pam = world["alpha"], world["pam"]
    penny = make_user("penny")
    PlatformRole.objects.create(user=penny, role=PlatformRole.Name.PLATFORM_ADMIN)
    robot = _robot(alpha, pam, name="made-by-pam")  # a platform admin may make one
    tokens.do_create_token(
        acting_user=penny, owner=robot.user, name="t", scope="request", expires_in_days=1
    )
    request = catalog.do_create_request(
        alpha, acting_user=robot.user, kind="gpu-share", spec={**SHARE, "name": "bot"}
    )
    for admin in (pam, penny):  # who made the robot, who holds a token of it
        with pytest.raises(ValidationError, match="robot of yours"):
            catalog.do_approve(request, acting_user=admin)
    assert catalog.had_a_hand(request, pam) and not catalog.had_a_hand(request, world["alice"])


@pytest.mark.parametrize("hidden", ["\u202e", "\u2066", "\u2028", "\x85"])
def test_token_names_and_decision_notes_refuse_hidden_text(
    world: dict[str, Any], hidden: str
) -> None:
    with pytest.raises(ValidationError, match="invisible formatting"):
        tokens.do_create_token(
            acting_user=world["bob"],
            owner=world["bob"],
            name=f"ci{hidden}txt.exe",
            scope="read",
            expires_in_days=1,
        )
    request = catalog.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec={**SHARE, "name": "n"}
    )
    for decide in (catalog.do_reject, catalog.do_request_changes, catalog.do_approve):
        with pytest.raises(ValidationError) as info:
            decide(request, acting_user=world["pam"], note=f"fine{hidden}")
        assert "note" in info.value.message_dict
    request.refresh_from_db()
    assert request.state == "submitted"
