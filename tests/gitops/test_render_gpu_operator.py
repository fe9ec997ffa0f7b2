"""The GPU Operator's ClusterPolicy follows the fleet's pools (gitops/render/gpu_operator.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gitops.checks.schema import validate_objects
from gitops.fleet import demo_fleet
from gitops.render import gpu_operator, monitoring
from gitops.render.resources import DEVICE_PLUGIN_LABEL
from gitops.render.tree import render_infrastructure
from gitops.render.yamlio import load_documents
from gitops.specs import FleetSpec, GpuMode

FLEET = demo_fleet()


def _policy(fleet: FleetSpec) -> dict[str, Any]:
    [policy] = load_documents(
        render_infrastructure(fleet)["infrastructure/configs/gpu-operator.yaml"]
    )
    return policy


def _only(*modes: GpuMode) -> FleetSpec:
    return dataclasses.replace(FLEET, flavors=tuple(f for f in FLEET.flavors if f.mode in modes))


def test_one_cluster_scoped_policy_the_crd_accepts(schema_dir: Path) -> None:
    policy = _policy(FLEET)
    assert (policy["apiVersion"], policy["kind"]) == ("nvidia.com/v1", "ClusterPolicy")
    assert policy["metadata"]["name"] == "cluster-policy"
    assert "namespace" not in policy["metadata"]
    for fleet in (FLEET, _only("whole"), _only("dra", "hami")):
        errors = validate_objects([_policy(fleet)], schema_dir)
        assert not errors, "\n".join(map(str, errors))


def test_a_mig_pool_makes_the_strategy_mixed_and_runs_the_mig_manager() -> None:
    spec = _policy(FLEET)["spec"]
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["migManager"]["enabled"] is True
    # The MIG manager applies the layout the pool's nodes are labelled with.
    [mig_pool] = [f for f in FLEET.flavors if f.mode == "mig"]
    assert dict(mig_pool.node_labels)["nvidia.com/mig.config"] == "all-balanced"


def test_without_mig_pools_the_strategy_is_single_and_the_mig_manager_off() -> None:
    spec = _policy(_only("whole", "hami", "dra"))["spec"]
    assert spec["mig"] == {"strategy": "single"}
    assert spec["migManager"] == {"enabled": False}


def test_a_dra_pool_of_mig_devices_needs_the_mig_manager() -> None:
    dra = dataclasses.replace(
        next(f for f in FLEET.flavors if f.mode == "dra"), mig_profiles=(("1g.18gb", 32),)
    )
    spec = _policy(dataclasses.replace(FLEET, flavors=(dra,)))["spec"]
    assert spec["migManager"]["enabled"] is True
    assert spec["mig"] == {"strategy": "mixed"}


def test_the_device_plugin_runs_fleet_wide_and_the_label_keeps_it_off_dra_and_hami_nodes() -> None:
    # One ClusterPolicy: the device plugin is on, and the operator leaves it off on nodes
    # whose gpu.deploy.device-plugin label is already "false", which every DRA and HAMi pool
    # carries (HAMi's device plugin serves those GPUs: issue 26 finding 10).
    assert _policy(FLEET)["spec"]["devicePlugin"]["enabled"] is True
    for flavor in FLEET.flavors:
        plugin = dict(flavor.node_labels).get(DEVICE_PLUGIN_LABEL)
        assert (plugin == "false") == (flavor.mode in ("dra", "hami")), flavor.name


def test_a_fleet_without_device_plugin_pools_turns_the_device_plugin_off() -> None:
    assert _policy(_only("dra", "hami"))["spec"]["devicePlugin"] == {"enabled": False}
    assert _policy(_only("whole"))["spec"]["devicePlugin"]["enabled"] is True


def test_dcgm_is_scraped_once_by_the_portals_own_service_monitor() -> None:
    spec = _policy(FLEET)["spec"]
    assert spec["dcgmExporter"]["enabled"] is True
    assert spec["dcgmExporter"]["serviceMonitor"] == {"enabled": False}
    monitors = [m["metadata"]["name"] for m in monitoring.fleet_objects(FLEET)]
    assert "dcgm-exporter" in monitors
    assert spec["gfd"]["enabled"] is True


def test_operands_tolerate_every_pools_taint_and_pin_their_images() -> None:
    tainted = dataclasses.replace(FLEET.flavors[0], taint_key="ai-factory.io/gpu")
    spec = _policy(dataclasses.replace(FLEET, flavors=(tainted, *FLEET.flavors[1:])))["spec"]
    # And nodes reserved for a dedicated tenant: their GPUs need the operands too.
    assert [t["key"] for t in spec["daemonsets"]["tolerations"]] == [
        "ai-factory.io/gpu",
        "ai-factory.io/reserved-for",
        "nvidia.com/gpu",
    ]
    # The Helm-installed operator has no image defaults for these operands.
    for name in ("driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "migManager"):
        assert spec[name]["version"] == gpu_operator.IMAGES[name][2], name
