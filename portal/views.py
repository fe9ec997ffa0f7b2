"""Home, the tenant switcher and the jobs pages."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from portal.models import Job
from tenants.access import (
    get_tenant_for_user,
    is_platform_admin,
    memberships_of,
    visible_tenants,
)
from tenants.models import Membership

CURRENT_TENANT_KEY = "current_tenant"


@login_required
def home(request: HttpRequest) -> HttpResponse:
    memberships = memberships_of(request.user)
    return render(
        request,
        "portal/home.html",
        {
            "memberships": memberships,
            "platform_admin": is_platform_admin(request.user),
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


def _jobs_for(user: Any) -> QuerySet[Job]:
    if is_platform_admin(user):
        return Job.objects.all()
    admin_of = Membership.objects.filter(user=user, role="admin").values("tenant")
    return Job.objects.filter(Q(created_by=user) | Q(tenant__in=admin_of))


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    if not is_platform_admin(request.user):
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
    job: Job = get_object_or_404(_jobs_for(request.user), pk=job_id)
    template = "portal/job.html#job" if request.htmx else "portal/job.html"  # type: ignore[attr-defined]
    return render(request, template, {"job": job, "poll_url": reverse("job_detail", args=[job.pk])})
