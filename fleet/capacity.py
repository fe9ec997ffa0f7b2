"""GPU use per flavor, per node and per NVLink domain, from the synced rows (no queries).

The rows are a cache of whatever the API returned, so every amount is read defensively: a
resource map or a count that is not what it should be counts as 0 rather than breaking a page.

Each flavor is counted in the unit its pods ask for: whole GPUs (``nvidia.com/gpu``), MIG
slices per profile (``nvidia.com/mig-<profile>``), HAMi vGPU slots (``nvidia.com/vgpu``, which
a HAMi node advertises as split x GPUs; HAMi's memory and cores are no node's allocatable) or
GPUs handed out by the DRA driver (``gpu.nvidia.com``). A DRA node advertises no GPU resource
(its devices are in ResourceSlices, which the sync does not read), so its GPUs are the ones
GPU feature discovery counts, and what pods hold is what their ``gpu_requests`` say.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleet.inventory import (
    ACCELERATOR_READY,
    GPU,
    GPU_CONDITION_PREFIXES,
    GPU_CONDITION_TYPES,
    MIG_RESOURCE_PREFIX,
    VGPU,
)
from fleet.models import Health, Node, NodeReservation, Workload
from gitops.render.resources import DRA_GPU_CLASS
from gitops.specs import Flavor, FleetSpec

UNITS = {
    "whole": "GPUs",
    "mig": "MIG slices",
    "hami": "vGPU slots",
    "dra": "GPUs (DRA)",
    "time-slicing": "replicas",
}
# Modes whose GPUs are physical GPUs a multi-GPU pod can have to itself.
WHOLE_MODES = frozenset({"whole", "dra", ""})
# The resource each sharing mode (other than MIG's per-profile ones) is counted in.
MODE_RESOURCE = {"hami": VGPU, "dra": DRA_GPU_CLASS}
NO_DOMAIN = "no NVLink domain"
NO_RACK = "no rack"


def amount(resources: object, name: str) -> int:
    """A count from a JSON resource map; 0 when the map or the value is not a count."""
    if not isinstance(resources, Mapping):
        return 0
    value = resources.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(value, 0)


def resource_names(resources: object) -> set[str]:
    return {str(k) for k in resources} if isinstance(resources, Mapping) else set()


def available(node: Node) -> bool:
    """Whether the scheduler may place new pods on the node."""
    return not node.unschedulable and node.health != Health.UNHEALTHY


def is_gpu_condition(condition_type: object) -> bool:
    """A node condition that reports on the GPUs (highlighted on the node page)."""
    if not isinstance(condition_type, str):
        return False
    return (
        condition_type == ACCELERATOR_READY
        or condition_type in GPU_CONDITION_TYPES
        or condition_type.startswith(GPU_CONDITION_PREFIXES)
    )


def requests_by_node(workloads: Iterable[Workload]) -> dict[str, dict[str, int]]:
    """{node: {resource: requested}} over the workloads placed on a node."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for workload in workloads:
        if not workload.node:
            continue
        for resource in resource_names(workload.gpu_requests):
            totals[workload.node][resource] += amount(workload.gpu_requests, resource)
    return totals


def total_requests(workloads: Iterable[Workload]) -> dict[str, int]:
    """{resource: requested} summed over ``workloads``, in a stable order."""
    totals: Counter[str] = Counter()
    for workload in workloads:
        for resource in resource_names(workload.gpu_requests):
            totals[resource] += amount(workload.gpu_requests, resource)
    return {resource: totals[resource] for resource in sorted(totals) if totals[resource]}


# --- per flavor -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityRow:
    """One flavor (one MIG profile of a MIG flavor) split into what is used, what a new pod
    could get, and what sits on cordoned or unhealthy nodes (or on devices the plugin withdrew)
    unused."""

    flavor: str
    mode: str
    resource: str
    unit: str
    in_use: int
    free: int
    unavailable: int
    # Free on nodes reserved for a dedicated tenant (``fleet.reservations``): only its pods
    # may have it, so it is not the shared pool's free capacity.
    reserved: int = 0

    @property
    def total(self) -> int:
        return self.in_use + self.free + self.unavailable + self.reserved

    @property
    def label(self) -> str:
        if self.resource.startswith(MIG_RESOURCE_PREFIX):
            return f"{self.flavor} {self.resource.removeprefix(MIG_RESOURCE_PREFIX)}"
        return self.flavor


def _advertised(node: Node, resource: str, *, allocatable: bool) -> int:
    """What the node offers of ``resource``: its status, or GFD's GPU count on a DRA node."""
    if resource == DRA_GPU_CLASS:
        return node.gpu_count if node.sharing == "dra" else 0
    return amount(node.gpu_allocatable if allocatable else node.gpu_capacity, resource)


def _flavor_resources(flavor: Flavor, members: Sequence[Node]) -> list[str]:
    if flavor.mode != "mig":
        return [MODE_RESOURCE.get(flavor.mode, GPU)]
    names = {MIG_RESOURCE_PREFIX + profile for profile, _ in flavor.mig_profiles}
    for node in members:
        names |= resource_names(node.gpu_capacity) | resource_names(node.gpu_allocatable)
    return sorted(n for n in names if n.startswith(MIG_RESOURCE_PREFIX))


def capacity_rows(
    fleet: FleetSpec,
    nodes: Iterable[Node],
    workloads: Iterable[Workload],
    reserved_nodes: Collection[str] = (),
) -> list[CapacityRow]:
    """In use / free / unavailable / reserved per flavor, in the flavor's unit. Pods still
    running on a cordoned node count as in use; the rest of that node counts as unavailable.
    What is free on a node of ``reserved_nodes`` counts as reserved, not free."""
    requested = requests_by_node(workloads)
    by_flavor: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        by_flavor[node.flavor].append(node)
    rows = []
    for flavor in fleet.flavors:
        members = by_flavor.get(flavor.name, [])
        for resource in _flavor_resources(flavor, members):
            in_use = free = unavailable = reserved = 0
            for node in members:
                allocatable = _advertised(node, resource, allocatable=True)
                capacity = max(_advertised(node, resource, allocatable=False), allocatable)
                used = requested.get(node.name, {}).get(resource, 0)
                in_use += used
                if available(node):
                    if node.name in reserved_nodes:
                        reserved += max(allocatable - used, 0)
                    else:
                        free += max(allocatable - used, 0)
                    unavailable += max(capacity - max(allocatable, used), 0)
                else:
                    unavailable += max(capacity - used, 0)
            unit = UNITS.get(flavor.mode, "GPUs")
            rows.append(
                CapacityRow(
                    flavor.name, flavor.mode, resource, unit, in_use, free, unavailable, reserved
                )
            )
    return rows


# --- per node -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeUse:
    """A node with what its pods hold, in the unit of its GPU sharing mode."""

    node: Node
    unit: str
    used: int
    allocatable: int
    tenants: tuple[str, ...]
    whole_free: int  # whole GPUs a new pod could have: 0 on shared, cordoned or unhealthy nodes


def _node_resources(node: Node) -> set[str]:
    if node.sharing == "mig":
        names = resource_names(node.gpu_capacity) | resource_names(node.gpu_allocatable)
        return {n for n in names if n.startswith(MIG_RESOURCE_PREFIX)}
    return {MODE_RESOURCE.get(node.sharing, GPU)}


def node_uses(nodes: Iterable[Node], workloads: Iterable[Workload]) -> list[NodeUse]:
    """Each node's use, in the order given."""
    workloads = list(workloads)
    requested = requests_by_node(workloads)
    tenants: dict[str, set[str]] = defaultdict(set)
    for workload in workloads:
        if workload.node and workload.tenant_slug:
            tenants[workload.node].add(workload.tenant_slug)
    uses = []
    for node in nodes:
        resources = _node_resources(node)
        used = sum(requested.get(node.name, {}).get(r, 0) for r in resources)
        allocatable = sum(_advertised(node, r, allocatable=True) for r in resources)
        whole = node.sharing in WHOLE_MODES and available(node)
        uses.append(
            NodeUse(
                node=node,
                unit=UNITS.get(node.sharing, "GPUs"),
                used=used,
                allocatable=allocatable,
                tenants=tuple(sorted(tenants.get(node.name, ()))),
                whole_free=max(allocatable - used, 0) if whole else 0,
            )
        )
    return uses


def health_counts(nodes: Iterable[Node]) -> dict[str, int]:
    """Nodes per health value (anything unrecognised counts as unknown), and cordoned ones."""
    counts = dict.fromkeys([*Health.values, "cordoned"], 0)
    for node in nodes:
        counts[node.health if node.health in Health.values else Health.UNKNOWN] += 1
        counts["cordoned"] += int(node.unschedulable)
    return counts


# --- per NVLink domain ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rack:
    name: str
    nodes: tuple[NodeUse, ...]


@dataclass(frozen=True)
class Domain:
    """An NVLink domain: the most GPUs one multi-node job can have on one fabric."""

    name: str
    racks: tuple[Rack, ...]

    @property
    def uses(self) -> list[NodeUse]:
        return [use for rack in self.racks for use in rack.nodes]

    @property
    def total_gpus(self) -> int:
        return sum(use.node.gpu_count for use in self.uses)

    @property
    def free_gpus(self) -> int:
        return sum(use.whole_free for use in self.uses)

    @property
    def largest_free(self) -> int:
        """The most whole GPUs free on any one node of the domain."""
        return max((use.whole_free for use in self.uses), default=0)


def topology(uses: Iterable[NodeUse]) -> list[Domain]:
    """Nodes by NVLink domain, then rack; the nodes without a domain or rack come last."""
    grouped: dict[str, dict[str, list[NodeUse]]] = defaultdict(lambda: defaultdict(list))
    for use in uses:
        grouped[use.node.domain][use.node.rack].append(use)

    def last_if_empty(name: str) -> tuple[bool, str]:
        return (name == "", name)

    return [
        Domain(
            name=domain or NO_DOMAIN,
            racks=tuple(
                Rack(rack or NO_RACK, tuple(sorted(members, key=lambda u: u.node.name)))
                for rack, members in sorted(racks.items(), key=lambda kv: last_if_empty(kv[0]))
            ),
        )
        for domain, racks in sorted(grouped.items(), key=lambda kv: last_if_empty(kv[0]))
    ]


def domain_free_gpus(flavor: str) -> dict[str, int]:
    """Whole GPUs free now per NVLink domain on the nodes of ``flavor``, from the synced rows
    (empty when nothing is known)."""
    # Nodes reserved for a dedicated tenant are not the shared pool's (fleet.reservations).
    reserved = NodeReservation.objects.filter(released_at__isnull=True).values("node_name")
    nodes = Node.objects.filter(flavor=flavor).exclude(name__in=reserved)
    workloads = Workload.objects.filter(node__in=nodes.values("name"))
    return {domain.name: domain.free_gpus for domain in topology(node_uses(nodes, workloads))}
