"""The simulator's vCluster against vCluster's own tests, at the chart version the project pins
(loft-sh/vcluster v0.35.3, ``gitops/render/vcluster.py`` ``CHART_VERSION``): what a release
leaves in the host namespace (``simulator/vcluster.py``).

- the chart's helm-unittest suites ``chart/tests/resourcequota_test.yaml``,
  ``limitrange_test.yaml`` and ``statefulset_test.yaml`` (cases named by their ``it``; the
  chart in the repository has version 0.0.1, which its tests expect in image tags);
- ``pkg/setup/controllers_test.go`` ``TestExportKubeConfig`` (the kubeconfig written into the
  ``vc-<release>`` Secret; the syncer's own kubeconfig is the simulator's, so the cases check
  what the options change: server, context names, insecure).

Inputs and expected outcomes are upstream's. The syncer's own tests (translate, pods,
services, endpoints) are in test_conformance_vcluster_sync.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from simulator.vcluster import control_plane_pod, exported_kubeconfigs, host_policies

RELEASE, NAMESPACE, CHART_VERSION = "my-release", "my-namespace", "0.0.1"


def kinds(values: dict[str, Any]) -> list[str]:
    return [obj["kind"] for obj in host_policies(values, NAMESPACE, RELEASE)]


# --- chart/tests/resourcequota_test.yaml, limitrange_test.yaml -------------------------------


@pytest.mark.parametrize(
    ("it", "policies", "quota", "limit_range"),
    [
        ("should not create resource quota by default", {}, False, False),
        ("check defaults", {"resourceQuota": {"enabled": True}}, True, True),
        ("check enabled", {"limitRange": {"enabled": True}}, True, True),
        (
            "check disabled",
            {"resourceQuota": {"enabled": False}, "limitRange": {"enabled": True}},
            False,
            True,
        ),
        (
            "check disabled both false",
            {"resourceQuota": {"enabled": False}, "limitRange": {"enabled": False}},
            False,
            False,
        ),
    ],
)
def test_quota_and_limit_range_follow_each_other_when_auto(
    it: str, policies: dict[str, Any], quota: bool, limit_range: bool
) -> None:
    """Each ``it`` of both suites: ``auto`` renders when the other one is ``true``."""
    found = kinds({"policies": policies})
    assert ("ResourceQuota" in found, "LimitRange" in found) == (quota, limit_range), it


def test_resource_quota_check_defaults() -> None:
    """resourcequota_test.yaml "check defaults"."""
    [quota, _] = host_policies(
        {"policies": {"resourceQuota": {"enabled": True}}}, NAMESPACE, RELEASE
    )
    assert quota["metadata"]["name"] == "vc-my-release"
    assert quota["metadata"]["namespace"] == "my-namespace"
    assert quota["spec"]["hard"]["requests.cpu"] == "10"


def test_limit_range_check_defaults() -> None:
    """limitrange_test.yaml "check defaults"."""
    [_, limits] = host_policies({"policies": {"limitRange": {"enabled": True}}}, NAMESPACE, RELEASE)
    assert limits["metadata"]["name"] == "vc-my-release"
    assert limits["metadata"]["namespace"] == "my-namespace"
    assert len(limits["spec"]["limits"]) == 1


def test_limit_range_min_and_max() -> None:
    """limitrange_test.yaml, the last "check disabled both false" (it sets min and max)."""
    values = {
        "policies": {"limitRange": {"enabled": True, "min": {"cpu": 1}, "max": {"memory": "256Mi"}}}
    }
    [limits] = [o for o in host_policies(values, NAMESPACE, RELEASE) if o["kind"] == "LimitRange"]
    assert limits["spec"]["limits"][0]["min"]["cpu"] == "1"
    assert limits["spec"]["limits"][0]["max"]["memory"] == "256Mi"


# --- chart/tests/statefulset_test.yaml -------------------------------------------------------


def pod(values: dict[str, Any]) -> dict[str, Any]:
    return control_plane_pod(values, NAMESPACE, RELEASE, CHART_VERSION)


@pytest.mark.parametrize(
    ("it", "control_plane", "image"),
    [
        (
            "image name",
            {"statefulSet": {"image": {"registry": "custom-registry.com"}}},
            "custom-registry.com/loft-sh/vcluster-pro:0.0.1",
        ),
        (
            "defaultImageRegistry",
            {"advanced": {"defaultImageRegistry": "docker.io"}},
            "docker.io/loft-sh/vcluster-pro:0.0.1",
        ),
        (
            "custom tag",
            {"statefulSet": {"image": {"repository": "my-repo", "tag": "custom-tag"}}},
            "ghcr.io/my-repo:custom-tag",
        ),
        ("name & defaults", {}, "ghcr.io/loft-sh/vcluster-pro:0.0.1"),
    ],
)
def test_the_syncer_image(it: str, control_plane: dict[str, Any], image: str) -> None:
    assert pod({"controlPlane": control_plane})["spec"]["containers"][0]["image"] == image, it


@pytest.mark.parametrize(
    ("it", "k8s", "advanced", "image"),
    [
        (
            "custom init container",
            {"image": {"registry": "", "repository": "k8s-api", "tag": "456"}},
            {},
            "k8s-api:456",
        ),
        (
            "custom init container",
            {"image": {"repository": "k8s-controller", "tag": "123"}},
            {"defaultImageRegistry": "bbb.com"},
            "bbb.com/k8s-controller:123",
        ),
        (
            "k8s version not set, default tag images used for apiServer and controllerManager",
            {},
            {},
            "ghcr.io/loft-sh/kubernetes:v1.36.0",
        ),
        (
            "k8s override image tag",
            {"image": {"tag": "v99912"}},
            {},
            "ghcr.io/loft-sh/kubernetes:v99912",
        ),
        (
            "k8s version sets image tag for apiServer and controllerManager",
            {"version": "v1.35.999"},
            {},
            "ghcr.io/loft-sh/kubernetes:v1.35.999",
        ),
        (
            "k8s version set and not overridden by image tag",
            {"version": "v1.30.999", "image": {"tag": "v99912"}},
            {},
            "ghcr.io/loft-sh/kubernetes:v1.30.999",
        ),
    ],
)
def test_the_kubernetes_init_container_image(
    it: str, k8s: dict[str, Any], advanced: dict[str, Any], image: str
) -> None:
    values = {"controlPlane": {"distro": {"k8s": {"enabled": True, **k8s}}, "advanced": advanced}}
    assert pod(values)["spec"]["initContainers"][0]["image"] == image, it


def test_name_and_defaults() -> None:
    """ "name & defaults": the pod's labels and the syncer's binaries mount."""
    found = pod({})
    assert found["metadata"]["labels"]["app"] == "vcluster"
    assert {"name": "binaries", "mountPath": "/binaries"} in found["spec"]["containers"][0][
        "volumeMounts"
    ]


def test_binaries_volume_is_an_empty_dir_by_default() -> None:
    """ "binariesVolume - should set to emptyDir by default"."""
    assert {"name": "binaries", "emptyDir": {}} in pod({})["spec"]["volumes"]


def test_default_security_context() -> None:
    """ "should apply default security context when kube-vip is disabled"."""
    context = pod({})["spec"]["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert (context["runAsUser"], context["runAsGroup"]) == (0, 0)
    assert "capabilities" not in context


# --- pkg/setup/controllers_test.go TestExportKubeConfig --------------------------------------


def exported(export: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``vc-<release>`` Secret's kubeconfig, parsed, and the Secret's data, decoded."""
    release = {
        "spec": {"chart": {"spec": {"chart": "vcluster"}}, "values": {"exportKubeConfig": export}}
    }
    [secret] = exported_kubeconfigs(release, NAMESPACE, RELEASE)
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    return yaml.safe_load(data["config"]), data


def names(config: dict[str, Any]) -> set[str]:
    return {
        config["current-context"],
        *(c["name"] for c in config["clusters"]),
        *(u["name"] for u in config["users"]),
        *(c["name"] for c in config["contexts"]),
        *(c["context"]["cluster"] for c in config["contexts"]),
        *(c["context"]["user"] for c in config["contexts"]),
    }


def test_export_default_kubeconfig() -> None:
    """ "Export default kubeconfig": the control plane proxy at localhost:8443."""
    config, _ = exported({})
    assert config["clusters"][0]["cluster"]["server"] == "https://localhost:8443"


def test_export_default_kubeconfig_with_custom_server() -> None:
    """ "Export default kubeconfig with custom server"."""
    config, _ = exported({"server": "exported-test-server"})
    assert config["clusters"][0]["cluster"]["server"] == "exported-test-server"


@pytest.mark.parametrize(
    ("case", "export", "server"),
    [
        (
            "Export default kubeconfig with custom context",
            {"context": "exported-test-context"},
            "https://localhost:8443",
        ),
        (
            "Export default kubeconfig with custom context and server",
            {"context": "exported-test-context", "server": "exported-test-server"},
            "exported-test-server",
        ),
    ],
)
def test_a_custom_context_names_cluster_user_and_context(
    case: str, export: dict[str, Any], server: str
) -> None:
    config, _ = exported(export)
    assert names(config) == {"exported-test-context"}, case
    assert config["clusters"][0]["cluster"]["server"] == server, case


def test_export_default_kubeconfig_with_insecure() -> None:
    """ "Export default kubeconfig with insecure": insecure-skip-tls-verify and no CA data (and
    so no ``certificate-authority`` in the Secret, pkg/util/kubeconfig ``WriteKubeConfig``)."""
    config, data = exported({"insecure": True})
    cluster = config["clusters"][0]["cluster"]
    assert cluster["insecure-skip-tls-verify"] is True
    assert "certificate-authority-data" not in cluster
    assert data["certificate-authority"] == ""
    assert cluster["server"] == "https://localhost:8443"
