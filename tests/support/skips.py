"""What a test needs from outside the project, and which skips a CI run may show.

On a developer's machine a test whose service (Redis, PostgreSQL), tool (node, prometheus,
Chromium) or ``../shared`` folder is missing is skipped, with the reason. In CI,
``PORTAL_TEST_REQUIRE_SERVICES`` is set: the same test fails instead (``skip_or_fail``), and
any other skip fails the run unless ``ALLOWED_SKIPS`` lists it (tests/conftest.py applies
``unexpected_skips``), so a green run means every test ran.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.waiting import port_open

REQUIRE_SERVICES = "PORTAL_TEST_REQUIRE_SERVICES"
# ../shared beside the checkout: the upstream CRDs, fixtures and references the tests read.
SHARED = Path(__file__).resolve().parents[3] / "shared"


def services_required() -> bool:
    """Whether this run must have every service, tool and folder (CI)."""
    return bool(os.environ.get(REQUIRE_SERVICES))


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test with ``reason`` on a developer's machine; fail it in CI."""
    if services_required():
        pytest.fail(f"{reason} ({REQUIRE_SERVICES} is set)")
    pytest.skip(reason)


def require_service(name: str, host: str, port: int) -> None:
    """A TCP service the test talks to (Redis, say), or skip_or_fail."""
    if not port_open(port, host):
        skip_or_fail(f"{name} is not reachable at {host}:{port}")


def require_tool(command: str, hint: str) -> str:
    """The path of ``command`` on PATH, or skip_or_fail saying how to install it (``hint``)."""
    path = shutil.which(command)
    if path is None:
        skip_or_fail(f"{command} is not installed ({hint})")
    return path


def shared_dir(name: str) -> Path:
    """``../shared/<name>`` beside the checkout (read in place, never copied), or
    skip_or_fail: a user's checkout has none, CI's has it."""
    path = SHARED / name
    if not path.is_dir():
        skip_or_fail(f"../shared/{name} is not beside the checkout")
    return path


# --- the skips a CI run may show ------------------------------------------------------------


@dataclass(frozen=True)
class AllowedSkip:
    """A skip CI accepts: its reason matches ``reason`` (a regular expression, searched) and
    its test id matches ``test`` (one too); ``why`` says why it is not a gap."""

    reason: str
    why: str
    test: str = ""

    def allows(self, test_id: str, reason: str) -> bool:
        return bool(re.search(self.reason, reason)) and bool(re.search(self.test, test_id))


JOBSET_CRD_FILE = "jobset.x-k8s.io_jobsets.yaml"
JOBSET_CRD_MISSING = "../shared/crds/jobset/ does not hold JobSet v0.12.0's CRD yet"

# Keep it short: each entry is a test that cannot run in some configuration CI also runs,
# and is run in another.
ALLOWED_SKIPS = (
    AllowedSkip(
        reason=r"^multivariate statistics are PostgreSQL's",
        test=r"^tests/billing/test_statistics\.py::",
        why="PostgreSQL's own statistics; the SQLite subset skips it, the PostgreSQL suite runs it",
    ),
    AllowedSkip(
        reason="^" + re.escape(JOBSET_CRD_MISSING),
        why="gitops/upstream.py pins JobSet's CRD (fetch_schemas downloads it); ../shared has no "
        "copy of it yet. Copy jobset v0.12.0's config/components/crd/bases file there and the "
        "JobSet tests run (and test_fetch_schemas then asks to drop it from NOT_IN_SHARED).",
    ),
)


def skip_reason(longrepr: object) -> str:
    """The reason of a skipped report (its ``longrepr`` is ``(path, line, "Skipped: why")``)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def unexpected_skips(
    skipped: Iterable[tuple[str, str]], allowed: Iterable[AllowedSkip] = ALLOWED_SKIPS
) -> list[tuple[str, str]]:
    """The ``(test id, reason)`` pairs that no entry of ``allowed`` allows."""
    rules = list(allowed)
    return [
        (test_id, reason)
        for test_id, reason in skipped
        if not any(rule.allows(test_id, reason) for rule in rules)
    ]
