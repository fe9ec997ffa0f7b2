"""``/metrics``: the portal's numbers for Prometheus, behind a bearer token.

Two kinds of series come out of one scrape:

- django-prometheus's request, response and exception metrics, counted in this process (or,
  with PROMETHEUS_MULTIPROC_DIR set, summed over every gunicorn worker of the pod from the
  files prometheus_client keeps there);
- the portal's own, computed from the database at scrape time by the collectors named in
  PORTAL_METRICS_COLLECTORS (each app contributes its own: the portal imports no app). Being
  read from rows, they are the same whichever replica or worker answers, and nothing has to
  be counted at the moment a change merges or a job runs.

Each collector runs a fixed number of aggregate queries, whatever the number of rows (pinned
by tests/portal/test_metrics.py). Distributions over time (how long checks take, how long
Flux takes to apply a merge) are gauge histograms over the last PORTAL_METRICS_WINDOW_SECONDS:
rows come and go (jobs are pruned), so they are not cumulative counters; take
``histogram_quantile`` of the buckets directly, not of their ``rate()``.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import prometheus_client
from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.module_loading import import_string
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from portal.models import Job

logger = logging.getLogger(__name__)

MetricSource = Callable[[], Iterable[prometheus_client.Metric]]


def window_start() -> datetime:
    return timezone.now() - timedelta(seconds=settings.PORTAL_METRICS_WINDOW_SECONDS)


def gauge_histogram(
    name: str,
    documentation: str,
    queryset: QuerySet[Any],
    duration: ExpressionWrapper,
    bounds: Sequence[float],
) -> GaugeHistogramMetricFamily:
    """A gauge histogram of ``duration`` over ``queryset``, counted in one aggregate query."""
    aggregates: dict[str, object] = {
        f"le{i}": Count("pk", filter=Q(_duration__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(bounds)
    }
    row = queryset.annotate(_duration=duration).aggregate(
        total=Count("pk"), seconds=Sum("_duration"), **aggregates
    )
    buckets = [(_le(bound), float(row[f"le{i}"])) for i, bound in enumerate(bounds)]
    buckets.append(("+Inf", float(row["total"])))
    total_seconds = row["seconds"].total_seconds() if row["seconds"] is not None else 0.0
    family = GaugeHistogramMetricFamily(name, documentation)
    family.add_metric([], buckets, gsum_value=total_seconds)
    return family


def _le(bound: float) -> str:
    return prometheus_client.utils.floatToGoString(bound)


def elapsed(start: str, end: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(end) - F(start), output_field=DurationField())


def job_metrics() -> Iterable[prometheus_client.Metric]:
    """The job queue: depth, and age of the oldest queued job, by task."""
    now = timezone.now()
    depth = GaugeMetricFamily(
        "portal_jobs", "Jobs waiting or running, by task and status.", labels=["task", "status"]
    )
    oldest = GaugeMetricFamily(
        "portal_job_oldest_queued_age_seconds",
        "Seconds since the oldest job still queued was enqueued, by task.",
        labels=["task"],
    )
    rows = (
        Job.objects.filter(status__in=[Job.Status.QUEUED, Job.Status.RUNNING])
        .order_by()
        .values("task", "status")
        .annotate(n=Count("pk"), first=Min("created_at"))
    )
    for row in rows:
        depth.add_metric([row["task"], row["status"]], row["n"])
        if row["status"] == Job.Status.QUEUED:
            oldest.add_metric([row["task"]], max(0.0, (now - row["first"]).total_seconds()))
    yield depth
    yield oldest


class PortalCollector(Collector):
    """Runs every collector of PORTAL_METRICS_COLLECTORS at scrape time.

    One that fails (the database is down, a bug) is logged and counted in
    ``portal_metrics_collector_failed``; the others still answer, so a scrape never turns into
    an error page that hides every series.
    """

    def collect(self) -> Iterable[prometheus_client.Metric]:
        failures = GaugeMetricFamily(
            "portal_metrics_collector_failed",
            "1 when the collector failed on this scrape (see the portal's log).",
            labels=["collector"],
        )
        for path in settings.PORTAL_METRICS_COLLECTORS:
            try:
                source: MetricSource = import_string(path)
                families = list(source())
            except Exception:
                logger.exception("metrics collector %s failed", path)
                failures.add_metric([path], 1)
                continue
            failures.add_metric([path], 0)
            yield from families
        yield failures

    def describe(self) -> Iterable[prometheus_client.Metric]:
        # Nothing to describe up front: registering must not query the database.
        return []


# Registered once per process, when this module is first imported.
PORTAL_REGISTRY = CollectorRegistry(auto_describe=False)
PORTAL_REGISTRY.register(PortalCollector())


def library_registry() -> prometheus_client.registry.CollectorRegistry:
    """django-prometheus's metrics: this process's, or every worker's of the pod."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return prometheus_client.REGISTRY


def authorized(request: HttpRequest, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Compared as bytes in constant time: how far a guess matched must not show in timing.
    return hmac.compare_digest(given.strip().encode(), token.encode())


def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.METRICS_TOKEN
    if not token:
        # Off: as if there were no such page.
        return HttpResponse("Not Found\n", status=404, content_type="text/plain")
    if not authorized(request, token):
        response = HttpResponse("Unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = prometheus_client.generate_latest(library_registry())
    body += prometheus_client.generate_latest(PORTAL_REGISTRY)
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)
