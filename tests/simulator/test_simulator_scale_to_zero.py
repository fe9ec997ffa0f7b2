"""KServe scale to zero and vCluster sleep in the simulator: a real bare repository played by
the simulator's Flux, read back through the official Kubernetes client over HTTP."""

from __future__ import annotations

import dataclasses
from typing import Any

import requests
from kubernetes import client

from gitops.fleet import demo_fleet
from gitops.render.tree import render_repository
from gitops.specs import TenantSpec
from simulator import Simulator, kserve
from tests.simulator.test_simulator import (
    ALPHA,
    HELM,
    KSERVE,
    commit,
    condition,
    core,
    custom,
    git_secret,
    repository,
)


def _with(endpoint: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None) -> Any:
    return dataclasses.replace(
        ALPHA,
        endpoints=(dataclasses.replace(ALPHA.endpoints[0], **(endpoint or {})),),
        clusters=(dataclasses.replace(ALPHA.clusters[0], **(cluster or {})),),
    )


def _play(sim: Simulator, settings: Any, tenant: TenantSpec, parent: str | None) -> str:
    repo = repository(settings)
    sha = commit(repo, render_repository(demo_fleet(), [tenant]), parent)
    sim.tick()
    sim.tick()
    return sha


def _predictors(kube: client.ApiClient) -> list[client.V1Pod]:
    return (
        core(kube)
        .list_namespaced_pod("alpha", label_selector="serving.kserve.io/inferenceservice=chat")
        .items
    )


def _isvc(kube: client.ApiClient) -> dict[str, Any]:
    found: dict[str, Any] = custom(kube).get_namespaced_custom_object(
        *KSERVE[:2], "alpha", KSERVE[2], "chat"
    )
    return found


def test_an_endpoint_sleeps_with_no_pod_and_wakes_when_raised(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    awake = _play(simulator, settings, _with(), None)
    assert [p.status.phase for p in _predictors(kube)] == ["Running"]
    # The ReplicaSet is named from the predictor's spec (what seed_demo's history names).
    replica_set, _ = kserve.predictor_replica_set("chat", _isvc(kube)["spec"]["predictor"])
    assert [o.name for o in _predictors(kube)[0].metadata.owner_references] == [replica_set]

    asleep = _play(simulator, settings, _with({"asleep": True}), awake)
    assert _predictors(kube) == []
    # KServe's status as for a Deployment of 0 replicas: Available, so Ready.
    isvc = _isvc(kube)
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    assert condition(isvc, "Ready")["status"] == "True"
    assert condition(isvc, "PredictorReady")["status"] == "True"

    _play(simulator, settings, _with({"asleep": False}), asleep)
    pods = _predictors(kube)
    assert [p.status.phase for p in pods] == ["Running"]
    assert condition(_isvc(kube), "Ready")["status"] == "True"
    # Woken, the same spec: the same ReplicaSet, so the ledger keeps one workload.
    assert [o.name for o in pods[0].metadata.owner_references] == [replica_set]


def test_a_keda_endpoint_at_min_zero_runs_no_pod_while_idle(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    _play(simulator, settings, _with({"min_replicas": 0, "max_replicas": 2}), None)
    isvc = _isvc(kube)
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    assert _predictors(kube) == []
    assert condition(isvc, "Ready")["status"] == "True"


def test_a_cluster_sleeps_without_its_control_plane_and_wakes(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    git_secret(simulator)
    awake = _play(simulator, settings, _with(), None)
    control_plane = core(kube).read_namespaced_pod("dev-0", "alpha")
    assert control_plane.status.phase == "Running"
    virtual = f"{simulator.url}/vclusters/alpha/dev/api"
    assert requests.get(virtual, timeout=5).status_code != 503

    asleep = _play(simulator, settings, _with(cluster={"asleep": True}), awake)
    names = [p.metadata.name for p in core(kube).list_namespaced_pod("alpha").items]
    assert "dev-0" not in names
    release = custom(kube).get_namespaced_custom_object(
        *HELM[:2], "flux-system", HELM[2], "alpha-dev"
    )
    # A StatefulSet of 0 replicas is ready: the upgrade succeeds.
    assert condition(release, "Ready")["status"] == "True"
    assert condition(release, "Released")["reason"] == "UpgradeSucceeded"
    assert requests.get(virtual, timeout=5).status_code == 503

    _play(simulator, settings, _with(cluster={"asleep": False}), asleep)
    assert core(kube).read_namespaced_pod("dev-0", "alpha").status.phase == "Running"
    assert requests.get(virtual, timeout=5).status_code != 503
