"""Enqueueing and running jobs, on Celery or in-process.

``enqueue()`` writes a Job row and hands its id to a runner once the transaction commits:
- ``celery``: the task is sent to the broker (CELERY_BROKER_URL) and a worker runs it;
- ``thread``: the embedded default, a small thread pool in this process, plus a timer thread
  that runs the beat schedule (``start_embedded_beat``), so `make demo` needs no services;
- ``eager``: run in the calling thread right after commit (tests).
Tasks are declared with ``@job_task("name")``; the function receives the Job and does the work.
A failed attempt is retried with backoff until ``max_attempts``, then the job is failed with its
traceback in the log.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from portal.middleware import current_request_id
from portal.models import Job

logger = logging.getLogger(__name__)

JobFunction = Callable[[Job], None]
_registry: dict[str, JobFunction] = {}
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def runner_mode() -> str:
    """Which runner executes jobs: an explicit PORTAL_TASK_RUNNER, else celery with a broker."""
    explicit = getattr(settings, "PORTAL_TASK_RUNNER", "")
    if explicit:
        return str(explicit)
    return "celery" if settings.CELERY_BROKER_URL else "thread"


def job_task(name: str) -> Callable[[JobFunction], Any]:
    """Register ``fn(job)`` as the task ``name``, runnable by Celery and by the embedded runner."""

    def decorator(fn: JobFunction) -> Any:
        _registry[name] = fn

        @shared_task(name=name, ignore_result=True, acks_late=True)
        def celery_entry(job_id: int | None = None) -> None:
            # Beat sends no id: a scheduled run makes its own Job row.
            if job_id is None:
                job_id = Job.objects.create(task=name, trigger=Job.Trigger.SCHEDULE).pk
            run_job(job_id)

        celery_entry.job_function = fn
        return celery_entry

    return decorator


def enqueue(
    task: str,
    *,
    title: str = "",
    tenant: Any = None,
    created_by: Any = None,
    trigger: str = Job.Trigger.USER,
    delay: float = 0,
    **kwargs: Any,
) -> Job:
    """Persist a Job for ``task`` and dispatch it when the current transaction commits;
    ``delay`` seconds later when given (it stays queued meanwhile)."""
    if task not in _registry:
        raise KeyError(f"unknown job task {task!r}")
    job = Job.objects.create(
        task=task,
        title=title,
        kwargs=kwargs,
        tenant=tenant,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        trigger=trigger,
        request_id=current_request_id(),
        max_attempts=settings.PORTAL_JOB_MAX_ATTEMPTS,
    )
    transaction.on_commit(lambda: dispatch(job.pk, delay, task=task))
    return job


def enqueue_unless_waiting(task: str, *, delay: float = 0, **kwargs: Any) -> Job | None:
    """``enqueue`` unless a job of ``task`` is queued and not started: for a task that works
    through whatever is pending when it runs (the merge queue, the mail outbox), one waiting
    job is enough. Called after commit, so a job seen waiting starts after the caller's rows
    are visible. Two callers racing may queue two; the second finds less or nothing to do.

    ``delay`` gathers: the job waits that long, queued, and whatever arrives meanwhile finds
    it waiting (a burst of 1,000 approvals made 1,800 outbox jobs of 36 ms each without)."""
    if Job.objects.filter(task=task, status=Job.Status.QUEUED).exists():
        return None
    return enqueue(task, delay=delay, **kwargs)


def prune_scheduled(task: str, keep: timedelta) -> int:
    """Delete the succeeded scheduled runs of ``task`` older than ``keep``: a task the beat
    runs every few seconds would otherwise fill the jobs list. Failures are kept."""
    deleted, _ = Job.objects.filter(
        task=task,
        trigger=Job.Trigger.SCHEDULE,
        status=Job.Status.SUCCEEDED,
        finished_at__lt=timezone.now() - keep,
    ).delete()
    return deleted


def dispatch(job_id: int, countdown: float = 0, *, task: str = "") -> None:
    """Hand the job to the runner; ``task`` is its task's name when the caller knows it."""
    mode = runner_mode()
    if mode == "celery":
        from portal.celery import app

        task = task or Job.objects.values_list("task", flat=True).get(pk=job_id)
        app.send_task(task, kwargs={"job_id": job_id}, countdown=countdown or None)
    elif mode == "eager":
        # In a context of its own, as on a worker: nothing the caller holds in a context
        # variable (the commit of main a rendering pinned, gitops.services.reading_main)
        # leaks into the job.
        contextvars.Context().run(run_job, job_id)
    else:
        _get_executor().submit(_run_in_thread, job_id, countdown)


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=settings.PORTAL_EMBEDDED_WORKERS, thread_name_prefix="portal-job"
            )
        return _executor


def _run_in_thread(job_id: int, countdown: float) -> None:
    if countdown:
        time.sleep(countdown)
    close_old_connections()
    try:
        run_job(job_id)
    finally:
        connection.close()


def run_job(job_id: int) -> None:
    """Claim the job (once, even if its message arrives twice), run it, record the outcome."""
    claimed = Job.objects.filter(pk=job_id, status=Job.Status.QUEUED).update(
        status=Job.Status.RUNNING, attempts=F("attempts") + 1, started_at=timezone.now()
    )
    if not claimed:
        logger.info("job %s is not queued any more; skipping", job_id)
        return
    job = Job.objects.get(pk=job_id)
    fn = _registry.get(job.task)
    try:
        if fn is None:
            raise LookupError(f"no job function is registered for {job.task!r}")
        fn(job)
    except Exception as exc:
        job.append_log(f"attempt {job.attempts} failed: {exc!r}")
        retry = job.attempts < job.max_attempts and fn is not None
        Job.objects.filter(pk=job_id).update(
            status=Job.Status.QUEUED if retry else Job.Status.FAILED,
            error=traceback.format_exc(),
            finished_at=None if retry else timezone.now(),
        )
        logger.warning("job %s (%s) failed, attempt %s", job_id, job.task, job.attempts)
        if retry:
            dispatch(job_id, countdown=min(60.0, 2.0**job.attempts))
        return
    Job.objects.filter(pk=job_id).update(
        status=Job.Status.SUCCEEDED, progress=100, finished_at=timezone.now()
    )


class EmbeddedBeat(threading.Thread):
    """Runs CELERY_BEAT_SCHEDULE in-process when there is no broker (the embedded default)."""

    def __init__(self, schedule: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(name="portal-beat", daemon=True)
        self.schedule = schedule if schedule is not None else settings.CELERY_BEAT_SCHEDULE
        self.stopped = threading.Event()
        self.last_run: dict[str, datetime] = dict.fromkeys(self.schedule, timezone.now())

    def run(self) -> None:
        while not self.stopped.is_set():
            close_old_connections()
            try:
                wait = self.tick()
            except Exception:
                # A database hiccup must not end the schedule for the life of the process.
                logger.exception("embedded beat tick failed")
                wait = 30.0
            self.stopped.wait(min(wait, 30.0))

    def tick(self) -> float:
        """Enqueue every entry that is due; return seconds until the next one."""
        next_in = 30.0
        for key, entry in self.schedule.items():
            due, next_seconds = entry["schedule"].is_due(self.last_run[key])
            if due:
                self.last_run[key] = timezone.now()
                with transaction.atomic():
                    enqueue(entry["task"], title=key, trigger=Job.Trigger.SCHEDULE)
            next_in = min(next_in, float(next_seconds))
        return max(next_in, 0.5)

    def stop(self) -> None:
        self.stopped.set()
