"""Failed sign-ins: what one address may cost an account, and the Django admin's share.

allauth counts failed sign-ins (its ``login_failed`` rate limit, portal/settings.py) per
client address and per account name. The per-address budget is smaller than the per-account
one, so failures from one address alone never lock an account: its owner still signs in from
elsewhere. Several addresses can lock it, for one window after they stop. The Django admin's
sign-in spends the same budget, so it is no side door for guessing.

allauth reads the time through ``time.time()`` in its rate-limit module; the ``clock`` fixture
moves that forward instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from allauth.core.internal import ratelimit as allauth_ratelimit
from django.contrib.auth import get_user_model
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

REFUSED = "Too many failed login attempts"
WRONG = "The username and/or password you specified are not correct."
ADMIN_WRONG = "Please enter the correct username and password for a staff account."
ATTACKER = "203.0.113.9"
ELSEWHERE = "198.51.100.7"
WINDOW = 10 * 60  # the login_failed window of portal/settings.py, in seconds


class Clock:
    """allauth's rate limits see ``time()`` moved forward by ``advance``; the rest is real."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(allauth_ratelimit, "time", fake)
    return fake


def sign_in(password: str, *, address: str, login: str = "alice") -> str:
    """One sign-in on allauth's form, from ``address``: what the page said."""
    response = Client(REMOTE_ADDR=address).post(
        "/accounts/login/", {"login": login, "password": password}
    )
    if response.status_code == 302:
        return "signed in"
    body = response.content.decode()
    return "refused" if REFUSED in body else "wrong" if WRONG in body else body


def admin_sign_in(password: str, *, address: str, username: str = "root") -> str:
    """One sign-in on the Django admin's form, from ``address``: what the page said."""
    response = Client(REMOTE_ADDR=address).post(
        "/django-admin/login/",
        {"username": username, "password": password, "next": "/django-admin/"},
    )
    if response.status_code == 302 and response["Location"] == "/django-admin/":
        return "signed in"
    body = response.content.decode()
    return "refused" if REFUSED in body else "wrong" if ADMIN_WRONG in body else body


@pytest.fixture
def root(make_user: Callable[..., Any]) -> Any:
    return make_user("root", is_staff=True, is_superuser=True)


# --- one address cannot lock an account out ---------------------------------------------------


def test_one_address_cannot_keep_the_owner_out(world: dict[str, Any], clock: Clock) -> None:
    """An attacker who keeps guessing from one address, as fast as the limits let it, for an
    hour: alice signs in from her own address whenever she tries."""
    for minute in range(60):
        sign_in(f"guess-{minute}", address=ATTACKER)
        if minute % 5 == 4:
            assert sign_in(PASSWORD, address=ELSEWHERE) == "signed in", f"minute {minute}"
        clock.advance(60)


def test_the_attacking_address_is_refused_after_its_budget(
    world: dict[str, Any], clock: Clock
) -> None:
    results = [sign_in(f"guess-{n}", address=ATTACKER) for n in range(7)]
    assert results == ["wrong"] * 5 + ["refused"] * 2
    # Even the right password, from there, until the window has passed.
    assert sign_in(PASSWORD, address=ATTACKER) == "refused"
    clock.advance(WINDOW + 1)
    assert sign_in(PASSWORD, address=ATTACKER) == "signed in"


def test_several_addresses_lock_the_account_for_one_window(
    world: dict[str, Any], clock: Clock
) -> None:
    for attacker in ("203.0.113.9", "203.0.113.10"):
        assert [sign_in(f"guess-{n}", address=attacker) for n in range(5)] == ["wrong"] * 5
    # Ten failures on alice: the account is locked, from any address, right password or not.
    assert sign_in(PASSWORD, address=ELSEWHERE) == "refused"
    assert sign_in(PASSWORD, address="192.0.2.44") == "refused"
    # Other accounts are not.
    assert sign_in(PASSWORD, address=ELSEWHERE, login="bob") == "signed in"
    clock.advance(WINDOW / 2)
    assert sign_in(PASSWORD, address=ELSEWHERE) == "refused"
    # Refused attempts do not extend the lock: it ends one window after the last failure.
    clock.advance(WINDOW / 2 + 1)
    assert sign_in(PASSWORD, address=ELSEWHERE) == "signed in"


# --- the Django admin's sign-in spends the same budget -----------------------------------------


def test_the_admin_sign_in_is_throttled(root: Any, clock: Clock) -> None:
    assert [admin_sign_in(f"guess-{n}", address=ATTACKER) for n in range(5)] == ["wrong"] * 5
    assert admin_sign_in(PASSWORD, address=ATTACKER) == "refused"
    assert admin_sign_in(PASSWORD, address=ELSEWHERE) == "signed in"
    clock.advance(WINDOW + 1)
    assert admin_sign_in(PASSWORD, address=ATTACKER) == "signed in"


def test_a_refused_admin_sign_in_does_not_check_the_password(
    root: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        admin_sign_in(f"guess-{n}", address=ATTACKER)
    checked: list[str] = []
    user_model = get_user_model()
    real = user_model.check_password

    def spy(self: Any, raw_password: str) -> bool:
        checked.append(raw_password)
        return real(self, raw_password)

    monkeypatch.setattr(user_model, "check_password", spy)
    assert admin_sign_in(PASSWORD, address=ATTACKER) == "refused"
    assert checked == []


def test_both_sign_in_forms_share_one_budget(
    root: Any, world: dict[str, Any], clock: Clock
) -> None:
    # Per account: five failures on each form from two addresses lock "root" on both.
    assert [sign_in(f"a-{n}", address="203.0.113.9", login="root") for n in range(5)] == [
        "wrong"
    ] * 5
    assert [admin_sign_in(f"b-{n}", address="203.0.113.10") for n in range(5)] == ["wrong"] * 5
    assert admin_sign_in(PASSWORD, address=ELSEWHERE) == "refused"
    assert sign_in(PASSWORD, address=ELSEWHERE, login="root") == "refused"
    # Per address: the admin form's failures count against allauth's form too.
    other = "192.0.2.80"
    clock.advance(WINDOW + 1)
    assert [admin_sign_in(f"c-{n}", address=other) for n in range(5)] == ["wrong"] * 5
    assert sign_in(PASSWORD, address=other, login="bob") == "refused"
