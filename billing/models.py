"""The GPU usage ledger: one row per hour, namespace, flavor and workload.

Rows are derived data: an hour is recomputed from its source (Prometheus, or the samples the
portal scraped from the exporter itself) and replaces what was there, so ingesting an hour
twice never counts it twice. Prices, invoices and dashboards read these rows; nothing here
knows a price.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils import timezone


class Source(models.TextChoices):
    PROMETHEUS = "prometheus", "Prometheus"
    EXPORTER = "exporter", "dcgm-exporter, scraped by the portal"


class UsageHour(models.Model):
    """What one workload of one namespace used of one flavor's GPUs during one hour (UTC).

    ``allocated_gpu_seconds`` counts GPU-equivalents held times seconds: a whole GPU for an
    hour is 3600, a MIG 1g slice of it 3600/7, a HAMi share its dominant fraction of the card
    (see docs/architecture.md, "Metering: the GPU-seconds ledger"). ``used_gpu_seconds`` is
    the same weighted by how busy the GPU was (DCGM_FI_PROF_GR_ENGINE_ACTIVE, else
    DCGM_FI_DEV_GPU_UTIL/100). ``observed_seconds`` is how much of the hour the source had
    samples for: less than 3600 marks a gap (a pod that started mid-hour, or missing data),
    never filled in by guessing. ``tenant_slug`` comes from the namespace, never from a label;
    it is empty for a namespace no tenant owns.
    """

    hour = models.DateTimeField(db_index=True)  # start of the hour, UTC
    tenant_slug = models.CharField(max_length=63, blank=True, db_index=True)
    namespace = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63, blank=True)  # "" when the node is unknown
    workload = models.CharField(max_length=320)  # "<OwnerKind>/<name>" or "Pod/<name>"
    source = models.CharField(max_length=16, choices=Source.choices)
    allocated_gpu_seconds = models.DecimalField(max_digits=16, decimal_places=3)
    used_gpu_seconds = models.DecimalField(max_digits=16, decimal_places=3)
    observed_seconds = models.PositiveIntegerField(default=0)
    memory_avg_mib = models.DecimalField(max_digits=12, decimal_places=1, default=Decimal(0))
    memory_peak_mib = models.PositiveIntegerField(default=0)
    energy_kwh = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    # Share of the samples that had no profiling metric and fell back to GPU_UTIL.
    util_fallback = models.BooleanField(default=False)
    ingested_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["hour", "namespace", "flavor", "workload"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "namespace", "flavor", "workload"], name="usage_hour_unique"
            ),
        ]
        indexes = [models.Index(fields=["tenant_slug", "hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.namespace} {self.flavor} {self.workload}"

    @property
    def efficiency(self) -> Decimal:
        """Used over allocated, 0 when nothing was allocated."""
        if not self.allocated_gpu_seconds:
            return Decimal(0)
        return self.used_gpu_seconds / self.allocated_gpu_seconds


class IngestCursor(models.Model):
    """The last hour of a source that was ingested completely: the periodic ingest resumes
    from the hour after it."""

    source = models.CharField(max_length=16, choices=Source.choices, unique=True)
    last_complete_hour = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.source} up to {self.last_complete_hour:%Y-%m-%d %H:00}"


class IngestRun(models.Model):
    """One ingest of a range of hours: what it wrote and what it had to warn about."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    source = models.CharField(max_length=16, choices=Source.choices)
    start = models.DateTimeField()
    end = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    hours = models.PositiveIntegerField(default=0)
    rows = models.PositiveIntegerField(default=0)
    warnings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.source} {self.start:%Y-%m-%d %H:00}..{self.end:%Y-%m-%d %H:00}"


class ExporterSample(models.Model):
    """One GPU (or MIG instance) as one scrape of a dcgm-exporter saw it, for the embedded
    default without Prometheus.

    Kept in the database rather than in process memory: the scrape runs on the beat and the
    hourly rollup in whichever worker picks it up (and the web process restarts), so the
    samples must outlive the process that took them. Each scrape is filed under its slot of
    ``BILLING_SCRAPE_SECONDS``, so a scrape run twice in one slot replaces, never adds. Rows
    older than ``BILLING_SAMPLE_RETENTION_HOURS`` are pruned once their hour is in the ledger.
    """

    at = models.DateTimeField(db_index=True)  # the slot's start, UTC
    hostname = models.CharField(max_length=253)
    uuid = models.CharField(max_length=64)
    gpu_instance = models.CharField(max_length=8, blank=True)  # GPU_I_ID, "" for a whole GPU
    mig_profile = models.CharField(max_length=32, blank=True)  # GPU_I_PROFILE
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    gr_engine_active = models.FloatField(null=True)  # ratio 0-1
    gpu_util = models.FloatField(null=True)  # percent
    fb_used_mib = models.FloatField(null=True)
    energy_mj = models.FloatField(null=True)  # counter since boot

    class Meta:
        ordering = ["at", "hostname", "uuid", "gpu_instance"]
        constraints = [
            models.UniqueConstraint(
                fields=["at", "hostname", "uuid", "gpu_instance"], name="exporter_sample_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.hostname} {self.uuid}/{self.gpu_instance}"
