"""Change-request metrics, computed from the rows at scrape time (PORTAL_METRICS_COLLECTORS).

Opened and merged are counters: change requests are never deleted, so counting rows gives a
number that only grows, the same from every replica. How long checks take (the
``gitops.run_checks`` jobs) and Flux's apply lag (merge to the status sync finding the change
applied) are gauge histograms over the portal's metrics window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import prometheus_client
from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gitops.models import ChangeRequest
from portal.metrics import elapsed, gauge_histogram, window_start
from portal.models import Job

# Bucket bounds in seconds: check runs take a fraction of a second warm and several cold;
# Flux applies within its interval (a minute by default) unless something is wrong.
CHECK_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
LAG_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
CHECKS_TASK = "gitops.run_checks"


def change_metrics() -> Iterable[prometheus_client.Metric]:
    opened: dict[str, int] = defaultdict(int)
    merged: dict[str, int] = defaultdict(int)
    still_open: dict[str, int] = defaultdict(int)
    rows = ChangeRequest.objects.order_by().values("kind", "status").annotate(n=Count("pk"))
    for row in rows:
        opened[row["kind"]] += row["n"]
        if row["status"] == ChangeRequest.Status.MERGED:
            merged[row["kind"]] += row["n"]
        elif row["status"] == ChangeRequest.Status.OPEN:
            still_open[row["kind"]] += row["n"]
    kinds = ChangeRequest.Kind.values
    families = (
        (CounterMetricFamily, "portal_changes_opened", "Change requests opened, by kind.", opened),
        (CounterMetricFamily, "portal_changes_merged", "Change requests merged, by kind.", merged),
        (
            GaugeMetricFamily,
            "portal_changes_open",
            "Change requests open now, by kind.",
            still_open,
        ),
    )
    for family_type, name, documentation, counts in families:
        family = family_type(name, documentation, labels=["kind"])
        # Every kind, zeros included: a series that appears only with its first change makes
        # increase() miss that change.
        for kind in kinds:
            family.add_metric([kind], counts.get(kind, 0))
        yield family
    yield gauge_histogram(
        "portal_change_apply_lag_seconds",
        "Seconds from merge to the status sync finding the change applied (changes applied "
        "in the window).",
        ChangeRequest.objects.filter(
            applied_at__gte=window_start(), merged_at__isnull=False
        ).order_by(),
        elapsed("merged_at", "applied_at"),
        LAG_BUCKETS,
    )
    yield gauge_histogram(
        "portal_check_duration_seconds",
        "How long change checks took (gitops.run_checks jobs finished in the window).",
        Job.objects.filter(
            task=CHECKS_TASK, finished_at__gte=window_start(), started_at__isnull=False
        ).order_by(),
        elapsed("started_at", "finished_at"),
        CHECK_BUCKETS,
    )
