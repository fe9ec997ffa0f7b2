"""The merge queue page and a queued change's page update themselves: each is a live region
that polls with the version of what it shows, gets a 204 while nothing moved, and stops once
the change is out of the queue."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from gitops.models import ChangeRequest, MergeQueueBatch, MergeQueueEntry
from gitops.specs import TenantSpec
from tests.gitops.test_merge_queue import _approved

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    return django_capture_on_commit_callbacks


def since(page: str) -> str:
    found = re.search(r'since=([0-9a-f]+)" hx-trigger="every \d+ms"', page)
    assert found, "the live region polls with its version"
    return found[1]


def queue(change: ChangeRequest, user: Any, **fields: Any) -> MergeQueueEntry:
    return MergeQueueEntry.objects.create(change=change, enqueued_by=user, **fields)


def test_the_queue_page_shows_a_new_entry_and_answers_204_while_nothing_moves(
    world: dict[str, Any], login: Callable[[str], Client], django_assert_num_queries: Any
) -> None:
    pam = login("pam")
    page = pam.get("/changes/queue/").content.decode()
    assert 'id="live"' in page and "The queue is empty." in page
    version = since(page)
    # Session, user, role; then the active entries, the newest finished one, the batches.
    with django_assert_num_queries(6):
        response = pam.get("/changes/queue/", {"since": version}, **HTMX)
    assert response.status_code == 204 and "X-Live-Checked" in response

    change = ChangeRequest.objects.create(title="Grow alpha", tenant_slug="alpha")
    queue(change, world["pam"])
    fragment = pam.get("/changes/queue/", {"since": version}, **HTMX).content.decode()
    assert "<h1>" not in fragment and f"#{change.pk}</a> Grow alpha" in fragment
    MergeQueueEntry.objects.filter(change=change).update(
        state="checking", batch=MergeQueueBatch.objects.create(size=1)
    )
    after = pam.get("/changes/queue/", {"since": since(fragment)}, **HTMX).content.decode()
    assert "Checking" in after and "The queue is empty." not in after


def test_the_queue_poll_is_for_platform_admins(login: Callable[[str], Client]) -> None:
    version = since(login("pam").get("/changes/queue/").content.decode())
    for who in ("alice", "fiona", "nora"):
        response = login(who).get("/changes/queue/", {"since": version}, **HTMX)
        assert response.status_code == 403, who


def test_a_queued_change_shows_its_place_until_it_merges_then_stops_polling(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client]
) -> None:
    first = ChangeRequest.objects.create(title="Before it", tenant_slug="bravo")
    queue(first, world["pam"])
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    entry = queue(change, world["pam"])
    pam = login("pam")
    page = pam.get(f"/changes/{change.pk}/").content.decode()
    assert "position <strong>2</strong> of 2" in page
    url = f"/changes/{change.pk}/"
    version = since(page[page.index('id="queue"') :])
    assert pam.get(url, {"part": "queue", "since": version}, **HTMX).status_code == 204

    MergeQueueEntry.objects.filter(pk=first.queue_entries.get().pk).update(state="merged")
    moved = pam.get(url, {"part": "queue", "since": version}, **HTMX).content.decode()
    assert "position <strong>1</strong> of 1" in moved and "<h1>" not in moved

    ChangeRequest.objects.filter(pk=change.pk).update(status="merged", merge_sha="a" * 40)
    MergeQueueEntry.objects.filter(pk=entry.pk).update(state="merged")
    final = pam.get(url, {"part": "queue", "since": since(moved)}, **HTMX).content.decode()
    assert "<strong>merged</strong>" in final and "hx-trigger" not in final
    assert "nothing more will change here" in final


def test_a_change_not_in_the_queue_does_not_poll_for_it(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client]
) -> None:
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    page = login("pam").get(f"/changes/{change.pk}/").content.decode()
    region = page[page.index('id="queue"') : page.index("</section>", page.index('id="queue"'))]
    assert "hx-get" not in region


@pytest.mark.parametrize("who", ["charlie", "nora"])
def test_outsiders_get_404_on_the_queue_part(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client], who: str
) -> None:
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    queue(change, world["pam"])
    response = login(who).get(f"/changes/{change.pk}/", {"part": "queue"}, **HTMX)
    assert response.status_code == 404
