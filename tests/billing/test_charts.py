"""The dashboards' charts, built from rows without HTTP or a database."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from billing import charts
from billing.costing import Total
from billing.dashboards import Bucket, FlavorQuota, TenantCost

T0 = datetime(2026, 11, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 2, tzinfo=UTC)


def cost(tenant: str, amount: int, gpu_hours: int, used: int, **extra: object) -> TenantCost:
    total = Total(
        gpu_hours=Decimal(gpu_hours),
        used_gpu_hours=Decimal(used),
        amount=Decimal(amount),
        energy_kwh=Decimal(gpu_hours),
    )
    for name, value in extra.items():
        setattr(total, name, value)
    return TenantCost(tenant, total, {"h200": Decimal(amount)})


def test_allocation_is_in_percent_of_capacity() -> None:
    buckets = [
        Bucket(T0, Decimal(2), Decimal(1), Decimal(0), Decimal(4)),
        Bucket(T1, Decimal(0), Decimal(0), Decimal(0), Decimal(0)),
    ]
    figure = charts.allocation_figure(buckets)
    allocated, used = figure.data
    assert (allocated.name, list(allocated.y)) == ("Allocated", [50.0, 0.0])
    assert (used.name, list(used.y)) == ("Used", [25.0, 0.0])
    assert figure.layout.yaxis.ticksuffix == "%"


def test_waste_is_sorted_and_leaves_out_who_wasted_nothing() -> None:
    figure = charts.waste_figure([cost("a", 1, 10, 9), cost("b", 1, 10, 2), cost("c", 1, 5, 5)])
    [bars] = figure.data
    assert list(bars.x) == ["b", "a"]
    assert list(bars.y) == [8.0, 1.0]


def test_cost_is_stacked_by_flavor_and_flags_unpriced_hours() -> None:
    rows = [
        cost("alpha", 10, 4, 2),
        cost("", 0, 3, 0, unpriced_gpu_hours=Decimal(3), unpriced_models={"B200"}),
    ]
    figure = charts.cost_figure(rows, ["h200", "h200-mig"], "EUR")
    names = [trace.name for trace in figure.data]
    assert names == ["h200", "h200-mig", "Has unpriced GPU-hours"]
    assert list(figure.data[0].x) == ["alpha", "(no tenant)"]
    assert list(figure.data[0].y) == [10.0, 0.0]
    assert list(figure.data[2].x) == ["(no tenant)"]
    assert list(figure.data[2].customdata) == [3.0]
    assert figure.layout.barmode == "stack"


def test_cost_has_no_unpriced_marker_when_all_is_priced() -> None:
    figure = charts.cost_figure([cost("alpha", 10, 4, 2)], ["h200"], "EUR")
    assert [trace.name for trace in figure.data] == ["h200"]


def test_cost_keeps_to_the_dearest_tenants() -> None:
    rows = [cost(f"t{i:03}", 1000 - i, 1, 1) for i in range(500)]
    figure = charts.cost_figure(rows, ["h200"], "EUR")
    assert len(figure.data[0].x) == charts.MAX_BARS
    assert figure.data[0].x[0] == "t000"


def test_quota_groups_quota_allocated_and_pending() -> None:
    figure = charts.quota_figure([FlavorQuota("h200", Decimal(8), Decimal(3), Decimal(2))])
    assert [(t.name, list(t.y)) for t in figure.data] == [
        ("Quota", [8.0]),
        ("Allocated", [3.0]),
        ("Pending", [2.0]),
    ]
    assert figure.layout.barmode == "group"


def test_gpu_hours_energy_and_cost_over_time() -> None:
    buckets = [Bucket(T0, Decimal(3), Decimal(1), Decimal("0.5"))]
    usage = charts.gpu_hours_figure(buckets)
    assert [(t.name, list(t.y)) for t in usage.data] == [("Allocated", [3.0]), ("Used", [1.0])]
    assert list(charts.energy_figure(buckets).data[0].y) == [0.5]
    over_time = charts.cost_over_time_figure({T1: Decimal(2), T0: Decimal(1)}, "EUR")
    assert list(over_time.data[0].y) == [1.0, 2.0]
    by_tenant = charts.energy_by_tenant_figure([cost("a", 1, 1, 1), cost("b", 1, 5, 1)])
    assert list(by_tenant.data[0].x) == ["b", "a"]
