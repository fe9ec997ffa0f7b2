"""A tenant's batch jobs in the browser: the list, the form, a job's page with its live status,
its logs and its cancel. Thin: each view resolves the tenant for the signed-in user (404 for
outsiders), then calls ``catalog.jobs``; what may be done is the services' to refuse."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseLocation

from catalog import jobs
from catalog.job_forms import JobForm, share_rows
from catalog.models import BatchJob, JobTemplate
from catalog.specs import desired_tenant
from fleet.kube import KubeError
from gitops.fleet import configured_fleet
from portal.live import POLL, unchanged, version_of
from tenants.access import Action, TenantAccess, get_tenant_for_user

LIST_LENGTH = 200


def _htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _job_of(access: TenantAccess, name: str) -> BatchJob:
    job = jobs.job_named(access.tenant, name)
    if job is None:
        raise Http404("No such job.")
    return job


def _job_url(job: BatchJob) -> str:
    return reverse("catalog:job", args=[job.tenant.slug, job.name])


@login_required
def job_list(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    rows = list(jobs.jobs_of(access.tenant)[:LIST_LENGTH])
    states = jobs.states_of(rows)
    listed = [{"job": job, "state": states[job.pk]} for job in rows]
    version = version_of(
        [(j.pk, s.state, s.detail, s.position) for j, s in ((r["job"], r["state"]) for r in listed)]
    )
    if same := unchanged(request, version):
        return same
    template = "catalog/jobs.html#jobs" if _htmx(request) else "catalog/jobs.html"
    return render(
        request,
        template,
        {
            "tenant": access.tenant,
            "access": access,
            "rows": listed,
            "may_run": access.may(Action.RUN_JOB),
            "live_version": version,
            "live_poll": POLL,
        },
    )


@login_required
def job_new(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    posted = request.method == "POST"
    if posted:
        access.require(Action.RUN_JOB)
    fleet = configured_fleet()
    tenant_spec = desired_tenant(access.tenant)
    template = JobTemplate.objects.filter(name=request.GET.get("template", ""), active=True).first()
    initial: dict[str, Any] = {}
    if template is not None:
        initial = {
            "template": template.name,
            "image": template.image,
            "command": "\n".join(template.command),
            "args": "\n".join(template.args),
            "gpus": template.gpus,
            "deadline_seconds": template.max_runtime_seconds,
        }
    form = JobForm(
        request.POST if posted else None,
        tenant=access.tenant,
        tenant_spec=tenant_spec,
        fleet=fleet,
        initial=initial,
    )
    if posted and form.is_valid():
        try:
            job = jobs.do_submit_job(
                access.tenant, acting_user=request.user, data=form.request_data()
            )
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            messages.success(request, f"{job.kind} {job.name} submitted.")
            url = _job_url(job)
            return HttpResponseLocation(url) if _htmx(request) else redirect(url)
    return render(
        request,
        "catalog/job_form.html",
        {
            "tenant": access.tenant,
            "access": access,
            "form": form,
            "may_run": access.may(Action.RUN_JOB),
            "templates": JobTemplate.objects.filter(active=True),
            "chosen": template,
            "shares": share_rows(tenant_spec, fleet),
            "trust_level": tenant_spec.trust_level,
        },
        status=400 if posted else 200,
    )


@login_required
def job_detail(request: HttpRequest, tenant: str, job: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    found = _job_of(access, job)
    workload = jobs.workload_of(found)
    state = jobs.state_from(found, workload)
    obj: dict[str, Any] | None = None
    read_error = ""
    member = access.role is not None
    if member and state.state != "cancelled":
        try:
            obj = jobs.read_object(found, acting_user=request.user)
        except KubeError as exc:
            read_error = str(exc)
        else:
            state = jobs.refined(state, obj)
    version = version_of(state, read_error, (obj or {}).get("status"))
    if same := unchanged(request, version):
        return same
    page = "catalog/job.html#live" if _htmx(request) else "catalog/job.html"
    return render(
        request,
        page,
        {
            "tenant": access.tenant,
            "access": access,
            "job": found,
            "state": state,
            "workload": workload,
            "status": (obj or {}).get("status") or {},
            "read_error": read_error,
            "member": member,
            "may_cancel": state.state not in ("cancelled", "gone")
            and access.may(Action.CANCEL_JOB, owner=found.submitted_by_id == request.user.pk),
            "may_read_logs": access.may(Action.READ_JOB_LOGS),
            "live": state.state not in ("cancelled", "gone", "succeeded", "failed"),
            "live_version": version,
            "live_poll": POLL,
        },
    )


@login_required
def job_logs(request: HttpRequest, tenant: str, job: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    found = _job_of(access, job)
    error = ""
    logs: list[jobs.PodLog] = []
    try:
        logs = jobs.job_logs(found, acting_user=request.user)
    except ValidationError as exc:
        error = " ".join(exc.messages)
    return render(
        request,
        "catalog/_job_logs.html",
        {"tenant": access.tenant, "job": found, "logs": logs, "error": error},
    )


@login_required
def job_cancel(request: HttpRequest, tenant: str, job: str) -> HttpResponse:
    """The confirm step of cancelling: its work is lost, so the POST cancels only with the
    job's name typed (as a decommission asks for the resource's name)."""
    access = get_tenant_for_user(request, tenant)
    found = _job_of(access, job)
    context: dict[str, Any] = {"access": access, "tenant": access.tenant, "job": found}
    if request.method != "POST":
        return render(request, "catalog/job_cancel.html", context)
    if request.POST.get("confirm", "").strip() != found.name:
        context["error"] = f"Type the name {found.name} to confirm; nothing was cancelled."
        return render(request, "catalog/job_cancel.html", context, status=422)
    try:
        jobs.do_cancel_job(found, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{found.kind} {found.name} cancelled.")
    url = _job_url(found)
    return HttpResponseLocation(url) if _htmx(request) else redirect(url)
