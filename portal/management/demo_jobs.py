"""The demo's batch jobs: submitted by its members through the portal's own path once the
simulated cluster has applied their tenants, so the jobs and queue pages have data.

They cannot be seeded with the rest (``seed_demo``): a job is not held in Git, it is submitted
to the Kubernetes API as a member, and the simulator only serves that API while ``serve`` runs.
``serve --demo-jobs`` (what ``make demo`` runs) starts ``submit_demo_jobs`` on a thread of its
own: it submits each job that has no row yet, retrying while the cluster has not applied the
tenant (no LocalQueue, no RoleBinding yet: the API server's 403 or Kueue's refusal), and ends
the one meant as finished once its pods run, through the simulator's control API, as if its
time had passed, before the next is submitted. Running it twice changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import close_old_connections

from catalog.jobs import do_submit_job
from catalog.models import BatchJob
from tenants.models import Tenant

logger = logging.getLogger(__name__)


# What the demo waits for after submitting a job, before the next: Kueue has admitted it, it
# waits behind quota, or it has finished (its pods ended through the simulator's control API).
ADMITTED, PENDING, FINISHED = "admitted", "pending", "finished"


@dataclass(frozen=True)
class DemoJob:
    """One job of the demo: who submits what, and the state it is to be seen in."""

    tenant: str
    user: str
    data: dict[str, Any]
    expect: str = ADMITTED


# vision holds two whole H200s to serve (``serve``, one held by its endpoint), sixteen to train
# (``train``, all held by the simulator's seed run) and four MIG slices (``eval``, three held
# by the seed's evaluations); Kueue counts a flavor's shares together. The baseline
# evaluation on a MIG slice has finished; the fine-tuning run takes a whole GPU; the
# evaluation over both serving GPUs then waits behind quota (Kueue's reason and position on
# the queue page).
DEMO_JOBS: tuple[DemoJob, ...] = (
    DemoJob(
        "vision",
        "bob",
        {"name": "baseline-eval", "template": "evaluation", "share": "eval", "gpus": 1},
        expect=FINISHED,
    ),
    DemoJob(
        "vision",
        "bob",
        {"name": "blip-lora", "template": "fine-tuning", "share": "serve", "gpus": 1},
    ),
    DemoJob(
        "vision",
        "alice",
        {"name": "blip-eval-full", "template": "evaluation", "share": "serve", "gpus": 2},
        expect=PENDING,
    ),
)


def submit_demo_jobs(
    finish: Callable[[str, str], int],
    state: Callable[[str, str], str],
    stop: threading.Event,
    *,
    jobs: tuple[DemoJob, ...] = DEMO_JOBS,
    attempts: int = 90,
    interval: float = 2.0,
) -> int:
    """Submit the demo's jobs that have no row yet, each once the one before is in its state.
    ``finish(namespace, name)`` ends a job's running pods (LookupError when it has none yet);
    ``state(namespace, name)`` is its Workload's: "" (none yet), ``pending``, ``admitted`` or
    ``finished``. Returns how many were submitted. Waits on the cluster (``interval`` between
    tries, ``attempts`` tries per step) and gives up quietly: the demo works without them."""
    submitted = 0
    User = get_user_model()
    for demo in jobs:
        tenant = Tenant.objects.filter(slug=demo.tenant).first()
        user = User.objects.filter(username=demo.user).first()
        if tenant is None or user is None:
            continue
        if not BatchJob.objects.filter(tenant=tenant, name=demo.data["name"]).exists():
            if not _submit(tenant, user, demo, stop, attempts, interval):
                return submitted
            submitted += 1
        if not _settle(demo, finish, state, stop, attempts, interval):
            return submitted
    return submitted


def run_demo_jobs(
    finish: Callable[[str, str], int], state: Callable[[str, str], str], stop: threading.Event
) -> None:
    """``submit_demo_jobs`` as a thread of ``serve`` runs it: its database connection closed
    at the end."""
    try:
        submit_demo_jobs(finish, state, stop)
    finally:
        close_old_connections()


def _submit(
    tenant: Tenant,
    user: Any,
    demo: DemoJob,
    stop: threading.Event,
    attempts: int,
    interval: float,
) -> bool:
    for _ in range(attempts):
        try:
            do_submit_job(tenant, acting_user=user, data=demo.data)
            return True
        except ValidationError as exc:
            # The tenant's queue or bindings not applied yet: the cluster refuses for now.
            logger.info("demo job %s not submitted yet: %s", demo.data["name"], exc)
        if stop.wait(interval):
            return False
    logger.warning("demo job %s was not submitted: the cluster kept refusing", demo.data["name"])
    return False


def _settle(
    demo: DemoJob,
    finish: Callable[[str, str], int],
    state: Callable[[str, str], str],
    stop: threading.Event,
    attempts: int,
    interval: float,
) -> bool:
    """Wait until the job is in the state it is to be seen in (a finished one is ended once
    Kueue has admitted it), so the next job meets the quota this one leaves."""
    name = demo.data["name"]
    for _ in range(attempts):
        now = state(demo.tenant, name)
        if now == demo.expect or (now == FINISHED and demo.expect != PENDING):
            return True
        if demo.expect == FINISHED and now == ADMITTED:
            with contextlib.suppress(LookupError):  # its pods are not created yet
                finish(demo.tenant, name)
        if stop.wait(interval):
            return False
    logger.warning("demo job %s did not become %s", name, demo.expect)
    return False


# The demo fleet's node that joins "new": seed_demo leaves it out of the lifecycle, so the
# first sync burns it in (a whole-GPU node no seeded workload uses).
DEMO_BURN_IN_NODE = "h200-08"
BURN_IN_RUN_SECONDS = 20.0


def finish_burn_in_jobs(
    finish: Callable[[str, str], int], run_seconds: float = BURN_IN_RUN_SECONDS
) -> int:
    """End the pods of each burn-in Job whose run is ``run_seconds`` old per step, through the
    simulator's control API, as if the diagnostic's hour had passed; returns how many Jobs."""
    from django.conf import settings
    from django.utils import timezone

    from fleet.models import BurnInDomainRun, BurnInRun

    ended = 0
    for run in BurnInRun.objects.filter(outcome=BurnInRun.Outcome.RUNNING, domain_run=None):
        age = (timezone.now() - run.started_at).total_seconds()
        job = run.nccl_job or run.diag_job
        if (
            job
            and run.step != BurnInRun.Step.DOMAIN
            and age >= run_seconds * (2 if run.nccl_job else 1)
        ):
            with contextlib.suppress(LookupError):  # deleted meanwhile
                finish(settings.FLEET_BURN_IN_NAMESPACE, job)
                ended += 1
    # The test across the node's NVLink domain: its pods too, a step later.
    for domain_run in BurnInDomainRun.objects.filter(outcome=BurnInDomainRun.Outcome.RUNNING):
        age = (timezone.now() - domain_run.started_at).total_seconds()
        if domain_run.job and age >= run_seconds:
            with contextlib.suppress(LookupError):
                finish(settings.FLEET_BURN_IN_NAMESPACE, domain_run.job)
                ended += 1
    return ended


def run_demo_burn_in(
    finish: Callable[[str, str], int], stop: threading.Event, interval: float = 5.0
) -> None:
    """``finish_burn_in_jobs`` every ``interval`` seconds as a thread of ``serve``: the node
    page shows the demo node's run, then the node ready (or failed, after ``fleet_fault
    diag-fail``). Stops with ``stop``."""
    try:
        while not stop.wait(interval):
            finish_burn_in_jobs(finish)
    finally:
        close_old_connections()
