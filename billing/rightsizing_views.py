"""Right-sizing pages: a tenant's shares of whole GPUs with the slice each would fit in, and
the one click that asks for it.

The click goes through the catalog's own modify path (``catalog.services.do_modify_request``):
the same checks, the same approval by a platform admin, the same pull request as a change made
in the modify form. The recommendation is worked out again when the click arrives; what the
page showed is only compared with it, never used.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import URLPattern, path, reverse
from django_htmx.http import HttpResponseLocation

from billing.costing import HOURS_PER_MONTH
from billing.rightsizing import (
    WINDOW_DAYS,
    resource_recommendation,
    tenant_recommendations,
)
from catalog.models import Resource
from catalog.services import change_blocker, do_modify_request
from tenants.access import Action, get_tenant_for_user

TEMPLATE = "billing/rightsizing.html"


def _go(request: HttpRequest, url: str) -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        return HttpResponseLocation(url)
    return redirect(url)


@login_required
def rightsizing(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):  # after the access check: outsiders get 404
        return HttpResponseNotAllowed(["GET", "HEAD"])
    access.require(Action.VIEW_COST)
    found = tenant_recommendations(access.tenant)
    rows = [
        {"rec": rec, "blocker": change_blocker(rec.resource) if rec.option else ""} for rec in found
    ]
    context = {
        "access": access,
        "tenant": access.tenant,
        "rows": rows,
        "may_request": access.may(Action.REQUEST),
        "window_days": WINDOW_DAYS,
        "hours_per_month": HOURS_PER_MONTH,
        "currency": settings.BILLING_CURRENCY,
    }
    template = f"{TEMPLATE}#recommendations" if request.htmx else TEMPLATE  # type: ignore[attr-defined]
    return render(request, template, context)


@login_required
def rightsizing_request(request: HttpRequest, tenant: str, resource_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    resource = get_object_or_404(Resource, pk=resource_id, tenant=access.tenant)
    back = reverse("billing:rightsizing", args=[access.tenant.slug])
    rec = resource_recommendation(resource)
    if rec.option is None:
        messages.error(request, f"No right-sizing for {resource.name} any more: {rec.reason}")
        return _go(request, back)
    if request.POST.get("option") != rec.option.key:
        messages.error(
            request,
            f"The recommendation for {resource.name} changed since the page was shown (it is now "
            f"{rec.option.label}). Nothing was requested; look at it again.",
        )
        return _go(request, back)
    try:
        # The service checks the caller may ask (viewers may not) and that nothing else is
        # pending on the share.
        made = do_modify_request(
            resource, acting_user=request.user, spec=rec.spec, reason=rec.summary()
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return _go(request, back)
    messages.success(request, f"{made.title}: submitted, a platform admin decides next.")
    return _go(request, reverse("catalog:request", args=[access.tenant.slug, made.pk]))


urlpatterns: list[URLPattern] = [
    path("t/<slug:tenant>/rightsizing/", rightsizing, name="rightsizing"),
    path(
        "t/<slug:tenant>/rightsizing/<int:resource_id>/request/",
        rightsizing_request,
        name="rightsizing_request",
    ),
]
