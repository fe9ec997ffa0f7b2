"""The simulator's PodDisruptionBudgets: the eviction decision and the disruption controller's
status. Cases transcribed from kubernetes/kubernetes pkg/registry/core/pod/storage/
eviction_test.go ``TestEviction`` and ``TestEvictionIngorePDB`` (sic), each named as upstream."""

from __future__ import annotations

from typing import Any

import pytest

from simulator import disruption

SELECT_A = {"matchLabels": {"a": "true"}}


def _pdb(allowed: int, selector: Any = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "foo", "namespace": "default"},
        "spec": {"selector": SELECT_A if selector is None else selector},
        "status": {"disruptionsAllowed": allowed, **status},
    }


def _pod(name: str, phase: str = "Running", ready: bool | None = None, **meta: Any) -> dict:
    conditions = [] if ready is None else [{"type": "Ready", "status": str(ready)}]
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"a": "true"}, **meta},
        "status": {"phase": phase, "conditions": conditions},
    }


# TestEviction: (name, pdb, phase, deleted)
@pytest.mark.parametrize(
    ("case", "pdb", "phase", "deleted"),
    [
        ("matching pdbs with no disruptions allowed, pod running", _pdb(0), "Running", False),
        ("matching pdbs with no disruptions allowed, pod pending", _pdb(0), "Pending", True),
        ("matching pdbs with no disruptions allowed, pod succeeded", _pdb(0), "Succeeded", True),
        ("matching pdbs with no disruptions allowed, pod failed", _pdb(0), "Failed", True),
        ("matching pdbs with disruptions allowed", _pdb(1), "Running", True),
        ("non-matching pdbs", _pdb(0, {"matchLabels": {"b": "true"}}), "Running", True),
    ],
)
def test_eviction(case: str, pdb: dict[str, Any], phase: str, deleted: bool) -> None:
    pod = _pod("t1", phase)
    if deleted:
        disruption.decide(pod, [pdb])
    else:
        with pytest.raises(disruption.Refused) as caught:
            disruption.decide(pod, [pdb])
        assert caught.value.code == 429
        assert caught.value.message == (
            "Cannot evict pod as it would violate the pod's disruption budget."
        )


def test_eviction_ignore_pdb_pod_terminating() -> None:
    """ "matching pdbs with no disruptions allowed, pod terminating": deleted."""
    pod = _pod("t6", deletionTimestamp="2026-01-01T00:00:00Z")
    assert disruption.decide(pod, [_pdb(0)]) == disruption.Decision()


def test_eviction_ignore_pdb_unhealthy_pod_not_ours() -> None:
    """ "... pod running, pod healthy, unhealthy pod not ours": refused."""
    pdb = _pdb(0, currentHealthy=2, desiredHealthy=2)
    with pytest.raises(disruption.Refused) as caught:
        disruption.decide(_pod("t7", ready=True), [pdb])
    assert caught.value.code == 429
    assert "needs 2 healthy pods and has 2 currently" in caught.value.cause


def test_eviction_ignore_pdb_unhealthy_pod_ours() -> None:
    """ "... pod running, pod unhealthy, unhealthy pod ours": deleted (the budget is met
    without it)."""
    pdb = _pdb(0, currentHealthy=2, desiredHealthy=2)
    assert disruption.decide(_pod("t8", ready=False), [pdb]) == disruption.Decision()


def test_more_than_one_budget_is_a_500() -> None:
    other = {**_pdb(1), "metadata": {"name": "bar", "namespace": "default"}}
    with pytest.raises(disruption.Refused) as caught:
        disruption.decide(_pod("t1"), [_pdb(1), other])
    assert caught.value.code == 500


def test_an_empty_selector_matches_nothing() -> None:
    assert disruption.decide(_pod("t1"), [_pdb(0, {})]) == disruption.Decision()


def test_a_status_older_than_the_spec_is_still_being_processed() -> None:
    pdb = _pdb(1, observedGeneration=1)
    pdb["metadata"]["generation"] = 2
    with pytest.raises(disruption.Refused) as caught:
        disruption.decide(_pod("t1"), [pdb])
    assert caught.value.code == 429 and "still being processed" in caught.value.cause


def test_an_allowed_eviction_is_counted_in_the_budget() -> None:
    pdb = _pdb(1)
    assert disruption.decide(_pod("t5"), [pdb]).budget == "foo"
    disruption.record_disruption(pdb, "t5", 0.0)
    assert pdb["status"]["disruptionsAllowed"] == 0 and "t5" in pdb["status"]["disruptedPods"]


@pytest.mark.parametrize(
    ("spec", "ready", "desired", "allowed"),
    [
        ({"minAvailable": 2}, 3, 2, 1),
        ({"minAvailable": 3}, 3, 3, 0),
        ({"minAvailable": "50%"}, 3, 2, 1),  # 1.5 rounded up
        ({"maxUnavailable": 1}, 3, 2, 1),
        ({"maxUnavailable": 1}, 2, 2, 0),  # one of three is not ready: used up
        ({"maxUnavailable": "34%"}, 3, 1, 2),  # 1.02 rounded up: 3 - 2
    ],
)
def test_the_controller_status(spec: dict, ready: int, desired: int, allowed: int) -> None:
    pdb = {
        "metadata": {"name": "foo", "namespace": "default", "generation": 1},
        "spec": {"selector": SELECT_A, **spec},
    }
    pods = [_pod(f"p{i}", ready=i < ready) for i in range(3)]
    status = disruption.pdb_status(pdb, pods, 100.0)
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (desired, allowed)
    assert status["currentHealthy"] == ready and status["observedGeneration"] == 1


def test_a_disrupted_pod_is_not_healthy_until_the_timeout() -> None:
    pdb = {
        "metadata": {"name": "foo", "namespace": "default", "generation": 1},
        "spec": {"selector": SELECT_A, "minAvailable": 1},
        "status": {"disruptedPods": {"p0": "1970-01-01T00:01:40Z"}},  # at 100 s
    }
    pods = [_pod(f"p{i}", ready=True) for i in range(2)]
    assert disruption.pdb_status(pdb, pods, 150.0)["currentHealthy"] == 1
    assert disruption.pdb_status(pdb, pods, 100.0 + 121)["currentHealthy"] == 2
