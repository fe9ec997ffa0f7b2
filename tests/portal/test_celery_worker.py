"""A real Celery worker, consuming from the real Redis at 127.0.0.1:6379, runs portal jobs."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from portal import jobs
from portal.celery import app as celery_app
from portal.models import Job
from tests.conftest import celery_worker

BROKER = "redis://127.0.0.1:6379/15"

pytestmark = pytest.mark.services


@pytest.fixture
def worker(transactional_db: None, settings: Any) -> Iterator[subprocess.Popen[str]]:
    settings.PORTAL_TASK_RUNNER = "celery"
    settings.CELERY_BROKER_URL = BROKER
    with celery_worker(BROKER) as proc:
        yield proc


def _wait(job_id: int, proc: subprocess.Popen[str], timeout: float = 60) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Job.objects.get(pk=job_id)
        if job.is_finished:
            return job
        if proc.poll() is not None:
            pytest.fail("worker exited:\n" + (proc.stdout.read() if proc.stdout else ""))
        time.sleep(0.2)
    proc.terminate()
    pytest.fail(f"job {job_id} did not finish; worker said:\n{proc.communicate()[0]}")


def test_it_runs_a_job_on_a_real_worker(worker: subprocess.Popen[str]) -> None:
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


def test_it_retries_and_fails_a_job_on_a_real_worker(
    worker: subprocess.Popen[str], settings: Any
) -> None:
    settings.PORTAL_JOB_MAX_ATTEMPTS = 2
    with transaction.atomic():
        # The tenant does not exist, so every attempt raises in the worker.
        job = jobs.enqueue("tenants.notify_onboarded", tenant_id=987654)
    done = _wait(job.pk, worker)
    assert (done.status, done.attempts) == (Job.Status.FAILED, 2)
    assert "Tenant.DoesNotExist" in done.error or "DoesNotExist" in done.error


def test_it_runs_a_beat_message_without_a_job_id(worker: subprocess.Popen[str]) -> None:
    # What `celery beat` sends: the task name and no arguments.
    celery_app.send_task("portal.housekeeping")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Job.objects.filter(status="succeeded").exists():
        time.sleep(0.2)
    job = Job.objects.get()
    assert (job.trigger, job.status) == (Job.Trigger.SCHEDULE, Job.Status.SUCCEEDED)
