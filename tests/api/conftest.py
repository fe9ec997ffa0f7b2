"""API fixtures: tenants on main, a request waiting for a decision, and tokens per persona."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from api.tokens import do_create_robot, do_create_token
from catalog import services as catalog
from tenants.specs import tenant_spec

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 1}


@pytest.fixture
def onboarded(world: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, Any]:
    merged_change(tenant_spec(world["alpha"]))
    merged_change(tenant_spec(world["bravo"]))
    return world


@pytest.fixture
def waiting(onboarded: dict[str, Any]) -> Any:
    """bob's GPU share request in alpha, submitted."""
    return catalog.do_create_request(
        onboarded["alpha"], acting_user=onboarded["bob"], kind="gpu-share", spec=dict(SHARE)
    )


@pytest.fixture
def token(world: dict[str, Any]) -> Callable[..., str]:
    """The text of a new token of ``name`` (a persona) with ``scope``."""

    def make(name: str, scope: str = "admin", days: int = 30) -> str:
        user = world[name]
        return do_create_token(
            acting_user=user, owner=user, name=f"{name}-{scope}", scope=scope, expires_in_days=days
        )[1]

    return make


@pytest.fixture
def robot_token(world: dict[str, Any]) -> Callable[..., str]:
    def make(role: str = "member", scope: str = "admin") -> str:
        robot = do_create_robot(
            world["alpha"], acting_user=world["alice"], name=f"ci-{role}", role=role
        )
        return do_create_token(
            acting_user=world["alice"], owner=robot.user, name="ci", scope=scope, expires_in_days=7
        )[1]

    return make


@pytest.fixture
def api() -> Callable[[str], Client]:
    """A client that sends ``Authorization: Bearer <text>`` on every call."""

    def make(text: str) -> Client:
        return Client(HTTP_AUTHORIZATION=f"Bearer {text}")

    return make
