"""The login throttle holds across processes.

allauth refuses a sign-in after 5 failed attempts from one address within 10 minutes (its
``login_failed`` rate limit, portal/settings.py; tests/portal/test_login_lockout.py has the
per-account side), counting them in Django's default cache. With the default
per-process memory cache, each gunicorn worker counted alone, so N workers allowed 5 * N
guesses. The portal's cache is shared (the database's cache table, or Redis with CACHE_URL):
here a second process of the portal makes some of the failures, and both see all of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from tests.conftest import PASSWORD
from tests.support import require_service
from tests.support.processes import database_url

ROOT = Path(__file__).resolve().parents[2]
# Every test here counts alice's failures in a Redis database and clears it, so each
# pytest-xdist worker has its own (databases 11, 12 and 15 belong to other tests). Not an
# xdist_group: with pytest 9.2, --dist loadgroup silently stops grouping
# (pytest-dev/pytest-xdist#1386), and two workers flushed each other's counts.
_WORKER_DB = {"": 14, "gw0": 14, "gw1": 13, "gw2": 10, "gw3": 9}
REDIS = f"redis://127.0.0.1:6379/{_WORKER_DB[os.environ.get('PYTEST_XDIST_WORKER', '')]}"
REFUSED = "Too many failed login attempts"
WRONG = "The username and/or password you specified are not correct."

# Another process of the portal, as a second gunicorn worker would be: its own interpreter,
# settings, cache client and database connection. It signs in as the browser does.
SECOND_PROCESS = f"""
import sys
import django
django.setup()
from django.test import Client
client = Client()
for password in sys.argv[1:]:
    body = client.post("/accounts/login/", {{"login": "alice", "password": password}}).content
    print("refused" if b"{REFUSED}" in body else "wrong" if b"{WRONG}" in body else "other")
"""


@pytest.fixture(params=["database", "redis"])
def shared_cache(request: Any, transactional_db: None, settings: Any) -> Iterator[dict[str, str]]:
    """The cache both processes use; yields the environment the second process needs."""
    env = {"DATABASE_URL": database_url()}
    if request.param == "redis":
        require_service("Redis", "127.0.0.1", 6379)
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": REDIS,
            }
        }
        env["CACHE_URL"] = REDIS
    else:
        # What a deployment without CACHE_URL gets: the table `createcachetable` made.
        assert settings.CACHES["default"]["BACKEND"].endswith("DatabaseCache")
    cache.clear()
    try:
        yield env
    finally:
        cache.clear()


def _in_second_process(env: dict[str, str], *passwords: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CACHE_URL")}
    result = subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS, *passwords],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


def _sign_in(client: Client, password: str) -> str:
    response = client.post("/accounts/login/", {"login": "alice", "password": password})
    if response.status_code == 302:
        return "signed in"
    body = response.content.decode()
    return "refused" if REFUSED in body else "wrong" if WRONG in body else body


def test_failed_sign_ins_count_across_processes(
    world: dict[str, Any], shared_cache: dict[str, str]
) -> None:
    here = Client()
    assert [_sign_in(here, "guess-1"), _sign_in(here, "guess-2")] == ["wrong", "wrong"]
    # The other process sees those two: three more guesses are allowed there, not five...
    assert _in_second_process(shared_cache, "guess-3", "guess-4", "guess-5", "guess-6") == [
        "wrong",
        "wrong",
        "wrong",
        "refused",
    ]
    # ...and this one sees its three: even the right password is refused now.
    assert _sign_in(here, PASSWORD) == "refused"
    assert _sign_in(Client(), PASSWORD) == "refused"


def test_a_successful_sign_in_is_not_a_failure(
    world: dict[str, Any], shared_cache: dict[str, str]
) -> None:
    # Four failures elsewhere leave one try; the right password uses it without counting.
    assert _in_second_process(shared_cache, "a", "b", "c", "d") == ["wrong"] * 4
    assert _sign_in(Client(), PASSWORD) == "signed in"
    assert _sign_in(Client(), PASSWORD) == "signed in"
    assert _sign_in(Client(), "e") == "wrong"
    assert _sign_in(Client(), PASSWORD) == "refused"
