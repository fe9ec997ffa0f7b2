"""Budgets: a tenant's monthly amount and the percentages of it that raise an alert.

A budget stops nothing; it tells. The periodic check (task ``billing.budgets``) adds up each
budgeted tenant's month so far, GPU from the ledger at its prices and, when OpenCost is
configured, CPU, memory, storage and network from it, and raises each threshold crossed once
per month: a ``BudgetAlert`` row (unique per tenant, month and threshold, so a second check or
a second worker cannot raise it twice), a notification and an e-mail to the tenant's admins
and to finance.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from billing.costing import money, priced
from billing.invoicing import month_bounds, opencost_by_tenant, today_utc
from billing.models import Budget, BudgetAlert, UsageHour
from billing.opencost import OpenCostError
from billing.reservations import is_reserved_flavor, overlapping, spans
from catalog.services import notify
from portal.audit import record_audit
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

MAX_THRESHOLD = 1000


def check_monthly_amount(value: Any) -> Decimal:
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValidationError({"monthly_amount": f"{value!r} is not a number"}) from None
    if not amount.is_finite() or amount <= 0:
        raise ValidationError({"monthly_amount": "a budget is more than zero"})
    if amount != money(amount) or amount >= Decimal(10) ** 12:
        raise ValidationError({"monthly_amount": "a budget has at most two decimals and 12 digits"})
    return amount


def check_thresholds(values: list[Any]) -> list[int]:
    """Whole percentages from 1 to 1000, each once, ascending; none given: the defaults."""
    if not values:
        return sorted(set(settings.BILLING_BUDGET_THRESHOLDS))
    out = set()
    for value in values:
        text = str(value).strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_THRESHOLD:
            raise ValidationError(
                {"thresholds": f"{text!r} is not a whole percentage from 1 to {MAX_THRESHOLD}"}
            )
        out.add(int(text))
    return sorted(out)


def do_set_budget(
    tenant: Tenant, monthly_amount: Any, thresholds: list[Any], *, acting_user: Any
) -> Budget:
    """Set (or change) the tenant's monthly budget and its alert thresholds."""
    access.require(acting_user, Action.SET_BUDGET, tenant)
    errors = {}
    amount, percents = Decimal(0), []
    try:
        amount = check_monthly_amount(monthly_amount)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    try:
        percents = check_thresholds(thresholds)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        budget = Budget.objects.filter(tenant=tenant).first()
        before = [str(budget.monthly_amount), budget.thresholds] if budget else [None, None]
        if budget is None:
            budget = Budget(tenant=tenant)
        budget.monthly_amount = amount
        budget.thresholds = percents
        budget.updated_by = acting_user if getattr(acting_user, "pk", None) else None
        budget.updated_at = timezone.now()
        budget.save()
        record_audit(
            actor=acting_user,
            action="billing.budget_set",
            target=budget,
            tenant_slug=tenant.slug,
            diff={
                "monthly_amount": [before[0], str(amount)],
                "thresholds": [before[1], percents],
            },
        )
    return budget


@dataclass
class Spend:
    """A tenant's month so far against its budget."""

    tenant: Tenant
    budget: Budget | None
    gpu: Decimal
    other: Decimal
    opencost_error: str = ""

    @property
    def total(self) -> Decimal:
        return money(self.gpu + self.other)

    @property
    def percent(self) -> Decimal | None:
        if self.budget is None:
            return None
        return (100 * self.total / self.budget.monthly_amount).quantize(Decimal("0.1"))


def month_to_date(
    tenants: list[Tenant], month: date | None = None, *, now: datetime | None = None
) -> list[Spend]:
    """What each of ``tenants`` spent from the start of ``month`` (default: this one) to
    ``now`` (or the month's end, if earlier)."""
    month = month or today_utc().replace(day=1)
    start, end = month_bounds(month)
    end = min(end, now or timezone.now())
    slugs = [t.slug for t in tenants]
    rows = UsageHour.objects.filter(tenant_slug__in=slugs)
    gpu: dict[str, Decimal] = defaultdict(Decimal)
    for line in priced(rows, start, end, by=("tenant_slug", "flavor")):
        slug = str(line.key["tenant_slug"])
        # Usage on the tenant's reserved nodes is covered by the reservation (billing.reservations).
        if not is_reserved_flavor(str(line.key["flavor"]), slug):
            gpu[slug] += line.amount
    for span in spans(overlapping(start, end, slugs), start, end, end):
        gpu[span.reservation.tenant_slug] += span.amount
    other: dict[str, Decimal] = {}
    error = ""
    if settings.BILLING_OPENCOST_URL and tenants and start < end:
        try:
            other = {slug: c.total for slug, c in opencost_by_tenant(start, end).items()}
        except OpenCostError as exc:
            error = str(exc)
    budgets = {b.tenant_id: b for b in Budget.objects.filter(tenant__in=tenants)}
    return [
        Spend(
            tenant=t,
            budget=budgets.get(t.pk),
            gpu=money(gpu.get(t.slug, Decimal(0))),
            other=money(other.get(t.slug, Decimal(0))),
            opencost_error=error,
        )
        for t in tenants
    ]


def forecast(spent: Decimal, start: datetime, end: datetime, as_of: datetime) -> Decimal:
    """The month's spend if it goes on as it has: a linear run-rate, ``spent`` over the time
    from the month's ``start`` to ``as_of`` (the moment the ledger has data up to), scaled to
    the whole month ``[start, end)``. Before any time has passed it is what is spent."""
    elapsed = Decimal((min(max(as_of, start), end) - start).total_seconds())
    if not elapsed:
        return money(spent)
    return money(spent * Decimal((end - start).total_seconds()) / elapsed)


@dataclass(frozen=True)
class MonthRow:
    """A tenant's month so far and where it is heading."""

    spend: Spend
    forecast: Decimal


@dataclass(frozen=True)
class MonthOverview:
    """Every tenant's month to date with a forecast for the month, and their totals."""

    month: date
    as_of: datetime
    rows: list[MonthRow]

    def _sum(self, pick: Any) -> Decimal:
        return money(sum((pick(row) for row in self.rows), Decimal(0)))

    @property
    def gpu(self) -> Decimal:
        return self._sum(lambda row: row.spend.gpu)

    @property
    def other(self) -> Decimal:
        return self._sum(lambda row: row.spend.other)

    @property
    def total(self) -> Decimal:
        return self._sum(lambda row: row.spend.total)

    @property
    def forecast(self) -> Decimal:
        return self._sum(lambda row: row.forecast)

    @property
    def budgeted(self) -> list[Spend]:
        return [row.spend for row in self.rows if row.spend.budget is not None]

    @property
    def opencost_error(self) -> str:
        return self.rows[0].spend.opencost_error if self.rows else ""


def tenant_forecast(spend: Spend, as_of: datetime | None, now: datetime | None = None) -> Decimal:
    """``forecast`` of one tenant's spend this month (``month_to_date`` of this month)."""
    now = now or timezone.now()
    start, end = month_bounds(now.astimezone(UTC).date().replace(day=1))
    return forecast(spend.total, start, end, as_of or now)


def month_overview(as_of: datetime | None, now: datetime | None = None) -> MonthOverview:
    """Every tenant's spend this month (budgeted or not), dearest first, each with its
    ``forecast`` from the spend up to ``as_of`` (the ledger's "data as of"; ``now`` when the
    ledger is empty)."""
    now = now or timezone.now()
    month = now.astimezone(UTC).date().replace(day=1)
    start, end = month_bounds(month)
    spends = month_to_date(list(Tenant.objects.order_by("slug")), month, now=now)
    moment = as_of or now
    rows = [MonthRow(s, forecast(s.total, start, end, moment)) for s in spends]
    rows.sort(key=lambda row: (-row.spend.total, row.spend.tenant.slug))
    return MonthOverview(month, moment, rows)


def _raise_alert(spend: Spend, month: date, threshold: int) -> BudgetAlert | None:
    """The alert of ``threshold`` for the month, or None when it was raised before."""
    assert spend.budget is not None
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                tenant=spend.tenant,
                month=month,
                threshold=threshold,
                spent=spend.total,
                budget=spend.budget.monthly_amount,
            )
            record_audit(
                actor=None,
                action="billing.budget_alert",
                target=alert,
                tenant_slug=spend.tenant.slug,
                diff={"spent": [None, str(spend.total)], "threshold": [None, threshold]},
            )
            people = [
                *access.users_who_may(spend.tenant, Action.SET_BUDGET),
                *access.finance_users(),
            ]
            currency = settings.BILLING_CURRENCY
            notify(
                people,
                tenant=spend.tenant,
                title=f"{spend.tenant.display_name or spend.tenant.slug} has used {threshold}% "
                f"of its budget for {month:%B %Y}",
                body=f"Spent so far this month: {spend.total} {currency} of "
                f"{spend.budget.monthly_amount} {currency} ({spend.percent}%).",
                url=reverse("billing:tenant_budget", args=[spend.tenant.slug]),
            )
    except IntegrityError:
        return None  # raised by another check at the same time
    return alert


def check_budgets(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Raise every threshold crossed this month that has not been raised yet."""
    month = (now or timezone.now()).astimezone(UTC).date().replace(day=1)
    tenants = list(Tenant.objects.filter(pk__in=Budget.objects.values("tenant_id")))
    raised = []
    for spend in month_to_date(tenants, month, now=now):
        if spend.budget is None or spend.percent is None:
            continue
        already = set(
            BudgetAlert.objects.filter(tenant=spend.tenant, month=month).values_list(
                "threshold", flat=True
            )
        )
        for threshold in spend.budget.thresholds:
            if threshold in already or spend.percent < threshold:
                continue
            alert = _raise_alert(spend, month, threshold)
            if alert is not None:
                raised.append(alert)
    return raised
