"""What the ledger costs: effective-dated prices applied to UsageHour rows.

A price applies from its ``effective_from`` (00:00 UTC) until the next price of the same GPU
model and MIG profile, so a range of hours is cut at every date a price changes and each
piece is priced at the price of its own time: a new price never reaches back. Sums are taken
in the database per piece (one aggregate query per price period in the range, not per row),
and money is Decimal throughout.

Quantities: a whole-GPU line counts GPU-hours (allocated GPU-seconds / 3600, HAMi shares and
DRA claims by their GPU-equivalents); a MIG line counts instance-hours of its profile
(GPU-hours / the profile's share of the GPU), priced per instance-hour when the profile has a
price of its own, else as its share of the GPU model's price. A line whose GPU model has no
price at all is kept at zero with ``unit_price`` None, so the caller can show it as
unpriced rather than lose it.
"""

from __future__ import annotations

import bisect
import decimal
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour, TruncMonth

from billing.fractions import FractionError, mig_fraction
from billing.models import GpuPrice, UsageDay, UsageHour, UsageMonth

HOUR = Decimal(3600)
CENT = Decimal("0.01")
GPU_HOUR = "GPU-hour"
INSTANCE_HOUR = "instance-hour"
# A month of an estimate (right-sizing's savings, a request's cost): a year's hours over
# twelve, so that every month estimates the same.
HOURS_PER_MONTH = 730
TRUNC = {"hour": TruncHour, "day": TruncDay, "month": TruncMonth}


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


@dataclass(frozen=True)
class UnitPrice:
    """The price of one unit of a line, and what the unit is."""

    amount: Decimal
    unit: str  # GPU_HOUR or INSTANCE_HOUR
    price_id: int | None  # the GpuPrice it came from


@dataclass
class PriceBook:
    """Every price, by (GPU model, MIG profile), in order of its effective date."""

    prices: Mapping[tuple[str, str], Sequence[GpuPrice]]

    @classmethod
    def load(cls) -> PriceBook:
        by_key: dict[tuple[str, str], list[GpuPrice]] = defaultdict(list)
        for price in GpuPrice.objects.order_by("effective_from"):
            by_key[(price.gpu_model, price.mig_profile)].append(price)
        return cls(dict(by_key))

    def _in_effect(self, gpu_model: str, mig_profile: str, at: datetime) -> GpuPrice | None:
        prices = self.prices.get((gpu_model, mig_profile), ())
        days = [p.effective_from for p in prices]
        index = bisect.bisect_right(days, at.astimezone(UTC).date()) - 1
        return prices[index] if index >= 0 else None

    def unit_price(self, gpu_model: str, mig_profile: str, at: datetime) -> UnitPrice | None:
        """The price of a line of this model and profile at ``at``, None when there is none."""
        if mig_profile:
            own = self._in_effect(gpu_model, mig_profile, at)
            if own is not None:
                return UnitPrice(own.amount, INSTANCE_HOUR, own.pk)
        whole = self._in_effect(gpu_model, "", at)
        if whole is None:
            return None
        if not mig_profile:
            return UnitPrice(whole.amount, GPU_HOUR, whole.pk)
        try:
            share = mig_fraction(mig_profile)
        except FractionError:
            return None
        per_instance = whole.amount * share.numerator / share.denominator
        return UnitPrice(per_instance, INSTANCE_HOUR, whole.pk)

    def boundaries(self, start: datetime, end: datetime) -> list[datetime]:
        """Every moment in ``(start, end)`` at which some price takes effect."""
        moments = {
            day_start(p.effective_from)
            for prices in self.prices.values()
            for p in prices
            if start < day_start(p.effective_from) < end
        }
        return sorted(moments)

    def periods(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        cuts = [start, *self.boundaries(start, end), end]
        return [(a, b) for a, b in itertools.pairwise(cuts) if a < b]


@dataclass
class Priced:
    """The cost of one group of ledger rows over one price period."""

    key: dict[str, object]  # the group-by values (e.g. {"tenant_slug": "ml-research"})
    gpu_model: str
    mig_profile: str
    period_start: datetime
    period_end: datetime
    gpu_hours: Decimal
    used_gpu_hours: Decimal
    energy_kwh: Decimal
    quantity: Decimal  # in ``unit``s
    unit: str
    unit_price: Decimal | None  # None: no price known
    amount: Decimal  # not rounded; round the sum with money()
    observed_seconds: int = 0

    @property
    def priced(self) -> bool:
        return self.unit_price is not None


def _quantity(gpu_hours: Decimal, mig_profile: str, unit: str) -> Decimal:
    if unit != INSTANCE_HOUR:
        return gpu_hours
    share = mig_fraction(mig_profile)
    return gpu_hours * share.denominator / share.numerator


def _in_period(rows: QuerySet[Any], start: datetime, end: datetime) -> QuerySet[Any]:
    """Hourly rows with ``start <= hour < end``; daily rows (``UsageDay``) of the days the
    period touches. Prices change only at 00:00 UTC, so every period but a range's own ends
    is whole days; a range of daily rows must start at midnight (``priced`` checks)."""
    if rows.model is UsageDay:
        last = (end - timedelta(microseconds=1)).astimezone(UTC).date()
        return rows.filter(day__gte=start.astimezone(UTC).date(), day__lte=last)
    return rows.filter(hour__gte=start, hour__lt=end)


def next_month(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def whole_months(start: datetime, end: datetime) -> tuple[date, date] | None:
    """The calendar months lying wholly inside the days of ``[start, end)`` (``start`` at
    midnight UTC), as (first month, the month after the last); None when there is none."""
    first = start.astimezone(UTC).date()
    after = (end - timedelta(microseconds=1)).astimezone(UTC).date() + timedelta(days=1)
    month = first if first.day == 1 else next_month(first)
    if next_month(month) > after:
        return None
    last = month
    while next_month(next_month(last)) <= after:
        last = next_month(last)
    return month, next_month(last)


def _sums(query: QuerySet[Any], group: list[str]) -> QuerySet[Any]:
    return (
        query.values(*group)
        .annotate(
            allocated=Sum("allocated_gpu_seconds"),
            used=Sum("used_gpu_seconds"),
            energy=Sum("energy_kwh"),
            observed=Sum("observed_seconds"),
        )
        .order_by()
    )


SUMMED = ("allocated", "used", "energy", "observed")
# The decimal places of each sum (UsageDay's and UsageMonth's fields), for a database that
# sums decimals as floats (SQLite): rounded back as Django's own converter would.
PLACES = {"allocated": 3, "used": 3, "energy": 6}
FLOAT_CONTEXT = decimal.Context(prec=15)


def _exact(name: str, value: Any) -> Any:
    if isinstance(value, float) and name in PLACES:
        exact = FLOAT_CONTEXT.create_decimal_from_float(value)
        return exact.quantize(Decimal(1).scaleb(-PLACES[name]))
    return value


def _union_sums(parts: Sequence[QuerySet[Any]], group: list[str]) -> list[dict[str, Any]]:
    """``parts`` (each grouped by ``group`` with the four sums, as ``_sums`` makes them)
    summed again by ``group`` in one query: ``UNION ALL`` of their SQL, grouped outside, so
    the database returns one row per group rather than one per part and group."""
    compiled = [part.query.sql_with_params() for part in parts]
    quote = connection.ops.quote_name
    keys = ", ".join(quote(name) for name in group)
    sums = ", ".join(f"SUM({quote(name)})" for name in SUMMED)
    union = " UNION ALL ".join(sql for sql, _ in compiled)
    # Only column names of our own and Django's compiled SQL go into the text; every value
    # is a parameter.
    sql = f"SELECT {keys}, {sums} FROM ({union}) parts GROUP BY {keys} ORDER BY {keys}"  # noqa: S608
    params = [value for _, part_params in compiled for value in part_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    names = [*group, *SUMMED]
    return [
        {name: _exact(name, value) for name, value in zip(names, row, strict=True)} for row in found
    ]


def _period_sums(
    rows: QuerySet[Any],
    months: QuerySet[UsageMonth] | None,
    start: datetime,
    end: datetime,
    group: list[str],
) -> list[dict[str, Any]]:
    """The sums of one price period by ``group``: from the period's rows, or, for daily rows
    with the monthly sums at hand, from the months wholly inside it plus the days around
    them (a year is then ~12 rows per workload plus its edge days, not 365), added up in the
    database (one query either way)."""
    span = whole_months(start, end) if months is not None else None
    if months is None or span is None:
        return list(_sums(_in_period(rows, start, end), group).order_by(*group))
    first, after = span
    edge = Q(day__gte=start.astimezone(UTC).date(), day__lt=first)
    edge |= Q(day__gte=after, day__lte=(end - timedelta(microseconds=1)).astimezone(UTC).date())
    whole = _sums(months.filter(month__gte=first, month__lt=after), group)
    return _union_sums([whole, _sums(rows.filter(edge), group)], group)


def priced(
    rows: QuerySet[UsageHour] | QuerySet[UsageDay],
    start: datetime,
    end: datetime,
    *,
    by: Sequence[str] = (),
    trunc: str | None = None,
    book: PriceBook | None = None,
    months: QuerySet[UsageMonth] | None = None,
) -> list[Priced]:
    """The cost of ``rows`` with ``start <= hour < end``, grouped by the fields ``by`` (e.g.
    ``("tenant_slug", "flavor")``) and, with ``trunc`` ("hour", "day" or "month"), by that
    bucket of time (key ``"bucket"``). One aggregate query per price period.

    ``rows`` may be the daily sums (``UsageDay``) for a range that starts at midnight UTC:
    the same answer from 24 times fewer rows (group by ``"day"`` rather than ``trunc``).
    With daily rows, ``months`` (the monthly sums filtered as ``rows`` are, but not by
    time) lets whole months be read from one row each: two queries per period then."""
    book = book or PriceBook.load()
    fields = list(by)
    daily = rows.model is UsageDay
    if daily and (start.astimezone(UTC).time() != time(0) or trunc is not None):
        raise ValueError("daily rows are priced from midnight UTC, grouped by 'day'")
    if months is not None and (not daily or "day" in fields):
        raise ValueError("monthly sums stand in for daily rows that are not grouped by day")
    results: list[Priced] = []
    for period_start, period_end in book.periods(start, end):
        query = _in_period(rows, period_start, period_end) if trunc is not None else rows
        if trunc is not None:
            query = query.annotate(bucket=TRUNC[trunc]("hour"))
            group = [*fields, "bucket", "gpu_model", "mig_profile"]
            sums = list(_sums(query, group).order_by(*group))
        else:
            group = [*fields, "gpu_model", "mig_profile"]
            sums = _period_sums(query, months, period_start, period_end, group)
        for item in sums:
            gpu_hours = Decimal(item["allocated"] or 0) / HOUR
            price = book.unit_price(item["gpu_model"], item["mig_profile"], period_start)
            unit = price.unit if price else (INSTANCE_HOUR if item["mig_profile"] else GPU_HOUR)
            try:
                quantity = _quantity(gpu_hours, item["mig_profile"], unit)
            except FractionError:
                quantity, unit = gpu_hours, GPU_HOUR
            key = {name: item[name] for name in fields}
            if trunc is not None:
                key["bucket"] = item["bucket"]
            results.append(
                Priced(
                    key=key,
                    gpu_model=item["gpu_model"],
                    mig_profile=item["mig_profile"],
                    period_start=period_start,
                    period_end=period_end,
                    gpu_hours=gpu_hours,
                    used_gpu_hours=Decimal(item["used"] or 0) / HOUR,
                    energy_kwh=Decimal(item["energy"] or 0),
                    quantity=quantity,
                    unit=unit,
                    unit_price=price.amount if price else None,
                    amount=quantity * price.amount if price else Decimal(0),
                    observed_seconds=int(item["observed"] or 0),
                )
            )
    return results


@dataclass
class Total:
    """Sums of priced lines under one key."""

    gpu_hours: Decimal = Decimal(0)
    used_gpu_hours: Decimal = Decimal(0)
    energy_kwh: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    unpriced_gpu_hours: Decimal = Decimal(0)
    unpriced_models: set[str] = field(default_factory=set)

    @property
    def efficiency(self) -> Decimal:
        return self.used_gpu_hours / self.gpu_hours if self.gpu_hours else Decimal(0)

    def add(self, line: Priced) -> None:
        self.gpu_hours += line.gpu_hours
        self.used_gpu_hours += line.used_gpu_hours
        self.energy_kwh += line.energy_kwh
        self.amount += line.amount
        if not line.priced:
            self.unpriced_gpu_hours += line.gpu_hours
            self.unpriced_models.add(
                f"{line.gpu_model or '(unknown model)'} {line.mig_profile}".strip()
            )


def totals(lines: Iterable[Priced], key: str | Sequence[str] = ()) -> dict[object, Total]:
    """Sum ``lines`` by one key field (or a tuple of them); ``()`` sums everything under
    the key ``None``."""
    out: dict[object, Total] = defaultdict(Total)
    for line in lines:
        if isinstance(key, str):
            group: object = line.key.get(key)
        elif key:
            group = tuple(line.key.get(k) for k in key)
        else:
            group = None
        out[group].add(line)
    return dict(out)
