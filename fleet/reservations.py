"""Whole nodes reserved for dedicated tenants: asking for them, giving them back, and marking
the nodes as main says.

A reservation is part of what Git holds: the tenant's spec on main lists its nodes
(``tenants/<slug>/spec/reservations/<node>.json``, ``gitops.specs.NodeReservation``), and the
tenant's directory is rendered from that (``gitops.render.reservations``: its own flavor and
queue entry, the toleration rule, its clusters' values). A platform admin asks through
``do_reserve_nodes`` / ``do_release_nodes``: each opens a platform change of the tenant,
rendered from main's spec plus the request, reviewed and checked like any other; merging it
makes it real.

Nodes are no Flux objects, so the node label and taint ``ai-factory.io/reserved-for=<slug>``
are applied by the portal through the Kubernetes API from what main holds (``apply_marks``,
run by every fleet sync, like the remediation cordon): each patch is audited, and a mark
someone removed or changed by hand is put back at the next sync. The portal's write-scope
policy lets its account change that label and taint on GPU nodes and nothing else
(``gitops.render.portal.write_scope_policy``). Why not a Flux-applied partial Node: a Flux
Kustomization applies with server-side apply and prunes what it applied when the file goes
(docs/architecture.md, "Reserved nodes"), and a node is not the repository's to create or
delete.

Bad input is refused with a reason and nothing is written: a tenant that is not dedicated or
not on main yet, an unknown node, a node of a pool that is not whole-GPU (or no GPU node), a
node already reserved (on main or by a change still open, or being drained to be reserved),
and a node that runs another tenant's work. Releasing refuses while the tenant's own work runs
there. Either is possible after a drain the admin confirms: ``fleet.remediation.do_drain_then``
cordons and drains the node through the remediation loop, which then opens the change here
(``drained=True``) and uncordons the node once main holds it and the node is marked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fleet.kube import Kube
from fleet.models import Node, NodeReservation, Remediation, Workload
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.render.reservations import RESERVED_KEY, taint
from gitops.specs import NodeReservation as ReservedNode
from gitops.specs import SpecError, TenantSpec
from portal.audit import record_audit
from tenants.access import Action, require

logger = logging.getLogger(__name__)

RESERVE_TITLE = "Reserve {nodes} for {slug}"
RELEASE_TITLE = "Release {nodes} from {slug}"
# Pods that have finished hold nothing on the node.
DONE = ("Succeeded", "Failed")
# The signals of a remediation incident that drains a node an admin reserves or releases
# (``fleet.remediation.do_drain_then``).
DRAIN_RESERVE, DRAIN_RELEASE = "reservation", "release"


def _names(nodes: Iterable[str]) -> str:
    return ", ".join(sorted(nodes))


def _spec_error(exc: SpecError) -> ValidationError:
    return ValidationError([f"{key}: {message}" for key, message in sorted(exc.errors.items())])


def _pending() -> dict[str, str]:
    """Nodes a reservation change still open asks for -> the tenant."""
    rows = NodeReservation.objects.filter(
        accepted_at__isnull=True, released_at__isnull=True, change__status=ChangeRequest.Status.OPEN
    )
    return {r.node_name: r.tenant_slug for r in rows}


def _others_work(node: str, slug: str) -> list[str]:
    """``namespace/name`` of pods of other namespaces than ``slug``'s running on ``node`` (as
    the last sync saw them)."""
    pods = Workload.objects.filter(node=node).exclude(namespace=slug).exclude(phase__in=DONE)
    return [str(pod) for pod in pods.order_by("namespace", "name")]


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What a reservation needs to know of a node: its pool (portal flavor), GPUs, model."""

    flavor: str
    gpus: int
    product: str


def inventory_facts(names: Iterable[str]) -> dict[str, NodeFacts]:
    """The facts of the nodes ``names`` as the inventory (the last sync) has them."""
    return {
        node.name: NodeFacts(node.flavor, node.gpu_count, node.product)
        for node in Node.objects.filter(name__in=list(names))
    }


def draining_for() -> dict[str, str]:
    """Nodes a confirmed drain empties before they are reserved -> the tenant
    (``fleet.remediation.do_drain_then``): no one else may ask for them meanwhile."""
    rows = Remediation.objects.filter(closed_at__isnull=True, signal=DRAIN_RESERVE)
    return dict(rows.values_list("node_name", "reserve_tenant"))


def check_reserve(
    slug: str,
    wanted: list[str],
    *,
    inventory: Mapping[str, NodeFacts] | None = None,
    busy_ok: bool = False,
) -> tuple[TenantSpec, list[ReservedNode], Mapping[str, NodeFacts]]:
    """What reserving ``wanted`` for ``slug`` adds to main's spec, or a ``ValidationError``
    naming each refused node. Call it while reading main. ``busy_ok``: other tenants' work on
    a node is no refusal (a confirmed drain empties it first, or just did)."""
    if not wanted:
        raise ValidationError("Choose at least one node.")
    fleet = configured_fleet()
    # The tenant as main holds it: its trust level there is what the render checks.
    on_main = gitops.tenant_spec_on_main(slug)
    if on_main is None:
        raise ValidationError(
            f"There is no tenant {slug!r} on main; reserve nodes once it is onboarded."
        )
    if on_main.trust_level != "dedicated":
        raise ValidationError(
            f"{slug} is a {on_main.trust_level} tenant; only a dedicated tenant gets nodes "
            "of its own. Change its trust level first."
        )
    taken = {node: owner for node, (owner, _) in gitops.reservations_on_main().items()}
    pending = _pending()
    draining = {} if busy_ok else draining_for()
    facts = inventory if inventory is not None else inventory_facts(wanted)
    errors: list[str] = []
    added: list[ReservedNode] = []
    for name in wanted:
        node = facts.get(name)
        pool = fleet.flavor(node.flavor) if node is not None else None
        if node is None:
            errors.append(f"{name}: there is no such node in the inventory.")
        elif pool is None or not node.gpus:
            errors.append(f"{name}: not a node of a GPU pool; only GPU nodes are reserved.")
        elif pool.mode != "whole":
            errors.append(
                f"{name}: a node of the {pool.name} pool ({pool.mode}); nodes are reserved "
                "from whole-GPU pools."
            )
        elif name in taken:
            owner = taken[name]
            whose = "this tenant" if owner == slug else owner
            errors.append(f"{name}: already reserved for {whose}.")
        elif name in pending:
            errors.append(f"{name}: an open change already reserves it for {pending[name]}.")
        elif name in draining:
            errors.append(f"{name}: being drained to be reserved for {draining[name]}.")
        elif not busy_ok and (busy := _others_work(name, slug)):
            errors.append(
                f"{name}: runs other tenants' work ({', '.join(busy[:3])}"
                f'{", ..." if len(busy) > 3 else ""}); drain it first (tick "Drain first").'
            )
        else:
            added.append(ReservedNode(name=name, flavor=pool.name, gpus=node.gpus))
    if errors:
        raise ValidationError(errors)
    return on_main, added, facts


@transaction.atomic
def do_reserve_nodes(
    slug: str,
    nodes: Iterable[str],
    *,
    acting_user: Any,
    inventory: Mapping[str, NodeFacts] | None = None,
    drained: bool = False,
) -> ChangeRequest:
    """Open the change that reserves ``nodes`` (whole GPU nodes) for the dedicated tenant
    ``slug``; a ``ValidationError`` naming each refused node otherwise, and nothing written.
    ``inventory``: the nodes' facts when no sync has read them yet (the demo's seed, from the
    simulator's configuration); by default the inventory's. ``drained``: a confirmed drain
    just emptied the (cordoned) nodes, as the live pod list said; the inventory's pod rows may
    lag behind it."""
    require(acting_user, Action.OPERATE_FLEET)
    wanted = sorted(set(nodes))
    fleet = configured_fleet()
    with gitops.reading_main():
        on_main, added, facts = check_reserve(slug, wanted, inventory=inventory, busy_ok=drained)
        spec = dataclasses.replace(on_main, reservations=(*on_main.reservations, *added))
        try:
            changes = gitops.tenant_changes(spec, fleet)
        except SpecError as exc:
            raise _spec_error(exc) from exc
        gpus = sum(r.gpus for r in added)
        change = gitops.open_change(
            acting_user=acting_user,
            title=RESERVE_TITLE.format(nodes=_names(wanted), slug=slug),
            changes=changes,
            kind=ChangeRequest.Kind.PLATFORM,
            tenant_slug=slug,
            scope=[f"reservations/{name}" for name in wanted],
            description=(
                f"Whole nodes of {slug}'s own: {_names(wanted)} ({gpus} GPUs). Once merged the "
                f"portal labels and taints them {RESERVED_KEY}={slug}; only {slug}'s pods may "
                "tolerate that taint, and its queue uses them first."
            ),
        )
    # A request whose change was closed unmerged, not yet followed: it held nothing.
    NodeReservation.objects.filter(
        node_name__in=wanted, accepted_at__isnull=True, released_at__isnull=True
    ).exclude(change__status=ChangeRequest.Status.OPEN).delete()
    for reservation in added:
        NodeReservation.objects.create(
            node_name=reservation.name,
            tenant_slug=slug,
            flavor=reservation.flavor,
            gpu_product=facts[reservation.name].product,
            gpus=reservation.gpus,
            change=change,
            requested_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
    record_audit(
        actor=acting_user,
        action="fleet.reserve_nodes",
        target=change,
        tenant_slug=slug,
        diff={"reserved": [None, _names(wanted)]},
    )
    return change


def check_release(slug: str, wanted: list[str], *, busy_ok: bool = False) -> TenantSpec:
    """Main's spec of ``slug`` when ``wanted`` may be released, or a ``ValidationError``
    naming each refused node. Call it while reading main. ``busy_ok``: the tenant's work there
    is no refusal (a confirmed drain empties the node first, or just did)."""
    if not wanted:
        raise ValidationError("Choose at least one node.")
    on_main = gitops.tenant_spec_on_main(slug)
    held = {r.name for r in on_main.reservations} if on_main is not None else set()
    errors = [f"{n}: not reserved for {slug} on main." for n in wanted if n not in held]
    releasing = set(
        NodeReservation.objects.filter(
            node_name__in=wanted, released_at__isnull=True, release_change__isnull=False
        ).values_list("node_name", flat=True)
    )
    errors += [f"{n}: an open change already releases it." for n in sorted(releasing)]
    for name in wanted:
        running = Workload.objects.filter(node=name, namespace=slug).exclude(phase__in=DONE)
        if not busy_ok and name in held and running.exists():
            errors.append(
                f"{name}: {slug}'s work still runs there ({running.count()} pods); drain the "
                'node first (the "Drain, then release" button).'
            )
    if errors or on_main is None:
        raise ValidationError(errors)
    return on_main


@transaction.atomic
def do_release_nodes(
    slug: str, nodes: Iterable[str], *, acting_user: Any, drained: bool = False
) -> ChangeRequest:
    """Open the change that gives ``nodes`` back to the shared pool. Refused while the
    tenant's own work runs on one of them (drain the node first); ``drained``: a confirmed
    drain just emptied them, as the live pod list said."""
    require(acting_user, Action.OPERATE_FLEET)
    wanted = sorted(set(nodes))
    fleet = configured_fleet()
    with gitops.reading_main():
        on_main = check_release(slug, wanted, busy_ok=drained)
        spec = dataclasses.replace(
            on_main, reservations=tuple(r for r in on_main.reservations if r.name not in wanted)
        )
        try:
            changes = gitops.tenant_changes(spec, fleet)
        except SpecError as exc:
            raise _spec_error(exc) from exc
        change = gitops.open_change(
            acting_user=acting_user,
            title=RELEASE_TITLE.format(nodes=_names(wanted), slug=slug),
            changes=changes,
            kind=ChangeRequest.Kind.PLATFORM,
            tenant_slug=slug,
            scope=[f"reservations/{name}" for name in wanted],
            description=(
                f"{_names(wanted)} go back to the shared pool. Once merged the portal takes the "
                f"{RESERVED_KEY} label and taint off them."
            ),
        )
    NodeReservation.objects.filter(
        node_name__in=wanted, tenant_slug=slug, released_at__isnull=True
    ).update(release_change=change)
    record_audit(
        actor=acting_user,
        action="fleet.release_nodes",
        target=change,
        tenant_slug=slug,
        diff={"reserved": [_names(wanted), None]},
    )
    return change


# --- main -> the nodes ---------------------------------------------------------------------------


def node_patch(obj: Mapping[str, Any], owner: str | None) -> list[dict[str, Any]] | None:
    """The JSON patch that makes the node ``obj`` (as the API returns it) carry the mark of
    ``owner`` (None: no mark), or None when it already does. Other labels and taints stay as
    they are, in order; the patch tests the resourceVersion, so a node changed meanwhile
    (a taint the node controller added) is refused and patched again at the next sync."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    taints = (obj.get("spec") or {}).get("taints") or []
    others = [t for t in taints if t.get("key") != RESERVED_KEY]
    wanted_taints = [*others, taint(owner)] if owner else others
    ops: list[dict[str, Any]] = []
    label_path = "/metadata/labels/" + RESERVED_KEY.replace("~", "~0").replace("/", "~1")
    if owner and labels.get(RESERVED_KEY) != owner:
        if "labels" not in metadata:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
        ops.append({"op": "add", "path": label_path, "value": owner})
    elif not owner and RESERVED_KEY in labels:
        ops.append({"op": "remove", "path": label_path})
    mine = [t for t in taints if t.get("key") == RESERVED_KEY]
    if mine != ([taint(owner)] if owner else []):
        ops.append({"op": "add", "path": "/spec/taints", "value": wanted_taints})
    if not ops:
        return None
    version = metadata.get("resourceVersion")
    test = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
    return (test if version else []) + ops


def apply_marks(kube: Kube, marks: Mapping[str, str] | None = None) -> list[str]:
    """Label and taint every node as main's reservations say (``marks``: node -> tenant;
    read from main when None), and take the mark off nodes no longer reserved. Returns a line
    per node patched or failed; each patch is audited."""
    if marks is None:
        if gitops.main_sha() is None:
            return []  # no main yet: nothing to follow, and no reason to take marks off
        marks = {node: owner for node, (owner, _) in gitops.reservations_on_main().items()}
    lines: list[str] = []
    marked = set(Node.objects.filter(labels__has_key=RESERVED_KEY).values_list("name", flat=True))
    for name in sorted(set(marks) | marked):
        row = Node.objects.filter(name=name).first()
        if row is None:
            lines.append(f"{name}: not in the inventory (yet); marked once the sync sees it")
            continue
        try:
            obj = kube.read_node(name)
        except Exception as exc:  # a node gone or unreadable: the next sync tries again
            lines.append(f"{name}: cannot read: {exc}")
            continue
        owner = marks.get(name)
        before = ((obj.get("metadata") or {}).get("labels") or {}).get(RESERVED_KEY)
        patch = node_patch(obj, owner)
        if patch is None:
            continue
        try:
            kube.json_patch_node(name, patch)
        except Exception as exc:
            lines.append(f"{name}: cannot mark: {exc}")
            continue
        record_audit(
            actor=None,
            action="fleet.mark_reserved_node",
            target=row,
            diff={RESERVED_KEY: [before, owner]},
        )
        lines.append(f"{name}: {RESERVED_KEY}={owner}" if owner else f"{name}: mark removed")
    return lines


def follow(marks: Mapping[str, tuple[str, ReservedNode]] | None = None) -> None:
    """Bring the reservation rows in line with main: accepted when main holds the node for
    the tenant (at its change's merge, or now for one made in Git by hand), released when
    main no longer does; a row whose change closed unmerged is deleted."""
    if marks is None and gitops.main_sha() is None:
        return  # no main yet (an unbootstrapped repository): nothing was accepted or released
    on_main = marks if marks is not None else gitops.reservations_on_main()
    now = timezone.now()
    NodeReservation.objects.filter(
        accepted_at__isnull=True, change__status=ChangeRequest.Status.CLOSED
    ).delete()
    NodeReservation.objects.filter(
        release_change__status=ChangeRequest.Status.CLOSED, released_at__isnull=True
    ).update(release_change=None)
    open_rows = {r.node_name: r for r in NodeReservation.objects.filter(released_at__isnull=True)}
    for name, (slug, item) in on_main.items():
        row = open_rows.get(name)
        if row is not None and row.tenant_slug == slug:
            if row.accepted_at is None:
                merged = row.change.merged_at if row.change is not None else None
                row.accepted_at = merged or now
                row.save(update_fields=["accepted_at"])
            continue
        if row is not None:  # held for another tenant than main says: that one ended
            row.released_at = now
            row.save(update_fields=["released_at"])
        product = Node.objects.filter(name=name).values_list("product", flat=True).first()
        NodeReservation.objects.create(
            node_name=name,
            tenant_slug=slug,
            flavor=item.flavor,
            gpu_product=product or "",
            gpus=item.gpus,
            accepted_at=now,
        )
    for name, row in open_rows.items():
        if name in on_main or row.accepted_at is None:
            continue
        merged = row.release_change.merged_at if row.release_change is not None else None
        row.released_at = merged or now
        row.save(update_fields=["released_at"])


def reserved_gpus_by_pool() -> dict[str, tuple[int, tuple[str, ...]]]:
    """Per pool (portal flavor), the GPUs of its nodes reserved now and for whom, as the rows
    last followed main: what the catalog's what-if takes out of the shared pool."""
    totals: dict[str, tuple[int, set[str]]] = {}
    for row in NodeReservation.objects.filter(accepted_at__isnull=False, released_at__isnull=True):
        gpus, owners = totals.get(row.flavor, (0, set()))
        totals[row.flavor] = (gpus + row.gpus, owners | {row.tenant_slug})
    return {pool: (gpus, tuple(sorted(owners))) for pool, (gpus, owners) in totals.items()}


def reserved_nodes() -> dict[str, str]:
    """Node -> the tenant it is reserved for, as the reservation rows last followed main."""
    return dict(
        NodeReservation.objects.filter(
            accepted_at__isnull=False, released_at__isnull=True
        ).values_list("node_name", "tenant_slug")
    )
