"""Finance pages: the dashboard, prices, invoices, budgets and CSV exports.

Every tenant's money is finance's and the platform admins' (``VIEW_BILLING``): anyone else
gets the 404 of a page that is not there. A tenant's members see their own tenant's issued
invoices and budget (``VIEW_COST``); drafts are finance's until issued. The views parse, call
a service and render; the services check the rules again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from functools import wraps
from typing import Any, cast

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing import budgets, exports, invoicing
from billing.costing import money, priced, totals
from billing.finance_charts import budget_figure, cost_trend_figure, from_first_data
from billing.finance_forms import (
    BudgetForm,
    CorrectionForm,
    IssueForm,
    MonthForm,
    PriceForm,
    RangeForm,
    ReservationPriceForm,
)
from billing.freshness import ledger_freshness
from billing.models import (
    Budget,
    BudgetAlert,
    GpuPrice,
    Invoice,
    InvoiceLine,
    ReservationPrice,
    UsageHour,
)
from fleet.charts import figure_html
from portal.views import plotly_js_url
from tenants import access
from tenants.access import Action, get_tenant_for_user

View = Callable[..., HttpResponse]
TREND_MONTHS = 12


def finance_page(view: View) -> View:
    """Signed in with ``VIEW_BILLING``; anyone else gets a 404."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not access.may(request.user, Action.VIEW_BILLING):
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return login_required(wrapped)


def _form_errors(form: Any, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


def _errors(form: Any) -> str:
    return "; ".join(str(e) for errors in form.errors.values() for e in errors)


def _csv(body: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{exports.safe_filename(filename)}"'
    return response


# --- dashboard ------------------------------------------------------------------------------


def _trend(today: date) -> tuple[list[date], dict[str, dict[date, Decimal]]]:
    months = [today.replace(day=1)]
    for _ in range(TREND_MONTHS - 1):
        months.insert(0, invoicing.previous_month(months[0]))
    start = invoicing.month_bounds(months[0])[0]
    end = invoicing.month_bounds(months[-1])[1]
    rows = UsageHour.objects.exclude(tenant_slug="")
    lines = priced(rows, start, end, by=("tenant_slug",), trunc="month")
    by_tenant: dict[str, dict[date, Decimal]] = defaultdict(dict)
    for key, total in totals(lines, ("tenant_slug", "bucket")).items():
        slug, bucket = cast(tuple[str, datetime], key)
        by_tenant[slug][bucket.date()] = money(total.amount)
    return from_first_data(months, by_tenant), by_tenant


@finance_page
def finance(request: HttpRequest) -> HttpResponse:
    today = invoicing.today_utc()
    months, by_tenant = _trend(today)
    by_month = (
        Invoice.objects.values("month", "status")
        .annotate(count=Count("id"), total=Sum("total"))
        .order_by("-month", "status")
    )
    freshness = ledger_freshness()
    overview = budgets.month_overview(freshness.as_of)
    spends = overview.budgeted
    currency = settings.BILLING_CURRENCY
    context = {
        "by_month": by_month,
        "invoices": Invoice.objects.select_related("tenant")[:50],
        "trend_chart": figure_html(cost_trend_figure(months, by_tenant, currency))
        if months
        else "",
        "overview": overview,
        "freshness": freshness,
        "budget_chart": figure_html(budget_figure(spends, currency)) if spends else "",
        "last_month": invoicing.previous_month(today),
        "form": MonthForm(initial={"month": f"{invoicing.previous_month(today):%Y-%m}"}),
        "may_manage": access.may(request.user, Action.MANAGE_INVOICES),
        "currency": currency,
        "plotly_js_url": plotly_js_url(),
    }
    return render(request, "billing/finance.html", context)


@finance_page
@require_POST
def finance_draft(request: HttpRequest) -> HttpResponse:
    form = MonthForm(request.POST)
    if form.is_valid():
        try:
            job = invoicing.do_draft_month(form.cleaned_data["month"], acting_user=request.user)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        else:
            messages.success(request, f"{job.title}: queued as job {job.pk}.")
            return redirect("job_detail", job.pk)
    else:
        messages.error(request, _errors(form))
    return redirect("billing:finance")


@finance_page
def usage_csv(request: HttpRequest) -> HttpResponse:
    """Ledger rows of every tenant (or ``?tenant=``) for ``?start=`` to ``?end=``."""
    form = RangeForm(request.GET)
    if not form.is_valid():
        return HttpResponse(_errors(form), status=400, content_type="text/plain")
    slug = request.GET.get("tenant", "")
    data = form.cleaned_data
    body = exports.usage_csv([slug] if slug else None, data["start_at"], data["end_at"])
    return _csv(body, f"usage-{slug or 'all'}-{data['start']}-{data['end']}.csv")


# --- prices ---------------------------------------------------------------------------------


def _split(prices: list[Any], key: Callable[[Any], object], today: date) -> dict[str, list[Any]]:
    """Prices ordered by key and date as current (the last in effect of each key), coming and
    past."""
    in_effect = {key(p): p.pk for p in prices if p.effective_from <= today}
    current = set(in_effect.values())
    return {
        "future": [p for p in prices if p.effective_from > today],
        "current": [p for p in prices if p.pk in current],
        "past": [p for p in prices if p.effective_from <= today and p.pk not in current],
    }


def _add_reservation_price(request: HttpRequest, form: ReservationPriceForm) -> bool:
    if not form.is_valid():
        return False
    data = form.cleaned_data
    try:
        invoicing.do_add_reservation_price(
            data["gpu_model"],
            data["amount"],
            data["effective_from"],
            data["note"],
            acting_user=request.user,
        )
    except ValidationError as exc:
        _form_errors(form, exc)
        return False
    messages.success(request, "Reservation price added.")
    return True


@finance_page
def prices(request: HttpRequest) -> HttpResponse:
    reserving = request.method == "POST" and "reservation-gpu_model" in request.POST
    reservation_form = ReservationPriceForm(request.POST if reserving else None)
    if reserving and _add_reservation_price(request, reservation_form):
        return redirect("billing:prices")
    form = PriceForm(request.POST if request.method == "POST" and not reserving else None)
    if request.method == "POST" and not reserving and form.is_valid():
        data = form.cleaned_data
        try:
            invoicing.do_add_price(
                data["gpu_model"],
                data["mig_profile"],
                data["amount"],
                data["effective_from"],
                data["note"],
                acting_user=request.user,
            )
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, "Price added.")
            return redirect("billing:prices")
    today = invoicing.today_utc()
    # Ordered by model, profile and date: the last one in effect of each pair is current.
    gpu_prices = list(GpuPrice.objects.select_related("created_by"))
    context = {
        "form": form,
        **_split(gpu_prices, lambda p: (p.gpu_model, p.mig_profile), today),
        "may_manage": access.may(request.user, Action.MANAGE_PRICES),
        "currency": settings.BILLING_CURRENCY,
        "reservation_form": reservation_form,
        "reserved": _split(
            list(ReservationPrice.objects.select_related("created_by")),
            lambda p: p.gpu_model,
            today,
        ),
    }
    failed = form.errors or reservation_form.errors
    return render(request, "billing/prices.html", context, status=400 if failed else 200)


@finance_page
@require_POST
def reservation_price_withdraw(request: HttpRequest, price_id: int) -> HttpResponse:
    price = get_object_or_404(ReservationPrice, pk=price_id)
    try:
        invoicing.do_withdraw_reservation_price(price, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, exc.messages[0])
    else:
        messages.success(request, f"Withdrawn: {price}.")
    return redirect("billing:prices")


@finance_page
@require_POST
def price_withdraw(request: HttpRequest, price_id: int) -> HttpResponse:
    price = get_object_or_404(GpuPrice, pk=price_id)
    try:
        invoicing.do_withdraw_price(price, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, exc.messages[0])
    else:
        messages.success(request, f"Withdrawn: {price}.")
    return redirect("billing:prices")


# --- invoices -------------------------------------------------------------------------------


def _visible_invoice(request: HttpRequest, invoice_id: int) -> Invoice:
    """Finance's and platform admins' any invoice; a member's their tenant's issued ones;
    everyone else a 404."""
    invoice = get_object_or_404(Invoice.objects.select_related("tenant"), pk=invoice_id)
    if access.may(request.user, Action.VIEW_BILLING):
        return invoice
    if invoice.issued and access.may(request.user, Action.VIEW_COST, invoice.tenant):
        return invoice
    raise Http404("No such invoice.")


@login_required
def invoice(request: HttpRequest, invoice_id: int) -> HttpResponse:
    shown = _visible_invoice(request, invoice_id)
    form = CorrectionForm(request.POST or None)
    may_manage = access.may(request.user, Action.MANAGE_INVOICES)
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied(access.DENIED[Action.MANAGE_INVOICES])
        if form.is_valid():
            try:
                correction = invoicing.do_correct_invoice(
                    shown, form.cleaned_data["reason"], acting_user=request.user
                )
            except ValidationError as exc:
                _form_errors(form, exc)
            else:
                messages.success(request, f"Drafted {correction.number}.")
                return redirect("billing:invoice", correction.pk)
    context = {
        "invoice": shown,
        "lines": shown.lines.all(),
        "reserved_total": shown.lines.filter(kind=InvoiceLine.Kind.RESERVED).aggregate(
            total=Sum("amount")
        )["total"],
        "form": form,
        "may_manage": may_manage,
        "superseded_by": Invoice.objects.filter(supersedes=shown).first(),
        "superseded": invoicing.is_superseded(shown),
    }
    return render(request, "billing/invoice.html", context, status=400 if form.errors else 200)


@login_required
def invoice_issue(request: HttpRequest, invoice_id: int) -> HttpResponse:
    """The confirm step of issuing: the page says what issuing does, and the POST issues only
    with the invoice's number typed (``IssueForm``)."""
    shown = _visible_invoice(request, invoice_id)
    if not access.may(request.user, Action.MANAGE_INVOICES):
        raise PermissionDenied(access.DENIED[Action.MANAGE_INVOICES])
    if shown.issued:
        messages.info(request, f"{shown.number} is issued already.")
        return redirect("billing:invoice", shown.pk)
    form = IssueForm(request.POST if request.method == "POST" else None, number=shown.number)
    if request.method == "POST" and form.is_valid():
        try:
            invoicing.do_issue_invoice(shown, acting_user=request.user)
        except ValidationError as exc:
            messages.error(request, exc.messages[0])
        else:
            messages.success(request, f"Issued {shown.number}.")
        return redirect("billing:invoice", shown.pk)
    context = {"invoice": shown, "form": form, "lines": shown.lines.count()}
    return render(
        request, "billing/invoice_issue.html", context, status=422 if form.errors else 200
    )


@login_required
@require_POST
def invoice_redraft(request: HttpRequest, invoice_id: int) -> HttpResponse:
    shown = _visible_invoice(request, invoice_id)
    try:
        invoicing.do_draft_invoice(shown.tenant, shown.month, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, exc.messages[0])
    else:
        messages.success(request, f"Re-drafted {shown.number} from the ledger.")
    return redirect("billing:invoice", shown.pk)


@login_required
def invoice_csv(request: HttpRequest, invoice_id: int) -> HttpResponse:
    shown = _visible_invoice(request, invoice_id)
    return _csv(exports.invoice_csv(shown), f"invoice-{shown.number}.csv")


# --- a tenant's own -------------------------------------------------------------------------


@login_required
def tenant_invoices(request: HttpRequest, tenant: str) -> HttpResponse:
    tenant_access = get_tenant_for_user(request, tenant)
    tenant_access.require(Action.VIEW_COST)
    invoices = Invoice.objects.filter(tenant=tenant_access.tenant)
    if not tenant_access.may(Action.VIEW_BILLING):
        invoices = invoices.filter(status=Invoice.Status.ISSUED)
    start = invoicing.month_bounds(invoicing.today_utc())[0]
    reserved = invoicing.reservation_lines(tenant_access.tenant, start, timezone.now())
    context = {
        "tenant": tenant_access.tenant,
        "access": tenant_access,
        "invoices": invoices,
        "reserved": reserved.lines,
        "reserved_total": sum((line.amount for line in reserved.lines), Decimal(0)),
        "currency": settings.BILLING_CURRENCY,
        "tab": "invoices",
    }
    return render(request, "billing/tenant_invoices.html", context)


@login_required
def tenant_budget(request: HttpRequest, tenant: str) -> HttpResponse:
    tenant_access = get_tenant_for_user(request, tenant)
    tenant_access.require(Action.VIEW_COST)
    the_tenant = tenant_access.tenant
    budget = Budget.objects.filter(tenant=the_tenant).first()
    form = BudgetForm(request.POST or None, initial=BudgetForm.initial_for(budget))
    if request.method == "POST":
        tenant_access.require(Action.SET_BUDGET)
        if form.is_valid():
            try:
                budgets.do_set_budget(
                    the_tenant,
                    form.cleaned_data["monthly_amount"],
                    form.cleaned_data["thresholds"],
                    acting_user=request.user,
                )
            except ValidationError as exc:
                _form_errors(form, exc)
            else:
                messages.success(request, "Budget saved.")
                return redirect("billing:tenant_budget", the_tenant.slug)
    [spend] = budgets.month_to_date([the_tenant])
    freshness = ledger_freshness()
    context = {
        "freshness": freshness,
        "forecast": budgets.tenant_forecast(spend, freshness.as_of),
        "tenant": the_tenant,
        "access": tenant_access,
        "budget": budget,
        "spend": spend,
        "alerts": BudgetAlert.objects.filter(tenant=the_tenant)[:24],
        "form": form,
        "may_set": tenant_access.may(Action.SET_BUDGET),
        "currency": settings.BILLING_CURRENCY,
        "tab": "budget",
    }
    return render(
        request, "billing/tenant_budget.html", context, status=400 if form.errors else 200
    )


@login_required
def tenant_usage_csv(request: HttpRequest, tenant: str) -> HttpResponse:
    tenant_access = get_tenant_for_user(request, tenant)
    tenant_access.require(Action.VIEW_COST)
    form = RangeForm(request.GET)
    if not form.is_valid():
        return HttpResponse(_errors(form), status=400, content_type="text/plain")
    data = form.cleaned_data
    body = exports.usage_csv([tenant_access.tenant.slug], data["start_at"], data["end_at"])
    return _csv(body, f"usage-{tenant_access.tenant.slug}-{data['start']}-{data['end']}.csv")


urlpatterns = [
    path("billing/finance/", finance, name="finance"),
    path("billing/finance/draft/", finance_draft, name="finance_draft"),
    path("billing/finance/usage.csv", usage_csv, name="usage_csv"),
    path("billing/prices/", prices, name="prices"),
    path("billing/prices/<int:price_id>/withdraw/", price_withdraw, name="price_withdraw"),
    path(
        "billing/prices/reserved/<int:price_id>/withdraw/",
        reservation_price_withdraw,
        name="reservation_price_withdraw",
    ),
    path("billing/invoices/<int:invoice_id>/", invoice, name="invoice"),
    path("billing/invoices/<int:invoice_id>/issue/", invoice_issue, name="invoice_issue"),
    path("billing/invoices/<int:invoice_id>/redraft/", invoice_redraft, name="invoice_redraft"),
    path("billing/invoices/<int:invoice_id>/csv", invoice_csv, name="invoice_csv"),
    path("t/<slug:tenant>/invoices/", tenant_invoices, name="tenant_invoices"),
    path("t/<slug:tenant>/budget/", tenant_budget, name="tenant_budget"),
    path("t/<slug:tenant>/usage.csv", tenant_usage_csv, name="tenant_usage_csv"),
]
