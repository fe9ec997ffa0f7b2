"""POST /api/v1/requests/approve-many/ and GET /api/v1/jobs/{id}/: a script approves a
selection at once and follows the job; bad selections are refused whole (400, nothing
queued), and a job is shown only to whom its page is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog import services as catalog
from catalog.models import ResourceRequest
from portal.models import Job

pytestmark = pytest.mark.django_db

URL = "/api/v1/requests/approve-many/"


def _share_request(world: dict[str, Any], tenant: str, by: str, name: str) -> ResourceRequest:
    """A submitted request for one whole h200 of ``tenant``, asked by ``by``."""
    return catalog.do_create_request(
        world[tenant],
        acting_user=world[by],
        kind="gpu-share",
        spec={"name": name, "flavor": "h200", "kind": "whole", "count": 1},
    )


def _post(client: Client, body: Any) -> Any:
    return client.post(URL, body, content_type="application/json")


def test_a_platform_admin_approves_a_selection_and_follows_the_job(
    onboarded: dict[str, Any],
    waiting: ResourceRequest,
    api: Callable[[str], Client],
    token: Callable[..., str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    other = _share_request(onboarded, "bravo", "charlie", "eval")
    pam = api(token("pam", "admin"))
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(pam, {"ids": [waiting.pk, other.pk], "note": "reorg"})
    assert response.status_code == 202, response.json()
    body = response.json()
    assert response["Location"] == f"/api/v1/jobs/{body['id']}/"
    assert body["task"] == "catalog.approve_many" and body["title"] == (
        "Approve 2 requests and merge"
    )
    job = pam.get(response["Location"])
    assert job.status_code == 200
    shown = job.json()
    assert shown["status"] == "succeeded" and shown["progress"] == 100
    assert "2 approved, 0 left waiting" in shown["log"]
    for request in (waiting, other):
        request.refresh_from_db()
        assert request.decision_note == "reorg"
        assert request.change is not None and request.change.status == "merged"
        assert f"#{request.pk} {request.title}: approved" in shown["log"]
    # The job is pam's: bob (whose request it approved) and charlie do not see it.
    for name in ("bob", "charlie"):
        assert api(token(name, "read")).get(response["Location"]).status_code == 404
    assert pam.get("/api/v1/jobs/999999/").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": []},
        {"ids": ["one"]},
        {"ids": [0]},
        {"ids": [99999]},
        {"ids": list(range(1, 1002))},
        {"ids": [1], "extra": True},
    ],
    ids=["no ids", "empty", "not a number", "zero", "unknown", "over 1,000", "unknown field"],
)
def test_a_bad_selection_is_a_400_and_queues_nothing(
    body: dict[str, Any],
    waiting: ResourceRequest,
    api: Callable[[str], Client],
    token: Callable[..., str],
) -> None:
    response = _post(api(token("pam", "admin")), body)
    assert response.status_code == 400, response.json()
    assert not Job.objects.filter(task="catalog.approve_many").exists()
    waiting.refresh_from_db()
    assert waiting.state == "submitted"


def test_own_or_decided_requests_refuse_the_whole_selection(
    onboarded: dict[str, Any],
    waiting: ResourceRequest,
    api: Callable[[str], Client],
    token: Callable[..., str],
) -> None:
    mine = _share_request(onboarded, "alpha", "pam", "mine")
    response = _post(api(token("pam", "admin")), {"ids": [waiting.pk, mine.pk]})
    assert response.status_code == 400
    assert f"another platform admin decides: #{mine.pk}" in str(response.json())
    assert not Job.objects.filter(task="catalog.approve_many").exists()


@pytest.mark.parametrize("name,scope", [("pam", "request"), ("alice", "admin"), ("bob", "admin")])
def test_only_a_platform_admin_with_the_admin_scope_approves_many(
    name: str,
    scope: str,
    waiting: ResourceRequest,
    api: Callable[[str], Client],
    token: Callable[..., str],
) -> None:
    response = _post(api(token(name, scope)), {"ids": [waiting.pk]})
    assert response.status_code == 403
    assert not Job.objects.filter(task="catalog.approve_many").exists()
    waiting.refresh_from_db()
    assert waiting.state == "submitted"
