"""/api/v1/tenants/<slug>/jobs/: submit, list, read, read the logs of and cancel a batch job,
against the simulator; bad input is a 400 naming the field and nothing is submitted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from catalog.models import BatchJob
from gitops.specs import GpuShare
from simulator import Simulator
from simulator.store import JOBS
from tenants.specs import tenant_spec

URL = "/api/v1/tenants/alpha/jobs/"
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
    world: dict[str, Any], merged_change: Callable[..., Any], start_fleet: Callable[..., Any]
) -> Simulator:
    spec = dataclasses.replace(
        tenant_spec(world["alpha"]), shares=(GpuShare("train", "h200", "whole", 2),)
    )
    merged_change(spec)
    simulator: Simulator = start_fleet()
    for _ in range(3):
        simulator.tick()
    return simulator


def test_a_job_through_the_api(
    world: dict[str, Any], sim: Simulator, api: Callable[[str], Any], token: Callable[..., str]
) -> None:
    bob = api(token("bob", "request"))
    created = bob.post(URL, JOB, content_type="application/json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["name"], body["kind"], body["submitted_by"]) == ("eval-1", "Job", "bob")
    assert body["state"]["state"] == "submitted"
    assert body["spec"]["command"] == ["lm_eval", "--tasks", "mmlu"]
    assert sim.store.get(JOBS, "alpha", "eval-1")["metadata"]["uid"] == body["uid"]
    listed = bob.get(URL).json()["results"]
    assert [row["name"] for row in listed] == ["eval-1"]
    assert bob.get(f"{URL}eval-1/").json()["uid"] == body["uid"]
    for _ in range(2):
        sim.tick()
    logs = api(token("vic", "read")).get(f"{URL}eval-1/logs/").json()
    assert logs["error"] == "" and len(logs["pods"]) == 1
    # A read-only token cannot cancel, whatever the role.
    assert api(token("bob", "read")).delete(f"{URL}eval-1/").status_code == 403
    cancelled = bob.delete(f"{URL}eval-1/")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"]["state"] == "cancelled"
    assert sim.store.get(JOBS, "alpha", "eval-1") is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": "docker.io/library/python:3"}, "image"),
        ({"gpus": 3}, "gpus"),
        ({"command": ["a\u0000b"]}, "command[0]"),
        ({"priority": "inference-critical"}, "priority"),
        ({"replicas": 2}, "replicas"),
        ({"gpus": "1"}, "gpus"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    world: dict[str, Any],
    sim: Simulator,
    api: Callable[[str], Any],
    token: Callable[..., str],
    changes: dict[str, Any],
    field: str,
) -> None:
    response = api(token("bob", "request")).post(
        URL, {**JOB, **changes}, content_type="application/json"
    )
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert sim.store.get(JOBS, "alpha", "eval-1") is None
    assert not BatchJob.objects.exists()


def test_a_viewer_and_a_platform_admin_get_403(
    world: dict[str, Any], sim: Simulator, api: Callable[[str], Any], token: Callable[..., str]
) -> None:
    for name in ("vic", "pam"):
        response = api(token(name, "admin")).post(URL, JOB, content_type="application/json")
        assert response.status_code == 403, name
    assert not BatchJob.objects.exists()
