"""A batch job's GPU time, cost and efficiency, joined from the ledger by its namespace and
the workload names of its pods (a JobSet's are its Jobs'); and the fragment on its page."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.job_usage import job_usage
from billing.models import GpuPrice, Source, UsageHour
from catalog.models import BatchJob

H200 = "NVIDIA-H200"
SUBMITTED = datetime(2026, 11, 3, 9, 20, tzinfo=UTC)


def _hour(hour: datetime, namespace: str, workload: str, held: int, used: int) -> None:
    UsageHour.objects.create(
        hour=hour,
        tenant_slug=namespace,
        namespace=namespace,
        flavor="h200",
        gpu_model=H200,
        workload=workload,
        source=Source.EXPORTER,
        allocated_gpu_seconds=Decimal(held),
        used_gpu_seconds=Decimal(used),
        observed_seconds=3600,
    )


@pytest.fixture
def jobset(world: dict[str, Any]) -> BatchJob:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("4.00"), effective_from=date(2026, 1, 1))
    job = BatchJob.objects.create(
        tenant=world["alpha"],
        name="ft-1",
        namespace="alpha",
        kind="JobSet",
        uid="6f1d-1",
        spec={"name": "ft-1", "nodes": 2},
        submitted_by=world["bob"],
        created_at=SUBMITTED,
    )
    start = SUBMITTED.replace(minute=0)
    for offset in (0, 1):
        hour = start + timedelta(hours=offset)
        _hour(hour, "alpha", "Job/ft-1-workers-0", 7200, 3600)  # 2 GPUs, half busy
        _hour(hour, "alpha", "Job/ft-1-workers-1", 7200, 5400)
        _hour(hour, "alpha", "Job/other", 3600, 3600)  # another job of the tenant
        _hour(hour, "bravo", "Job/ft-1-workers-0", 3600, 3600)  # another tenant's namesake
    _hour(start - timedelta(hours=1), "alpha", "Job/ft-1-workers-0", 3600, 0)  # before it
    return job


def test_the_ledger_is_joined_by_namespace_and_the_jobs_workloads(jobset: BatchJob) -> None:
    assert jobset.ledger_workloads() == ["Job/ft-1-workers-0", "Job/ft-1-workers-1"]
    usage = job_usage(jobset, now=SUBMITTED + timedelta(hours=3))
    assert usage.gpu_hours == Decimal(8)  # 2 pods x 2 GPUs x 2 hours
    assert usage.used_gpu_hours == Decimal(5)
    assert usage.amount == Decimal("32.00")
    assert usage.efficiency == Decimal("0.625")


def test_a_name_used_again_counts_from_the_later_job_on(
    world: dict[str, Any], jobset: BatchJob
) -> None:
    BatchJob.objects.create(
        tenant=world["alpha"],
        name="ft-1",
        namespace="alpha",
        kind="JobSet",
        uid="6f1d-2",
        spec={"name": "ft-1", "nodes": 2},
        created_at=SUBMITTED + timedelta(hours=1),
    )
    usage = job_usage(jobset, now=SUBMITTED + timedelta(hours=3))
    assert usage.gpu_hours == Decimal(4)  # only the first hour is the first job's


def test_the_fragment_shows_time_cost_and_efficiency(
    login: Callable[[str], Client], jobset: BatchJob
) -> None:
    page = login("vic").get("/t/alpha/jobs/ft-1/usage/").content.decode()
    assert "8.00 GPU-hours" in page
    assert "32.00 EUR" in page
    assert "62.50 %" in page
    assert login("charlie").get("/t/alpha/jobs/ft-1/usage/").status_code == 404
    assert login("vic").get("/t/alpha/jobs/nope/usage/").status_code == 404
