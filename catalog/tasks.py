"""Background work of the catalog: following requests, expiring reservations, e-mail."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail

from catalog import outbound, services
from portal.jobs import job_task, prune_scheduled
from portal.models import Job

# Runs every few seconds: keep an hour of quiet runs, not the job retention's worth.
SCHEDULED_KEEP = timedelta(hours=1)


@job_task("catalog.advance")
def advance(job: Job) -> None:
    """Move requests on from their pull requests and what the cluster reports."""
    moved = services.advance_requests()
    job.set_progress(100, f"{moved} requests moved on")
    prune_scheduled("catalog.advance", SCHEDULED_KEEP)


@job_task("catalog.expire_reservations")
def expire_reservations(job: Job) -> None:
    opened = services.expire_reservations()
    for request in opened:
        job.append_log(
            f"{request.tenant.slug}: {request.title}: "
            + (request.error or f"pull request #{request.change_id}")
        )
    job.set_progress(100, f"{len(opened)} reservations ended")


@job_task("catalog.email")
def email(job: Job) -> None:
    recipients = list(job.kwargs["to"])
    job.set_progress(30, f"sending to {len(recipients)} people")
    send_mail(
        subject=job.kwargs["subject"],
        message=job.kwargs["body"],
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=recipients,
    )
    job.set_progress(100, "sent")


@job_task("catalog.webhooks_send")
def webhooks_send(job: Job) -> None:
    """Try the deliveries of one event (or a redelivery) as soon as it is committed."""
    sent = outbound.send(job.kwargs["delivery_ids"])
    job.set_progress(100, f"{sent} webhook calls made")


@job_task("catalog.webhooks")
def webhooks(job: Job) -> None:
    """Send the webhook attempts that are due (retries with backoff)."""
    sent = outbound.deliver_due()
    job.set_progress(100, f"{sent} webhook calls made")
    prune_scheduled("catalog.webhooks", SCHEDULED_KEEP)
