"""Idle reclaim end to end against the simulator: a Kueue job whose GPU idles (the
simulator's ``idle`` fault, so DCGM's GR_ENGINE_ACTIVE reads ~0) is metered from the
exporter, detected, told, and after the grace its Workload is deactivated (Kueue evicts it,
reason Deactivated, and suspends its Job); its tenant wakes it and it queues again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing import idle, services
from billing.models import IdleCase, IdleKind, IdlePolicy, IngestRun, ReclaimedHour, UsageHour
from catalog.jobs import do_submit_job
from fleet import services as fleet_services
from gitops.specs import GpuShare
from simulator import Simulator
from simulator.store import JOBS, PODS, WORKLOADS
from simulator.workloads import condition
from tenants.specs import tenant_spec

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)
STEP = 600
JOB = {
    "name": "eval-1",
    "image": "ghcr.io/ai-factory/eval:1.0",
    "command": ["lm_eval", "--tasks", "mmlu"],
    "share": "train",
    "gpus": 1,
    "cpu": 2,
    "memory_gib": 8,
}


@pytest.fixture
def sim(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Any],
    settings: Any,
) -> Simulator:
    spec = dataclasses.replace(
        tenant_spec(world["alpha"]), shares=(GpuShare("train", "h200", "whole", 2),)
    )
    merged_change(spec)
    simulator: Simulator = start_fleet()
    for _ in range(3):
        simulator.tick()
    settings.BILLING_EXPORTER_URLS = [f"{simulator.url}/metrics"]
    settings.BILLING_EXPORTER_TOKEN = ""
    settings.BILLING_STEP_SECONDS = STEP
    return simulator


def running_pod(sim: Simulator) -> dict[str, Any]:
    for _ in range(5):
        sim.tick()
        pods = [
            p
            for p in sim.store.list(PODS)
            if p["metadata"]["namespace"] == "alpha" and p["spec"].get("nodeName")
        ]
        if pods:
            return pods[0]
    raise AssertionError("the job's pod was never placed")


def the_workload(sim: Simulator) -> dict[str, Any]:
    (workload,) = [w for w in sim.store.list(WORKLOADS) if w["metadata"]["namespace"] == "alpha"]
    return workload


def meter(sim: Simulator, first: Any, hours: int) -> None:
    """Scrape every slot of ``hours`` hours from ``first`` (and the slot before, the energy
    baseline), then ingest them, as the beat's scrape and ingest do."""
    clock = sim.clock
    try:
        for slot in range(-1, hours * 3600 // STEP):
            moment = first.timestamp() + slot * STEP + 7.5
            sim.clock = lambda moment=moment: moment
            samples, errors = services.scrape_exporters(now=moment)
            assert samples and not errors
    finally:
        sim.clock = clock
    run = services.do_ingest_hours(first, first + hours * HOUR, acting_user=None, source="exporter")
    assert run.status == IngestRun.Status.SUCCEEDED, run.error


def test_an_idle_job_is_told_suspended_after_the_grace_and_woken(
    world: dict[str, Any], sim: Simulator, django_capture_on_commit_callbacks: Any
) -> None:
    do_submit_job(world["alpha"], acting_user=world["bob"], data=JOB)
    pod = running_pod(sim)
    assert fleet_services.sync_all().ok  # the portal knows the pod's owner: Job/eval-1
    sim.set_gpu_idle(pod["spec"]["nodeName"], None)
    first = services.last_complete_hour() - HOUR
    meter(sim, first, 2)
    row = UsageHour.objects.filter(namespace="alpha", workload="Job/eval-1").first()
    assert row is not None and row.used_gpu_seconds < row.allocated_gpu_seconds * Decimal("0.05")

    IdlePolicy.objects.create(
        flavor="h200", threshold_percent=Decimal(5), window_hours=2, grace_minutes=30
    )
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        assert idle.evaluate(now=now).detected == 1
    case = IdleCase.objects.get(workload="Job/eval-1")
    assert (case.kind, case.state) == (IdleKind.JOB, IdleCase.State.NOTIFIED)
    assert the_workload(sim)["spec"].get("active", True) is True  # not before the grace

    with django_capture_on_commit_callbacks(execute=True):
        result = idle.evaluate(now=now + timedelta(minutes=31))
    assert result.acted == 1, result.errors
    case.refresh_from_db()
    assert case.state == IdleCase.State.ACTED
    workload = the_workload(sim)
    assert (case.target, workload["spec"]["active"]) == (workload["metadata"]["name"], False)
    sim.tick()
    evicted = condition(the_workload(sim), "Evicted") or {}
    assert (evicted.get("status"), evicted.get("reason")) == ("True", "Deactivated")
    sim.tick()
    assert sim.store.get(JOBS, "alpha", "eval-1")["spec"]["suspend"] is True
    # Two hours later the GPU it held counts as two GPU-hours won back (give or take the part
    # hours at the ends).
    idle.record_reclaimed(now + timedelta(minutes=31) + 2 * HOUR)
    assert idle.reclaimed_total(tenant_slug="alpha") == Decimal("2.000")
    assert ReclaimedHour.objects.filter(case=case).count() in (2, 3)

    idle.do_wake(case, acting_user=world["bob"])
    case.refresh_from_db()
    assert case.state == IdleCase.State.WOKEN and case.ended_by == world["bob"]
    assert the_workload(sim)["spec"]["active"] is True
    sim.tick()
    requeued = condition(the_workload(sim), "Requeued") or {}
    assert (requeued.get("status"), requeued.get("reason")) == ("True", "Reactivated")
