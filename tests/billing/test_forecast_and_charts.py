"""The pure parts of current dashboards: the month's forecast, the first month a trend
draws, and whether a chart has anything to draw."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from billing.budgets import forecast
from billing.charts import drawn, gpu_hours_figure, has_data, quota_figure, reclaimed_figure
from billing.charts import from_first_data as from_first_buckets
from billing.dashboards import Bucket, FlavorQuota
from billing.finance_charts import from_first_data

MARCH = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))


def test_the_forecast_is_the_spend_so_far_at_the_same_rate_for_the_whole_month() -> None:
    start, end = MARCH
    # Ten of 31 days gone, 100 spent: 310 for the month.
    assert forecast(Decimal(100), start, end, datetime(2026, 3, 11, tzinfo=UTC)) == Decimal(310)
    # Half a day gone (12 of 744 hours): 62 times what is spent.
    assert forecast(Decimal("1.50"), start, end, datetime(2026, 3, 1, 12, tzinfo=UTC)) == Decimal(
        "93.00"
    )


def test_the_forecast_of_a_month_with_no_time_gone_or_all_of_it_is_the_spend() -> None:
    start, end = MARCH
    assert forecast(Decimal(40), start, end, start) == Decimal(40)
    # Data as of before the month (a ledger behind since last month): nothing to run on.
    assert forecast(Decimal(40), start, end, datetime(2026, 2, 27, tzinfo=UTC)) == Decimal(40)
    assert forecast(Decimal(40), start, end, datetime(2026, 4, 3, tzinfo=UTC)) == Decimal(40)
    assert forecast(Decimal(0), start, end, datetime(2026, 3, 20, tzinfo=UTC)) == Decimal(0)


def test_a_trend_starts_at_the_first_month_with_a_cost() -> None:
    months = [date(2026, m, 1) for m in range(1, 7)]
    costs = {
        "alpha": {date(2026, 3, 1): Decimal(0), date(2026, 4, 1): Decimal(5)},
        "bravo": {date(2026, 6, 1): Decimal(2)},
    }
    # March's zero is no cost; May, empty after the first cost, stays.
    assert from_first_data(months, costs) == [date(2026, m, 1) for m in (4, 5, 6)]
    assert from_first_data(months, {}) == []
    assert from_first_data(months, {"alpha": {date(2026, 2, 1): Decimal(0)}}) == []


def bucket(hour: int, held: str) -> Bucket:
    return Bucket(datetime(2026, 3, 1, hour, tzinfo=UTC), Decimal(held), Decimal(0), Decimal(0))


def test_a_chart_without_points_or_with_zeros_only_is_not_drawn() -> None:
    assert not has_data(reclaimed_figure([]))
    assert drawn(reclaimed_figure([])) == ""
    assert not has_data(gpu_hours_figure([bucket(0, "0"), bucket(1, "0")]))
    assert not has_data(quota_figure([]))


def test_a_chart_with_a_value_is_drawn() -> None:
    assert has_data(gpu_hours_figure([bucket(0, "0"), bucket(1, "0.25")]))
    assert has_data(quota_figure([FlavorQuota("h200", Decimal(2), Decimal(0))]))
    assert 'class="plotly-chart"' in drawn(reclaimed_figure([(date(2026, 3, 1), Decimal(1))]))


def test_a_weekly_or_monthly_series_starts_at_its_first_bucket_with_data() -> None:
    empty, used, later_empty = bucket(0, "0"), bucket(1, "2"), bucket(2, "0")
    energy_only = Bucket(empty.start, Decimal(0), Decimal(0), Decimal("0.5"))
    for size in ("week", "month"):
        assert from_first_buckets([empty, empty, used, later_empty], size) == [used, later_empty]
        assert from_first_buckets([empty, energy_only], size) == [energy_only]
        assert from_first_buckets([empty, empty], size) == []
    # An hour or a day without usage is worth seeing: those series are kept whole.
    for size in ("hour", "day"):
        assert from_first_buckets([empty, used], size) == [empty, used]
