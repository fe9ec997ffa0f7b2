"""Periodic upkeep of the portal itself."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.sessions.models import Session
from django.utils import timezone

from portal.jobs import job_task
from portal.models import Job


@job_task("portal.housekeeping")
def housekeeping(job: Job) -> None:
    """Drop expired sessions and finished jobs past their retention."""
    now = timezone.now()
    sessions, _ = Session.objects.filter(expire_date__lt=now).delete()
    job.set_progress(50, f"removed {sessions} expired sessions")
    cutoff = now - timedelta(days=settings.PORTAL_JOB_RETENTION_DAYS)
    jobs, _ = (
        Job.objects.filter(finished_at__lt=cutoff)
        .exclude(pk=job.pk)
        .filter(status__in=[Job.Status.SUCCEEDED, Job.Status.FAILED])
        .delete()
    )
    job.set_progress(100, f"removed {jobs} jobs finished before {cutoff:%Y-%m-%d}")
