"""Every endpoint, with its permissions: outsiders 404, viewers 403 on writes, scopes, robots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog.models import ResourceRequest
from tenants.models import Membership

pytestmark = pytest.mark.django_db


def _post(client: Client, url: str, body: Any = None, **headers: Any) -> Any:
    return client.post(
        url, body if body is not None else {}, content_type="application/json", **headers
    )


def test_it_lists_only_the_callers_tenants(world: Any, api: Callable, token: Callable) -> None:
    body = api(token("charlie", "read")).get("/api/v1/tenants/").json()
    assert [t["slug"] for t in body["results"]] == ["bravo"]
    everyone = api(token("fiona", "read")).get("/api/v1/tenants/").json()
    assert {t["slug"] for t in everyone["results"]} == {"alpha", "bravo"}


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/tenants/alpha/",
        "/api/v1/tenants/alpha/members/",
        "/api/v1/tenants/alpha/members/alice/",
        "/api/v1/tenants/alpha/usage/",
    ],
)
def test_it_answers_404_to_a_non_member(
    world: Any, api: Callable, token: Callable, url: str
) -> None:
    response = api(token("charlie", "admin")).get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert _post(api(token("charlie", "admin")), url).status_code == 404
    assert api(token("alice", "read")).get(url).status_code == 200


def test_it_hides_another_tenants_request_and_change(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    charlie = api(token("charlie", "admin"))
    assert charlie.get(f"/api/v1/requests/{waiting.pk}/").status_code == 404
    assert _post(charlie, f"/api/v1/requests/{waiting.pk}/cancel/").status_code == 404
    assert charlie.get("/api/v1/requests/").json()["count"] == 0
    assert api(token("vic", "read")).get(f"/api/v1/requests/{waiting.pk}/").status_code == 200


def test_it_shows_a_request_with_its_events(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    body = api(token("bob", "read")).get(f"/api/v1/requests/{waiting.pk}/").json()
    assert body["state"] == "submitted"
    assert body["kind"] == "gpu-share" and body["name"] == "train"
    assert [e["to_state"] for e in body["events"]] == ["submitted"]


def test_it_filters_requests(waiting: ResourceRequest, api: Callable, token: Callable) -> None:
    bob = api(token("bob", "read"))
    assert (
        bob.get("/api/v1/requests/?state=submitted&kind=gpu-share&tenant=alpha").json()["count"]
        == 1
    )
    assert bob.get("/api/v1/requests/?state=draft").json()["count"] == 0
    bad = bob.get("/api/v1/requests/?state=nonsense")
    assert bad.status_code == 400 and "state" in bad.json()["errors"]


def test_a_viewer_cannot_cancel(waiting: ResourceRequest, api: Callable, token: Callable) -> None:
    response = _post(api(token("vic", "admin")), f"/api/v1/requests/{waiting.pk}/cancel/")
    assert response.status_code == 403
    waiting.refresh_from_db()
    assert waiting.state == "submitted"


def test_a_read_token_cannot_post(waiting: ResourceRequest, api: Callable, token: Callable) -> None:
    response = _post(api(token("bob", "read")), f"/api/v1/requests/{waiting.pk}/cancel/")
    assert response.status_code == 403
    assert "'request' scope" in response.json()["detail"]
    waiting.refresh_from_db()
    assert waiting.state == "submitted"


def test_a_request_token_cannot_approve(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    response = _post(api(token("pam", "request")), f"/api/v1/requests/{waiting.pk}/approve/")
    assert response.status_code == 403
    assert "'admin' scope" in response.json()["detail"]
    waiting.refresh_from_db()
    assert waiting.state == "submitted"


def test_the_requester_cancels_with_a_request_token(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    response = _post(
        api(token("bob", "request")), f"/api/v1/requests/{waiting.pk}/cancel/", {"note": "no"}
    )
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "cancelled"


def test_a_platform_admin_rejects_and_sends_back(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    pam = api(token("pam", "admin"))
    missing = _post(pam, f"/api/v1/requests/{waiting.pk}/reject/", {})
    assert missing.status_code == 400 and "note" in missing.json()["errors"]
    back = _post(pam, f"/api/v1/requests/{waiting.pk}/request-changes/", {"note": "smaller"})
    assert back.status_code == 200 and back.json()["state"] == "changes_requested"


def test_a_platform_admin_approves_and_a_pull_request_opens(
    waiting: ResourceRequest,
    api: Callable,
    token: Callable,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(
            api(token("pam", "admin")), f"/api/v1/requests/{waiting.pk}/approve/", {"note": "ok"}
        )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "pr_open" and body["change"]["status"] == "open"
    change = api(token("bob", "read")).get(f"/api/v1/changes/{body['change']['id']}/").json()
    assert change["tenant"] == "alpha" and change["files_changed"]
    assert "checks" in change and "merge_blockers" in change
    assert (
        api(token("charlie", "read")).get(f"/api/v1/changes/{body['change']['id']}/").status_code
        == 404
    )
    refused = _post(
        api(token("alice", "admin")),
        f"/api/v1/changes/{body['change']['id']}/review/",
        {"state": "approve"},
    )
    assert refused.status_code == 403


def test_a_robot_acts_with_its_role(
    waiting: ResourceRequest, api: Callable, robot_token: Callable
) -> None:
    viewer = api(robot_token("viewer"))
    assert viewer.get(f"/api/v1/requests/{waiting.pk}/").status_code == 200
    assert _post(viewer, f"/api/v1/requests/{waiting.pk}/cancel/").status_code == 403
    assert viewer.get("/api/v1/tenants/bravo/").status_code == 404
    member = api(robot_token("member"))
    assert _post(member, f"/api/v1/requests/{waiting.pk}/submit/").status_code in (200, 400)
    assert _post(member, f"/api/v1/requests/{waiting.pk}/approve/").status_code == 403


def test_members_list_change_and_remove(world: Any, api: Callable, token: Callable) -> None:
    alice = api(token("alice", "admin"))
    names = [m["username"] for m in alice.get("/api/v1/tenants/alpha/members/").json()["results"]]
    assert names == ["alice", "bob", "vic"]
    assert (
        api(token("bob", "admin"))
        .patch(
            "/api/v1/tenants/alpha/members/vic/",
            {"role": "member"},
            content_type="application/json",
        )
        .status_code
        == 403
    )
    assert (
        api(token("alice", "request"))
        .patch(
            "/api/v1/tenants/alpha/members/vic/",
            {"role": "member"},
            content_type="application/json",
        )
        .status_code
        == 403
    )
    changed = alice.patch(
        "/api/v1/tenants/alpha/members/vic/", {"role": "member"}, content_type="application/json"
    )
    assert changed.status_code == 200 and changed.json()["role"] == "member"
    added = _post(alice, "/api/v1/tenants/alpha/members/", {"user": "nora", "role": "viewer"})
    assert added.status_code == 202
    assert Membership.objects.filter(
        tenant__slug="alpha", user__username="nora", role="viewer"
    ).exists()
    assert alice.delete("/api/v1/tenants/alpha/members/nora/").status_code == 204
    assert not Membership.objects.filter(tenant__slug="alpha", user__username="nora").exists()


def test_usage_and_invoices(world: Any, api: Callable, token: Callable) -> None:
    usage = api(token("vic", "read")).get("/api/v1/tenants/alpha/usage/?range=30d")
    assert usage.status_code == 200
    assert usage.json()["tenant"] == "alpha" and "total" in usage.json()
    bad = api(token("vic", "read")).get("/api/v1/tenants/alpha/usage/?range=forever")
    assert bad.status_code == 400
    assert api(token("vic", "read")).get("/api/v1/invoices/").status_code == 200
    assert api(token("fiona", "read")).get("/api/v1/invoices/").status_code == 200


def test_fleet_capacity(world: Any, api: Callable, token: Callable) -> None:
    rows = api(token("bob", "read")).get("/api/v1/fleet/capacity/")
    assert rows.status_code == 200 and {r["flavor"] for r in rows.json()}
    assert api(token("nora", "read")).get("/api/v1/fleet/capacity/").status_code == 403


def test_platform_changes_are_for_platform_roles_only(
    onboarded: Any, api: Callable, token: Callable
) -> None:
    from gitops.models import ChangeRequest

    platform = ChangeRequest.objects.create(title="platform", tenant_slug="")
    assert api(token("pam", "read")).get(f"/api/v1/changes/{platform.pk}/").status_code == 200
    assert api(token("alice", "read")).get(f"/api/v1/changes/{platform.pk}/").status_code == 404
    seen = {
        c["tenant"] for c in api(token("alice", "read")).get("/api/v1/changes/").json()["results"]
    }
    assert seen == {"alpha"}


def test_a_platform_admin_reviews_a_change(onboarded: Any, api: Callable, token: Callable) -> None:
    from gitops.models import ChangeRequest, Review
    from gitops.services import open_change

    change = open_change(
        acting_user=onboarded["bob"],
        title="notes",
        changes={"tenants/alpha/notes.txt": b"hi\n"},
        tenant_slug="alpha",
    )
    pam = api(token("pam", "admin"))
    tag = pam.get(f"/api/v1/changes/{change.pk}/")["ETag"]
    bad = _post(pam, f"/api/v1/changes/{change.pk}/review/", {"state": "maybe"})
    assert bad.status_code == 400 and "state" in bad.json()["errors"]
    done = _post(
        pam, f"/api/v1/changes/{change.pk}/review/", {"state": "approve"}, HTTP_IF_MATCH=tag
    )
    assert done.status_code == 200, done.json()
    assert [r["state"] for r in done.json()["reviews"]] == ["approve"]
    assert Review.objects.filter(change=change).count() == 1
    blocked = _post(pam, f"/api/v1/changes/{change.pk}/merge/")
    assert blocked.status_code == 400, blocked.json()
    assert ChangeRequest.objects.get(pk=change.pk).status == "open"
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    assert (
        _post(api(token("alice", "admin")), f"/api/v1/changes/{change.pk}/merge/").status_code
        == 403
    )
    merged = _post(pam, f"/api/v1/changes/{change.pk}/merge/")
    assert merged.status_code == 200, merged.json()
    assert merged.json()["status"] == "merged"


def test_members_see_issued_invoices_finance_sees_drafts(
    world: Any, api: Callable, token: Callable
) -> None:
    from datetime import date

    from billing.models import Invoice

    def invoice(tenant: Any, status: str) -> Invoice:
        return Invoice.objects.create(
            tenant=tenant,
            tenant_slug=tenant.slug,
            month=date(2026, 10 if status == "issued" else 11, 1),
            currency="EUR",
            status=status,
        )

    issued, draft = invoice(world["alpha"], "issued"), invoice(world["alpha"], "draft")
    other = invoice(world["bravo"], "issued")
    bob = api(token("bob", "read"))
    assert [i["id"] for i in bob.get("/api/v1/invoices/").json()["results"]] == [issued.pk]
    assert bob.get(f"/api/v1/invoices/{draft.pk}/").status_code == 404
    assert bob.get(f"/api/v1/invoices/{other.pk}/").status_code == 404
    fiona = api(token("fiona", "read"))
    assert {i["id"] for i in fiona.get("/api/v1/invoices/").json()["results"]} == {
        issued.pk,
        draft.pk,
        other.pk,
    }
    assert fiona.get("/api/v1/invoices/?tenant=bravo").json()["count"] == 1
    assert bob.get(f"/api/v1/invoices/{issued.pk}/").json()["number"] == "alpha-2026-10-v1"
