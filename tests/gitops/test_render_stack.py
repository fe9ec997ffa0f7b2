"""The platform's controllers rendered as Flux HelmReleases (``stack: true``): pinned charts,
an install order by ``dependsOn``, the values the fleet relies on, and no object both a chart
and the portal render."""

from __future__ import annotations

import dataclasses
from graphlib import TopologicalSorter
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render import kueue_config, objects_for, render_repository, resources, stack
from gitops.render.meta import FLUX_NAMESPACE
from gitops.render.tree import render_infrastructure
from gitops.render.validate import validate_tenant
from gitops.render.yamlio import load_documents
from gitops.specs import FleetSpec, SpecError, TenantClusterSpec, TenantSpec
from tests.gitops.render_samples import rich_tenant
from tests.gitops.test_render_platform import selects

FLEET = dataclasses.replace(demo_fleet(), stack=True)


def _controllers(fleet: FleetSpec) -> dict[str, list[dict[str, Any]]]:
    prefix = "infrastructure/controllers/"
    return {
        path.removeprefix(prefix): load_documents(data)
        for path, data in render_infrastructure(fleet).items()
        if path.startswith(prefix)
    }


def _releases(fleet: FleetSpec) -> dict[str, dict[str, Any]]:
    return {
        obj["metadata"]["name"]: obj
        for objs in _controllers(fleet).values()
        for obj in objs
        if obj["kind"] == "HelmRelease"
    }


def _order(releases: dict[str, dict[str, Any]]) -> list[str]:
    graph = {
        name: {d["name"] for d in obj["spec"].get("dependsOn", [])}
        for name, obj in releases.items()
    }
    return list(TopologicalSorter(graph).static_order())


def _with_issuer(fleet: FleetSpec, issuer: str, implementation: str) -> FleetSpec:
    gateway = dataclasses.replace(
        fleet.gateway,
        cluster_issuer=issuer,
        implementation=implementation,  # type: ignore[arg-type]
    )
    return dataclasses.replace(fleet, gateway=gateway)


def test_without_the_stack_the_controllers_are_left_to_the_operator() -> None:
    files = _controllers(dataclasses.replace(FLEET, stack=False))
    assert set(files) == {"helm-repositories.yaml", "kustomization.yaml"}


def test_every_component_is_pinned_and_listed() -> None:
    files = _controllers(FLEET)
    [listing] = files.pop("kustomization.yaml")
    assert listing["resources"] == sorted(files)
    versions = {
        name: obj["spec"]["chart"]["spec"]["version"]
        if "chart" in obj["spec"]
        else next(
            o["spec"]["ref"]["tag"]
            for objs in files.values()
            for o in objs
            if o["kind"] == "OCIRepository"
            and o["metadata"]["name"] == obj["spec"]["chartRef"]["name"]
        )
        for name, obj in _releases(FLEET).items()
    }
    assert versions == {
        "cert-manager": "v1.21.1",
        "kyverno": "3.9.0",
        "keda": "2.20.2",
        "envoy-gateway": "v1.9.0",
        "gpu-operator": "v26.7.0",
        "hami": "2.10.0",
        "nvidia-dra-driver-gpu": "0.4.0",
        "kueue": "0.19.2",
        "kserve-crd": "v0.20.0",
        "kserve-resources": "v0.20.0",
        "kserve-runtime-configs": "v0.20.0",
        "litellm": "1.0.0",
    }
    # Each release sits beside its source in flux-system (the lockdown refuses cross-namespace
    # references) and installs as helm-controller into its component's namespace.
    sources = {
        (o["kind"], o["metadata"]["name"])
        for objs in files.values()
        for o in objs
        if o["kind"] in ("HelmRepository", "OCIRepository")
    }
    for release in _releases(FLEET).values():
        spec = release["spec"]
        assert release["metadata"]["namespace"] == FLUX_NAMESPACE
        assert spec["serviceAccountName"] == "helm-controller"
        assert spec["targetNamespace"] == spec["storageNamespace"]
        ref = spec.get("chartRef") or spec["chart"]["spec"]["sourceRef"]
        assert (ref["kind"], ref["name"]) in sources
        assert "namespace" not in ref


def test_the_stack_release_names_are_reserved_for_it() -> None:
    every_kind = [
        _releases(_with_issuer(FLEET, "", implementation))
        for implementation in ("envoy-gateway", "cilium")
    ]
    assert set().union(*every_kind) == stack.RELEASE_NAMES
    tenant = dataclasses.replace(
        rich_tenant(), slug="cert", clusters=(TenantClusterSpec(name="manager"),)
    )
    with pytest.raises(SpecError, match="platform component's release"):
        validate_tenant(tenant, FLEET)


def test_each_component_has_its_namespace_which_is_never_pruned() -> None:
    for name, objs in _controllers(FLEET).items():
        if name in ("kustomization.yaml", "helm-repositories.yaml"):
            continue
        targets = {o["spec"]["targetNamespace"] for o in objs if o["kind"] == "HelmRelease"}
        namespaces = [o for o in objs if o["kind"] == "Namespace"]
        if targets == {"kube-system"}:  # HAMi's default: Kubernetes' own, never in Git
            assert namespaces == []
            continue
        [namespace] = namespaces
        assert {namespace["metadata"]["name"]} == targets
        annotations = namespace["metadata"]["annotations"]
        assert annotations == {"kustomize.toolkit.fluxcd.io/prune": "disabled"}
        privileged = namespace["metadata"]["labels"].get("pod-security.kubernetes.io/enforce")
        assert (privileged == "privileged") == (
            name in ("gpu-operator.yaml", "nvidia-dra-driver-gpu.yaml")
        )


def test_the_install_order_follows_what_each_chart_needs() -> None:
    releases = _releases(FLEET)
    order = _order(releases)
    for before, after in [
        ("kserve-crd", "kserve-resources"),
        ("cert-manager", "kserve-resources"),
        ("keda", "kserve-resources"),
        ("kserve-resources", "kserve-runtime-configs"),
        ("gpu-operator", "hami"),
        ("gpu-operator", "nvidia-dra-driver-gpu"),
    ]:
        assert order.index(before) < order.index(after), (before, after)
    first_wave = {name for name, obj in releases.items() if not obj["spec"].get("dependsOn")}
    assert first_wave == {
        "cert-manager",
        "envoy-gateway",
        "gpu-operator",
        "keda",
        "kueue",
        "kserve-crd",
        "kyverno",
        "litellm",
    }


@pytest.mark.parametrize(
    ("issuer", "implementation", "after_envoy"),
    [("letsencrypt", "envoy-gateway", True), ("", "envoy-gateway", False), ("le", "cilium", False)],
)
def test_cert_manager_waits_for_the_gateway_api_crds_only_to_issue_the_gateways_certificate(
    issuer: str, implementation: str, after_envoy: bool
) -> None:
    release = _releases(_with_issuer(FLEET, issuer, implementation))["cert-manager"]
    depends = [d["name"] for d in release["spec"].get("dependsOn", [])]
    assert depends == (["envoy-gateway"] if after_envoy else [])
    config = release["spec"]["values"].get("config", {})
    assert config.get("gatewayAPI") == ({"enabled": True} if issuer else None)
    assert release["spec"]["values"]["crds"] == {"enabled": True}


def test_components_follow_the_fleet() -> None:
    only_whole = dataclasses.replace(
        FLEET, flavors=tuple(f for f in FLEET.flavors if f.mode == "whole")
    )
    cilium = _with_issuer(only_whole, "", "cilium")
    assert set(_releases(cilium)).isdisjoint({"hami", "nvidia-dra-driver-gpu", "envoy-gateway"})
    assert {"hami", "nvidia-dra-driver-gpu", "envoy-gateway"} <= set(_releases(FLEET))


def test_hami_advertises_vgpu_slots_after_the_gpu_operators_toolkit() -> None:
    values = _releases(FLEET)["hami"]["spec"]["values"]
    [pool] = [f for f in FLEET.flavors if f.mode == "hami"]
    assert values["resourceName"] == resources.VGPU == "nvidia.com/vgpu"
    assert values["devicePlugin"]["deviceSplitCount"] == pool.hami_split
    assert values["devicePlugin"]["gpuOperatorToolkitReady"] == {"enabled": True}
    assert values["devicePlugin"]["tolerations"] == [
        {"key": pool.taint_key, "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert values["prometheus"] == {"enabled": False}  # the portal's ServiceMonitors instead


def test_hami_pools_must_share_one_split_with_the_stack() -> None:
    hami = next(f for f in FLEET.flavors if f.mode == "hami")
    other = dataclasses.replace(hami, name="h200-hami-4", hami_split=4)
    fleet = dataclasses.replace(FLEET, flavors=(*FLEET.flavors, other))
    with pytest.raises(SpecError, match="hami_split"):
        render_infrastructure(fleet)
    render_infrastructure(dataclasses.replace(fleet, stack=False))


def test_the_dra_kubelet_plugin_runs_on_the_dra_pools_only() -> None:
    values = _releases(FLEET)["nvidia-dra-driver-gpu"]["spec"]["values"]
    affinity = values["kubeletPlugin"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for flavor in FLEET.flavors:
        labels = dict(flavor.node_labels)
        assert any(selects(term, labels) for term in terms) == (flavor.mode == "dra"), flavor.name
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"
    assert values["resources"]["computeDomains"] == {"enabled": False}


def _kueue_config_maps(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects_for(files)
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"] == kueue_config.CONFIG_MAP
        and o["metadata"].get("namespace") == kueue_config.NAMESPACE
    ]


def test_kueues_configuration_has_one_source_the_chart_renders() -> None:
    files = render_repository(FLEET, [rich_tenant()])
    # The chart renders <release>-manager-config whatever its values: the portal renders none.
    assert _kueue_config_maps(files) == []
    release = _releases(FLEET)["kueue"]
    assert release["spec"]["releaseName"] == "kueue"
    assert f"{release['spec']['releaseName']}-manager-config" == kueue_config.CONFIG_MAP
    values = release["spec"]["values"]
    rendered = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert rendered == kueue_config.configuration(FLEET)
    # Without the stack the ConfigMap is the portal's, for a Kueue the operator installed.
    off = dataclasses.replace(FLEET, stack=False)
    assert len(_kueue_config_maps(render_repository(off, [rich_tenant()]))) == 1


def test_a_kueue_configuration_change_upgrades_the_release() -> None:
    # Kueue reads its configuration at start only: the change must reach the chart, whose
    # config-checksum annotation then rolls the manager.
    before = _releases(FLEET)["kueue"]
    after = _releases(dataclasses.replace(FLEET, fair_sharing=False))["kueue"]
    assert before["spec"]["values"] != after["spec"]["values"]
    assert (
        "fairSharing" not in after["spec"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    )


def _helm_default(value: Any, fallback: Any) -> Any:
    """Helm's ``value | default fallback``: ``fallback`` when ``value`` is empty (sprig
    ``default``: false, 0, "", nil, empty collections)."""
    return value if value not in (None, False, 0, "", [], {}) else fallback


def test_kserves_chart_renders_no_storage_container_but_its_config_and_issuer() -> None:
    kserve = _releases(FLEET)["kserve-resources"]["spec"]["values"]["kserve"]
    shared = kserve.get("createSharedResources", True)
    # v0.20.0 charts/kserve-resources/templates/common/*.yaml: "<x>.enabled | default
    # createSharedResources".
    assert not _helm_default(kserve.get("storagecontainer", {}).get("enabled", ""), shared)
    assert _helm_default(kserve.get("inferenceServiceConfig", {}).get("enabled", ""), shared)
    assert _helm_default(kserve.get("certManager", {}).get("enabled", ""), shared)
    # storagecontainer.enabled: false alone is empty to Helm, and the chart's default is true.
    assert _helm_default(False, True)
    assert kserve["controller"]["deploymentMode"] == "Standard"
    # The portal's ClusterStorageContainer "default" is then the only one.
    storage = [
        o
        for o in objects_for(render_repository(FLEET, []))
        if o["kind"] == "ClusterStorageContainer"
    ]
    assert [o["metadata"]["name"] for o in storage] == ["default"]


def test_the_gpu_operators_chart_leaves_the_cluster_policy_to_the_portal() -> None:
    values = _releases(FLEET)["gpu-operator"]["spec"]["values"]
    assert values["clusterPolicy"] == {"deployCR": False}
    policies = [
        o
        for o in objects_for(render_repository(FLEET, []))
        if o["apiVersion"] == "nvidia.com/v1" and o["kind"] == "ClusterPolicy"
    ]
    assert [p["metadata"]["name"] for p in policies] == ["cluster-policy"]


def test_charts_with_a_crds_directory_keep_their_crds_current() -> None:
    releases = _releases(FLEET)
    replaced = {
        name
        for name, obj in releases.items()
        if obj["spec"]["install"].get("crds") == "CreateReplace"
        and obj["spec"]["upgrade"].get("crds") == "CreateReplace"
    }
    assert replaced == {"envoy-gateway", "gpu-operator"}


def test_litellms_database_and_keys_come_from_the_operators_secret() -> None:
    release = _releases(FLEET)["litellm"]
    assert release["spec"]["valuesFrom"] == [{"kind": "Secret", "name": "litellm-values"}]
    assert release["spec"]["targetNamespace"] == FLEET.litellm_namespace


def test_a_tenant_cluster_may_take_a_name_no_release_has() -> None:
    tenant = TenantSpec(slug="team", clusters=(TenantClusterSpec(name="dev"),))
    validate_tenant(tenant, FLEET)
