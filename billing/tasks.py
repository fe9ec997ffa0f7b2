"""Background work of the billing app: scraping the exporter, the hourly ingest, backfills,
the monthly invoices and the budget check."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django.conf import settings

from billing import budgets, idle, invoicing, services
from billing.models import IngestRun
from portal.jobs import job_task, prune_scheduled
from portal.models import Job

# The scrape runs every minute; an hour of its job rows is plenty to see it work.
SCHEDULED_SCRAPE_KEEP = timedelta(hours=1)


@job_task("billing.scrape")
def scrape(job: Job) -> None:
    """The embedded default: read the exporters once into the sample table."""
    samples, errors = services.scrape_exporters()
    for error in errors:
        job.append_log(error)
    job.set_progress(100, f"{samples} GPU samples")
    prune_scheduled("billing.scrape", SCHEDULED_SCRAPE_KEEP)
    if errors and not samples:
        raise RuntimeError(f"no exporter could be read: {'; '.join(errors)}")


@job_task("billing.ingest")
def ingest(job: Job) -> None:
    """The periodic ingest: the complete hours after the cursor."""
    source = job.kwargs.get("source") or None
    due = services.due_range(source or settings.BILLING_SOURCE)
    if due is None:
        job.set_progress(100, "the ledger is up to date")
        return
    _run(job, *due, source=source)
    services.prune_samples()


@job_task("billing.backfill")
def backfill(job: Job) -> None:
    """Ingest a range an operator asked for (``start``/``end``: ISO hours), with progress."""
    start = datetime.fromisoformat(job.kwargs["start"])
    end = datetime.fromisoformat(job.kwargs["end"])
    _run(job, start, end, source=job.kwargs.get("source") or None)


def _run(job: Job, start: datetime, end: datetime, *, source: str | None) -> None:
    run = services.do_ingest_hours(
        start, end, acting_user=job.created_by, source=source, progress=job.set_progress
    )
    for warning in run.warnings:
        job.append_log(warning)
    if run.status == IngestRun.Status.FAILED:
        raise RuntimeError(run.error)


@job_task("billing.invoices")
def invoices(job: Job) -> None:
    """Draft every tenant's invoice of a month: ``month`` (ISO date) when finance asked for
    one, else last month, issued as drafted when scheduled with ``BILLING_AUTO_ISSUE``."""
    if job.kwargs.get("month"):
        month = date.fromisoformat(job.kwargs["month"])
        issue = False
    else:
        month = invoicing.previous_month(invoicing.today_utc())
        issue = settings.BILLING_AUTO_ISSUE
    done = invoicing.draft_month(
        month, acting_user=job.created_by, issue=issue, progress=job.set_progress
    )
    for line in done:
        job.append_log(line)
    job.set_progress(100, f"{len(done)} invoice{'s' if len(done) != 1 else ''} for {month:%Y-%m}")


@job_task("billing.budgets")
def budget_check(job: Job) -> None:
    """Raise the budget thresholds crossed this month, each once."""
    raised = budgets.check_budgets()
    for alert in raised:
        job.append_log(f"{alert.tenant.slug}: {alert.threshold}% of {alert.budget}")
    job.set_progress(100, f"{len(raised)} alert{'s' if len(raised) != 1 else ''} raised")


@job_task("billing.idle")
def idle_check(job: Job) -> None:
    """Evaluate the idle policies: new cases told, due ones acted on, reclaimed hours."""
    result = idle.evaluate()
    for error in result.errors:
        job.append_log(error)
    job.set_progress(
        100,
        f"{result.detected} detected, {result.acted} reclaimed, {result.closed} closed, "
        f"{result.reclaimed_rows} reclaimed hours",
    )
