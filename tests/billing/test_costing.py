"""Prices applied to the ledger: effective dates, MIG profiles, unpriced models."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing.costing import GPU_HOUR, INSTANCE_HOUR, PriceBook, Priced, priced, totals
from billing.models import GpuPrice, Source, UsageDay, UsageHour
from billing.services import rollup_days

pytestmark = pytest.mark.django_db

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
