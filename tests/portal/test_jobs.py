from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from celery.schedules import schedule
from django.contrib.sessions.models import Session
from django.db import transaction
from django.test import Client
from django.utils import timezone

from portal import jobs
from portal.models import Job
from tests.support import wait_until

CALLS: list[int] = []


@jobs.job_task("tests.flaky")
def flaky(job: Job) -> None:
    """Fails until the attempt named in kwargs, to exercise retries."""
    CALLS.append(job.attempts)
    job.set_progress(40, f"attempt {job.attempts}")
    if job.attempts < job.kwargs.get("succeed_on", 99):
        raise RuntimeError(f"boom on attempt {job.attempts}")


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def test_it_refuses_unknown_tasks(db: None) -> None:
    with pytest.raises(KeyError, match="unknown job task"):
        jobs.enqueue("no.such.task")
    assert not Job.objects.exists()


def test_it_dispatches_only_after_commit(db: None, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = jobs.enqueue("tests.flaky", succeed_on=1)
    assert Job.objects.get(pk=job.pk).status == Job.Status.QUEUED
    assert CALLS == []
    for callback in callbacks:
        callback()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.progress) == (Job.Status.SUCCEEDED, 1, 100)
    assert "attempt 1" in job.log


def test_it_retries_then_succeeds(db: None, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        job = jobs.enqueue("tests.flaky", succeed_on=2)
    job.refresh_from_db()
    assert CALLS == [1, 2]
    assert job.status == Job.Status.SUCCEEDED
    assert "attempt 1 failed" in job.log
    assert job.error.strip().endswith("RuntimeError: boom on attempt 1")


def test_it_fails_after_max_attempts(
    db: None, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.PORTAL_JOB_MAX_ATTEMPTS = 2
    with django_capture_on_commit_callbacks(execute=True):
        job = jobs.enqueue("tests.flaky")
    job.refresh_from_db()
    assert CALLS == [1, 2]
    assert (job.status, job.attempts) == (Job.Status.FAILED, 2)
    assert job.finished_at is not None
    assert "boom on attempt 2" in job.error


def test_it_runs_a_job_once_even_if_delivered_twice(db: None) -> None:
    job = Job.objects.create(task="tests.flaky", kwargs={"succeed_on": 1})
    jobs.run_job(job.pk)
    jobs.run_job(job.pk)
    assert CALLS == [1]


def test_it_runs_jobs_on_the_embedded_thread_pool(transactional_db: None, settings: Any) -> None:
    settings.PORTAL_TASK_RUNNER = "thread"
    with transaction.atomic():
        job = jobs.enqueue("tests.flaky", succeed_on=1)
    wait_until(lambda: Job.objects.get(pk=job.pk).is_finished, 20, "the thread pool to run the job")
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED


def test_it_runs_the_beat_schedule_in_process(
    db: None, django_capture_on_commit_callbacks: Any
) -> None:
    beat = jobs.EmbeddedBeat(
        {"tick": {"task": "portal.housekeeping", "schedule": schedule(timedelta(seconds=60))}}
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert beat.tick() > 1
    assert not Job.objects.exists()
    beat.last_run["tick"] = timezone.now() - timedelta(seconds=61)
    Session.objects.create(
        session_key="old", session_data="", expire_date=timezone.now() - timedelta(days=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        beat.tick()
    job = Job.objects.get()
    assert (job.task, job.trigger, job.status) == (
        "portal.housekeeping",
        Job.Trigger.SCHEDULE,
        Job.Status.SUCCEEDED,
    )
    assert "removed 1 expired sessions" in job.log
    assert not Session.objects.filter(session_key="old").exists()


def test_it_shows_jobs_to_the_right_people(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    job = Job.objects.create(task="tests.flaky", tenant=world["alpha"], created_by=world["bob"])
    assert login("pam").get("/jobs/").status_code == 200
    assert login("alice").get("/jobs/").status_code == 403
    for who in ["pam", "alice", "bob"]:
        assert login(who).get(f"/jobs/{job.pk}/").status_code == 200, who
    for who in ["charlie", "vic", "nora"]:
        assert login(who).get(f"/jobs/{job.pk}/").status_code == 404, who
    fragment = login("alice").get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<section id="job"')
    assert 'hx-trigger="every 2s"' in fragment


@pytest.mark.django_db
def test_it_prunes_only_old_successful_scheduled_runs_of_one_task() -> None:
    from django.utils import timezone

    from portal.jobs import prune_scheduled

    old = timezone.now() - timedelta(hours=2)
    recent = timezone.now() - timedelta(minutes=5)

    def job(task: str, trigger: str, status: str, finished: Any) -> Job:
        return Job.objects.create(task=task, trigger=trigger, status=status, finished_at=finished)

    gone = job("fleet.sync", Job.Trigger.SCHEDULE, Job.Status.SUCCEEDED, old)
    kept = [
        job("fleet.sync", Job.Trigger.SCHEDULE, Job.Status.SUCCEEDED, recent),
        job("fleet.sync", Job.Trigger.SCHEDULE, Job.Status.FAILED, old),
        job("fleet.sync", Job.Trigger.USER, Job.Status.SUCCEEDED, old),
        job("catalog.advance", Job.Trigger.SCHEDULE, Job.Status.SUCCEEDED, old),
    ]
    assert prune_scheduled("fleet.sync", timedelta(hours=1)) == 1
    assert not Job.objects.filter(pk=gone.pk).exists()
    assert set(Job.objects.values_list("pk", flat=True)) == {j.pk for j in kept}
