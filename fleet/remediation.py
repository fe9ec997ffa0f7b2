"""The remediation loop: a node with a fatal GPU signal is cordoned by the portal itself, its
tenants and the platform admins are told, after a grace it is drained through the eviction
API, and it comes back only after its health re-check (and, after a fatal XID, a burn-in) passed.

Each round (``step``) reads the node rows the sync or the watcher wrote and the open
``Remediation`` rows, and moves each incident at most one state on::

    cordoned --grace--> draining --all evicted--> burn-in (fatal XID) --passed--> recheck
                                              \\-> recheck (other signals)
    recheck --healthy for healthy_seconds--> returned (auto_return)
                                         \\-> waiting-admin --an admin's click--> returned

Everything the loop knows lives in those rows, so a portal that restarts mid-way goes on from
where the database says (tests/fleet/test_remediation.py restarts it).

A drain a platform admin confirms before reserving or releasing a node (``do_drain_then``) is
an incident too, with signal ``reservation`` or ``release``, started in draining::

    draining --nothing left to evict--> waiting-change (the change opened)
    waiting-change --main holds it and the node is (un)marked, or the change closed--> returned

The blast-radius guard: remediation never holds more than ``RemediationPolicy.allowed`` nodes of
a pool cordoned at once. A fault that would go over it is not cordoned: the pool is paused
(``RemediationPause``), the admins are alerted, and no new cordon happens there until an admin
resumes it. Incidents already open go on.

Signals (what is fatal comes from DCGM's own health watch, NVIDIA/DCGM v4.6.0
``modules/health/DcgmHealthWatch.cpp`` ``DcgmHealthWatch::BuildXidMappings``):

- an XID DCGM rates ``DCGM_HEALTH_RESULT_FAIL`` (its always-watched "devastating" XIDs 48, 74,
  79, 95, 119, 120, 140 and the memory watch's 64), plus 63 and 94, which DCGM rates WARN but
  NVIDIA's XID catalogue answers with a GPU reset: the node needs a burn-in before it returns;
- a failed DCGM health watch, as NVSentinel reports it: a ``Gpu<System>Watch`` condition True
  (NVIDIA/NVSentinel docs/INTEGRATIONS.md, the names ``fleet.inventory`` already reads);
- a Node Problem Detector / NVSentinel condition that means the GPU or fabric is gone
  (``fleet.inventory.FATAL_CONDITION_TYPES``: GPUMissing, NVSwitchFatalError,
  SysLogsGPUFallenOff) or AWS's ``AcceleratedHardwareReady`` False.

What DCGM rates WARN (thermal 60-62, power 54-58 and 78, PCIe 38/39/42, NVLink 67/73/121/137)
and a thermal watch raise a warning to the admins, never a cordon.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from fleet import inventory, lifecycle, reservations, services
from fleet.kube import Kube, KubeError
from fleet.models import (
    Node,
    NodeReservation,
    Remediation,
    RemediationEvent,
    RemediationPause,
    RemediationPolicy,
    RemediationWarning,
)
from fleet.reservations import DRAIN_RELEASE, DRAIN_RESERVE, reserved_nodes
from fleet.signals import remediation_notice
from gitops import services as gitops
from gitops.render.reservations import RESERVED_KEY
from portal.audit import record_audit
from portal.jobs import enqueue_unless_waiting
from tenants import access
from tenants.access import Action

logger = logging.getLogger(__name__)

State = Remediation.State

# DCGM v4.6.0 DcgmHealthWatch::BuildXidMappings: m_devastatingXids rated FAIL, and the memory
# watch's 64 (row remap failure) rated FAIL.
DCGM_FAIL_XIDS = frozenset({48, 64, 74, 79, 95, 119, 120, 140})
# Rated WARN by DCGM, but NVIDIA's XID catalogue says reset the GPU: a pending row remap (63)
# and a contained ECC error (94). The issue names them; we cordon for them too.
RESET_XIDS = frozenset({63, 94})
FATAL_XIDS = DCGM_FAIL_XIDS | RESET_XIDS
# The rest of what DCGM v4.6.0 rates WARN in m_subsystemXids (thermal, power, PCIe, NVLink):
# a warning, never a cordon. 31, 32 and 43 (MMU, PBDMA, channel reset) are the application's
# own errors and say nothing about the node. 92 (a high single-bit ECC rate, NVIDIA's XID
# catalogue) is corrected by the GPU: a warning too.
WARNING_XIDS = frozenset({38, 39, 42, 54, 56, 57, 58, 60, 61, 62, 67, 73, 78, 92, 121, 137})
# NVSentinel's DCGM health watches: Gpu<System>Watch. The thermal and power watches report
# what DCGM rates WARN (clocks held back), so they warn.
WATCH_SUFFIX = "Watch"
WARNING_WATCHES = frozenset({"GpuThermalWatch", "GpuPowerWatch"})

FATAL_XID, HEALTH_WATCH, NODE_CONDITION = "fatal-xid", "health-watch", "node-condition"


@dataclass(frozen=True)
class Finding:
    """One signal on a node: ``fatal`` ones cordon, the others warn."""

    signal: str
    fatal: bool
    reason: str
    needs_burn_in: bool = False


def findings(node: Node) -> list[Finding]:
    """What the node's conditions say, as the sync stored them."""
    found: list[Finding] = []
    for condition in node.conditions or []:
        kind = str(condition.get("type", ""))
        status = str(condition.get("status", ""))
        text = f"{condition.get('reason', '')} {condition.get('message', '')}".strip()
        sentence = f"{kind}: {condition.get('message') or condition.get('reason') or status}"
        if kind == inventory.ACCELERATOR_READY:
            if status == "False":
                found.append(Finding(NODE_CONDITION, True, sentence, needs_burn_in=True))
            continue
        if status != "True":
            continue
        xids = {int(n) for n in inventory.XID_PATTERN.findall(text)}
        if kind in inventory.FATAL_CONDITION_TYPES or xids & FATAL_XIDS:
            fatal_xids = sorted(xids & FATAL_XIDS) or ([79] if "FallenOff" in kind else [])
            signal = FATAL_XID if fatal_xids else NODE_CONDITION
            # Name the fatal XIDs the sentence does not name already ("... (XID 79)" once).
            named = {int(n) for n in inventory.XID_PATTERN.findall(sentence)}
            label = ", ".join(f"XID {x}" for x in fatal_xids if x not in named)
            found.append(
                Finding(signal, True, f"{sentence} ({label})" if label else sentence, True)
            )
        elif kind.startswith("Gpu") and kind.endswith(WATCH_SUFFIX):
            fatal = kind not in WARNING_WATCHES
            found.append(Finding(HEALTH_WATCH, fatal, sentence))
        elif kind in inventory.GPU_CONDITION_TYPES or kind.startswith(
            inventory.GPU_CONDITION_PREFIXES
        ):
            # Any other GPU condition (a non-fatal XID such as 62 or 92, an NVLink check):
            # a warning.
            found.append(Finding(NODE_CONDITION, False, sentence))
    return found


@dataclass
class StepReport:
    """What one round did, for the job's log and the bench."""

    cordoned: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # node: why it was not cordoned
    warned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _event(incident: Remediation, action: str, reason: str) -> None:
    RemediationEvent.objects.create(remediation=incident, action=action, reason=reason)
    record_audit(
        actor=None,
        action=f"remediation.{action}",
        target=incident,
        diff={"state": [None, incident.state], "reason": [None, reason]},
    )


def _move(incident: Remediation, state: str, action: str, reason: str, now: datetime) -> None:
    incident.state = state
    incident.state_since = now
    if state == State.RETURNED:
        incident.closed_at = now
    incident.save()
    _event(incident, action, reason)


def _notify(title: str, body: str, *, tenants: list[str], node: str) -> None:
    """Tell the platform admins and the tenants named (catalog connects the inbox, the mail
    and the outbound webhook to this signal: fleet may not import catalog)."""
    remediation_notice.send(
        sender=Remediation,
        title=title,
        body=body,
        admin_url=reverse("fleet:remediation"),
        tenants=sorted(tenants),
        node=node,
    )


def _tenants_on(node_name: str, kube: Kube) -> list[str]:
    """The tenants whose pods run on the node now, by namespace (never a label), and the
    dedicated tenant the node is reserved for (as main holds it, ``fleet.reservations``):
    its own capacity shrinks even when nothing of it runs there."""
    raw = kube.list_pods(node=node_name)
    platform = services.platform_namespaces()
    slugs = set()
    if owner := reserved_nodes().get(node_name):
        slugs.add(owner)
    for obj in raw:
        pod = inventory.parse_pod(obj)
        if pod is None or pod.node != node_name or pod.phase in ("Succeeded", "Failed"):
            continue
        if slug := services.tenant_of(pod.namespace, platform):
            slugs.add(slug)
    return sorted(slugs)


def pool_sizes() -> Counter[str]:
    return Counter(Node.objects.values_list("pool", flat=True))


def held_by_pool() -> Counter[str]:
    """Nodes remediation holds cordoned now, per pool."""
    return Counter(
        Remediation.objects.filter(closed_at__isnull=True).values_list("pool", flat=True)
    )


def step(*, kube: Kube | None = None, now: datetime | None = None) -> StepReport:
    """One round of the loop over every node; each incident moves at most one state on."""
    own = kube is None
    kube = kube or Kube()
    now = now or timezone.now()
    report = StepReport()
    try:
        policy = RemediationPolicy.current()
        nodes = {n.name: n for n in Node.objects.all()}
        open_incidents = {
            r.node_name: r for r in Remediation.objects.filter(closed_at__isnull=True)
        }
        warned: dict[str, dict[str, RemediationWarning]] = {}
        for warning in RemediationWarning.objects.filter(cleared_at__isnull=True):
            warned.setdefault(warning.node_name, {})[warning.reason] = warning
        for name, node in sorted(nodes.items()):
            found = findings(node)
            fatal = [f for f in found if f.fatal]
            warnings = [f for f in found if not f.fatal]
            if warnings or name in warned:  # a query only for nodes with something to say
                _warn(node, warnings, warned.get(name, {}), now, report)
            incident = open_incidents.get(name)
            try:
                if incident is None and fatal:
                    _open(node, fatal, policy, kube, now, report)
                elif incident is not None:
                    _advance(incident, node, fatal, policy, kube, now, report)
            except KubeError as exc:
                report.errors.append(f"{name}: {exc}")
                logger.warning("remediation of %s: %s", name, exc)
    finally:
        if own:
            kube.close()
    return report


@transaction.atomic
def _open(
    node: Node,
    fatal: list[Finding],
    policy: RemediationPolicy,
    kube: Kube,
    now: datetime,
    report: StepReport,
) -> None:
    reason = "; ".join(f.reason for f in fatal)
    if RemediationPause.objects.filter(pool=node.pool).exists():
        report.held.append(f"{node.name}: pool {node.pool or '(none)'} is paused")
        return
    allowed = policy.allowed(pool_sizes()[node.pool])
    held = held_by_pool()[node.pool]
    if held + 1 > allowed:
        why = (
            f"{node.name} has a fatal signal ({reason}), but pool {node.pool or '(none)'} "
            f"already has {held} of at most {allowed} nodes cordoned by remediation "
            f"(guard {policy.guard_percent}%, at least {policy.guard_min_nodes}): "
            "remediation is paused in this pool until an admin resumes it"
        )
        pause = RemediationPause.objects.create(pool=node.pool, reason=why, since=now)
        record_audit(
            actor=None, action="remediation.pause", target=pause, diff={"reason": [None, why]}
        )
        _notify(
            f"Remediation paused in pool {node.pool or '(none)'}",
            why,
            tenants=[],
            node=node.name,
        )
        report.held.append(why)
        return
    tenants = _tenants_on(node.name, kube)
    was_cordoned = node.unschedulable
    if not was_cordoned:
        kube.set_unschedulable(node.name, True)
        node.unschedulable = True
        node.save(update_fields=["unschedulable"])
    needs_burn_in = any(f.needs_burn_in for f in fatal)
    incident = Remediation.objects.create(
        node_name=node.name,
        pool=node.pool,
        signal=fatal[0].signal,
        reason=reason,
        needs_burn_in=needs_burn_in,
        tenants=tenants,
        started_at=now,
        state_since=now,
        drain_after=now + timedelta(seconds=policy.grace_seconds),
        was_cordoned=was_cordoned,
    )
    _event(incident, "cordon", f"cordoned: {reason}")
    for slug in tenants:
        record_audit(
            actor=None,
            action="remediation.cordon",
            target=incident,
            tenant_slug=slug,
            diff={"node": [None, node.name], "reason": [None, reason]},
        )
    drain_at = timezone.localtime(incident.drain_after).strftime("%H:%M:%S")
    _notify(
        f"Node {node.name} cordoned: {fatal[0].signal}",
        f"The portal cordoned {node.name} because {reason}. Work running there is drained "
        f"after {drain_at} (evictions honour PodDisruptionBudgets); their controllers "
        "re-create the evicted pods on healthy nodes.",
        tenants=tenants,
        node=node.name,
    )
    report.cordoned.append(node.name)


@transaction.atomic
def _advance(
    incident: Remediation,
    node: Node,
    fatal: list[Finding],
    policy: RemediationPolicy,
    kube: Kube,
    now: datetime,
    report: StepReport,
) -> None:
    incident = Remediation.objects.select_for_update().get(pk=incident.pk)
    if incident.closed_at is not None:
        return
    if fatal:
        if incident.healthy_since is not None:
            incident.healthy_since = None
            incident.save(update_fields=["healthy_since"])
            _event(
                incident,
                "fault-again",
                f"the signal came back ({fatal[0].reason}): the healthy window starts over",
            )
        if any(f.needs_burn_in for f in fatal) and not incident.needs_burn_in:
            incident.needs_burn_in = True
            incident.save(update_fields=["needs_burn_in"])
        if incident.state == State.WAITING_ADMIN:
            _move(incident, State.RECHECK, "recheck", f"faulty again: {fatal[0].reason}", now)
    if incident.state == State.CORDONED and now >= incident.drain_after:
        _move(incident, State.DRAINING, "drain", "the grace before the drain is over", now)
        report.moved.append(incident.node_name)
    elif incident.state == State.DRAINING:
        _drain(incident, node, kube, now, report)
    elif incident.state == State.WAITING_CHANGE:
        _follow_change(incident, node, kube, now, report)
    elif incident.state == State.BURN_IN:
        asked = incident.burn_in_asked_at or incident.state_since
        if lifecycle.passed_since(incident.node_name, asked):
            incident.healthy_since = None
            _move(incident, State.RECHECK, "recheck", "the burn-in passed", now)
            report.moved.append(incident.node_name)
    elif incident.state == State.RECHECK and not fatal:
        if incident.healthy_since is None:
            incident.healthy_since = now
            incident.save(update_fields=["healthy_since"])
        elif now - incident.healthy_since >= timedelta(seconds=policy.healthy_seconds):
            healthy = f"healthy for {policy.healthy_seconds} s"
            if policy.auto_return:
                _return(incident, node, kube, now, f"{healthy}; the policy returns it by itself")
            else:
                _move(
                    incident,
                    State.WAITING_ADMIN,
                    "wait-admin",
                    f"{healthy}; the policy wants an admin to return it",
                    now,
                )
                _notify(
                    f"Node {incident.node_name} can be returned",
                    f"{incident.node_name} passed its re-check; return it on the remediation page.",
                    tenants=[],
                    node=incident.node_name,
                )
            report.moved.append(incident.node_name)


def _drain(
    incident: Remediation, node: Node, kube: Kube, now: datetime, report: StepReport
) -> None:
    """Evict what the drain plan names, each pod once a round: a 429 (a disruption budget)
    is recorded and shown, and tried again next round."""
    plan = services.drain_plan(node, kube)
    evict = plan.evict
    if incident.signal in (DRAIN_RESERVE, DRAIN_RELEASE):
        # Before a reservation the other tenants' work leaves; before a release the owner's.
        platform = services.platform_namespaces()
        owner, leaving = incident.reserve_tenant, incident.signal == DRAIN_RELEASE
        evict = tuple(
            p for p in evict if (services.tenant_of(p.namespace, platform) == owner) == leaving
        )
    refused: list[str] = []
    for pod in evict:
        ref = f"{pod.namespace}/{pod.name}"
        try:
            kube.evict(pod.namespace, pod.name)
        except KubeError as exc:
            if exc.status == 404:
                continue
            if exc.status == 429:
                refused.append(f"{ref}: {exc}")
                continue
            raise
        else:
            _event(incident, "evict", f"evicted {ref}")
    if refused:
        blocked = "; ".join(refused)
        if blocked != incident.blocked:
            incident.blocked = blocked
            incident.save(update_fields=["blocked"])
            _event(incident, "drain-held", f"a disruption budget holds the drain: {blocked}")
        report.held.append(f"{incident.node_name}: {blocked}")
        return
    incident.blocked = ""
    if incident.signal in (DRAIN_RESERVE, DRAIN_RELEASE):
        if evict:  # evicted this round: the change waits for a round that finds none left
            incident.save(update_fields=["blocked"])
            return
        _open_change_after_drain(incident, node, kube, now)
    elif incident.needs_burn_in:
        lifecycle.request_burn_in(
            incident.node_name, reason=f"remediation #{incident.pk}: {incident.reason}"
        )
        incident.burn_in_asked_at = now
        _move(incident, State.BURN_IN, "burn-in", "drained; a fatal XID needs a burn-in", now)
    else:
        incident.healthy_since = None
        _move(incident, State.RECHECK, "recheck", "drained; re-checking its health", now)
    report.moved.append(incident.node_name)


def _return(incident: Remediation, node: Node | None, kube: Kube, now: datetime, why: str) -> None:
    """Uncordon the node, unless it was cordoned before remediation took it: that cordon is
    whoever set it's to lift."""
    if not incident.was_cordoned:
        kube.set_unschedulable(incident.node_name, False)
        if node is not None:
            node.unschedulable = False
            node.save(update_fields=["unschedulable"])
    _move(incident, State.RETURNED, "return", why, now)
    _notify(
        f"Node {incident.node_name} is back",
        f"{incident.node_name} is schedulable again: {why}.",
        tenants=list(incident.tenants),
        node=incident.node_name,
    )


def _warn(
    node: Node,
    warnings: list[Finding],
    active: dict[str, RemediationWarning],
    now: datetime,
    report: StepReport,
) -> None:
    """Tell the admins of each new non-fatal signal once; mark the gone ones cleared.
    ``active``: the node's uncleared warnings by reason."""
    seen = {f.reason for f in warnings}
    for reason in seen - set(active):
        RemediationWarning.objects.create(node_name=node.name, reason=reason, first_seen=now)
        _notify(
            f"Warning on node {node.name}",
            f"{reason}. A warning only: the node stays schedulable.",
            tenants=[],
            node=node.name,
        )
        report.warned.append(f"{node.name}: {reason}")
    for reason in seen & set(active):
        RemediationWarning.objects.filter(pk=active[reason].pk).update(last_seen=now)
    for reason in set(active) - seen:
        RemediationWarning.objects.filter(pk=active[reason].pk).update(cleared_at=now)


def nudge(node_name: str) -> None:
    """After the watcher stored a node: when it has a fatal signal and no open incident, run a
    round once the row is committed (one job, however many events arrive meanwhile)."""
    node = Node.objects.filter(name=node_name).first()
    if node is None or not any(f.fatal for f in findings(node)):
        return
    if Remediation.objects.filter(node_name=node_name, closed_at__isnull=True).exists():
        return
    transaction.on_commit(lambda: enqueue_unless_waiting("fleet.remediate", title="Remediate"))


# --- what admins do ---------------------------------------------------------------------------


@transaction.atomic
def do_return(incident: Remediation, *, acting_user: Any) -> Remediation:
    """An admin hands a node that passed its re-check back to the tenants."""
    access.require(acting_user, Action.REMEDIATE)
    incident = Remediation.objects.select_for_update().get(pk=incident.pk)
    if incident.state != State.WAITING_ADMIN:
        raise ValidationError(
            f"{incident.node_name} is {incident.get_state_display().lower()}: only a node that "
            "passed its re-check can be returned."
        )
    with Kube() as kube:
        try:
            _return(
                incident,
                Node.objects.filter(name=incident.node_name).first(),
                kube,
                timezone.now(),
                f"returned by {acting_user.get_username()}",
            )
        except KubeError as exc:
            raise ValidationError(str(exc)) from exc
    record_audit(actor=acting_user, action="remediation.return", target=incident)
    return incident


@transaction.atomic
def do_resume(pool: str, *, acting_user: Any) -> None:
    """An admin lifts the guard's pause of a pool: the loop cordons there again."""
    access.require(acting_user, Action.REMEDIATE)
    pause = RemediationPause.objects.filter(pool=pool).first()
    if pause is None:
        raise ValidationError(f"Remediation is not paused in pool {pool or '(none)'}.")
    record_audit(
        actor=acting_user,
        action="remediation.resume",
        target=pause,
        diff={"paused": [pause.reason, None]},
    )
    pause.delete()


@transaction.atomic
def do_set_policy(values: dict[str, Any], *, acting_user: Any) -> RemediationPolicy:
    """Store the policy an admin set (the form validated ``values``)."""
    access.require(acting_user, Action.REMEDIATE)
    policy = RemediationPolicy.current()
    diff = {}
    for key, value in values.items():
        if getattr(policy, key) != value:
            diff[key] = [getattr(policy, key), value]
            setattr(policy, key, value)
    policy.full_clean()
    policy.save()
    if diff:
        record_audit(actor=acting_user, action="remediation.policy", target=policy, diff=diff)
    return policy


def guard_rows() -> list[dict[str, Any]]:
    """Per pool: nodes, how many remediation holds, how many it may, and whether paused."""
    policy = RemediationPolicy.current()
    held = held_by_pool()
    paused = {p.pool: p for p in RemediationPause.objects.all()}
    return [
        {
            "pool": pool,
            "nodes": size,
            "held": held[pool],
            "allowed": policy.allowed(size),
            "pause": paused.get(pool),
        }
        for pool, size in sorted(pool_sizes().items())
    ]


def tenant_incidents(slug: str) -> list[Remediation]:
    """Open incidents of nodes the tenant's work ran on when they were cordoned."""
    return [
        r for r in Remediation.objects.filter(closed_at__isnull=True) if slug in (r.tenants or [])
    ]


# --- drains an admin confirms before reserving or releasing a node -----------------------------
# The same path as a fault's: cordon, drain through the eviction API (budgets honoured, a 429
# recorded and tried again each round), within the blast-radius guard, its state in the
# Remediation row (so a restart goes on). No grace (an admin confirmed) and no health re-check:
# once drained the reserving or releasing change opens (``fleet.reservations``), and the node
# is uncordoned once main holds it and the sync marked (or unmarked) it, or its change closed.


@transaction.atomic
def do_drain_then(
    slug: str, nodes: list[str], *, release: bool, acting_user: Any
) -> list[Remediation]:
    """Cordon and drain ``nodes``, then open the change that reserves them for ``slug``
    (other tenants' work leaves) or releases them from it (its own work leaves). Refused with
    a reason, and nothing cordoned, when the change would be refused for anything but the work
    running there, when remediation holds a node already, or past the guard."""
    access.require(acting_user, Action.OPERATE_FLEET)
    wanted = sorted(set(nodes))
    with gitops.reading_main():
        if release:
            reservations.check_release(slug, wanted, busy_ok=True)
        else:
            reservations.check_reserve(slug, wanted, busy_ok=True)
    policy = RemediationPolicy.current()
    sizes, held = pool_sizes(), held_by_pool()
    paused = set(RemediationPause.objects.values_list("pool", flat=True))
    rows = {n.name: n for n in Node.objects.filter(name__in=wanted)}
    busy = set(
        Remediation.objects.filter(closed_at__isnull=True, node_name__in=wanted).values_list(
            "node_name", flat=True
        )
    )
    errors: list[str] = []
    for name in wanted:
        node = rows.get(name)
        if node is None:
            errors.append(f"{name}: not in the inventory; it cannot be drained.")
        elif name in busy:
            errors.append(f"{name}: remediation holds it already (see the remediation page).")
        elif node.pool in paused:
            errors.append(f"{name}: remediation is paused in pool {node.pool or '(none)'}.")
        else:
            held[node.pool] += 1
            allowed = policy.allowed(sizes[node.pool])
            if held[node.pool] > allowed:
                errors.append(
                    f"{name}: pool {node.pool or '(none)'} would have more than {allowed} nodes "
                    f"cordoned at once (guard {policy.guard_percent}%); wait for a drain to end."
                )
    if errors:
        raise ValidationError(errors)
    signal = DRAIN_RELEASE if release else DRAIN_RESERVE
    leaving = f"{slug}'s work" if release else "other tenants' work"
    then = f"released from {slug}" if release else f"reserved for {slug}"
    reason = f"drained before it is {then} (asked by {acting_user.get_username()})"
    now = timezone.now()
    incidents: list[Remediation] = []
    with Kube() as kube:
        for name in wanted:
            node = rows[name]
            try:
                tenants = sorted({*_tenants_on(name, kube), slug})
                if not node.unschedulable:
                    kube.set_unschedulable(name, True)
            except KubeError as exc:
                raise ValidationError(f"{name}: {exc}") from exc
            incident = Remediation.objects.create(
                node_name=name,
                pool=node.pool,
                state=State.DRAINING,
                signal=signal,
                reason=reason,
                tenants=tenants,
                started_at=now,
                state_since=now,
                drain_after=now,
                was_cordoned=node.unschedulable,
                reserve_tenant=slug,
                requested_by=acting_user,
            )
            if not node.unschedulable:
                node.unschedulable = True
                node.save(update_fields=["unschedulable"])
            _event(incident, "cordon", f"cordoned: {reason}")
            _notify(
                f"Node {name} is drained: it is {then}",
                f"The portal cordoned {name}; {leaving} there is drained now (evictions honour "
                "PodDisruptionBudgets) and re-created elsewhere by its controllers. Then the "
                "change opens for review.",
                tenants=tenants,
                node=name,
            )
            incidents.append(incident)
    record_audit(
        actor=acting_user,
        action=f"fleet.drain_then_{'release' if release else 'reserve'}",
        target=incidents[0],
        tenant_slug=slug,
        diff={"nodes": [None, ", ".join(wanted)]},
    )
    return incidents


def _open_change_after_drain(incident: Remediation, node: Node, kube: Kube, now: datetime) -> None:
    """The node is empty of the work that had to leave: open its change as the admin who
    confirmed the drain; refused (main moved meanwhile), the node is given back."""
    slug, names = incident.reserve_tenant, [incident.node_name]
    user = incident.requested_by
    try:
        if user is None:
            raise ValidationError("the admin who asked for it is gone")
        with transaction.atomic():
            if incident.signal == DRAIN_RELEASE:
                change = reservations.do_release_nodes(slug, names, acting_user=user, drained=True)
            else:
                change = reservations.do_reserve_nodes(slug, names, acting_user=user, drained=True)
    except (ValidationError, PermissionDenied) as exc:
        messages = getattr(exc, "messages", None) or [str(exc)]
        _return(incident, node, kube, now, f"drained, but no change opened: {'; '.join(messages)}")
        return
    _move(incident, State.WAITING_CHANGE, "change", f"drained; opened change #{change.pk}", now)


def _follow_change(
    incident: Remediation, node: Node, kube: Kube, now: datetime, report: StepReport
) -> None:
    """Uncordon once main holds what the change asked and the sync marked the node (or took
    the mark off), or once the change closed unmerged."""
    slug = incident.reserve_tenant
    row = NodeReservation.objects.filter(
        node_name=incident.node_name, tenant_slug=slug, released_at__isnull=True
    ).first()
    mark = (node.labels or {}).get(RESERVED_KEY)
    if incident.signal == DRAIN_RESERVE:
        if row is None:
            why = "the reserving change closed unmerged"
        elif row.accepted_at is not None and mark == slug:
            why = f"reserved for {slug} and marked"
        else:
            return
    elif row is None and mark is None:
        why = f"released from {slug}; its mark is off"
    elif row is not None and row.release_change_id is None:
        why = f"the releasing change closed unmerged; it stays reserved for {slug}"
    else:
        return
    _return(incident, node, kube, now, why)
    report.moved.append(incident.node_name)
