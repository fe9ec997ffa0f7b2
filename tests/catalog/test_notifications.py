"""The notification inbox: everyone sees only their own, newest first; marking read; the counts
in the navigation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from catalog import services
from catalog.context_processors import inbox
from catalog.models import Notification
from gitops.fleet import configured_fleet
from tenants.access import platform_roles
from tenants.models import PlatformRole


def _notice(user: Any, title: str, *, ago: int = 0, read: bool = False) -> Notification:
    now = timezone.now()
    return Notification.objects.create(
        user=user,
        title=title,
        body=f"{title}.",
        tenant_slug="alpha",
        url="/tenants/alpha/",
        created_at=now - timedelta(minutes=ago),
        read_at=now if read else None,
    )


def test_it_shows_only_my_notifications_newest_first(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    older = _notice(world["bob"], "Older news", ago=10, read=True)
    newer = _notice(world["bob"], "Newer news", ago=1)
    _notice(world["alice"], "Alice's secret")
    response = login("bob").get("/notifications/")
    assert response.status_code == 200
    assert list(response.context["page"]) == [newer, older]
    page = response.content.decode()
    assert "Alice&#x27;s secret" not in page and "Alice's secret" not in page
    assert page.index("Newer news") < page.index("Older news")
    assert page.count("notification-unread") == 1  # only the unread one is highlighted


def test_it_marks_all_my_notifications_read(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    mine = [_notice(world["bob"], "One"), _notice(world["bob"], "Two")]
    theirs = _notice(world["alice"], "Alice's")
    response = login("bob").post("/notifications/read/")
    assert response.status_code == 302
    assert response["Location"] == "/notifications/"
    for notice in mine:
        notice.refresh_from_db()
        assert notice.read_at is not None
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_it_marks_one_read_and_can_open_it(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    one, other = _notice(world["bob"], "One"), _notice(world["bob"], "Other")
    bob = login("bob")
    assert bob.post(f"/notifications/read/?id={one.pk}").status_code == 302
    one.refresh_from_db()
    other.refresh_from_db()
    assert one.read_at is not None and other.read_at is None
    response = bob.post(f"/notifications/read/?id={other.pk}", {"open": "1"})
    assert response["Location"] == "/tenants/alpha/"
    other.refresh_from_db()
    assert other.read_at is not None


def test_it_never_opens_a_notification_elsewhere(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    notice = _notice(world["bob"], "Phish")
    Notification.objects.filter(pk=notice.pk).update(url="https://evil.example/")
    response = login("bob").post(f"/notifications/read/?id={notice.pk}", {"open": "1"})
    assert response["Location"] == "/notifications/"


def test_it_keeps_other_peoples_notifications_out_of_reach(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    theirs = _notice(world["alice"], "Alice's")
    bob = login("bob")
    assert bob.post(f"/notifications/read/?id={theirs.pk}").status_code == 404
    assert bob.post("/notifications/read/?id=nonsense").status_code == 404
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_it_marks_read_by_post_only_and_for_signed_in_users(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    notice = _notice(world["bob"], "One")
    assert login("bob").get(f"/notifications/read/?id={notice.pk}").status_code == 405
    for url in ["/notifications/", "/notifications/read/"]:
        response = Client().post(url) if url.endswith("read/") else Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    notice.refresh_from_db()
    assert notice.read_at is None


def test_the_navigation_shows_my_unread_count(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _notice(world["bob"], "One")
    _notice(world["bob"], "Two")
    _notice(world["bob"], "Seen", read=True)
    _notice(world["alice"], "Alice's")
    bob = login("bob")
    page = bob.get("/tenants/").content.decode()
    assert '<span class="nav-unread" title="unread">2</span>' in page
    bob.post("/notifications/read/")
    assert "nav-unread" not in bob.get("/tenants/").content.decode()
    assert '/notifications/"' in bob.get("/tenants/").content.decode()


def test_the_navigation_counts_requests_waiting_for_platform_admins(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    services.do_create_request(
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec={"name": "train", "flavor": flavor, "kind": "whole", "count": 2},
    )
    assert (
        'title="1 waiting for a decision">1</span>'
        in login("pam").get("/tenants/").content.decode()
    )
    for name in ["alice", "bob", "fiona", "nora"]:
        assert "/approvals/" not in login(name).get("/tenants/").content.decode(), name


def test_a_submitted_request_reaches_the_admins_inbox_with_a_way_to_decide(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    request = services.do_create_request(
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec={"name": "train", "flavor": flavor, "kind": "whole", "count": 2},
    )
    page = login("pam").get("/notifications/").content.decode()
    assert "waits for a platform admin" in page
    assert f'href="/approvals/{request.pk}/"' in page
    # bob asked; the admins hear about it, not him
    assert not Notification.objects.filter(user=world["bob"]).exists()


@pytest.mark.db_engine
def test_the_navigation_counts_cost_one_query_and_only_when_shown(
    world: dict[str, Any], rf: Any, django_assert_num_queries: Any
) -> None:
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    services.do_create_request(
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec={"name": "train", "flavor": flavor, "kind": "whole", "count": 2},
    )
    request = rf.get("/")
    request.user = world["pam"]
    platform_roles(world["pam"])  # read once per request, by the navigation processor
    with django_assert_num_queries(0):
        context = inbox(request)
    with django_assert_num_queries(1):
        assert context["nav_unread"]() == 1  # the submitted request's notice
        assert context["nav_approvals_waiting"]() == 1


def test_notices_asking_for_a_decision_turn_read_when_it_is_made(
    world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    paula = make_user("paula")
    PlatformRole.objects.create(user=paula, role=PlatformRole.Name.PLATFORM_ADMIN)
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    request = services.do_create_request(
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec={"name": "train", "flavor": flavor, "kind": "whole", "count": 2},
    )

    def unread(user: Any) -> list[str]:
        return list(
            Notification.objects.filter(user=user, read_at__isnull=True).values_list(
                "title", flat=True
            )
        )

    waiting = f"{request.title} was submitted and waits for a platform admin"
    assert unread(world["pam"]) == unread(paula) == [waiting]

    # pam asks for changes: the request no longer waits, for paula either; the tenant is asked.
    services.do_request_changes(request, acting_user=world["pam"], note="fewer GPUs")
    assert unread(world["pam"]) == unread(paula) == []
    asked = f"{request.title}: changes requested"
    assert unread(world["bob"]) == unread(world["alice"]) == [asked]

    # bob answers: the tenant's notice is settled, the admins are asked again.
    services.do_update_request(
        request,
        acting_user=world["bob"],
        spec={"name": "train", "flavor": flavor, "kind": "whole", "count": 1},
    )
    assert unread(world["bob"]) == unread(world["alice"]) == []
    assert unread(paula) == [waiting]

    # A rejection decides it too; the rejection itself is news for the tenant, left unread.
    services.do_reject(request, acting_user=paula, note="not this quarter")
    assert unread(world["pam"]) == unread(paula) == []
    assert unread(world["bob"]) == [f"{request.title} was rejected"]
