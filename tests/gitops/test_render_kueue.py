"""Kueue objects: fleet flavors/topology/cohort/priorities and a tenant's queues."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gitops.fleet import demo_fleet
from gitops.render import kueue
from gitops.render.tree import render_infrastructure
from gitops.render.yamlio import load_documents
from gitops.specs import GpuShare, TenantSpec
from tests.gitops.render_samples import TRAIN, dedicated_tenant, rich_tenant

FLEET = demo_fleet()


def _quotas(queue: dict[str, Any]) -> dict[str, dict[str, dict[str, str]]]:
    (group,) = queue["spec"]["resourceGroups"]
    return {
        flavor["name"]: {entry["name"]: entry for entry in flavor["resources"]}
        for flavor in group["flavors"]
    }


def test_it_sums_shares_per_flavor_into_nominal_quota() -> None:
    extra = GpuShare(name="more", flavor="h200", kind="whole", count=4)
    tenant = dataclasses.replace(rich_tenant(), shares=(*rich_tenant().shares, extra))
    quotas = _quotas(kueue.cluster_queue(tenant, FLEET))
    assert quotas["h200"]["nvidia.com/gpu"]["nominalQuota"] == "20"
    assert quotas["h200-dra"]["gpu.nvidia.com"]["nominalQuota"] == "8"
    assert quotas["h200"]["gpu.nvidia.com"]["nominalQuota"] == "0"
    assert quotas["h200-mig"]["nvidia.com/mig-1g.18gb"]["nominalQuota"] == "8"
    hami = quotas["h200-hami"]
    assert hami["nvidia.com/vgpu"]["nominalQuota"] == "10"
    assert hami["nvidia.com/gpu"]["nominalQuota"] == "0"
    assert hami["nvidia.com/gpumem"]["nominalQuota"] == "200000"
    assert hami["nvidia.com/gpucores"]["nominalQuota"] == "300"


def test_it_lists_every_covered_resource_on_every_flavor_in_order() -> None:
    queue = kueue.cluster_queue(rich_tenant(), FLEET)
    (group,) = queue["spec"]["resourceGroups"]
    covered = group["coveredResources"]
    assert covered[:2] == ["cpu", "memory"]
    assert covered[2:] == sorted(covered[2:])
    assert [f["name"] for f in group["flavors"]] == ["h200", "h200-mig", "h200-hami", "h200-dra"]
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == covered
    assert _quotas(queue)["h200-mig"]["nvidia.com/gpu"]["nominalQuota"] == "0"


def test_it_covers_only_the_flavors_and_resources_of_the_shares() -> None:
    queue = kueue.cluster_queue(dedicated_tenant(), FLEET)
    (group,) = queue["spec"]["resourceGroups"]
    # ephemeral-storage: every container requests some (the LimitRange default), and Kueue
    # refuses a workload asking for a resource its queue does not cover.
    assert group["coveredResources"] == [
        "cpu",
        "memory",
        "ephemeral-storage",
        "nvidia.com/gpu",
        "nvidia.com/mig-3g.71gb",
    ]
    assert [f["name"] for f in group["flavors"]] == ["h200", "h200-mig"]


def test_it_has_no_resource_group_without_shares() -> None:
    queue = kueue.cluster_queue(TenantSpec(slug="empty"), FLEET)
    assert "resourceGroups" not in queue["spec"]


def test_it_writes_borrowing_and_lending_limits_from_the_shares() -> None:
    quotas = _quotas(kueue.cluster_queue(rich_tenant(), FLEET))
    gpu = quotas["h200"]["nvidia.com/gpu"]
    assert (gpu["borrowingLimit"], gpu["lendingLimit"]) == ("8", "4")
    # DRA share without limits: borrows and lends freely (Kueue's defaults).
    assert "borrowingLimit" not in quotas["h200"]["gpu.nvidia.com"]
    assert "lendingLimit" not in quotas["h200"]["gpu.nvidia.com"]


def test_it_adds_up_limits_of_shares_on_one_flavor() -> None:
    limited = dataclasses.replace(TRAIN, borrowing_limit=2, lending_limit=1)
    unlimited = GpuShare(name="open", flavor="h200", kind="whole", count=4)
    tenant = TenantSpec(slug="t", shares=(TRAIN, limited))
    gpu = _quotas(kueue.cluster_queue(tenant, FLEET))["h200"]["nvidia.com/gpu"]
    assert (gpu["nominalQuota"], gpu["borrowingLimit"], gpu["lendingLimit"]) == ("32", "10", "5")
    # A share that sets no borrowing limit lifts it; one that lends everything lends all of it.
    tenant = TenantSpec(slug="t", shares=(TRAIN, unlimited))
    gpu = _quotas(kueue.cluster_queue(tenant, FLEET))["h200"]["nvidia.com/gpu"]
    assert "borrowingLimit" not in gpu
    assert gpu["lendingLimit"] == "8"


def test_it_scales_hami_limits_to_memory_and_cores() -> None:
    share = GpuShare(
        name="f",
        flavor="h200-hami",
        kind="hami",
        count=10,
        gpumem_mib=1000,
        gpucores_percent=20,
        borrowing_limit=5,
    )
    quotas = _quotas(kueue.cluster_queue(TenantSpec(slug="t", shares=(share,)), FLEET))
    hami = quotas["h200-hami"]
    assert hami["nvidia.com/gpumem"]["borrowingLimit"] == "5000"
    assert hami["nvidia.com/gpucores"]["borrowingLimit"] == "100"


def test_it_selects_the_tenant_namespace_and_sets_fair_sharing_and_preemption() -> None:
    tenant = dataclasses.replace(rich_tenant(), fair_share_weight=3)
    spec = kueue.cluster_queue(tenant, FLEET)["spec"]
    assert spec["cohortName"] == FLEET.cohort
    assert spec["namespaceSelector"] == {"matchLabels": {"ai-factory.io/tenant": "alpha"}}
    assert spec["fairSharing"] == {"weight": "3"}
    # Finding 16: fair sharing ignores borrowWithinCohort, so it is not rendered.
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
    }


def test_it_renders_classic_preemption_without_fair_sharing_weights() -> None:
    fleet = dataclasses.replace(FLEET, fair_sharing=False)
    spec = kueue.cluster_queue(rich_tenant(), fleet)["spec"]
    assert "fairSharing" not in spec
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 500},
        "withinClusterQueue": "LowerPriority",
    }


def test_it_records_reservation_end_dates() -> None:
    queue = kueue.cluster_queue(rich_tenant(), FLEET)
    assert queue["metadata"]["annotations"] == {
        "ai-factory.io/reservations-until": "train=2026-12-31"
    }


def test_it_points_the_local_queue_at_the_cluster_queue() -> None:
    queue = kueue.local_queue(rich_tenant())
    assert queue["metadata"]["namespace"] == "alpha"
    assert queue["metadata"]["name"] == "gpu"
    assert queue["spec"] == {"clusterQueue": "alpha"}


def test_it_renders_flavors_topology_cohort_and_priorities_for_the_fleet() -> None:
    objs = load_documents(render_infrastructure(FLEET)["infrastructure/configs/kueue.yaml"])
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        by_kind.setdefault(obj["kind"], []).append(obj)
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind["ResourceFlavor"]}
    assert flavors["h200-mig"] == {
        "nodeLabels": {
            "ai-factory.io/pool": "h200-mig",
            "nvidia.com/gpu.product": "NVIDIA-H200",
            "nvidia.com/mig.config": "all-balanced",
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "topologyName": "default",
    }
    (topology,) = by_kind["Topology"]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == list(
        FLEET.topology_levels
    )
    assert [c["metadata"]["name"] for c in by_kind["Cohort"]] == ["gpu-fleet"]
    priorities = {p["metadata"]["name"]: p["value"] for p in by_kind["WorkloadPriorityClass"]}
    assert priorities == {"inference-critical": 1000, "training": 500, "batch-low": 100}


def test_it_leaves_topology_out_for_flavors_without_it() -> None:
    flavor = dataclasses.replace(FLEET.flavors[0], topology=False)
    assert "topologyName" not in kueue.resource_flavor(flavor)["spec"]
    fleet = dataclasses.replace(FLEET, flavors=(flavor,))
    assert "Topology" not in {obj["kind"] for obj in kueue.fleet_objects(fleet)}


@pytest.mark.parametrize("mode", ["hami", "dra"])
def test_it_never_makes_a_hami_or_dra_flavor_topology_aware(mode: str) -> None:
    # Finding 6: TAS fits pods against node allocatable, which never lists HAMi's gpumem.
    # Issue 26 finding 3: nor does it count a pod's ResourceClaims (Kueue's DRA limitations).
    flavor = next(f for f in FLEET.flavors if f.mode == mode)
    assert flavor.topology is None  # the fleet leaves it to the mode
    assert "topologyName" not in kueue.resource_flavor(flavor)["spec"]
    fleet = dataclasses.replace(FLEET, flavors=(flavor,))
    assert "Topology" not in {obj["kind"] for obj in kueue.fleet_objects(fleet)}
    whole = next(f for f in FLEET.flavors if f.mode == "whole")
    assert whole.topology is None
    assert kueue.resource_flavor(whole)["spec"]["topologyName"] == "default"


def test_it_gives_whole_gpus_and_hami_slots_different_resources() -> None:
    quotas = _quotas(kueue.cluster_queue(rich_tenant(), FLEET))
    assert quotas["h200"]["nvidia.com/vgpu"]["nominalQuota"] == "0"
    assert quotas["h200-hami"]["nvidia.com/gpu"]["nominalQuota"] == "0"


def test_it_reports_what_kueue_may_admit_per_resource() -> None:
    admissible = kueue.admissible(rich_tenant(), FLEET)
    assert admissible["nvidia.com/gpu"] == 16 + 8
    assert admissible["gpu.nvidia.com"] == 16  # no borrowing limit: the whole DRA pool
    assert kueue.admissible(TenantSpec(slug="empty"), FLEET) == {}
