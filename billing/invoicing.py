"""Prices and invoices: the verbs finance uses, each atomic, checked and audited.

Prices are effective-dated and never retroactive: a new price starts on a future date, only a
price not yet in effect may be withdrawn, and none is ever edited, so an hour already billed
keeps its price. An invoice is a draft until issued; a draft may be recomputed (its lines are
replaced), an issued one never changes (the models refuse, and so do these verbs). A mistake
in an issued invoice is put right by a correction: a new version of the same tenant and
month, drafted from the ledger as it is now, that names the version it supersedes and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from billing.costing import HOUR, PriceBook, money, priced, totals
from billing.fractions import FractionError, mig_fraction
from billing.models import Budget, GpuPrice, Invoice, InvoiceLine, ReservationPrice, UsageHour
from billing.opencost import CostTotals, OpenCostError, configured_client, costs_by_owner
from billing.reservations import RESERVED_GPU_HOUR, is_reserved_flavor, overlapping, spans
from fleet.services import platform_namespaces
from portal.audit import record_audit
from portal.jobs import enqueue
from portal.models import Job
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

PRICE_PLACES = Decimal("0.0001")
QUANTITY_PLACES = Decimal("0.001")
Progress = Callable[[int, str], None]
COVERED = "covered by the node reservation"


# --- months ---------------------------------------------------------------------------------


def month_start(day: date) -> date:
    return day.replace(day=1)


def next_month(month: date) -> date:
    return (month.replace(day=28) + timedelta(days=4)).replace(day=1)


def previous_month(month: date) -> date:
    return (month_start(month) - timedelta(days=1)).replace(day=1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """The month as ``[start, end)`` in UTC."""
    start = datetime.combine(month_start(month), time(0), tzinfo=UTC)
    end = datetime.combine(next_month(month), time(0), tzinfo=UTC)
    return start, end


def today_utc() -> date:
    return timezone.now().astimezone(UTC).date()


# --- prices ---------------------------------------------------------------------------------


def check_amount(value: Any) -> Decimal:
    """An hourly price: a number >= 0 with at most four decimals."""
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValidationError({"amount": f"{value!r} is not a number"}) from None
    if not amount.is_finite() or amount < 0:
        raise ValidationError({"amount": "a price is zero or more"})
    if amount != amount.quantize(PRICE_PLACES):
        raise ValidationError({"amount": "a price has at most four decimals"})
    if amount >= Decimal(10) ** 8:
        raise ValidationError({"amount": "a price has at most eight digits before the point"})
    return amount


def check_price(gpu_model: str, mig_profile: str, amount: Any, effective_from: date) -> Decimal:
    """What ``do_add_price`` refuses, field by field (a form shows the same sentences)."""
    errors: dict[str, str] = {}
    if not gpu_model.strip():
        errors["gpu_model"] = "name the GPU model as GPU feature discovery does (NVIDIA-H200)"
    if mig_profile:
        try:
            mig_fraction(mig_profile)
        except FractionError as exc:
            errors["mig_profile"] = str(exc)
    if effective_from <= today_utc():
        errors["effective_from"] = (
            f"a price starts after today ({today_utc():%Y-%m-%d} UTC): prices never reach back "
            "to hours already metered"
        )
    try:
        checked = check_amount(amount)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
        checked = Decimal(0)
    if (
        not errors
        and GpuPrice.objects.filter(
            gpu_model=gpu_model.strip(), mig_profile=mig_profile, effective_from=effective_from
        ).exists()
    ):
        errors["effective_from"] = "this model and profile already has a price from that date"
    if errors:
        raise ValidationError(errors)
    return checked


def do_add_price(
    gpu_model: str,
    mig_profile: str,
    amount: Any,
    effective_from: date,
    note: str = "",
    *,
    acting_user: Any,
) -> GpuPrice:
    """A new price of ``gpu_model`` (one MIG profile's instance, or the whole GPU) per hour,
    from ``effective_from`` (a future date) on."""
    access.require(acting_user, Action.MANAGE_PRICES)
    checked = check_price(gpu_model, mig_profile, amount, effective_from)
    with transaction.atomic():
        price = GpuPrice.objects.create(
            gpu_model=gpu_model.strip(),
            mig_profile=mig_profile,
            amount=checked,
            effective_from=effective_from,
            note=note.strip()[:200],
            created_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
        record_audit(
            actor=acting_user,
            action="billing.price_add",
            target=price,
            diff={"amount": [None, str(checked)], "effective_from": [None, str(effective_from)]},
        )
    return price


def do_withdraw_price(price: GpuPrice, *, acting_user: Any) -> None:
    """Withdraw a price that is not in effect yet; one in effect stays for good."""
    _withdraw(price, "billing.price_withdraw", acting_user=acting_user)


def _withdraw(price: GpuPrice | ReservationPrice, action: str, *, acting_user: Any) -> None:
    access.require(acting_user, Action.MANAGE_PRICES)
    if price.effective_from <= today_utc():
        raise ValidationError(
            f"{price} is in effect since {price.effective_from}: a price already applied is "
            "never withdrawn; add a new one from a future date instead"
        )
    with transaction.atomic():
        record_audit(
            actor=acting_user,
            action=action,
            target=price,
            diff={"amount": [str(price.amount), None]},
        )
        price.delete()


def check_reservation_price(gpu_model: str, amount: Any, effective_from: date) -> Decimal:
    """What ``do_add_reservation_price`` refuses, field by field."""
    errors: dict[str, str] = {}
    if not gpu_model.strip():
        errors["gpu_model"] = "name the GPU model as GPU feature discovery does (NVIDIA-H200)"
    if effective_from <= today_utc():
        errors["effective_from"] = (
            f"a price starts after today ({today_utc():%Y-%m-%d} UTC): prices never reach back "
            "to hours already billed"
        )
    try:
        checked = check_amount(amount)
    except ValidationError as exc:
        errors.update({k: v[0] for k, v in exc.message_dict.items()})
        checked = Decimal(0)
    if (
        not errors
        and ReservationPrice.objects.filter(
            gpu_model=gpu_model.strip(), effective_from=effective_from
        ).exists()
    ):
        errors["effective_from"] = "this model already has a reservation price from that date"
    if errors:
        raise ValidationError(errors)
    return checked


def do_add_reservation_price(
    gpu_model: str, amount: Any, effective_from: date, note: str = "", *, acting_user: Any
) -> ReservationPrice:
    """A new price per GPU-hour of a reserved node of ``gpu_model``, from ``effective_from``
    (a future date) on."""
    access.require(acting_user, Action.MANAGE_PRICES)
    checked = check_reservation_price(gpu_model, amount, effective_from)
    with transaction.atomic():
        price = ReservationPrice.objects.create(
            gpu_model=gpu_model.strip(),
            amount=checked,
            effective_from=effective_from,
            note=note.strip()[:200],
            created_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
        record_audit(
            actor=acting_user,
            action="billing.reservation_price_add",
            target=price,
            diff={"amount": [None, str(checked)], "effective_from": [None, str(effective_from)]},
        )
    return price


def do_withdraw_reservation_price(price: ReservationPrice, *, acting_user: Any) -> None:
    """Withdraw a reservation price that is not in effect yet."""
    _withdraw(price, "billing.reservation_price_withdraw", acting_user=acting_user)


# --- invoice lines --------------------------------------------------------------------------


@dataclass
class Draft:
    """What a month of one tenant comes to, before it is written."""

    lines: list[InvoiceLine]
    warnings: list[str]
    gpu_hours: Decimal = Decimal(0)


def _gpu_description(flavor: str, gpu_model: str, mig_profile: str) -> str:
    what = " ".join(p for p in (gpu_model or "unknown GPU model", mig_profile) if p)
    return f"{flavor or 'unknown flavor'}: {what}"


def gpu_lines(tenant: Tenant, start: datetime, end: datetime) -> Draft:
    """One line per flavor, GPU model, MIG profile and price period, priced by the ledger."""
    rows = UsageHour.objects.filter(tenant_slug=tenant.slug)
    groups = priced(rows, start, end, by=("flavor",), book=PriceBook.load())
    lines = []
    for group in groups:
        flavor = str(group.key["flavor"])
        description = _gpu_description(flavor, group.gpu_model, group.mig_profile)
        if is_reserved_flavor(flavor, tenant.slug):
            # The tenant's work on its own nodes: the reservation line pays for those GPUs.
            group.unit_price, group.amount = Decimal(0), Decimal(0)
            description = f"{description} ({COVERED})"
        lines.append(
            InvoiceLine(
                kind=InvoiceLine.Kind.GPU,
                description=description,
                flavor=flavor,
                gpu_model=group.gpu_model,
                mig_profile=group.mig_profile,
                period_start=group.period_start,
                period_end=group.period_end,
                quantity=group.quantity.quantize(QUANTITY_PLACES),
                unit=group.unit,
                unit_price=group.unit_price.quantize(PRICE_PLACES)
                if group.unit_price is not None
                else None,
                amount=money(group.amount),
                used_gpu_hours=group.used_gpu_hours.quantize(QUANTITY_PLACES),
                energy_kwh=group.energy_kwh.quantize(QUANTITY_PLACES),
            )
        )
    warnings = []
    unpriced = totals(groups).get(None)
    if unpriced and unpriced.unpriced_models:
        warnings.append(
            f"No price for {', '.join(sorted(unpriced.unpriced_models))}: "
            f"{unpriced.unpriced_gpu_hours.quantize(QUANTITY_PLACES)} GPU-hours are listed at zero."
        )
    gaps = rows.filter(hour__gte=start, hour__lt=end, observed_seconds__lt=int(HOUR)).count()
    if gaps:
        warnings.append(
            f"{gaps} ledger row{'s' if gaps != 1 else ''} of the month had gaps (less than the "
            "whole hour observed): time without samples is not billed."
        )
    return Draft(lines, warnings, sum((g.gpu_hours for g in groups), Decimal(0)))


def reservation_lines(
    tenant: Tenant, start: datetime, end: datetime, now: datetime | None = None
) -> Draft:
    """One line per reserved node, GPU model and price period: the node's GPUs for the hours
    of ``[start, end)`` (up to ``now``) it was the tenant's, whatever ran on it."""
    now = now or timezone.now()
    found = spans(overlapping(start, end, [tenant.slug]), start, end, now)
    lines, unpriced = [], set()
    for span in found:
        node = span.reservation
        if span.unit_price is None:
            unpriced.add(node.gpu_product or "(unknown model)")
        lines.append(
            InvoiceLine(
                kind=InvoiceLine.Kind.RESERVED,
                description=(
                    f"Reserved node {node.node_name}: {node.gpus} "
                    f"{node.gpu_product or 'unknown model'} GPUs, "
                    f"{span.node_hours.quantize(Decimal('0.01'))} node-hours"
                ),
                flavor=node.flavor,
                gpu_model=node.gpu_product,
                period_start=span.period_start,
                period_end=span.period_end,
                quantity=span.gpu_hours.quantize(QUANTITY_PLACES),
                unit=RESERVED_GPU_HOUR,
                unit_price=span.unit_price.quantize(PRICE_PLACES)
                if span.unit_price is not None
                else None,
                amount=money(span.amount),
            )
        )
    warnings = []
    if unpriced:
        warnings.append(
            f"No reservation price for {', '.join(sorted(unpriced))}: its reserved nodes are "
            "listed at zero."
        )
    if found:
        warnings.append(
            "Reserved nodes are billed per GPU-hour from acceptance to release, whatever they "
            f"run; GPU usage on them is {COVERED} and listed at zero."
        )
    gpu_hours = sum((s.gpu_hours for s in found), Decimal(0))
    return Draft(lines, warnings, gpu_hours)


# OpenCost's categories as invoice lines. Its GPU cost is left out: it counts a MIG slice or a
# HAMi share as a whole GPU or not at all (opencost#3828); the GPU lines come from the ledger.
OPENCOST_KINDS: tuple[tuple[str, str, Callable[[CostTotals], Decimal]], ...] = (
    (InvoiceLine.Kind.CPU, "CPU (OpenCost)", lambda c: c.cpu),
    (InvoiceLine.Kind.RAM, "Memory (OpenCost)", lambda c: c.ram),
    (InvoiceLine.Kind.STORAGE, "Storage: persistent volumes (OpenCost)", lambda c: c.pv),
    (
        InvoiceLine.Kind.NETWORK,
        "Network and load balancers (OpenCost)",
        lambda c: c.network + c.load_balancer,
    ),
    (
        InvoiceLine.Kind.OTHER,
        "Shared and external cost (OpenCost)",
        lambda c: c.shared + c.external,
    ),
)


def opencost_by_tenant(start: datetime, end: datetime) -> dict[str, CostTotals]:
    """OpenCost's non-GPU cost of each tenant over ``[start, end)``, one request for all;
    ``OpenCostError`` when it cannot be asked or read."""
    window = f"{int(start.timestamp())},{int(end.timestamp())}"
    sets = configured_client().allocation(window, include_idle=False)
    slugs = set(Tenant.objects.values_list("slug", flat=True))
    out: dict[str, CostTotals] = {}
    for step in costs_by_owner(sets, slugs, platform_namespaces()):
        for slug, costs in step.tenants.items():
            out.setdefault(slug, CostTotals()).absorb(costs)
    return out


def opencost_lines(tenant: Tenant, start: datetime, end: datetime) -> Draft:
    """The tenant's CPU, memory, storage and network lines from OpenCost, when it is
    configured; unreachable, no lines and a warning (the GPU lines stand on their own)."""
    if not settings.BILLING_OPENCOST_URL:
        return Draft([], [])
    try:
        costs = opencost_by_tenant(start, end).get(tenant.slug, CostTotals())
    except OpenCostError as exc:
        return Draft(
            [], [f"OpenCost: {exc}. The invoice has no CPU, memory, storage or network lines."]
        )
    lines = []
    for kind, description, pick in OPENCOST_KINDS:
        amount = pick(costs)
        if kind == InvoiceLine.Kind.OTHER and not amount:
            continue
        lines.append(
            InvoiceLine(
                kind=kind,
                description=description,
                period_start=start,
                period_end=end,
                amount=money(amount),
            )
        )
    return Draft(lines, [])


# --- invoices -------------------------------------------------------------------------------


def _check_month(month: date) -> date:
    month = month_start(month)
    if next_month(month) > today_utc():
        raise ValidationError(
            f"{month:%Y-%m} is not over yet: an invoice covers a whole past month"
        )
    return month


def _fill(invoice: Invoice) -> None:
    """Replace the draft's lines and totals with what the ledger and OpenCost say now."""
    start, end = month_bounds(invoice.month)
    gpu = gpu_lines(invoice.tenant, start, end)
    reserved = reservation_lines(invoice.tenant, start, end)
    gpu.lines = reserved.lines + gpu.lines
    gpu.warnings = reserved.warnings + gpu.warnings
    other = opencost_lines(invoice.tenant, start, end)
    invoice.lines.all().delete()
    for position, line in enumerate(gpu.lines + other.lines, start=1):
        line.invoice = invoice
        line.position = position
    InvoiceLine.objects.bulk_create(gpu.lines + other.lines)
    invoice.gpu_total = sum((line.amount for line in gpu.lines), Decimal(0))
    invoice.other_total = sum((line.amount for line in other.lines), Decimal(0))
    invoice.total = invoice.gpu_total + invoice.other_total
    invoice.gpu_hours = gpu.gpu_hours.quantize(QUANTITY_PLACES)
    invoice.used_gpu_hours = sum((line.used_gpu_hours for line in gpu.lines), Decimal(0))
    invoice.energy_kwh = sum((line.energy_kwh for line in gpu.lines), Decimal(0))
    invoice.warnings = gpu.warnings + other.warnings
    invoice.currency = settings.BILLING_CURRENCY
    invoice.tenant_slug = invoice.tenant.slug
    invoice.cost_centre = invoice.tenant.cost_centre
    invoice.save()


def latest_invoice(tenant: Tenant, month: date) -> Invoice | None:
    return (
        Invoice.objects.filter(tenant=tenant, month=month_start(month)).order_by("-version").first()
    )


def do_draft_invoice(tenant: Tenant, month: date, *, acting_user: Any) -> Invoice:
    """Draft (or re-draft) the invoice of ``tenant`` for a past ``month``. A month whose latest
    version is issued is refused: correct it instead."""
    access.require(acting_user, Action.MANAGE_INVOICES)
    month = _check_month(month)
    with transaction.atomic():
        invoice = latest_invoice(tenant, month)
        if invoice is not None and invoice.issued:
            raise ValidationError(
                f"{invoice.number} is issued and never changes: make a correction instead"
            )
        redraft = invoice is not None
        if invoice is None:
            invoice = Invoice.objects.create(
                tenant=tenant,
                tenant_slug=tenant.slug,
                month=month,
                currency=settings.BILLING_CURRENCY,
                created_by=acting_user if getattr(acting_user, "pk", None) else None,
            )
        before = str(invoice.total)
        _fill(invoice)
        record_audit(
            actor=acting_user,
            action="billing.invoice_redraft" if redraft else "billing.invoice_draft",
            target=invoice,
            tenant_slug=tenant.slug,
            diff={"total": [before if redraft else None, str(invoice.total)]},
        )
    return invoice


def do_issue_invoice(invoice: Invoice, *, acting_user: Any) -> Invoice:
    """Issue a draft: from now on neither it nor its lines change."""
    access.require(acting_user, Action.MANAGE_INVOICES)
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if invoice.issued:
            raise ValidationError(f"{invoice.number} is already issued")
        invoice.status = Invoice.Status.ISSUED
        invoice.issued_by = acting_user if getattr(acting_user, "pk", None) else None
        invoice.issued_at = timezone.now()
        # The model refuses to save an issued invoice, so the status goes in as an update.
        Invoice.objects.filter(pk=invoice.pk, status=Invoice.Status.DRAFT).update(
            status=invoice.status, issued_by=invoice.issued_by, issued_at=invoice.issued_at
        )
        record_audit(
            actor=acting_user,
            action="billing.invoice_issue",
            target=invoice,
            tenant_slug=invoice.tenant_slug,
            diff={"status": ["draft", "issued"], "total": [None, str(invoice.total)]},
        )
    return invoice


def do_correct_invoice(invoice: Invoice, reason: str, *, acting_user: Any) -> Invoice:
    """A new draft version of an issued invoice, recomputed from the ledger and prices as
    they are now, that supersedes it; the issued one stays as it was."""
    access.require(acting_user, Action.MANAGE_INVOICES)
    if not reason.strip():
        raise ValidationError({"reason": "say why the invoice is corrected"})
    if not invoice.issued:
        raise ValidationError(f"{invoice.number} is a draft: re-draft it instead")
    with transaction.atomic():
        newest = (
            Invoice.objects.filter(tenant=invoice.tenant, month=invoice.month).aggregate(
                Max("version")
            )["version__max"]
            or invoice.version
        )
        if newest != invoice.version:
            raise ValidationError(
                f"{invoice.number} is not the latest version (v{newest} is): correct that one"
            )
        correction = Invoice.objects.create(
            tenant=invoice.tenant,
            tenant_slug=invoice.tenant_slug,
            month=invoice.month,
            version=invoice.version + 1,
            currency=settings.BILLING_CURRENCY,
            supersedes=invoice,
            reason=reason.strip(),
            created_by=acting_user if getattr(acting_user, "pk", None) else None,
        )
        _fill(correction)
        record_audit(
            actor=acting_user,
            action="billing.invoice_correct",
            target=correction,
            tenant_slug=invoice.tenant_slug,
            diff={"supersedes": [None, invoice.number], "reason": [None, reason.strip()]},
        )
    return correction


def is_superseded(invoice: Invoice) -> bool:
    """An issued invoice whose correction has been issued too."""
    return Invoice.objects.filter(supersedes=invoice, status=Invoice.Status.ISSUED).exists()


# --- the monthly run ------------------------------------------------------------------------


def tenants_to_invoice(month: date) -> list[Tenant]:
    """Tenants with usage or a reserved node in ``month``, or a budget."""
    start, end = month_bounds(month)
    used = UsageHour.objects.filter(hour__gte=start, hour__lt=end).values("tenant_slug")
    reserved = overlapping(start, end).values("tenant_slug")
    budgeted = Budget.objects.values("tenant_id")
    return list(
        Tenant.objects.filter(Q(slug__in=used) | Q(slug__in=reserved) | Q(pk__in=budgeted))
        .order_by("slug")
        .distinct()
    )


def draft_month(
    month: date, *, acting_user: Any, issue: bool = False, progress: Progress | None = None
) -> list[str]:
    """Draft the invoice of every tenant to invoice for ``month`` (and issue it with
    ``issue``). Idempotent: a month already issued is left alone, a draft is re-drafted."""
    access.require(acting_user, Action.MANAGE_INVOICES)
    month = _check_month(month)
    tenants = tenants_to_invoice(month)
    done = []
    for index, tenant in enumerate(tenants):
        if progress:
            progress(
                int(100 * index / max(len(tenants), 1)), f"{tenant.slug} ({index}/{len(tenants)})"
            )
        latest = latest_invoice(tenant, month)
        if latest is not None and latest.issued:
            done.append(f"{latest.number}: issued already, unchanged")
            continue
        invoice = do_draft_invoice(tenant, month, acting_user=acting_user)
        if issue:
            do_issue_invoice(invoice, acting_user=acting_user)
        done.append(
            f"{invoice.number}: {invoice.total} {invoice.currency}"
            + (" issued" if issue else " drafted")
        )
    return done


def do_draft_month(month: date, *, acting_user: Any) -> Job:
    """Queue a job that drafts every tenant's invoice for ``month``, with progress."""
    access.require(acting_user, Action.MANAGE_INVOICES)
    month = _check_month(month)
    with transaction.atomic():
        return enqueue(
            "billing.invoices",
            title=f"Draft invoices for {month:%Y-%m}",
            created_by=acting_user,
            month=month.isoformat(),
        )
