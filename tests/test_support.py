"""The tests' own toolbox (tests/support): the skip rule CI relies on, and waiting."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support import free_port, port_open, skip_or_fail, wait_until
from tests.support.skips import (
    ALLOWED_SKIPS,
    REQUIRE_SERVICES,
    AllowedSkip,
    skip_reason,
    unexpected_skips,
)


def test_a_missing_part_skips_on_a_developers_machine_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRE_SERVICES, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^redis is gone$"):
        skip_or_fail("redis is gone")
    monkeypatch.setenv(REQUIRE_SERVICES, "1")
    with pytest.raises(pytest.fail.Exception, match=rf"redis is gone \({REQUIRE_SERVICES} is set"):
        skip_or_fail("redis is gone")


def test_only_skips_on_the_allow_list_pass() -> None:
    allowed = [AllowedSkip(reason=r"^PostgreSQL only", test=r"^tests/a\.py::", why="covered")]
    skipped = [
        ("tests/a.py::test_one", "PostgreSQL only here"),
        ("tests/b.py::test_two", "PostgreSQL only here"),  # the reason, but not the test
        ("tests/a.py::test_three", "node is not installed"),  # the test, not the reason
    ]
    assert unexpected_skips(skipped, allowed) == skipped[1:]
    # The project's own list stays short, and says why for each entry.
    assert 0 < len(ALLOWED_SKIPS) <= 5
    assert all(entry.why and entry.reason for entry in ALLOWED_SKIPS)


def test_a_skip_reason_is_read_from_the_report() -> None:
    assert skip_reason(("tests/a.py", 3, "Skipped: no chromium")) == "no chromium"
    assert skip_reason("something else") == "something else"


def test_wait_until_returns_what_the_condition_gave() -> None:
    calls = []

    def third_time() -> list[int]:
        calls.append(1)
        return calls if len(calls) == 3 else []

    assert wait_until(third_time, 5, "the third call", interval=0) == [1, 1, 1]


def test_wait_until_fails_saying_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"waiting for the moon after 0\.2 s\nlog"):
        wait_until(lambda: False, 0.2, "the moon", details=lambda: "log")
    assert time.monotonic() - started < 5


def test_wait_until_stops_when_the_process_it_waits_on_has_exited() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(pytest.fail.Exception, match=r"the process exited \(3\)"):
        wait_until(lambda: False, 60, "the server", process=proc)


def test_a_free_port_refuses_connections() -> None:
    assert not port_open(free_port())
