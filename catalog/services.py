"""The catalog's workflow: request, decide, open the pull request, follow it to the cluster.

Every write is a ``do_*`` function: it validates first (``ValidationError`` with a message a
person can act on, nothing written), moves the request through ``catalog.states`` with an
event, an audit row and notifications, in one transaction. Opening the pull request is a Git
write: it runs in its own transaction after the decision, and when it fails the request stays
approved (or failed) with the error and a retry, never half-written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from catalog import outbound, states
from catalog.models import (
    Kind,
    Notification,
    OutgoingMail,
    RequestEvent,
    Resource,
    ResourceRequest,
    ShareVersion,
)
from catalog.specs import (
    COLLECTION,
    desired_tenant,
    errors_for,
    from_json,
    live_resources,
    mig_opt_in,
    offered_flavors,
    request_tenant,
    to_json,
)
from fleet.models import FluxObject
from fleet.reservations import reserved_gpus_by_pool
from gitops import services as gitops
from gitops.checks.capacity import flavor_pools
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.render import resources as units
from gitops.render.meta import FLUX_NAMESPACE
from gitops.render.validate import MIG_OPT_IN, is_mig_share, validate_tenant
from gitops.render.vcluster import release_name
from gitops.specs import Flavor, FleetSpec, GpuShare, SpecError, TenantClusterSpec, TenantSpec
from gitops.usertext import user_text
from portal.audit import record_audit
from portal.jobs import enqueue, enqueue_unless_waiting
from portal.models import Job
from tenants import access
from tenants.access import Action
from tenants.models import Tenant
from tenants.names import validate_text
from tenants.services import queue_cluster_access_sync

logger = logging.getLogger(__name__)

S = ResourceRequest.State
A = ResourceRequest.Action
DEDICATED_KINDS = ("whole", "mig", "dra")  # MIG only with the opt-in (``mig_opt_in``)
CHANGE_KIND: dict[str, str] = {
    Kind.CLUSTER: ChangeRequest.Kind.CLUSTER,
    Kind.GPU_SHARE: ChangeRequest.Kind.GPU_SHARE,
    Kind.ENDPOINT: ChangeRequest.Kind.ENDPOINT,
}


# --- checking a request -------------------------------------------------------------------


@dataclasses.dataclass
class CapacityRow:
    """One flavor pool before and after a request: what is promised against what exists."""

    flavor: str
    unit: str
    capacity: Decimal
    before: Decimal
    after: Decimal
    # GPUs of the pool's nodes reserved for dedicated tenants (in before and after), and whose.
    reserved: Decimal = Decimal(0)
    reserved_for: tuple[str, ...] = ()

    @property
    def over(self) -> bool:
        return self.after > self.capacity

    @property
    def changed(self) -> bool:
        return self.after != self.before

    @property
    def free_before(self) -> Decimal:
        """What no tenant is promised yet and no reservation holds (never below zero)."""
        return max(self.capacity - self.before, Decimal(0))

    @property
    def free_after(self) -> Decimal:
        return max(self.capacity - self.after, Decimal(0))


@dataclasses.dataclass
class Check:
    """What a request would do: the tenant after it, errors by form field ("" for the whole
    request), warnings, and the fleet's capacity before and after."""

    tenant: TenantSpec | None
    errors: dict[str, str]
    warnings: list[str]
    capacity: list[CapacityRow]
    gpu_equivalents: Decimal = Decimal(0)
    gpu_quota: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def overcommit(self) -> list[CapacityRow]:
        return [row for row in self.capacity if row.over and row.changed]


def _promised(shares: Iterable[GpuShare], fleet: FleetSpec) -> dict[tuple[str, str], Decimal]:
    """Nominal quota promised per (flavor, pool unit) by these shares."""
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    pools = {flavor.name: (flavor, flavor_pools(flavor)) for flavor in fleet.flavors}
    for share in shares:
        if share.flavor not in pools:
            continue
        flavor, its_pools = pools[share.flavor]
        asked = units.kueue_resources(share)
        for pool in its_pools:
            amount = sum((Decimal(asked[r]) for r in pool.resources if r in asked), Decimal(0))
            if amount:
                totals[(flavor.name, pool.unit)] += amount
    return totals


@dataclasses.dataclass(frozen=True)
class _ShareTotals:
    """Every tenant's GPU shares on main as of ``version`` (``ShareVersion``), and what they
    promise together on ``fleet``."""

    version: int
    fleet: FleetSpec
    by_tenant: dict[int, list[GpuShare]]
    total: dict[tuple[str, str], Decimal]


_SHARE_TOTALS: _ShareTotals | None = None


def _share_totals(fleet: FleetSpec) -> _ShareTotals:
    """The shares of every tenant, kept in this process while ``ShareVersion`` stands still:
    a check reads one row instead of every share (at 1,000 active shares that was 60 ms of
    each approval and of each pause in typing on a request form, and it grows with the
    fleet). The version is read before the shares, so shares changed meanwhile are kept under
    the older number and read again next time."""
    global _SHARE_TOTALS
    version = ShareVersion.objects.filter(pk=1).values_list("value", flat=True).first() or 0
    kept = _SHARE_TOTALS
    if kept is not None and kept.version == version and kept.fleet == fleet:
        return kept
    rows = Resource.objects.filter(
        kind=Kind.GPU_SHARE, state__in=[Resource.State.ACTIVE, Resource.State.DECOMMISSIONING]
    )
    by_tenant: dict[int, list[GpuShare]] = defaultdict(list)
    for tenant_id, spec in rows.values_list("tenant_id", "spec").iterator(chunk_size=2000):
        try:
            by_tenant[tenant_id].append(from_json(Kind.GPU_SHARE, spec))
        except SpecError:
            logger.warning("a stored GPU share spec does not load: %.200r", spec)
    total = _promised((s for shares in by_tenant.values() for s in shares), fleet)
    kept = _SHARE_TOTALS = _ShareTotals(version, fleet, dict(by_tenant), dict(total))
    return kept


def _others_promised(tenant: Tenant, fleet: FleetSpec) -> dict[tuple[str, str], Decimal]:
    """What every other tenant's shares on main promise, per (flavor, pool unit)."""
    totals = _share_totals(fleet)
    own = _promised(totals.by_tenant.get(tenant.pk, []), fleet)
    return {key: amount - own.get(key, Decimal(0)) for key, amount in totals.total.items()}


def _plus(a: dict[tuple[str, str], Decimal], b: dict[tuple[str, str], Decimal]) -> dict:
    return {key: a.get(key, Decimal(0)) + b.get(key, Decimal(0)) for key in a.keys() | b.keys()}


def capacity_rows(
    tenant: Tenant, current: TenantSpec, after: TenantSpec, fleet: FleetSpec
) -> list[CapacityRow]:
    """Every flavor pool with what all tenants are promised now (``current`` being the
    tenant's part), and once the tenant is ``after``."""
    others = _others_promised(tenant, fleet)
    before = _plus(others, _promised(current.shares, fleet))
    later = _plus(others, _promised(after.shares, fleet))
    reserved = reserved_gpus_by_pool()
    rows = []
    for flavor in fleet.flavors:
        for pool in flavor_pools(flavor):
            key = (flavor.name, pool.unit)
            # Reserved nodes' GPUs are promised to their tenant (whole pools only: a node is
            # reserved from a whole-GPU pool, whose one unit is GPUs).
            gpus, owners = reserved.get(flavor.name, (0, ())) if flavor.mode == "whole" else (0, ())
            rows.append(
                CapacityRow(
                    flavor.name,
                    pool.unit,
                    pool.capacity,
                    before.get(key, Decimal(0)) + gpus,
                    later.get(key, Decimal(0)) + gpus,
                    Decimal(gpus),
                    owners,
                )
            )
    return rows


def free_pools(tenant: Tenant, fleet: FleetSpec, check: Check | None = None) -> list[CapacityRow]:
    """The pools the tenant may ask for, with what is free in each now and, when ``check``
    got as far as the capacity what-if, once its request is applied (else as now)."""
    rows = check.capacity if check is not None and check.capacity else []
    if not rows:
        rows = check_request(tenant, Kind.GPU_SHARE, "", None, fleet=fleet).capacity
    dedicated = tenant.trust_level == Tenant.TrustLevel.DEDICATED
    offered = {f.name for f in offered_flavors(fleet, dedicated=dedicated, mig=mig_opt_in(tenant))}
    return [row for row in rows if row.flavor in offered]


def share_gpu_equivalents(share: GpuShare, flavor: Flavor) -> Decimal:
    """The physical GPUs a share amounts to (the unit of a tenant's GPU quota)."""
    fraction = units.gpu_equivalents(share, flavor)
    return Decimal(fraction.numerator) / Decimal(fraction.denominator)


def _equivalents(tenant: TenantSpec, fleet: FleetSpec) -> Decimal:
    total = Decimal(0)
    for share in tenant.shares:
        flavor = fleet.flavor(share.flavor)
        if flavor is not None:
            total += share_gpu_equivalents(share, flavor)
    return total


def _nvlink_warning(spec: dict[str, Any], kind: str, tenant: TenantSpec, fleet: FleetSpec) -> str:
    """A multi-GPU ask that no single NVLink domain can hold, from the live inventory."""
    from fleet.capacity import domain_free_gpus  # the fleet's topology, read from the sync

    gpus = 0
    flavor = ""
    if kind == Kind.GPU_SHARE and spec.get("kind") in ("whole", "dra"):
        gpus, flavor = int(spec.get("count") or 0), str(spec.get("flavor") or "")
    elif kind == Kind.ENDPOINT:
        share = tenant.share(str(spec.get("share") or ""))
        if share is not None and share.kind in ("whole", "dra"):
            gpus, flavor = int(spec.get("gpus_per_replica") or 0), share.flavor
    if gpus <= 1 or not flavor:
        return ""
    domains = domain_free_gpus(flavor)
    if not domains:
        return ""
    best = max(domains.values())
    if gpus > best:
        return (
            f"{gpus} GPUs of {flavor} do not fit in one NVLink domain right now (the most free in "
            f"one domain is {best}): multi-GPU work will span domains and run slower."
        )
    return ""


def release_clash(tenant: Tenant, name: str) -> str:
    """Why cluster ``name`` cannot be the tenant's: another tenant's cluster would have the
    same HelmRelease, or "". Every tenant's release is in flux-system, named
    ``<slug>-<cluster>`` (``gitops.render.vcluster``), so tenant ``llm`` with cluster
    ``platform-x`` and tenant ``llm-platform`` with cluster ``x`` would write one object and
    take it from each other. A cluster that is only asked for holds its release name too, so
    whoever asked first keeps it; the repository's duplicates check stops what slips past."""
    release = release_name(TenantSpec(slug=tenant.slug), TenantClusterSpec(name=name))
    others = (
        Resource.objects.filter(kind=Kind.CLUSTER)
        .exclude(tenant=tenant)
        .exclude(state__in=[Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN])
        .values_list("tenant__slug", "name")
    )
    for slug, other in others.iterator(chunk_size=2000):
        if release_name(TenantSpec(slug=slug), TenantClusterSpec(name=other)) == release:
            # The other tenant is not named: tenants do not learn of each other here.
            return (
                f"The name {name!r} cannot be used: the cluster's release would be named "
                f"{release!r}, like a cluster of another tenant. Choose another name."
            )
    return ""


def check_request(
    tenant: Tenant,
    kind: str,
    name: str,
    spec: dict[str, Any] | None,
    *,
    action: str = A.CREATE,
    fleet: FleetSpec | None = None,
) -> Check:
    """Validate what a request asks for against the tenant, its quota and the fleet."""
    fleet = fleet or configured_fleet()
    errors: dict[str, str] = {}
    warnings: list[str] = []
    remove = action == A.DECOMMISSION
    current = desired_tenant(tenant)
    if action == A.CREATE and (
        live_resources(tenant).filter(kind=kind, name=name).exists()
        or any(item.name == name for item in getattr(current, COLLECTION[kind]))
    ):
        errors["name"] = f"The tenant already has a {Kind(kind).label.lower()} called {name!r}."
        return Check(None, errors, [], [])
    try:
        if spec is not None:
            from_json(kind, spec)
        after = desired_tenant(tenant, kind=kind, name=name, spec=spec, remove=remove)
    except SpecError as exc:
        return Check(None, {k or "": v for k, v in exc.errors.items()}, [], [])
    try:
        validate_tenant(after, fleet)
    except SpecError as exc:
        errors.update(errors_for(after, kind, name, exc))
    if kind == Kind.CLUSTER and not remove and "name" not in errors:
        clash = release_clash(tenant, name)
        if clash:
            errors["name"] = clash
    dedicated = tenant.trust_level == Tenant.TrustLevel.DEDICATED
    if dedicated and kind == Kind.GPU_SHARE and spec and spec.get("kind") not in DEDICATED_KINDS:
        errors["kind"] = (
            "A dedicated tenant gets whole GPUs (or MIG slices, once a platform admin enables "
            "them for it) only, never a shared GPU."
        )
    elif dedicated and kind == Kind.GPU_SHARE and spec and not remove and not after.mig_allowed:
        # MIG is opt-in for a dedicated tenant: held in its spec on main, as the render checks.
        share = after.share(name)
        if share is not None and is_mig_share(share):
            errors["kind"] = MIG_OPT_IN
    equivalents = _equivalents(after, fleet)
    grows = equivalents > _equivalents(current, fleet)
    # Over quota is refused only when the request adds to it: shrinking is always allowed.
    if kind == Kind.GPU_SHARE and not remove and grows and equivalents > tenant.gpu_quota:
        errors.setdefault(
            "count",
            f"With this share the tenant's GPU shares add up to {equivalents.normalize():f} GPUs "
            f"(MIG slices and HAMi slots counted as fractions); its quota is {tenant.gpu_quota}. "
            "Ask a platform admin to raise the quota, or ask for less.",
        )
    rows = capacity_rows(tenant, current, after, fleet) if not errors else []
    for row in rows:
        if row.over and row.changed and row.after - row.reserved <= row.capacity:
            # It would fit only on nodes reserved for dedicated tenants: never theirs to give.
            errors.setdefault(
                "count",
                f"The shared {row.flavor} pool has "
                f"{max(row.capacity - row.before, Decimal(0)).normalize():f} {row.unit} left: "
                f"{row.reserved.normalize():f} of its {row.capacity.normalize():f} are on nodes "
                f"reserved for {', '.join(row.reserved_for)}, which no other tenant may use.",
            )
        elif row.over and row.changed:
            warnings.append(
                f"Overcommit: {row.flavor} would promise {row.after.normalize():f} {row.unit} "
                f"of {row.capacity.normalize():f}. A platform admin must allow it explicitly."
            )
    if not errors and spec is not None:
        nvlink = _nvlink_warning(spec, kind, after, fleet)
        if nvlink:
            warnings.append(nvlink)
    return Check(after, errors, warnings, rows, equivalents, tenant.gpu_quota)


def preview_changes(check: Check, fleet: FleetSpec | None = None) -> dict[str, bytes | None]:
    """The files the pull request would change, against main now. A preview never writes:
    before the repository has a main there is nothing to compare with."""
    if check.tenant is None or gitops.main_sha() is None:
        return {}
    return gitops.tenant_changes(check.tenant, fleet or configured_fleet())


def digest(changes: dict[str, bytes | None]) -> str:
    """A short fingerprint of a set of file changes: what an approver saw."""
    h = hashlib.sha256()
    for path in sorted(changes):
        h.update(path.encode() + b"\0" + (changes[path] or b"<deleted>") + b"\0")
    return h.hexdigest()[:16]


# --- who may do what ----------------------------------------------------------------------


def _require_requester(user: Any, tenant: Tenant) -> None:
    access.require(user, Action.REQUEST, tenant)


def _require_admin(user: Any) -> None:
    access.require(user, Action.DECIDE)


# --- moving a request ---------------------------------------------------------------------


def _locked(request: ResourceRequest) -> ResourceRequest:
    # The request, its resource and its tenant locked (as before the people were read along);
    # who asked and who decided come in the same query, unlocked (at 1,000 approvals they were
    # three more queries each, docs/benchmarks.md).
    return (
        ResourceRequest.objects.select_for_update(of=("self", "resource", "tenant"))
        .select_related("resource", "tenant", "requested_by", "decided_by")
        .get(pk=request.pk)
    )


def _move(request: ResourceRequest, to: str, *, actor: Any, note: str = "") -> None:
    current = request.state
    if not states.allowed(current, to):
        raise ValidationError(
            f"The request is {request.get_state_display().lower()}; it cannot become "
            f"{S(to).label.lower()}."
        )
    now = timezone.now()
    _settle_notices(request, current, now)
    request.state = to
    if to == S.SUBMITTED:
        request.submitted_at = now
    if to in (S.APPROVED, S.REJECTED, S.CHANGES_REQUESTED):
        request.decided_at = now
    if to in states.TERMINAL:
        request.finished_at = now
    request.save()
    RequestEvent.objects.create(
        request=request,
        from_state=current,
        to_state=to,
        actor=actor if getattr(actor, "pk", None) else None,
        note=note[:2000],
    )
    record_audit(
        actor=actor,
        action=f"request.{to}",
        target=request,
        tenant_slug=request.tenant.slug,
        diff={"state": [current, to], **({"note": [None, note[:200]]} if note else {})},
    )
    _notify(request, to, note)
    outbound.queue_state_change(request, current)


def _request_url(request: ResourceRequest) -> str:
    return reverse("catalog:request", args=[request.tenant.slug, request.pk])


NOTICES: dict[str, str] = {
    S.SUBMITTED: "{title} was submitted and waits for a platform admin",
    S.APPROVED: "{title} was approved",
    S.REJECTED: "{title} was rejected",
    S.CHANGES_REQUESTED: "{title}: changes requested",
    S.MERGED: "{title}: the pull request was merged",
    S.READY: "{title} is ready",
    S.FAILED: "{title} failed",
    S.DECOMMISSIONED: "{title} is done: the resource is gone",
}


def _settle_notices(request: ResourceRequest, leaving: str, now: datetime) -> None:
    """Mark read the notices that asked someone to act on ``request`` in the state it is
    leaving, for everyone told: once the request is decided (or resubmitted) they point at
    nothing left to do. In the transaction of the move, so the inbox never counts a decided
    request."""
    if leaving == S.SUBMITTED:
        # The platform admins' "waits for a platform admin", linking to the approval page.
        asked = Notification.objects.filter(url=reverse("approvals:detail", args=[request.pk]))
    elif leaving == S.CHANGES_REQUESTED and request.decided_at is not None:
        # The tenant's "changes requested", made when the request entered that state.
        asked = Notification.objects.filter(created_at__gte=request.decided_at)
    else:
        return
    asked.filter(request=request, read_at__isnull=True).update(read_at=now)


def _notify(request: ResourceRequest, state: str, note: str) -> None:
    template = NOTICES.get(state)
    if template is None:
        return
    title = template.format(title=request.title)
    if state == S.SUBMITTED:
        people = [u for u in access.platform_admins() if u.pk != request.requested_by_id]
    else:
        # Those who may act on the tenant's requests hear how they go.
        people = list(access.users_who_may(request.tenant, Action.CANCEL_REQUEST))
        if request.requested_by is not None:
            people.append(request.requested_by)
    body = f"{title}.\n\n{note}".strip() if note else f"{title}."
    url = (
        reverse("approvals:detail", args=[request.pk])
        if state == S.SUBMITTED
        else _request_url(request)
    )
    _tell(people, request, title=title, body=body, url=url)


def _tell(
    people: Iterable[Any], request: ResourceRequest, *, title: str, body: str, url: str
) -> None:
    notify(people, tenant=request.tenant, title=title, body=body, url=url, request=request)


def notify(
    people: Iterable[Any],
    *,
    tenant: Tenant,
    title: str,
    body: str,
    url: str,
    request: ResourceRequest | None = None,
) -> None:
    """A notification in the portal for each active person (once), and one mail to those with
    an address, after commit. Other apps (billing's budget alerts) tell people through this."""
    seen: set[int] = set()
    recipients = []
    for person in people:
        if person.pk in seen or not person.is_active:
            continue
        seen.add(person.pk)
        Notification.objects.create(
            user=person,
            request=request,
            tenant_slug=tenant.slug,
            title=title[:200],
            body=body,
            url=url,
        )
        if person.email:
            recipients.append(person.email)
    if recipients:
        OutgoingMail.objects.create(
            tenant_slug=tenant.slug,
            to=sorted(recipients),
            subject=f"[{tenant.slug}] {title}"[:200],
            body=f"{body}\n\n{settings.PORTAL_BASE_URL.rstrip('/')}{url}\n",
        )
        transaction.on_commit(send_outbox_soon)


def send_outbox_soon() -> None:
    """Queue the outbox job unless one is waiting already (it sends every mail unsent when it
    runs, this one included). It waits ``CATALOG_OUTBOX_DELAY_SECONDS`` first, so the mails of
    a burst go out together rather than one job each."""
    enqueue_unless_waiting(
        "catalog.send_outbox",
        title="Mail: send the outbox",
        delay=settings.CATALOG_OUTBOX_DELAY_SECONDS,
    )


# --- creating and editing -----------------------------------------------------------------


def _normalized(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Every field of the spec's dataclass, defaults filled in, so equal specs compare equal.
    A spec that does not convert is kept as given: the check reports what is wrong with it."""
    try:
        return to_json(from_json(kind, spec))
    except SpecError:
        return dict(spec)


def _raise(check: Check) -> None:
    if check.errors:
        raise ValidationError(
            {field or "__all__": [message] for field, message in check.errors.items()}
        )


@transaction.atomic
def do_create_request(
    tenant: Tenant,
    *,
    acting_user: Any,
    kind: str,
    spec: dict[str, Any],
    reason: str = "",
    submit: bool = True,
) -> ResourceRequest:
    """Ask for a new resource; ``spec`` is the JSON of its dataclass, with its ``name``."""
    _require_requester(acting_user, tenant)
    _check_reason(reason)
    if kind not in Kind.values:
        raise ValidationError(f"Unknown kind of resource {kind!r}.")
    name = str(spec.get("name") or "")
    spec = _normalized(kind, spec)
    # A name asked for but not yet merged is held too (check_request sees only live ones,
    # since it re-checks a pending request against its own resource at approval).
    held = tenant.resources.filter(kind=kind, name=name).exclude(
        state__in=[Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN]
    )
    if held.exists():
        raise ValidationError(
            {"name": [f"The tenant already has a {Kind(kind).label.lower()} called {name!r}."]}
        )
    _raise(check_request(tenant, kind, name, spec))
    resource = Resource.objects.create(tenant=tenant, kind=kind, name=name)
    request = ResourceRequest.objects.create(
        tenant=tenant,
        resource=resource,
        action=A.CREATE,
        spec=spec,
        reason=reason,
        requested_by=acting_user,
    )
    _authored(request, acting_user)
    record_audit(
        actor=acting_user,
        action="request.draft",
        target=request,
        tenant_slug=tenant.slug,
        diff={"spec": [None, spec]},
    )
    if submit:
        _move(request, S.SUBMITTED, actor=acting_user)
    return request


def _blocking_request(resource: Resource) -> ResourceRequest | None:
    """A request of ``resource`` whose pull request is not merged yet: another must wait.
    One that merged (and waits for, or failed in, the cluster) no longer holds the resource."""
    for request in resource.requests.filter(state__in=states.OPEN).select_related("change"):
        merged = request.change is not None and request.change.status == "merged"
        if not merged:
            return request
    return None


def blocking_request(resource: Resource) -> ResourceRequest | None:
    """The request that holds ``resource`` now (its pull request not merged), or None: for
    callers outside this module, such as the API's declarative apply."""
    return _blocking_request(resource)


def change_blocker(resource: Resource) -> str:
    """Why a modify or decommission of ``resource`` cannot be asked for now, or ""."""
    if resource.state != Resource.State.ACTIVE:
        return f"{resource} is {resource.get_state_display().lower()}; only an active one changes."
    busy = _blocking_request(resource)
    if busy is not None:
        return (
            f"{busy.title} (#{busy.pk}) is still {busy.get_state_display().lower()}; wait for it "
            "or cancel it first."
        )
    return ""


def _check_reason(reason: str) -> None:
    """The reason is shown to the approver and quoted in the commit message: several lines are
    fine, invisible formatting characters (bidi overrides) and other controls are not."""
    try:
        validate_text(reason)
    except ValidationError as exc:
        raise ValidationError({"reason": exc.messages}) from exc


def _check_note(note: str) -> None:
    """A decision note is shown to the team and quoted in the commit message: the reason's
    rule."""
    try:
        validate_text(note)
    except ValidationError as exc:
        raise ValidationError({"note": exc.messages}) from exc


def _require_changeable(resource: Resource) -> None:
    blocker = change_blocker(resource)
    if blocker:
        raise ValidationError(blocker)


@transaction.atomic
def do_modify_request(
    resource: Resource, *, acting_user: Any, spec: dict[str, Any], reason: str = ""
) -> ResourceRequest:
    """Ask to change a live resource (resize a share, scale an endpoint): same path as new."""
    resource = Resource.objects.select_for_update().get(pk=resource.pk)
    _require_requester(acting_user, resource.tenant)
    _require_changeable(resource)
    _check_reason(reason)
    spec = _normalized(resource.kind, {**spec, "name": resource.name})  # name: its identity
    if spec == _normalized(resource.kind, resource.spec):
        raise ValidationError("Nothing would change: this is what runs now.")
    _raise(check_request(resource.tenant, resource.kind, resource.name, spec, action=A.MODIFY))
    request = ResourceRequest.objects.create(
        tenant=resource.tenant,
        resource=resource,
        action=A.MODIFY,
        spec=spec,
        reason=reason,
        requested_by=acting_user,
    )
    _authored(request, acting_user)
    record_audit(
        actor=acting_user,
        action="request.draft",
        target=request,
        tenant_slug=resource.tenant.slug,
        diff={"spec": [resource.spec, spec]},
    )
    _move(request, S.SUBMITTED, actor=acting_user)
    return request


@transaction.atomic
def do_decommission_request(
    resource: Resource, *, acting_user: Any, reason: str = "", system: bool = False
) -> ResourceRequest:
    resource = Resource.objects.select_for_update().get(pk=resource.pk)
    if not system:
        _require_requester(acting_user, resource.tenant)
    _require_changeable(resource)
    _check_reason(reason)
    _raise(
        check_request(resource.tenant, resource.kind, resource.name, None, action=A.DECOMMISSION)
    )
    request = ResourceRequest.objects.create(
        tenant=resource.tenant,
        resource=resource,
        action=A.DECOMMISSION,
        spec={},
        reason=reason,
        requested_by=None if system else acting_user,
    )
    if not system:
        _authored(request, acting_user)
    _move(request, S.SUBMITTED, actor=acting_user, note=reason)
    return request


@transaction.atomic
def do_update_request(
    request: ResourceRequest, *, acting_user: Any, spec: dict[str, Any], reason: str = ""
) -> ResourceRequest:
    """Edit a draft, or answer "changes requested" (and submit again)."""
    request = _locked(request)
    _require_requester(acting_user, request.tenant)
    if request.state not in states.EDITABLE:
        raise ValidationError("Only a draft or a request with changes requested can be edited.")
    if request.action == A.DECOMMISSION:
        raise ValidationError("A decommission has nothing to edit.")
    _check_reason(reason)
    spec = _normalized(request.kind, {**spec, "name": request.resource.name})
    _raise(
        check_request(
            request.tenant, request.kind, request.resource.name, spec, action=request.action
        )
    )
    before = request.spec
    request.spec = spec
    request.reason = reason
    request.save(update_fields=["spec", "reason", "updated_at"])
    _authored(request, acting_user)
    record_audit(
        actor=acting_user,
        action="request.edit",
        target=request,
        tenant_slug=request.tenant.slug,
        diff={"spec": [before, spec]},
    )
    _move(request, S.SUBMITTED, actor=acting_user)
    return request


@transaction.atomic
def do_submit(request: ResourceRequest, *, acting_user: Any) -> ResourceRequest:
    request = _locked(request)
    _require_requester(acting_user, request.tenant)
    _move(request, S.SUBMITTED, actor=acting_user)
    return request


def _withdraw(request: ResourceRequest) -> None:
    if request.action == A.CREATE and request.resource.state == Resource.State.PENDING:
        request.resource.state = Resource.State.WITHDRAWN
        request.resource.save(update_fields=["state", "updated_at"])


@transaction.atomic
def do_cancel(request: ResourceRequest, *, acting_user: Any, note: str = "") -> ResourceRequest:
    request = _locked(request)
    access.require(
        acting_user, Action.CANCEL_REQUEST, request.tenant, owners=[request.requested_by_id]
    )
    if request.change is not None and request.change.status == ChangeRequest.Status.MERGED:
        raise ValidationError("Its pull request is merged; decommission the resource instead.")
    _move(request, S.CANCELLED, actor=acting_user, note=note)
    if request.change is not None and request.change.is_open:
        gitops.do_close(request.change, acting_user=acting_user, reason="request cancelled")
    _withdraw(request)
    if (
        request.action == A.DECOMMISSION
        and request.resource.state == Resource.State.DECOMMISSIONING
    ):
        request.resource.state = Resource.State.ACTIVE
        request.resource.save(update_fields=["state", "updated_at"])
    return request


# --- deciding -----------------------------------------------------------------------------


def _authored(request: ResourceRequest, user: Any) -> None:
    if getattr(user, "pk", None):
        request.authors.add(user)


def _hands(request: ResourceRequest) -> set[int]:
    """Who had a hand in the request's spec: who asked, who edited it, and for a robot among
    them whoever made it or holds a token of it (a robot's owner acting through it). Read
    through the user's reverse relations: catalog does not import the API's models."""
    people = set(request.authors.values_list("pk", flat=True))
    if request.requested_by_id is not None:
        people.add(request.requested_by_id)
    robots = get_user_model().objects.filter(pk__in=people, robot__isnull=False)
    for owner, minter in robots.values_list("robot__created_by", "api_tokens__created_by"):
        people.update(pk for pk in (owner, minter) if pk is not None)
    return people


def had_a_hand(request: ResourceRequest, user: Any) -> bool:
    """Whether ``user`` asked for or wrote part of ``request`` (and so may not decide it)."""
    return getattr(user, "pk", None) in _hands(request)


def _decide(request: ResourceRequest, acting_user: Any) -> ResourceRequest:
    _require_admin(acting_user)
    request = _locked(request)
    if acting_user is not None and acting_user.pk in _hands(request):
        raise ValidationError(
            "You asked for this or wrote part of it (yourself or through a robot of yours); "
            "another platform admin must decide."
        )
    return request


@transaction.atomic
def do_reject(request: ResourceRequest, *, acting_user: Any, note: str) -> ResourceRequest:
    if not note.strip():
        raise ValidationError({"note": ["Say why, so the team can act on it."]})
    _check_note(note)
    request = _decide(request, acting_user)
    request.decided_by, request.decision_note = acting_user, note
    _move(request, S.REJECTED, actor=acting_user, note=note)
    _withdraw(request)
    return request


@transaction.atomic
def do_request_changes(request: ResourceRequest, *, acting_user: Any, note: str) -> ResourceRequest:
    if not note.strip():
        raise ValidationError({"note": ["Say what needs to change."]})
    _check_note(note)
    request = _decide(request, acting_user)
    request.decided_by, request.decision_note = acting_user, note
    _move(request, S.CHANGES_REQUESTED, actor=acting_user, note=note)
    return request


def do_approve(
    request: ResourceRequest,
    *,
    acting_user: Any,
    note: str = "",
    allow_overcommit: bool = False,
    seen: str = "",
    merge: bool = False,
) -> ResourceRequest:
    """Approve, then open the pull request. ``seen`` is the digest of the diff the approver
    looked at: when main moved and the diff is no longer that, nothing happens.

    ``merge`` ("approve and merge") also puts the pull request into the merge queue, which
    checks it with the others of its batch and merges it: a burst of approvals costs a check
    run per batch, not per request."""
    _check_note(note)
    # Main read once: the check, its preview and the pull request all see one commit, and the
    # branch starts there (a merge landing in between would otherwise look deleted by it).
    with gitops.reading_main():
        with transaction.atomic():
            request = _decide(request, acting_user)
            if request.state != S.SUBMITTED:
                state = request.get_state_display().lower()
                raise ValidationError(f"The request is {state}, not waiting for a decision.")
            fleet = configured_fleet()
            check = check_request(
                request.tenant,
                request.kind,
                request.resource.name,
                None if request.action == A.DECOMMISSION else request.spec,
                action=request.action,
                fleet=fleet,
            )
            _raise(check)
            if check.overcommit and not allow_overcommit:
                raise ValidationError(
                    "This request overcommits "
                    + ", ".join(f"{r.flavor} ({r.unit})" for r in check.overcommit)
                    + ". Tick \u201callow overcommit\u201d to approve it anyway."
                )
            try:
                previewed = digest(preview_changes(check, fleet)) if seen else ""
            except Exception as exc:
                raise ValidationError(f"The fleet repository cannot be read: {exc}") from exc
            if seen and previewed != seen:
                raise ValidationError(
                    "The manifests changed since you opened this page (main moved on). Look at the "
                    "new diff and approve again."
                )
            request.decided_by, request.decision_note = acting_user, note
            request.allow_overcommit = allow_overcommit and bool(check.overcommit)
            _move(request, S.APPROVED, actor=acting_user, note=note)
        return open_pull_request(
            request, acting_user=acting_user, merge=merge, fleet=fleet, tenant=check.tenant
        )


# How many requests one "approve selected" takes at most: a reorganisation's worth.
APPROVE_MANY_MAX = 1000


def do_approve_many(
    request_ids: Iterable[int], *, acting_user: Any, note: str = "", merge: bool = True
) -> Job:
    """Approve the selected requests in a background job, one after the other, each exactly as
    ``do_approve`` (its check, its own pull request and review; with ``merge``, into the merge
    queue, whose batches check and merge them together). The job shows its progress and a
    line per request.

    Refused whole, with nothing queued, when a request does not exist, no longer waits for a
    decision or was asked for by the approver. One that fails its check when its turn comes
    (capacity the ones before it took, a request that overcommits: those are approved one by
    one, on their page) stays waiting, and the job's log says why."""
    _require_admin(acting_user)
    ids = list(dict.fromkeys(request_ids))
    if not ids:
        raise ValidationError("Select at least one request to approve.")
    if len(ids) > APPROVE_MANY_MAX:
        raise ValidationError(
            f"{len(ids)} requests selected; approve at most {APPROVE_MANY_MAX} at once."
        )
    # An id no database column holds (a typed 30-digit number) is simply not a request.
    found = ResourceRequest.objects.in_bulk([pk for pk in ids if 0 < pk < 2**63])
    problems = []
    missing = [pk for pk in ids if pk not in found]
    if missing:
        problems.append(f"No such request: {_numbers(missing)}.")
    decided = [pk for pk in ids if pk in found and found[pk].state != S.SUBMITTED]
    if decided:
        problems.append(f"No longer waiting for a decision: {_numbers(decided)}.")
    own = [pk for pk in ids if pk in found and acting_user.pk in _hands(found[pk])]
    if own:
        problems.append(f"You asked for these; another platform admin decides: {_numbers(own)}.")
    if problems:
        raise ValidationError(problems)
    return enqueue(
        "catalog.approve_many",
        title=f"Approve {len(ids)} request{'' if len(ids) == 1 else 's'}"
        + (" and merge" if merge else ""),
        created_by=acting_user,
        request_ids=ids,
        note=note,
        merge=merge,
    )


def _numbers(pks: list[int]) -> str:
    shown = ", ".join(f"#{pk}" for pk in pks[:20])
    return shown + (f" and {len(pks) - 20} more" if len(pks) > 20 else "")


def run_approve_many(job: Job) -> tuple[int, int]:
    """The job of ``do_approve_many``: (approved, left waiting). Its approver is who queued it,
    and must still be a platform admin when each request's turn comes (``do_approve`` checks)."""
    ids: list[int] = [int(pk) for pk in job.kwargs["request_ids"]]
    note = str(job.kwargs.get("note", ""))
    merge = bool(job.kwargs.get("merge", True))
    approver = job.created_by
    if approver is None:  # the account was deleted since: nobody to approve as
        job.append_log("the approver's account no longer exists: nothing approved")
        return 0, len(ids)
    approved = left = 0
    for number, pk in enumerate(ids, 1):
        request = ResourceRequest.objects.filter(pk=pk).first()
        if request is None:
            left += 1
            line = f"#{pk}: no longer exists"
        else:
            try:
                done = do_approve(request, acting_user=approver, note=note, merge=merge)
            except (ValidationError, PermissionDenied) as exc:
                left += 1
                reason = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
                line = f"#{pk} {request.title}: not approved: {reason}"
            else:
                approved += 1
                line = f"#{pk} {request.title}: approved, pull request #{done.change_id}"
                if done.error:
                    line += f" ({done.error})"
        job.set_progress(number * 100 // len(ids) if number < len(ids) else 99, line)
    return approved, left


def open_pull_request(
    request: ResourceRequest,
    *,
    acting_user: Any,
    merge: bool = False,
    fleet: FleetSpec | None = None,
    tenant: TenantSpec | None = None,
) -> ResourceRequest:
    """Open the request's pull request (first time or retry). A failure is recorded on the
    request, which keeps its state, so an admin can retry; Git and the database agree: a
    branch written before a later step failed is deleted again.

    ``fleet`` and ``tenant``: what the approval just checked the request against (and the
    approver's diff was rendered from); a retry reads both again."""
    opened: list[ChangeRequest] = []
    try:
        with transaction.atomic():
            # Its state is read under the lock: two retries side by side open one pull request.
            request = _locked(request)
            refusal = _reopen_refusal(request)
            if refusal:
                raise _Refused(refusal)
            if request.change is not None and request.change.is_open:
                gitops.do_close(request.change, acting_user=acting_user, reason="superseded")
            # The review is the approver's, whoever clicks retry (the same person when the
            # approval opens it: the signed-in user, whose permissions are already read).
            queue = merge and not settings.GITOPS_FORGE
            decided_by = request.decided_by
            if decided_by is not None and decided_by.pk == getattr(acting_user, "pk", None):
                decided_by = acting_user
            change = _open_change(
                request,
                decided_by or acting_user,
                opened,
                run_checks=not queue,
                fleet=fleet,
                tenant=tenant,
            )
            request.change = change
            request.error = ""
            request.save(update_fields=["change", "error", "updated_at"])
            decommission = request.action == A.DECOMMISSION
            if decommission:
                request.resource.state = Resource.State.DECOMMISSIONING
                request.resource.save(update_fields=["state", "updated_at"])
            _move(
                request,
                S.DECOMMISSIONING if decommission else S.PR_OPEN,
                actor=acting_user,
                note=f"pull request #{change.pk}",
            )
            if queue:
                _enqueue_merge(request, change, acting_user)
    except _Refused as exc:
        raise ValidationError(str(exc)) from None
    except Exception as exc:  # a failed Git write, a spec the fleet no longer accepts
        for change in opened:  # its row was rolled back; the branch must go too
            try:
                gitops.delete_change_branch(change.branch, expected=change.head_sha)
            except Exception:
                logger.exception("could not delete the orphan branch %s", change.branch)
        message = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        logger.warning("request %s: opening its pull request failed: %s", request.pk, message)
        with transaction.atomic():
            request = _locked(request)
            request.error = f"Opening the pull request failed: {message}"
            request.save(update_fields=["error", "updated_at"])
            record_audit(
                actor=acting_user,
                action="request.pull_request_failed",
                target=request,
                tenant_slug=request.tenant.slug,
                diff={"error": [None, message[:500]]},
            )
    request.refresh_from_db()
    return request


class _Refused(Exception):
    """A pull request the request cannot get now: the caller's error, not a failed attempt."""


def _reopen_refusal(request: ResourceRequest) -> str:
    if request.state not in (S.APPROVED, S.FAILED):
        return "Only an approved or failed request gets a new pull request."
    if request.change is not None and request.change.status == ChangeRequest.Status.MERGED:
        return "Its pull request is already merged."
    return ""


def _enqueue_merge(request: ResourceRequest, change: ChangeRequest, acting_user: Any) -> None:
    """Put the request's fresh pull request into the merge queue. When it cannot go (more
    approvals required than the approver's, say), it runs its own checks and waits for a
    merge by hand, as without "merge"; the request says why. ``do_enqueue_merge`` is atomic
    on its own: refused, its savepoint is rolled back and the approval goes on."""
    try:
        gitops.do_enqueue_merge(change, acting_user=acting_user)
    except ValidationError as exc:
        gitops.schedule_checks(change, acting_user)
        request.error = "Not added to the merge queue: " + " ".join(exc.messages)
        request.save(update_fields=["error", "updated_at"])


def _open_change(
    request: ResourceRequest,
    approver: Any,
    opened: list[ChangeRequest] | None = None,
    *,
    run_checks: bool = True,
    fleet: FleetSpec | None = None,
    tenant: TenantSpec | None = None,
) -> ChangeRequest:
    with gitops.reading_main():  # one commit of main for the render and the branch
        return _open_change_on_main(request, approver, opened, run_checks, fleet, tenant)


def _open_change_on_main(
    request: ResourceRequest,
    approver: Any,
    opened: list[ChangeRequest] | None,
    run_checks: bool,
    fleet: FleetSpec | None,
    tenant: TenantSpec | None,
) -> ChangeRequest:
    fleet = fleet or configured_fleet()
    decommission = request.action == A.DECOMMISSION
    tenant = tenant or request_tenant(request)
    # No "#" before the number: on a forge "#12" would link issue 12, not this request. What
    # people typed is quoted and defused (gitops.usertext) so it can pose as no trailer and
    # trigger no forge action.
    lines = [f"Catalog request {request.pk}: {request.title}."]
    if request.reason.strip():
        lines.append(f"Reason given by the requester:\n{user_text(request.reason)}")
    if request.decision_note.strip():
        lines.append(f"Approval note:\n{user_text(request.decision_note)}")
    # Opened by the portal for the requester, so that the approver's review counts.
    change = gitops.open_tenant_change(
        acting_user=None,
        tenant=tenant,
        fleet=fleet,
        title=request.title,
        kind=ChangeRequest.Kind.DECOMMISSION if decommission else CHANGE_KIND[request.kind],
        requested_by=request.requested_by,
        description="\n\n".join(lines),
        allow_overcommit=request.allow_overcommit,
        run_checks=run_checks,
        # Its resource; and who may use the clusters: narrowed to the portal's members, or
        # bound for a new cluster (catalog.specs.desired_tenant).
        scope=[f"{COLLECTION[request.kind]}/{request.resource.name}", "members"],
        # One the portal asked for itself (a reservation's end) is the platform's decision,
        # not the tenant's to close; a tenant's own closes as cancelling it would.
        close_action="" if request.requested_by_id else Action.OPERATE_FLEET,
    )
    if opened is not None:
        opened.append(change)
    if approver is not None and getattr(approver, "pk", None):
        gitops.do_review(
            change, acting_user=approver, state="approve", body="Approved in the catalog."
        )
    return change


# --- following the pull request and the cluster -------------------------------------------


def readiness(request: ResourceRequest) -> tuple[str, str]:
    """("ready" | "failed" | "waiting", message) of the resource in the cluster, from the
    fleet sync's rows; a GPU share is ready once applied."""
    resource = request.resource
    slug = request.tenant.slug
    if resource.kind == Kind.GPU_SHARE:
        return "ready", ""
    if resource.kind == Kind.CLUSTER:
        release = release_name(TenantSpec(slug=slug), TenantClusterSpec(name=resource.name))
        obj = FluxObject.objects.filter(
            kind=FluxObject.Kind.HELM_RELEASE, namespace=FLUX_NAMESPACE, name=release
        ).first()
        state = obj.cluster_state if obj else ""
    else:
        obj = FluxObject.objects.filter(
            kind=FluxObject.Kind.INFERENCE_SERVICE, namespace=slug, name=resource.name
        ).first()
        state = obj.state if obj else ""
    if obj is None:
        return "waiting", "the cluster does not report it yet"
    if state == "ready":
        return "ready", ""
    if state == "failed":
        return "failed", f"{obj.kind} {obj.namespace}/{obj.name}: {obj.reason}: {obj.message}"
    return "waiting", f"{obj.kind} {obj.namespace}/{obj.name} is {state}"


def _on_merged(request: ResourceRequest) -> None:
    resource = request.resource
    if request.action != A.DECOMMISSION:
        resource.spec = request.spec
        resource.state = Resource.State.ACTIVE
        resource.save(update_fields=["spec", "state", "updated_at"])
    _move(
        request,
        S.MERGED,
        actor=request.change.merged_by if request.change else None,
        note=f"merged as {request.change.merge_sha[:12]}" if request.change else "",
    )


def _refresh_siblings(tenant: Tenant) -> None:
    """After a request of ``tenant`` merged, its other open pull requests were rendered from
    an older main: open each again from the tenant as main holds it now, so reviewers see
    the diff it would make. One in the merge queue is left there: the queue replays it onto
    what merged before it (``gitops.services.replaying``).

    The approval moves with the request when it asks main for the same as before
    (``gitops.services.same_request``: its own spec files unchanged, on an unchanged start;
    the quota and queues then also hold the merged sibling), and the approver still may
    review; otherwise (someone changed the same resource meanwhile, say) the new pull request
    waits for a fresh review, the request says so and the platform admins are told."""
    for sibling in ResourceRequest.objects.filter(
        tenant=tenant, state__in=[S.PR_OPEN, S.DECOMMISSIONING]
    ).select_related("change"):
        change = sibling.change
        if change is None or not change.is_open or change.base_sha == gitops.main_sha():
            continue
        if gitops.queued_entry(change) is not None:
            continue
        try:
            with gitops.reading_main(), transaction.atomic():
                locked = _locked(sibling)
                gitops.do_close(change, acting_user=None, reason="superseded: main moved on")
                fresh = _open_change(locked, None)  # branch kept on failure: rare
                approver = locked.decided_by
                kept = (
                    gitops.same_request(change, fresh)
                    and approver is not None
                    and gitops.may(approver, "review", fresh)
                )
                if kept:
                    gitops.do_review(
                        fresh,
                        acting_user=approver,
                        state="approve",
                        body=f"Approved in the catalog; carried over from #{change.pk}, which "
                        "asked main for the same (its spec files are unchanged).",
                    )
                locked.change = fresh
                locked.error = (
                    ""
                    if kept
                    else f"Pull request #{change.pk} was rendered again as #{fresh.pk} after "
                    "another merge, and what it asks for changed: it needs a fresh review."
                )
                locked.save(update_fields=["change", "error", "updated_at"])
                if kept and change.queue_entries.exists():
                    # It was approved "and merge" (and left the queue): the intent goes on.
                    _enqueue_merge(locked, fresh, approver)
                record_audit(
                    actor=None,
                    action="request.pull_request_refreshed",
                    target=locked,
                    tenant_slug=tenant.slug,
                    diff={
                        "change": [change.pk, fresh.pk],
                        "approval": ["approved", "kept" if kept else "needs a fresh review"],
                    },
                )
                if not kept:
                    _ask_for_review(locked, change, fresh)
        except Exception as exc:
            message = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            with transaction.atomic():
                locked = _locked(sibling)
                locked.error = f"Refreshing the pull request failed: {message}"
                locked.save(update_fields=["error", "updated_at"])


def _ask_for_review(request: ResourceRequest, old: ChangeRequest, new: ChangeRequest) -> None:
    """Tell the platform admins that a refreshed pull request differs from what was approved."""
    title = f"{request.title}: review again"
    body = (
        f"Pull request #{old.pk} was rendered again as #{new.pk} after another merge, and its "
        "files differ from the ones that were approved."
    )
    url = reverse("gitops:detail", args=[new.pk])
    people = [u for u in access.platform_admins() if u.pk != request.requested_by_id]
    _tell(people, request, title=title, body=body, url=url)


def advance_requests() -> int:
    """Move requests on from what Git and the cluster say; returns how many moved."""
    moved = 0
    watched = ResourceRequest.objects.filter(
        state__in=[S.PR_OPEN, S.DECOMMISSIONING, S.MERGED, S.FAILED], change__isnull=False
    ).select_related("change", "resource", "tenant")
    merged_tenants: set[int] = set()
    for request in watched:
        change = request.change
        assert change is not None
        with transaction.atomic():
            request = _locked(request)
            change.refresh_from_db()
            before = request.state
            if request.state in (S.PR_OPEN, S.DECOMMISSIONING):
                if change.status == ChangeRequest.Status.MERGED:
                    _on_merged(request)
                    merged_tenants.add(request.tenant_id)
                elif change.status == ChangeRequest.Status.CLOSED:
                    request.error = f"Pull request #{change.pk} was closed without merging."
                    request.save(update_fields=["error", "updated_at"])
                    _move(request, S.FAILED, actor=None, note=request.error)
                    if request.resource.state == Resource.State.DECOMMISSIONING:
                        request.resource.state = Resource.State.ACTIVE
                        request.resource.save(update_fields=["state", "updated_at"])
                elif change.checks_state == ChangeRequest.Checks.FAILED or (
                    change.checks_state == ChangeRequest.Checks.PARTIAL
                    and not change.checks_mergeable
                ):
                    verdict = (
                        "failed"
                        if change.checks_state == ChangeRequest.Checks.FAILED
                        else "are partial, which this portal does not merge"
                    )
                    error = f"The checks of pull request #{change.pk} {verdict}; see the change."
                    if request.error != error:
                        request.error = error
                        request.save(update_fields=["error", "updated_at"])
            if (
                request.state in (S.MERGED, S.FAILED)
                and change.status == ChangeRequest.Status.MERGED
            ):
                _follow_apply(request, change)
            moved += request.state != before
    for tenant in Tenant.objects.filter(pk__in=merged_tenants):
        _refresh_siblings(tenant)
        # The merged change carried the bindings of the members the tenant had when it was
        # opened; anyone removed since must not be back in the clusters it adds.
        with transaction.atomic():
            queue_cluster_access_sync(tenant, None)
    return moved


def _follow_apply(request: ResourceRequest, change: ChangeRequest) -> None:
    if change.apply_state == ChangeRequest.Apply.FAILED:
        if request.state == S.MERGED:
            request.error = change.apply_message
            request.save(update_fields=["error", "updated_at"])
            _move(request, S.FAILED, actor=None, note=change.apply_message)
        return
    if change.apply_state != ChangeRequest.Apply.APPLIED:
        return
    if request.action == A.DECOMMISSION:
        request.resource.state = Resource.State.DECOMMISSIONED
        request.resource.save(update_fields=["state", "updated_at"])
        request.error = ""
        request.save(update_fields=["error", "updated_at"])
        _move(request, S.DECOMMISSIONED, actor=None)
        # Earlier requests still waiting for the cluster will never see it now.
        for earlier in request.resource.requests.filter(state__in=[S.MERGED, S.FAILED]).exclude(
            pk=request.pk
        ):
            _move(earlier, S.DECOMMISSIONED, actor=None, note="the resource was decommissioned")
        return
    verdict, message = readiness(request)
    if verdict == "ready":
        request.error = ""
        request.save(update_fields=["error", "updated_at"])
        _move(request, S.READY, actor=None)
    elif verdict == "failed" and request.state == S.MERGED:
        request.error = message
        request.save(update_fields=["error", "updated_at"])
        _move(request, S.FAILED, actor=None, note=message)


# --- time-bound reservations --------------------------------------------------------------


def expire_reservations(today: date | None = None) -> list[ResourceRequest]:
    """Open the decommission pull request of every GPU share whose end date has passed."""
    today = today or timezone.localdate()
    opened = []
    for resource in Resource.objects.filter(kind=Kind.GPU_SHARE, state=Resource.State.ACTIVE):
        until = str(resource.spec.get("until") or "")
        try:
            ends = date.fromisoformat(until) if until else None
        except ValueError:
            continue
        if ends is None or ends >= today:
            continue
        if _blocking_request(resource) is not None:
            continue
        note = f"The reservation ended on {ends.isoformat()}."
        try:
            with transaction.atomic():
                request = do_decommission_request(
                    resource, acting_user=None, reason=note, system=True
                )
                request = _locked(request)
                _move(request, S.APPROVED, actor=None, note=note)
        except ValidationError as exc:
            logger.warning("cannot expire %s: %s", resource, "; ".join(exc.messages))
            continue
        opened.append(open_pull_request(request, acting_user=None))
    return opened


# --- what the pages show ------------------------------------------------------------------


def endpoint_access(request_or_resource: ResourceRequest | Resource) -> dict[str, str]:
    """How to call a ready endpoint (``catalog.endpoints.how_to_call``): its public URL, model
    name, curl example and address inside the cluster; {} for anything else."""
    from catalog.endpoints import how_to_call  # it reads idle_actions, which imports us

    resource = (
        request_or_resource.resource
        if isinstance(request_or_resource, ResourceRequest)
        else request_or_resource
    )
    if resource.kind != Kind.ENDPOINT or not resource.spec:
        return {}
    tenant = desired_tenant(resource.tenant)
    endpoint = next((e for e in tenant.endpoints if e.name == resource.name), None)
    if endpoint is None:
        return {}
    return how_to_call(tenant, endpoint)


def shares_of(tenant: Tenant) -> list[GpuShare]:
    """The shares an endpoint may run on: live ones not on their way out."""
    leaving = set(
        tenant.resources.filter(
            kind=Kind.GPU_SHARE, state=Resource.State.DECOMMISSIONING
        ).values_list("name", flat=True)
    )
    return [share for share in desired_tenant(tenant).shares if share.name not in leaving]
