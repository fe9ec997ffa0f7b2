"""The simulated Multus and SR-IOV device plugin: a pod's fabric attachment must exist in its
namespace, and the SR-IOV resource it asks for must be left on the node.

Cases transcribed from multus-cni v4.3.0 ``pkg/k8sclient/k8sclient_test.go``: "retrieves
delegates from kubernetes using simple format annotation", "... using JSON format
annotation", "fails when the network does not exist", "fails when the JSON format annotation
is invalid", "Errors when namespace isolation is violated".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.fleet import parse_fleet
from gitops.render.jobs import render_job
from gitops.render.tree import render_repository
from gitops.specs import BatchJobSpec, TenantSpec
from simulator import Simulator, pods_ready
from simulator.admission import Rejected
from simulator.cluster import Cluster
from simulator.config import SimConfig, load_config
from simulator.multus import selected_networks
from simulator.store import CONFIG_MAPS, EVENTS, NADS, NODES, PODS, POLICIES, Store
from tests.gitops.render_samples import dedicated_tenant
from tests.gitops.test_render_fabric import IB_FABRIC, fleet_data
from tests.simulator.kueue_world import admit_pod
from tests.simulator.test_conformance_kueue import (
    ASSIGN_FLAVORS,
    PENDING,
    cluster_queue,
    group,
    quota,
    world,
)
from tests.simulator.test_conformance_kueue import pod as kueue_pod
from tests.simulator.test_simulator import commit, git_secret, repository
from tests.simulator.test_simulator_admission import play

RDMA = "nvidia.com/rdma_ib0"


@pytest.fixture
def cluster() -> Cluster:
    demo = SimConfig.demo()
    groups = tuple(
        dataclasses.replace(g, sriov_resources=((RDMA, 2),)) if g.pool == "h200" else g
        for g in demo.node_groups
    )
    return Cluster(dataclasses.replace(demo, node_groups=groups, seed_workloads=()), Store(), 0.0)


def nad(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": RDMA},
        },
        "spec": {"config": "{}"},
    }


def place(
    cluster: Cluster, name: str, networks: str | None, rdma: int = 1, namespace: str = "bravo"
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace}
    if networks is not None:
        metadata["annotations"] = {"k8s.v1.cni.cncf.io/networks": networks}
    limits = {"nvidia.com/gpu": "1", **({RDMA: str(rdma)} if rdma else {})}
    pod = {
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }
    return cluster.create_pod(pod, name, 1.0, name=name, admission=False)


def state(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["status"]["containerStatuses"][0]["state"])


def warnings(cluster: Cluster, namespace: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in cluster.store.list(EVENTS, namespace)]


def test_simple_and_json_annotations_select_networks() -> None:
    assert selected_networks("net1,net2", "test") == [("test", "net1"), ("test", "net2")]
    assert selected_networks(" other/net1@ib1 ", "test") == [("other", "net1")]
    assert selected_networks(
        '[{"name": "net1"}, {"name": "net2", "namespace": "other"}]', "test"
    ) == [("test", "net1"), ("other", "net2")]
    bad = selected_networks("[adsfasdfasdfasf]", "test")
    assert isinstance(bad, str)
    assert bad.startswith("failed to parse pod Network Attachment Selection Annotation JSON")


def test_a_pod_whose_attachment_exists_starts(cluster: Cluster) -> None:
    cluster.store.apply(NADS, nad("bravo", "fabric-h200"), 0.0)
    pod = place(cluster, "trainer", "fabric-h200")
    assert pod["spec"]["nodeName"].startswith("h200-")
    assert pod["status"]["phase"] == "Running"
    assert warnings(cluster, "bravo") == []


def test_a_missing_attachment_keeps_the_pod_creating_until_it_exists(cluster: Cluster) -> None:
    pod = place(cluster, "trainer", "fabric-h200")
    # Scheduled, but no sandbox: Multus found no attachment.
    assert pod["spec"]["nodeName"].startswith("h200-")
    assert pod["status"]["phase"] == "Pending"
    assert state(pod) == {"waiting": {"reason": "ContainerCreating"}}
    assert "podIP" not in pod["status"]
    assert warnings(cluster, "bravo") == [
        (
            "NoNetworkFound",
            "cannot find a network-attachment-definition (fabric-h200) in namespace (bravo): "
            'network-attachment-definitions.k8s.cni.cncf.io "fabric-h200" not found',
        )
    ]
    cluster.tick(2.0)
    assert cluster.store.get(PODS, "bravo", "trainer")["status"]["phase"] == "Pending"
    # The kubelet retries the sandbox: once the attachment is there, the pod runs.
    cluster.store.apply(NADS, nad("bravo", "fabric-h200"), 3.0)
    cluster.tick(4.0)
    running = cluster.store.get(PODS, "bravo", "trainer")
    assert running["status"]["phase"] == "Running"
    assert running["status"]["podIP"]


def test_another_namespaces_attachment_is_refused(cluster: Cluster) -> None:
    # Another tenant's attachment, named across namespaces: Multus's namespace isolation.
    cluster.store.apply(NADS, nad("delta", "fabric-h200"), 0.0)
    pod = place(cluster, "intruder", "delta/fabric-h200")
    assert pod["status"]["phase"] == "Pending"
    assert warnings(cluster, "bravo") == [
        (
            "FailedCreatePodSandBox",
            "GetNetworkDelegates: namespace isolation enabled, annotation violates permission, "
            "pod is in namespace bravo but refers to target namespace delta",
        )
    ]


def test_the_sriov_resource_must_be_left_on_the_node(cluster: Cluster) -> None:
    cluster.store.apply(NADS, nad("bravo", "fabric-h200"), 0.0)
    nodes = sorted(n for n in cluster.nodes if n.startswith("h200-0"))
    first = place(cluster, "a", "fabric-h200", rdma=2)
    assert first["spec"]["nodeName"] in nodes
    # Nodes without the resource (every other pool) never take a pod asking for it.
    elsewhere = place(cluster, "mig", "fabric-h200", rdma=1)
    assert elsewhere["spec"]["nodeName"] in nodes
    assert elsewhere["spec"]["nodeName"] != first["spec"]["nodeName"]
    # Three VFs on a node that has two: nowhere.
    too_many = place(cluster, "big", "fabric-h200", rdma=3)
    assert not too_many["spec"].get("nodeName")
    message = too_many["status"]["conditions"][0]["message"]
    assert f"Insufficient {RDMA}" in message


@pytest.mark.parametrize(
    ("prefixes", "expected"),
    [
        ((), PENDING + "resource networking.example.com/vpc1 unavailable in ClusterQueue"),
        (("dummyPrefix", "networking.example.com/"), {"cpu": "default"}),
    ],
)
def test_kueue_drops_the_excluded_resources(
    prefixes: tuple[str, ...], expected: dict[str, str] | str
) -> None:
    """kueue v0.19.2 pkg/workload/workload_test.go ``TestNewInfo`` "filterResources": with
    ``excludeResourcePrefixes`` a request of an uncovered resource (an SR-IOV VF here) is
    left out of the Workload instead of making it inadmissible."""
    store = world(
        ASSIGN_FLAVORS,
        [cluster_queue("test-clusterqueue", group(quota("default", cpu="4")))],
        {("default", "main"): "test-clusterqueue"},
    )
    config = {"resources": {"excludeResourcePrefixes": list(prefixes)}} if prefixes else {}
    store.apply(
        CONFIG_MAPS,
        {
            "metadata": {"name": pods_ready.CONFIG_MAP, "namespace": pods_ready.NAMESPACE},
            "data": {pods_ready.CONFIG_KEY: yaml.safe_dump(config)},
        },
        0,
    )
    found = admit_pod(store, kueue_pod({"cpu": "1", "networking.example.com/vpc1": "1"}))
    assert found == expected


@pytest.fixture
def fabric_simulator(settings: Any) -> Iterator[Simulator]:
    """The demo fleet with two VFs per h200 node, playing Flux on this test's repository."""
    demo = SimConfig.demo()
    groups = tuple(
        dataclasses.replace(g, sriov_resources=((RDMA, 2),)) if g.pool == "h200" else g
        for g in demo.node_groups
    )
    config = dataclasses.replace(
        demo, node_groups=groups, flux_delay=0, ready_delay=0, recreate_delay=0
    )
    sim = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    sim.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield sim
    finally:
        sim.stop()


def test_the_rendered_attachment_reaches_the_cluster_and_a_job_pod_attaches(
    fabric_simulator: Simulator, settings: Any
) -> None:
    fleet = parse_fleet(fleet_data(IB_FABRIC))
    git_secret(fabric_simulator, "bravo")
    commit(repository(settings), render_repository(fleet, [dedicated_tenant()]), None)
    fabric_simulator.tick()
    applied = fabric_simulator.store.get(NADS, "bravo", "fabric-h200")
    assert applied is not None
    assert applied["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/resourceName": RDMA}
    # The pod of the tenant's rendered job, as its Job controller would create it.
    job = BatchJobSpec(name="tune", image="ghcr.io/ai-factory/trainer:1", share="serving")
    template = render_job(job, dedicated_tenant(), fleet)["spec"]["template"]
    pod = {
        "metadata": {"namespace": "bravo", "annotations": template["metadata"]["annotations"]},
        "spec": template["spec"],
    }
    placed = fabric_simulator.cluster.create_pod(pod, "tune", 1.0, name="tune-0", admission=False)
    assert placed["spec"]["nodeName"].startswith("h200-")
    assert placed["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("networks", "refused"),
    [
        ("fabric-h200", False),
        ("bravo/fabric-h200", True),
        ("fabric-h200,default/net", True),
        ('[{"name": "fabric-h200", "namespace": "bravo"}]', True),
        ('[{"name": "fabric-h200"}]', False),
    ],
)
def test_the_tenant_policy_refuses_another_namespaces_attachment(
    fabric_simulator: Simulator, settings: Any, networks: str, refused: bool
) -> None:
    """A shared tenant's pod naming the dedicated tenant's attachment is refused at admission,
    with the rule's reason (gitops.render.fabric.own_namespace_rule), before Multus sees it."""
    fleet = parse_fleet(fleet_data(IB_FABRIC))
    shared = TenantSpec(slug="alpha")
    play(fabric_simulator, settings, render_repository(fleet, [dedicated_tenant(), shared]))
    assert fabric_simulator.store.list(POLICIES, "alpha")
    container = {
        "name": "main",
        "image": "ghcr.io/ai-factory/trainer:1",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    pod = {
        "metadata": {
            "namespace": "alpha",
            "annotations": {"k8s.v1.cni.cncf.io/networks": networks},
        },
        "spec": {"containers": [container]},
    }
    if not refused:
        assert fabric_simulator.cluster.create_pod(pod, "web", time.time())["metadata"]["name"]
        return
    with pytest.raises(Rejected) as caught:
        fabric_simulator.cluster.create_pod(pod, "web", time.time())
    message = " ".join(str(caught.value).split())  # Kyverno's YAML wraps long lines
    assert "confine-network-attachments" in message
    assert "may name only network attachments of the pod's own namespace" in message


def test_a_fleet_file_gives_node_groups_their_vfs(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "node_groups:\n"
        "  - pool: ib\n"
        "    nodes: 1\n"
        "    labels: {ai-factory.io/pool: ib}\n"
        f"    sriov_resources: {{{RDMA}: 8}}\n"
    )
    node = Simulator(load_config(path)).store.list(NODES)[0]
    assert node["status"]["allocatable"][RDMA] == "8"
    assert node["status"]["capacity"][RDMA] == "8"
