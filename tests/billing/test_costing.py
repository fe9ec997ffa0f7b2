"""Prices applied to the ledger: effective dates, MIG profiles, unpriced models."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from billing.costing import (
    GPU_HOUR,
    INSTANCE_HOUR,
    PriceBook,
    Priced,
    priced,
    totals,
    whole_months,
)
from billing.models import FleetDay, GpuPrice, Source, UsageDay, UsageHour, UsageMonth
from billing.services import rollup_days

# Raw SQL (UNION ALL of compiled querysets) and sums that SQLite returns as floats.
pytestmark = [pytest.mark.django_db, pytest.mark.db_engine]

H200 = "NVIDIA-H200"


def _row(hour: datetime, **fields: object) -> UsageHour:
    values: dict[str, object] = {
        "tenant_slug": "alpha",
        "namespace": "alpha",
        "flavor": "h200",
        "gpu_model": H200,
        "mig_profile": "",
        "workload": "Deployment/x",
        "source": Source.EXPORTER,
        "allocated_gpu_seconds": Decimal(3600),
        "used_gpu_seconds": Decimal(1800),
        "observed_seconds": 3600,
        "energy_kwh": Decimal("0.5"),
    }
    values.update(fields)
    return UsageHour.objects.create(hour=hour, **values)


def _at(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def test_it_prices_each_hour_at_the_price_of_its_own_date() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("3.00"), effective_from=date(2026, 11, 2)
    )
    for day in (1, 2):
        for hour in (0, 23):
            _row(_at(day, hour), workload=f"Deployment/{hour}")
    lines = priced(UsageHour.objects.all(), _at(1), _at(3))
    assert [(line.period_start, line.unit_price, line.quantity) for line in lines] == [
        (_at(1), Decimal("4.00"), Decimal(2)),
        (_at(2), Decimal("3.00"), Decimal(2)),
    ]
    assert totals(lines)[None].amount == Decimal(14)


def test_a_later_price_does_not_reach_back() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    _row(_at(1))
    before = totals(priced(UsageHour.objects.all(), _at(1), _at(2)))[None].amount
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("9.00"), effective_from=date(2026, 11, 2)
    )
    after = totals(priced(UsageHour.objects.all(), _at(1), _at(2)))[None].amount
    assert before == after == Decimal(4)


def test_a_mig_profile_pays_its_own_price_per_instance_hour() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("7.00"), effective_from=date(2026, 1, 1))
    GpuPrice.objects.create(
        gpu_model=H200,
        mig_profile="1g.18gb",
        amount=Decimal("1.50"),
        effective_from=date(2026, 1, 1),
    )
    # Two 1g instances for an hour: 2/7 of a GPU-hour.
    _row(_at(1), mig_profile="1g.18gb", allocated_gpu_seconds=Decimal(7200) / 7)
    [line] = priced(UsageHour.objects.all(), _at(1), _at(2))
    assert line.unit == INSTANCE_HOUR
    assert line.quantity.quantize(Decimal("0.001")) == Decimal("2.000")
    assert line.amount.quantize(Decimal("0.01")) == Decimal("3.00")


def test_a_profile_without_a_price_pays_its_share_of_the_gpu() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("7.00"), effective_from=date(2026, 1, 1))
    _row(_at(1), mig_profile="3g.71gb", allocated_gpu_seconds=Decimal(3600) * 3 / 7)
    [line] = priced(UsageHour.objects.all(), _at(1), _at(2))
    assert line.unit == INSTANCE_HOUR
    assert line.unit_price == Decimal(3)
    assert line.amount.quantize(Decimal("0.01")) == Decimal("3.00")


def test_an_unknown_model_is_kept_unpriced_not_lost() -> None:
    _row(_at(1), gpu_model="NVIDIA-B300")
    [line] = priced(UsageHour.objects.all(), _at(1), _at(2))
    assert line.unit_price is None and line.amount == 0 and line.unit == GPU_HOUR
    total = totals([line])[None]
    assert total.unpriced_gpu_hours == 1 and total.unpriced_models == {"NVIDIA-B300"}


def test_it_groups_by_tenant_and_day() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("2.00"), effective_from=date(2026, 1, 1))
    _row(_at(1, 1))
    _row(_at(1, 2))
    _row(_at(2, 1), tenant_slug="bravo", namespace="bravo")
    lines = priced(UsageHour.objects.all(), _at(1), _at(3), by=("tenant_slug",), trunc="day")
    by_tenant = totals(lines, "tenant_slug")
    assert by_tenant["alpha"].amount == 4 and by_tenant["bravo"].amount == 2
    assert by_tenant["alpha"].efficiency == Decimal("0.5")
    assert {line.key["bucket"].date() for line in lines} == {date(2026, 11, 1), date(2026, 11, 2)}


def test_the_price_book_cuts_only_at_changes_inside_the_range() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(1), effective_from=date(2026, 10, 1))
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(2), effective_from=date(2026, 11, 15))
    book = PriceBook.load()
    assert book.periods(_at(1), _at(30)) == [(_at(1), _at(15)), (_at(15), _at(30))]
    assert book.periods(_at(16), _at(30)) == [(_at(16), _at(30))]


def _summed(lines: list[Priced]) -> dict[object, tuple[Decimal, Decimal]]:
    places = Decimal("0.0001")
    return {
        key: (total.amount.quantize(places), total.gpu_hours.quantize(places))
        for key, total in totals(lines, ("tenant_slug", "workload")).items()
    }


def test_the_daily_sums_price_as_the_hours_do() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("3.00"), effective_from=date(2026, 11, 2)
    )
    for day in (1, 2, 3):
        for hour in range(0, 12, 5):
            _row(_at(day, hour), workload=f"Job/{hour % 2}", observed_seconds=3600 - hour)
    _row(_at(2, 7), mig_profile="1g.18gb", allocated_gpu_seconds=Decimal(3600) / 7)
    assert rollup_days([date(2026, 11, d) for d in (1, 2, 3)]) == 7
    # A range may end inside a day: the day's row holds the hours ingested so far.
    end = _at(3, 12)
    hourly = priced(UsageHour.objects.all(), _at(1), end, by=("tenant_slug", "workload"))
    daily = priced(UsageDay.objects.all(), _at(1), end, by=("tenant_slug", "workload"))
    assert _summed(daily) == _summed(hourly)
    assert {(line.period_start, line.unit_price) for line in daily if not line.mig_profile} == {
        (_at(1), Decimal("4.00")),
        (_at(2), Decimal("3.00")),
    }
    day = UsageDay.objects.get(day=date(2026, 11, 1), workload="Job/0")
    assert (day.hours, day.gap_hours) == (2, 1)  # hours 0 and 10; 10 was not whole
    assert day.allocated_gpu_seconds == 7200


def test_a_rolled_up_day_is_replaced_not_added_to() -> None:
    _row(_at(1, 1))
    rollup_days([date(2026, 11, 1)])
    _row(_at(1, 2))
    rollup_days([date(2026, 11, 1)])
    [day] = UsageDay.objects.all()
    assert (day.hours, day.allocated_gpu_seconds) == (2, 7200)


def test_daily_rows_refuse_a_range_that_does_not_start_at_midnight() -> None:
    with pytest.raises(ValueError, match="midnight"):
        priced(UsageDay.objects.all(), _at(1, 3), _at(2))


def test_whole_months_are_those_lying_inside_the_days() -> None:
    def at(y: int, m: int, d: int) -> datetime:
        return datetime(y, m, d, tzinfo=UTC)

    assert whole_months(at(2026, 1, 1), at(2026, 2, 1)) == (date(2026, 1, 1), date(2026, 2, 1))
    assert whole_months(at(2026, 1, 2), at(2026, 3, 1)) == (date(2026, 2, 1), date(2026, 3, 1))
    assert whole_months(at(2025, 11, 15), at(2026, 3, 2)) == (date(2025, 12, 1), date(2026, 3, 1))
    assert whole_months(at(2026, 1, 2), at(2026, 2, 28)) is None
    # A range ending inside a day counts that day (its row holds the hours so far).
    assert whole_months(at(2026, 1, 1), datetime(2026, 1, 31, 5, tzinfo=UTC)) == (
        date(2026, 1, 1),
        date(2026, 2, 1),
    )


def test_monthly_sums_price_as_the_days_do_across_a_price_change() -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2025, 1, 1))
    # A price from the middle of February: January and March are whole months of one price,
    # February is read from its days on both sides of the change.
    GpuPrice.objects.create(
        gpu_model=H200, amount=Decimal("3.00"), effective_from=date(2026, 2, 10)
    )
    GpuPrice.objects.create(
        gpu_model=H200,
        mig_profile="1g.18gb",
        amount=Decimal("0.70"),
        effective_from=date(2026, 3, 1),
    )
    start = datetime(2025, 12, 20, tzinfo=UTC)
    days = 110
    for d in range(days):
        moment = start + timedelta(days=d)
        _row(moment.replace(hour=3), workload="Job/a", observed_seconds=3000)
        _row(
            moment.replace(hour=9),
            workload="Job/b",
            tenant_slug="bravo",
            namespace="bravo",
            mig_profile="1g.18gb",
            allocated_gpu_seconds=Decimal(3600) / 7,
        )
    rollup_days((start + timedelta(days=d)).date() for d in range(days))
    assert set(UsageMonth.objects.values_list("month", flat=True)) == {
        date(2025, 12, 1),
        date(2026, 1, 1),
        date(2026, 2, 1),
        date(2026, 3, 1),
        date(2026, 4, 1),
    }
    end = start + timedelta(days=days - 1)
    by = ("tenant_slug", "workload")
    hourly = priced(UsageHour.objects.all(), start, end, by=by)
    daily = priced(UsageDay.objects.all(), start, end, by=by)
    monthly = priced(UsageDay.objects.all(), start, end, by=by, months=UsageMonth.objects.all())
    assert _summed(monthly) == _summed(daily) == _summed(hourly)
    alpha = totals(monthly, "tenant_slug")["alpha"]
    assert alpha.gpu_hours == days - 1
    # A tenant's months only, as the tenant filter applies to both.
    only_bravo = priced(
        UsageDay.objects.filter(tenant_slug="bravo"),
        start,
        end,
        by=by,
        months=UsageMonth.objects.filter(tenant_slug="bravo"),
    )
    assert set(totals(only_bravo, "tenant_slug")) == {"bravo"}
    assert _summed(only_bravo) == {k: v for k, v in _summed(hourly).items() if k[0] == "bravo"}


def test_rollup_keeps_months_and_fleet_days_in_step_with_the_days() -> None:
    _row(_at(1, 1))
    _row(_at(1, 2), workload="Job/b", observed_seconds=100)
    _row(_at(2, 1))
    rollup_days([date(2026, 11, 1), date(2026, 11, 2)])
    [month] = UsageMonth.objects.filter(workload="Deployment/x")
    assert (month.month, month.hours, month.allocated_gpu_seconds) == (date(2026, 11, 1), 2, 7200)
    first = FleetDay.objects.get(day=date(2026, 11, 1))
    assert (first.allocated_gpu_seconds, first.rows, first.gap_hours) == (7200, 2, 1)
    # Re-running replaces: an hour re-ingested with less in it lowers every sum.
    UsageHour.objects.filter(hour=_at(1, 2)).delete()
    rollup_days([date(2026, 11, 1)])
    assert FleetDay.objects.get(day=date(2026, 11, 1)).allocated_gpu_seconds == 3600
    assert UsageMonth.objects.filter(workload="Job/b").count() == 0
    assert UsageMonth.objects.get(workload="Deployment/x").hours == 2


def test_monthly_sums_are_refused_where_they_cannot_stand_in() -> None:
    with pytest.raises(ValueError, match="monthly"):
        priced(UsageDay.objects.all(), _at(1), _at(3), by=("day",), months=UsageMonth.objects.all())
    with pytest.raises(ValueError, match="monthly"):
        priced(UsageHour.objects.all(), _at(1), _at(3), months=UsageMonth.objects.all())
