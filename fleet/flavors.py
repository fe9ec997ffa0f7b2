"""The fleet's flavors as the nodes say they are.

A configured flavor keeps its name, mode and node labels (tenant queues refer to it) and takes
its size from the nodes that carry its labels: physical GPUs, MIG instances per profile, HAMi
slots per GPU. GPU nodes that match no flavor but carry a pool label form a new flavor named
after the pool. The Topology keeps the configured levels that every GPU node is labelled with,
since Kueue cannot place a pod by a level its nodes lack.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from fleet.models import Node
from gitops.render.resources import DEVICE_PLUGIN_LABEL, VGPU
from gitops.render.validate import DNS1123_LABEL, validate_fleet
from gitops.specs import Flavor, FleetSpec, SpecError

HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Derived:
    flavors: tuple[Flavor, ...]
    topology_levels: tuple[str, ...]
    notes: tuple[str, ...]


def _most_common(values: Sequence[int | str], default: int | str) -> int | str:
    counted = Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else default


def _is_gpu_node(node: Node) -> bool:
    return node.gpu_count > 0 or any(v > 0 for v in node.gpu_capacity.values())


def _hami_split(nodes: Sequence[Node], default: int) -> int:
    # A HAMi node advertises its GPUs' slots, split x GPUs, as nvidia.com/vgpu
    # (gitops.render.resources).
    splits = [
        int(n.gpu_capacity.get(VGPU, 0)) // n.gpu_count
        for n in nodes
        if n.gpu_count > 0 and int(n.gpu_capacity.get(VGPU, 0)) >= n.gpu_count
    ]
    return int(_most_common(splits, default))


def _mig_profiles(nodes: Sequence[Node]) -> tuple[tuple[str, int], ...]:
    totals: dict[str, int] = defaultdict(int)
    for node in nodes:
        for profile, count in node.mig_profiles.items():
            if isinstance(count, int) and count > 0:
                totals[str(profile)] += count
    return tuple(sorted(totals.items()))


def _sized(flavor: Flavor, nodes: Sequence[Node]) -> Flavor:
    changes: dict[str, object] = {
        "gpus": sum(n.gpu_count for n in nodes),
        "gpu_memory_mib": int(
            _most_common([n.gpu_memory_mib for n in nodes], flavor.gpu_memory_mib)
        ),
    }
    if flavor.mode == "mig":
        changes["mig_profiles"] = _mig_profiles(nodes) or flavor.mig_profiles
    if flavor.mode == "hami":
        changes["hami_split"] = _hami_split(nodes, flavor.hami_split)
    return dataclasses.replace(flavor, **changes)  # type: ignore[arg-type]


def derive_flavors(fleet: FleetSpec, nodes: Sequence[Node]) -> Derived:
    """Flavors and topology levels from the synced nodes; empty flavors when there are no GPU
    nodes at all (the caller then leaves the configuration alone)."""
    gpu_nodes = [n for n in nodes if _is_gpu_node(n)]
    if not gpu_nodes:
        return Derived((), fleet.topology_levels, ())
    notes: list[str] = []
    by_flavor: dict[str, list[Node]] = defaultdict(list)
    by_pool: dict[str, list[Node]] = defaultdict(list)
    for node in gpu_nodes:
        if node.flavor and fleet.flavor(node.flavor) is not None:
            by_flavor[node.flavor].append(node)
        elif node.pool:
            by_pool[node.pool].append(node)
        else:
            notes.append(
                f"Node {node.name} ({node.product or 'unknown GPU'}) has no "
                f"{settings.FLEET_POOL_LABEL} label and matches no flavor; its GPUs are in none."
            )
    flavors: list[Flavor] = []
    for flavor in fleet.flavors:
        members = by_flavor.get(flavor.name, [])
        if not members:
            notes.append(f"No node carries the labels of flavor {flavor.name}; it has 0 GPUs now.")
        flavors.append(_sized(flavor, members))
    for pool, members in sorted(by_pool.items()):
        new = _new_flavor(pool, members, fleet, notes)
        if new is not None:
            flavors.append(new)
    levels = tuple(
        level
        for level in fleet.topology_levels
        if level == HOSTNAME_LABEL or all(level in n.labels for n in gpu_nodes)
    )
    for level in fleet.topology_levels:
        if level not in levels:
            notes.append(f"Not every GPU node has the label {level}; the Topology leaves it out.")
    derived = dataclasses.replace(fleet, flavors=tuple(flavors), topology_levels=levels)
    try:
        validate_fleet(derived)
    except SpecError as exc:
        notes.append(f"The inventory does not make a valid fleet, so it was not used: {exc}")
        return Derived((), fleet.topology_levels, tuple(notes))
    return Derived(derived.flavors, levels, tuple(notes))


def _new_flavor(
    pool: str, members: Sequence[Node], fleet: FleetSpec, notes: list[str]
) -> Flavor | None:
    if not DNS1123_LABEL.fullmatch(pool) or len(pool) > 63 or fleet.flavor(pool) is not None:
        notes.append(f"Pool {pool!r} cannot name a flavor (not a DNS label, or taken).")
        return None
    products = {n.product for n in members}
    product = str(_most_common([n.product for n in members], ""))
    if not product or len(products) > 1:
        notes.append(
            f"Pool {pool} mixes or lacks GPU products ({', '.join(sorted(products)) or 'none'}); "
            "it was not made a flavor."
        )
        return None
    sharing = str(_most_common([n.sharing for n in members], "whole"))
    mode = sharing if sharing in ("mig", "hami", "dra") else "whole"
    labels: list[tuple[str, str]] = [(settings.FLEET_POOL_LABEL, pool)]
    if mode in ("dra", "hami"):
        # NVIDIA's device plugin off: the DRA driver or HAMi's plugin serves these GPUs.
        labels.append((DEVICE_PLUGIN_LABEL, "false"))
    flavor = Flavor(
        name=pool,
        product=product,
        mode=mode,  # type: ignore[arg-type]
        gpus=0,
        gpu_memory_mib=0,
        node_labels=tuple(labels),
    )
    notes.append(f"New pool {pool}: {len(members)} nodes of {product} ({mode}).")
    return _sized(flavor, members)
