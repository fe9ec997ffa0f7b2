"""Busy pages run a fixed number of queries, however many tenants and members there are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tenants.models import Membership, Role, Tenant

# Query counts.
pytestmark = pytest.mark.db_engine


def _count(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def _grow(world: dict[str, Any], n: int) -> None:
    users = get_user_model().objects.bulk_create(
        [get_user_model()(username=f"u{i}-{n}", email=f"u{i}-{n}@example.com") for i in range(n)]
    )
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"t{i}-{n}", display_name=f"T {i}") for i in range(n)]
    )
    Membership.objects.bulk_create(
        [Membership(user=u, tenant=world["alpha"], role=Role.MEMBER) for u in users]
        + [Membership(user=world["pam"], tenant=t, role=Role.ADMIN) for t in tenants]
    )


def test_it_keeps_busy_pages_free_of_n_plus_one(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    urls = ["/billing/", "/tenants/", "/t/alpha/", "/t/alpha/members/", "/t/alpha/audit/"]
    _grow(world, 3)
    small = {url: _count(pam, url) for url in urls}
    _grow(world, 30)
    large = {url: _count(pam, url) for url in urls}
    assert large == small
