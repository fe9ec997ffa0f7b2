"""Home, the tenant switcher, the jobs pages and the plotly.js bundle."""

from __future__ import annotations

import functools
import gzip
import hashlib
from typing import Any

import plotly
import plotly.offline
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_safe

from portal.models import Job
from tenants.access import (
    Action,
    get_tenant_for_user,
    is_finance,
    may,
    memberships_of,
    tenants_where,
    visible_tenants,
)

CURRENT_TENANT_KEY = "current_tenant"


def _landing(request: HttpRequest, memberships: QuerySet[Any]) -> str:
    """Where a person starts: a platform admin on the fleet's usage dashboard, finance on the
    finance page, a tenant member on their current tenant's usage; ""
    for the home page itself. By URL name: the portal imports no app's views."""
    if may(request.user, Action.OPERATE_FLEET):
        return reverse("billing:admin_dashboard")
    if is_finance(request.user):
        return reverse("billing:finance")
    slugs = [membership.tenant.slug for membership in memberships]
    if not slugs:
        return ""
    current = request.session.get(CURRENT_TENANT_KEY)
    slug = current if current in slugs else slugs[0]
    return reverse("billing:tenant_dashboard", kwargs={"tenant": slug})


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = memberships_of(request.user)
    landing = _landing(request, memberships)
    if landing:
        return redirect(landing)
    return render(
        request,
        "portal/home.html",
        {
            "memberships": memberships,
            "platform_admin": may(request.user, Action.OPERATE_FLEET),
            "tenant_count": visible_tenants(request.user).count(),
        },
    )


@login_required
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """Remember the chosen tenant and go to it; an unknown or foreign tenant is a 404."""
    slug = request.GET.get("tenant", "")
    access = get_tenant_for_user(request, slug)
    request.session[CURRENT_TENANT_KEY] = access.tenant.slug
    return redirect("tenants:detail", tenant=access.tenant.slug)


def visible_jobs(user: Any) -> QuerySet[Job]:
    """The jobs ``user`` may look at: every one for those who operate the fleet, else the ones
    they started and those of tenants whose audit log they may read (page and API alike)."""
    if may(user, Action.OPERATE_FLEET):
        return Job.objects.all()
    audited = tenants_where(user, Action.VIEW_AUDIT).values("pk")
    return Job.objects.filter(Q(created_by=user) | Q(tenant__in=audited))


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    if not may(request.user, Action.OPERATE_FLEET):
        raise PermissionDenied("Only platform admins see every job.")
    jobs = Job.objects.select_related("tenant", "created_by")
    status = request.GET.get("status", "")
    if status in Job.Status.values:
        jobs = jobs.filter(status=status)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    return render(
        request, "portal/jobs.html", {"page": page, "status": status, "statuses": Job.Status}
    )


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job: Job = get_object_or_404(visible_jobs(request.user), pk=job_id)
    template = "portal/job.html#job" if request.htmx else "portal/job.html"  # type: ignore[attr-defined]
    return render(request, template, {"job": job, "poll_url": reverse("job_detail", args=[job.pk])})


@functools.cache
def _plotly_js() -> tuple[bytes, bytes, str]:
    """The installed plotly package's plotly.js, plain and gzipped, with its ETag. Read once
    per process: it is several megabytes and changes only with the package."""
    body = plotly.offline.get_plotlyjs().encode()
    # Weak: one validator for both encodings of the same script.
    return body, gzip.compress(body), f'W/"{hashlib.sha256(body).hexdigest()[:32]}"'


def plotly_js_url() -> str:
    """Where pages with charts load plotly.js from; versioned, so the long cache lifetime
    cannot keep an old bundle after an upgrade."""
    return f"{reverse('plotly_js')}?v={plotly.__version__}"


@require_safe
def plotly_js(request: HttpRequest) -> HttpResponse:
    body, zipped, etag = _plotly_js()
    if etag in request.headers.get("If-None-Match", ""):
        response = HttpResponse(status=304)
    elif "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(zipped, content_type="text/javascript; charset=utf-8")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    response["Vary"] = "Accept-Encoding"
    return response
