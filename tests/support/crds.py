"""A minimal CustomResourceDefinition for tests that need one of their own making."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.skips import JOBSET_CRD_FILE, JOBSET_CRD_MISSING, SHARED


def crd(
    kind: str,
    group: str = "example.com",
    version: str = "v1",
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A namespaced CRD serving one version of `kind`; `schema` is its openAPIV3Schema."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema or {"type": "object"}},
                }
            ],
        },
    }


def jobset_crd() -> Path:
    """JobSet v0.12.0's CRD, which gitops/upstream.py pins (``manage.py fetch_schemas``
    downloads it) and ../shared/crds does not hold yet (tests/gitops/test_fetch_schemas.py
    ``NOT_IN_SHARED``). Without it the test skips, also in CI (``ALLOWED_SKIPS``): a missing
    file of ../shared is otherwise a failure there, and this one is known to be missing."""
    path = SHARED / "crds" / "jobset" / JOBSET_CRD_FILE
    if not path.is_file():
        pytest.skip(JOBSET_CRD_MISSING)
    return path
