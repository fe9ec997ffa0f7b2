"""The access rules, action by role: as a table, against the services, and through the URLs.

The expectations are written out here by hand, not derived from ``tenants.access.RULES``, so a
rule that changes by accident fails this file. Personas in tenant alpha: pam (platform admin),
fiona (finance), alice (admin), bob (member), vic (viewer), nora (no membership anywhere) and
dora, who asked for things as a member and was then demoted to viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.test import Client
from django.urls import reverse

from catalog import outbound
from catalog import services as catalog
from catalog.keys import do_revoke_gateway_key
from catalog.models import Kind, Resource, ResourceRequest
from fleet.services import do_rotate_source_token
from gitops import services as gitops
from gitops.models import ChangeRequest
from tenants import services as tenants
from tenants.access import RULES, Action, may
from tenants.models import Membership, Role, Tenant

A = Action
PERSONAS = ("pam", "fiona", "alice", "bob", "vic", "nora", "dora")
EVERY_READER = {"pam", "fiona", "alice", "bob", "vic", "dora"}

# Who may, in alpha, on something dora asked for or opened while she was a member.
EXPECTED: dict[Action, set[str]] = {
    A.VIEW: EVERY_READER,
    A.REQUEST: {"pam", "alice", "bob"},
    A.CANCEL_REQUEST: {"pam", "alice"},
    A.DECIDE: {"pam"},
    A.REVIEW: {"pam"},
    A.MERGE: {"pam"},
    A.CLOSE: {"pam", "alice"},
    A.CHANGE_SETTINGS: {"pam", "alice"},
    A.CHANGE_TRUST: {"pam"},
    A.MANAGE_MEMBERS: {"pam", "alice"},
    A.KUBECONFIG: {"alice", "bob", "vic", "dora"},
    A.MANAGE_GATEWAY_KEY: {"pam", "alice"},
    A.VIEW_AUDIT: {"pam", "alice"},
    A.VIEW_COST: EVERY_READER,
    A.ONBOARD: {"pam"},
    A.OPERATE_FLEET: {"pam"},
    A.GRANT_PLATFORM_ROLE: {"pam"},
    A.VIEW_BILLING: {"pam", "fiona"},
    A.MANAGE_PRICES: {"pam", "fiona"},
    A.MANAGE_INVOICES: {"pam", "fiona"},
    A.SET_BUDGET: {"pam", "fiona", "alice"},
    A.MANAGE_WEBHOOKS: {"pam", "alice"},
    # Jobs run in the tenant's namespace as the member: platform admins are nobody there.
    A.RUN_JOB: {"alice", "bob"},
    A.CANCEL_JOB: {"alice"},
    A.READ_JOB_LOGS: {"alice", "bob", "vic", "dora"},
    A.MANAGE_JOB_TEMPLATES: {"pam"},
    A.REMEDIATE: {"pam"},
    A.MANAGE_IDLE_POLICIES: {"pam"},
    A.EXEMPT_IDLE: {"pam", "alice", "bob"},
    A.WAKE: {"alice", "bob", "pam"},
}

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 1}


@pytest.fixture
def scene(onboarded: dict[str, Any], make_user: Any, django_capture_on_commit_callbacks: Any):
    """alpha on main; dora's two requests and her change, opened before she was demoted."""
    world = onboarded
    alpha = world["alpha"]
    dora = make_user("dora")
    membership = Membership.objects.create(user=dora, tenant=alpha, role=Role.MEMBER)
    world["dora"] = dora
    to_cancel = catalog.do_create_request(
        alpha, acting_user=dora, kind="gpu-share", spec={**SHARE, "name": "one"}
    )
    to_decide = catalog.do_create_request(
        alpha, acting_user=dora, kind="gpu-share", spec={**SHARE, "name": "two"}
    )
    with django_capture_on_commit_callbacks(execute=True):
        # As an approved request's pull request is opened: by the portal, for its requester.
        change = gitops.open_change(
            acting_user=None,
            requested_by=dora,
            title="Dora's change",
            changes={"tenants/alpha/notes.txt": b"hello\n"},
            tenant_slug="alpha",
        )
    tenants.do_change_member_role(membership, acting_user=world["alice"], role=Role.VIEWER)
    cluster = Resource.objects.create(
        tenant=alpha, kind=Kind.CLUSTER, name="lab", state=Resource.State.ACTIVE
    )
    return {
        **world,
        "to_cancel": to_cancel,
        "to_decide": to_decide,
        "change": change,
        "cluster": cluster,
    }


def test_the_table_names_every_action() -> None:
    assert set(EXPECTED) == set(Action) == set(RULES)


@pytest.mark.django_db
@pytest.mark.parametrize("action", list(Action))
def test_the_rule_of_each_action(scene: dict[str, Any], action: Action) -> None:
    owners = [scene["dora"].pk]
    allowed = {p for p in PERSONAS if may(scene[p], action, scene["alpha"], owners=owners)}
    assert allowed == EXPECTED[action]


@pytest.mark.django_db
def test_owners_keep_rights_only_while_they_write(scene: dict[str, Any]) -> None:
    bob, dora, alpha = scene["bob"], scene["dora"], scene["alpha"]
    assert may(bob, A.CANCEL_REQUEST, alpha, owners=[bob.pk])
    assert may(bob, A.CLOSE, alpha, owners=[bob.pk])
    assert not may(dora, A.CANCEL_REQUEST, alpha, owners=[dora.pk])
    assert not may(dora, A.CLOSE, alpha, owners=[dora.pk])
    # Ownership never reaches across tenants, nor lifts a platform-only action.
    assert not may(scene["charlie"], A.CLOSE, alpha, owners=[scene["charlie"].pk])
    assert not may(bob, A.MERGE, alpha, owners=[bob.pk])
    assert not may(None, A.VIEW, alpha)


class _Undo(Exception):
    """Raised inside a savepoint to roll an allowed call back, so each call starts equal."""


def _attempt(call: Callable[[], Any]) -> bool:
    """True when the call got past its access rule (whatever it did next), False when refused."""
    try:
        with transaction.atomic():
            call()
            raise _Undo
    except PermissionDenied:
        return False
    except Exception:  # past the gate: a later refusal is not an access one
        return True


def _service_calls(s: dict[str, Any], user: Any) -> dict[Action, Callable[[], Any]]:
    alpha, change = s["alpha"], s["change"]
    return {
        A.REQUEST: lambda: catalog.do_create_request(
            alpha, acting_user=user, kind="gpu-share", spec={**SHARE, "name": "three"}
        ),
        A.CANCEL_REQUEST: lambda: catalog.do_cancel(s["to_cancel"], acting_user=user),
        A.DECIDE: lambda: catalog.do_reject(s["to_decide"], acting_user=user, note="no"),
        A.REVIEW: lambda: gitops.do_review(change, acting_user=user, state="comment", body="?"),
        A.MERGE: lambda: gitops.do_merge(change, acting_user=user),
        A.CLOSE: lambda: gitops.do_close(change, acting_user=user),
        A.CHANGE_SETTINGS: lambda: tenants.do_update_tenant(
            alpha, acting_user=user, display_name="Renamed"
        ),
        A.CHANGE_TRUST: lambda: tenants.do_update_tenant(
            alpha, acting_user=user, trust_level=Tenant.TrustLevel.DEDICATED
        ),
        A.MANAGE_MEMBERS: lambda: tenants.do_add_member(
            alpha, acting_user=user, user=s["charlie"], role=Role.VIEWER
        ),
        A.MANAGE_GATEWAY_KEY: lambda: do_revoke_gateway_key(alpha, acting_user=user),
        A.MANAGE_WEBHOOKS: lambda: outbound.do_add_webhook(
            alpha, acting_user=user, url="https://1.1.1.1/hook"
        ),
        A.ONBOARD: lambda: tenants.do_create_tenant(
            acting_user=user, slug="zulu", display_name="Zulu"
        ),
        A.OPERATE_FLEET: lambda: do_rotate_source_token("alpha", acting_user=user),
        A.GRANT_PLATFORM_ROLE: lambda: tenants.do_grant_platform_role(
            s["nora"], acting_user=user, role="finance"
        ),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
def test_the_services_enforce_the_rules_themselves(scene: dict[str, Any], persona: str) -> None:
    user = scene[persona]
    calls = _service_calls(scene, user)
    outcome = {action: _attempt(call) for action, call in calls.items()}
    expected = {action: persona in EXPECTED[action] for action in calls}
    assert outcome == expected
    # Refused calls changed nothing.
    assert ResourceRequest.objects.filter(state="cancelled").count() == 0
    assert ChangeRequest.objects.get(pk=scene["change"].pk).status == "open"
    assert Tenant.objects.get(slug="alpha").display_name == "Alpha Team"


def _urls(s: dict[str, Any]) -> dict[Action, tuple[str, str, dict[str, str]]]:
    t, change = "alpha", s["change"].pk
    return {
        A.VIEW: ("get", reverse("tenants:detail", args=[t]), {}),
        A.REQUEST: ("post", reverse("catalog:new", args=[t, "gpu-share"]), {"name": "x"}),
        A.CANCEL_REQUEST: ("post", reverse("catalog:cancel", args=[t, s["to_cancel"].pk]), {}),
        A.DECIDE: ("post", reverse("approvals:reject", args=[s["to_decide"].pk]), {"note": "x"}),
        A.REVIEW: (
            "post",
            reverse("gitops:review", args=[change]),
            {"state": "comment", "body": "?"},
        ),
        A.MERGE: ("post", reverse("gitops:merge", args=[change]), {}),
        A.CHANGE_SETTINGS: ("get", reverse("tenants:settings", args=[t]), {}),
        A.MANAGE_MEMBERS: (
            "post",
            reverse("tenants:members", args=[t]),
            {"user": "charlie", "role": "viewer"},
        ),
        A.KUBECONFIG: ("get", reverse("catalog:kubeconfig", args=[t, s["cluster"].pk]), {}),
        A.MANAGE_GATEWAY_KEY: (
            "post",
            reverse("catalog:gateway_key", args=[t]),
            {"action": "revoke"},
        ),
        A.MANAGE_WEBHOOKS: (
            "post",
            reverse("catalog:webhooks", args=[t]),
            {"url": "https://1.1.1.1/hook"},
        ),
        A.VIEW_AUDIT: ("get", reverse("tenants:audit", args=[t]), {}),
        A.ONBOARD: ("get", reverse("tenants:create"), {}),
        A.OPERATE_FLEET: ("get", reverse("fleet:overview"), {}),
        # Last: closing makes the change's other actions moot.
        A.CLOSE: ("post", reverse("gitops:close", args=[change]), {}),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
def test_the_urls_follow_the_same_rules(scene: dict[str, Any], persona: str) -> None:
    client = Client()
    client.force_login(scene[persona])
    refused, passed = {}, {}
    for action, (method, url, data) in _urls(scene).items():
        response = getattr(client, method)(url, data)
        (passed if response.status_code not in (403, 404) else refused)[action] = (
            response.status_code
        )
    allowed = {action for action in _urls(scene) if persona in EXPECTED[action]}
    assert set(passed) == allowed, (passed, refused)
    if persona == "nora":  # an outsider learns nothing: every tenant page is a 404
        tenant_scoped = {a for a, (_, url, _) in _urls(scene).items() if "/t/alpha/" in url}
        assert {refused[a] for a in tenant_scoped} == {404}
    if persona not in EXPECTED[A.CLOSE]:
        assert ChangeRequest.objects.get(pk=scene["change"].pk).status == "open"
    if persona not in EXPECTED[A.CANCEL_REQUEST]:
        scene["to_cancel"].refresh_from_db()
        assert scene["to_cancel"].state != "cancelled"
