"""What a dedicated tenant's reserved nodes cost (issue 29): billed from acceptance to release,
whatever they run.

A reservation (``fleet.models.NodeReservation``, read only) is billed per GPU-hour of the
node at the ``ReservationPrice`` of its GPU model in effect at the time: hours from
``max(accepted_at, period start)`` to ``min(released_at or now, period end)``, times the
node's GPUs, cut at every date the price changes. A reservation not accepted yet (its change
not merged) costs nothing.

The tenant's own work on its reserved nodes is paid by the reservation, not again by the
usage price: the ledger files a reserved node's usage under the tenant-exclusive flavor
``<pool>.<slug>`` (``billing.services.node_infos``), and an invoice lists those rows at zero,
"covered by the node reservation" (``billing.invoicing.gpu_lines``). The same rule makes a
reserved node's idle hours the tenant's waste rather than the platform's idle capacity
(``reserved_hours``, read by the dashboards).
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Q, QuerySet

from billing.costing import HOUR, day_start
from billing.models import ReservationPrice
from fleet.models import NodeReservation

RESERVED_GPU_HOUR = "reserved GPU-hour"


def reserved_flavor(pool: str, slug: str) -> str:
    """The tenant-exclusive flavor of its nodes of ``pool``, as Kueue knows it: the same name
    as ``gitops.render.reservations.flavor_name`` (billing may not import the renderers;
    tests/billing/test_reservations.py checks that the two agree)."""
    return f"{pool}.{slug}"


def is_reserved_flavor(flavor: str, slug: str) -> bool:
    """Whether a ledger row's ``flavor`` is one of ``slug``'s reserved nodes: dotted, so never
    a fleet flavor (a DNS label), and ending in the tenant's own slug."""
    pool, dot, owner = flavor.partition(".")
    return bool(pool and dot and owner == slug)


@dataclass
class ReservationPriceBook:
    """Every reservation price, by GPU model, in order of its effective date."""

    prices: Mapping[str, Sequence[ReservationPrice]]

    @classmethod
    def load(cls) -> ReservationPriceBook:
        by_model: dict[str, list[ReservationPrice]] = defaultdict(list)
        for price in ReservationPrice.objects.order_by("effective_from"):
            by_model[price.gpu_model].append(price)
        return cls(dict(by_model))

    def in_effect(self, gpu_model: str, at: datetime) -> ReservationPrice | None:
        prices = self.prices.get(gpu_model, ())
        days = [p.effective_from for p in prices]
        index = bisect.bisect_right(days, at.astimezone(UTC).date()) - 1
        return prices[index] if index >= 0 else None

    def periods(
        self, gpu_model: str, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime]]:
        """``[start, end)`` cut at every date a price of ``gpu_model`` takes effect."""
        cuts = sorted(
            {
                day_start(p.effective_from)
                for p in self.prices.get(gpu_model, ())
                if start < day_start(p.effective_from) < end
            }
        )
        return [(a, b) for a, b in itertools.pairwise([start, *cuts, end]) if a < b]


@dataclass(frozen=True)
class ReservedSpan:
    """One reservation over one price period: what an invoice line shows."""

    reservation: NodeReservation
    period_start: datetime
    period_end: datetime
    unit_price: Decimal | None  # per GPU-hour; None: no price known

    @property
    def node_hours(self) -> Decimal:
        return Decimal((self.period_end - self.period_start).total_seconds()) / HOUR

    @property
    def gpu_hours(self) -> Decimal:
        return self.node_hours * self.reservation.gpus

    @property
    def amount(self) -> Decimal:
        """Not rounded; round the sum with ``money()``."""
        return self.gpu_hours * self.unit_price if self.unit_price is not None else Decimal(0)


def overlapping(
    start: datetime, end: datetime, slugs: Iterable[str] | None = None
) -> QuerySet[NodeReservation]:
    """Accepted reservations that were in force some time in ``[start, end)``."""
    rows = NodeReservation.objects.filter(accepted_at__isnull=False, accepted_at__lt=end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=start)
    )
    if slugs is not None:
        rows = rows.filter(tenant_slug__in=list(slugs))
    return rows.order_by("tenant_slug", "node_name", "accepted_at")


def reserved_window(
    reservation: NodeReservation, start: datetime, end: datetime, now: datetime
) -> tuple[datetime, datetime] | None:
    """The part of ``[start, end)`` the reservation was in force, up to ``now`` for one not
    released yet; None when there is none."""
    if reservation.accepted_at is None:
        return None
    begin = max(reservation.accepted_at, start)
    finish = min(reservation.released_at or now, end)
    return (begin, finish) if begin < finish else None


def spans(
    reservations: Iterable[NodeReservation],
    start: datetime,
    end: datetime,
    now: datetime,
    book: ReservationPriceBook | None = None,
) -> list[ReservedSpan]:
    """Each reservation's time in ``[start, end)``, cut at its model's price changes."""
    book = book or ReservationPriceBook.load()
    out = []
    for reservation in reservations:
        window = reserved_window(reservation, start, end, now)
        if window is None:
            continue
        for period_start, period_end in book.periods(reservation.gpu_product, *window):
            price = book.in_effect(reservation.gpu_product, period_start)
            out.append(
                ReservedSpan(reservation, period_start, period_end, price.amount if price else None)
            )
    return out


def reserved_gpu_hours(
    start: datetime, end: datetime, now: datetime, slugs: Iterable[str] | None = None
) -> dict[str, Decimal]:
    """GPU-hours each tenant held reserved in ``[start, end)``: its nodes' GPUs times the
    hours they were its, used or not."""
    out: dict[str, Decimal] = defaultdict(Decimal)
    for reservation in overlapping(start, end, slugs):
        window = reserved_window(reservation, start, end, now)
        if window is not None:
            hours = Decimal((window[1] - window[0]).total_seconds()) / HOUR
            out[reservation.tenant_slug] += hours * reservation.gpus
    return dict(out)
