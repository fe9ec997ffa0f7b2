"""A member's kubeconfig for a tenant cluster: the cluster's address and CA, read from the
simulator over HTTP once the vCluster release is ready, and a kubelogin user, never the admin
credential; refused with a reason when there is none to give this person."""

from __future__ import annotations

import base64
import dataclasses
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog.kubeconfig import KubeconfigUnavailable, kubeconfig_for
from catalog.models import Resource
from catalog.specs import to_json
from gitops.models import ChangeRequest
from gitops.specs import GpuShare, TenantClusterSpec
from simulator import Simulator
from simulator.config import SimConfig
from tenants.specs import tenant_spec
from tests import cluster_oidc
from tests.cluster_oidc import ISSUER

SHARE = GpuShare(name="infer", flavor="h200", kind="whole", count=2)
CLUSTER = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2)


@pytest.fixture
def oidc(settings: Any, tmp_path: Path, world: dict[str, Any]) -> dict[str, Any]:
    """The fleet's clusters trust the portal's provider, and bob signed in through it."""
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc())
    cluster_oidc.link(world["bob"], "sub-bob", email="bob@example.com")
    return world


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
def test_a_member_gets_the_address_the_ca_and_a_kubelogin_user(
    oidc: dict[str, Any], sim: Simulator, merged_change: Callable[..., ChangeRequest]
) -> None:
    world = oidc
    spec = dataclasses.replace(tenant_spec(world["alpha"]), shares=(SHARE,), clusters=(CLUSTER,))
    merged_change(spec)
    sim.tick()
    text = kubeconfig_for(cluster(world), world["bob"])
    config = yaml.safe_load(text)
    secret = sim.get_object("secrets", "alpha", "dev-kubeconfig")["data"]
    assert config["current-context"] == "alpha-dev"
    (entry,) = config["clusters"]
    assert entry["cluster"] == {
        "server": "https://dev.alpha.clusters.ai-factory.example.com",  # through the gateway
        "certificate-authority-data": secret["certificate-authority"],
    }
    (user,) = config["users"]
    assert user == {
        "name": "alpha-dev",
        "user": {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "kubectl",
                "args": [
                    "oidc-login",
                    "get-token",
                    f"--oidc-issuer-url={ISSUER}",
                    "--oidc-client-id=ai-factory-clusters",
                ],
                "interactiveMode": "Never",
                "provideClusterInfo": False,
            }
        },
    }
    # The admin credential the Secret also holds is nowhere in it.
    for key in ("client-certificate", "client-key"):
        assert secret[key] not in text.decode()
        assert base64.b64decode(secret[key]) not in text


@pytest.mark.django_db
def test_by_email_kubelogin_asks_for_the_email_scope_and_an_unverified_address_is_refused(
    settings: Any, tmp_path: Path, world: dict[str, Any], sim: Simulator, merged_change: Any
) -> None:
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc(username_claim="email"))
    cluster_oidc.link(world["bob"], "sub-bob", email="bob@example.com")
    cluster_oidc.link(world["vic"], "sub-vic", email="vic@example.com", verified=False)
    spec = dataclasses.replace(tenant_spec(world["alpha"]), shares=(SHARE,), clusters=(CLUSTER,))
    merged_change(spec)
    sim.tick()
    resource = cluster(world)
    args = yaml.safe_load(kubeconfig_for(resource, world["bob"]))["users"][0]["user"]["exec"]
    assert args["args"][-1] == "--oidc-extra-scope=email"
    with pytest.raises(KubeconfigUnavailable, match="a verified e-mail address"):
        kubeconfig_for(resource, world["vic"])


@pytest.mark.django_db
def test_it_refuses_without_cluster_oidc(world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="does not hand out the cluster's admin"):
        kubeconfig_for(cluster(world), world["bob"])


@pytest.mark.django_db
def test_it_refuses_someone_the_clusters_would_not_recognise(oidc: dict[str, Any]) -> None:
    resource = cluster(oidc)
    with pytest.raises(KubeconfigUnavailable, match="not linked to Keycloak yet"):
        kubeconfig_for(resource, oidc["alice"])  # a member without a provider identity
    with pytest.raises(KubeconfigUnavailable, match="You are not a member of alpha"):
        kubeconfig_for(resource, oidc["pam"])  # a platform admin sees the tenant, is no member


@pytest.mark.django_db
def test_it_refuses_a_cluster_that_is_not_created_yet(world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="does not exist yet"):
        kubeconfig_for(cluster(world, Resource.State.PENDING), world["bob"])


@pytest.mark.django_db
def test_it_refuses_a_decommissioned_cluster(world: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigUnavailable, match="is decommissioned"):
        kubeconfig_for(cluster(world, Resource.State.DECOMMISSIONED), world["bob"])


@pytest.mark.django_db
def test_it_refuses_a_resource_that_is_not_a_cluster(world: dict[str, Any]) -> None:
    share = Resource.objects.create(
        tenant=world["alpha"], kind="gpu-share", name="infer", state="active", spec=to_json(SHARE)
    )
    with pytest.raises(KubeconfigUnavailable, match="only tenant clusters have one"):
        kubeconfig_for(share, world["bob"])


@pytest.mark.django_db
def test_it_refuses_while_the_cluster_has_not_started(oidc: dict[str, Any], sim: Simulator) -> None:
    with pytest.raises(KubeconfigUnavailable, match="has not started yet") as missing:
        kubeconfig_for(cluster(oidc), oidc["bob"])
    assert "alpha/dev-kubeconfig" in str(missing.value)


@pytest.mark.django_db
def test_it_refuses_when_the_api_does_not_answer(settings: Any, oidc: dict[str, Any]) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings.FLEET_API_URL = f"http://127.0.0.1:{port}"
    settings.FLEET_KUBECONFIG = ""
    settings.FLEET_IN_CLUSTER = False
    settings.FLEET_API_TIMEOUT = 1
    with pytest.raises(KubeconfigUnavailable, match="cannot be read right now"):
        kubeconfig_for(cluster(oidc), oidc["bob"])
