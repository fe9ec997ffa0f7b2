"""Every endpoint, with its permissions: outsiders 404, viewers 403 on writes, scopes, robots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog.models import ResourceRequest
from catalog.specs import desired_tenant
from gitops.fleet import configured_fleet
from tenants.models import Membership
from tests.api.conftest import SHARE

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
    pam = api(token("pam", "admin"))
    seen = pam.get(f"/api/v1/requests/{waiting.pk}/preview/").json()["seen_digest"]
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(
            pam, f"/api/v1/requests/{waiting.pk}/approve/", {"note": "ok", "seen_digest": seen}
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


def test_an_approval_is_of_the_diff_the_approver_previewed(
    waiting: ResourceRequest,
    api: Callable,
    token: Callable,
    merged_change: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    pam = api(token("pam", "admin"))
    url = f"/api/v1/requests/{waiting.pk}/"
    blind = _post(pam, url + "approve/", {"note": "ok"})
    assert blind.status_code == 400
    assert "seen_digest" in blind.json()["errors"]
    assert "/preview/" in blind.json()["detail"]
    # Who may not approve at all hears that, not about the digest.
    assert _post(api(token("alice", "admin")), url + "approve/").status_code == 403
    shown = pam.get(url + "preview/").json()
    assert shown["state"] == "submitted" and shown["errors"] == {}
    assert shown["files"] and all(f["patch"].startswith("--- ") for f in shown["files"])
    # Another share of alpha merges meanwhile: what approving writes is no longer that diff.
    other = {**SHARE, "name": "other"}
    merged_change(desired_tenant(waiting.tenant, kind="gpu-share", name="other", spec=other))
    stale = _post(pam, url + "approve/", {"seen_digest": shown["seen_digest"]})
    assert stale.status_code == 400 and "changed since" in stale.json()["detail"]
    waiting.refresh_from_db()
    assert waiting.state == "submitted" and waiting.change is None
    fresh = pam.get(url + "preview/").json()["seen_digest"]
    assert fresh != shown["seen_digest"]
    with django_capture_on_commit_callbacks(execute=True):
        approved = _post(pam, url + "approve/", {"seen_digest": fresh})
    assert approved.status_code == 200, approved.json()
    assert approved.json()["state"] == "pr_open"


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


@pytest.fixture
def busy_fleet(world: Any) -> None:
    """An h200 node of 8 GPUs, 3 of them bravo's; a HAMi node with 10 of its 80 slots alpha's."""
    from fleet.models import Health, Node, Workload

    for name, flavor, sharing, resource, count in (
        ("gpu-1", "h200", "whole", "nvidia.com/gpu", 8),
        ("gpu-2", "h200-hami", "hami", "nvidia.com/vgpu", 80),
    ):
        Node.objects.create(
            name=name,
            flavor=flavor,
            sharing=sharing,
            gpu_count=8,
            gpu_capacity={resource: count},
            gpu_allocatable={resource: count},
            health=Health.HEALTHY,
        )
    Workload.objects.create(
        namespace="bravo",
        name="train-0",
        tenant_slug="bravo",
        node="gpu-1",
        gpu_requests={"nvidia.com/gpu": 3},
    )
    Workload.objects.create(
        namespace="alpha",
        name="infer-0",
        tenant_slug="alpha",
        node="gpu-2",
        gpu_requests={"nvidia.com/vgpu": 10},
    )


CAPACITY = "/api/v1/fleet/capacity/"


def test_fleet_capacity_shows_a_tenant_what_is_free_and_nothing_of_others(
    busy_fleet: None, api: Callable, token: Callable
) -> None:
    flavors = configured_fleet().flavors
    every = {f.name for f in flavors}
    sharing = {f.name for f in flavors if f.mode == "hami"}
    assert "h200-hami" in sharing
    bob = api(token("bob", "read")).get(CAPACITY)
    assert bob.status_code == 200
    rows = {r["resource"]: r for r in bob.json()}
    assert {r["flavor"] for r in rows.values()} == every
    assert rows["nvidia.com/gpu"] == {
        "flavor": "h200",
        "mode": "whole",
        "resource": "nvidia.com/gpu",
        "unit": "GPUs",
        "free": 5,
    }
    assert all(set(r) == {"flavor", "mode", "resource", "unit", "free"} for r in rows.values())
    assert "bravo" not in bob.content.decode()
    # bravo is dedicated: no flavor that shares GPUs is its to ask for, nor MIG (no opt-in).
    mig = {f.name for f in flavors if f.mode == "mig" or f.mig_profiles}
    assert "h200-mig" in mig
    charlie = api(token("charlie", "read")).get(CAPACITY).json()
    assert {r["flavor"] for r in charlie} == every - sharing - mig
    assert all("in_use" not in r for r in charlie)
    # Finance sees every tenant, not the fleet pages: what is free, every flavor.
    fiona = api(token("fiona", "read")).get(CAPACITY).json()
    assert {r["flavor"] for r in fiona} == every
    assert all("in_use" not in r for r in fiona)


def test_fleet_capacity_shows_a_platform_admin_the_whole_view(
    busy_fleet: None, api: Callable, token: Callable
) -> None:
    rows = {r["resource"]: r for r in api(token("pam", "read")).get(CAPACITY).json()}
    assert rows["nvidia.com/gpu"] == {
        "flavor": "h200",
        "mode": "whole",
        "resource": "nvidia.com/gpu",
        "unit": "GPUs",
        "free": 5,
        "in_use": 3,
        "unavailable": 0,
        "total": 8,
    }
    assert rows["nvidia.com/vgpu"]["in_use"] == 10


def test_fleet_capacity_is_for_tenant_members_and_platform_roles(
    busy_fleet: None, api: Callable, token: Callable
) -> None:
    assert api(token("nora", "read")).get(CAPACITY).status_code == 403
    anonymous = Client().get(CAPACITY)
    assert anonymous.status_code == 401
    assert anonymous["Content-Type"] == "application/problem+json"


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


def test_a_platform_admin_sets_a_gpu_quota_and_a_tenant_admin_cannot(
    world: Any, api: Callable, token: Callable
) -> None:
    from portal.models import AuditEvent
    from tenants.models import Tenant

    url = "/api/v1/tenants/alpha/gpu-quota/"
    refused = _post(api(token("alice", "admin")), url, {"gpu_quota": 99})
    assert refused.status_code == 403
    assert "Only platform admins set a tenant's GPU quota" in refused.json()["detail"]
    assert _post(api(token("pam", "request")), url, {"gpu_quota": 99}).status_code == 403
    assert _post(api(token("charlie", "admin")), url, {"gpu_quota": 99}).status_code == 404
    assert Tenant.objects.get(slug="alpha").gpu_quota == 16
    pam = api(token("pam", "admin"))
    bad = _post(pam, url, {"gpu_quota": 10001})
    assert bad.status_code == 400 and "gpu_quota" in bad.json()["errors"]
    done = _post(pam, url, {"gpu_quota": 32})
    assert done.status_code == 200, done.json()
    assert done.json()["gpu_quota"] == 32 and done["ETag"]
    assert AuditEvent.objects.get(action="tenant.set_gpu_quota").diff == {"gpu_quota": [16, 32]}
