"""Where the check tests find what lives outside the project: the upstream CRDs in
``../shared/crds`` (beside the checkout) and kubectl.

Absent on a developer's machine, the tests that need them are skipped with the reason; in
CI (``PORTAL_TEST_REQUIRE_SERVICES`` set) they fail instead, so a green run means they ran.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_CRDS = REPO_ROOT / ".." / "shared" / "crds"


def _missing(message: str) -> None:
    if os.environ.get("PORTAL_TEST_REQUIRE_SERVICES"):
        pytest.fail(message + " (PORTAL_TEST_REQUIRE_SERVICES is set)")
    pytest.skip(message)


def require_crds() -> Path:
    """The shared CRD folder, read in place (never copied into the project)."""
    if not SHARED_CRDS.is_dir():
        _missing(f"the upstream CRDs are not at {SHARED_CRDS.resolve()}")
    return SHARED_CRDS.resolve()


def require_kubectl() -> str:
    path = shutil.which("kubectl") or shutil.which("kustomize")
    if path is None:
        _missing("neither kubectl nor kustomize is on PATH")
    assert path is not None
    return path
