"""What a node's burn-in meets in the simulator, over HTTP: kube-scheduler's NodeUnschedulable
filter (the upstream cases), the programs' output in a finished pod's log, which stays until
its Job goes, and the ``diag-fail`` and ``nccl-slow`` faults."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from simulator import Simulator
from simulator.config import SimConfig
from simulator.store import JOBS, NODES, PODS, JsonObject

TOKEN = "s3cret"
NODE = "h200-05"
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = dataclasses.replace(
        SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0, job_seconds=0
    )
    simulator = Simulator(config, token=TOKEN)
    simulator.cluster.ensure_namespace("burn", time.time())
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


def call(
    sim: Simulator, method: str, path: str, body: Any = None, kind: str = "application/json"
) -> tuple[int, Any]:
    response = urllib3.request(
        method,
        f"{sim.url}{path}",
        body=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": kind},
        timeout=5,
        retries=False,
    )
    try:
        return response.status, json.loads(response.data)
    except ValueError:
        return response.status, response.data.decode()


def _cordon(sim: Simulator, node: str) -> None:
    patch = {"spec": {"unschedulable": True}}
    status, _ = call(sim, "PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")
    assert status == 200


def _job(name: str, command: list[str], tolerations: list[JsonObject] | None = None) -> JsonObject:
    spec: JsonObject = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cloud-native/dcgm:4.4.1-2-ubuntu22.04",
                "command": command,
                "resources": {"limits": {"nvidia.com/gpu": 8}},
            }
        ],
    }
    # The GPU nodes' nvidia.com/gpu taint is tolerated by every case: the cases differ in
    # the unschedulable taint only.
    spec["tolerations"] = [GPU, *(tolerations or [])]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": spec}},
    }


def _pod(sim: Simulator, job: str) -> JsonObject:
    (pod,) = [
        p
        for p in sim.store.list(PODS, "burn")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
    ]
    return pod


# kubernetes v1.34 pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable_test.go
# ``TestNodeUnschedulable``: its three cases, on a node of the demo fleet.
@pytest.mark.parametrize(
    ("case", "cordoned", "tolerations", "placed"),
    [
        ("Does not schedule pod to unschedulable node", True, None, False),
        ("Schedule pod to normal node", False, None, True),
        ("Schedule pod with toleration to unschedulable node", True, [UNSCHEDULABLE], True),
    ],
)
def test_node_unschedulable(
    sim: Simulator, case: str, cordoned: bool, tolerations: Any, placed: bool
) -> None:
    if cordoned:
        _cordon(sim, NODE)
    status, _ = call(
        sim, "POST", "/apis/batch/v1/namespaces/burn/jobs", _job("t", ["true"], tolerations)
    )
    assert status == 201
    sim.tick()
    pod = _pod(sim, "t")
    assert (pod["spec"].get("nodeName") == NODE) is placed, case
    if not placed:
        message = pod["status"]["conditions"][0]["message"]
        assert "node(s) were unschedulable" in message


def _run(sim: Simulator, name: str, command: list[str]) -> str:
    """Run a Job on the cordoned node to its end; the log of its pod, read after the end."""
    _cordon(sim, NODE)
    job = _job(name, command, [UNSCHEDULABLE])
    status, _ = call(sim, "POST", "/apis/batch/v1/namespaces/burn/jobs", job)
    assert status == 201
    for _ in range(4):
        sim.tick()
    stored = sim.store.get(JOBS, "burn", name)
    assert stored is not None
    assert {c["type"] for c in stored["status"]["conditions"]} >= {"Complete"}
    pod = _pod(sim, name)  # finished, counted, still there
    assert pod["status"]["phase"] == "Succeeded"
    assert "finalizers" not in pod["metadata"]
    assert stored["status"]["succeeded"] == 1
    status, log = call(sim, "GET", f"/api/v1/namespaces/burn/pods/{pod['metadata']['name']}/log")
    assert status == 200
    return str(log)


def _diag(log: str) -> Any:
    return json.loads(log[log.index("{") : log.rindex("}") + 1])


def test_a_diagnostic_writes_dcgmis_json_and_a_fault_fails_its_test(sim: Simulator) -> None:
    command = ["/bin/sh", "-c", "nv-hostengine && exec dcgmi diag -r 3 -j"]
    healthy = _diag(_run(sim, "diag-ok", command))
    categories = healthy["DCGM Diagnostic"]["test_categories"]
    assert [c["category"] for c in categories] == [
        "Deployment",
        "Integration",
        "Hardware",
        "Stress",
    ]
    statuses = {r["status"] for c in categories for t in c["tests"] for r in t["results"]}
    assert statuses == {"Pass"}
    assert len(healthy["entity_groups"][0]["entities"]) == 8

    status, _ = call(
        sim, "POST", "/sim/faults", {"kind": "diag-fail", "node": NODE, "test": "pcie"}
    )
    assert status == 200
    failed = _diag(_run(sim, "diag-bad", command))
    (pcie,) = [
        t
        for c in failed["DCGM Diagnostic"]["test_categories"]
        for t in c["tests"]
        if t["name"] == "pcie"
    ]
    assert pcie["test_summary"] == {"status": "Fail"}
    assert pcie["results"][0]["status"] == "Fail" and pcie["results"][0]["warnings"]
    # The Job goes (background propagation): the collector takes its pod, and the log.
    status, _ = call(
        sim,
        "DELETE",
        "/apis/batch/v1/namespaces/burn/jobs/diag-bad",
        {"propagationPolicy": "Background"},
    )
    assert status == 200
    sim.tick()
    assert not [p for p in sim.store.list(PODS, "burn") if "diag-bad" in p["metadata"]["name"]]


def test_nccl_reports_nominal_bandwidth_and_a_slow_node_a_share(sim: Simulator) -> None:
    command = ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"]
    assert "# Avg bus bandwidth    : 480 " in _run(sim, "nccl-ok", command)
    status, _ = call(
        sim, "POST", "/sim/faults", {"kind": "nccl-slow", "node": NODE, "fraction": 0.25}
    )
    assert status == 200
    assert "# Avg bus bandwidth    : 120 " in _run(sim, "nccl-slow", command)
    call(sim, "DELETE", "/sim/faults")
    assert "# Avg bus bandwidth    : 480 " in _run(sim, "nccl-again", command)


@pytest.mark.parametrize(
    ("fault", "status", "message"),
    [
        ({"kind": "diag-fail", "node": NODE, "test": "nope"}, 400, "test must be one of"),
        ({"kind": "nccl-slow", "node": NODE}, 400, "needs a fraction"),
        ({"kind": "nccl-slow", "node": NODE, "fraction": 0}, 400, "above 0"),
        ({"kind": "nccl-slow", "node": NODE, "fraction": 1.5}, 400, "at most 1"),
        ({"kind": "diag-fail", "node": "no-such-node"}, 404, "not found"),
    ],
)
def test_bad_faults_are_refused_and_change_nothing(
    sim: Simulator, fault: JsonObject, status: int, message: str
) -> None:
    got, body = call(sim, "POST", "/sim/faults", fault)
    assert got == status and message in body["message"]
    assert sim.burn_in_faults.diag_fail == {} and sim.burn_in_faults.nccl_slow == {}
    assert sim.store.get(NODES, "", NODE) is not None
