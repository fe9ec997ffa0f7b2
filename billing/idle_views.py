"""Idle reclaim pages: the platform's policies and cases (``/billing/idle/``), and a
tenant's cases with wake and exempt (``/t/<slug>/idle/``). Thin: the rules and who may act
are in ``billing.idle`` and ``tenants.access``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from billing import idle
from billing.charts import drawn, reclaimed_figure
from billing.freshness import ledger_freshness
from billing.models import IdleCase, IdlePolicy
from fleet.kube import KubeError
from portal.views import plotly_js_url
from tenants import access
from tenants.access import Action, get_tenant_for_user
from tenants.models import Tenant

CASES_SHOWN = 200


@login_required
def admin_idle(request: HttpRequest) -> HttpResponse:
    if not access.may(request.user, Action.MANAGE_IDLE_POLICIES):
        raise Http404("No such page.")
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        tenant = None
        slug = request.POST.get("tenant", "").strip()
        try:
            if slug:
                tenant = Tenant.objects.filter(slug=slug).first()
                if tenant is None:
                    raise ValidationError({"tenant": f"{slug!r} is not a tenant"})
            policy = idle.do_set_policy(
                request.POST.get("flavor", ""),
                request.POST,
                tenant=tenant,
                acting_user=request.user,
            )
        except ValidationError as exc:
            errors = exc.message_dict
        else:
            messages.success(request, f"Saved: {policy}.")
            return redirect("billing:admin_idle")
    elif request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    context = {
        "policies": IdlePolicy.objects.select_related("tenant"),
        "cases": IdleCase.objects.select_related("tenant")[:CASES_SHOWN],
        "flavors": idle.known_flavors(),
        "tenants": Tenant.objects.order_by("slug").values_list("slug", flat=True),
        "errors": errors,
        "posted": request.POST if errors else {},
        "reclaimed_30d": idle.reclaimed_total(since=timezone.now() - timedelta(days=30)),
        "chart": drawn(reclaimed_figure(idle.reclaimed_by_day())),
        "freshness": ledger_freshness(),
        "plotly_js_url": plotly_js_url(),
    }
    return render(request, "billing/idle_admin.html", context, status=400 if errors else 200)


@login_required
def tenant_idle(request: HttpRequest, tenant: str) -> HttpResponse:
    tenant_access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    slug = tenant_access.tenant.slug
    context = {
        "access": tenant_access,
        "tenant": tenant_access.tenant,
        "cases": idle.tenant_cases(tenant_access.tenant, acting_user=request.user),
        "may_wake": tenant_access.may(Action.WAKE),
        "may_exempt": tenant_access.may(Action.EXEMPT_IDLE),
        "reclaimed_30d": idle.reclaimed_total(
            tenant_slug=slug, since=timezone.now() - timedelta(days=30)
        ),
        "chart": drawn(reclaimed_figure(idle.reclaimed_by_day(tenant_slug=slug))),
        "freshness": ledger_freshness(),
        "plotly_js_url": plotly_js_url(),
    }
    return render(request, "billing/idle_tenant.html", context)


def _case(request: HttpRequest, tenant: str, case_id: int) -> tuple[IdleCase, str]:
    tenant_access = get_tenant_for_user(request, tenant)
    case = get_object_or_404(IdleCase, pk=case_id, tenant=tenant_access.tenant)
    return case, reverse("billing:tenant_idle", args=[tenant_access.tenant.slug])


@login_required
def tenant_idle_wake(request: HttpRequest, tenant: str, case_id: int) -> HttpResponse:
    case, back = _case(request, tenant, case_id)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        idle.do_wake(case, acting_user=request.user)
    except (ValidationError, KubeError) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    else:
        messages.success(request, f"{case.workload} woken.")
    return redirect(back)


@login_required
def tenant_idle_exempt(request: HttpRequest, tenant: str, case_id: int) -> HttpResponse:
    case, back = _case(request, tenant, case_id)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        until = datetime.fromisoformat(request.POST.get("until", "").strip())
    except ValueError:
        messages.error(request, "Give the end of the exemption as a date and time (UTC).")
        return redirect(back)
    until = until if until.tzinfo else until.replace(tzinfo=UTC)
    try:
        idle.do_exempt(case, until, request.POST.get("reason", ""), acting_user=request.user)
    except (ValidationError, KubeError) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    else:
        messages.success(request, f"{case.workload} exempt until {until:%Y-%m-%d %H:%M} UTC.")
    return redirect(back)


urlpatterns: list[URLPattern] = [
    path("billing/idle/", admin_idle, name="admin_idle"),
    path("t/<slug:tenant>/idle/", tenant_idle, name="tenant_idle"),
    path("t/<slug:tenant>/idle/<int:case_id>/wake/", tenant_idle_wake, name="tenant_idle_wake"),
    path(
        "t/<slug:tenant>/idle/<int:case_id>/exempt/", tenant_idle_exempt, name="tenant_idle_exempt"
    ),
]
