"""Sessions end after SESSION_IDLE_TIMEOUT_SECONDS without a request the person made; htmx
polling of an open tab neither keeps them alive nor swaps the sign-in form into a table."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.test import Client

from portal.middleware import BACKGROUND_HEADER, LAST_ACTIVITY_KEY

HTMX = {"HTTP_HX_REQUEST": "true"}
POLL = {**HTMX, f"HTTP_{BACKGROUND_HEADER.upper().replace('-', '_')}": "poll"}


def _stamp(client: Client, seconds_ago: int) -> int:
    session = client.session
    session[LAST_ACTIVITY_KEY] = stamp = int(time.time()) - seconds_ago
    session.save()
    return stamp


def _last(client: Client) -> Any:
    return client.session.get(LAST_ACTIVITY_KEY)


def test_it_signs_out_after_the_idle_timeout(login: Callable[[str], Client], settings: Any) -> None:
    settings.SESSION_IDLE_TIMEOUT_SECONDS = 900
    alice = login("alice")
    _stamp(alice, 899)
    assert alice.get("/t/alpha/").status_code == 200
    _stamp(alice, 901)
    response = alice.get("/t/alpha/", follow=True)
    assert response.redirect_chain[0] == ("/accounts/login/?next=/t/alpha/", 302)
    assert "You were signed out after 15 minutes idle." in response.content.decode()
    # Signed out for good, not just for one request.
    assert "_auth_user_id" not in alice.session
    assert alice.get("/t/alpha/").status_code == 302


def test_what_the_person_does_keeps_the_session_and_polling_does_not(
    login: Callable[[str], Client], settings: Any
) -> None:
    settings.SESSION_IDLE_TIMEOUT_SECONDS = 900
    alice = login("alice")
    # A click renews the stamp (at most once a minute, so not every request writes).
    _stamp(alice, 30)
    stamp = _last(alice)
    assert alice.get("/t/alpha/").status_code == 200
    assert _last(alice) == stamp
    _stamp(alice, 600)
    assert alice.get("/t/alpha/requests/", **HTMX).status_code == 200
    assert int(time.time()) - _last(alice) < 5
    # A poll is answered, but leaves the stamp where it was...
    stamp = _stamp(alice, 600)
    assert alice.get("/t/alpha/requests/", **POLL).status_code == 200
    assert _last(alice) == stamp
    # ...so an open tab that only polls runs out: the page is sent to the sign-in form.
    _stamp(alice, 901)
    response = alice.get("/t/alpha/requests/", **POLL)
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/t/alpha/requests/"
    assert not response.content
    assert "_auth_user_id" not in alice.session


def test_signing_in_starts_the_clock(world: dict[str, Any], settings: Any) -> None:
    from tests.conftest import PASSWORD

    client = Client()
    response = client.post("/accounts/login/", {"login": "bob", "password": PASSWORD})
    assert response.status_code == 302
    assert int(time.time()) - client.session[LAST_ACTIVITY_KEY] < 5
    # A session from before this feature (no stamp) gets one on its next request.
    session = client.session
    del session[LAST_ACTIVITY_KEY]
    session.save()
    assert client.get("/tenants/").status_code == 200
    assert LAST_ACTIVITY_KEY in client.session
