"""Waiting on a condition, never for a fixed time, and ports for what a test starts."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    details: Callable[[], str] | None = None,
    ignoring: tuple[type[Exception], ...] = (),
    interval: float = 0.05,
) -> T:
    """Call ``predicate`` until it returns something true, and return that.

    Fails the test after ``timeout`` seconds saying it waited for ``what`` (a phrase: "the
    job to finish"), or as soon as ``process`` (the thing being waited on) has exited;
    ``details()`` adds what helps to see why (a log). Exceptions of the ``ignoring`` types
    count as "not yet" (a server not listening yet refuses the connection)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = predicate()
        except ignoring:
            result = None  # type: ignore[assignment]
        if result:
            return result
        if process is not None and process.poll() is not None:
            pytest.fail(
                f"gave up waiting for {what}: the process exited ({process.returncode})"
                + _details(details)
            )
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {timeout:g} s" + _details(details))
        time.sleep(interval)


def _details(details: Callable[[], str] | None) -> str:
    return f"\n{details()}" if details is not None else ""


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: for a server the test starts, or as a
    closed port that refuses connections. The kernel picks it, so tests running side by side
    (pytest-xdist) do not pick the same."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_for_port(
    port: int,
    what: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    details: Callable[[], str] | None = None,
    timeout: float = 30,
) -> None:
    """Wait until ``process`` (``what``, "gunicorn") accepts connections on ``port``."""
    wait_until(
        lambda: port_open(port),
        timeout,
        f"{what} to listen on 127.0.0.1:{port}",
        process=process,
        details=details,
    )
