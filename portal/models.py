"""Cross-cutting records: background jobs and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Job(models.Model):
    """One run of a background task, with its status, attempts, progress and log.

    Celery (or the in-process runner) only carries the id; the row is the truth, so a page can
    show progress, a failure can be retried, and a lost message leaves a visible queued job.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    class Trigger(models.TextChoices):
        USER = "user", "User action"
        SCHEDULE = "schedule", "Schedule"

    task = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.USER)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    progress = models.PositiveSmallIntegerField(default=0)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    request_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # For the metrics scrape (portal/metrics.py): the few waiting jobs out of many
        # finished ones, and one task's recent runs.
        indexes = [
            models.Index(
                fields=["status", "task"],
                condition=models.Q(status__in=["queued", "running"]),
                name="job_waiting",
            ),
            models.Index(fields=["task", "finished_at"], name="job_task_finished"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(progress__lte=100), name="job_progress_at_most_100"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["queued", "running", "succeeded", "failed"]),
                name="job_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title or self.task} #{self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in {self.Status.SUCCEEDED, self.Status.FAILED}

    def append_log(self, line: str) -> None:
        stamp = timezone.now().strftime("%H:%M:%S")
        self.log = f"{self.log}{stamp} {line}\n"
        Job.objects.filter(pk=self.pk).update(log=self.log)

    def set_progress(self, percent: int, line: str = "") -> None:
        self.progress = max(0, min(100, percent))
        Job.objects.filter(pk=self.pk).update(progress=self.progress)
        if line:
            self.append_log(line)


class AuditEvent(models.Model):
    """One state-changing action: who did what to which object, and what changed."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept as text too, so the log still names a deleted user.
    actor_name = models.CharField(max_length=150, blank=True)
    # The tenant's slug, not a foreign key: every app records here (gitops knows slugs only),
    # and the log must outlive a tenant that is offboarded.
    tenant_slug = models.CharField(max_length=63, blank=True, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    # {"field": [before, after], ...}; created objects have before=None.
    diff = models.JSONField(default=dict, blank=True)
    # The portal's id of the request (portal.middleware), and apart from it the X-Request-ID
    # the client sent: the client's claim, for tracing through a proxy's logs, never trusted.
    request_id = models.CharField(max_length=64, blank=True, db_index=True)
    client_request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.target_repr}"
        )
