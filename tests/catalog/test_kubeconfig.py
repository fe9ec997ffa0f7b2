"""Downloading a tenant cluster's kubeconfig: read from the fleet simulator over HTTP once the
vCluster release is ready, refused with a reason when there is none to give."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from catalog.kubeconfig import KubeconfigUnavailable, kubeconfig_for
from catalog.models import Resource
from catalog.specs import to_json
from fleet.simulator import Simulator
from fleet.simulator.config import SimConfig
from gitops.models import ChangeRequest
from gitops.specs import GpuShare, TenantClusterSpec, TenantSpec

SHARE = GpuShare(name="infer", flavor="h200", kind="whole", count=2)
CLUSTER = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2)


@pytest.fixture
def sim(settings: Any) -> Iterator[Simulator]:
    """The demo fleet with no delays, stepped by the test, and the portal pointed at it."""
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    settings.FLEET_API_URL = simulator.start("127.0.0.1", 0, tick_seconds=None)
    settings.FLEET_API_TOKEN = ""
    settings.FLEET_KUBECONFIG = ""
    settings.FLEET_IN_CLUSTER = False
    settings.FLEET_API_TIMEOUT = 5
    try:
        yield simulator
    finally:
        simulator.stop()


def cluster(world: dict[str, Any], state: str = Resource.State.ACTIVE) -> Resource:
    return Resource.objects.create(
        tenant=world["alpha"], kind="cluster", name="dev", state=state, spec=to_json(CLUSTER)
    )


@pytest.mark.django_db
def test_it_returns_the_kubeconfig_of_an_active_cluster(
    sim: Simulator, world: dict[str, Any], merged_change: Callable[..., ChangeRequest]
) -> None:
    merged_change(TenantSpec(slug="alpha", shares=(SHARE,), clusters=(CLUSTER,)))
    sim.tick()
    kubeconfig = yaml.safe_load(kubeconfig_for(cluster(world)))
    assert kubeconfig["current-context"] == "dev"
    assert (
        kubeconfig["clusters"][0]["cluster"]["server"]
        == "https://dev.alpha.clusters.ai-factory.example.com"
    )  # through the gateway
    assert kubeconfig["users"][0]["user"]["client-key-data"]


@pytest.mark.django_db
def test_it_refuses_a_cluster_that_is_not_created_yet(world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="does not exist yet"):
        kubeconfig_for(cluster(world, Resource.State.PENDING))


@pytest.mark.django_db
def test_it_refuses_a_decommissioned_cluster(world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="is decommissioned"):
        kubeconfig_for(cluster(world, Resource.State.DECOMMISSIONED))


@pytest.mark.django_db
def test_it_refuses_a_resource_that_is_not_a_cluster(world: dict[str, Any]) -> None:
    share = Resource.objects.create(
        tenant=world["alpha"], kind="gpu-share", name="infer", state="active", spec=to_json(SHARE)
    )
    with pytest.raises(KubeconfigUnavailable, match="only tenant clusters have one"):
        kubeconfig_for(share)


@pytest.mark.django_db
def test_it_refuses_while_the_secret_is_missing(sim: Simulator, world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="not there yet") as missing:
        kubeconfig_for(cluster(world))
    assert "alpha/dev-kubeconfig" in str(missing.value)


@pytest.mark.django_db
def test_it_refuses_when_the_api_does_not_answer(settings: Any, world: dict[str, Any]) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings.FLEET_API_URL = f"http://127.0.0.1:{port}"
    settings.FLEET_KUBECONFIG = ""
    settings.FLEET_IN_CLUSTER = False
    settings.FLEET_API_TIMEOUT = 1
    with pytest.raises(KubeconfigUnavailable, match="cannot be read right now"):
        kubeconfig_for(cluster(world))
