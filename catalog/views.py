"""The tenant side of the catalog: what the tenant has, the forms to ask for more, its requests.

Every view resolves the tenant through ``get_tenant_for_user`` first, so an outsider gets 404
whatever else is wrong with the URL. Viewers see the catalog and the requests but get no
forms: the page says why, and a POST is refused (403) as elsewhere in the portal.
"""

from __future__ import annotations

import dataclasses
import difflib
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseLocation

from catalog import idle_actions, services, states
from catalog.forms import FORMS, NOUNS, SpecForm
from catalog.keys import do_revoke_gateway_key, do_rotate_gateway_key
from catalog.kubeconfig import KubeconfigUnavailable, kubeconfig_for
from catalog.models import GatewayKey, Kind, Resource, ResourceRequest
from catalog.specs import CLASSES, mig_opt_in
from fleet.models import Node, NodeReservation
from fleet.watch import freshness
from gitops import services as gitops
from gitops.diffview import RenderedFile, render_file_diff
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.specs import SpecError
from portal.audit import record_audit
from portal.live import POLL, unchanged, version_of
from tenants.access import Action, TenantAccess, get_tenant_for_user
from tenants.models import Tenant

A = ResourceRequest.Action
S = ResourceRequest.State
STATE_LABELS = dict(S.choices)
GONE = (Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN)
BLURBS = {
    Kind.CLUSTER: "A Kubernetes cluster of your own (a vCluster) whose workloads run on the "
    "nodes of your GPU shares.",
    Kind.GPU_SHARE: "Quota on a pool of GPUs: whole GPUs, MIG slices, fractions of a GPU, or "
    "GPUs claimed through DRA. Your workloads and endpoints run on it.",
    Kind.ENDPOINT: "An OpenAI-compatible model endpoint (KServe and vLLM) on one of your GPU "
    "shares, reachable through the gateway and LiteLLM.",
}
LABELS = {
    "mig_profile": "MIG profile",
    "gpumem_mib": "GPU memory per slot (MiB)",
    "gpucores_percent": "GPU compute per slot (%)",
    "until": "End date",
    "gpu_quota": "GPUs",
    "cpu_quota": "CPUs",
    "memory_gib": "Memory (GiB)",
    "model_uri": "Model",
    "gpus_per_replica": "GPUs per replica",
    "args": "Runtime arguments",
    "cpu": "CPUs per replica",
}

# What a limit left unset means (Kueue reads no limit as "no limit", not as zero).
UNSET = {"borrowing_limit": "no limit", "lending_limit": "no limit: lends all it does not use"}


def _htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _go(request: HttpRequest, url: str) -> HttpResponse:
    """After a POST: htmx follows HX-Location, a plain form a redirect."""
    return HttpResponseLocation(url) if _htmx(request) else redirect(url)


def _reading(request: HttpRequest) -> HttpResponse | None:
    """405 for anything but a read (checked after the tenant, so outsiders get 404)."""
    if request.method in ("GET", "HEAD"):
        return None
    return HttpResponseNotAllowed(["GET", "HEAD"])


def _writing(request: HttpRequest, access: TenantAccess) -> bool:
    """Whether this is a POST; a viewer's POST is refused here."""
    if request.method != "POST":
        return False
    access.require_write()
    return True


def _form_class(kind: str) -> type[SpecForm]:
    if kind not in FORMS:
        raise Http404("No such kind of resource.")
    return FORMS[kind]


def _request_of(access: TenantAccess, request_id: int) -> ResourceRequest:
    return get_object_or_404(
        ResourceRequest.objects.select_related("resource", "tenant", "change", "requested_by"),
        pk=request_id,
        tenant=access.tenant,
    )


def _resource_of(access: TenantAccess, resource_id: int) -> Resource:
    return get_object_or_404(Resource, pk=resource_id, tenant=access.tenant)


def _request_url(req: ResourceRequest) -> str:
    return reverse("catalog:request", args=[req.tenant.slug, req.pk])


def _gpus(value: Decimal) -> str:
    return f"{value.normalize():f}"


# --- what the tenant has ------------------------------------------------------------------


@login_required
def home(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if refused := _reading(request):
        return refused
    usage = services.check_request(access.tenant, Kind.GPU_SHARE, "", None)
    waiting = {r.resource_id: r for r in access.tenant.requests.filter(state__in=states.OPEN)}
    resources = list(access.tenant.resources.exclude(state__in=GONE))
    sleeping = idle_actions.sleep_states(access.tenant, resources)
    cards = [
        {
            "kind": kind,
            "label": label,
            "blurb": BLURBS[Kind(kind)],
            "noun": NOUNS[Kind(kind)],
            "rows": [
                (r, waiting.get(r.pk), sleeping.get(r.pk)) for r in resources if r.kind == kind
            ],
        }
        for kind, label in Kind.choices
    ]
    context = {
        "access": access,
        "tenant": access.tenant,
        "cards": cards,
        "gpus_used": _gpus(usage.gpu_equivalents),
        "gpus_over": usage.gpu_equivalents > access.tenant.gpu_quota,
        "dedicated": access.tenant.trust_level == Tenant.TrustLevel.DEDICATED,
        "mig": mig_opt_in(access.tenant),
        "own_nodes": _own_nodes(access.tenant),
        "first_request_wait": idle_actions.FIRST_REQUEST_WAIT,
    }
    return render(request, "catalog/home.html", context)


def _own_nodes(tenant: Tenant) -> list[tuple[NodeReservation, Node | None]]:
    """The nodes reserved for the tenant now, with what the last sync saw of each."""
    rows = list(
        NodeReservation.objects.filter(
            tenant_slug=tenant.slug, accepted_at__isnull=False, released_at__isnull=True
        )
    )
    nodes = {n.name: n for n in Node.objects.filter(name__in=[r.node_name for r in rows])}
    return [(row, nodes.get(row.node_name)) for row in rows]


@login_required
def resource_wake(request: HttpRequest, tenant: str, resource_id: int) -> HttpResponse:
    """Wake an endpoint or tenant cluster (a change, merged by the standing policy)."""
    access = get_tenant_for_user(request, tenant)  # a non-member's 404 first, whatever method
    resource = _resource_of(access, resource_id)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        req = idle_actions.wake(
            resource, reason=f"Woken by {request.user.get_username()}.", actor=request.user
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("catalog:home", tenant=access.tenant.slug)
    messages.success(request, f"Waking {resource.name}: pull request #{req.change_id}.")
    return redirect(_request_url(req))


# --- asking -------------------------------------------------------------------------------


def _file_diffs(changes: dict[str, bytes | None]) -> list[RenderedFile]:
    """Each changed file as a unified diff of main's version against the new one."""
    repo, main = gitops.repository(), gitops.main_sha()

    def lines(data: bytes | None) -> list[str]:
        return data.decode("utf-8", errors="replace").splitlines(keepends=True) if data else []

    files = []
    for path in sorted(changes):
        old, new = (repo.read_file(main, path) if main else None), changes[path]
        status = "added" if old is None else "deleted" if new is None else "modified"
        patch = difflib.unified_diff(
            lines(old),
            lines(new),
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
        )
        files.append(render_file_diff(path, status, "".join(patch)))
    return files


def _preview(form: SpecForm) -> dict[str, Any]:
    """The preview of a bound form: its errors, the check's warnings, the files it changes."""
    check = form.check
    files: list[RenderedFile] = []
    failed = ""
    if check is not None and check.ok:
        try:
            files = _file_diffs(services.preview_changes(check, form.fleet))
        except SpecError as exc:
            failed = str(exc)
    return {
        "form": form,
        "check": check,
        "files": files,
        "preview_failed": failed,
        "gpus_after": _gpus(check.gpu_equivalents) if check is not None else "",
        "pools": services.free_pools(form.tenant, form.fleet, check),
        "spec_now": _spec_now(form),
    }


def _spec_now(form: SpecForm) -> dict[str, Any]:
    """The spec of the resource a modify changes as its row last recorded it from main ({} for
    anything else), so the preview can show what it costs now beside what it would cost. A
    display only: the change itself is rendered from main's content."""
    if form.action != A.MODIFY or not form.fixed_name:
        return {}
    resource = form.tenant.resources.filter(kind=form.resource_kind, name=form.fixed_name).first()
    return dict(resource.spec) if resource is not None else {}


def _form_page(
    request: HttpRequest, access: TenantAccess, form: SpecForm, **context: Any
) -> HttpResponse:
    kind = form.resource_kind
    preview_url = reverse("catalog:preview", args=[access.tenant.slug, kind])
    if context.get("preview_query"):
        preview_url += "?" + context["preview_query"]
    page = {
        "access": access,
        "tenant": access.tenant,
        "kind": kind,
        "preview_url": preview_url,
        **(
            _preview(form)
            if form.is_bound
            else {"form": form, "pools": services.free_pools(form.tenant, form.fleet)}
        ),
        **context,
    }
    return render(request, "catalog/form.html", page, status=422 if form.is_bound else 200)


@login_required
def new(request: HttpRequest, tenant: str, kind: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    form_class = _form_class(kind)
    posted = _writing(request, access)
    form = form_class(
        request.POST if posted else None, tenant=access.tenant, fleet=configured_fleet()
    )
    if posted and form.is_valid():
        try:
            req = services.do_create_request(
                access.tenant,
                acting_user=request.user,
                kind=kind,
                spec=form.spec,
                reason=form.cleaned_data["reason"],
            )
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"{req.title}: submitted, a platform admin decides next.")
            return redirect(_request_url(req))
    title = f"New {NOUNS[Kind(kind)]}"
    return _form_page(request, access, form, title=title, submit="Submit request")


def _preview_target(request: HttpRequest, access: TenantAccess, kind: str) -> tuple[str, str]:
    """(action, fixed name) of what the form being previewed changes: a new resource, an
    existing one (``?resource=``) or a request being edited (``?request=``)."""
    resource_id, request_id = request.GET.get("resource", ""), request.GET.get("request", "")
    if resource_id:
        if not resource_id.isdigit():
            raise Http404("No such resource.")
        resource = get_object_or_404(Resource, pk=int(resource_id), tenant=access.tenant, kind=kind)
        return A.MODIFY, resource.name
    if request_id:
        if not request_id.isdigit():
            raise Http404("No such request.")
        req = _request_of(access, int(request_id))
        if req.kind != kind:
            raise Http404("No such request.")
        return req.action, req.resource.name
    return A.CREATE, ""


@login_required
def preview(request: HttpRequest, tenant: str, kind: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    form_class = _form_class(kind)
    if not _writing(request, access):
        return HttpResponseNotAllowed(["POST"])
    action, name = _preview_target(request, access, kind)
    form = form_class(
        request.POST,
        tenant=access.tenant,
        fleet=configured_fleet(),
        action=action,
        fixed_name=name,
    )
    form.is_valid()  # runs the checks; the fragment shows what they said
    return render(request, "catalog/form.html#preview", {"kind": kind, **_preview(form)})


# --- requests -----------------------------------------------------------------------------


@login_required
def request_list(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if refused := _reading(request):
        return refused
    rows = access.tenant.requests.select_related("resource", "requested_by", "change")
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    template = "catalog/requests.html#requests" if _htmx(request) else "catalog/requests.html"
    return render(request, template, {"access": access, "tenant": access.tenant, "page": page})


def _show(field: str, value: Any) -> str:
    if value is None:
        return UNSET.get(field, "not set")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "—"
    return str(value) if value != "" else "—"


def spec_rows(req: ResourceRequest) -> list[dict[str, Any]]:
    """The request's spec field by field; a change shows what runs now beside it."""
    now = req.resource.spec if req.action != A.CREATE else {}
    wanted = req.spec if req.action != A.DECOMMISSION else {}
    rows = []
    for field in dataclasses.fields(CLASSES[req.kind]):
        label = LABELS.get(field.name, field.name.replace("_", " ").capitalize())
        before, after = now.get(field.name), wanted.get(field.name)
        rows.append(
            {
                "label": label,
                "now": _show(field.name, before) if now else "",
                "wanted": _show(field.name, after) if wanted else "",
                "changed": bool(now and wanted) and before != after,
            }
        )
    return rows


def _timeline(req: ResourceRequest) -> list[dict[str, Any]]:
    return [
        {
            "at": event.created_at,
            "before": STATE_LABELS.get(event.from_state, event.from_state),
            "after": STATE_LABELS.get(event.to_state, event.to_state),
            "state": event.to_state,
            "actor": event.actor.username if event.actor else "",
            "note": event.note,
        }
        for event in req.events.select_related("actor")
    ]


def _request_context(
    request: HttpRequest, access: TenantAccess, req: ResourceRequest
) -> dict[str, Any]:
    resource = req.resource
    active = resource.state == Resource.State.ACTIVE
    ready_endpoint = req.state == S.READY and active and req.kind == Kind.ENDPOINT
    merged = req.change is not None and req.change.status == ChangeRequest.Status.MERGED
    return {
        "access": access,
        "tenant": access.tenant,
        "req": req,
        "events": _timeline(req),
        "spec_rows": spec_rows(req),
        "live": req.state not in states.TERMINAL,
        "live_poll": POLL,
        "freshness": freshness(),
        "endpoint": services.endpoint_access(req) if ready_endpoint else {},
        "kubeconfig": access.may(Action.KUBECONFIG) and active and req.kind == Kind.CLUSTER,
        "may_edit": access.can_write
        and req.state in states.EDITABLE
        and req.action != A.DECOMMISSION,
        "may_cancel": req.state in states.OPEN
        and not merged
        and access.may(Action.CANCEL_REQUEST, owner=req.requested_by_id == request.user.pk),
    }


@login_required
def request_detail(request: HttpRequest, tenant: str, request_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if refused := _reading(request):
        return refused
    req = _request_of(access, request_id)
    version = live_version(req)
    if same := unchanged(request, version):
        return same
    template = "catalog/request.html#live" if _htmx(request) else "catalog/request.html"
    return render(
        request, template, {**_request_context(request, access, req), "live_version": version}
    )


def live_version(req: ResourceRequest) -> str:
    """What the live region shows moves with the request's and its change's rows."""
    change = req.change
    return version_of(
        req.updated_at,
        req.state,
        req.resource.updated_at,
        change.updated_at if change else None,
        change.apply_state if change else None,
    )


@login_required
def request_edit(request: HttpRequest, tenant: str, request_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    req = _request_of(access, request_id)
    posted = _writing(request, access)
    if req.state not in states.EDITABLE or req.action == A.DECOMMISSION:
        messages.error(request, "Only a draft or a request with changes requested can be edited.")
        return redirect(_request_url(req))
    form_class = FORMS[req.kind]
    form = form_class(
        request.POST if posted else None,
        tenant=access.tenant,
        fleet=configured_fleet(),
        action=req.action,
        fixed_name=req.resource.name,
        initial={**form_class.initial_from(req.spec), "reason": req.reason},
    )
    if posted and form.is_valid():
        try:
            services.do_update_request(
                req, acting_user=request.user, spec=form.spec, reason=form.cleaned_data["reason"]
            )
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"{req.title}: submitted again.")
            return redirect(_request_url(req))
    title = f"Edit request #{req.pk}: {req.title}"
    return _form_page(
        request,
        access,
        form,
        title=title,
        submit="Submit again",
        req=req,
        preview_query=f"request={req.pk}",
    )


@login_required
def request_cancel(request: HttpRequest, tenant: str, request_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if not _writing(request, access):
        return HttpResponseNotAllowed(["POST"])
    req = _request_of(access, request_id)
    try:
        services.do_cancel(req, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{req.title}: cancelled.")
    return _go(request, _request_url(req))


# --- changing what the tenant has ---------------------------------------------------------


@login_required
def resource_modify(request: HttpRequest, tenant: str, resource_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    resource = _resource_of(access, resource_id)
    posted = _writing(request, access)
    form_class = FORMS[resource.kind]
    form = form_class(
        request.POST if posted else None,
        tenant=access.tenant,
        fleet=configured_fleet(),
        action=A.MODIFY,
        fixed_name=resource.name,
        initial=form_class.initial_from(resource.spec),
    )
    blocker = services.change_blocker(resource)
    if posted and not blocker and form.is_valid():
        try:
            req = services.do_modify_request(
                resource,
                acting_user=request.user,
                spec=form.spec,
                reason=form.cleaned_data["reason"],
            )
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"{req.title}: submitted, a platform admin decides next.")
            return redirect(_request_url(req))
    title = f"Change {NOUNS[Kind(resource.kind)]} {resource.name}"
    return _form_page(
        request,
        access,
        form,
        title=title,
        submit="Submit change",
        blocker=blocker,
        preview_query=f"resource={resource.pk}",
    )


@login_required
def resource_decommission(request: HttpRequest, tenant: str, resource_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    resource = _resource_of(access, resource_id)
    context: dict[str, Any] = {
        "access": access,
        "tenant": access.tenant,
        "resource": resource,
        "blocker": services.change_blocker(resource),
        "reason": request.POST.get("reason", "").strip(),
    }
    if not _writing(request, access):
        return render(request, "catalog/decommission.html", context)
    if request.POST.get("confirm", "").strip() != resource.name:
        context["error"] = f"Type the name {resource.name} to confirm; nothing was changed."
        return render(request, "catalog/decommission.html", context, status=422)
    try:
        req = services.do_decommission_request(
            resource, acting_user=request.user, reason=context["reason"]
        )
    except ValidationError as exc:
        context["error"] = " ".join(exc.messages)
        return render(request, "catalog/decommission.html", context, status=422)
    messages.success(request, f"{req.title}: submitted, a platform admin decides next.")
    return redirect(_request_url(req))


@login_required
def kubeconfig(request: HttpRequest, tenant: str, resource_id: int) -> HttpResponse:
    # No credential in it (kubelogin signs the person in), so every member may have one, viewers
    # too: the cluster gives each the rights of their role.
    access = get_tenant_for_user(request, tenant)
    access.require(Action.KUBECONFIG)
    if refused := _reading(request):
        return refused
    resource = get_object_or_404(Resource, pk=resource_id, tenant=access.tenant, kind=Kind.CLUSTER)
    try:
        config = kubeconfig_for(resource, request.user)
    except KubeconfigUnavailable as exc:
        context = {"access": access, "tenant": access.tenant, "resource": resource, "error": exc}
        return render(request, "catalog/kubeconfig_error.html", context, status=409)
    record_audit(
        actor=request.user,
        action="cluster.kubeconfig",
        target=resource,
        tenant_slug=access.tenant.slug,
    )
    filename = f"{access.tenant.slug}-{resource.name}.kubeconfig"
    return HttpResponse(
        config,
        content_type="application/yaml",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
    )


# --- the tenant's gateway key -------------------------------------------------------------


@login_required
def gateway_key(request: HttpRequest, tenant: str) -> HttpResponse:
    """The tenant's key for its endpoints: its prefix and age for members; admins rotate or
    revoke it. A new key is shown on this response only (never stored in the clear)."""
    access = get_tenant_for_user(request, tenant)
    current = GatewayKey.objects.filter(tenant=access.tenant).first()
    new_key = ""
    if request.method == "POST":
        access.require(Action.MANAGE_GATEWAY_KEY)
        action = request.POST.get("action")
        try:
            if action == "rotate":
                new_key = do_rotate_gateway_key(access.tenant, acting_user=request.user)
            elif action == "revoke":
                do_revoke_gateway_key(access.tenant, acting_user=request.user)
                messages.success(request, "The key is revoked: the gateway refuses every call.")
            else:
                return HttpResponse("Unknown action.", status=400)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        current = GatewayKey.objects.filter(tenant=access.tenant).first()
    elif refused := _reading(request):
        return refused
    context = {"access": access, "tenant": access.tenant, "key": current, "new_key": new_key}
    response = render(request, "catalog/gateway_key.html", context)
    response["Cache-Control"] = "no-store"
    return response
