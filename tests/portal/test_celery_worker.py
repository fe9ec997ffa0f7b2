"""A real Celery worker, consuming from the real Redis at 127.0.0.1:6379, runs portal jobs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from portal import jobs
from portal.celery import app as celery_app
from portal.models import Job
from tests.support import wait_until
from tests.support.processes import Started, celery_worker

BROKER = "redis://127.0.0.1:6379/15"
FINISHED = [Job.Status.SUCCEEDED, Job.Status.FAILED]

pytestmark = pytest.mark.services


@pytest.fixture
def worker(transactional_db: None, settings: Any, tmp_path: Path) -> Iterator[Started]:
    settings.PORTAL_TASK_RUNNER = "celery"
    settings.CELERY_BROKER_URL = BROKER
    with celery_worker(BROKER, log_file=tmp_path / "worker.log") as started:
        yield started


def _wait(job_id: int, worker: Started) -> Job:
    return wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=FINISHED).first(),
        60,
        f"job {job_id} to finish on the worker",
        process=worker.proc,
        details=worker.log,
    )


def test_it_runs_a_job_on_a_real_worker(worker: Started) -> None:
    Session.objects.create(
        session_key="stale", session_data="", expire_date=timezone.now() - timedelta(hours=1)
    )
    with transaction.atomic():
        job = jobs.enqueue("portal.housekeeping", title="housekeeping via redis")
    done = _wait(job.pk, worker)
    assert done.status == Job.Status.SUCCEEDED, done.error
    assert done.attempts == 1
    assert "removed 1 expired sessions" in done.log
    assert not Session.objects.filter(session_key="stale").exists()


def test_it_retries_and_fails_a_job_on_a_real_worker(worker: Started, settings: Any) -> None:
    settings.PORTAL_JOB_MAX_ATTEMPTS = 2
    with transaction.atomic():
        # The tenant does not exist, so every attempt raises in the worker.
        job = jobs.enqueue("tenants.notify_onboarded", tenant_id=987654)
    done = _wait(job.pk, worker)
    assert (done.status, done.attempts) == (Job.Status.FAILED, 2)
    assert "Tenant.DoesNotExist" in done.error or "DoesNotExist" in done.error


def test_it_runs_a_beat_message_without_a_job_id(worker: Started) -> None:
    # What `celery beat` sends: the task name and no arguments.
    celery_app.send_task("portal.housekeeping")
    wait_until(
        lambda: Job.objects.filter(status__in=FINISHED).exists(),
        60,
        "the beat message's job to finish",
        process=worker.proc,
        details=worker.log,
    )
    job = Job.objects.get()
    assert (job.trigger, job.status) == (Job.Trigger.SCHEDULE, Job.Status.SUCCEEDED)
