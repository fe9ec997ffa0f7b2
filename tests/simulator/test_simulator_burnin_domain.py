"""The burn-in across an NVLink domain as the simulator runs it, over HTTP: an indexed Job's
pods (names, hostnames, completion index, one per node by node affinity and whole-node GPU
requests), its success policy stopping the workers once index 0 succeeded, and the launcher's
all-reduce log, held down by ``nccl-slow`` on any member. The success policy cases are
kubernetes v1.34 ``pkg/controller/job/success_policy_test.go`` ``TestMatchSuccessPolicy``."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from simulator import Simulator
from simulator.cluster import node_affinity_matches
from simulator.config import SimConfig
from simulator.jobs import success_policy_match
from simulator.store import JOBS, PODS, JsonObject

TOKEN = "s3cret"
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = dataclasses.replace(
        SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0, job_seconds=3600
    )
    simulator = Simulator(config, token=TOKEN)
    simulator.cluster.ensure_namespace("burn", time.time())
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


def call(sim: Simulator, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = urllib3.request(
        method,
        f"{sim.url}{path}",
        body=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        timeout=5,
        retries=False,
    )
    text = response.data.decode()
    try:
        return response.status, json.loads(text)
    except json.JSONDecodeError:
        return response.status, text


def _pair(sim: Simulator) -> list[str]:
    """Two idle whole-GPU nodes of one NVLink domain."""
    by_clique: dict[str, list[str]] = {}
    for node in sim.cluster.nodes.values():
        if node.group.mode == "whole" and node.clique and node.busy_gpus() == 0:
            by_clique.setdefault(node.clique, []).append(node.name)
    return next(sorted(names)[:2] for names in by_clique.values() if len(names) >= 2)


def _indexed_job(name: str, hosts: list[str]) -> JsonObject:
    container = {
        "name": "nccl",
        "image": "nccl-tests:mpi",
        "command": ["/bin/sh", "-c", "mpirun ... all_reduce_perf -b 8 -e 8G -f 2 -g 1"],
        "env": [{"name": "BURN_IN_RANKS", "value": str(8 * len(hosts))}],
        "resources": {"limits": {"nvidia.com/gpu": 8}},
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
                        ]
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(hosts),
            "parallelism": len(hosts),
            "backoffLimit": 0,
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "affinity": affinity,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [container],
                }
            },
        },
    }


def _pods(sim: Simulator, job: str) -> dict[int, JsonObject]:
    return {
        int(p["metadata"]["labels"][INDEX]): p
        for p in sim.store.list(PODS, "burn")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
    }


def _launch(sim: Simulator, name: str, hosts: list[str]) -> dict[int, JsonObject]:
    status, body = call(
        sim, "POST", "/apis/batch/v1/namespaces/burn/jobs", _indexed_job(name, hosts)
    )
    assert status == 201, body
    sim.tick()
    return _pods(sim, name)


def test_an_indexed_job_gives_each_pod_its_index_host_and_node(sim: Simulator) -> None:
    hosts = _pair(sim)
    pods = _launch(sim, "domain", hosts)
    assert sorted(pods) == [0, 1]
    for index, pod in pods.items():
        metadata, spec = pod["metadata"], pod["spec"]
        assert metadata["name"].startswith(f"domain-{index}-")
        assert metadata["annotations"][INDEX] == str(index)
        assert spec["hostname"] == f"domain-{index}" and spec["subdomain"] == "domain"
        env = spec["containers"][0]["env"][-1]
        assert env["name"] == "JOB_COMPLETION_INDEX"
        assert env["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{INDEX}']"
    # Each pod wants all of a node's GPUs and only the two hosts: one pod on each.
    assert sorted(p["spec"]["nodeName"] for p in pods.values()) == hosts


def test_a_pod_outside_its_node_affinity_waits(sim: Simulator) -> None:
    hosts = _pair(sim)
    pods = _launch(sim, "one-host", hosts[:1] * 2)  # two pods, one node allowed
    placed = [p for p in pods.values() if p["spec"].get("nodeName")]
    waiting = [p for p in pods.values() if not p["spec"].get("nodeName")]
    assert [p["spec"]["nodeName"] for p in placed] == hosts[:1] and len(waiting) == 1
    assert "didn't match Pod's node affinity/selector" in str(waiting[0]["status"])


def test_the_launcher_succeeding_completes_the_job_and_stops_the_workers(sim: Simulator) -> None:
    hosts = _pair(sim)
    pods = _launch(sim, "domain", hosts)
    sim.cluster.finish_pod("burn", pods[0]["metadata"]["name"], "Succeeded", time.time())
    sim.tick()
    job = sim.store.get(JOBS, "burn", "domain")
    assert job is not None
    met = {c["type"]: c for c in job["status"]["conditions"]}
    assert met["SuccessCriteriaMet"]["reason"] == "SuccessPolicy"
    assert met["Complete"]["message"] == "Matched rules at index 0"
    assert job["status"]["completedIndexes"] == "0"
    assert sorted(_pods(sim, "domain")) == [0]  # the worker is gone, the launcher stays
    status, log = call(
        sim, "GET", f"/api/v1/namespaces/burn/pods/{pods[0]['metadata']['name']}/log"
    )
    assert status == 200
    assert "# Avg bus bandwidth    : 370 " in log
    assert "# nThread 1 nGpus 1 " in log


def test_a_slow_member_holds_the_whole_ring_down(sim: Simulator) -> None:
    hosts = _pair(sim)
    status, _ = call(
        sim, "POST", "/sim/faults", {"kind": "nccl-slow", "node": hosts[1], "fraction": 0.5}
    )
    assert status == 200
    pods = _launch(sim, "slow", hosts)
    for pod in pods.values():
        sim.cluster.finish_pod("burn", pod["metadata"]["name"], "Succeeded", time.time())
    sim.tick()
    _, launcher = call(
        sim, "GET", f"/api/v1/namespaces/burn/pods/{pods[0]['metadata']['name']}/log"
    )
    _, worker = call(sim, "GET", f"/api/v1/namespaces/burn/pods/{pods[1]['metadata']['name']}/log")
    assert "# Avg bus bandwidth    : 185 " in launcher
    assert "Avg bus bandwidth" not in worker  # a worker served ssh only


def _intervals(*pairs: tuple[int, int]) -> set[int]:
    return {i for first, last in pairs for i in range(first, last + 1)}


# (case name, rules, succeeded indexes as orderedIntervals, the matched rule or None); the
# cases with the JobSuccessPolicy gate enabled (GA, always on in v1.34).
CASES: list[tuple[str, list[JsonObject], set[int], int | None]] = [
    ("any rules are nothing", [], _intervals((0, 0)), None),
    (
        "rules.succeededIndexes is invalid format",
        [{"succeededIndexes": "invalid-form"}],
        _intervals((0, 0)),
        None,
    ),
    (
        "rules.succeededIndexes is specified; succeededIndexes matched rules",
        [{"succeededIndexes": "0-2"}],
        _intervals((0, 2), (4, 7)),
        0,
    ),
    (
        "rules.succeededIndexes is specified; succeededIndexes didn't match rules",
        [{"succeededIndexes": "3"}],
        _intervals((0, 2)),
        None,
    ),
    (
        "rules.succeededCount is specified; succeededIndexes matched rules",
        [{"succeededCount": 2}],
        _intervals((0, 2)),
        0,
    ),
    (
        "rules.succeededCount is specified; succeededIndexes didn't match rules",
        [{"succeededCount": 4}],
        _intervals((0, 2)),
        None,
    ),
    (
        "multiple rules; rules.succeededIndexes is specified; succeededIndexes met one of rules",
        [{"succeededIndexes": "9"}, {"succeededIndexes": "4,6"}],
        _intervals((0, 2), (4, 7)),
        1,
    ),
    (
        "multiple rules; rules.succeededIndexes is specified; succeededIndexes met all rules",
        [{"succeededIndexes": "0,1"}, {"succeededIndexes": "5"}],
        _intervals((0, 2), (4, 7)),
        0,
    ),
    (
        "rules.succeededIndexes and rules.succeededCount are specified; succeededIndexes met "
        "all rules",
        [{"succeededIndexes": "3-6", "succeededCount": 2}],
        _intervals((0, 2), (4, 7)),
        0,
    ),
    (
        "rules.succeededIndexes and rules.succeededCount are specified; succeededIndexes "
        "didn't match rules",
        [{"succeededIndexes": "3-6", "succeededCount": 2}],
        _intervals((0, 2), (6, 7)),
        None,
    ),
    (
        "rules.succeededIndexes is specified; succeededIndexes matched rules; rules is proper "
        "subset of succeededIndexes",
        [{"succeededIndexes": "2-4,6-8"}],
        _intervals((1, 5), (6, 9)),
        0,
    ),
    (
        "rules.succeededIndexes is specified; succeededIndexes didn't match rules; rules is an "
        "empty set",
        [{"succeededIndexes": ""}],
        _intervals((1, 3)),
        None,
    ),
    (
        "rules.succeededIndexes is specified; succeededIndexes didn't match rules; rules "
        "overlaps succeededIndexes at first",
        [{"succeededIndexes": "1-3,5-7"}],
        _intervals((2, 4), (6, 8)),
        None,
    ),
    (
        "rules.succeededIndexes and rules.succeededCount are specified; succeededIndexes "
        "matched rules; rules overlaps succeededIndexes at first",
        [{"succeededIndexes": "1-3,5-7", "succeededCount": 4}],
        _intervals((2, 4), (6, 8)),
        0,
    ),
    (
        "rules.succeededIndexes and rules.succeededCount are specified; succeededIndexes "
        "matched rules; the first rules overlaps succeededIndexes at first",
        [{"succeededIndexes": "0-3,6-9", "succeededCount": 7}],
        _intervals((1, 10)),
        0,
    ),
]


@pytest.mark.parametrize(
    ("case", "rules", "succeeded", "matched"), CASES, ids=[c[0] for c in CASES]
)
def test_match_success_policy(
    case: str, rules: list[JsonObject], succeeded: set[int], matched: int | None
) -> None:
    assert success_policy_match({"rules": rules}, succeeded, 10) == matched, case


def _required(*terms: JsonObject) -> JsonObject:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def _in(key: str, operator: str, *values: str) -> JsonObject:
    expression: JsonObject = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"matchExpressions": [expression]}


# kubernetes v1.34 staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/
# nodeaffinity_test.go ``TestPodMatchesNodeSelectorAndAffinityTerms``: its node affinity cases
# (its nodeSelector cases are the scheduler's other filter; Gt/Lt are not modelled).
AFFINITY_CASES: list[tuple[str, JsonObject, dict[str, str], bool]] = [
    (
        "Pod with matchExpressions using In operator that matches the existing node",
        _required(_in("foo", "In", "bar", "value2")),
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with matchExpressions using NotIn operator that matches the existing node",
        _required(_in("mem-type", "NotIn", "DDR", "DDR2")),
        {"mem-type": "DDR3"},
        True,
    ),
    (
        "Pod with matchExpressions using Exists operator that matches the existing node",
        _required(_in("GPU", "Exists")),
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "Pod with affinity that don't match node's labels won't schedule onto the node",
        _required(_in("foo", "In", "value1", "value2")),
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and "
        "won't schedule onto the node",
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and "
        "won't schedule onto the node",
        _required(),
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with empty MatchExpressions is not a valid value will match no objects and won't "
        "schedule onto the node",
        _required({"matchExpressions": []}),
        {"foo": "bar"},
        False,
    ),
    ("Pod with no Affinity will schedule onto a node", {}, {"foo": "bar"}, True),
]


@pytest.mark.parametrize(
    ("case", "pod_spec", "labels", "fits"), AFFINITY_CASES, ids=[c[0] for c in AFFINITY_CASES]
)
def test_pod_matches_node_affinity_terms(
    case: str, pod_spec: JsonObject, labels: dict[str, str], fits: bool
) -> None:
    assert node_affinity_matches(pod_spec, labels) is fits, case
