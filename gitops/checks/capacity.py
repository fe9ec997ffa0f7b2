"""Guaranteed GPU quota must fit in the fleet.

Every Kueue ClusterQueue (and Cohort) promises its ``nominalQuota`` per flavor and resource;
Kueue does not check that the promises of all queues fit in the nodes, so a change that
over-promises merges quietly and tenants find out when their jobs wait. This check sums the
nominal quotas of the whole tree per (flavor, resource) and compares them with the pool each
``gitops.specs.Flavor`` describes. ``borrowingLimit`` is left out: borrowing only uses what
others lend and never adds to what is promised. A dedicated tenant's own flavor
(``<pool>.<slug>``, ``gitops.render.reservations``) draws on its pool: the reserved nodes' GPUs
and the shared quota on the pool add up to the pool's size, so a reservation leaves the shared
pool smaller. A node reserved for two tenants (their spec files on main) is an error.

Capacity per flavor mode:

- ``whole``: ``nvidia.com/gpu`` = GPUs;
- ``mig``: ``nvidia.com/mig-<profile>`` = the slices of that profile;
- ``hami``: ``nvidia.com/vgpu`` = GPUs x ``hami_split`` vGPU slots, ``nvidia.com/gpumem`` =
  GPUs x memory MiB, ``nvidia.com/gpucores`` = GPUs x 100 (percent);
- ``dra``: Kueue counts DRA devices under the resource its ``deviceClassMappings`` names
  after the DeviceClass (``gitops.render.resources``): ``gpu.nvidia.com`` = GPUs, or
  ``mig.nvidia.com`` = all the MIG devices of a pool that lists MIG profiles. A DRA pool
  has no device plugin (``gitops.specs.Flavor``), so no device-plugin resource shares its
  devices, and DRA quota on another kind of pool has nothing to draw on.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from gitops.checks.findings import Finding, mapping, object_ref, sequence
from gitops.checks.manifests import iter_objects
from gitops.render.reservations import pool_of
from gitops.render.resources import (
    DRA_GPU_CLASS,
    DRA_MIG_CLASS,
    GPU,
    GPUCORES,
    GPUMEM,
    VGPU,
    mig_resource,
)
from gitops.specs import Flavor, FleetSpec

KUEUE_GROUP = "kueue.x-k8s.io"
QUOTA_KINDS = frozenset({"ClusterQueue", "Cohort"})
# Resources that are accelerators: quota for them on a flavor that lacks them is an error.
ACCELERATOR_PREFIXES = ("nvidia.com/", DRA_GPU_CLASS, DRA_MIG_CLASS)


@dataclass(frozen=True)
class Pool:
    """Devices of one flavor that several resource names draw on."""

    flavor: str
    resources: frozenset[str]
    capacity: Decimal
    unit: str


def flavor_pools(flavor: Flavor) -> list[Pool]:
    def pool(resources: Iterable[str], capacity: int, unit: str) -> Pool:
        return Pool(flavor.name, frozenset(resources), Decimal(capacity), unit)

    pools: list[Pool] = []
    if flavor.mode == "whole":
        pools.append(pool({GPU}, flavor.gpus, "GPUs"))
    elif flavor.mode == "mig":
        for profile, slices in flavor.mig_profiles:
            pools.append(pool({mig_resource(profile)}, slices, f"{profile} MIG devices"))
    elif flavor.mode == "hami":
        pools.append(pool({VGPU}, flavor.gpus * flavor.hami_split, "vGPU slots"))
        pools.append(pool({GPUMEM}, flavor.gpus * flavor.gpu_memory_mib, "MiB"))
        pools.append(pool({GPUCORES}, flavor.gpus * 100, "% of a GPU's cores"))
    elif flavor.mig_profiles:
        total = sum(slices for _, slices in flavor.mig_profiles)
        pools.append(pool({DRA_MIG_CLASS}, total, "MIG devices (DRA)"))
    else:
        pools.append(pool({DRA_GPU_CLASS}, flavor.gpus, "GPUs (DRA)"))
    return pools


@dataclass(frozen=True)
class Quota:
    path: str
    queue: str
    flavor: str
    resource: str
    amount: Decimal


def check_capacity(
    source: Mapping[str, bytes] | Iterable[Mapping[str, Any]],
    fleet: FleetSpec,
    *,
    allow_overcommit: bool = False,
) -> list[Finding]:
    """Findings for every pool whose nominal quota exceeds its capacity.

    ``source`` is a repository tree (``{path: bytes}``) or the ClusterQueue/Cohort objects.
    With ``allow_overcommit`` (an admin's explicit decision on the change) an overcommit is a
    warning, still listed for the reviewer.
    """
    quotas, findings = nominal_quotas(source)
    return capacity_findings(quotas, findings, fleet, allow_overcommit=allow_overcommit)


def capacity_findings(
    quotas: list[Quota], findings: list[Finding], fleet: FleetSpec, *, allow_overcommit: bool
) -> list[Finding]:
    """``check_capacity`` on quotas already collected (``nominal_quotas``), with the findings
    collecting them gave."""
    findings = list(findings)
    quotas = [
        dataclasses.replace(quota, flavor=drawn)
        if (drawn := pool_of(quota.flavor, fleet))
        else quota
        for quota in quotas
    ]
    pools = [pool for flavor in fleet.flavors for pool in flavor_pools(flavor)]
    covered = {(pool.flavor, name) for pool in pools for name in pool.resources}
    flavors = {flavor.name for flavor in fleet.flavors}

    for quota in quotas:
        if (quota.flavor, quota.resource) in covered or not quota.resource.startswith(
            ACCELERATOR_PREFIXES
        ):
            continue
        if quota.amount == 0:
            # Kueue needs every flavor of a resource group to list every covered resource, so
            # a flavor carries zero quota for GPU resources it does not provide.
            continue
        if quota.flavor not in flavors:
            message = f"flavor {quota.flavor!r} is not a GPU flavor of fleet {fleet.name!r}"
        else:
            message = f"flavor {quota.flavor!r} provides no {quota.resource!r}"
        findings.append(
            Finding(quota.path, quota.queue, "unknown-resource", f"{message} ({quota.resource})")
        )

    for pool in pools:
        parts = [q for q in quotas if q.flavor == pool.flavor and q.resource in pool.resources]
        total = sum((q.amount for q in parts), Decimal(0))
        if total <= pool.capacity:
            continue
        by_queue: dict[str, Decimal] = defaultdict(Decimal)
        for q in parts:
            by_queue[q.queue] += q.amount
        shares = ", ".join(f"{queue} {_fmt(amount)}" for queue, amount in sorted(by_queue.items()))
        resources = " + ".join(sorted(pool.resources))
        findings.append(
            Finding(
                path=parts[0].path if len({q.path for q in parts}) == 1 else "",
                object=f"ResourceFlavor/{pool.flavor}",
                rule="overcommit",
                message=(
                    f"nominal quota of {resources} is {_fmt(total)} but the pool has "
                    f"{_fmt(pool.capacity)} {pool.unit} ({shares})"
                    + ("; allowed by an administrator" if allow_overcommit else "")
                ),
                severity="warning" if allow_overcommit else "error",
            )
        )
    return findings


def nominal_quotas(
    source: Mapping[str, bytes] | Iterable[Mapping[str, Any]],
) -> tuple[list[Quota], list[Finding]]:
    items: list[tuple[str, Mapping[str, Any]]]
    if isinstance(source, Mapping):
        objects, _ = iter_objects(source)
        items = [(item.path, item.obj) for item in objects]
    else:
        items = [("", obj) for obj in source]
    quotas: list[Quota] = []
    findings: list[Finding] = []
    for path, obj in items:
        if str(obj.get("kind")) not in QUOTA_KINDS:
            continue
        if not str(obj.get("apiVersion", "")).startswith(f"{KUEUE_GROUP}/"):
            continue
        queue = object_ref(obj)
        spec = mapping(obj.get("spec"))
        for group in sequence(spec.get("resourceGroups")):
            for flavor in sequence(mapping(group).get("flavors")):
                for resource in sequence(mapping(flavor).get("resources")):
                    if not isinstance(resource, dict) or "nominalQuota" not in resource:
                        continue
                    try:
                        amount = Decimal(parse_quantity(resource["nominalQuota"]))
                    except (ValueError, TypeError) as exc:
                        findings.append(Finding(path, queue, "quantity", f"nominalQuota: {exc}"))
                        continue
                    quotas.append(
                        Quota(
                            path,
                            queue,
                            str(flavor.get("name")),
                            str(resource.get("name")),
                            amount,
                        )
                    )
    return quotas, findings


_RESERVATION = re.compile(r"^tenants/([^/]+)/spec/reservations/([^/]+)\.json$")


@dataclass(frozen=True)
class Claim:
    """A node a tenant's spec reserves (``tenants/<slug>/spec/reservations/<node>.json``)."""

    path: str
    node: str
    tenant: str


def reservation_claims(files: Mapping[str, bytes]) -> list[Claim]:
    claims = []
    for path in sorted(files):
        match = _RESERVATION.match(path)
        if match:
            try:
                node = json.loads(files[path]).get("name", match.group(2))
            except (ValueError, AttributeError):
                node = match.group(2)  # the spec's own parser reports the file
            claims.append(Claim(path, str(node), match.group(1)))
    return claims


def reservation_findings(claims: Iterable[Claim]) -> list[Finding]:
    """A node reserved for more than one tenant."""
    by_node: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        by_node[claim.node].append(claim)
    findings = []
    for node, found in sorted(by_node.items()):
        tenants = sorted({c.tenant for c in found})
        if len(tenants) > 1:
            findings.append(
                Finding(
                    found[-1].path,
                    f"Node/{node}",
                    "node-reserved-twice",
                    f"node {node} is reserved for {' and '.join(tenants)}; a node has one owner",
                )
            )
    return findings


def _fmt(value: Decimal) -> str:
    return str(value.to_integral_value()) if value == value.to_integral_value() else str(value)
