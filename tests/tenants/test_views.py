from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.test import Client

from api.models import Robot
from portal.models import AuditEvent
from tenants.models import Membership, Tenant

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_it_lists_only_my_tenants(login: Callable[[str], Client]) -> None:
    body = login("alice").get("/tenants/").content.decode()
    assert "Alpha Team" in body
    assert "Bravo Team" not in body
    assert "Onboard a tenant" not in body


@pytest.mark.parametrize("who", ["pam", "fiona"])
def test_it_lists_all_tenants_for_platform_roles(login: Callable[[str], Client], who: str) -> None:
    body = login(who).get("/tenants/").content.decode()
    assert "Alpha Team" in body and "Bravo Team" in body
    assert ("Onboard a tenant" in body) is (who == "pam")


def test_it_shows_tenant_detail_to_members(login: Callable[[str], Client]) -> None:
    response = login("vic").get("/t/alpha/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "CC-1" in body and "bob" in body


def test_it_lets_finance_read_but_not_change(login: Callable[[str], Client]) -> None:
    fiona = login("fiona")
    assert fiona.get("/t/bravo/").status_code == 200
    assert fiona.get("/t/bravo/members/").status_code == 200
    response = fiona.post("/t/bravo/members/", {"user": "nora", "role": "admin"})
    assert response.status_code == 403
    assert not Membership.objects.filter(user__username="nora").exists()


def test_it_onboards_a_tenant(login: Callable[[str], Client], world: dict[str, Any]) -> None:
    # Only an address its account confirmed names an admin (issue 25).
    EmailAddress.objects.create(user=world["charlie"], email="charlie@example.com", verified=True)
    response = login("pam").post(
        "/tenants/new/",
        {
            "slug": "delta",
            "display_name": "Delta",
            "trust_level": "dedicated",
            "cost_centre": "CC-4",
            "contacts": "a@example.com\nb@example.com",
            "admins": "nora, charlie@example.com",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/t/delta/"
    delta = Tenant.objects.get(slug="delta")
    assert delta.contacts == ["a@example.com", "b@example.com"]
    assert set(delta.memberships.values_list("user__username", "role")) == {
        ("nora", "admin"),
        ("charlie", "admin"),
    }


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"slug": "Not OK"}, "slug", "DNS-1123"),
        ({"slug": "alpha"}, "slug", "already exists"),
        ({"slug": "../../etc"}, "slug", ""),
        ({"slug": "portal-system"}, "slug", "'portal-system' is reserved"),
        ({"slug": "kueue-system"}, "slug", "'kueue-system' is reserved"),
        ({"trust_level": "root"}, "trust_level", "valid choice"),
        ({"contacts": "nope, a@example.com"}, "contacts", "Not e-mail addresses: nope"),
        ({"admins": "ghost"}, "admins", "No such users: ghost"),
    ],
)
def test_it_rejects_bad_onboarding_inline(
    login: Callable[[str], Client], data: dict[str, str], field: str, message: str
) -> None:
    form = {"slug": "echo", "display_name": "Echo", "trust_level": "shared", **data}
    before = (Tenant.objects.count(), AuditEvent.objects.count())
    response = login("pam").post("/tenants/new/", form)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors
    assert message in " ".join(errors[field])
    assert message in response.content.decode().replace("&#x27;", "'")
    assert (Tenant.objects.count(), AuditEvent.objects.count()) == before


@pytest.mark.parametrize("who", ["alice", "bob", "fiona"])
def test_it_keeps_onboarding_to_platform_admins(login: Callable[[str], Client], who: str) -> None:
    client = login(who)
    assert client.get("/tenants/new/").status_code == 403
    response = client.post("/tenants/new/", {"slug": "sneaky", "display_name": "S"})
    assert response.status_code == 403
    assert b"Only platform admins" in response.content
    assert not Tenant.objects.filter(slug="sneaky").exists()


def test_it_adds_a_member_with_htmx(login: Callable[[str], Client]) -> None:
    response = login("alice").post("/t/alpha/members/", {"user": "nora", "role": "viewer"}, **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="members">')
    assert "<td>nora</td>" in body
    assert "If an account matches &#x27;nora&#x27;, it now has the viewer role here." in body
    assert Membership.objects.get(user__username="nora").role == "viewer"


def _flash(body: str) -> str:
    start = body.index('<div class="flash')
    return body[start : body.index("</div>", start)]


@pytest.mark.parametrize(
    ("probe", "real"),
    # By e-mail it is always an invitation (tests/tenants/test_security_round3.py).
    [("ghost", "nora"), ("nobody", "nora")],
)
def test_adding_a_member_does_not_tell_whether_an_account_exists(
    login: Callable[[str], Client], probe: str, real: str
) -> None:
    client = login("alice")
    before = AuditEvent.objects.count()
    missing = client.post("/t/alpha/members/", {"user": probe, "role": "viewer"}, **HTMX)
    # Nothing was written for the unknown name...
    assert AuditEvent.objects.count() == before
    assert Membership.objects.filter(tenant__slug="alpha").count() == 3
    found = client.post("/t/alpha/members/", {"user": real, "role": "viewer"}, **HTMX)
    assert Membership.objects.get(user__username="nora").role == "viewer"
    # ...and the answer is the one a real account gets, word for word but the name typed.
    assert missing.status_code == found.status_code == 200
    assert _flash(missing.content.decode()).replace(probe, real) == _flash(found.content.decode())
    assert "flash-success" in _flash(missing.content.decode())
    for response in (missing, found):
        assert "No user" not in response.content.decode()
        assert "errorlist" not in response.content.decode()
    # The same without htmx: a full page, with the same flash message.
    page = client.post("/t/alpha/members/", {"user": probe, "role": "member"})
    assert page.status_code == 200
    assert "If an account matches" in _flash(page.content.decode())


def test_it_shows_member_form_errors_inline(login: Callable[[str], Client]) -> None:
    client = login("alice")
    response = client.post("/t/alpha/members/", {"user": "bob", "role": "viewer"}, **HTMX)
    assert response.status_code == 422
    assert "already a member" in response.content.decode()
    # A bad role is refused before anyone is looked up: the same error for any name.
    for name in ("nora", "ghost"):
        response = client.post("/t/alpha/members/", {"user": name, "role": "owner"}, **HTMX)
        assert response.status_code == 422
        assert "Select a valid choice" in response.content.decode()
    response = client.post("/t/alpha/members/", {"user": "", "role": "viewer"}, **HTMX)
    assert response.status_code == 422
    assert "This field is required" in response.content.decode()
    assert not Membership.objects.filter(user__username="nora").exists()
    assert Membership.objects.get(user__username="bob").role == "member"


@pytest.mark.parametrize("who", ["bob", "vic"])
def test_it_refuses_admin_actions_to_non_admins(
    login: Callable[[str], Client], world: dict[str, Any], who: str
) -> None:
    client = login(who)
    bob = Membership.objects.get(user=world["bob"])
    before = AuditEvent.objects.count()
    for url, data in [
        ("/t/alpha/members/", {"user": "nora", "role": "admin"}),
        (f"/t/alpha/members/{bob.pk}/role/", {"role": "admin"}),
        (f"/t/alpha/members/{bob.pk}/remove/", {}),
        ("/t/alpha/settings/", {"display_name": "Hacked", "trust_level": "shared"}),
    ]:
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert b"Only an admin of this tenant" in response.content
    assert client.get("/t/alpha/audit/").status_code == 403
    assert AuditEvent.objects.count() == before
    assert Membership.objects.get(pk=bob.pk).role == "member"
    assert Tenant.objects.get(slug="alpha").display_name == "Alpha Team"


def test_it_changes_roles_and_refuses_to_drop_the_last_admin(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    client = login("alice")
    bob = Membership.objects.get(user=world["bob"])
    response = client.post(f"/t/alpha/members/{bob.pk}/role/", {"role": "viewer"}, **HTMX)
    assert "bob is now viewer" in response.content.decode()
    assert Membership.objects.get(pk=bob.pk).role == "viewer"
    alice = Membership.objects.get(user=world["alice"])
    response = client.post(f"/t/alpha/members/{alice.pk}/remove/", **HTMX)
    assert "last admin" in response.content.decode()
    assert Membership.objects.filter(pk=alice.pk).exists()
    response = client.post(f"/t/alpha/members/{bob.pk}/role/", {"role": "god"}, **HTMX)
    assert "Select a valid choice" in response.content.decode()
    assert Membership.objects.get(pk=bob.pk).role == "viewer"


def test_it_saves_settings_and_shows_them_in_the_audit_log(login: Callable[[str], Client]) -> None:
    client = login("alice")
    # A tenant admin's form shows trust level and cost centre but ignores what is posted.
    response = client.post(
        "/t/alpha/settings/",
        {"display_name": "Alpha Squad", "trust_level": "dedicated", "cost_centre": "CC-2"},
    )
    assert response.status_code == 302
    body = client.get("/t/alpha/audit/").content.decode()
    assert "tenant.update" in body and "Alpha Squad" in body and "CC-2" not in body
    alpha = Tenant.objects.get(slug="alpha")
    assert (alpha.trust_level, alpha.cost_centre) == ("shared", "CC-1")
    response = login("pam").post(
        "/t/alpha/settings/",
        {"display_name": "Alpha Squad", "trust_level": "shared", "cost_centre": "CC-2"},
    )
    assert response.status_code == 302
    assert "CC-2" in client.get("/t/alpha/audit/").content.decode()
    # A line break in the display name is an error on the form, and nothing changes.
    refused = client.post("/t/alpha/settings/", {"display_name": "Two\nlines"})
    assert refused.status_code == 200 and "control characters" in refused.content.decode()
    assert Tenant.objects.get(slug="alpha").display_name == "Alpha Squad"
    filtered = client.get("/t/alpha/audit/", {"action": "membership"}, **HTMX).content.decode()
    assert "tenant.update" not in filtered


def test_it_scopes_the_audit_log(login: Callable[[str], Client], world: dict[str, Any]) -> None:
    login("charlie").post(
        "/t/bravo/settings/", {"display_name": "Bravo 2", "trust_level": "dedicated"}
    )
    login("alice").post("/t/alpha/settings/", {"display_name": "Alpha 2", "trust_level": "shared"})
    alpha_log = login("alice").get("/t/alpha/audit/").content.decode()
    assert "Alpha 2" in alpha_log and "Bravo 2" not in alpha_log
    assert login("alice").get("/audit/").status_code == 403
    everything = login("pam").get("/audit/").content.decode()
    assert "Alpha 2" in everything and "Bravo 2" in everything


def test_it_records_its_own_request_id_and_the_clients_beside_it(
    login: Callable[[str], Client],
) -> None:
    # A client's X-Request-ID is its claim: kept for tracing, never as the audit row's id
    # (which would let a client make its rows look like another request's).
    response = login("alice").post(
        "/t/alpha/settings/",
        {"display_name": "Alpha X", "trust_level": "shared"},
        HTTP_X_REQUEST_ID="forged",
    )
    event = AuditEvent.objects.get(action="tenant.update")
    assert event.request_id != "forged"
    assert len(event.request_id) == 32
    assert event.client_request_id == "forged"
    assert response["X-Request-ID"] == event.request_id
    login("alice").post("/t/alpha/settings/", {"display_name": "Alpha Y", "trust_level": "shared"})
    latest = AuditEvent.objects.filter(action="tenant.update").latest("id")
    assert latest.client_request_id == ""
    assert len(latest.request_id) == 32 and latest.request_id != event.request_id


def test_it_replaces_an_unsafe_request_id(login: Callable[[str], Client]) -> None:
    response = login("alice").get("/", HTTP_X_REQUEST_ID="bad id\nwith newline")
    assert response["X-Request-ID"] != "bad id\nwith newline"
    assert len(response["X-Request-ID"]) == 32


def test_members_counts_agree_across_pages(
    world: dict[str, Any], login: Callable[[str], Client], make_user: Callable[..., Any]
) -> None:
    """The list, the overview and the members page count the same people: not a disabled
    account, nor a robot of another tenant (neither grants anything in alpha)."""
    world["vic"].is_active = False
    world["vic"].save()
    stray = make_user("bravo-bot")
    Robot.objects.create(user=stray, tenant=world["bravo"], name="bot")
    Membership.objects.create(user=stray, tenant=world["alpha"], role="member")

    alice = login("alice")
    listing = alice.get("/tenants/")
    assert {t.slug: t.member_count for t in listing.context["tenants"]}["alpha"] == 2
    overview = alice.get("/t/alpha/").content.decode()
    assert "<dt>Members</dt><dd>2</dd>" in overview
    assert "<li>alice <span" in overview and "<li>bob <span" in overview
    assert "<li>vic <span" not in overview and "<li>bravo-bot <span" not in overview
    members = alice.get("/t/alpha/members/").content.decode()
    assert '<p class="muted" id="member-count">2 members</p>' in members
    # Still listed there, for an admin to remove, and marked as not counted.
    assert members.count(">not counted</span>") == 2
