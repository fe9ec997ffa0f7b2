"""What one batch job used and cost, from the GPU-seconds ledger.

The ledger names a pod's workload after its controller, ``<OwnerKind>/<name>``
(``billing.ingest.workload_name``): a Job's pods are ``Job/<name>``, a JobSet's are those of the
Jobs it made, ``Job/<name>-workers-<index>`` (``BatchJob.ledger_workloads``). Rows are
joined by the job's namespace and those names, from the hour it was submitted until the next
job of the same name was (a name may be used again once the object is gone): the hour of a
submission is the job's that was submitted in it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from billing.costing import Total, priced, totals
from billing.models import UsageHour
from catalog.models import BatchJob


def job_usage(job: BatchJob, *, now: datetime | None = None) -> Total:
    """GPU-hours held and used, energy and cost of ``job`` (zero before its first metered
    hour)."""
    now = now or timezone.now()
    start = job.created_at.replace(minute=0, second=0, microsecond=0)
    later = (
        BatchJob.objects.filter(tenant=job.tenant, name=job.name, created_at__gt=job.created_at)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    # The ledger is hourly: the hour a later job of the name was submitted in is the later
    # job's, as its own first hour.
    end = later.replace(minute=0, second=0, microsecond=0) if later else now + timedelta(hours=1)
    rows = UsageHour.objects.filter(namespace=job.namespace, workload__in=job.ledger_workloads())
    return totals(priced(rows, start, end)).get(None, Total())
