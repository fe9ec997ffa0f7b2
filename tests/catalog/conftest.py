"""Catalog fixtures shared by the service and page tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tenants.specs import tenant_spec


@pytest.fixture
def onboarded(world: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, Any]:
    """alpha and bravo exist on main, as onboarding leaves them."""
    merged_change(tenant_spec(world["alpha"]))
    merged_change(tenant_spec(world["bravo"]))
    return world


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    """Run ``fn`` and the jobs it enqueues (checks, e-mail), as the in-process runner would."""

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run
