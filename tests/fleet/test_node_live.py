"""The node page's live region: it polls with the version of what it shows, answers an
unchanged poll with a cheap 204, re-renders when the node, its pods or the sync move, and marks
data the sync has not refreshed in time."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from fleet.models import Node, SyncState
from tests.fleet.test_views import fresh_states, make_node, make_workload

NODE = "gpu-01.example.com"
URL = f"/fleet/nodes/{NODE}/"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def node(world: dict[str, Any]) -> Node:
    fresh_states()
    return make_node(NODE)


def since(page: str) -> str:
    found = re.search(r'\?since=([0-9a-f]+)" hx-trigger="every (\d+)ms"', page)
    assert found, "the live region polls with its version"
    return found[1]


def test_the_page_polls_at_the_configured_interval(
    node: Node, login: Callable[[str], Client], settings: Any
) -> None:
    settings.LIVE_ADMIN_POLL_MS = 150
    page = login("pam").get(URL).content.decode()
    assert 'id="live"' in page and "data-live" in page and 'hx-trigger="every 150ms"' in page
    assert "Updated <time data-live-checked>" in page


def test_an_unchanged_poll_is_a_204_without_rendering(
    node: Node, login: Callable[[str], Client], django_assert_num_queries: Any
) -> None:
    pam = login("pam")
    version = since(pam.get(URL).content.decode())
    # The session, user and role; the node, the sync and watch states; one read per kind of
    # row the region shows (lifecycle, burn-in runs, workloads, reservation, incidents).
    with django_assert_num_queries(11):
        response = pam.get(URL, {"since": version}, **HTMX)
    assert response.status_code == 204 and response.content == b""
    assert re.fullmatch(r"\d\d:\d\d:\d\d", response["X-Live-Checked"])
    # Without the htmx header (a person opening the URL) the page renders in full.
    assert pam.get(URL, {"since": version}).status_code == 200


def test_a_cordon_and_a_new_pod_show_up_in_the_fragment(
    node: Node, login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    version = since(pam.get(URL).content.decode())
    Node.objects.filter(name=NODE).update(unschedulable=True)
    make_workload("alpha-train", "alpha")
    response = pam.get(URL, {"since": version}, **HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and "<h1>" not in fragment
    assert "fleet-cordoned" in fragment and "alpha/alpha-train" in fragment
    assert since(fragment) != version
    assert pam.get(URL, {"since": since(fragment)}, **HTMX).status_code == 204


def test_data_the_sync_has_not_refreshed_is_marked_and_the_mark_comes_by_itself(
    node: Node, login: Callable[[str], Client], settings: Any
) -> None:
    pam = login("pam")
    page = pam.get(URL).content.decode()
    assert "Out of date" not in page and "This may be out of date" not in page
    old = timezone.now() - timedelta(seconds=settings.FLEET_STALE_AFTER_SECONDS + 1)
    Node.objects.filter(name=NODE).update(last_seen=old)
    SyncState.objects.filter(source=SyncState.Source.NODES).update(last_success=old)
    fragment = pam.get(URL, {"since": since(page)}, **HTMX).content.decode()
    assert "Out of date: not read for longer than the sync allows" in fragment
    assert "This may be out of date" in fragment and "Nodes" in fragment


def test_the_poll_is_refused_to_everyone_but_a_platform_admin(
    node: Node, login: Callable[[str], Client]
) -> None:
    version = since(login("pam").get(URL).content.decode())
    for person in ("alice", "bob", "charlie", "fiona"):
        response = login(person).get(URL, {"since": version}, **HTMX)
        assert response.status_code == 404, person
