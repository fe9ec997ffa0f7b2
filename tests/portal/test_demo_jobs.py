"""The demo's batch jobs: submitted through the portal's own path once the simulated cluster has
the tenant, one ended through the simulator's control API, none submitted twice."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from catalog.models import BatchJob
from gitops.specs import GpuShare
from portal.management.demo_jobs import FINISHED, PENDING, DemoJob, submit_demo_jobs
from simulator import Simulator
from simulator.store import JOBS, WORKLOADS, as_dict, as_list
from tenants.specs import tenant_spec

IMAGE = "ghcr.io/ai-factory/eval:0.4.0"


def _job(name: str, gpus: int) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": ["lm_eval"], "share": "train", "gpus": gpus}


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = as_list(as_dict(as_dict(obj).get("status")).get("conditions"))
    return next((as_dict(c) for c in conditions if as_dict(c).get("type") == kind), {})


def _state(sim: Simulator) -> Callable[[str, str], str]:
    def state(namespace: str, name: str) -> str:
        sim.tick()  # the simulator's clock would, between the demo's tries
        return sim.job_state(namespace, name)

    return state


def test_the_demo_jobs_run_wait_and_finish_and_are_submitted_once(
    world: dict[str, Any], merged_change: Callable[..., Any], start_fleet: Callable[..., Any]
) -> None:
    merged_change(
        dataclasses.replace(
            tenant_spec(world["alpha"]), shares=(GpuShare("train", "h200", "whole", 4),)
        )
    )
    sim: Simulator = start_fleet()
    for _ in range(3):
        sim.tick()  # its Flux applies alpha: queue, quota, bindings
    jobs = (
        DemoJob("alpha", "bob", _job("done-eval", 1), expect=FINISHED),
        DemoJob("alpha", "bob", _job("lora", 3)),  # admitted: 3 of 4 GPUs
        DemoJob("alpha", "alice", _job("full-eval", 2), expect=PENDING),  # 1 GPU left
    )

    stop = threading.Event()
    assert submit_demo_jobs(sim.finish_job, _state(sim), stop, jobs=jobs, interval=0.01) == 3
    assert sim.job_state("alpha", "done-eval") == FINISHED
    done = _condition(sim.store.get(JOBS, "alpha", "done-eval"), "Complete")
    assert done.get("status") == "True"
    workloads = {
        w["metadata"]["ownerReferences"][0]["name"]: w for w in sim.store.list(WORKLOADS, "alpha")
    }
    assert _condition(workloads["lora"], "Admitted").get("status") == "True"
    waiting = _condition(workloads["full-eval"], "QuotaReserved")
    assert waiting.get("status") == "False"
    assert "insufficient" in waiting.get("message", ""), waiting
    # A second run (the demo served again) submits nothing and finishes nothing twice.
    assert submit_demo_jobs(sim.finish_job, _state(sim), stop, jobs=jobs, interval=0.01) == 0
    assert BatchJob.objects.filter(tenant=world["alpha"]).count() == 3


def test_the_demo_jobs_give_up_quietly_when_the_cluster_never_has_the_tenant(
    world: dict[str, Any], start_fleet: Callable[..., Any]
) -> None:
    sim: Simulator = start_fleet()  # nothing merged: no queue, no bindings for alpha
    stop = threading.Event()
    jobs = (DemoJob("alpha", "bob", _job("lost", 1)),)
    state = _state(sim)
    assert submit_demo_jobs(sim.finish_job, state, stop, jobs=jobs, attempts=2, interval=0.01) == 0
    assert not BatchJob.objects.exists()
    assert sim.store.get(JOBS, "alpha", "lost") is None
