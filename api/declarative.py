"""Declarative specs: the portal's own document format, and plan, apply, delete and export.

A document names one catalog resource and says what it should be::

    apiVersion: portal.ai-factory.dev/v1
    kind: GpuShare                 # TenantCluster, GpuShare or ModelEndpoint (or BatchJob)
    metadata:
      tenant: alpha
      name: train-a
      annotations:                 # optional; the one annotation read is the reason
        portal.ai-factory.dev/reason: fine-tuning next week
    spec: {flavor: h200, kind: whole, count: 2}

``spec`` is the catalog's spec JSON of that kind (``gitops.specs``) without ``name``. Reading
is strict: an unknown field, a wrong type, a missing field or a name that is no DNS-1123 label
is an error with its dotted path, and nothing is written. What a spec asks for is then judged
by the checks the browser's forms use (``catalog.services.check_request``, through
``do_create_request`` / ``do_modify_request``), so the API cannot ask for what a form could
not. A ``status`` block (what ``export`` adds) is accepted and ignored, so an exported
document applies again as "unchanged".

A ``BatchJob`` document is run-once work, not a resource: see "batch jobs" below for what
apply, a dry run and delete mean for it.

Nothing here knows HTTP: the views turn the outcomes into status codes.
"""

from __future__ import annotations

import dataclasses
import types
from datetime import date
from enum import StrEnum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Prefetch
from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from catalog import jobs, services, states
from catalog.models import BatchJob, Kind, Resource, ResourceRequest
from catalog.specs import CLASSES, from_json, to_json
from gitops.render.validate import text_problem
from gitops.specs import SpecError
from tenants import access
from tenants.access import Action
from tenants.models import Tenant
from tenants.names import TENANT_SLUG_MAX, validate_dns1123_label

API_VERSION = "portal.ai-factory.dev/v1"
# Document kind -> catalog kind, and the URL segment of each.
KINDS: dict[str, str] = {
    "TenantCluster": Kind.CLUSTER,
    "GpuShare": Kind.GPU_SHARE,
    "ModelEndpoint": Kind.ENDPOINT,
}
KIND_NAMES: dict[str, str] = {kind: name for name, kind in KINDS.items()}
PLURALS: dict[str, str] = {
    "clusters": Kind.CLUSTER,
    "gpushares": Kind.GPU_SHARE,
    "endpoints": Kind.ENDPOINT,
}
REASON_ANNOTATION = "portal.ai-factory.dev/reason"
REASON_MAX_LENGTH = 2000  # as the forms' reason field
TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
METADATA_FIELDS = ("tenant", "name", "annotations")
# What the forms allow (catalog.forms), and a bound for every other string and number.
MAX_LENGTH = {"model_uri": 512, "served_model_name": 128}
STRING_MAX_LENGTH = 1024
INT_LIMIT = 2**31 - 1

A = ResourceRequest.Action
Errors = dict[str, list[str]]


class Outcome(StrEnum):
    """What applying a document did (or, for a dry run, would do)."""

    UNCHANGED = "unchanged"
    CREATED = "created"
    MODIFIED = "modified"
    DECOMMISSION = "decommission"
    CONFLICT = "conflict"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class Document:
    """A document that was read: the catalog kind, and the spec complete with defaults and
    its ``name`` (the catalog's stored form), so equal specs compare equal."""

    kind: str
    tenant: str
    name: str
    spec: dict[str, Any]
    reason: str = ""


@dataclasses.dataclass
class Plan:
    """What a document does to its resource. ``request`` is the request that was submitted
    (created, modified, decommission), or the one already in flight (unchanged, conflict);
    ``diff`` maps a dotted path to its old and new value."""

    document: Document
    outcome: Outcome
    resource: Resource | None = None
    request: ResourceRequest | None = None
    diff: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    detail: str = ""


# --- reading a document -------------------------------------------------------------------


def _type_problems(value: Any, hint: Any, path: str) -> list[tuple[str, str]]:
    """Where ``value`` is not of the dataclass field's type ``hint``, as (path, message)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        if value in args and isinstance(value, type(args[0])):
            return []
        return [(path, f"Must be one of {', '.join(map(str, args))}.")]
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        return _type_problems(value, next(a for a in args if a is not type(None)), path)
    if origin is tuple:
        if not isinstance(value, list):
            return [(path, "Must be a list.")]
        return [p for i, item in enumerate(value) for p in _type_problems(item, args[0], path)]
    if hint is bool:
        return [] if isinstance(value, bool) else [(path, "Must be true or false.")]
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return [(path, "Must be a whole number.")]
        if abs(value) > INT_LIMIT:
            return [(path, f"Must be between -{INT_LIMIT} and {INT_LIMIT}.")]
        return []
    if hint is str:
        if not isinstance(value, str):
            return [(path, "Must be a string.")]
        field = path.split(".", 1)[1].split("[", 1)[0] if "." in path else path
        longest = MAX_LENGTH.get(field, STRING_MAX_LENGTH)
        if len(value) > longest:
            return [(path, f"Must be at most {longest} characters (this one has {len(value)}).")]
        if problem := text_problem(value):
            return [(path, f"May not contain {problem}.")]
        return []
    return [(path, "Unexpected value.")]


def _spec_errors(kind: str, spec: Any, errors: Errors) -> None:
    if not isinstance(spec, dict):
        errors.setdefault("spec", []).append("Must be a mapping of the resource's fields.")
        return
    cls = CLASSES[kind]
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in spec:
        if key == "name":
            errors.setdefault("spec.name", []).append("Unknown field: the name is metadata.name.")
        elif key not in fields:
            errors.setdefault(f"spec.{key}", []).append("Unknown field.")
    for name, field in fields.items():
        if name == "name":
            continue
        path = f"spec.{name}"
        if name not in spec:
            required = (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            )
            if required:
                errors.setdefault(path, []).append("This field is required.")
            continue
        for where, message in _type_problems(spec[name], hints[name], path):
            errors.setdefault(where, []).append(message)


def _label_errors(value: Any, path: str, max_length: int, errors: Errors) -> None:
    if value is None or value == "":
        errors.setdefault(path, []).append("This field is required.")
        return
    if not isinstance(value, str):
        errors.setdefault(path, []).append("Must be a string.")
        return
    try:
        validate_dns1123_label(value, max_length=max_length)
    except ValidationError as exc:
        errors.setdefault(path, []).extend(exc.messages)


def _reason(annotations: Any, errors: Errors) -> str:
    if annotations is None:
        return ""
    if not isinstance(annotations, dict):
        errors.setdefault("metadata.annotations", []).append("Must be a mapping.")
        return ""
    for key in annotations:
        if key != REASON_ANNOTATION:
            errors.setdefault(f"metadata.annotations.{key}", []).append(
                f"Unknown annotation (the one read is {REASON_ANNOTATION})."
            )
    reason = annotations.get(REASON_ANNOTATION, "")
    path = f"metadata.annotations.{REASON_ANNOTATION}"
    if not isinstance(reason, str):
        errors.setdefault(path, []).append("Must be a string.")
        return ""
    if len(reason) > REASON_MAX_LENGTH:
        errors.setdefault(path, []).append(
            f"Must be at most {REASON_MAX_LENGTH} characters (this one has {len(reason)})."
        )
    if problem := text_problem(reason, multi_line=True):
        errors.setdefault(path, []).append(f"May not contain {problem}.")
    return reason


def parse(data: Any, *, kind: str = "", tenant: str = "", name: str = "") -> Document:
    """Read a document; ValidationError {dotted path: [messages]} when it is not one.

    ``kind`` (a catalog kind), ``tenant`` and ``name`` come from a URL: the document may leave
    apiVersion, kind and metadata out, and what it says must match them."""
    errors: Errors = {}

    def add(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    if not isinstance(data, dict):
        raise ValidationError(
            {"": ["A document is a mapping with apiVersion, kind, metadata and spec."]}
        )
    for key in data:
        if key not in TOP_FIELDS:
            add(str(key), "Unknown field.")
    from_url = bool(kind)
    version = data.get("apiVersion", API_VERSION if from_url else None)
    if version is None:
        add("apiVersion", f"This field is required ({API_VERSION}).")
    elif version != API_VERSION:
        add("apiVersion", f"Must be {API_VERSION}.")
    kind_name = data.get("kind", KIND_NAMES.get(kind) if from_url else None)
    if kind_name is None:
        add("kind", "This field is required.")
    elif not isinstance(kind_name, str) or kind_name not in KINDS:
        add("kind", f"Must be one of {', '.join(KINDS)}.")
    elif from_url and KINDS[kind_name] != kind:
        add("kind", f"Does not match the URL, which is about a {KIND_NAMES[kind]}.")
    metadata = data.get("metadata", {} if from_url else None)
    reason = ""
    if metadata is None:
        add("metadata", "This field is required.")
    elif not isinstance(metadata, dict):
        add("metadata", "Must be a mapping with tenant and name.")
    else:
        for key in metadata:
            if key not in METADATA_FIELDS:
                add(f"metadata.{key}", "Unknown field.")
        for field, given, longest in (
            ("tenant", tenant, TENANT_SLUG_MAX),
            ("name", name, 63),
        ):
            value = metadata.get(field, given or None)
            _label_errors(value, f"metadata.{field}", longest, errors)
            if given and value != given and f"metadata.{field}" not in errors:
                add(f"metadata.{field}", f"Does not match the URL ({given}).")
        reason = _reason(metadata.get("annotations"), errors)
    if "spec" not in data:
        add("spec", "This field is required.")
    elif isinstance(kind_name, str) and kind_name in KINDS:
        _spec_errors(KINDS[kind_name], data["spec"], errors)
    if errors:
        raise ValidationError(errors)
    assert isinstance(metadata, dict) and isinstance(kind_name, str)
    catalog_kind = KINDS[kind_name]
    doc_name = str(metadata.get("name", name))
    try:
        spec = to_json(from_json(catalog_kind, {**data["spec"], "name": doc_name}))
    except SpecError as exc:
        raise ValidationError({"spec": [str(exc)]}) from exc
    return Document(
        kind=catalog_kind,
        tenant=str(metadata.get("tenant", tenant)),
        name=doc_name,
        spec=spec,
        reason=reason,
    )


# --- planning and applying ----------------------------------------------------------------


def _path(field: str) -> str:
    """A form field of ``check_request`` (or a service's error key) as a document path."""
    if field in ("", "__all__"):
        return ""
    if field == "name":
        return "metadata.name"
    return f"spec.{field}"


def _document_error(exc: ValidationError) -> ValidationError:
    """A catalog service's ValidationError with the document's paths."""
    if hasattr(exc, "error_dict"):
        return ValidationError(
            {
                _path(field): [m for e in errs for m in e.messages]
                for field, errs in exc.error_dict.items()
            }
        )
    return ValidationError({"": exc.messages})


def _form_rules(document: Document) -> Errors:
    """What the forms check beyond ``check_request`` (``catalog.forms``)."""
    until = document.spec.get("until") if document.kind == Kind.GPU_SHARE else ""
    if not until:
        return {}
    try:
        ends = date.fromisoformat(str(until))
    except ValueError:
        return {"spec.until": ["Must be a date, YYYY-MM-DD."]}
    if ends <= timezone.localdate():
        return {"spec.until": ["The end date must be in the future."]}
    return {}


def _check(tenant: Tenant, document: Document, action: str) -> None:
    errors = _form_rules(document)
    check = services.check_request(
        tenant, document.kind, document.name, document.spec, action=action
    )
    for field, message in check.errors.items():
        errors.setdefault(_path(field), []).append(message)
    if errors:
        raise ValidationError(errors)


def tenant_for(user: Any, slug: str) -> Tenant:
    """The tenant ``slug`` if ``user`` may see it; Http404 otherwise, whether it exists or
    not (nobody probes for tenant names)."""
    tenant = access.visible_tenants(user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def held_resource(tenant: Tenant, kind: str, name: str) -> Resource | None:
    """The resource that holds the name: asked for, live or on its way out."""
    return (
        tenant.resources.filter(kind=kind, name=name)
        .exclude(state__in=[Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN])
        .first()
    )


def _stored(kind: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    """A stored spec with its defaults filled in, for comparing; None when there is none."""
    if not spec:
        return None
    try:
        return to_json(from_json(kind, spec))
    except SpecError:
        return dict(spec)


def diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Field by field, ``spec.<field>: {old, new}`` for the fields that differ."""
    before, after = old or {}, new or {}
    keys = [k for k in {**before, **after} if k != "name"]
    return {
        f"spec.{key}": {"old": before.get(key), "new": after.get(key)}
        for key in keys
        if before.get(key) != after.get(key)
    }


def _conflict(resource: Resource, document: Document, busy: ResourceRequest | None) -> Plan:
    if busy is None:
        busy = resource.requests.filter(action=A.DECOMMISSION).first()
    detail = (
        f"{busy.title} (request {busy.pk}) is {busy.get_state_display().lower()}; wait for it "
        "or cancel it first."
        if busy is not None
        else f"{resource} is {resource.get_state_display().lower()}."
    )
    return Plan(document, Outcome.CONFLICT, resource, busy, detail=detail)


def plan(document: Document, user: Any) -> Plan:
    """What applying ``document`` as ``user`` would do, writing nothing.

    Unchanged when the spec is what runs, or what a request in flight already asks for;
    a conflict when another request is in flight (it must merge or be cancelled first) or
    the resource is being decommissioned; otherwise create or modify, checked as the forms
    check it (ValidationError with document paths). Http404 for a tenant the user cannot see,
    PermissionDenied for one where the user may not ask for resources (a viewer)."""
    tenant = tenant_for(user, document.tenant)
    access.require(user, Action.REQUEST, tenant)
    resource = held_resource(tenant, document.kind, document.name)
    if resource is None:
        _check(tenant, document, A.CREATE)
        return Plan(document, Outcome.CREATED, diff=diff(None, document.spec))
    busy = services.blocking_request(resource)
    leaving = resource.state == Resource.State.DECOMMISSIONING
    if leaving or (busy is not None and busy.action == A.DECOMMISSION):
        return _conflict(resource, document, busy)
    running = _stored(resource.kind, resource.spec) if resource.on_main else None
    asked = _stored(resource.kind, busy.spec) if busy is not None else None
    if document.spec in (running, asked):
        return Plan(document, Outcome.UNCHANGED, resource, busy)
    if busy is not None:
        conflict = _conflict(resource, document, busy)
        conflict.diff = diff(asked or running, document.spec)
        return conflict
    _check(tenant, document, A.MODIFY)
    return Plan(document, Outcome.MODIFIED, resource, diff=diff(running, document.spec))


@transaction.atomic
def apply(document: Document, user: Any) -> Plan:
    """Do what ``plan`` says, through the catalog's services: a submitted create or modify
    request; nothing at all when unchanged or in conflict. One transaction per document."""
    result = plan(document, user)
    try:
        if result.outcome == Outcome.CREATED:
            tenant = tenant_for(user, document.tenant)
            result.request = services.do_create_request(
                tenant,
                acting_user=user,
                kind=document.kind,
                spec=document.spec,
                reason=document.reason,
            )
            result.resource = result.request.resource
        elif result.outcome == Outcome.MODIFIED:
            assert result.resource is not None
            result.request = services.do_modify_request(
                result.resource, acting_user=user, spec=document.spec, reason=document.reason
            )
    except ValidationError as exc:
        raise _document_error(exc) from exc
    return result


def plan_delete(slug: str, kind: str, name: str, user: Any, *, reason: str = "") -> Plan:
    """What asking to decommission the resource would do, writing nothing: decommission, or
    a conflict while another request of it is in flight or it does not run yet; the checks
    of a decommission (nothing else still uses it) as ValidationError."""
    tenant = tenant_for(user, slug)
    resource = held_resource(tenant, kind, name)
    if resource is None:
        raise Http404("No such resource.")
    access.require(user, Action.REQUEST, tenant)
    document = Document(kind, tenant.slug, name, _stored(kind, resource.spec) or {}, reason)
    busy = services.blocking_request(resource)
    if busy is not None or resource.state != Resource.State.ACTIVE:
        return _conflict(resource, document, busy)
    if len(reason) > REASON_MAX_LENGTH:
        raise ValidationError({"reason": [f"Must be at most {REASON_MAX_LENGTH} characters."]})
    if problem := text_problem(reason, multi_line=True):
        raise ValidationError({"reason": [f"May not contain {problem}."]})
    check = services.check_request(tenant, kind, name, None, action=A.DECOMMISSION)
    if check.errors:
        raise ValidationError({_path(f): [m] for f, m in check.errors.items()})
    return Plan(document, Outcome.DECOMMISSION, resource, diff=diff(document.spec, None))


@transaction.atomic
def delete(slug: str, kind: str, name: str, user: Any, *, reason: str = "") -> Plan:
    """Ask to decommission a live resource (``do_decommission_request``), as ``plan_delete``
    says; nothing is written unless it says decommission."""
    result = plan_delete(slug, kind, name, user, reason=reason)
    if result.outcome != Outcome.DECOMMISSION:
        return result
    assert result.resource is not None
    try:
        result.request = services.do_decommission_request(
            result.resource, acting_user=user, reason=reason
        )
    except ValidationError as exc:
        raise _document_error(exc) from exc
    return result


# --- exporting ----------------------------------------------------------------------------


def _change_status(request: ResourceRequest) -> dict[str, Any] | None:
    change = request.change
    if change is None:
        return None
    return {
        "id": change.pk,
        "status": change.status,
        "url": change.forge_url or reverse("gitops:detail", args=[change.pk]),
    }


def _request_status(request: ResourceRequest | None) -> dict[str, Any] | None:
    if request is None:
        return None
    return {
        "id": request.pk,
        "action": request.action,
        "state": request.state,
        "url": reverse("catalog:request", args=[request.tenant.slug, request.pk]),
        "change": _change_status(request),
        "error": request.error,
    }


def export(resource: Resource) -> dict[str, Any]:
    """The resource as a document, plus a ``status`` block (output only): its state, the
    latest request not finished yet (with its pull request), its readiness in the cluster,
    and an endpoint's public URL. The spec is what runs, or what a create request asks for
    before anything runs. Its requests are read once (``listed`` prefetches them)."""
    requests = list(resource.requests.all())  # newest first (ResourceRequest.Meta)
    latest_open = next((r for r in requests if r.state in states.OPEN), None)
    if resource.on_main:
        spec = resource.spec
    else:
        creating = next((r for r in requests if r.action == A.CREATE), None)
        spec = creating.spec if creating is not None else {}
    stored = _stored(resource.kind, spec) or {}
    status: dict[str, Any] = {
        "state": resource.state,
        "request": _request_status(latest_open),
        "readiness": None,
    }
    if resource.on_main:
        latest = requests[0] if requests else ResourceRequest(tenant=resource.tenant)
        latest.resource = resource
        verdict, message = services.readiness(latest)
        status["readiness"] = {"state": verdict, "message": message}
    if resource.kind == Kind.ENDPOINT:
        calling = services.endpoint_access(resource) if resource.on_main else {}
        status["url"] = calling.get("url", "")
        status["cluster_url"] = calling.get("cluster_url", "")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND_NAMES[resource.kind],
        "metadata": {"tenant": resource.tenant.slug, "name": resource.name},
        "spec": {key: value for key, value in stored.items() if key != "name"},
        "status": status,
    }


def listed(tenant: Tenant, kind: str) -> list[Resource]:
    """The tenant's resources of ``kind`` that hold their names, in name order, with their
    requests (and those requests' pull requests) read in two queries for all of them."""
    requests = ResourceRequest.objects.select_related("change", "tenant")
    return list(
        tenant.resources.filter(kind=kind)
        .exclude(state__in=[Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN])
        .select_related("tenant")
        .prefetch_related(Prefetch("requests", queryset=requests))
        .order_by("name")
    )


# --- batch jobs ---------------------------------------------------------------------------
#
# A BatchJob document names run-once work, not a resource Git holds, so it has no request, no
# pull request and no export. Applying it submits the job (``catalog.jobs.do_submit_job``) once:
# a document whose job of that name was submitted already (and not cancelled) with the same
# spec is unchanged, whatever became of the job since (finished, deleted after its TTL), so a
# pipeline that applies its documents again does not run the work again; another spec under
# that name is a conflict (cancel the job or choose another name). A dry run plans it: the
# same checks, nothing submitted. Deleting is cancelling: DELETE /api/v1/tenants/<slug>/jobs/
# <name>/ (``portalctl cancel``).

JOB_KIND = "BatchJob"
JOB_METADATA_FIELDS = ("tenant", "name")


@dataclasses.dataclass
class JobPlan:
    """What a BatchJob document does: created (submitted), unchanged or a conflict."""

    tenant: str
    name: str
    outcome: Outcome
    job: BatchJob | None = None
    diff: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    detail: str = ""


def parse_job(data: Any) -> tuple[str, str, dict[str, Any]]:
    """(tenant, name, the job request) of a BatchJob document; ValidationError with document
    paths when it is not one. The spec itself is read by ``catalog.jobs.read_job``."""
    errors: Errors = {}

    def add(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    if not isinstance(data, dict):
        raise ValidationError(
            {"": ["A document is a mapping with apiVersion, kind, metadata and spec."]}
        )
    for key in data:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            add(str(key), "Unknown field.")
    if data.get("apiVersion") != API_VERSION:
        add("apiVersion", f"Must be {API_VERSION}.")
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        add("metadata", "Must be a mapping with tenant and name.")
        metadata = {}
    for key in metadata:
        if key not in JOB_METADATA_FIELDS:
            add(f"metadata.{key}", "Unknown field.")
    _label_errors(metadata.get("tenant"), "metadata.tenant", TENANT_SLUG_MAX, errors)
    _label_errors(metadata.get("name"), "metadata.name", 63, errors)
    spec = data.get("spec")
    if not isinstance(spec, dict):
        add("spec", "Must be a mapping: the job's fields.")
    elif "name" in spec:
        add("spec.name", "The name is metadata.name.")
    if errors:
        raise ValidationError(errors)
    assert isinstance(spec, dict)
    return str(metadata["tenant"]), str(metadata["name"]), dict(spec)


def _job_error(exc: ValidationError) -> ValidationError:
    """``catalog.jobs``' field errors at their document paths."""
    if not hasattr(exc, "error_dict"):
        return exc
    mapped: Errors = {}
    for key, messages in exc.message_dict.items():
        path = "metadata.name" if key == "name" else _path(key)
        mapped.setdefault(path, []).extend(messages)
    return ValidationError(mapped)


def plan_job(data: Any, user: Any) -> JobPlan:
    """What applying the BatchJob document ``data`` as ``user`` would do, submitting
    nothing (see above)."""
    slug, name, spec = parse_job(data)
    tenant = tenant_for(user, slug)
    access.require(user, Action.RUN_JOB, tenant)
    try:
        checked = jobs.check_job(tenant, {**spec, "name": name})
    except ValidationError as exc:
        raise _job_error(exc) from exc
    wanted = jobs.spec_json(checked.spec)
    existing = jobs.job_named(tenant, name)
    if existing is not None and existing.cancelled_at is None:
        if existing.spec == wanted:
            return JobPlan(slug, name, Outcome.UNCHANGED, existing)
        return JobPlan(
            slug,
            name,
            Outcome.CONFLICT,
            existing,
            diff=diff(existing.spec, wanted),
            detail=f"Job {name} was submitted with another spec; a job runs once: cancel it "
            "or choose another name.",
        )
    return JobPlan(slug, name, Outcome.CREATED, diff=diff(None, wanted))


def apply_job(data: Any, user: Any) -> JobPlan:
    """Submit the job when ``plan_job`` says created; nothing otherwise."""
    result = plan_job(data, user)
    if result.outcome == Outcome.CREATED:
        tenant = tenant_for(user, result.tenant)
        _, _, spec = parse_job(data)
        try:
            result.job = jobs.do_submit_job(
                tenant, acting_user=user, data={**spec, "name": result.name}
            )
        except ValidationError as exc:
            raise _job_error(exc) from exc
    return result
