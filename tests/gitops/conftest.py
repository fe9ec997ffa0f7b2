from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.skips import skip_or_fail

SHARED_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "crds"


@pytest.fixture
def schema_dir(settings: Any) -> Path:
    """The upstream CRDs beside the checkout; skipped without them, failed in CI."""
    if not SHARED_CRDS.is_dir():
        skip_or_fail("../shared/crds is not beside the checkout")
    settings.GITOPS_SCHEMA_DIR = str(SHARED_CRDS)
    return SHARED_CRDS
