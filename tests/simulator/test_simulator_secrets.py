"""Secrets in the simulator: a vCluster release exports its kubeconfigs once Ready and
takes them away when removed, read through the official client and through ``Kube.read_secret``."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fleet.kube import Kube, KubeError
from gitops.models import ChangeRequest
from gitops.specs import GpuShare, TenantClusterSpec, TenantSpec
from simulator import Simulator
from simulator.vcluster import exported_kubeconfigs

SHARE = GpuShare(name="infer", flavor="h200", kind="whole", count=2)
CLUSTER = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2)
ALPHA = TenantSpec(slug="alpha", shares=(SHARE,), clusters=(CLUSTER,))


def secret_data(secret: client.V1Secret) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}


@pytest.mark.django_db
def test_it_exports_the_kubeconfig_once_the_vcluster_release_is_ready(
    simulator: Simulator,
    kube: client.ApiClient,
    merged_change: Callable[..., ChangeRequest],
) -> None:
    core = client.CoreV1Api(kube)
    merged_change(ALPHA)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_secret("dev-kubeconfig", "alpha")
    assert missing.value.status == 404

    simulator.tick()
    secret = core.read_namespaced_secret("dev-kubeconfig", "alpha")
    assert secret.type == "Opaque"
    assert secret.kind == "Secret"
    assert secret.metadata.labels == {"app": "vcluster", "vcluster-name": "dev"}
    data = secret_data(secret)
    assert set(data) == {
        "config",
        "certificate-authority",
        "client-certificate",
        "client-key",
        "token",
    }
    kubeconfig = yaml.safe_load(data["config"])
    assert kubeconfig["kind"] == "Config"
    assert kubeconfig["current-context"] == "dev"
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == "https://dev.alpha.clusters.ai-factory.example.com"
    assert base64.b64decode(cluster["certificate-authority-data"]) == data["certificate-authority"]
    assert data["certificate-authority"].startswith(b"-----BEGIN CERTIFICATE-----\n")
    assert data["client-key"].startswith(b"-----BEGIN EC PRIVATE KEY-----\n")
    # The official client takes it as it is.
    loaded = client.Configuration()
    config.load_kube_config_from_dict(kubeconfig, client_configuration=loaded)
    assert loaded.host == "https://dev.alpha.clusters.ai-factory.example.com"

    # vCluster always writes vc-<release> too, with the top-level settings (here the same).
    listed = core.list_namespaced_secret("alpha").items
    assert sorted(s.metadata.name for s in listed) == ["dev-kubeconfig", "vc-dev"]
    assert "secrets" in {r.name for r in core.get_api_resources().resources}


@pytest.mark.django_db
def test_it_removes_the_kubeconfig_with_the_release(
    simulator: Simulator,
    kube: client.ApiClient,
    merged_change: Callable[..., ChangeRequest],
) -> None:
    core = client.CoreV1Api(kube)
    merged_change(ALPHA)
    simulator.tick()
    assert core.read_namespaced_secret("dev-kubeconfig", "alpha").data

    merged_change(TenantSpec(slug="alpha", shares=(SHARE,)))
    simulator.tick()
    assert core.list_namespaced_secret("alpha").items == []


@pytest.mark.django_db
def test_it_deletes_a_namespaces_secrets_with_it(
    simulator: Simulator,
    kube: client.ApiClient,
    merged_change: Callable[..., ChangeRequest],
) -> None:
    merged_change(ALPHA)
    simulator.tick()
    simulator.put_object("secrets", {"metadata": {"namespace": "alpha", "name": "other"}})
    merged_change(remove="alpha")
    simulator.tick()
    # Only the flux-system Secret bootstrap wrote is left.
    left = client.CoreV1Api(kube).list_secret_for_all_namespaces().items
    assert [(s.metadata.namespace, s.metadata.name) for s in left] == [
        ("flux-system", "flux-system")
    ]


def test_it_names_the_secret_after_the_release_without_values() -> None:
    release: dict[str, Any] = {
        "metadata": {"namespace": "flux-system", "name": "alpha-dev"},
        "spec": {"chart": {"spec": {"chart": "vcluster"}}},
    }
    (secret,) = exported_kubeconfigs(release, "alpha", "dev")
    assert secret["metadata"]["name"] == "vc-dev"
    assert secret["metadata"]["namespace"] == "alpha"
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["config"]))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://localhost:8443"
    other = {"spec": {"chart": {"spec": {"chart": "kueue"}}}}
    assert exported_kubeconfigs(other, "alpha", "dev") == []


def test_additional_secrets_carry_their_own_server_and_the_deprecated_one_hides_them() -> None:
    def servers(export: dict[str, Any]) -> dict[str, str]:
        release = {"spec": {"chart": {"spec": {"chart": "vcluster"}}, "values": export}}
        return {
            s["metadata"]["name"]: yaml.safe_load(base64.b64decode(s["data"]["config"]))[
                "clusters"
            ][0]["cluster"]["server"]
            for s in exported_kubeconfigs(release, "alpha", "dev")
        }

    additional = {
        "exportKubeConfig": {
            "server": "https://dev.alpha.svc:443",
            "additionalSecrets": [{"name": "dev-kubeconfig", "server": "https://dev.example.com"}],
        }
    }
    assert servers(additional) == {
        "vc-dev": "https://dev.alpha.svc:443",
        "dev-kubeconfig": "https://dev.example.com",
    }
    # config.go GetAdditionalSecrets: the deprecated secret wins, with the top-level server.
    deprecated = {
        "exportKubeConfig": {
            **additional["exportKubeConfig"],
            "secret": {"name": "old-kubeconfig"},
        }
    }
    assert servers(deprecated) == {
        "vc-dev": "https://dev.alpha.svc:443",
        "old-kubeconfig": "https://dev.alpha.svc:443",
    }


def test_it_reads_a_secret_decoded(simulator: Simulator, kube: client.ApiClient) -> None:
    simulator.put_object(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"namespace": "alpha", "name": "dev-kubeconfig"},
            "type": "Opaque",
            "data": {"config": base64.b64encode(b"apiVersion: v1\n").decode()},
        },
    )
    assert Kube(kube, timeout=5).read_secret("alpha", "dev-kubeconfig") == {
        "config": b"apiVersion: v1\n"
    }


def test_it_answers_a_missing_secret_with_status_404(kube: client.ApiClient) -> None:
    with pytest.raises(KubeError) as missing:
        Kube(kube, timeout=5).read_secret("alpha", "dev-kubeconfig")
    assert missing.value.status == 404
    assert 'secrets "dev-kubeconfig" not found' in str(missing.value)


def test_it_refuses_secret_data_that_is_not_base64(
    simulator: Simulator, kube: client.ApiClient
) -> None:
    simulator.put_object(
        "secrets",
        {
            "metadata": {"namespace": "alpha", "name": "broken"},
            "data": {"config": "%%% hunter2 %%%"},
        },
    )
    with pytest.raises(KubeError) as broken:
        Kube(kube, timeout=5).read_secret("alpha", "broken")
    assert "not base64" in str(broken.value)
    assert "hunter2" not in str(broken.value)  # a credential stays out of messages
