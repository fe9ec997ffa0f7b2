"""Nodes of a dedicated tenant's own: what a reservation (``NodeReservation``) turns into.

A reserved node carries the label and the ``NoSchedule`` taint ``ai-factory.io/reserved-for:
<slug>`` (``node_marks``; nodes are no Flux objects, the portal applies them from main through
the Kubernetes API: ``fleet.reservations``). The tenant gets, in its own directory:

- a ResourceFlavor ``<pool>.<slug>`` per pool it has nodes of: the pool's node labels plus
  the reservation label (Kueue's nodeSelector for the pods it admits there) and, among its
  ``tolerations``, the reservation taint's. Kueue adds a flavor's ``tolerations`` and
  ``nodeLabels`` to the pods it admits on it (kueue v0.19.2 pkg/podset/podset.go
  ``FromAssignment`` appends ``flv.Spec.Tolerations``; ``Merge`` skips duplicates), so only
  pods admitted against the tenant's reserved quota tolerate the taint (the flavor needs no
  ``nodeTaints``: Kueue checks those against the pod's tolerations plus the flavor's own,
  pkg/scheduler/flavorassigner/flavorassigner.go, "untolerated taint ... in flavor");
- the flavor first in its ClusterQueue (Kueue tries a group's flavors in order, so the
  tenant's own nodes fill before shared ones), with the reserved GPUs as nominal quota and
  neither borrowing nor lending: no other queue lists the flavor;
- in its Kyverno policy, the rule that its pods tolerate the reservation key only with its
  own slug (``gitops.render.kyverno.reservation_rule``, on every tenant: a shared tenant's
  pods may not tolerate it at all, nor tolerate every taint with a key-less ``Exists``);
- in its clusters' vCluster values, the label in the synced pods' node selector and the
  toleration among ``enforceTolerations`` (``gitops.render.vcluster``), when every pool of
  the cluster is one it has nodes of.

The shared pool's own ResourceFlavor still selects the node by its pool labels; the taint
keeps every pod without the toleration off it (kube-scheduler's TaintToleration filter; Kueue's
topology-aware placement likewise skips a node whose taint the pod set does not tolerate,
kueue v0.19.2 pkg/cache/scheduler/scheduling_simulator_default.go, "excluding node with
untolerated taint"), and the capacity checks count the pool without the reserved GPUs
(``shared_gpus``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gitops.specs import Flavor, FleetSpec, TenantSpec

# On the node (label and taint), the ResourceFlavor and the pods' toleration. Tenants can set
# neither: nodes are the platform's, and the tenant policy refuses a toleration of another
# tenant's value (``gitops.render.kyverno``).
RESERVED_KEY = "ai-factory.io/reserved-for"


def flavor_name(pool: str, slug: str) -> str:
    """The tenant-exclusive flavor of its nodes of ``pool``: dotted, so it can never be the
    name of a fleet flavor (a DNS label)."""
    return f"{pool}.{slug}"


def pool_of(flavor: str, fleet: FleetSpec) -> str | None:
    """The fleet pool a tenant's own flavor (``<pool>.<slug>``) draws on, or None when
    ``flavor`` is not one."""
    pool, dot, slug = flavor.partition(".")
    return pool if dot and slug and fleet.flavor(pool) is not None else None


def taint(slug: str) -> dict[str, str]:
    return {"key": RESERVED_KEY, "value": slug, "effect": "NoSchedule"}


def toleration(slug: str) -> dict[str, str]:
    return {"key": RESERVED_KEY, "operator": "Equal", "value": slug, "effect": "NoSchedule"}


def reserved_gpus(tenant: TenantSpec) -> dict[str, int]:
    """GPUs the tenant has reserved, by pool (fleet flavor name)."""
    totals: dict[str, int] = defaultdict(int)
    for reservation in tenant.reservations:
        totals[reservation.flavor] += reservation.gpus
    return dict(totals)


def tenant_flavors(tenant: TenantSpec, fleet: FleetSpec) -> list[tuple[Flavor, int]]:
    """The tenant's own flavors with their GPUs, in fleet order: each its pool with the
    reservation label added to its node labels and the reserved GPUs as its size."""
    gpus = reserved_gpus(tenant)
    out = []
    for pool in fleet.flavors:
        if pool.name in gpus:
            own = replace(
                pool,
                name=flavor_name(pool.name, tenant.slug),
                gpus=gpus[pool.name],
                node_labels=(*pool.node_labels, (RESERVED_KEY, tenant.slug)),
            )
            out.append((own, gpus[pool.name]))
    return out


def shared_gpus(fleet: FleetSpec, tenants: Iterable[TenantSpec]) -> dict[str, int]:
    """Per fleet flavor, the GPUs left to share once ``tenants``' reserved nodes are out."""
    left = {flavor.name: flavor.gpus for flavor in fleet.flavors}
    for tenant in tenants:
        for pool, gpus in reserved_gpus(tenant).items():
            if pool in left:
                left[pool] -= gpus
    return left


def node_marks(tenants: Iterable[TenantSpec]) -> dict[str, str]:
    """Node name -> the tenant it is reserved for, over ``tenants`` (what main holds)."""
    return {r.name: tenant.slug for tenant in tenants for r in tenant.reservations}


def reserved_by_others(slug: str, marks: Mapping[str, str]) -> dict[str, str]:
    """The nodes of ``marks`` reserved for another tenant than ``slug``."""
    return {node: owner for node, owner in marks.items() if owner != slug}
