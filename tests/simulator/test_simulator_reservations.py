"""A dedicated tenant's own nodes in the simulated fleet: the rendered policies refuse any other
tenant's pod that tolerates them, and Kueue and the scheduler put the owner's pods there and
nobody else's."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from kubernetes import client

from gitops.fleet import demo_fleet
from gitops.render.kyverno import tenant_policy
from gitops.render.reservations import RESERVED_KEY
from gitops.render.tree import render_repository
from simulator import Simulator
from simulator.kyverno import evaluate_conditions
from simulator.store import PODS
from tests.gitops.render_samples import reserved_tenant
from tests.simulator.test_simulator_admission import MIXED, endpoint_ready, play
from tests.simulator.test_simulator_kyverno_e2e import _refusal

OWNER = dataclasses.replace(reserved_tenant(), clusters=())
OWN_NODES = ("h200-07", "h200-08")
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(namespace: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "kserve/huggingfaceserver:v0.20.0",
        "securityContext": dict(RESTRICTED),
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "metadata": {
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}
            ],
        },
        "spec": {"containers": [container], "tolerations": tolerations},
    }


def _toleration(value: str) -> dict[str, str]:
    return {"key": RESERVED_KEY, "operator": "Equal", "value": value, "effect": "NoSchedule"}


@pytest.fixture
def fleet(simulator: Simulator, settings: Any, kube: client.ApiClient) -> Simulator:
    """Both tenants on main, and the owner's nodes marked as the portal marks them."""
    core = client.CoreV1Api(kube)
    for name in OWN_NODES:
        node = core.read_node(name)
        taints = [t.to_dict() for t in node.spec.taints or []]
        taints.append({"key": RESERVED_KEY, "value": OWNER.slug, "effect": "NoSchedule"})
        core.patch_node(
            name,
            {"metadata": {"labels": {RESERVED_KEY: OWNER.slug}}, "spec": {"taints": taints}},
        )
    play(simulator, settings, render_repository(demo_fleet(), [MIXED, OWNER]))
    return simulator


def test_a_pod_of_another_tenant_tolerating_the_nodes_is_refused(fleet: Simulator) -> None:
    for tolerations in (
        [_toleration(OWNER.slug)],
        [{"key": RESERVED_KEY, "operator": "Exists"}],
        [{"operator": "Exists"}],
    ):
        failures = _refusal(fleet, _pod(MIXED.slug, tolerations))
        assert failures["tenant-guardrails"]["confine-reserved-tolerations"] == (
            "Only pods of the tenant a node is reserved for may tolerate "
            f"{RESERVED_KEY} (this tenant's pods: never), and no pod may tolerate every taint."
        )


def test_the_owner_may_tolerate_its_own_nodes_only(fleet: Simulator) -> None:
    pod = fleet.cluster.create_pod(
        _pod(OWNER.slug, [_toleration(OWNER.slug)]), "web-1", time.time()
    )
    assert pod["metadata"]["namespace"] == OWNER.slug
    failures = _refusal(fleet, _pod(OWNER.slug, [_toleration("someone")]))
    assert (
        "(this tenant's pods: only vault)"
        in (failures["tenant-guardrails"]["confine-reserved-tolerations"])
    )


def test_the_owner_endpoint_lands_on_its_nodes_and_the_shared_one_elsewhere(
    fleet: Simulator,
) -> None:
    for _ in range(5):
        fleet.tick()
    assert endpoint_ready(fleet, OWNER.slug, "chat")["status"] == "True"
    assert endpoint_ready(fleet, MIXED.slug, "chat")["status"] == "True"
    placed = {
        (pod["metadata"]["namespace"], pod["spec"].get("nodeName", ""))
        for pod in fleet.store.list(PODS)
        if pod["metadata"]["namespace"] in (OWNER.slug, MIXED.slug)
        and "serving.kserve.io/inferenceservice" in pod["metadata"].get("labels", {})
    }
    owner_nodes = {node for namespace, node in placed if namespace == OWNER.slug}
    shared_nodes = {node for namespace, node in placed if namespace == MIXED.slug}
    assert owner_nodes and owner_nodes <= set(OWN_NODES)
    assert shared_nodes and not shared_nodes & set(OWN_NODES)


def test_the_owner_pods_without_gpus_get_the_toleration_and_nobody_else(
    fleet: Simulator,
) -> None:
    toleration = _toleration(OWNER.slug)
    own = fleet.cluster.create_pod(_pod(OWNER.slug, []), "web-1", time.time())
    assert toleration in own["spec"]["tolerations"]
    other = fleet.cluster.create_pod(_pod(MIXED.slug, []), "web-1", time.time())
    assert toleration not in other["spec"].get("tolerations", [])
    # GPU pods are Kueue's: the policy leaves them alone, and Kueue adds the toleration (with
    # the node selector) to those it admits on the tenant's own flavor.
    gpu = _pod(OWNER.slug, [])
    gpu["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    (rule,) = [
        r
        for r in tenant_policy(OWNER, demo_fleet())["spec"]["rules"]
        if r["name"] == "tolerate-own-nodes"
    ]
    context = {"request": {"object": gpu, "operation": "CREATE"}}
    assert evaluate_conditions(rule["preconditions"], context) == (False, "")
    created = fleet.cluster.create_pod(gpu, "web-1", time.time())
    for _ in range(2):
        fleet.tick()
    admitted = fleet.get_object("pods", OWNER.slug, created["metadata"]["name"])
    assert admitted["spec"]["nodeSelector"][RESERVED_KEY] == OWNER.slug
    assert toleration in admitted["spec"]["tolerations"]
    assert admitted["spec"]["nodeName"] in OWN_NODES
