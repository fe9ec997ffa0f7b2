"""Fleet sync metrics, computed from SyncState rows at scrape time (PORTAL_METRICS_COLLECTORS)."""

from __future__ import annotations

from collections.abc import Iterable

import prometheus_client
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from fleet.models import SyncState


def sync_metrics() -> Iterable[prometheus_client.Metric]:
    now = timezone.now()
    age = GaugeMetricFamily(
        "portal_fleet_sync_age_seconds",
        "Seconds since the last successful read of each inventory source.",
        labels=["source"],
    )
    failing = GaugeMetricFamily(
        "portal_fleet_sync_failing",
        "1 when the last read of the source failed (or none has succeeded yet).",
        labels=["source"],
    )
    for state in SyncState.objects.order_by("source"):
        if state.last_success is not None:
            age.add_metric([state.source], max(0.0, (now - state.last_success).total_seconds()))
        failing.add_metric([state.source], 1 if state.error or state.last_success is None else 0)
    yield age
    yield failing
