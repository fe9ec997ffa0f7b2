"""The dashboards' numbers: ranges and buckets, allocation, waste, cost, quotas, endpoints."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.dashboards import (
    COST_ROWS,
    Range,
    RangeError,
    admin_dashboard,
    bucket_starts,
    endpoint_of,
    parse_range,
    tenant_dashboard,
)
from billing.models import GpuPrice, IngestRun, Source, UsageHour
from billing.services import rollup_days
from catalog.models import Resource, ResourceRequest
from fleet.models import Health, Node

pytestmark = pytest.mark.django_db

H200 = "NVIDIA-H200"
NOW = datetime(2026, 11, 10, 12, 30, tzinfo=UTC)


def row(hour: datetime, **fields: object) -> UsageHour:
    values: dict[str, object] = {
        "tenant_slug": "alpha",
        "namespace": "alpha",
        "flavor": "h200",
        "gpu_model": H200,
        "mig_profile": "",
        "workload": "Deployment/train",
        "source": Source.EXPORTER,
        "allocated_gpu_seconds": Decimal(3600),
        "used_gpu_seconds": Decimal(1800),
        "observed_seconds": 3600,
        "energy_kwh": Decimal("0.5"),
    }
    values.update(fields)
    created = UsageHour.objects.create(hour=hour, **values)
    rollup_days([hour.astimezone(UTC).date()])  # as the ingest keeps the daily sums
    return created


def at(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def node(name: str, gpus: int, health: str = Health.HEALTHY) -> Node:
    return Node.objects.create(name=name, flavor="h200", gpu_count=gpus, health=health)


def window(first: int, last: int) -> Range:
    return parse_range(
        {"range": "custom", "from": f"2026-11-{first:02}", "to": f"2026-11-{last:02}"}, NOW
    )


def share(tenant: Any, name: str, count: int, state: str = "active", **extra: Any) -> Resource:
    return Resource.objects.create(
        tenant=tenant,
        kind="gpu-share",
        name=name,
        state=state,
        spec={"name": name, "flavor": "h200", "kind": "whole", "count": count, **extra}
        if state != "pending"
        else {},
    )


# --- ranges ---------------------------------------------------------------------------------------


def test_a_preset_ends_at_the_current_hour_and_picks_its_bucket() -> None:
    day = parse_range({"range": "24h"}, NOW)
    assert (day.start, day.end, day.bucket) == (at(9, 12), at(10, 12), "hour")
    assert parse_range({}, NOW).preset == "7d"
    assert parse_range({"range": "30d"}, NOW).bucket == "day"
    assert parse_range({"range": "90d"}, NOW).bucket == "day"
    assert parse_range({"range": "365d"}, NOW).bucket == "week"


def test_a_custom_range_includes_both_days() -> None:
    two = window(1, 2)
    assert (two.start, two.end, two.bucket, two.hours) == (at(1), at(3), "hour", 48)
    assert window(1, 3).bucket == "day"
    assert two.query() == "range=custom&from=2026-11-01&to=2026-11-02"
    long = parse_range({"range": "custom", "from": "2025-01-01", "to": "2026-06-30"}, NOW)
    assert long.bucket == "month"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"range": "custom", "from": "2026-11-05", "to": "2026-11-01"}, "must not be after"),
        ({"range": "custom", "from": "yesterday", "to": "2026-11-01"}, "from date must be a date"),
        ({"range": "custom", "from": "2026-11-01"}, "needs both"),
        ({"range": "custom", "from": "2020-01-01", "to": "2026-11-01"}, "at most 731 days"),
        ({"range": "12y"}, "Unknown range"),
    ],
)
def test_a_bad_range_says_why(params: dict[str, str], message: str) -> None:
    with pytest.raises(RangeError, match=message):
        parse_range(params, NOW)


def test_buckets_cover_the_range_and_clip_at_its_ends() -> None:
    weeks = parse_range({"range": "custom", "from": "2026-11-04", "to": "2026-11-10"}, NOW)
    weekly = Range(weeks.start, weeks.end, "week", "custom")
    # 2026-11-04 is a Wednesday: its week starts on Monday the 2nd.
    assert bucket_starts(weekly) == [(at(2), 5 * 24), (at(9), 2 * 24)]
    months = Range(datetime(2026, 10, 15, tzinfo=UTC), at(3), "month", "custom")
    assert bucket_starts(months) == [
        (datetime(2026, 10, 1, tzinfo=UTC), 17 * 24),
        (at(1), 2 * 24),
    ]


# --- the platform's dashboard ---------------------------------------------------------------------


@pytest.fixture
def usage(world: dict[str, Any]) -> None:
    """Four GPUs (one unhealthy node of one); alpha holds two GPUs for two days at 50%,
    bravo one GPU for one hour at 0%, and a namespace of nobody one GPU for an hour."""
    node("gpu-a", 3)
    node("gpu-b", 1, Health.UNHEALTHY)
    node("cpu", 0)
    for day in (1, 2):
        for hour in range(24):
            row(
                at(day, hour),
                workload="Deployment/train",
                allocated_gpu_seconds=Decimal(7200),
                used_gpu_seconds=Decimal(3600),
                energy_kwh=Decimal(1),
            )
    row(
        at(2, 23),
        tenant_slug="bravo",
        namespace="bravo",
        workload="Deployment/idle",
        used_gpu_seconds=Decimal(0),
        observed_seconds=1800,
    )
    row(at(2, 5), tenant_slug="", namespace="scratch", workload="Pod/x")


def test_the_tiles_count_the_fleet_and_the_latest_hour(usage: None) -> None:
    board = admin_dashboard(window(1, 2))
    tiles = board.tiles
    assert (tiles.total, tiles.unhealthy) == (4, 1)
    # The latest hour (2nd, 23:00): alpha two GPUs at half, bravo one idle.
    assert (tiles.hour, tiles.allocated, tiles.used) == (at(2, 23), Decimal(3), Decimal(1))


def test_allocation_and_utilisation_are_over_capacity_per_bucket(usage: None) -> None:
    board = admin_dashboard(window(1, 2))
    assert board.window.bucket == "hour" and len(board.series) == 48
    first = board.series[0]
    assert (first.gpu_hours, first.capacity_gpu_hours) == (Decimal(2), Decimal(4))
    assert (first.allocation, first.utilisation) == (Decimal("0.5"), Decimal("0.25"))
    last = board.series[-1]
    assert last.allocation == Decimal("0.75")
    daily = admin_dashboard(window(1, 3)).series
    assert [b.gpu_hours for b in daily] == [Decimal(48), Decimal(50), Decimal(0)]
    assert daily[0].capacity_gpu_hours == Decimal(96)
    assert daily[1].energy_kwh == Decimal(25)  # 24 + bravo 0.5 + nobody 0.5


def test_waste_and_cost_per_tenant_follow_a_price_change_inside_the_range(usage: None) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("3.00"), effective_from=date(2026, 11, 2)
    )
    costs = {c.tenant: c for c in admin_dashboard(window(1, 2)).costs}
    # alpha: 48 GPU-hours on the 1st at 4, 48 on the 2nd at 3.
    assert costs["alpha"].total.amount == Decimal(48 * 4 + 48 * 3)
    assert costs["alpha"].by_flavor == {"h200": Decimal(48 * 4 + 48 * 3)}
    assert costs["alpha"].idle_gpu_hours == Decimal(48)
    assert costs["alpha"].total.efficiency == Decimal("0.5")
    assert costs["bravo"].idle_gpu_hours == Decimal(1)
    assert list(costs) == ["alpha", "", "bravo"]  # dearest first, then by name


def test_the_warnings_name_gaps_nobodys_usage_failed_runs_and_unpriced_models(usage: None) -> None:
    row(at(2, 6), tenant_slug="alpha", gpu_model="NVIDIA-B200", workload="Deployment/b")
    IngestRun.objects.create(
        source=Source.EXPORTER,
        start=at(2),
        end=at(2, 1),
        status="failed",
        error="Prometheus answered 503",
    )
    IngestRun.objects.create(
        source=Source.EXPORTER, start=at(2, 1), end=at(2, 2), status="succeeded"
    )
    IngestRun.objects.create(source=Source.EXPORTER, start=at(5), end=at(5, 1), status="failed")
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(1), effective_from=date(2026, 1, 1))
    warned = admin_dashboard(window(1, 2)).warnings
    assert [run.error for run in warned.runs] == ["Prometheus answered 503"]
    assert (warned.gap_rows, warned.gap_hours) == (1, 1)
    assert warned.no_tenant_gpu_hours == Decimal(1)
    assert warned.unpriced_models == ["NVIDIA-B200"]
    assert warned.unpriced_gpu_hours == Decimal(1)


def test_quota_counts_approved_shares_and_pending_requests_in_gpu_equivalents(
    usage: None, world: dict[str, Any]
) -> None:
    share(world["alpha"], "train", 4)
    share(world["bravo"], "serve", 2)
    share(world["alpha"], "leaving", 1, state="decommissioned")
    grow = share(world["alpha"], "more", 3)
    ResourceRequest.objects.create(
        tenant=world["alpha"],
        resource=grow,
        action="modify",
        state="submitted",
        spec={**grow.spec, "count": 5},
    )
    new = share(world["bravo"], "new", 0, state="pending")
    ResourceRequest.objects.create(
        tenant=world["bravo"],
        resource=new,
        state="approved",
        spec={"name": "new", "flavor": "h200", "kind": "whole", "count": 1},
    )
    ResourceRequest.objects.create(
        tenant=world["bravo"],
        resource=new,
        state="rejected",
        spec={"name": "new", "flavor": "h200", "kind": "whole", "count": 9},
    )
    quotas = {q.flavor: q for q in admin_dashboard(window(1, 2)).quotas}
    assert (quotas["h200"].quota, quotas["h200"].allocated, quotas["h200"].pending) == (
        Decimal(9),
        Decimal(3),
        Decimal(3),
    )
    assert quotas["h200-mig"].quota == Decimal(0)
    alpha = {q.flavor: q for q in tenant_dashboard(window(1, 2), "alpha").quotas}
    assert list(alpha) == ["h200"]
    assert (alpha["h200"].quota, alpha["h200"].allocated, alpha["h200"].left) == (
        Decimal(7),
        Decimal(2),
        Decimal(5),
    )


def test_top_workloads_are_by_gpu_hours_with_their_efficiency(usage: None) -> None:
    top = admin_dashboard(window(1, 2)).top
    assert [(u.tenant, u.workload) for u in top][:1] == [("alpha", "Deployment/train")]
    assert top[0].gpu_hours == Decimal(96) and top[0].efficiency == Decimal("0.5")


# --- a tenant's dashboard -------------------------------------------------------------------------


def test_a_tenants_dashboard_has_only_its_own_rows(usage: None) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("2.00"), effective_from=date(2026, 1, 1))
    board = tenant_dashboard(window(1, 2), "bravo")
    assert board.total.gpu_hours == Decimal(1)
    assert board.total.amount == Decimal(2)
    assert [u.workload for u in board.idle] == ["Deployment/idle"]
    assert sum(b.gpu_hours for b in board.series) == Decimal(1)


def test_cost_over_time_and_price_lines_split_at_a_price_change(usage: None) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("3.00"), effective_from=date(2026, 11, 2)
    )
    board = tenant_dashboard(window(1, 3), "alpha")
    assert board.cost_series == {at(1): Decimal(192), at(2): Decimal(144)}
    assert [(p.period_start, p.unit_price, p.quantity, p.amount) for p in board.price_lines] == [
        (at(1), Decimal("4.00"), Decimal(48), Decimal(192)),
        (at(2), Decimal("3.00"), Decimal(48), Decimal(144)),
    ]
    assert board.total.efficiency == Decimal("0.5")


def test_weekly_cost_is_summed_from_days(usage: None) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(1), effective_from=date(2026, 1, 1))
    year = parse_range({"range": "365d"}, NOW)
    board = tenant_dashboard(year, "alpha")
    monday = datetime(2026, 10, 26, tzinfo=UTC)  # the week of Sunday the 1st
    assert board.cost_series == {monday: Decimal(48), at(2): Decimal(48)}


def test_endpoints_match_their_predictor_workloads(world: dict[str, Any]) -> None:
    for name in ("chat", "chat-large", "gone"):
        Resource.objects.create(
            tenant=world["alpha"],
            kind="endpoint",
            name=name,
            state="decommissioned" if name == "gone" else "active",
        )
    row(at(1), workload="ReplicaSet/chat-predictor-6d5f8c7b9c", used_gpu_seconds=Decimal(360))
    row(at(1), workload="ReplicaSet/chat-large-predictor-7c9d", used_gpu_seconds=Decimal(3600))
    row(at(2), workload="Pod/chat-predictor-6d5f8c7b9c-x2x4z", used_gpu_seconds=Decimal(0))
    row(at(1), workload="Deployment/chatter")
    board = tenant_dashboard(window(1, 2), "alpha")
    uses = {e.endpoint: (e.gpu_hours, e.efficiency) for e in board.endpoints}
    assert uses == {
        "chat": (Decimal(2), Decimal("0.05")),
        "chat-large": (Decimal(1), Decimal(1)),
    }


@pytest.mark.parametrize(
    ("workload", "endpoint"),
    [
        ("ReplicaSet/chat-predictor-6d5f8c7b9c", "chat"),
        ("Deployment/chat-predictor", "chat"),
        ("ReplicaSet/chat-large-predictor-1", "chat-large"),
        ("ReplicaSet/chatty-predictor-1", ""),
        ("Deployment/chat", ""),
    ],
)
def test_endpoint_of(workload: str, endpoint: str) -> None:
    assert endpoint_of(workload, ["chat", "chat-large"]) == endpoint


def test_a_year_of_hours_is_bucketed_in_the_database(world: dict[str, Any]) -> None:
    start = NOW.replace(minute=0) - timedelta(days=365)
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=start + timedelta(hours=h),
            tenant_slug="alpha",
            namespace="alpha",
            flavor="h200",
            gpu_model=H200,
            workload="Deployment/train",
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(3600),
            used_gpu_seconds=Decimal(900),
            observed_seconds=3600,
        )
        for h in range(365 * 24)
    )
    rollup_days((start + timedelta(days=d)).date() for d in range(366))
    board = admin_dashboard(parse_range({"range": "365d"}, NOW))
    assert board.window.bucket == "week"
    assert len(board.series) in (53, 54)
    # The last 365 calendar days, today's hours so far included: midnight 364 days ago on.
    assert board.window.start == datetime(2025, 11, 11, tzinfo=UTC)
    inside = UsageHour.objects.filter(hour__gte=board.window.start).count()
    assert inside == 365 * 24 - 12
    assert sum(b.gpu_hours for b in board.series) == Decimal(inside)


def test_the_cost_table_lists_the_dearest_tenants_and_sums_the_rest(world: dict[str, Any]) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(1), effective_from=date(2026, 1, 1))
    for i in range(COST_ROWS + 2):
        row(
            at(1),
            tenant_slug=f"t{i:03}",
            namespace=f"t{i:03}",
            allocated_gpu_seconds=Decimal(3600 * (i + 1)),
            used_gpu_seconds=Decimal(0),
        )
    board = admin_dashboard(window(1, 1))
    assert len(board.listed_costs) == COST_ROWS
    assert board.listed_costs[0].tenant == f"t{COST_ROWS + 1:03}"
    assert board.other_count == 2
    assert board.other_costs.amount == Decimal(1 + 2)
    assert board.other_costs.gpu_hours == Decimal(3)
