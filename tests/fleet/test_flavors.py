"""Flavors from the live inventory: sizes from the nodes, new pools, topology, the pull request."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from fleet import services
from fleet.flavors import derive_flavors
from fleet.models import Node, SyncState
from gitops import services as gitops_services
from gitops.fleet import configured_fleet, demo_fleet
from gitops.models import ChangeRequest, FleetInventory
from portal.models import AuditEvent

POOL = "ai-factory.io/pool"
LEVELS = {
    "network.topology.kubernetes.io/block": "block-a",
    "network.topology.kubernetes.io/rack": "rack-1",
}


def _node(name: str, pool: str, *, flavor: str = "", **fields: Any) -> Node:
    labels = {POOL: pool, "kubernetes.io/hostname": name, **LEVELS, **fields.pop("labels", {})}
    defaults: dict[str, Any] = {
        "pool": pool,
        "flavor": flavor,
        "product": "NVIDIA-H200",
        "gpu_count": 8,
        "gpu_memory_mib": 143771,
        "sharing": "whole",
        "gpu_capacity": {"nvidia.com/gpu": 8},
        "labels": labels,
    }
    defaults.update(fields)
    return Node.objects.create(name=name, **defaults)


def _demo_nodes(whole: int = 8, hami_split: int = 10) -> None:
    for i in range(whole):
        _node(f"h200-{i:02}", "h200", flavor="h200")
    for i in range(2):
        _node(
            f"mig-{i}",
            "h200-mig",
            flavor="h200-mig",
            sharing="mig",
            gpu_capacity={"nvidia.com/mig-1g.18gb": 16},
            mig_profiles={"1g.18gb": 16, "2g.35gb": 8, "3g.71gb": 8},
        )
    for i in range(4):
        _node(
            f"hami-{i}",
            "h200-hami",
            flavor="h200-hami",
            sharing="hami",
            # HAMi advertises its slots as nvidia.com/vgpu; memory and cores are not allocatable.
            gpu_capacity={"nvidia.com/vgpu": 8 * hami_split},
        )
    for i in range(2):
        _node(
            f"dra-{i}",
            "h200-dra",
            flavor="h200-dra",
            sharing="dra",
            gpu_capacity={},
            labels={"nvidia.com/gpu.deploy.device-plugin": "false"},
        )


def _synced() -> None:
    SyncState.objects.update_or_create(
        source="nodes", defaults={"last_success": timezone.now(), "error": ""}
    )


@pytest.mark.django_db
def test_it_sizes_the_configured_flavors_from_the_nodes() -> None:
    _demo_nodes(whole=7, hami_split=5)
    derived = derive_flavors(demo_fleet(), list(Node.objects.all()))
    sizes = {f.name: f for f in derived.flavors}
    assert sizes["h200"].gpus == 56  # one node fewer than configured
    assert dict(sizes["h200-mig"].mig_profiles) == {"1g.18gb": 32, "2g.35gb": 16, "3g.71gb": 16}
    # The split comes from the nodes' nvidia.com/vgpu: 40 slots on 8 GPUs.
    assert sizes["h200-hami"].hami_split == 5
    # DRA nodes advertise no GPU resource; GFD's count sizes the pool.
    assert (sizes["h200-dra"].mode, sizes["h200-dra"].gpus) == ("dra", 16)
    assert derived.topology_levels == demo_fleet().topology_levels


@pytest.mark.django_db
def test_it_adds_new_pools_and_notes_what_it_cannot_place() -> None:
    _demo_nodes()
    _node("l40s-1", "l40s", product="NVIDIA-L40S", gpu_count=4, gpu_memory_mib=46068)
    _node("stray", "", product="", gpu_count=2)
    _node("bad", "Not_A_Label", product="NVIDIA-L4", gpu_count=1)
    derived = derive_flavors(demo_fleet(), list(Node.objects.all()))
    new = next(f for f in derived.flavors if f.name == "l40s")
    assert (new.product, new.gpus, new.mode, dict(new.node_labels)) == (
        "NVIDIA-L40S",
        4,
        "whole",
        {POOL: "l40s"},
    )
    notes = " ".join(derived.notes)
    assert not any("not used" in note for note in derived.notes), notes
    assert "Node stray (unknown GPU) has no ai-factory.io/pool label" in notes
    assert "'Not_A_Label' cannot name a flavor" in notes


@pytest.mark.django_db
def test_it_makes_a_new_pool_without_a_device_plugin_a_dra_flavor() -> None:
    _demo_nodes()
    _node(
        "b200-1",
        "b200-dra",
        product="NVIDIA-B200",
        sharing="dra",
        gpu_capacity={},
        labels={"nvidia.com/gpu.deploy.device-plugin": "false"},
    )
    derived = derive_flavors(demo_fleet(), list(Node.objects.all()))
    new = next(f for f in derived.flavors if f.name == "b200-dra")
    assert (new.mode, new.gpus, dict(new.node_labels)) == (
        "dra",
        8,
        {POOL: "b200-dra", "nvidia.com/gpu.deploy.device-plugin": "false"},
    )


@pytest.mark.django_db
def test_it_drops_topology_levels_some_gpu_nodes_lack() -> None:
    _demo_nodes()
    _node("h200-bare", "h200", flavor="h200", labels={"network.topology.kubernetes.io/rack": ""})
    node = Node.objects.get(name="h200-bare")
    node.labels = {POOL: "h200", "kubernetes.io/hostname": "h200-bare"}
    node.save()
    derived = derive_flavors(demo_fleet(), list(Node.objects.all()))
    assert derived.topology_levels == ("kubernetes.io/hostname",)
    assert any("network.topology.kubernetes.io/block" in note for note in derived.notes)


@pytest.mark.django_db
def test_it_changes_nothing_without_gpu_nodes_or_fresh_data(world: dict[str, Any]) -> None:
    change, notes = services.do_reconcile_flavors(acting_user=world["pam"])
    assert change is None and "stale" in notes[0]
    _synced()
    change, notes = services.do_reconcile_flavors(acting_user=world["pam"])
    assert change is None and "No GPU nodes" in notes[-1]
    assert not FleetInventory.objects.exists()


@pytest.mark.django_db
def test_it_stores_counts_and_opens_one_pull_request_for_new_flavors(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    gitops_services.ensure_bootstrapped(configured_fleet())
    _demo_nodes(whole=7)
    _synced()
    with django_capture_on_commit_callbacks(execute=True):
        change, _ = services.do_reconcile_flavors(acting_user=world["pam"])
    # Sizes alone change no manifest: stored and audited, no pull request.
    assert change is None
    assert configured_fleet().flavor("h200").gpus == 56  # type: ignore[union-attr]
    assert AuditEvent.objects.filter(action="fleet.inventory").count() == 1

    _node("l40s-1", "l40s", product="NVIDIA-L40S", gpu_count=4, gpu_memory_mib=46068)
    with django_capture_on_commit_callbacks(execute=True):
        change, _ = services.do_reconcile_flavors(acting_user=world["pam"])
    assert change is not None and change.kind == "platform"
    assert change.files_changed == ["infrastructure/configs/kueue.yaml"]
    kueue = gitops_services.repository().read_file(change.head_sha, change.files_changed[0])
    assert b"name: l40s" in (kueue or b"")
    # Asking again with the same inventory keeps the same pull request.
    with django_capture_on_commit_callbacks(execute=True):
        again, _ = services.do_reconcile_flavors(acting_user=world["pam"])
    assert again is not None and again.pk == change.pk
    # A different inventory supersedes it.
    _node("l40s-2", "l40s", product="NVIDIA-L40S", gpu_count=4, gpu_memory_mib=46068)
    Node.objects.filter(name="h200-bare").delete()
    _node("l4-1", "l4", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    with django_capture_on_commit_callbacks(execute=True):
        newer, _ = services.do_reconcile_flavors(acting_user=world["pam"])
    assert newer is not None and newer.pk != change.pk
    change.refresh_from_db()
    assert change.status == "closed"
    assert ChangeRequest.objects.filter(status="open", kind="platform").count() == 1


@pytest.mark.django_db
def test_a_new_hami_pool_selects_nodes_without_nvidias_device_plugin() -> None:
    # Issue 26 finding 10: validate_fleet refuses a HAMi pool without the label.
    _demo_nodes()
    _node(
        "l40s-hami-1",
        "l40s-hami",
        product="NVIDIA-L40S",
        sharing="hami",
        gpu_capacity={"nvidia.com/vgpu": 32},
        labels={"nvidia.com/gpu.deploy.device-plugin": "false"},
    )
    derived = derive_flavors(demo_fleet(), list(Node.objects.all()))
    new = next(f for f in derived.flavors if f.name == "l40s-hami")
    assert new.mode == "hami"
    assert dict(new.node_labels) == {
        POOL: "l40s-hami",
        "nvidia.com/gpu.deploy.device-plugin": "false",
    }
