"""Background work of the catalog: following requests, expiring reservations, e-mail."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage, get_connection, send_mail
from django.db import transaction
from django.utils import timezone

from catalog import cluster_sleep, idle_actions, outbound, services
from catalog.models import OutgoingMail
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


@job_task("catalog.approve_many")
def approve_many(job: Job) -> None:
    """ "Approve selected": each request approved in turn (``services.do_approve_many``)."""
    approved, left = services.run_approve_many(job)
    job.set_progress(100, f"{approved} approved, {left} left waiting")


# How many mails one pass of the outbox job locks and sends over one connection.
OUTBOX_CHUNK = 200
SENT_KEEP = timedelta(days=7)


@job_task("catalog.send_outbox")
def send_outbox(job: Job) -> None:
    """Send every unsent mail of the outbox, oldest first, a chunk per transaction over one
    connection. Rows another runner holds are skipped (it sends them). A failed send fails the
    job, which is retried; what was sent before stays sent, the rest stays in the outbox."""
    sent = 0
    while True:
        with transaction.atomic():
            chunk = list(
                OutgoingMail.objects.select_for_update(skip_locked=True)
                .filter(sent_at__isnull=True)
                .order_by("id")[:OUTBOX_CHUNK]
            )
            if not chunk:
                break
            with get_connection() as connection:
                connection.send_messages(
                    [
                        EmailMessage(
                            subject=mail.subject,
                            body=mail.body,
                            from_email=settings.DEFAULT_FROM_EMAIL,
                            to=list(mail.to),
                            connection=connection,
                        )
                        for mail in chunk
                    ]
                )
            OutgoingMail.objects.filter(pk__in=[m.pk for m in chunk]).update(sent_at=timezone.now())
        sent += len(chunk)
        job.set_progress(50, f"{sent} mails sent")
    # Sent mails are kept a week (what went out, for an operator asking), then dropped.
    OutgoingMail.objects.filter(sent_at__lt=timezone.now() - SENT_KEEP).delete()
    job.set_progress(100, f"{sent} mails sent")


@job_task("catalog.email")
def email(job: Job) -> None:
    """One mail per job: what the portal queued before the outbox (kept for jobs queued by
    an older version when it was upgraded)."""
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


@job_task("catalog.idle_merge")
def idle_merge(job: Job) -> None:
    """Merge the sleep and wake changes whose checks passed (``idle_actions.merge_ready``),
    then free the GPUs of the clusters main holds asleep (``cluster_sleep``). A cluster the API
    did not answer for is logged, not retried: the next scheduled run is the retry."""
    merged = idle_actions.merge_ready()
    report = cluster_sleep.free_sleeping_clusters()
    for where, pods in report.freed.items():
        job.append_log(f"{where}: asleep, {len(pods)} host pods deleted: {', '.join(pods)}")
    for where, error in report.errors.items():
        job.append_log(f"{where}: {error}")
    freed = sum(len(pods) for pods in report.freed.values())
    job.set_progress(
        100, f"{merged} sleep or wake changes merged; {freed} host pods of sleeping clusters gone"
    )
    prune_scheduled("catalog.idle_merge", SCHEDULED_KEEP)
