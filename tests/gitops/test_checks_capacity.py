"""Guaranteed quota of all queues against the GPUs of each flavor."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

from gitops.checks.capacity import check_capacity, flavor_pools
from gitops.specs import Flavor, FleetSpec
from tests.gitops import checks_samples as samples

FLEET = samples.FLEET  # h200: 16 whole GPUs; a100-mig: 28 x 1g.10gb, 8 x 3g.40gb; l40s: HAMi


def queue(slug: str, flavor: str, resource: str, amount: Any) -> dict[str, Any]:
    return samples.cluster_queue(slug, flavor=flavor, resource=resource, gpus=amount)


def test_capacity_is_derived_from_each_flavor_mode() -> None:
    pools = {
        (pool.flavor, name): pool.capacity
        for flavor in FLEET.flavors
        for pool in flavor_pools(flavor)
        for name in pool.resources
    }
    assert pools == {
        ("h200", "nvidia.com/gpu"): Decimal(16),
        ("a100-mig", "nvidia.com/mig-1g.10gb"): Decimal(28),
        ("a100-mig", "nvidia.com/mig-3g.40gb"): Decimal(8),
        ("l40s-shared", "nvidia.com/vgpu"): Decimal(8 * 4),
        ("l40s-shared", "nvidia.com/gpumem"): Decimal(8 * 46_068),
        ("l40s-shared", "nvidia.com/gpucores"): Decimal(800),
    }


def test_quota_up_to_the_pool_passes() -> None:
    assert check_capacity(samples.fleet_tree("alpha", "bravo"), FLEET) == []
    exactly = [queue("a", "h200", "nvidia.com/gpu", 10), queue("b", "h200", "nvidia.com/gpu", "6")]
    assert check_capacity(exactly, FLEET) == []


def test_quota_over_the_pool_fails_and_names_the_queues() -> None:
    [finding] = check_capacity(samples.fleet_tree("alpha", "bravo", "charlie"), FLEET)
    assert (finding.rule, finding.severity) == ("overcommit", "error")
    assert finding.object == "ResourceFlavor/h200"
    assert finding.message == (
        "nominal quota of nvidia.com/gpu is 24 but the pool has 16 GPUs "
        "(ClusterQueue/alpha 8, ClusterQueue/bravo 8, ClusterQueue/charlie 8)"
    )


def test_an_admin_may_allow_an_overcommit_which_stays_visible() -> None:
    tree = samples.fleet_tree("alpha", "bravo", "charlie")
    [finding] = check_capacity(tree, FLEET, allow_overcommit=True)
    assert finding.severity == "warning"
    assert "allowed by an administrator" in finding.message


def test_borrowing_limits_do_not_count() -> None:
    generous = queue("a", "h200", "nvidia.com/gpu", 16)
    generous["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["borrowingLimit"] = 100
    assert check_capacity([generous], FLEET) == []


@pytest.mark.parametrize(
    ("queues", "pool"),
    [
        (
            [
                queue("a", "a100-mig", "nvidia.com/mig-3g.40gb", 5),
                queue("b", "a100-mig", "nvidia.com/mig-3g.40gb", 4),
            ],
            "nvidia.com/mig-3g.40gb is 9 but the pool has 8 3g.40gb MIG devices",
        ),
        (
            [queue("a", "l40s-shared", "nvidia.com/vgpu", 33)],
            "nvidia.com/vgpu is 33 but the pool has 32 vGPU slots",
        ),
        (
            # HAMi memory is in MiB: "200Gi" is a mistake the check makes visible.
            [queue("a", "l40s-shared", "nvidia.com/gpumem", "200Gi")],
            "nvidia.com/gpumem is 214748364800 but the pool has 368544 MiB",
        ),
        (
            [queue("a", "l40s-shared", "nvidia.com/gpucores", 801)],
            "nvidia.com/gpucores is 801 but the pool has 800",
        ),
    ],
)
def test_mig_and_hami_pools_are_checked(queues: list[dict[str, Any]], pool: str) -> None:
    [finding] = check_capacity(queues, FLEET)
    assert pool in finding.message


def test_dra_devices_have_a_pool_of_their_own() -> None:
    fleet = FleetSpec(
        flavors=(
            Flavor(name="b200", product="NVIDIA-B200", mode="whole", gpus=8, gpu_memory_mib=1),
            Flavor(name="b200-dra", product="NVIDIA-B200", mode="dra", gpus=4, gpu_memory_mib=1),
        )
    )
    plugin = queue("a", "b200", "nvidia.com/gpu", 8)
    assert check_capacity([plugin, queue("b", "b200-dra", "gpu.nvidia.com", 4)], fleet) == []
    [finding] = check_capacity([plugin, queue("b", "b200-dra", "gpu.nvidia.com", 5)], fleet)
    assert "is 5 but the pool has 4 GPUs (DRA)" in finding.message
    # The device plugin does not run on the DRA pool, nor the DRA driver on the whole one.
    findings = check_capacity(
        [queue("c", "b200", "gpu.nvidia.com", 1), queue("d", "b200-dra", "nvidia.com/gpu", 1)],
        fleet,
    )
    assert [f.rule for f in findings] == ["unknown-resource", "unknown-resource"]


def test_dra_mig_devices_count_every_slice_of_a_dra_pool() -> None:
    mig = dataclasses.replace(FLEET.flavors[1], mode="dra")
    fleet = FleetSpec(flavors=(mig,))
    assert check_capacity([queue("c", "a100-mig", "mig.nvidia.com", 36)], fleet) == []
    [finding] = check_capacity([queue("c", "a100-mig", "mig.nvidia.com", 37)], fleet)
    assert "is 37 but the pool has 36 MIG devices" in finding.message
    # Without DRA on the flavor, a DRA quota has nothing to draw on.
    [finding] = check_capacity([queue("c", "a100-mig", "mig.nvidia.com", 1)], FLEET)
    assert finding.rule == "unknown-resource"


def test_gpu_quota_on_a_flavor_that_lacks_it_fails() -> None:
    findings = check_capacity(
        [
            queue("a", "h200", "nvidia.com/mig-1g.10gb", 1),
            queue("b", "unknown-pool", "nvidia.com/gpu", 1),
            # CPU-only flavors are not the fleet's business.
            queue("c", "cpu-only", "cpu", 64),
        ],
        FLEET,
    )
    assert [(f.rule, f.object) for f in findings] == [
        ("unknown-resource", "ClusterQueue/a"),
        ("unknown-resource", "ClusterQueue/b"),
    ]


def test_a_bad_quantity_is_reported() -> None:
    [finding] = check_capacity([queue("a", "h200", "nvidia.com/gpu", "eight")], FLEET)
    assert finding.rule == "quantity"


def test_cohort_quota_counts_and_v1beta1_queues_count() -> None:
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "gpu-fleet"},
        "spec": {
            "resourceGroups": queue("x", "h200", "nvidia.com/gpu", 10)["spec"]["resourceGroups"]
        },
    }
    old = queue("a", "h200", "nvidia.com/gpu", 7)
    old["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    [finding] = check_capacity([cohort, old], FLEET)
    assert "is 17" in finding.message
