"""Kueue's waitForPodsReady in the simulator: the configuration read from the manager's
ConfigMap, the ``PodsReady`` condition of a Job's Workload, eviction and requeue past
``timeout`` or ``recoveryTimeout`` (a drained node's replacement pod that cannot be placed),
the backoff, and deactivation past ``backoffLimitCount``.

The unit cases are transcribed from kubernetes-sigs/kueue v0.19.2 (each test names its file
and test); the scenarios follow
test/integration/singlecluster/scheduler/podsready/scheduler_test.go ("Should requeue a
workload which exceeded the timeout to reach PodsReady=True", "Should re-admit a timed out
workload and deactivate a workload exceeded the re-queue count limit")."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from simulator import Simulator
from simulator import pods_ready as pr
from simulator.kueue import Kueue
from simulator.store import CONFIG_MAPS, NODES, WORKLOADS, Store, timestamp
from simulator.workloads import condition
from tests.simulator.kueue_world import workload
from tests.simulator.test_simulator_kueue_jobs import NS, job, job_pods, queues, workload_of

MINUTE = 60.0

# --- configuration --------------------------------------------------------------------------


def test_an_absent_configuration_has_kueues_defaults() -> None:
    # apis/config/v1beta2/defaults.go: on without a key, 30 minutes, recovery = timeout.
    assert pr.from_configuration({}) == pr.WaitForPodsReady(
        timeout=1800, recovery_timeout=1800, backoff_limit_count=None
    )
    given = pr.from_configuration({"waitForPodsReady": {"timeout": "5m"}})
    assert (given.timeout, given.recovery_timeout) == (300, 300)


def test_the_configuration_is_read_as_the_manager_reads_it() -> None:
    config = pr.from_configuration(
        {
            "waitForPodsReady": {
                "timeout": "1h30m",
                "recoveryTimeout": "0s",  # "0s" disables the recovery check
                "blockAdmission": False,
                "requeuingStrategy": {
                    "timestamp": "Eviction",
                    "backoffLimitCount": 2,
                    "backoffBaseSeconds": 10,
                    "backoffMaxSeconds": 100,
                },
            }
        }
    )
    # An explicit 0 is kept (cmp.Or on pointers): no backoff, no cap.
    zero = pr.from_configuration(
        {
            "waitForPodsReady": {
                "requeuingStrategy": {"backoffBaseSeconds": 0, "backoffMaxSeconds": 0}
            }
        }
    )
    assert (zero.backoff_base_seconds, zero.backoff_max_seconds) == (0, 0)
    assert config == pr.WaitForPodsReady(
        timeout=5400,
        recovery_timeout=None,
        backoff_limit_count=2,
        backoff_base_seconds=10,
        backoff_max_seconds=100,
    )


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"enable": True, "timeout": "5m"}, 'unknown field "enable"'),  # v1beta1's switch
        ({"timeout": "-5m"}, "timeout: must be greater than or equal to 0"),
        ({"timeout": "5 minutes"}, "invalid duration"),
        ({"timeout": "5m", "recoveryTimeout": "-1s"}, "recoveryTimeout: must be greater"),
        ({"requeuingStrategy": {"timestamp": "Admission"}}, "Unsupported value"),
        ({"requeuingStrategy": {"backoffLimitCount": -1}}, "backoffLimitCount: must be greater"),
    ],
)
def test_a_configuration_kueue_refuses_is_an_error(document: dict[str, Any], fragment: str) -> None:
    # pkg/config/validation.go validateWaitForPodsReady; pkg/config/config.go decodes strictly.
    with pytest.raises(pr.ConfigurationError) as caught:
        pr.from_configuration({"waitForPodsReady": document})
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("600s", 600), ("1h30m", 5400), ("1.5h", 5400), ("300ms", 0.3), ("2m0s", 120)],
)
def test_durations_are_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert pr.parse_duration(text) == pytest.approx(seconds)


# --- backoff: pkg/util/wait/backoff_test.go ---------------------------------------------------


@pytest.mark.parametrize(
    ("base", "cap", "iteration", "want"),
    [
        (0.001, 1, 0, 0),  # "iteration zero returns zero"
        (0.001, 1, -3, 0),  # "negative iteration returns zero"
        (0.001, 1, 4, 0.008),  # "simple exponential (factor=2)"
        (1, 5, 4, 5),  # "caps at limit"
        (0.001, 1, 1000, 1),  # "very large iteration still returns cap"
    ],
)
def test_backoff_wait_time(base: float, cap: float, iteration: int, want: float) -> None:
    # TestBackoff_WaitTime (jitter 0); TestBackoff_WaitTime_Consecutive: each call starts over.
    assert pr.wait_time(iteration, base, cap) == pytest.approx(want)
    assert [pr.wait_time(i, 0.001, 1) for i in (5, 1)] == pytest.approx([0.016, 0.001])


def test_the_requeue_state_counts_and_keeps_a_later_requeue_time() -> None:
    # pkg/workload/workload_test.go TestSetRequeueState "should increment count but keep later
    # requeue time" through UpdateRequeueState (60 s x 2^(n-1)).
    config = pr.WaitForPodsReady()
    now = 1_700_000_000.0
    wl: dict[str, Any] = {}
    pr.update_requeue_state(wl, config, now)
    assert wl["status"]["requeueState"] == {"count": 1, "requeueAt": timestamp(now + 60)}
    pr.update_requeue_state(wl, config, now)
    assert wl["status"]["requeueState"] == {"count": 2, "requeueAt": timestamp(now + 120)}
    later = timestamp(now + 3000)
    wl["status"]["requeueState"]["requeueAt"] = later
    pr.update_requeue_state(wl, config, now)
    assert wl["status"]["requeueState"] == {"count": 3, "requeueAt": later}


# --- PodsReady: pkg/controller/jobs/job/job_controller_test.go TestPodsReady ------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "ready", "succeeded", "want"),
    [
        (3, 3, None, 0, False),  # "parallelism = completions; no progress"
        (3, 3, 1, 1, False),  # "... not enough progress"
        (3, 3, 3, 0, True),  # "... all ready"
        (3, 3, 2, 1, True),  # "... some ready, some succeeded"
        (3, 3, None, 3, True),  # "... all succeeded"
        (2, 3, 2, 0, True),  # "parallelism < completions; reaching parallelism is enough"
        (3, 2, 2, 0, True),  # "parallelism > completions; reaching completions is enough"
        (3, None, 2, 0, False),  # "parallelism specified only; not enough progress"
        (3, None, 3, 0, True),  # "parallelism specified only; all ready"
    ],
)
def test_a_jobs_pods_are_ready(
    parallelism: int, completions: int | None, ready: int | None, succeeded: int, want: bool
) -> None:
    spec: dict[str, Any] = {"parallelism": parallelism}
    if completions is not None:
        spec["completions"] = completions
    status: dict[str, Any] = {"succeeded": succeeded}
    if ready is not None:
        status["ready"] = ready
    assert pr.job_pods_ready({"spec": spec, "status": status}) is want


# --- the timeouts: workload_controller_test.go TestAdmittedNotReadyWorkload -----------------


def _cond(kind: str, status: str, at: float, reason: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "lastTransitionTime": timestamp(at)}


NOW = 1_700_000_000.0
FIVE = pr.WaitForPodsReady(timeout=5 * MINUTE, recovery_timeout=None)
THREE = pr.WaitForPodsReady(timeout=5 * MINUTE, recovery_timeout=3 * MINUTE)


@pytest.mark.parametrize(
    ("admitted", "ready", "config", "want"),
    [
        # "workload without Admitted condition; not counting"
        (None, None, FIVE, ("", 0)),
        # "workload with Admitted=True, no PodsReady; counting"
        (_cond("Admitted", "True", NOW - MINUTE), None, FIVE, ("WaitForStart", 4 * MINUTE)),
        # "... but no timeout configured; not counting"
        (_cond("Admitted", "True", NOW - MINUTE), None, None, ("", 0)),
        # "workload with Admitted=True, no PodsReady; timeout exceeded"
        (_cond("Admitted", "True", NOW - 7 * MINUTE), None, FIVE, ("WaitForStart", 0)),
        # "with reason WorkloadWaitForPodsReadyStart; ... counting since admitted"
        (
            _cond("Admitted", "True", NOW - MINUTE),
            _cond("PodsReady", "False", NOW, "WaitForStart"),
            FIVE,
            ("WaitForStart", 4 * MINUTE),
        ),
        # "with reason PodsReady; ... counting since admitted.LastTransitionTime"
        (
            _cond("Admitted", "True", NOW - MINUTE),
            _cond("PodsReady", "False", NOW, "PodsReady"),
            FIVE,
            ("WaitForStart", 4 * MINUTE),
        ),
        # "workload with Admitted=True, PodsReady=False, Reason=WorkloadWaitForPodsReadyRecovery"
        (
            _cond("Admitted", "True", NOW - MINUTE),
            _cond("PodsReady", "False", NOW, "WaitForRecovery"),
            THREE,
            ("WaitForRecovery", 3 * MINUTE),
        ),
        # "..., recoveryTimeout not configured"
        (
            _cond("Admitted", "True", NOW - MINUTE),
            _cond("PodsReady", "False", NOW, "WaitForRecovery"),
            FIVE,
            ("", 0),
        ),
        # "workload with Admitted=Unknown; not counting"
        (_cond("Admitted", "Unknown", NOW - MINUTE), None, FIVE, ("", 0)),
        # "workload with Admitted=True, PodsReady=True; not counting"
        (
            _cond("Admitted", "True", NOW - MINUTE),
            _cond("PodsReady", "True", NOW, "Started"),
            FIVE,
            ("", 0),
        ),
    ],
)
def test_admitted_not_ready_workload(
    admitted: dict[str, Any] | None,
    ready: dict[str, Any] | None,
    config: pr.WaitForPodsReady | None,
    want: tuple[str, float],
) -> None:
    assert pr.not_ready(admitted, ready, config, NOW) == want


def test_the_pods_ready_condition_follows_generate_pods_ready_condition() -> None:
    # pkg/controller/jobframework/reconciler.go generatePodsReadyCondition, branch by branch.
    started = {"status": "True", "reason": "Started"}
    recovering = {"status": "False", "reason": "WaitForRecovery"}
    assert pr.pods_ready_condition(started, False, True) == (
        False,
        "WaitForStart",
        pr.NOT_READY_MESSAGE,
    )
    assert pr.pods_ready_condition(None, True, True)[:2] == (True, "Started")
    assert pr.pods_ready_condition(None, True, False)[:2] == (False, "WaitForStart")
    assert pr.pods_ready_condition(started, True, False) == (
        False,
        "WaitForRecovery",
        pr.RECOVERY_MESSAGE,
    )
    assert pr.pods_ready_condition(recovering, True, False)[:2] == (False, "WaitForRecovery")
    assert pr.pods_ready_condition(recovering, True, True)[:2] == (True, "Recovered")
    waiting = {"status": "False", "reason": "WaitForStart"}
    assert pr.pods_ready_condition(waiting, True, False)[:2] == (False, "WaitForStart")


# --- scenarios in the simulator -----------------------------------------------------------------


def configure(sim: Simulator, now: float, **wait_for_pods_ready: Any) -> None:
    """The manager's ConfigMap as the platform applies it (kueue-system/kueue-manager-config)."""
    document = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": wait_for_pods_ready,
    }
    sim.store.apply(
        CONFIG_MAPS,
        {
            "metadata": {"name": pr.CONFIG_MAP, "namespace": pr.NAMESPACE},
            "data": {pr.CONFIG_KEY: yaml.safe_dump(document)},
        },
        now,
    )


def pinned_job(name: str, node: str) -> dict[str, Any]:
    """A Job of two 4-GPU pods that only ``node`` may run (a hostname selector, which Kueue's
    flavor assignment ignores: the flavor has no such label)."""
    obj = job(name, gpus=4, parallelism=2)
    template = obj["spec"]["template"]
    template["metadata"]["annotations"]["sim.ai-factory.io/run-seconds"] = "100000"
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return obj


def cordon(sim: Simulator, node: str) -> None:
    sim.store.mutate(NODES, "", node, lambda o: o["spec"].update(unschedulable=True))


def reserving(sim: Simulator) -> int:
    return int(sim.get_object("clusterqueues", "", "team")["status"]["reservingWorkloads"])


def test_a_job_short_of_ready_pods_past_recovery_is_evicted_requeued_and_readmitted(
    simulator: Simulator,
) -> None:
    sim = simulator
    start = time.time()
    configure(
        sim,
        start,
        timeout="10m",
        recoveryTimeout="2m",
        requeuingStrategy={"backoffLimitCount": 3, "backoffBaseSeconds": 30},
    )
    queues(sim, gpus="8")
    created = sim.create("jobs", pinned_job("train", "h200-05"))
    sim.tick(start)
    sim.tick(start + 1)
    wl = workload_of(sim, created)
    ready = condition(wl, "PodsReady") or {}
    assert (ready.get("status"), ready.get("reason")) == ("True", "Started")
    assert sim.get_object("jobs", NS, "train")["status"]["ready"] == 2
    # The node is drained: one pod evicted, its replacement cannot be placed.
    cordon(sim, "h200-05")
    victim = job_pods(sim, "train")[0]["metadata"]["name"]
    sim.cluster.evict(NS, victim, start + 10)
    sim.tick(start + 10)
    sim.tick(start + 11)
    wl = workload_of(sim, created)
    ready = condition(wl, "PodsReady") or {}
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "WaitForRecovery",
        "At least one pod has failed, waiting for recovery",
    )
    assert any(p["status"]["phase"] == "Pending" for p in job_pods(sim, "train"))
    # Within recoveryTimeout nothing happens; past it Kueue evicts and releases the quota.
    sim.tick(start + 11 + 100)
    assert (condition(workload_of(sim, created), "Evicted") or {}).get("status") != "True"
    sim.tick(start + 11 + 121)
    wl = workload_of(sim, created)
    evicted = condition(wl, "Evicted") or {}
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "True",
        "PodsReadyTimeout",
        f"Exceeded the PodsReady timeout {NS}/{wl['metadata']['name']}",
    )
    assert wl["status"]["schedulingStats"]["evictions"] == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1}
    ]
    requeued = condition(wl, "Requeued") or {}
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
    evicted_at = start + 11 + 121
    assert wl["status"]["requeueState"] == {"count": 1, "requeueAt": timestamp(evicted_at + 30)}
    assert "admission" not in wl["status"]
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "False"
    assert sim.get_object("jobs", NS, "train")["spec"]["suspend"] is True
    assert job_pods(sim, "train") == []
    sim.tick(evicted_at + 1)
    assert reserving(sim) == 0
    # Backing off: not admitted although the quota is free.
    sim.tick(evicted_at + 20)
    assert (condition(workload_of(sim, created), "QuotaReserved") or {}).get("status") == "False"
    # The backoff is over: requeued, admitted again.
    sim.tick(evicted_at + 31)
    wl = workload_of(sim, created)
    requeued = condition(wl, "Requeued") or {}
    assert (requeued["status"], requeued["reason"], requeued["message"]) == (
        "True",
        "BackoffFinished",
        "The workload backoff was finished",
    )
    assert wl["status"]["requeueState"] == {"count": 1}
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    assert sim.get_object("jobs", NS, "train")["spec"]["suspend"] is False


def test_a_job_that_never_gets_ready_is_evicted_then_deactivated_at_the_limit(
    simulator: Simulator,
) -> None:
    sim = simulator
    start = time.time()
    configure(
        sim,
        start,
        timeout="5m",
        requeuingStrategy={"backoffLimitCount": 1, "backoffBaseSeconds": 10},
    )
    queues(sim, gpus="8")
    created = sim.create("jobs", pinned_job("stuck", "no-such-node"))
    sim.tick(start)
    wl = workload_of(sim, created)
    assert (condition(wl, "Admitted") or {}).get("status") == "True"
    ready = condition(wl, "PodsReady") or {}
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "WaitForStart",
        "Not all pods are ready or succeeded",
    )
    # First timeout, counted from the admission: evicted and requeued (count 1 <= limit 1).
    sim.tick(start + 301)
    wl = workload_of(sim, created)
    assert (condition(wl, "Evicted") or {}).get("reason") == "PodsReadyTimeout"
    assert wl["status"]["schedulingStats"]["evictions"][0]["underlyingCause"] == "WaitForStart"
    assert wl["status"]["requeueState"]["count"] == 1
    # Readmitted after its 10 s backoff; the second timeout exceeds the limit: deactivated.
    sim.tick(start + 312)
    readmitted = start + 312
    assert (condition(workload_of(sim, created), "Admitted") or {}).get("status") == "True"
    sim.tick(readmitted + 301)
    sim.tick(readmitted + 302)
    wl = workload_of(sim, created)
    assert wl["spec"]["active"] is False
    evicted = condition(wl, "Evicted") or {}
    assert (evicted["reason"], evicted["message"]) == (
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
    )
    assert condition(wl, "DeactivationTarget") is None
    assert "requeueState" not in wl["status"]
    assert {
        "reason": "Deactivated",
        "underlyingCause": "RequeuingLimitExceeded",
        "count": 1,
    } in wl["status"]["schedulingStats"]["evictions"]
    assert sim.get_object("jobs", NS, "stuck")["spec"]["suspend"] is True
    sim.tick(readmitted + 303)
    assert reserving(sim) == 0
    # Reactivated, it is admitted again and counts its requeues from the start.
    key = (NS, wl["metadata"]["name"])
    sim.store.mutate(WORKLOADS, *key, lambda o: o["spec"].update(active=True))
    sim.tick(readmitted + 304)
    sim.tick(readmitted + 305)
    wl = workload_of(sim, created)
    assert (condition(wl, "Requeued") or {}).get("reason") == "Reactivated"
    assert (condition(wl, "Admitted") or {}).get("status") == "True"
    sim.tick(readmitted + 305 + 301)
    wl = workload_of(sim, created)
    assert (condition(wl, "Evicted") or {}).get("reason") == "PodsReadyTimeout"
    assert wl["status"]["requeueState"]["count"] == 1


def test_a_refused_configuration_keeps_the_last_one(simulator: Simulator) -> None:
    sim = simulator
    now = time.time()
    configure(sim, now, timeout="5m")
    assert sim.cluster.kueue.wait_for_pods_ready.timeout == 300
    configure(sim, now, enable=True, timeout="1m")  # v1beta1's switch: refused
    assert sim.cluster.kueue.wait_for_pods_ready.timeout == 300
    sim.store.delete(CONFIG_MAPS, pr.NAMESPACE, pr.CONFIG_MAP)
    assert sim.cluster.kueue.wait_for_pods_ready == pr.DEFAULT


def test_workloads_of_other_integrations_are_not_timed_out(simulator: Simulator) -> None:
    # Only the batch/v1 Job's PodsReady is modelled: a Workload of another owner is left alone.
    sim = simulator
    start = time.time()
    configure(sim, start, timeout="1m")
    queues(sim)
    workload(sim.store, "plain", NS, "gpu", {"nvidia.com/gpu": "1"}, created=start)
    sim.tick(start)
    sim.tick(start + 600)
    wl = sim.store.get(WORKLOADS, NS, "plain") or {}
    assert (condition(wl, "QuotaReserved") or {}).get("status") == "True"
    assert condition(wl, "Evicted") is None


# --- the workload controller: workload_controller_requeue_test.go TestReconcileRequeue -------


def _controller(now: float, **wait_for_pods_ready: Any) -> Kueue:
    store = Store()
    store.apply(
        CONFIG_MAPS,
        {
            "metadata": {"name": pr.CONFIG_MAP, "namespace": pr.NAMESPACE},
            "data": {pr.CONFIG_KEY: yaml.safe_dump({"waitForPodsReady": wait_for_pods_ready})},
        },
        now,
    )
    return Kueue(store)


def _job_workload(kueue: Kueue, now: float, status: dict[str, Any]) -> dict[str, Any]:
    """``MakeWorkload("wl", "ns")`` owned by a Job, with ``status``."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "u", "controller": True}
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ns", "ownerReferences": [owner]},
        "spec": {"active": True, "queueName": "q", "podSets": []},
    }
    kueue.store.apply(WORKLOADS, obj, now)
    kueue.store.mutate(WORKLOADS, "ns", "wl", lambda o: o.update(status=status))
    return kueue.store.get(WORKLOADS, "ns", "wl") or {}


def _admitted_five_minutes_ago(now: float) -> list[dict[str, Any]]:
    return [
        _cond("QuotaReserved", "True", now, "QuotaReserved"),
        _cond("Admitted", "True", now - 5 * MINUTE, "ByTest"),
    ]


def _evictions(wl: dict[str, Any]) -> list[dict[str, Any]]:
    return list(wl["status"]["schedulingStats"]["evictions"])


def test_reconcile_requeue_increments_the_requeue_count() -> None:
    # "increment re-queue count": timeout 3 s, limit 100, base 10 s: 10 s x 2^(4-1) = 80 s.
    now = float(int(time.time()))
    kueue = _controller(
        now,
        timeout="3s",
        requeuingStrategy={"backoffLimitCount": 100, "backoffBaseSeconds": 10},
    )
    _job_workload(
        kueue,
        now,
        {
            "admission": {"clusterQueue": "q1", "podSetAssignments": []},
            "conditions": _admitted_five_minutes_ago(now),
            "requeueState": {"count": 3},
            "schedulingStats": {
                "evictions": [
                    {
                        "reason": "PodsReadyTimeout",
                        "underlyingCause": "WaitForRecovery",
                        "count": 1,
                    },
                    {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1},
                ]
            },
        },
    )
    kueue.reconcile_pods_ready(now)
    wl = kueue.store.get(WORKLOADS, "ns", "wl") or {}
    evicted = condition(wl, "Evicted") or {}
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "True",
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout ns/wl",
    )
    assert wl["status"]["requeueState"] == {"count": 4, "requeueAt": timestamp(now + 80)}
    assert _evictions(wl) == [  # merged by reason and cause
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1},
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 2},
    ]


def test_reconcile_requeue_limits_the_wait_to_backoff_max_seconds() -> None:
    # "wait time should be limited to backoffMaxSeconds": 10 s x 2^(11-1) > 7200 s.
    now = float(int(time.time()))
    kueue = _controller(
        now,
        timeout="3s",
        requeuingStrategy={
            "backoffLimitCount": 100,
            "backoffBaseSeconds": 10,
            "backoffMaxSeconds": 7200,
        },
    )
    _job_workload(
        kueue,
        now,
        {
            "admission": {"clusterQueue": "q1", "podSetAssignments": []},
            "conditions": _admitted_five_minutes_ago(now),
            "requeueState": {"count": 10, "requeueAt": timestamp(now - 1)},
        },
    )
    kueue.reconcile_pods_ready(now)
    wl = kueue.store.get(WORKLOADS, "ns", "wl") or {}
    assert wl["status"]["requeueState"] == {"count": 11, "requeueAt": timestamp(now + 7200)}
    assert _evictions(wl) == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}
    ]


def test_reconcile_requeue_limits_recovery_to_recovery_timeout() -> None:
    # "recovery time should be limited to recoveryTimeout": PodsReady False WaitForRecovery
    # for 3 minutes against a 3 s recoveryTimeout (the 5 minute timeout does not apply).
    now = float(int(time.time()))
    kueue = _controller(
        now,
        timeout="5m",
        recoveryTimeout="3s",
        requeuingStrategy={"backoffLimitCount": 100, "backoffBaseSeconds": 10},
    )
    recovering = _cond("PodsReady", "False", now - 3 * MINUTE, "WaitForRecovery")
    _job_workload(
        kueue,
        now,
        {
            "admission": {"clusterQueue": "q1", "podSetAssignments": []},
            "conditions": [*_admitted_five_minutes_ago(now), recovering],
        },
    )
    kueue.reconcile_pods_ready(now)
    wl = kueue.store.get(WORKLOADS, "ns", "wl") or {}
    assert (condition(wl, "Evicted") or {}).get("reason") == "PodsReadyTimeout"
    assert wl["status"]["requeueState"]["count"] == 1
    assert _evictions(wl) == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1}
    ]


@pytest.mark.parametrize(
    ("requeued", "state", "want"),
    [
        # "should keep the WorkloadRequeued condition until the WaitForPodsReady backoff expires"
        (
            _cond("Requeued", "False", NOW, "PodsReadyTimeout"),
            {"count": 1, "requeueAt": timestamp(NOW + 60)},
            ("False", "PodsReadyTimeout"),
        ),
        # "should set the WorkloadRequeued condition when the WaitForPodsReady backoff expires"
        (_cond("Requeued", "False", NOW, "PodsReadyTimeout"), None, ("True", "BackoffFinished")),
        # "should set the WorkloadRequeued condition to true on re-activated"
        (_cond("Requeued", "False", NOW, "Deactivated"), None, ("True", "Reactivated")),
    ],
)
def test_reconcile_requeue_ends_the_backoff(
    requeued: dict[str, Any], state: dict[str, Any] | None, want: tuple[str, str]
) -> None:
    kueue = _controller(NOW)
    status: dict[str, Any] = {"conditions": [requeued]}
    if state is not None:
        status["requeueState"] = state
    _job_workload(kueue, NOW, status)
    kueue.reconcile_workloads(NOW)
    wl = kueue.store.get(WORKLOADS, "ns", "wl") or {}
    found = condition(wl, "Requeued") or {}
    assert (found["status"], found["reason"]) == want
