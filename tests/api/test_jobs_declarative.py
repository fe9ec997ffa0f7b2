"""A BatchJob document through /api/v1/apply/: a dry run plans it, applying submits it once
(applied again it is unchanged, with another spec a conflict), bad fields are errors at their
document paths; nothing is submitted but by a created outcome."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from catalog.models import BatchJob
from gitops.specs import GpuShare
from simulator import Simulator
from simulator.store import JOBS
from tenants.specs import tenant_spec

DOCUMENT = {
    "apiVersion": "portal.ai-factory.dev/v1",
    "kind": "BatchJob",
    "metadata": {"tenant": "alpha", "name": "infer-1"},
    "spec": {
        "image": "docker.io/vllm/vllm-openai:v0.11.0",
        "command": ["python", "-m", "vllm.entrypoints.openai.run_batch"],
        "share": "train",
        "gpus": 1,
        "priority": "batch-low",
        "cpu": 2,
        "memory_gib": 8,
    },
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


def _apply(client: Any, document: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    url = "/api/v1/apply/" + ("?dry_run=true" if dry_run else "")
    response = client.post(url, yaml.safe_dump(document), content_type="application/yaml")
    assert response.status_code == 200, response.content
    (result,) = response.json()["results"]
    return dict(result)


def test_a_batch_job_document_runs_once(
    world: dict[str, Any], sim: Simulator, api: Callable[[str], Any], token: Callable[..., str]
) -> None:
    bob = api(token("bob", "request"))
    planned = _apply(bob, DOCUMENT, dry_run=True)
    assert (planned["outcome"], planned["status"]) == ("created", 201)
    assert planned["diff"]["spec.image"]["new"] == "docker.io/vllm/vllm-openai:v0.11.0"
    assert sim.store.get(JOBS, "alpha", "infer-1") is None
    assert not BatchJob.objects.exists()

    applied = _apply(bob, DOCUMENT)
    assert applied["outcome"] == "created"
    job = BatchJob.objects.get(name="infer-1")
    assert sim.store.get(JOBS, "alpha", "infer-1")["metadata"]["uid"] == job.uid

    assert _apply(bob, DOCUMENT)["outcome"] == "unchanged"
    changed = {**DOCUMENT, "spec": {**DOCUMENT["spec"], "gpus": 2}}
    conflict = _apply(bob, changed)
    assert (conflict["outcome"], conflict["status"]) == ("conflict", 409)
    assert "runs once" in conflict["detail"]
    assert BatchJob.objects.count() == 1


def test_bad_fields_are_errors_at_their_paths(
    world: dict[str, Any], sim: Simulator, api: Callable[[str], Any], token: Callable[..., str]
) -> None:
    bob = api(token("bob", "request"))
    bad = {
        **DOCUMENT,
        "metadata": {"tenant": "alpha", "name": "Infer_1"},
        "spec": {**DOCUMENT["spec"], "image": "quay.io/x/y:1", "replicas": 2},
    }
    result = _apply(bob, bad)
    assert result["outcome"] == "error"
    assert set(result["errors"]) == {"metadata.name"}
    result = _apply(bob, {**DOCUMENT, "spec": {**DOCUMENT["spec"], "image": "quay.io/x/y:1"}})
    assert "allowed registry" in result["errors"]["spec.image"][0]
    result = _apply(bob, {**DOCUMENT, "spec": {**DOCUMENT["spec"], "replicas": 2}})
    assert "Unknown field" in result["errors"]["spec.replicas"][0]
    viewer = _apply(api(token("vic", "request")), DOCUMENT)
    assert viewer["status"] == 403
    outsider = _apply(api(token("charlie", "request")), DOCUMENT)
    assert outsider["status"] == 404
    assert sim.store.get(JOBS, "alpha", "infer-1") is None
    assert not BatchJob.objects.exists()
