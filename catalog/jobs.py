"""Tenants' batch jobs: read, check, submit, cancel, and read back (status and logs).

A batch job is run-once work inside the quota Git granted, so it does not go through a pull
request: the portal renders it (``gitops.render.jobs``), validates it strictly against the
upstream schema (the Job's built-in one, the JobSet's CRD from the checks' schema source),
asks the API server for a dry run and then creates it in the tenant's namespace, all
impersonating the tenant's job service account for the member's role, with the member's name
as a user extra for the audit log (``gitops.render.rbac``, "batch jobs"), so RBAC, Kueue,
Kyverno and Pod Security decide as they would for that tenant role and say so in their own
words. A
``BatchJob`` row and an audit row record it; a cancel deletes the object (its pods and Kueue's
Workload go with it) and is audited too.

One place reads what is asked (``read_job``), from the form, the REST API and the declarative
document alike: strict (an unknown field, a wrong type are errors naming the field), then the
template's defaults, then ``validate_job`` against the tenant as Git holds it.

Nothing is half-created: no row without the object, no object without the row. The API server
unreachable, Kueue's webhook down, RBAC or a policy refusing: the submission says why and
nothing is kept.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from catalog.models import BatchJob, JobTemplate
from catalog.specs import desired_tenant
from fleet.kube import Kube, KubeError
from fleet.models import QueueWorkload
from gitops import schemas
from gitops.fleet import configured_fleet
from gitops.render import jobs as render
from gitops.render import rbac
from gitops.specs import BatchJobSpec, FleetSpec, SpecError, TenantSpec
from portal.audit import record_audit
from tenants import access
from tenants.access import Action
from tenants.models import Tenant
from tenants.names import validate_dns1123_label

logger = logging.getLogger(__name__)

# The fields a job request may hold (the BatchJobSpec's, with env as a mapping).
FIELDS = (
    "name",
    "template",
    "image",
    "command",
    "args",
    "env",
    "share",
    "gpus",
    "nodes",
    "priority",
    "topology",
    "deadline_seconds",
    "ttl_seconds",
    "cpu",
    "memory_gib",
)
_INTS = ("gpus", "nodes", "deadline_seconds", "ttl_seconds", "cpu", "memory_gib")
_STRINGS = ("name", "template", "image", "share", "priority", "topology")
_LISTS = ("command", "args")
LOG_LINES = 100
# /t/<slug>/jobs/new/ is the form, so no job may be called "new".
RESERVED_NAMES = frozenset({"new"})
Errors = dict[str, list[str]]


@dataclass(frozen=True)
class CheckedJob:
    """A job request that passed every check: what it renders to, for whom."""

    spec: BatchJobSpec
    template: JobTemplate | None
    tenant: TenantSpec
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])


# --- reading and checking ------------------------------------------------------------------


def _types(data: Mapping[str, Any]) -> Errors:
    errors: Errors = {}
    for key in data:
        if key not in FIELDS:
            errors[key] = [f"Unknown field; a job takes {', '.join(FIELDS)}."]
    for key in _STRINGS:
        if key in data and not isinstance(data[key], str):
            errors[key] = ["Must be a string."]
    for key in _INTS:
        value = data.get(key)
        if key in data and (isinstance(value, bool) or not isinstance(value, int)):
            errors[key] = ["Must be a whole number."]
    for key in _LISTS:
        value = data.get(key)
        if key in data and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            errors[key] = ["Must be a list of strings."]
    env = data.get("env")
    if "env" in data and (
        not isinstance(env, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        errors["env"] = ["Must map variable names to string values."]
    return errors


def _template(name: str) -> JobTemplate | None:
    return JobTemplate.objects.filter(name=name, active=True).first() if name else None


def read_job(data: Mapping[str, Any]) -> tuple[BatchJobSpec, JobTemplate | None]:
    """The job asked for in ``data`` (JSON-like), with its template's defaults where it gives
    none; raises ``ValidationError`` ({field: [messages]}) for unknown fields and wrong types
    (what the job may do is ``check_job``'s)."""
    errors = _types(data)
    if errors:
        raise ValidationError(errors)
    template_name = str(data.get("template") or "")
    template = _template(template_name)
    if template_name and template is None:
        names = ", ".join(JobTemplate.objects.filter(active=True).values_list("name", flat=True))
        raise ValidationError({"template": [f"No such template; choose one of {names or 'none'}."]})
    defaults: dict[str, Any] = {}
    if template is not None:
        defaults = {
            "image": template.image,
            "command": list(template.command),
            "args": list(template.args),
            "gpus": template.gpus,
            "deadline_seconds": template.max_runtime_seconds,
        }
    values = {**defaults, **{k: v for k, v in data.items() if k != "env"}}
    env = tuple((str(k), str(v)) for k, v in sorted((data.get("env") or {}).items()))
    given: dict[str, Any] = {
        key: tuple(values[key]) if key in _LISTS else values[key]
        for key in (*_INTS, *_LISTS, "priority", "topology")
        if key in values
    }
    spec = BatchJobSpec(
        name=str(values.get("name") or ""),
        image=str(values.get("image") or ""),
        share=str(values.get("share") or ""),
        env=env,
        template=template.name if template is not None else "",
        **given,
    )
    return spec, template


def spec_json(spec: BatchJobSpec) -> dict[str, Any]:
    """A stored job spec in the request's own shape (env as a mapping)."""
    data = dataclasses.asdict(spec)
    data["command"], data["args"] = list(spec.command), list(spec.args)
    data["env"] = dict(spec.env)
    return data


def check_job(
    tenant: Tenant, data: Mapping[str, Any], *, fleet: FleetSpec | None = None
) -> CheckedJob:
    """Everything that can be known before the cluster is asked: the request read, the job
    valid for the tenant's shares, trust level and the fleet, the object rendered and valid
    against its upstream schema. Raises ``ValidationError``."""
    fleet = fleet or configured_fleet()
    spec, template = read_job(data)
    if spec.name in RESERVED_NAMES:
        raise ValidationError(
            {"name": [f"{spec.name!r} names a page of the portal; choose another."]}
        )
    tenant_spec = desired_tenant(tenant)
    limit = template.max_runtime_seconds if template is not None else render.MAX_DEADLINE
    try:
        obj = render.render_job(spec, tenant_spec, fleet, max_deadline_seconds=limit)
    except SpecError as exc:
        raise ValidationError({k or "__all__": [v] for k, v in exc.errors.items()}) from exc
    _schema_check(obj, fleet)
    return CheckedJob(spec, template, tenant_spec, obj)


def _schema_check(obj: dict[str, Any], fleet: FleetSpec) -> None:
    """The rendered object against its upstream schema, strictly (an unknown field is an
    error), from the schema source the pull requests' checks use. A JobSet with no CRD
    anywhere is refused rather than sent unvalidated."""
    source = schemas.schema_source()
    try:
        registry = source.registry(fleet.kubernetes_version)
    except (OSError, ValueError) as exc:
        raise ValidationError(
            f"The schemas could not be loaded ({exc}); nothing was submitted."
        ) from exc
    problems = registry.validate(obj)
    if any(p.unvalidated for p in problems):
        raise ValidationError(
            f"There is no schema for {obj['apiVersion']} {obj['kind']} ({source.short_label()}): "
            "run manage.py fetch_schemas, or let the fleet sync read the cluster's CRDs once "
            "JobSet is installed. Nothing was submitted."
        )
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        # The renderer's own mistake, never the user's: say where, so it can be reported.
        raise ValidationError(
            "The rendered job does not match its schema: "
            + "; ".join(f"{p.path}: {p.message}" for p in errors[:5])
        )


# --- the cluster, as the member's tenant role ----------------------------------------------


def _as_member(user: Any, tenant: Tenant, role: str) -> Kube:
    """A client acting as the tenant's job account for ``role``, naming ``user`` in the
    audit log. No groups: the API server gives the account its own (see ``rbac``)."""
    return Kube().impersonating(
        rbac.job_account_user(tenant.slug, role),
        extra={rbac.MEMBER_EXTRA: [user.get_username()]},
    )


def _member_role(user: Any, tenant: Tenant) -> str:
    role = access.role_in(user, tenant)
    if role is None:
        raise PermissionDenied(access.DENIED[Action.VIEW])
    return role


# The API server's words when a webhook failing closed did not answer (k8s.io/apiserver
# pkg/util/webhook/error.go ``ErrCallingWebhook.Error``).
_UNANSWERED_WEBHOOK = re.compile(r'failed calling webhook "(?P<name>[^"]+)".*', re.DOTALL)
# Kueue's webhooks for the kinds a job is submitted as (kueue v0.19.2
# config/components/webhook/manifests.yaml); JobSet's own controller names its webhooks
# m/vjobset.kb.io too, so for those the Service Kueue's manifests name decides.
_KUEUE_JOB_WEBHOOKS = frozenset({"mjob.kb.io", "vjob.kb.io"})
_KUEUE_JOBSET_WEBHOOKS = frozenset({"mjobset.kb.io", "vjobset.kb.io"})


def _kueue_unanswered(exc: KubeError) -> str:
    """The API server's reason when a create failed because Kueue's admission webhook did not
    answer (500 InternalError, ``failurePolicy: Fail``), or ""."""
    if exc.status != 500:
        return ""
    found = _UNANSWERED_WEBHOOK.search(str(exc))
    if found is None:
        return ""
    name, reason = found["name"], found[0].rstrip(". ")
    if name in _KUEUE_JOB_WEBHOOKS or (name in _KUEUE_JOBSET_WEBHOOKS and "kueue" in reason):
        return reason
    return ""


def _cluster_refusal(exc: KubeError, doing: str) -> ValidationError:
    """What the API server said, as the person should read it."""
    unanswered = _kueue_unanswered(exc)
    if unanswered:
        return ValidationError(
            f"Kueue's admission webhook is not answering: the API server {unanswered}. "
            "Nothing was submitted; try again when Kueue is back."
        )
    if exc.status is None or exc.status >= 500:
        return ValidationError(
            f"The cluster could not {doing} ({exc}). Nothing was changed; try again when it "
            "answers."
        )
    return ValidationError(f"The cluster refused to {doing}: {exc}")


def do_submit_job(tenant: Tenant, *, acting_user: Any, data: Mapping[str, Any]) -> BatchJob:
    """Submit a batch job as ``acting_user`` (a member or admin of ``tenant``): checked,
    rendered, dry-run, created in the tenant's namespace, recorded and audited.

    Not one database transaction around the cluster call: the object cannot be rolled back
    with it. The row and its audit row are written in a transaction of their own once the
    object exists, and if that fails (or commits nothing) the object is deleted again."""
    access.require(acting_user, Action.RUN_JOB, tenant)
    if acting_user is None:
        raise PermissionDenied("A job is submitted as a member of the tenant.")
    role = _member_role(acting_user, tenant)
    checked = check_job(tenant, data)
    obj, kind, namespace = checked.obj, checked.kind, tenant.slug
    api_version = render.api_version_of(kind)
    with _as_member(acting_user, tenant, role) as kube:
        try:
            kube.create(api_version, kind, namespace, obj, dry_run=True)
            created = kube.create(api_version, kind, namespace, obj)
        except KubeError as exc:
            raise _cluster_refusal(exc, f"run {kind} {checked.spec.name}") from exc
        uid = str((created.get("metadata") or {}).get("uid") or "")
        try:
            with transaction.atomic():
                job = BatchJob.objects.create(
                    tenant=tenant,
                    name=checked.spec.name,
                    namespace=namespace,
                    kind=kind,
                    uid=uid,
                    template=checked.template,
                    spec=spec_json(checked.spec),
                    submitted_by=acting_user,
                )
                record_audit(
                    actor=acting_user,
                    action="job.submit",
                    target=job,
                    tenant_slug=tenant.slug,
                    diff={"spec": [None, job.spec]},
                )
        except Exception:
            # Nothing runs unrecorded: take the object back.
            _delete_quietly(kube, api_version, kind, namespace, checked.spec.name)
            raise
    return job


def _delete_quietly(kube: Kube, api_version: str, kind: str, namespace: str, name: str) -> None:
    try:
        kube.delete(api_version, kind, namespace, name, propagation="Background")
    except KubeError:
        logger.exception("could not delete %s %s/%s after its row failed", kind, namespace, name)


@transaction.atomic
def do_cancel_job(job: BatchJob, *, acting_user: Any) -> BatchJob:
    """Delete the job's object (its pods and Kueue's Workload go with it, in the background),
    as ``acting_user``; one already gone counts as cancelled. Audited."""
    job = BatchJob.objects.select_for_update().get(pk=job.pk)
    tenant = job.tenant
    access.require(acting_user, Action.CANCEL_JOB, tenant, owners=(job.submitted_by_id,))
    if acting_user is None:
        raise PermissionDenied("A job is cancelled as a member of the tenant.")
    if job.cancelled_at is not None:
        raise ValidationError(f"{job.name} was cancelled already.")
    role = _member_role(acting_user, tenant)
    with _as_member(acting_user, tenant, role) as kube:
        try:
            current = kube.get(render.api_version_of(job.kind), job.kind, job.namespace, job.name)
            if (current.get("metadata") or {}).get("uid") == job.uid:
                kube.delete(
                    render.api_version_of(job.kind),
                    job.kind,
                    job.namespace,
                    job.name,
                    propagation="Background",
                )
        except KubeError as exc:
            if exc.status != 404:
                raise _cluster_refusal(exc, f"cancel {job.kind} {job.name}") from exc
    job.cancelled_at = timezone.now()
    job.cancelled_by = acting_user
    job.save(update_fields=["cancelled_at", "cancelled_by"])
    record_audit(actor=acting_user, action="job.cancel", target=job, tenant_slug=tenant.slug)
    return job


# --- reading back --------------------------------------------------------------------------


@dataclass(frozen=True)
class PodLog:
    """The last lines of one pod of a job, or why they could not be read."""

    pod: str
    phase: str
    text: str = ""
    error: str = ""


def pod_selector(job: BatchJob) -> str:
    """The label selector of the job's pods, by the object's uid (a name may be reused): the
    Job controller's ``batch.kubernetes.io/controller-uid``, JobSet's
    ``jobset.sigs.k8s.io/jobset-uid`` (jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go
    ``JobSetUIDKey``)."""
    if job.kind == "JobSet":
        return f"jobset.sigs.k8s.io/jobset-uid={job.uid}"
    return f"batch.kubernetes.io/controller-uid={job.uid}"


def job_logs(job: BatchJob, *, acting_user: Any, tail_lines: int = LOG_LINES) -> list[PodLog]:
    """The last ``tail_lines`` of each pod of ``job``, read as the member (viewers too)."""
    access.require(acting_user, Action.READ_JOB_LOGS, job.tenant)
    role = _member_role(acting_user, job.tenant)
    logs: list[PodLog] = []
    with _as_member(acting_user, job.tenant, role) as kube:
        try:
            pods = kube.list("v1", "Pod", job.namespace, label_selector=pod_selector(job))
        except KubeError as exc:
            raise _cluster_refusal(exc, f"list the pods of {job.name}") from exc
        for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
            name = str((pod.get("metadata") or {}).get("name") or "")
            phase = str((pod.get("status") or {}).get("phase") or "")
            try:
                text = kube.pod_log(
                    job.namespace, name, container=render.CONTAINER, tail_lines=tail_lines
                )
            except KubeError as exc:
                logs.append(PodLog(name, phase, error=str(exc)))
            else:
                logs.append(PodLog(name, phase, text=text))
    return logs


def read_object(job: BatchJob, *, acting_user: Any) -> dict[str, Any] | None:
    """The job's object as the cluster has it now (read as the member), or None when it is
    gone (cancelled, or deleted after its TTL); ``KubeError`` when it cannot be read."""
    role = _member_role(acting_user, job.tenant)
    with _as_member(acting_user, job.tenant, role) as kube:
        try:
            obj = kube.get(render.api_version_of(job.kind), job.kind, job.namespace, job.name)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
    if (obj.get("metadata") or {}).get("uid") != job.uid:
        return None  # another job of the same name, submitted since
    return obj


def jobs_of(tenant: Tenant) -> Any:
    """The tenant's batch jobs, newest first."""
    return BatchJob.objects.filter(tenant=tenant).select_related("submitted_by", "template")


def job_named(tenant: Tenant, name: str) -> BatchJob | None:
    """The newest job of that name in the tenant (an outsider never gets here: the views and
    the API resolve the tenant for the caller first)."""
    return jobs_of(tenant).filter(name=name).first()


# --- templates ------------------------------------------------------------------------------

TEMPLATE_FIELDS = (
    "purpose",
    "description",
    "image",
    "command",
    "args",
    "gpus",
    "max_runtime_seconds",
    "active",
)


@transaction.atomic
def do_save_job_template(*, acting_user: Any, name: str, values: Mapping[str, Any]) -> JobTemplate:
    """Create or change the template ``name``; audited with what changed. The image must be
    one of the fleet's registries, the command free of control characters, the runtime within
    what any job may run, as for the jobs made from it."""
    access.require(acting_user, Action.MANAGE_JOB_TEMPLATES)
    try:
        validate_dns1123_label(name)
    except ValidationError as exc:
        raise ValidationError({"name": exc.messages}) from exc
    template = JobTemplate.objects.filter(name=name).first()
    before = {f: getattr(template, f) for f in TEMPLATE_FIELDS} if template else {}
    template = template or JobTemplate(name=name)
    for field in TEMPLATE_FIELDS:
        if field in values:
            setattr(template, field, values[field])
    _check_template(template)
    template.full_clean()
    template.save()
    after = {f: getattr(template, f) for f in TEMPLATE_FIELDS}
    record_audit(
        actor=acting_user,
        action="job_template.save",
        target=template,
        diff={f: [before.get(f), after[f]] for f in TEMPLATE_FIELDS if before.get(f) != after[f]},
    )
    return template


def _check_template(template: JobTemplate) -> None:
    """A template's defaults under the rules of the jobs made from it (``validate_job``), on a
    tenant with a share large enough that only the template's own fields can fail."""
    fleet = configured_fleet()
    probe = BatchJobSpec(
        name=template.name if len(template.name) <= render.NAME_MAX else "probe",
        image=template.image,
        share="",
        command=tuple(template.command) if isinstance(template.command, list) else (),
        args=tuple(template.args) if isinstance(template.args, list) else (),
        deadline_seconds=template.max_runtime_seconds,
    )
    try:
        render.validate_job(probe, TenantSpec(slug="probe"), fleet)
    except SpecError as exc:
        fields = {"name", "image", "command", "args", "deadline_seconds"}
        errors = {
            ("max_runtime_seconds" if k == "deadline_seconds" else k.split("[")[0]): [v]
            for k, v in exc.errors.items()
            if k.split("[")[0] in fields
        }
        if errors:
            raise ValidationError(errors) from exc
    for field in ("command", "args"):
        value = getattr(template, field)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValidationError({field: ["Must be a list of strings."]})


@transaction.atomic
def do_delete_job_template(template: JobTemplate, *, acting_user: Any) -> None:
    """Remove a template; jobs made from it keep their spec (and lose the link)."""
    access.require(acting_user, Action.MANAGE_JOB_TEMPLATES)
    record_audit(actor=acting_user, action="job_template.delete", target=template)
    template.delete()


# --- where a job stands ----------------------------------------------------------------------


@dataclass(frozen=True)
class JobState:
    """Where a job stands, from Kueue's Workload rows the fleet watch keeps (by namespace and
    owner uid, never a label) and, on its page, the Job's own status read as the member.
    ``state`` is one of ``STATES``; ``detail`` is Kueue's reason and message or the Job's;
    ``position`` of a pending job is its place in the tenant's LocalQueue, 1 the next."""

    state: str
    detail: str = ""
    position: int | None = None

    @property
    def label(self) -> str:
        return STATES.get(self.state, self.state)


STATES = {
    "submitted": "Submitted",
    "pending": "Pending",
    "admitted": "Admitted",
    "running": "Running",
    "preempted": "Preempted",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "gone": "Gone",
}
_FROM_WORKLOAD: dict[str, str] = {
    QueueWorkload.State.PENDING: "pending",
    QueueWorkload.State.QUOTA_RESERVED: "pending",
    QueueWorkload.State.INACTIVE: "pending",
    QueueWorkload.State.ADMITTED: "admitted",
    QueueWorkload.State.PREEMPTED: "preempted",
    QueueWorkload.State.EVICTED: "preempted",
    QueueWorkload.State.SUCCEEDED: "succeeded",
    QueueWorkload.State.FAILED: "failed",
}


def workload_of(job: BatchJob) -> QueueWorkload | None:
    """Kueue's Workload of the job, as the fleet watch last read it."""
    return (
        QueueWorkload.objects.filter(
            namespace=job.namespace, owner_kind=job.kind, owner_uid=job.uid
        )
        .order_by("-last_seen")
        .first()
    )


def state_from(job: BatchJob, workload: QueueWorkload | None) -> JobState:
    if job.cancelled_at is not None:
        return JobState("cancelled")
    if workload is None:
        return JobState("submitted", "Kueue has not reported a Workload for it yet.")
    state = _FROM_WORKLOAD.get(workload.state, "pending")
    detail = ": ".join(part for part in (workload.reason, workload.message) if part)
    if state == "preempted" and workload.preemption_reason:
        detail = f"{workload.preemption_reason}. {detail}".strip()
    # Kueue's visibility API counts from 0; people, and the queue page, from 1.
    queued = workload.position_in_local_queue
    position = queued + 1 if state == "pending" and queued is not None else None
    return JobState(state, detail, position)


def states_of(jobs: list[BatchJob]) -> dict[int, JobState]:
    """Each job's state from the Workload rows, in one query for the lot."""
    uids = [job.uid for job in jobs if job.uid]
    rows: dict[tuple[str, str], QueueWorkload] = {}
    for row in QueueWorkload.objects.filter(owner_uid__in=uids).order_by("last_seen"):
        rows[(row.namespace, row.owner_uid)] = row
    return {job.pk: state_from(job, rows.get((job.namespace, job.uid))) for job in jobs}


def refined(state: JobState, obj: dict[str, Any] | None) -> JobState:
    """The Workload's state with what the Job itself says: running pods, its own finish (a
    Job's conditions come before Kueue's Finished), or that it is gone."""
    if state.state == "cancelled":
        return state
    if obj is None:
        return JobState(
            "gone",
            "The object is no longer in the cluster (deleted after it "
            "finished, or by someone else).",
        )
    status = obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        kind = condition.get("type")
        text = ": ".join(p for p in (condition.get("reason"), condition.get("message")) if p)
        if kind in ("Complete", "Completed"):
            return JobState("succeeded", text)
        if kind == "Failed":
            return JobState("failed", text)
    if state.state == "admitted" and (status.get("active") or status.get("replicatedJobsStatus")):
        return JobState("running", state.detail)
    return state
