"""The GPU usage ledger (one row per hour, namespace, flavor, MIG profile and workload), and
what it costs: prices, invoices and budgets.

Rows are derived data: an hour is recomputed from its source (Prometheus, or the samples the
portal scraped from the exporter itself) and replaces what was there, so ingesting an hour
twice never counts it twice. Prices apply to the ledger from their effective date on;
an issued invoice never changes (a correction is a new version of it).
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone


class Source(models.TextChoices):
    PROMETHEUS = "prometheus", "Prometheus"
    EXPORTER = "exporter", "dcgm-exporter, scraped by the portal"
    # Made up by ``seed_demo`` so that a new demo has a history to chart; never in production.
    DEMO = "demo", "Demo history (seed_demo)"


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
    gpu_model = models.CharField(max_length=120, blank=True)  # GFD nvidia.com/gpu.product
    mig_profile = models.CharField(max_length=32, blank=True)  # "" for a whole GPU or a share
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
        ordering = ["hour", "namespace", "flavor", "mig_profile", "workload"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "namespace", "flavor", "mig_profile", "workload"],
                name="usage_hour_unique",
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


class UsageDay(models.Model):
    """The ledger summed per UTC day: what the dashboards read for ranges longer than two
    days, so a year is 365 rows per workload instead of 8,760.

    Derived from ``UsageHour`` and nothing else: ``billing.services.rollup_days`` replaces a
    day's rows from its hourly rows whenever an hour of it is ingested, in the same
    transaction, so the two never disagree. Prices change at 00:00 UTC, so a day is never split
    between two prices.
    """

    day = models.DateField(db_index=True)
    tenant_slug = models.CharField(max_length=63, blank=True)
    namespace = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63, blank=True)
    gpu_model = models.CharField(max_length=120, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    workload = models.CharField(max_length=320)
    allocated_gpu_seconds = models.DecimalField(max_digits=18, decimal_places=3)
    used_gpu_seconds = models.DecimalField(max_digits=18, decimal_places=3)
    observed_seconds = models.PositiveIntegerField(default=0)
    energy_kwh = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal(0))
    memory_peak_mib = models.PositiveIntegerField(default=0)
    hours = models.PositiveSmallIntegerField(default=0)  # hourly rows summed
    gap_hours = models.PositiveSmallIntegerField(default=0)  # of which observed < 3600 s

    class Meta:
        ordering = ["day", "namespace", "flavor", "mig_profile", "workload"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "namespace", "flavor", "mig_profile", "workload"],
                name="usage_day_unique",
            ),
        ]
        indexes = [models.Index(fields=["tenant_slug", "day"])]

    def __str__(self) -> str:
        return f"{self.day} {self.namespace} {self.flavor} {self.workload}"


class UsageMonth(models.Model):
    """The daily sums summed per UTC calendar month, keyed as ``UsageDay``: what a long range
    reads for its whole months, so a year is 12 rows per workload instead of 365.

    Derived from ``UsageDay`` (``billing.services.rollup_days`` re-sums a day's month in the
    same transaction). Prices change at 00:00 UTC, so a whole month lies inside one price
    period only when no price starts within it; ``billing.costing.priced`` reads a month's
    row only then, and the days otherwise.
    """

    month = models.DateField()  # the first day of the month
    tenant_slug = models.CharField(max_length=63, blank=True)
    namespace = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63, blank=True)
    gpu_model = models.CharField(max_length=120, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    workload = models.CharField(max_length=320)
    allocated_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=3)
    used_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=3)
    observed_seconds = models.PositiveBigIntegerField(default=0)
    energy_kwh = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    memory_peak_mib = models.PositiveIntegerField(default=0)
    hours = models.PositiveIntegerField(default=0)
    gap_hours = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["month", "namespace", "flavor", "mig_profile", "workload"]
        constraints = [
            models.UniqueConstraint(
                fields=["month", "namespace", "flavor", "mig_profile", "workload"],
                name="usage_month_unique",
            ),
        ]
        indexes = [models.Index(fields=["tenant_slug", "month"])]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.namespace} {self.flavor} {self.workload}"


class FleetDay(models.Model):
    """The whole fleet's ledger summed per UTC day: one row a day, what the platform
    dashboard's series reads (a year is 366 rows whatever the number of workloads).

    Derived from ``UsageDay`` by ``billing.services.rollup_days`` in the same transaction.
    ``gap_hours`` sums the hourly rows observed for less than the whole hour, as
    ``UsageDay.gap_hours`` does per workload.
    """

    day = models.DateField(unique=True)
    allocated_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=3)
    used_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=3)
    energy_kwh = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    rows = models.PositiveIntegerField(default=0)  # hourly rows summed
    gap_hours = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["day"]

    def __str__(self) -> str:
        return f"{self.day} fleet"


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


class GpuPrice(models.Model):
    """What an hour of a GPU model costs from ``effective_from`` on (UTC midnight).

    ``mig_profile`` empty: the price of one whole GPU-hour; HAMi shares and DRA claims of
    whole GPUs pay their GPU-equivalents of it. A MIG profile: the price of one hour of one
    instance of that profile; a profile without a price of its own pays its share of the GPU
    (``billing.fractions.mig_fraction``). Prices are never edited: a new price takes over from
    its date, and only a price not yet in effect may be withdrawn, so no hour ever billed
    changes its price afterwards.
    """

    gpu_model = models.CharField(max_length=120)
    mig_profile = models.CharField(max_length=32, blank=True)
    amount = models.DecimalField(max_digits=12, decimal_places=4)  # per hour, BILLING_CURRENCY
    effective_from = models.DateField()
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["gpu_model", "mig_profile", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_model", "mig_profile", "effective_from"], name="gpu_price_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(amount__gte=0), name="gpu_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        what = f"{self.gpu_model} {self.mig_profile}".strip()
        return f"{what} from {self.effective_from}: {self.amount}/h"


class ReservationPrice(models.Model):
    """What an hour of one GPU of a reserved node of a GPU model costs from ``effective_from``
    on (UTC midnight): a dedicated tenant pays it for every GPU of its reserved nodes, from the
    reservation's acceptance to its release, whatever runs there (issue 29).

    Per GPU-hour rather than per node-hour: one unit with ``GpuPrice``, so the two read side by
    side, and a node of eight GPUs pays twice one of four without a price per node size. A
    model of its own rather than a kind of ``GpuPrice``: it has no MIG profile, and the usage
    price book stays as it is. Never edited, as ``GpuPrice``: a new price takes over from its
    date, and only one not yet in effect may be withdrawn.
    """

    gpu_model = models.CharField(max_length=120)
    amount = models.DecimalField(max_digits=12, decimal_places=4)  # per GPU-hour
    effective_from = models.DateField()
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["gpu_model", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_model", "effective_from"], name="reservation_price_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(amount__gte=0), name="reservation_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"reserved {self.gpu_model} from {self.effective_from}: {self.amount}/GPU-h"


class Invoice(models.Model):
    """One tenant's bill for one calendar month (UTC).

    A draft may be recomputed; once issued, neither the invoice nor its lines change
    (``save`` and ``delete`` refuse). A correction is a new version of the same tenant and
    month, which names the one it supersedes and why.
    """

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        ISSUED = "issued", "Issued"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="+")
    tenant_slug = models.CharField(max_length=63)  # as it was when issued
    cost_centre = models.CharField(max_length=100, blank=True)
    month = models.DateField()  # the first day of the month
    version = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    currency = models.CharField(max_length=3)
    gpu_total = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal(0))
    other_total = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal(0))
    total = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal(0))
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0))
    used_gpu_hours = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0))
    energy_kwh = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0))
    warnings = models.JSONField(default=list, blank=True)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    reason = models.TextField(blank=True)  # why a correction was made
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    issued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-month", "tenant_slug", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "version"], name="invoice_version_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.number} ({self.get_status_display()})"

    def save(self, *args: object, **kwargs: object) -> None:
        if self._stored_issued():
            raise ValidationError(f"Invoice {self.number} is issued and cannot change.")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        if self._stored_issued():
            raise ValidationError(f"Invoice {self.number} is issued and cannot be deleted.")
        return super().delete(*args, **kwargs)  # type: ignore[arg-type]

    @property
    def number(self) -> str:
        return f"{self.tenant_slug}-{self.month:%Y-%m}-v{self.version}"

    @property
    def issued(self) -> bool:
        return self.status == self.Status.ISSUED

    def _stored_issued(self) -> bool:
        if self.pk is None:
            return False
        return Invoice.objects.filter(pk=self.pk, status=self.Status.ISSUED).exists()


class InvoiceLine(models.Model):
    """One line of an invoice: a flavor's GPU time at one price, a reserved node's GPUs at one
    price, or an OpenCost category.

    A month with a price change has one line per price period of the flavor, each with its
    own ``period_start``/``period_end``, so the bill shows which price applied when.
    ``unit_price`` is empty when no price was known (the line is listed, at zero, and the
    invoice carries a warning).
    """

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        CPU = "cpu", "CPU"
        RAM = "ram", "Memory"
        STORAGE = "storage", "Storage"
        NETWORK = "network", "Network"
        OTHER = "other", "Other"
        # A reserved node's GPUs from acceptance to release (``ReservationPrice``).
        RESERVED = "reserved", "Reserved node"

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices)
    description = models.CharField(max_length=300)
    flavor = models.CharField(max_length=63, blank=True)
    gpu_model = models.CharField(max_length=120, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    quantity = models.DecimalField(max_digits=16, decimal_places=3, default=Decimal(0))
    unit = models.CharField(max_length=20, blank=True)  # "GPU-hour", "instance-hour"
    unit_price = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    amount = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal(0))
    used_gpu_hours = models.DecimalField(max_digits=16, decimal_places=3, default=Decimal(0))
    energy_kwh = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0))

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice.number} #{self.position} {self.description}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.invoice._stored_issued():
            raise ValidationError(f"Invoice {self.invoice.number} is issued and cannot change.")
        super().save(*args, **kwargs)  # type: ignore[arg-type]


class Budget(models.Model):
    """A tenant's monthly spending limit and the percentages of it that raise an alert."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    monthly_amount = models.DecimalField(max_digits=14, decimal_places=2)
    thresholds = models.JSONField(default=list)  # percent, ascending, e.g. [50, 80, 100]
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(monthly_amount__gt=0), name="budget_amount_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"budget {self.monthly_amount}/month"


class BudgetAlert(models.Model):
    """A threshold of a tenant's budget crossed in a month: raised once, then remembered."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    threshold = models.PositiveIntegerField()  # percent
    spent = models.DecimalField(max_digits=14, decimal_places=2)
    budget = models.DecimalField(max_digits=14, decimal_places=2)
    raised_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-raised_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "threshold"], name="budget_alert_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.threshold}%"


# --- idle reclaim (billing.idle) -----------------------------------------------------------


class IdleKind(models.TextChoices):
    """What an idle case is about, and so what acting on it does."""

    JOB = "job", "Batch job (Kueue Workload deactivated)"
    ENDPOINT = "endpoint", "Model endpoint (scaled to zero)"
    CLUSTER = "cluster", "Tenant cluster (put to sleep)"
    OTHER = "other", "Other workload (told, not acted on)"


class IdlePolicy(models.Model):
    """When GPUs of a flavor count as idle, and what the portal does then.

    A row without a tenant is the flavor's policy; a row with one overrides it for that tenant
    (the whole row: a tenant's override states every field). A workload is idle when its
    GPUs' mean DCGM_FI_PROF_GR_ENGINE_ACTIVE (the ledger's used over allocated GPU-seconds)
    stayed under ``threshold_percent`` for each of the last ``window_hours`` complete hours;
    its tenant is told, and ``grace_minutes`` later the action of its kind runs, if enabled.
    """

    flavor = models.CharField(max_length=63)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    threshold_percent = models.DecimalField(max_digits=5, decimal_places=2)
    window_hours = models.PositiveSmallIntegerField(default=2)
    grace_minutes = models.PositiveIntegerField(default=60)
    act_on_jobs = models.BooleanField(default=True)
    act_on_endpoints = models.BooleanField(default=True)
    act_on_clusters = models.BooleanField(default=False)
    # The longest a tenant may exempt one of its workloads from this policy.
    max_exemption_days = models.PositiveSmallIntegerField(default=7)
    enabled = models.BooleanField(default=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["flavor", "tenant_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor"], condition=models.Q(tenant=None), name="idle_policy_flavor"
            ),
            models.UniqueConstraint(
                fields=["flavor", "tenant"],
                condition=~models.Q(tenant=None),
                name="idle_policy_flavor_tenant",
            ),
            models.CheckConstraint(
                condition=models.Q(threshold_percent__gt=0, threshold_percent__lte=100),
                name="idle_policy_threshold_range",
            ),
            models.CheckConstraint(
                condition=models.Q(window_hours__gte=1, window_hours__lte=168),
                name="idle_policy_window_range",
            ),
        ]

    def __str__(self) -> str:
        scope = f" for {self.tenant}" if self.tenant_id else ""
        what = f"idle under {self.threshold_percent}% for {self.window_hours} h"
        return f"{what} on {self.flavor}{scope}"

    def acts_on(self, kind: str) -> bool:
        return {
            IdleKind.JOB: self.act_on_jobs,
            IdleKind.ENDPOINT: self.act_on_endpoints,
            IdleKind.CLUSTER: self.act_on_clusters,
        }.get(IdleKind(kind), False)


class IdleExemption(models.Model):
    """A tenant's workload that idle reclaim leaves alone until ``until`` (a notebook kept
    warm on purpose, say), within the policy's ``max_exemption_days``."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    workload = models.CharField(max_length=320)  # as the ledger names it, "Job/train"
    until = models.DateTimeField()
    reason = models.CharField(max_length=300)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-until"]
        indexes = [models.Index(fields=["namespace", "workload", "until"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.workload} exempt until {self.until:%Y-%m-%d %H:%M}"


class IdleCase(models.Model):
    """One idle workload, from detection to what became of it.

    ``detected`` -> ``notified`` (inbox, mail, webhook ``idle.detected``) -> after the grace
    ``acted`` (deactivated, scaled to zero, asleep) or ``no_action`` (the policy or the kind
    has none) -> ``woken`` by its tenant; ``exempted`` or ``closed`` (busy again, gone) end it
    too. At most one open case per workload.
    """

    class State(models.TextChoices):
        DETECTED = "detected", "Detected"
        NOTIFIED = "notified", "Notified"
        ACTED = "acted", "Reclaimed"
        NO_ACTION = "no_action", "Told, no action available"
        WOKEN = "woken", "Woken"
        EXEMPTED = "exempted", "Exempted"
        CLOSED = "closed", "Closed"

    OPEN = (State.DETECTED, State.NOTIFIED, State.ACTED, State.NO_ACTION)

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63)
    workload = models.CharField(max_length=320)
    kind = models.CharField(max_length=10, choices=IdleKind.choices)
    target = models.CharField(max_length=253, blank=True)  # Workload or Resource name acted on
    policy = models.ForeignKey(IdlePolicy, null=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=10, choices=State.choices, default=State.DETECTED)
    utilisation_percent = models.DecimalField(max_digits=5, decimal_places=2)
    gpus = models.DecimalField(max_digits=10, decimal_places=3)  # GPU-equivalents held
    detected_at = models.DateTimeField(default=timezone.now)
    act_after = models.DateTimeField()
    acted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)  # why it is in its state, in words

    class Meta:
        ordering = ["-detected_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "workload"],
                condition=models.Q(state__in=["detected", "notified", "acted", "no_action"]),
                name="idle_case_one_open",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "state"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.workload} {self.state}"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN


class ReclaimedHour(models.Model):
    """GPU-hours an idle case's workload would have held during one hour (UTC) had it not
    been reclaimed: what the ledger and the dashboards show as won back. Recomputed from the
    case's times, so writing an hour twice never counts it twice."""

    hour = models.DateTimeField()
    tenant_slug = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63)
    case = models.ForeignKey(IdleCase, on_delete=models.CASCADE, related_name="reclaimed")
    gpu_hours = models.DecimalField(max_digits=12, decimal_places=3)

    class Meta:
        ordering = ["hour", "tenant_slug"]
        constraints = [
            models.UniqueConstraint(fields=["case", "hour"], name="reclaimed_hour_unique"),
        ]
        indexes = [models.Index(fields=["tenant_slug", "hour"]), models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.tenant_slug} {self.gpu_hours}"
