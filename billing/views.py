"""The usage dashboards: the platform's (every tenant, with money) and each tenant's own.

One URL serves each page and, for htmx requests, its ``panels`` fragment: the time range
form re-renders the panels in place and keeps the range in the URL's query. A range that
cannot be read answers 400 with the reason and shows nothing else.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_safe

from billing import charts, idle
from billing.dashboards import PRESETS, Range, RangeError, admin_dashboard, parse_range
from billing.dashboards import tenant_dashboard as tenant_rows
from billing.freshness import ledger_freshness
from billing.job_usage import job_usage as usage_of
from catalog.jobs import job_named
from portal.views import plotly_js_url
from tenants.access import Action, get_tenant_for_user, may


def _template(request: HttpRequest, template: str) -> str:
    return f"{template}#panels" if request.htmx else template  # type: ignore[attr-defined]


def _range_context(request: HttpRequest, window: Range | None) -> dict[str, Any]:
    return {
        "presets": list(PRESETS),
        "window": window,
        "chosen": request.GET.get("range", window.preset if window else ""),
        "from": request.GET.get("from", ""),
        "to": request.GET.get("to", ""),
        "currency": settings.BILLING_CURRENCY,
        "plotly_js_url": plotly_js_url(),
        "freshness": ledger_freshness(),
    }


def _bad_range(
    request: HttpRequest, template: str, error: RangeError, **extra: Any
) -> HttpResponse:
    """400 with the reason. To htmx, the reason alone (portal.js shows it in the flash area):
    a whole page would carry a <style> whose nonce is not the open page's."""
    context = {**_range_context(request, None), **extra, "range_error": str(error)}
    if request.htmx:  # type: ignore[attr-defined]
        template = "billing/_range_error.html"
    return render(request, template, context, status=400)


@login_required
@require_safe
def admin_dashboard_page(request: HttpRequest) -> HttpResponse:
    """Every tenant's usage and cost: platform admins and finance."""
    if not (may(request.user, Action.OPERATE_FLEET) or may(request.user, Action.VIEW_BILLING)):
        raise PermissionDenied("Only platform admins and finance see the whole fleet's usage.")
    template = "billing/admin_dashboard.html"
    try:
        window = parse_range(request.GET, timezone.now())
    except RangeError as error:
        return _bad_range(request, template, error)
    board = admin_dashboard(window)
    series = charts.from_first_data(board.series, window.bucket)
    context = {
        **_range_context(request, window),
        "board": board,
        "allocation_chart": charts.drawn(charts.allocation_figure(series)),
        "waste_chart": charts.drawn(charts.waste_figure(board.costs)),
        "cost_chart": charts.drawn(
            charts.cost_figure(board.costs, board.flavors, settings.BILLING_CURRENCY)
        ),
        "energy_chart": charts.drawn(charts.energy_figure(series)),
        "energy_tenant_chart": charts.drawn(charts.energy_by_tenant_figure(board.costs)),
        "quota_chart": charts.drawn(charts.quota_figure(board.quotas)),
        **_reclaimed(window, None),
    }
    return render(request, _template(request, template), context)


def _reclaimed(window: Range, tenant_slug: str | None) -> dict[str, Any]:
    """The GPU-hours idle reclaim won back in the range (``billing.idle``), and their chart."""
    days = idle.reclaimed_by_day(tenant_slug=tenant_slug, since=window.start, end=window.end)
    return {
        "reclaimed_gpu_hours": idle.reclaimed_total(
            tenant_slug=tenant_slug, since=window.start, end=window.end
        ),
        "reclaimed_chart": charts.drawn(charts.reclaimed_figure(days)),
    }


@login_required
def tenant_dashboard(request: HttpRequest, tenant: str) -> HttpResponse:
    """A tenant's own usage and cost: its members and viewers, platform admins, finance."""
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):  # after the access check: outsiders get 404
        return HttpResponseNotAllowed(["GET", "HEAD"])
    access.require(Action.VIEW_COST)
    template = "billing/tenant_dashboard.html"
    page = {"access": access, "tenant": access.tenant}
    try:
        window = parse_range(request.GET, timezone.now())
    except RangeError as error:
        return _bad_range(request, template, error, **page)
    board = tenant_rows(window, access.tenant.slug)
    series = charts.from_first_data(board.series, window.bucket)
    context = {
        **_range_context(request, window),
        **page,
        "board": board,
        "usage_chart": charts.drawn(charts.gpu_hours_figure(series)),
        "cost_chart": charts.drawn(
            charts.cost_over_time_figure(board.cost_series, settings.BILLING_CURRENCY)
        ),
        "energy_chart": charts.drawn(charts.energy_figure(series)),
        "quota_chart": charts.drawn(charts.quota_figure(board.quotas)),
        **_reclaimed(window, access.tenant.slug),
    }
    # Idle reclaim having stopped its work means the tenant has run something.
    context["start_here"] = board.starting and not context["reclaimed_gpu_hours"]
    return render(request, _template(request, template), context)


@login_required
def job_usage(request: HttpRequest, tenant: str, job: str) -> HttpResponse:
    """A batch job's GPU time, cost and efficiency: the fragment its page loads."""
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    access.require(Action.VIEW_COST)
    found = job_named(access.tenant, job)
    if found is None:
        raise Http404("No such job.")
    usage = usage_of(found)
    context = {
        "job": found,
        "usage": usage,
        "efficiency_percent": usage.efficiency * 100,
        "currency": settings.BILLING_CURRENCY,
    }
    return render(request, "billing/_job_usage.html", context)


urlpatterns: list[URLPattern] = [
    path("billing/", admin_dashboard_page, name="admin_dashboard"),
    path("t/<slug:tenant>/usage/", tenant_dashboard, name="tenant_dashboard"),
    path("t/<slug:tenant>/jobs/<slug:job>/usage/", job_usage, name="job_usage"),
]
