"""POST /api/v1/tenants/<slug>/resources/<kind>/<name>/wake/: who may, what it opens, and that
bad input changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from catalog import idle_actions
from catalog.models import Kind, Resource, ResourceRequest
from tests.catalog.test_idle_actions import ENDPOINT, SHARE
from tests.support.catalog import through_main

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/alpha/resources/endpoint/chat/wake/"


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run


@pytest.fixture
def asleep(world: dict[str, Any], onboarded: Any, run_jobs: Any) -> Resource:
    through_main(world, run_jobs, Kind.GPU_SHARE, SHARE)
    endpoint: Resource = through_main(world, run_jobs, Kind.ENDPOINT, ENDPOINT)
    run_jobs(idle_actions.sleep, endpoint, reason="idle")
    run_jobs(idle_actions.merge_ready)
    assert idle_actions.is_asleep(endpoint)
    return endpoint


def test_a_member_wakes_an_endpoint_through_the_api(
    asleep: Resource, token: Any, api: Any, run_jobs: Any, world: dict[str, Any]
) -> None:
    response = run_jobs(
        api(token("bob", "request")).post,
        URL,
        {"note": "demo at 10"},
        content_type="application/json",
    )
    assert response.status_code == 202, response.content
    body = response.json()
    woken = ResourceRequest.objects.get(pk=body["id"])
    assert woken.reason == "demo at 10" and woken.requested_by == world["bob"]
    assert woken.spec["asleep"] is False and woken.change is not None
    assert response["ETag"]
    run_jobs(idle_actions.merge_ready)
    assert not idle_actions.is_asleep(asleep)


def test_who_may_not_wake_and_bad_input(asleep: Resource, token: Any, api: Any) -> None:
    before = ResourceRequest.objects.count()

    def post(client: Any, url: str = URL) -> int:
        status: int = client.post(url, {}, content_type="application/json").status_code
        return status

    assert post(api(token("vic", "request"))) == 403  # a viewer
    outsider = api(token("charlie", "request"))
    assert post(outsider) == 404
    assert outsider.get(URL).status_code == 404  # no 405 that confirms the URL
    assert post(api(token("bob", "read"))) == 403  # a read-only token
    bob = api(token("bob", "request"))
    assert post(bob, URL.replace("chat", "nope")) == 404
    assert post(bob, URL.replace("endpoint", "gpu-share")) == 404
    bad = bob.post(URL, {"note": 5, "extra": 1}, content_type="application/json")
    assert bad.status_code == 400
    assert ResourceRequest.objects.count() == before
