"""Idle reclaim: GPUs held but not used are found, their tenant told, and after a grace
reclaimed; what would have been held is recorded as reclaimed GPU-hours.

Detection reads the ledger (``UsageHour``), which both metering sources fill (Prometheus, or
the exporter scraped by the portal) and which is attributed by namespace, never by a label:
a workload's used over allocated GPU-seconds is its GPUs' mean DCGM_FI_PROF_GR_ENGINE_ACTIVE
(GPU_UTIL/100 where the profiling metric is missing, ``billing.ingest.activity``). A workload
is idle when, over each of the policy's last ``window_hours`` complete hours, it held GPUs
and that mean stayed under the threshold. One aggregate query per distinct window, over the
``hour`` index, so an evaluation reads only the window's rows however long the ledger is
(bench/idle_detection.py).

Acting: a batch job (a Kueue Workload owns it) is deactivated directly through the API
(``fleet.activation``: run-once work, no Git change); an endpoint or a tenant cluster is put
to sleep through a checked Git change by ``catalog.idle_actions``; a case whose endpoint or
cluster is gone from the catalog stays ``no_action`` (its tenant was told). Anything else is
only reported.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Max, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.urls import reverse
from django.utils import timezone

from billing.models import IdleCase, IdleExemption, IdleKind, IdlePolicy, ReclaimedHour, UsageHour
from catalog import idle_actions
from catalog.models import Kind, Resource, WebhookDelivery, WebhookEndpoint
from catalog.services import blocking_request, notify
from fleet import activation
from fleet.kube import Kube, KubeError
from portal.audit import record_audit
from portal.jobs import enqueue
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

logger = logging.getLogger(__name__)

EVENT_DETECTED = "idle.detected"
EVENT_RECLAIMED = "idle.reclaimed"
# Owner kinds Kueue's jobframework manages (a Workload per job): the run-once work.
JOB_KINDS = frozenset({"Job", "JobSet", "PyTorchJob", "TFJob", "MPIJob", "RayJob", "TrainJob"})
MAX_GRACE_MINUTES = 7 * 24 * 60
MAX_EXEMPTION_DAYS = 90
POLICY_FIELDS = (
    "threshold_percent",
    "window_hours",
    "grace_minutes",
    "act_on_jobs",
    "act_on_endpoints",
    "act_on_clusters",
    "max_exemption_days",
    "enabled",
)


# --- policies ------------------------------------------------------------------------------


def _number(data: Mapping[str, Any], name: str, low: Decimal, high: Decimal) -> Decimal:
    text = str(data.get(name, "")).strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValidationError({name: f"{text!r} is not a number"}) from None
    if not value.is_finite() or not low <= value <= high:
        raise ValidationError({name: f"must be from {low} to {high}"})
    return value


def _whole(data: Mapping[str, Any], name: str, low: int, high: int) -> int:
    text = str(data.get(name, "")).strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise ValidationError({name: f"{text!r} is not a whole number from {low} to {high}"})
    return int(text)


def _flag(data: Mapping[str, Any], name: str) -> bool:
    value = data.get(name, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "1", "yes"):
        return True
    if text in ("false", "off", "0", "no", ""):
        return False
    raise ValidationError({name: f"{value!r} is not true or false"})


def clean_policy(data: Mapping[str, Any]) -> dict[str, Any]:
    """The policy's fields from form or JSON input, or a ``ValidationError`` naming every
    bad field."""
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    checks: dict[str, Any] = {
        "threshold_percent": lambda: _number(
            data, "threshold_percent", Decimal("0.01"), Decimal(100)
        ),
        "window_hours": lambda: _whole(data, "window_hours", 1, 168),
        "grace_minutes": lambda: _whole(data, "grace_minutes", 0, MAX_GRACE_MINUTES),
        "max_exemption_days": lambda: _whole(data, "max_exemption_days", 0, MAX_EXEMPTION_DAYS),
        "act_on_jobs": lambda: _flag(data, "act_on_jobs"),
        "act_on_endpoints": lambda: _flag(data, "act_on_endpoints"),
        "act_on_clusters": lambda: _flag(data, "act_on_clusters"),
        "enabled": lambda: _flag(data, "enabled") if "enabled" in data else True,
    }
    for name, check in checks.items():
        try:
            out[name] = check()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    threshold = out.get("threshold_percent")
    if threshold is not None and threshold != threshold.quantize(Decimal("0.01")):
        errors["threshold_percent"] = ["has at most two decimals"]
    if errors:
        raise ValidationError(errors)
    return out


def known_flavors() -> list[str]:
    """The flavors of the configured fleet: a policy names one of them."""
    from gitops.fleet import configured_fleet

    return sorted(f.name for f in configured_fleet().flavors)


def do_set_policy(
    flavor: str, data: Mapping[str, Any], *, tenant: Tenant | None = None, acting_user: Any
) -> IdlePolicy:
    """Set the idle policy of ``flavor`` (for ``tenant`` alone: an override). Bad input is a
    ``ValidationError`` and changes nothing."""
    access.require(acting_user, Action.MANAGE_IDLE_POLICIES)
    if flavor not in known_flavors():
        raise ValidationError({"flavor": f"{flavor!r} is not a flavor of this fleet"})
    values = clean_policy(data)
    with transaction.atomic():
        policy = IdlePolicy.objects.select_for_update().filter(flavor=flavor, tenant=tenant).first()
        before = {f: str(getattr(policy, f)) for f in POLICY_FIELDS} if policy else {}
        policy = policy or IdlePolicy(flavor=flavor, tenant=tenant)
        for name, value in values.items():
            setattr(policy, name, value)
        policy.updated_by = acting_user if getattr(acting_user, "pk", None) else None
        policy.updated_at = timezone.now()
        policy.full_clean()
        policy.save()
        record_audit(
            actor=acting_user,
            action="billing.idle_policy_set",
            target=policy,
            tenant_slug=tenant.slug if tenant else "",
            diff={f: [before.get(f), str(getattr(policy, f))] for f in POLICY_FIELDS},
        )
    return policy


def do_delete_policy(policy: IdlePolicy, *, acting_user: Any) -> None:
    access.require(acting_user, Action.MANAGE_IDLE_POLICIES)
    with transaction.atomic():
        record_audit(
            actor=acting_user,
            action="billing.idle_policy_deleted",
            target=policy,
            tenant_slug=policy.tenant.slug if policy.tenant else "",
            diff={"flavor": [policy.flavor, None]},
        )
        policy.delete()


@dataclass
class Policies:
    """Every enabled policy, looked up as a workload's tenant and flavor need it."""

    by_flavor: dict[str, IdlePolicy] = field(default_factory=dict)
    by_tenant: dict[tuple[str, int], IdlePolicy] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Policies:
        out = cls()
        for policy in IdlePolicy.objects.all():
            if policy.tenant_id is None:
                out.by_flavor[policy.flavor] = policy
            else:
                out.by_tenant[(policy.flavor, policy.tenant_id)] = policy
        return out

    def effective(self, flavor: str, tenant_id: int) -> IdlePolicy | None:
        """The tenant's override, else the flavor's; None when neither or it is disabled."""
        policy = self.by_tenant.get((flavor, tenant_id)) or self.by_flavor.get(flavor)
        return policy if policy is not None and policy.enabled else None

    def windows(self) -> set[int]:
        return {p.window_hours for p in [*self.by_flavor.values(), *self.by_tenant.values()]}


# --- detection -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Idle:
    """A workload idle over its policy's window."""

    tenant_slug: str
    namespace: str
    flavor: str
    workload: str
    gpus: Decimal  # GPU-equivalents held, on average over the window
    utilisation_percent: Decimal


def window_end(now: datetime) -> datetime:
    """The end of the window: the end of the ledger's latest hour, never past ``now``'s
    hour. The ledger's hours arrive after the ingest lag, so a window ending at the wall
    clock's hour would read an hour not yet ingested as a workload gone (one index lookup)."""
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    latest = UsageHour.objects.filter(hour__lt=current).aggregate(last=Max("hour"))["last"]
    return current if latest is None else latest + timedelta(hours=1)


def aggregate(window_hours: int, end: datetime) -> Iterable[dict[str, Any]]:
    """Per tenant, namespace, flavor and workload: GPU-seconds held and used, and the number
    of hours with usage, over ``[end - window_hours, end)``. One query over the hour index."""
    start = end - timedelta(hours=window_hours)
    return (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end)
        .exclude(tenant_slug="")
        .values("tenant_slug", "namespace", "flavor", "workload")
        .annotate(
            allocated=Sum("allocated_gpu_seconds"),
            used=Sum("used_gpu_seconds"),
            hours=Count("hour", distinct=True),
            last=Max("hour"),
        )
        .filter(hours=window_hours, allocated__gt=0)
        .order_by()
    )


def detect(now: datetime | None = None, policies: Policies | None = None) -> list[Idle]:
    """The workloads idle under their policies at ``now``."""
    now = now or timezone.now()
    policies = policies or Policies.load()
    end = window_end(now)
    tenants = dict(Tenant.objects.values_list("slug", "pk"))
    found = []
    for window in sorted(policies.windows()):
        for row in aggregate(window, end):
            tenant_id = tenants.get(row["tenant_slug"])
            if tenant_id is None:
                continue
            policy = policies.effective(row["flavor"], tenant_id)
            if policy is None or policy.window_hours != window:
                continue
            percent = Decimal(100) * row["used"] / row["allocated"]
            if percent >= policy.threshold_percent:
                continue
            found.append(
                Idle(
                    tenant_slug=row["tenant_slug"],
                    namespace=row["namespace"],
                    flavor=row["flavor"],
                    workload=row["workload"],
                    gpus=(row["allocated"] / Decimal(3600 * window)).quantize(Decimal("0.001")),
                    utilisation_percent=percent.quantize(Decimal("0.01")),
                )
            )
    return sorted(found, key=lambda i: (i.namespace, i.workload))


def kind_of(tenant: Tenant, workload: str) -> tuple[str, str]:
    """(kind, target) of a ledger workload: a Kueue job by its owner kind; a model endpoint
    by its KServe predictor's name (``billing.dashboards.endpoint_of``); a tenant cluster's
    pod by the name vCluster gives it in the host namespace, ``<name>-x-<namespace>-x-
    <vcluster>`` (loft-sh/vcluster v0.35.3 ``pkg/util/translate/single_namespace.go``
    ``SingleNamespaceHostName``; a name over 63 characters is cut and hashed and is not
    recognised: such a pod's case is reported, not acted on)."""
    from billing.dashboards import endpoint_of

    owner_kind, _, name = workload.partition("/")
    if owner_kind in JOB_KINDS:
        return IdleKind.JOB, name
    live = Resource.objects.filter(tenant=tenant, state=Resource.State.ACTIVE)
    endpoints = live.filter(kind=Kind.ENDPOINT).values_list("name", flat=True)
    endpoint = endpoint_of(workload, list(endpoints))
    if endpoint:
        return IdleKind.ENDPOINT, endpoint
    if owner_kind == "Pod" and "-x-" in name:
        for cluster in live.filter(kind=Kind.CLUSTER).values_list("name", flat=True):
            if name.endswith(f"-x-{cluster}") and name.count("-x-") >= 2:
                return IdleKind.CLUSTER, cluster
    return IdleKind.OTHER, ""


def exempt(namespace: str, workload: str, now: datetime) -> IdleExemption | None:
    return (
        IdleExemption.objects.filter(namespace=namespace, workload=workload, until__gt=now)
        .order_by("-until")
        .first()
    )


# --- notices -------------------------------------------------------------------------------


def _event(case: IdleCase, event_type: str, now: datetime) -> dict[str, Any]:
    return {
        "type": event_type,
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "data": {
            "tenant": case.tenant.slug,
            "case": {
                "id": case.pk,
                "namespace": case.namespace,
                "workload": case.workload,
                "kind": case.kind,
                "flavor": case.flavor,
                "state": case.state,
                "gpus": str(case.gpus),
                "utilisation_percent": str(case.utilisation_percent),
                "act_after": case.act_after.isoformat().replace("+00:00", "Z"),
            },
        },
    }


def queue_event(case: IdleCase, event_type: str, now: datetime) -> int:
    """One signed webhook delivery per active endpoint of the case's tenant, sent by the
    outbound queue (``catalog.outbound``) once the transaction commits."""
    endpoints = list(WebhookEndpoint.objects.filter(tenant_id=case.tenant_id, active=True))
    if not endpoints:
        return 0
    from catalog.outbound import RETRY_DELAYS

    message_id = f"msg_{uuid.uuid4().hex}"
    event = _event(case, event_type, now)
    event["id"] = message_id
    body = json.dumps(event, sort_keys=True)
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            endpoint=endpoint,
            message_id=message_id,
            event_type=event_type,
            body=body,
            max_attempts=len(RETRY_DELAYS) + 1,
            next_attempt_at=now,
        )
        for endpoint in endpoints
    )
    ids = [d.pk for d in deliveries]
    transaction.on_commit(
        lambda: enqueue(
            "catalog.webhooks_send",
            title=f"Webhooks: {event_type}",
            tenant=case.tenant,
            delivery_ids=ids,
        )
    )
    return len(ids)


def _tell(case: IdleCase, title: str, body: str) -> None:
    people = access.users_who_may(case.tenant, Action.WAKE)
    notify(
        people,
        tenant=case.tenant,
        title=title,
        body=body,
        url=reverse("billing:tenant_idle", args=[case.tenant.slug]),
    )


# --- acting --------------------------------------------------------------------------------


def _resource(case: IdleCase) -> Resource | None:
    kind = Kind.ENDPOINT if case.kind == IdleKind.ENDPOINT else Kind.CLUSTER
    return Resource.objects.filter(
        tenant=case.tenant, kind=kind, name=case.target, state=Resource.State.ACTIVE
    ).first()


def act(case: IdleCase, kube: Kube | None) -> str:
    """Reclaim the case's GPUs; the new state. Raises ``KubeError`` when the cluster refused
    or ``ValidationError`` when the Git change was (the case stays as it was and the next
    evaluation tries again)."""
    policy = case.policy
    if policy is None or not policy.acts_on(case.kind):
        case.note = "The policy takes no action on this kind of workload; its tenant was told."
        return IdleCase.State.NO_ACTION
    if case.kind == IdleKind.JOB:
        kube = kube or Kube()
        owner_kind, _, owner_name = case.workload.partition("/")
        try:
            workload = activation.workload_of(kube, case.namespace, owner_kind, owner_name)
        except activation.NoWorkload as exc:
            case.note = f"{exc}: nothing to suspend."
            return IdleCase.State.CLOSED
        name = workload["metadata"]["name"]
        activation.set_active(kube, case.namespace, name, False)
        case.target = name
        case.note = f"Kueue Workload {name} deactivated (spec.active false): its job is suspended."
        return IdleCase.State.ACTED
    resource = _resource(case)
    if resource is None:
        case.note = f"{case.target} is no longer in the catalog: nothing to put to sleep."
        return IdleCase.State.NO_ACTION
    if idle_actions.is_asleep(resource):
        # Another case of the same cluster (one per pod) put it to sleep already.
        case.note = f"{resource} is asleep already."
        return IdleCase.State.ACTED
    idle_actions.sleep(resource, reason=f"idle: {case.utilisation_percent}% busy")
    case.note = f"{resource} put to sleep through a Git change."
    return IdleCase.State.ACTED


# --- the evaluation ------------------------------------------------------------------------


@dataclass
class Evaluation:
    detected: int = 0
    acted: int = 0
    closed: int = 0
    reclaimed_rows: int = 0
    errors: list[str] = field(default_factory=list)


def _open_case(item: Idle, tenant: Tenant, policy: IdlePolicy, now: datetime) -> IdleCase:
    kind, target = kind_of(tenant, item.workload)
    with transaction.atomic():
        case = IdleCase.objects.create(
            tenant=tenant,
            namespace=item.namespace,
            flavor=item.flavor,
            workload=item.workload,
            kind=kind,
            target=target,
            policy=policy,
            state=IdleCase.State.NOTIFIED,
            utilisation_percent=item.utilisation_percent,
            gpus=item.gpus,
            detected_at=now,
            act_after=now + timedelta(minutes=policy.grace_minutes),
            note=f"Under {policy.threshold_percent}% for {policy.window_hours} h.",
        )
        record_audit(
            actor=None,
            action="billing.idle_detected",
            target=case,
            tenant_slug=tenant.slug,
            diff={
                "state": [None, case.state],
                "utilisation": [None, str(item.utilisation_percent)],
            },
        )
        action = (
            "It will be reclaimed"
            if policy.acts_on(kind)
            else "No action is taken on this kind; please free it"
        )
        _tell(
            case,
            f"{item.workload} in {item.namespace} is idle",
            f"{item.gpus:.2f} GPUs of {item.flavor} were {item.utilisation_percent:.2f}% busy "
            f"over the last {policy.window_hours} h (policy: under "
            f"{policy.threshold_percent:.2f}%). {action} after "
            f"{case.act_after:%Y-%m-%d %H:%M} UTC unless you exempt it.",
        )
        queue_event(case, EVENT_DETECTED, now)
    return case


def last_woken(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], datetime]:
    """{(namespace, workload): when its tenant last woke it} for those of ``keys`` ever woken
    (one query)."""
    keys = set(keys)
    if not keys:
        return {}
    rows = (
        IdleCase.objects.filter(
            state=IdleCase.State.WOKEN,
            namespace__in={n for n, _ in keys},
            workload__in={w for _, w in keys},
        )
        .values("namespace", "workload")
        .annotate(last=Max("ended_at"))
        .order_by()
    )
    return {
        (r["namespace"], r["workload"]): r["last"]
        for r in rows
        if (r["namespace"], r["workload"]) in keys and r["last"] is not None
    }


def evaluate(*, now: datetime | None = None, kube: Kube | None = None) -> Evaluation:
    """One pass: open a case (and tell its tenant) for each new idle workload, close the open
    notified cases whose workload is busy again, act on those past their grace, and record
    the reclaimed hours of the acted ones. A workload its tenant woke is judged again only
    on a window that starts after the wake."""
    now = now or timezone.now()
    policies = Policies.load()
    result = Evaluation()
    idle = {(i.namespace, i.workload): i for i in detect(now, policies)}
    tenants = {
        t.slug: t for t in Tenant.objects.filter(slug__in={i.tenant_slug for i in idle.values()})
    }
    open_cases = {
        (c.namespace, c.workload): c
        for c in IdleCase.objects.filter(state__in=IdleCase.OPEN).select_related("tenant", "policy")
    }
    woken = last_woken(idle)
    end = window_end(now)
    for key, item in idle.items():
        if key in open_cases:
            continue
        tenant = tenants[item.tenant_slug]
        policy = policies.effective(item.flavor, tenant.pk)
        if policy is None or exempt(item.namespace, item.workload, now) is not None:
            continue
        if key in woken and end - timedelta(hours=policy.window_hours) < woken[key]:
            # Woken by its tenant: the hours before the wake (asleep, or the idle ones that
            # put it to sleep) do not count, so it gets a whole window of its own first.
            continue
        open_cases[key] = _open_case(item, tenant, policy, now)
        result.detected += 1
    for key, case in open_cases.items():
        if case.state in (IdleCase.State.DETECTED, IdleCase.State.NOTIFIED):
            if key not in idle or exempt(case.namespace, case.workload, now) is not None:
                _end(
                    case,
                    IdleCase.State.CLOSED,
                    "Busy again or exempted before the grace ran out.",
                    None,
                    now,
                )
                result.closed += 1
            elif case.act_after <= now:
                result.acted += _act(case, kube, now, result)
        elif case.state == IdleCase.State.NO_ACTION and key not in idle:
            _end(case, IdleCase.State.CLOSED, "Busy again (or gone).", None, now)
            result.closed += 1
        elif case.state == IdleCase.State.ACTED and case.kind != IdleKind.JOB:
            ended = _awake_again(case)
            if ended is not None:
                _end(case, *ended, None, now)
                result.closed += 1
    result.reclaimed_rows = record_reclaimed(now)
    return result


def _awake_again(case: IdleCase) -> tuple[str, str] | None:
    """(state, note) ending an acted endpoint or cluster case that main holds awake again with
    no change of it still open (woken from the catalog, the API or a change of its spec, not
    from this case), or gone from the catalog; None while it sleeps or a change is on its way
    (the sleep change not merged yet, or the wake)."""
    resource = _resource(case)
    if resource is None:
        return IdleCase.State.CLOSED, f"{case.target} is no longer in the catalog."
    if idle_actions.is_asleep(resource) or blocking_request(resource) is not None:
        return None
    return (
        IdleCase.State.WOKEN,
        f"{resource} is awake on main again (woken outside this case, or its sleep change "
        "did not merge).",
    )


def _act(case: IdleCase, kube: Kube | None, now: datetime, result: Evaluation) -> int:
    try:
        state = act(case, kube)
    except (KubeError, ValidationError) as exc:
        result.errors.append(f"{case}: {exc}")
        return 0
    with transaction.atomic():
        before = case.state
        case.state = state
        if state == IdleCase.State.ACTED:
            case.acted_at = now
        if state == IdleCase.State.CLOSED:
            case.ended_at = now
        case.save()
        record_audit(
            actor=None,
            action="billing.idle_acted",
            target=case,
            tenant_slug=case.tenant.slug,
            diff={"state": [before, state], "note": [None, case.note]},
        )
        if state == IdleCase.State.ACTED:
            _tell(case, f"{case.workload} in {case.namespace} was reclaimed", case.note)
            queue_event(case, EVENT_RECLAIMED, now)
    return 1 if state == IdleCase.State.ACTED else 0


def _end(case: IdleCase, state: str, note: str, acting_user: Any, now: datetime) -> None:
    with transaction.atomic():
        before = case.state
        case.state = state
        case.note = note
        case.ended_at = now
        case.ended_by = acting_user if getattr(acting_user, "pk", None) else None
        case.save()
        record_audit(
            actor=acting_user,
            action=f"billing.idle_{state}",
            target=case,
            tenant_slug=case.tenant.slug,
            diff={"state": [before, state], "note": [None, note]},
        )


# --- reclaimed hours -----------------------------------------------------------------------


def reclaimed_rows(case: IdleCase, now: datetime) -> list[ReclaimedHour]:
    """The hours from the action to the wake (or ``now``), each with the GPU-hours the
    workload would have held in it: its GPUs times the part of the hour it was reclaimed."""
    if case.acted_at is None:
        return []
    end = case.ended_at or now
    start = case.acted_at
    rows = []
    hour = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while hour < end:
        part = min(end, hour + timedelta(hours=1)) - max(start, hour)
        seconds = Decimal(str(part.total_seconds()))
        if seconds > 0:
            rows.append(
                ReclaimedHour(
                    hour=hour,
                    tenant_slug=case.tenant.slug,
                    namespace=case.namespace,
                    flavor=case.flavor,
                    case=case,
                    gpu_hours=(case.gpus * seconds / 3600).quantize(Decimal("0.001")),
                )
            )
        hour += timedelta(hours=1)
    return rows


def record_reclaimed(now: datetime) -> int:
    """Rewrite the reclaimed hours of the cases acted on that are still reclaimed or ended
    within the last day (so a wake's last hour is settled); idempotent."""
    cases = (
        IdleCase.objects.filter(acted_at__isnull=False)
        .exclude(ended_at__lt=now - timedelta(days=1))
        .select_related("tenant")
    )
    written = 0
    for case in cases:
        rows = reclaimed_rows(case, now)
        with transaction.atomic():
            ReclaimedHour.objects.filter(case=case).delete()
            ReclaimedHour.objects.bulk_create(rows)
        written += len(rows)
    return written


def _reclaimed(
    tenant_slug: str | None, start: datetime | None, end: datetime | None
) -> QuerySet[ReclaimedHour]:
    rows = ReclaimedHour.objects.all()
    if tenant_slug is not None:
        rows = rows.filter(tenant_slug=tenant_slug)
    if start is not None:
        rows = rows.filter(hour__gte=start)
    if end is not None:
        rows = rows.filter(hour__lt=end)
    return rows


def reclaimed_total(
    *, tenant_slug: str | None = None, since: datetime | None = None, end: datetime | None = None
) -> Decimal:
    """GPU-hours reclaimed from ``since`` to ``end`` (the fleet's, or one tenant's)."""
    total = _reclaimed(tenant_slug, since, end).aggregate(total=Sum("gpu_hours"))["total"]
    return total or Decimal(0)


def reclaimed_by_day(
    *, tenant_slug: str | None = None, since: datetime | None = None, end: datetime | None = None
) -> list[tuple[Any, Decimal]]:
    """(day, GPU-hours) from ``since`` (default: 30 days ago) to ``end``: what charts draw."""
    since = since or timezone.now() - timedelta(days=30)
    rows = _reclaimed(tenant_slug, since, end)
    return [
        (r["day"], r["total"])
        for r in rows.annotate(day=TruncDate("hour", tzinfo=UTC))
        .values("day")
        .annotate(total=Sum("gpu_hours"))
        .order_by("day")
    ]


# --- what tenants may do -------------------------------------------------------------------


def do_wake(case: IdleCase, *, acting_user: Any, kube: Kube | None = None) -> IdleCase:
    """Undo the action of an acted case: the Workload active again (Kueue queues it anew), or
    the endpoint or cluster woken through Git. Only an acted case can be woken."""
    access.require(acting_user, Action.WAKE, case.tenant)
    if case.state != IdleCase.State.ACTED:
        raise ValidationError(f"This case is {case.get_state_display().lower()}: nothing to wake.")
    now = timezone.now()
    if case.kind == IdleKind.JOB:
        activation.set_active(kube or Kube(), case.namespace, case.target, True)
        note = f"Kueue Workload {case.target} active again: it queues for admission anew."
    else:
        resource = _resource(case)
        if resource is None:
            raise ValidationError(f"{case.target} is no longer in the catalog: nothing to wake.")
        idle_actions.wake(resource, reason="woken by its tenant", actor=acting_user)
        note = f"{resource} woken through a Git change."
    _end(case, IdleCase.State.WOKEN, note, acting_user, now)
    record_reclaimed(now)
    return case


def do_exempt(
    case: IdleCase, until: datetime, reason: str, *, acting_user: Any, kube: Kube | None = None
) -> IdleExemption:
    """Exempt the case's workload until ``until``, at most the policy's
    ``max_exemption_days`` ahead; an acted case is woken first."""
    access.require(acting_user, Action.EXEMPT_IDLE, case.tenant)
    now = timezone.now()
    reason = (reason or "").strip()
    errors: dict[str, str] = {}
    limit = case.policy.max_exemption_days if case.policy else 0
    if not reason or len(reason) > 300 or "\n" in reason:
        errors["reason"] = "Say why, in one line of at most 300 characters."
    if until <= now:
        errors["until"] = "An exemption ends in the future."
    elif until > now + timedelta(days=limit):
        errors["until"] = f"The policy allows exemptions of at most {limit} days."
    if not case.is_open:
        errors["case"] = "This case is over; nothing to exempt."
    if errors:
        raise ValidationError(errors)
    if case.state == IdleCase.State.ACTED:
        do_wake(case, acting_user=acting_user, kube=kube)
    with transaction.atomic():
        exemption = IdleExemption.objects.create(
            tenant=case.tenant,
            namespace=case.namespace,
            workload=case.workload,
            until=until,
            reason=reason,
            created_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
        record_audit(
            actor=acting_user,
            action="billing.idle_exempted",
            target=exemption,
            tenant_slug=case.tenant.slug,
            diff={"until": [None, until.isoformat()], "reason": [None, reason]},
        )
        if case.is_open:
            _end(
                case,
                IdleCase.State.EXEMPTED,
                f"Exempt until {until:%Y-%m-%d %H:%M} UTC: {reason}",
                acting_user,
                now,
            )
    return exemption


def tenant_cases(tenant: Tenant, *, acting_user: Any) -> Any:
    access.require(acting_user, Action.VIEW, tenant)
    return IdleCase.objects.filter(tenant=tenant).select_related("policy")
