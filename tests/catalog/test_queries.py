"""Query counts that docs/benchmarks.md and the code's comments promise stay constant, pinned
at two sizes: the same number of queries for 3 and for 30 tenants (or rows)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog import services
from catalog.models import Resource, bump_share_version
from gitops.fleet import demo_fleet
from tenants.models import Tenant

# Query counts.
pytestmark = [pytest.mark.django_db, pytest.mark.db_engine]

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
    bump_share_version()  # bulk_create sends no signals


def _check_queries(tenant: Tenant) -> int:
    fleet = demo_fleet()
    with CaptureQueriesContext(connection) as captured:
        check = services.check_request(tenant, "gpu-share", "new", dict(SHARE), fleet=fleet)
    assert check.ok, check.errors
    return len(captured)


def test_a_requests_check_costs_the_same_queries_at_3_and_30_tenants(
    world: dict[str, Any],
) -> None:
    """docs/benchmarks.md, catalog check: "a constant 6 queries whatever the fleet's size when
    nothing changed, 7 when a share did" (the version row, then every share in one query),
    plus one for the reserved nodes' rows (the what-if takes their GPUs out of the pool)."""
    _grow(3, 0)
    small = _check_queries(world["alpha"])
    _grow(27, 3)
    assert Resource.objects.filter(state="active").count() == 60
    # The version row and, the shares having changed, all of them in one query.
    assert _check_queries(world["alpha"]) == small == 8
    # Nothing changed since: the version row only.
    assert _check_queries(world["alpha"]) == 7


def _h200_share(tenant: Tenant, name: str, count: int) -> Resource:
    """An active whole-GPU share of ``tenant`` on main, saved as the portal saves it."""
    return Resource.objects.create(
        tenant=tenant,
        kind="gpu-share",
        name=name,
        state="active",
        spec={"name": name, "flavor": "h200", "kind": "whole", "count": count},
    )


def _promised_h200(tenant: Tenant) -> Any:
    check = services.check_request(tenant, "gpu-share", "new", dict(SHARE), fleet=demo_fleet())
    [row] = [r for r in check.capacity if r.flavor == "h200"]
    return row.before


def test_the_kept_shares_follow_every_change_and_forget_a_rolled_back_one(
    world: dict[str, Any],
) -> None:
    """The what-if keeps every tenant's shares in the process by ShareVersion: a share made,
    changed or removed shows at the next check, and one made in a transaction that rolled
    back (whose view a check inside it read) does not. ``before`` is what all tenants are
    promised, the checked tenant's own shares counted once."""
    from django.db import transaction

    alpha, bravo = world["alpha"], world["bravo"]
    assert _promised_h200(alpha) == 0
    share = _h200_share(bravo, "train", 3)
    assert _promised_h200(alpha) == 3
    share.spec = {**share.spec, "count": 5}
    share.save()
    assert _promised_h200(alpha) == 5
    _h200_share(alpha, "own", 2)
    assert _promised_h200(alpha) == _promised_h200(bravo) == 7

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        share.spec = {**share.spec, "count": 7}
        share.save()
        assert _promised_h200(alpha) == 9  # the transaction's own view, kept meanwhile
        raise Undo
    # One more change before anyone checks again: a counter would hand it the rolled-back
    # change's number, and the view kept under that number would pass for current.
    share.refresh_from_db()
    share.spec = {**share.spec, "count": 4}
    share.save()
    assert _promised_h200(alpha) == 6
    share.state = "decommissioned"
    share.save()
    assert _promised_h200(alpha) == 2
    _h200_share(bravo, "again", 1)
    assert _promised_h200(alpha) == 3
    bravo.delete()  # its resources go through the cascade
    assert _promised_h200(alpha) == 2


def _approval_queries(tenant: Tenant, world: dict[str, Any], name: str) -> int:
    request = services.do_create_request(
        tenant,
        acting_user=world["bob"] if tenant.slug == "alpha" else world["charlie"],
        kind="gpu-share",
        spec={**SHARE, "name": name, "count": 1},
    )
    with CaptureQueriesContext(connection) as captured:
        done = services.do_approve(request, acting_user=world["pam"], merge=True)
    assert done.state == "pr_open" and done.change is not None, done.error
    assert done.change.queue_entries.filter(state="queued").exists()
    return len(captured)


def test_an_approval_costs_the_same_queries_at_3_and_30_tenants(
    onboarded: dict[str, Any],
) -> None:
    """An approval ("approve and merge": check, render, branch, review, merge queue) reads the
    request with its resource, tenant and people in one locked query and costs the same
    number of queries whatever the fleet's size (docs/benchmarks.md, approval burst)."""
    world = onboarded
    _approval_queries(world["alpha"], world, "warm")  # the approver's roles, read once
    _grow(3, 0)
    small = _approval_queries(world["alpha"], world, "small")
    _grow(27, 3)
    large = _approval_queries(world["alpha"], world, "large")
    assert small == large
    # Before the people came with the request and the refusal was read under its lock, it was
    # 50 on PostgreSQL: 6 of them the people again, a second read of the request and a
    # savepoint of its own around the merge queue's. One more since the decision marks the
    # admins' "waits for a platform admin" notices read (one UPDATE, whatever their number).
    assert large <= 45, large
