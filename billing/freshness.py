"""How current the usage ledger is: what every dashboard prints as "data as of".

The ledger is complete up to the end of the hour its ingest cursor names (the periodic
ingest has read every sample of it, rows or none). Without a cursor (a ledger filled by a
backfill or the demo's history only) the latest hour that has rows stands in. The data is
"lagging" when that moment is further behind now than ``BILLING_LAGGING_AFTER_MINUTES``:
an hour's ingest normally lands ``BILLING_INGEST_LAG_SECONDS`` after the hour ends, so a
healthy ledger is at most a little over an hour behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from billing.models import IngestCursor, UsageHour

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Freshness:
    """The end of the ledger's latest complete hour (None: the ledger is empty) seen at
    ``now``, and the lag beyond which it counts as behind."""

    as_of: datetime | None
    now: datetime
    threshold: timedelta

    @property
    def lag(self) -> timedelta | None:
        return None if self.as_of is None else max(self.now - self.as_of, timedelta(0))

    @property
    def lagging(self) -> bool:
        return self.as_of is not None and self.now - self.as_of > self.threshold

    @property
    def lag_hours(self) -> Decimal | None:
        lag = self.lag
        return None if lag is None else Decimal(lag.total_seconds()) / 3600

    @property
    def threshold_hours(self) -> Decimal:
        return Decimal(self.threshold.total_seconds()) / 3600


def ledger_freshness(now: datetime | None = None) -> Freshness:
    """The ledger's "data as of" moment: two queries (the cursor, the latest row's hour)."""
    cursor = (
        IngestCursor.objects.filter(source=settings.BILLING_SOURCE)
        .values_list("last_complete_hour", flat=True)
        .first()
    )
    latest = UsageHour.objects.aggregate(latest=Max("hour"))["latest"]
    ends = [moment + HOUR for moment in (cursor, latest) if moment is not None]
    return Freshness(
        as_of=max(ends) if ends else None,
        now=now or timezone.now(),
        threshold=timedelta(minutes=settings.BILLING_LAGGING_AFTER_MINUTES),
    )
