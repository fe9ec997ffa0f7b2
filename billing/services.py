"""Ingest of DCGM samples into the usage ledger, from Prometheus or from the exporter.

``do_ingest_hours`` is the one verb: it recomputes whole hours and replaces their rows, one
transaction per hour, so a failure halfway keeps the hours already done and a re-run
replaces them. The cursor (``IngestCursor``) moves over hours done without a gap, so the
periodic ingest resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

import requests
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from billing import costing, ingest, reservations
from billing.models import (
    ExporterSample,
    FleetDay,
    IngestCursor,
    IngestRun,
    Source,
    UsageDay,
    UsageHour,
    UsageMonth,
)
from billing.prometheus import Prometheus, PrometheusError
from fleet.models import Node, Workload
from fleet.services import platform_namespaces, tenant_of
from portal.audit import record_audit
from portal.jobs import enqueue
from portal.models import Job
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

HOUR = timedelta(hours=1)
MAX_WARNINGS = 200
Progress = Callable[[int, str], None]


class IngestError(Exception):
    """The source could not be read; nothing of the hour was changed."""


# --- hours -----------------------------------------------------------------------------------


def hour_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def last_complete_hour(now: datetime | None = None) -> datetime:
    """The start of the latest hour whose samples have all landed."""
    now = now or timezone.now()
    lag = timedelta(seconds=settings.BILLING_INGEST_LAG_SECONDS)
    return hour_floor(now - lag) - HOUR


def _check_range(start: datetime, end: datetime) -> None:
    for name, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise ValidationError(f"the {name} must carry a time zone")
        if value != hour_floor(value):
            raise ValidationError(f"the {name} {value.isoformat()} is not a whole hour")
    if end <= start:
        raise ValidationError("the end must be after the start")
    if end > last_complete_hour() + HOUR:
        raise ValidationError(
            f"hours after {last_complete_hour():%Y-%m-%d %H:00} UTC are not complete yet"
        )


# --- the inputs of a rollup ------------------------------------------------------------------


def node_infos(
    start: datetime | None = None, end: datetime | None = None
) -> dict[str, ingest.NodeInfo]:
    """Each node by name and by hostname (the exporter labels the host). A node reserved for a
    tenant during ``[start, end)`` files its usage under the tenant's own flavor
    ``<pool>.<slug>`` (Kueue's name for it), which its reservation line pays for
    (``billing.reservations``)."""
    reserved: dict[str, str] = {}
    if start is not None and end is not None:
        longest = UsageHour._meta.get_field("flavor").max_length or 0
        for row in reservations.overlapping(start, end):
            name = reservations.reserved_flavor(row.flavor, row.tenant_slug)
            # A pool and slug too long for the ledger's column (pool names are short; slugs
            # at most 40) stay under the pool: billed as usage, beside the reservation.
            if len(name) <= longest:
                reserved[row.node_name] = name
    infos: dict[str, ingest.NodeInfo] = {}
    for node in Node.objects.filter(gpu_count__gt=0):
        info = ingest.NodeInfo(
            flavor=reserved.get(node.name) or node.flavor or node.pool,
            mode=node.sharing or "whole",
            gpu_memory_mib=node.gpu_memory_mib,
            gpus=node.gpu_count,
            product=node.product,
        )
        infos[node.name] = info
        if node.hostname:
            infos.setdefault(node.hostname, info)
    return infos


def holders() -> list[ingest.Holder]:
    return [
        ingest.Holder(
            namespace=w.namespace,
            pod=w.name,
            node=w.node,
            owner_kind=w.owner_kind,
            owner_name=w.owner_name,
            gpu_requests=dict(w.gpu_requests),
        )
        for w in Workload.objects.all()
    ]


def prometheus() -> Prometheus:
    return Prometheus(
        settings.BILLING_PROMETHEUS_URL,
        timeout=settings.BILLING_PROMETHEUS_TIMEOUT,
        token=settings.BILLING_PROMETHEUS_TOKEN,
    )


def prometheus_points(
    client: Prometheus, start: int, end: int, step: int
) -> tuple[list[ingest.Point], list[str]]:
    """The DCGM points of ``[start - step, end)``: one step before, for the energy baseline.
    The range ends one step before ``end`` because a range query repeats the last sample for
    five minutes (the lookback), which would count time the hour does not have."""
    series = []
    warnings: list[str] = []
    selector = settings.BILLING_PROMETHEUS_SELECTOR
    for metric in ingest.METRICS:
        result = client.query_range(metric + selector, start - step, end - step, step)
        warnings += result.warnings
        series += [(metric, s.labels, s.points) for s in result.series]
    return ingest.points_from_series(series), warnings


def exporter_points(start: int, end: int, step: int) -> list[ingest.Point]:
    rows = ExporterSample.objects.filter(
        at__gte=datetime.fromtimestamp(start - step, UTC), at__lt=datetime.fromtimestamp(end, UTC)
    )
    return [
        ingest.Point(
            at=int(row.at.timestamp()),
            device=ingest.Device(row.hostname, row.uuid, row.gpu_instance, row.mig_profile),
            namespace=row.namespace,
            pod=row.pod,
            gr_engine_active=row.gr_engine_active,
            gpu_util=row.gpu_util,
            fb_used_mib=row.fb_used_mib,
            energy_mj=row.energy_mj,
        )
        for row in rows.iterator()
    ]


def window_rollup(source: str, start: int, end: int, step: int) -> ingest.Rollup:
    """The lines of ``[start, end)`` from ``source``; ``IngestError`` when it cannot be read."""
    warnings: list[str] = []
    if source == Source.PROMETHEUS:
        try:
            points, warnings = prometheus_points(prometheus(), start, end, step)
        except PrometheusError as exc:
            raise IngestError(f"Prometheus: {exc}") from exc
    else:
        points = exporter_points(start, end, step)
    result = ingest.rollup(
        points,
        start=start,
        end=end,
        step=step,
        nodes=node_infos(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)),
        holders=holders(),
    )
    # The platform's own namespaces are no tenant's and not billed: among them is the
    # exporter's, which the plain labels name on idle GPUs when Prometheus renamed the
    # exporter's labels to exported_* and no GPU of the query had a pod.
    platform = platform_namespaces()
    kept = []
    for line in result.lines:
        if line.namespace and not tenant_of(line.namespace, platform):
            warnings.append(f"{line.namespace}/{line.workload}: a platform namespace, not billed")
        else:
            kept.append(line)
    result.lines = kept
    result.warnings[:0] = warnings
    return result


# --- writing the ledger ----------------------------------------------------------------------


def _decimal(value: Fraction | float, places: str) -> Decimal:
    if isinstance(value, Fraction):
        exact = Decimal(value.numerator) / Decimal(value.denominator)
    else:
        exact = Decimal(value)
    return exact.quantize(Decimal(places), rounding=ROUND_HALF_EVEN)


def ledger_rows(
    hour: datetime, source: str, lines: list[ingest.Line], tenants: set[str]
) -> list[UsageHour]:
    """Rows for ``lines``: the tenant is the namespace's owner (``tenant_of``) when that is
    a tenant, else none, whatever the pod's labels say."""
    platform = platform_namespaces()
    now = timezone.now()
    rows = []
    for line in lines:
        owner = tenant_of(line.namespace, platform)
        rows.append(
            UsageHour(
                hour=hour,
                tenant_slug=owner if owner in tenants else "",
                namespace=line.namespace,
                flavor=line.flavor,
                gpu_model=line.gpu_model,
                mig_profile=line.mig_profile,
                workload=line.workload[:320],
                source=source,
                allocated_gpu_seconds=_decimal(line.allocated, "0.001"),
                used_gpu_seconds=_decimal(line.used, "0.001"),
                observed_seconds=line.observed_seconds,
                memory_avg_mib=_decimal(line.memory_avg_mib, "0.1"),
                memory_peak_mib=line.memory_peak_mib,
                energy_kwh=_decimal(line.energy_kwh, "0.000001"),
                util_fallback=line.fallback,
                ingested_at=now,
            )
        )
    return rows


def ingest_hour(hour: datetime, source: str) -> tuple[int, list[str]]:
    """Recompute one hour: its rows are replaced in one transaction (delete, then insert),
    so running it twice leaves the same rows. Returns (rows, warnings)."""
    start = int(hour.timestamp())
    step = settings.BILLING_STEP_SECONDS
    result = window_rollup(source, start, start + 3600, step)
    tenants = set(Tenant.objects.values_list("slug", flat=True))
    rows = ledger_rows(hour, source, result.lines, tenants)
    with transaction.atomic():
        UsageHour.objects.filter(hour=hour).delete()
        UsageHour.objects.bulk_create(rows)
        rollup_days([hour.astimezone(UTC).date()])
    return len(rows), result.warnings


# What a ledger row of a coarser grain sums from the finer one, by its key (namespace,
# flavor, MIG profile, workload); ``hours`` and ``gaps`` differ by grain and are added by each.
_LEDGER_SUMS = {
    "tenant": Max("tenant_slug"),
    "model": Max("gpu_model"),
    "allocated": Sum("allocated_gpu_seconds"),
    "used": Sum("used_gpu_seconds"),
    "observed": Sum("observed_seconds"),
    "energy": Sum("energy_kwh"),
    "peak": Max("memory_peak_mib"),
}


def _ledger_fields(item: dict[str, Any]) -> dict[str, Any]:
    """The fields of a daily or monthly ledger row from one aggregate of ``_LEDGER_SUMS``."""
    return {
        "tenant_slug": item["tenant"] or "",
        "namespace": item["namespace"],
        "flavor": item["flavor"],
        "gpu_model": item["model"] or "",
        "mig_profile": item["mig_profile"],
        "workload": item["workload"],
        "allocated_gpu_seconds": item["allocated"] or Decimal(0),
        "used_gpu_seconds": item["used"] or Decimal(0),
        "observed_seconds": item["observed"] or 0,
        "energy_kwh": item["energy"] or Decimal(0),
        "memory_peak_mib": item["peak"] or 0,
        "hours": item["hours"] or 0,
        "gap_hours": item["gaps"] or 0,
    }


def rollup_days(days: Iterable[date]) -> int:
    """Replace the ``UsageDay`` rows of ``days`` with the sums of their hourly rows (one
    aggregate query and one insert per day), then the fleet's total of each day
    (``FleetDay``) and the months they fall in (``UsageMonth``, ``rollup_months``); returns
    the daily rows written. Keyed as the hourly rows are, less the hour; a workload's GPU
    model and tenant are the day's (they do not change within a flavor and a namespace)."""
    written = 0
    wanted = sorted(set(days))
    for day in wanted:
        start = datetime.combine(day, time(0), tzinfo=UTC)
        sums = (
            UsageHour.objects.filter(hour__gte=start, hour__lt=start + timedelta(days=1))
            .values("namespace", "flavor", "mig_profile", "workload")
            .annotate(
                **_LEDGER_SUMS,
                hours=Count("pk"),
                gaps=Count("pk", filter=Q(observed_seconds__lt=3600)),
            )
            .order_by()
        )
        rows = [UsageDay(day=day, **_ledger_fields(item)) for item in sums]
        with transaction.atomic():
            UsageDay.objects.filter(day=day).delete()
            UsageDay.objects.bulk_create(rows, batch_size=2000)
            FleetDay.objects.filter(day=day).delete()
            if rows:
                FleetDay.objects.create(
                    day=day,
                    allocated_gpu_seconds=sum((r.allocated_gpu_seconds for r in rows), Decimal(0)),
                    used_gpu_seconds=sum((r.used_gpu_seconds for r in rows), Decimal(0)),
                    energy_kwh=sum((r.energy_kwh for r in rows), Decimal(0)),
                    rows=sum(r.hours for r in rows),
                    gap_hours=sum(r.gap_hours for r in rows),
                )
        written += len(rows)
    rollup_months({day.replace(day=1) for day in wanted})
    return written


def rollup_months(months: Iterable[date]) -> int:
    """Replace the ``UsageMonth`` rows of ``months`` (first days) with the sums of their
    daily rows: one aggregate query and one insert per month; returns the rows written."""
    written = 0
    for month in sorted(set(months)):
        following = costing.next_month(month)
        sums = (
            UsageDay.objects.filter(day__gte=month, day__lt=following)
            .values("namespace", "flavor", "mig_profile", "workload")
            .annotate(**_LEDGER_SUMS, hours=Sum("hours"), gaps=Sum("gap_hours"))
            .order_by()
        )
        rows = [UsageMonth(month=month, **_ledger_fields(item)) for item in sums]
        with transaction.atomic():
            UsageMonth.objects.filter(month=month).delete()
            UsageMonth.objects.bulk_create(rows, batch_size=2000)
        written += len(rows)
    return written


def do_ingest_hours(
    start: datetime,
    end: datetime,
    *,
    acting_user: Any,
    source: str | None = None,
    progress: Progress | None = None,
) -> IngestRun:
    """Ingest the whole hours of ``[start, end)`` from ``source`` (the configured one by
    default). Each hour is its own transaction; the cursor follows the hours done without a
    gap. A source that cannot be read fails the run at that hour and changes none of it."""
    access.require(acting_user, Action.OPERATE_FLEET)
    _check_range(start, end)
    source = source or settings.BILLING_SOURCE
    if source not in Source.values:
        raise ValidationError(f"unknown source {source!r}")
    hours = int((end - start) / HOUR)
    with transaction.atomic():
        run = IngestRun.objects.create(source=source, start=start, end=end)
        record_audit(
            actor=acting_user,
            action="billing.ingest",
            target=run,
            diff={"hours": [None, hours], "source": [None, source]},
        )
    hour = start
    try:
        while hour < end:
            done = int((hour - start) / HOUR)
            if progress:
                progress(int(100 * done / hours), f"{hour:%Y-%m-%d %H:00} UTC ({done}/{hours})")
            written, warnings = ingest_hour(hour, source)
            run.rows += written
            run.hours += 1
            # Enough to act on, not a copy of every sample's complaint.
            run.warnings = (run.warnings + [f"{hour:%Y-%m-%d %H:00}: {w}" for w in warnings])[
                :MAX_WARNINGS
            ]
            _advance_cursor(source, hour)
            hour += HOUR
    except IngestError as exc:
        run.status = IngestRun.Status.FAILED
        run.error = f"{hour:%Y-%m-%d %H:00} UTC: {exc}"
    else:
        run.status = IngestRun.Status.SUCCEEDED
    run.finished_at = timezone.now()
    run.save()
    if progress:
        progress(100, f"{run.hours} of {hours} hours, {run.rows} rows")
    return run


def do_backfill(start: datetime, end: datetime, *, acting_user: Any, source: str = "") -> Job:
    """Queue a job that ingests ``[start, end)`` hour by hour, its progress shown on the
    job's page. The range is checked now, so a bad one is refused before anything runs."""
    access.require(acting_user, Action.OPERATE_FLEET)
    _check_range(start, end)
    if source and source not in Source.values:
        raise ValidationError(f"unknown source {source!r}")
    with transaction.atomic():
        return enqueue(
            "billing.backfill",
            title=f"Ingest GPU usage {start:%Y-%m-%d %H:00} to {end:%Y-%m-%d %H:00} UTC",
            created_by=acting_user,
            start=start.isoformat(),
            end=end.isoformat(),
            source=source,
        )


def _advance_cursor(source: str, hour: datetime) -> None:
    cursor = IngestCursor.objects.filter(source=source).first()
    if cursor is None:
        IngestCursor.objects.create(source=source, last_complete_hour=hour)
    elif cursor.last_complete_hour + HOUR == hour:
        cursor.last_complete_hour = hour
        cursor.save(update_fields=["last_complete_hour", "updated_at"])


def due_range(source: str, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The hours the periodic ingest should do: after the cursor up to the last complete
    hour, at most ``BILLING_MAX_CATCHUP_HOURS`` of them; None when there is nothing."""
    end = last_complete_hour(now) + HOUR
    cursor = IngestCursor.objects.filter(source=source).first()
    if cursor is None:
        start = end - settings.BILLING_FIRST_HOURS * HOUR
    else:
        start = cursor.last_complete_hour + HOUR
    start = max(start, end - settings.BILLING_MAX_CATCHUP_HOURS * HOUR)
    return (start, end) if start < end else None


# --- the embedded default: scraping the exporter ---------------------------------------------


def scrape_exporters(now: float | None = None) -> tuple[int, list[str]]:
    """Scrape each of ``BILLING_EXPORTER_URLS`` once and file the devices under the current
    slot (a second scrape in the same slot replaces the first). Returns (samples, errors);
    an exporter that cannot be read leaves a gap, marked in the ledger as fewer observed
    seconds, never filled in."""
    step = settings.BILLING_STEP_SECONDS
    moment = timezone.now().timestamp() if now is None else now
    slot = datetime.fromtimestamp(moment // step * step, UTC)
    headers = {}
    if settings.BILLING_EXPORTER_TOKEN:
        headers["Authorization"] = f"Bearer {settings.BILLING_EXPORTER_TOKEN}"
    rows: list[ExporterSample] = []
    errors: list[str] = []
    for url in settings.BILLING_EXPORTER_URLS:
        try:
            response = requests.get(url, headers=headers, timeout=10)
            response.raise_for_status()
            points = ingest.parse_exposition(response.text)
        except (requests.RequestException, ValueError) as exc:
            errors.append(f"{url}: {exc}")
            continue
        rows += [
            ExporterSample(
                at=slot,
                hostname=p.device.hostname,
                uuid=p.device.uuid,
                gpu_instance=p.device.instance,
                mig_profile=p.device.profile,
                namespace=p.namespace,
                pod=p.pod,
                gr_engine_active=p.gr_engine_active,
                gpu_util=p.gpu_util,
                fb_used_mib=p.fb_used_mib,
                energy_mj=p.energy_mj,
            )
            for p in points
        ]
    with transaction.atomic():
        ExporterSample.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["at", "hostname", "uuid", "gpu_instance"],
            update_fields=[
                "mig_profile",
                "namespace",
                "pod",
                "gr_engine_active",
                "gpu_util",
                "fb_used_mib",
                "energy_mj",
            ],
        )
    return len(rows), errors


def prune_samples(now: datetime | None = None) -> int:
    """Delete samples older than the retention whose hour is already in the ledger."""
    now = now or timezone.now()
    keep_from = now - timedelta(hours=settings.BILLING_SAMPLE_RETENTION_HOURS)
    cursor = IngestCursor.objects.filter(source=Source.EXPORTER).first()
    if cursor is None:
        return 0
    before = min(keep_from, cursor.last_complete_hour)
    deleted, _ = ExporterSample.objects.filter(at__lt=before).delete()
    return deleted
