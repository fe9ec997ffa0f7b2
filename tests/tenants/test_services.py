from __future__ import annotations

from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.core.exceptions import ValidationError

from gitops.models import ChangeRequest
from portal.models import AuditEvent, Job
from tenants import services
from tenants.models import Membership, PlatformRole, Role, Source, Tenant


def test_it_onboards_a_tenant_with_admins_audit_and_mail(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.do_create_tenant(
            acting_user=world["pam"],
            slug="charlie-lab",
            display_name="Charlie Lab",
            trust_level="dedicated",
            cost_centre="CC-9",
            contacts=["lab@example.com"],
            admins=[world["charlie"]],
        )
    assert tenant.trust_level == "dedicated"
    assert Membership.objects.get(tenant=tenant, user=world["charlie"]).role == "admin"
    created = AuditEvent.objects.get(action="tenant.create", tenant_slug=tenant.slug)
    assert created.actor == world["pam"]
    assert created.diff["slug"] == [None, "charlie-lab"]
    assert created.diff["trust_level"] == [None, "dedicated"]
    assert (
        AuditEvent.objects.filter(action="membership.create", tenant_slug=tenant.slug).count() == 1
    )
    job = Job.objects.get(task="tenants.notify_onboarded")
    assert job.status == Job.Status.SUCCEEDED
    assert job.tenant == tenant
    assert [m.to for m in mail.outbox] == [["lab@example.com"]]
    assert "charlie" in mail.outbox[0].body


@pytest.mark.parametrize(
    ("slug", "message"),
    [
        ("alpha", "already exists"),
        ("Bad_Slug", "DNS-1123"),
        ("kube-system", "reserved"),
        # The namespaces of the platform's own components and of the portal itself.
        ("gpu-operator", "reserved"),
        ("kserve", "reserved"),
        ("kyverno", "reserved"),
        ("cert-manager", "reserved"),
        ("kueue-system", "reserved"),
        ("portal-system", "reserved"),
        ("gateway-system", "reserved"),
        ("x" * 41, "at most 40"),
    ],
)
def test_it_rejects_bad_tenants_and_writes_nothing(
    world: dict[str, Any], slug: str, message: str
) -> None:
    tenants, events, jobs = Tenant.objects.count(), AuditEvent.objects.count(), Job.objects.count()
    with pytest.raises(ValidationError) as info:
        services.do_create_tenant(
            acting_user=world["pam"], slug=slug, display_name="X", contacts=["x@example.com"]
        )
    assert message in " ".join(info.value.messages)
    assert (Tenant.objects.count(), AuditEvent.objects.count(), Job.objects.count()) == (
        tenants,
        events,
        jobs,
    )


def test_it_reserves_the_namespaces_the_fleet_file_configures(
    world: dict[str, Any], settings: Any, tmp_path: Any
) -> None:
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text("portal_namespace: ai-portal\ngateway: {namespace: edge}\n")
    settings.GITOPS_FLEET_FILE = str(fleet_file)
    changes = ChangeRequest.objects.count()
    for slug in ("ai-portal", "edge"):
        with pytest.raises(ValidationError) as info:
            services.do_create_tenant(acting_user=world["pam"], slug=slug, display_name="X")
        assert info.value.message_dict["slug"] == [
            f"The name {slug!r} is reserved: the platform runs its own components in a "
            "namespace of that name, and a tenant's namespace is named after the tenant."
        ]
    assert not Tenant.objects.filter(slug__in=["ai-portal", "edge"]).exists()
    assert ChangeRequest.objects.count() == changes  # no onboarding pull request either


def test_a_tenant_named_before_its_name_was_reserved_keeps_its_settings(
    world: dict[str, Any],
) -> None:
    legacy = Tenant.objects.create(slug="keda", display_name="Old")
    services.do_update_tenant(legacy, acting_user=world["pam"], display_name="Autoscaling team")
    assert Tenant.objects.get(slug="keda").display_name == "Autoscaling team"


def test_it_rejects_unknown_trust_level_and_bad_contacts(world: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        services.do_create_tenant(
            acting_user=world["pam"],
            slug="new-one",
            display_name="New",
            trust_level="root",
            contacts=["not-an-address"],
        )
    assert set(info.value.message_dict) == {"trust_level", "contacts"}
    assert not Tenant.objects.filter(slug="new-one").exists()


def test_it_updates_settings_with_a_diff(world: dict[str, Any]) -> None:
    services.do_update_tenant(
        world["alpha"], acting_user=world["pam"], cost_centre="CC-77", display_name="Alpha Team"
    )
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.diff == {"cost_centre": ["CC-1", "CC-77"]}
    assert event.tenant_slug == "alpha"
    with pytest.raises(ValidationError, match="cannot be changed"):
        services.do_update_tenant(world["alpha"], acting_user=world["alice"], slug="other")
    assert Tenant.objects.get(pk=world["alpha"].pk).slug == "alpha"


def test_it_manages_members_and_protects_the_last_admin(world: dict[str, Any]) -> None:
    alpha, alice = world["alpha"], world["alice"]
    nora = services.do_add_member(alpha, acting_user=alice, user=world["nora"], role=Role.VIEWER)
    with pytest.raises(ValidationError, match="already a member"):
        services.do_add_member(alpha, acting_user=alice, user=world["nora"], role=Role.MEMBER)
    with pytest.raises(ValidationError, match="Unknown role 'owner'"):
        services.do_add_member(alpha, acting_user=alice, user=world["fiona"], role="owner")
    services.do_change_member_role(nora, acting_user=alice, role=Role.MEMBER)
    assert Membership.objects.get(pk=nora.pk).role == "member"

    alice_m = Membership.objects.get(user=alice, tenant=alpha)
    with pytest.raises(ValidationError, match="last admin"):
        services.do_change_member_role(alice_m, acting_user=alice, role=Role.MEMBER)
    with pytest.raises(ValidationError, match="last admin"):
        services.do_remove_member(alice_m, acting_user=alice)
    assert Membership.objects.get(pk=alice_m.pk).role == "admin"

    services.do_change_member_role(nora, acting_user=alice, role=Role.ADMIN)
    services.do_remove_member(alice_m, acting_user=world["nora"])
    assert not Membership.objects.filter(pk=alice_m.pk).exists()
    actions = list(AuditEvent.objects.filter(tenant_slug="alpha").values_list("action", flat=True))
    assert actions.count("membership.update") == 2
    assert "membership.delete" in actions


def test_it_adds_by_name_or_email_and_says_nothing_of_a_missing_account(
    world: dict[str, Any],
) -> None:
    alpha, alice = world["alpha"], world["alice"]
    before = AuditEvent.objects.count()
    add = services.do_add_member_by_identifier
    assert add(alpha, acting_user=alice, identifier="ghost", role=Role.VIEWER) is None
    assert AuditEvent.objects.count() == before
    nora = add(alpha, acting_user=alice, identifier="nora", role=Role.VIEWER)
    assert isinstance(nora, Membership) and (nora.user, nora.role) == (world["nora"], "viewer")
    assert AuditEvent.objects.get(action="membership.create").diff["user"] == [None, "nora"]
    # An e-mail address is an invitation whoever holds it (issue 25): alike for an address
    # an account holds verified and for one nobody holds.
    EmailAddress.objects.create(user=world["bob"], email="bob@example.com", verified=True)
    invited = [
        add(world["bravo"], acting_user=world["charlie"], identifier=address, role=Role.VIEWER)
        for address in ("BOB@example.com", "ghost@x.org")
    ]
    assert [type(i).__name__ for i in invited] == ["Invitation", "Invitation"]
    assert [i.email for i in invited] == ["bob@example.com", "ghost@x.org"]
    assert not Membership.objects.filter(user=world["bob"], tenant=world["bravo"]).exists()
    # An unknown role is refused whether or not an account matches.
    for name in ("fiona", "ghost"):
        with pytest.raises(ValidationError, match="Unknown role 'owner'"):
            add(alpha, acting_user=alice, identifier=name, role="owner")
    assert not Membership.objects.filter(user=world["fiona"]).exists()


def test_it_syncs_identity_groups_and_keeps_local_grants(world: dict[str, Any]) -> None:
    nora = world["nora"]
    Membership.objects.create(user=nora, tenant=world["bravo"], role=Role.VIEWER)  # local
    services.do_sync_identity_groups(
        nora, ["/tenants/alpha/member", "/tenants/ghost/admin", "/platform/finance"]
    )
    alpha = Membership.objects.get(user=nora, tenant=world["alpha"])
    assert (alpha.role, alpha.source) == ("member", Source.OIDC)
    assert PlatformRole.objects.get(user=nora).role == "finance"

    services.do_sync_identity_groups(nora, ["/tenants/alpha/admin"])
    assert Membership.objects.get(pk=alpha.pk).role == "admin"
    assert not PlatformRole.objects.filter(user=nora).exists()

    services.do_sync_identity_groups(nora, [])
    assert not Membership.objects.filter(pk=alpha.pk).exists()
    # Granted in the portal, so the identity provider does not take it away.
    assert Membership.objects.filter(user=nora, tenant=world["bravo"]).exists()
    actions = set(AuditEvent.objects.filter(actor=nora).values_list("action", flat=True))
    assert {"membership.create", "membership.sync", "membership.sync_remove"} <= actions
    assert {"platform_role.sync", "platform_role.sync_remove"} <= actions


def test_it_finds_users_by_name_or_verified_email(world: dict[str, Any]) -> None:
    assert services.find_user("bob") == world["bob"]
    with pytest.raises(ValidationError, match="No user"):
        services.find_user("BOB@example.com")  # User.email alone proves nothing
    EmailAddress.objects.create(user=world["bob"], email="bob@example.com", verified=True)
    assert services.find_user("BOB@example.com") == world["bob"]
    with pytest.raises(ValidationError, match="No user 'zed'"):
        services.find_user("zed")


def test_only_platform_admins_change_trust_and_cost_centre(world: dict[str, Any]) -> None:
    # Issue 10, 2a: a tenant admin could turn a dedicated tenant shared (unlocking HAMi on
    # shared GPUs) or move its bill.
    from django.core.exceptions import PermissionDenied

    bravo = world["bravo"]
    for change in ({"trust_level": "shared"}, {"cost_centre": "CC-elsewhere"}):
        with pytest.raises(PermissionDenied, match="platform admins"):
            services.do_update_tenant(bravo, acting_user=world["charlie"], **change)
    # Unchanged values and the tenant's own fields are fine for its admin.
    services.do_update_tenant(
        bravo, acting_user=world["charlie"], trust_level="dedicated", display_name="Bravo B"
    )
    with pytest.raises(PermissionDenied):
        services.do_update_tenant(bravo, acting_user=world["alice"], display_name="Not mine")
    bravo.refresh_from_db()
    assert (bravo.trust_level, bravo.cost_centre, bravo.display_name) == (
        "dedicated",
        "",
        "Bravo B",
    )
    services.do_update_tenant(bravo, acting_user=world["pam"], trust_level="shared")
    bravo.refresh_from_db()
    assert bravo.trust_level == "shared"


@pytest.mark.parametrize("text", ["Line\nbreak", "Tab\there", "Bell\x07", "CR\r"])
def test_control_characters_never_reach_a_tenant(world: dict[str, Any], text: str) -> None:
    # Issue 10, 2c: saved, they broke every later preview and approval of the tenant.
    for field in ("display_name", "cost_centre"):
        with pytest.raises(ValidationError) as caught:
            services.do_update_tenant(world["alpha"], acting_user=world["pam"], **{field: text})
        assert "control characters" in str(caught.value.message_dict[field])
    alpha = Tenant.objects.get(pk=world["alpha"].pk)
    assert (alpha.display_name, alpha.cost_centre) == ("Alpha Team", "CC-1")
