"""Query counts that docs/benchmarks.md and the code's comments promise stay constant, pinned
at two sizes: the same number of queries for 3 and for 30 tenants (or rows)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog import services
from catalog.models import Resource
from gitops.fleet import demo_fleet
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

SHARE = {"name": "new", "flavor": "h200", "kind": "whole", "count": 2}


def _grow(count: int, start: int) -> None:
    """``count`` more tenants, each with an active whole-GPU share and a MIG share."""
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"q{i:03d}", display_name=f"Q {i}") for i in range(start, start + count)]
    )
    Resource.objects.bulk_create(
        Resource(
            tenant=t,
            kind="gpu-share",
            name=name,
            state="active",
            spec={"name": name, "flavor": flavor, "kind": kind, "count": 1, **extra},
        )
        for t in tenants
        for name, flavor, kind, extra in (
            ("train", "h200", "whole", {}),
            ("eval", "h200-mig", "mig", {"mig_profile": "1g.18gb"}),
        )
    )


def _check_queries(tenant: Tenant) -> int:
    fleet = demo_fleet()
    with CaptureQueriesContext(connection) as captured:
        check = services.check_request(tenant, "gpu-share", "new", dict(SHARE), fleet=fleet)
    assert check.ok, check.errors
    return len(captured)


def test_a_requests_check_costs_the_same_queries_at_3_and_30_tenants(
    world: dict[str, Any],
) -> None:
    """docs/benchmarks.md, catalog check: "a constant 6 queries whatever the fleet's size"
    (``_other_shares`` reads every other tenant's shares in one query)."""
    _grow(3, 0)
    small = _check_queries(world["alpha"])
    _grow(27, 3)
    assert Resource.objects.filter(state="active").count() == 60
    assert _check_queries(world["alpha"]) == small == 6
