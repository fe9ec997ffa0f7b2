from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

SHARED_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "crds"


@pytest.fixture
def schema_dir(settings: Any) -> Path:
    """The upstream CRDs beside the checkout; skipped without them, failed in CI."""
    if not SHARED_CRDS.is_dir():
        if os.environ.get("PORTAL_TEST_REQUIRE_SERVICES"):
            pytest.fail(f"{SHARED_CRDS} is missing (PORTAL_TEST_REQUIRE_SERVICES is set)")
        pytest.skip("../shared/crds is not beside the checkout")
    settings.GITOPS_SCHEMA_DIR = str(SHARED_CRDS)
    return SHARED_CRDS
