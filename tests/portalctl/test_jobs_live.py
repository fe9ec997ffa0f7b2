"""The installed ``portalctl`` runs, lists, reads the logs of and cancels a batch job on a live
portal (pytest-django's live server) whose cluster is the simulator; a refused job exits 1
with the reason and leaves nothing."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.tokens import do_create_token
from catalog.models import BatchJob
from gitops.specs import GpuShare
from simulator import Simulator
from simulator.store import JOBS
from tenants.specs import tenant_spec

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def portalctl(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """This checkout's ``portalctl`` (``python -m portalctl.cli``), in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env["PORTALCTL_CONFIG"] = str(tmp_path / "portalctl.json")
    env["PYTHONPATH"] = str(ROOT)

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "portalctl.cli", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )

    return run


JOB = {
    "apiVersion": "portal.ai-factory.dev/v1",
    "kind": "BatchJob",
    "metadata": {"tenant": "alpha", "name": "eval-1"},
    "spec": {
        "image": "ghcr.io/ai-factory/eval:1.0",
        "command": ["lm_eval", "--tasks", "mmlu"],
        "share": "train",
        "gpus": 1,
        "cpu": 2,
        "memory_gib": 8,
    },
}


def test_portalctl_runs_lists_logs_and_cancels_a_job(
    live_server: Any,
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Any],
    portalctl: Any,
    tmp_path: Path,
) -> None:
    merged_change(
        dataclasses.replace(
            tenant_spec(world["alpha"]), shares=(GpuShare("train", "h200", "whole", 2),)
        )
    )
    sim: Simulator = start_fleet()
    for _ in range(3):
        sim.tick()
    _, text = do_create_token(
        acting_user=world["bob"], owner=world["bob"], name="cli", scope="request", expires_in_days=1
    )
    assert portalctl("login", "--url", live_server.url, "--token-stdin", stdin=text).returncode == 0

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**JOB, "spec": {**JOB["spec"], "image": "quay.io/x/y:1"}}))
    refused = portalctl("run", "-f", str(bad))
    assert refused.returncode == 1
    assert "image: Images must come from an allowed registry" in refused.stderr
    assert not BatchJob.objects.exists()

    good = tmp_path / "job.yaml"
    good.write_text(yaml.safe_dump(JOB))
    run = portalctl("run", "-f", str(good))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Job alpha/eval-1 submitted (uid ")
    assert sim.store.get(JOBS, "alpha", "eval-1") is not None

    listed = portalctl("get", "jobs")
    assert listed.returncode == 0, listed.stderr
    assert "eval-1" in listed.stdout and "submitted" in listed.stdout

    for _ in range(2):
        sim.tick()
    logs = portalctl("logs", "eval-1", "--tenant", "alpha")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip(), "the pod's log"

    cancelled = portalctl("cancel", "eval-1", "--tenant", "alpha")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == "Job alpha/eval-1 cancelled.\n"
    assert sim.store.get(JOBS, "alpha", "eval-1") is None
    again = portalctl("cancel", "eval-1", "--tenant", "alpha")
    assert again.returncode == 1
    assert "cancelled already" in again.stderr
