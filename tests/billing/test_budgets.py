"""Budgets: who may set one, what is refused, and alerts once per threshold per month, with a
notification and an e-mail to the tenant's admins and finance."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError

from billing import budgets, invoicing
from billing.models import Budget, BudgetAlert, GpuPrice, Source, UsageHour
from catalog.models import Notification
from portal.jobs import enqueue
from portal.models import AuditEvent, Job

H200 = "NVIDIA-H200"


@pytest.fixture(autouse=True)
def _no_opencost(settings: Any) -> None:
    settings.BILLING_OPENCOST_URL = ""


def month_start() -> datetime:
    return datetime.combine(invoicing.today_utc().replace(day=1), datetime.min.time(), tzinfo=UTC)


def gpu_hours(hours: int, tenant: str = "alpha", *, first: int = 0) -> None:
    """``hours`` whole H200-hours of ``tenant`` from the start of this month on, at 10.00."""
    if not GpuPrice.objects.exists():
        GpuPrice.objects.create(
            gpu_model=H200, amount=Decimal(10), effective_from=date_before_this_month()
        )
    for n in range(first, first + hours):
        UsageHour.objects.create(
            # Within the first hour of the month, so "so far" includes them whenever this runs.
            hour=month_start(),
            tenant_slug=tenant,
            namespace=tenant,
            flavor="h200",
            gpu_model=H200,
            workload=f"Pod/p{n}",
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(3600),
            used_gpu_seconds=Decimal(3600),
            observed_seconds=3600,
        )


def date_before_this_month() -> Any:
    return invoicing.today_utc().replace(day=1) - timedelta(days=40)


def test_tenant_admins_and_finance_set_budgets(world: dict[str, Any]) -> None:
    budget = budgets.do_set_budget(world["alpha"], "100", ["80", "50"], acting_user=world["alice"])
    assert (budget.monthly_amount, budget.thresholds) == (Decimal(100), [50, 80])
    budgets.do_set_budget(world["alpha"], "250.50", [], acting_user=world["fiona"])
    budget.refresh_from_db()
    assert (budget.monthly_amount, budget.thresholds) == (Decimal("250.50"), [50, 80, 100])
    assert AuditEvent.objects.filter(action="billing.budget_set").count() == 2
    for name in ("bob", "vic", "charlie", "nora"):
        with pytest.raises(PermissionDenied):
            budgets.do_set_budget(world["alpha"], "1", [], acting_user=world[name])
    budgets.do_set_budget(world["bravo"], "10", [], acting_user=world["pam"])


@pytest.mark.parametrize(
    ("amount", "thresholds", "field"),
    [
        ("0", [], "monthly_amount"),
        ("-5", [], "monthly_amount"),
        ("1.001", [], "monthly_amount"),
        ("lots", [], "monthly_amount"),
        ("100", ["0"], "thresholds"),
        ("100", ["1001"], "thresholds"),
        ("100", ["half"], "thresholds"),
    ],
)
def test_bad_budgets_are_refused(
    world: dict[str, Any], amount: str, thresholds: list[str], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        budgets.do_set_budget(world["alpha"], amount, thresholds, acting_user=world["alice"])
    assert field in caught.value.message_dict
    assert not Budget.objects.exists()


def test_each_threshold_alerts_once_a_month(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    budgets.do_set_budget(world["alpha"], "100", ["50", "80", "100"], acting_user=world["alice"])
    gpu_hours(6)  # 60.00 of 100
    with django_capture_on_commit_callbacks(execute=True):
        raised = budgets.check_budgets()
    assert [(a.threshold, a.spent, a.budget) for a in raised] == [
        (50, Decimal("60.00"), Decimal("100.00"))
    ]
    told = Notification.objects.filter(tenant_slug="alpha")
    assert sorted(n.user.username for n in told) == ["alice", "fiona"]
    assert told[0].title == "Alpha Team has used 50% of its budget for " + (
        f"{invoicing.today_utc():%B %Y}"
    )
    assert told[0].url == "/t/alpha/budget/"
    [message] = mail.outbox
    assert sorted(message.to) == ["alice@example.com", "fiona@example.com"]
    assert "60.00 EUR of 100.00 EUR (60.0%)" in message.body

    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.check_budgets() == []
    assert told.count() == 2 and len(mail.outbox) == 1

    gpu_hours(3, first=6)  # 90.00: past 80, not yet 100
    with django_capture_on_commit_callbacks(execute=True):
        assert [a.threshold for a in budgets.check_budgets()] == [80]
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50, 80]
    assert len(mail.outbox) == 2


def test_a_tenant_without_a_budget_is_not_checked(world: dict[str, Any]) -> None:
    gpu_hours(50, "bravo")
    assert budgets.check_budgets() == []
    assert not Notification.objects.exists()


def test_spend_counts_opencost_and_survives_it_being_down(
    world: dict[str, Any], settings: Any
) -> None:
    budgets.do_set_budget(world["alpha"], "100", [], acting_user=world["fiona"])
    gpu_hours(2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.BILLING_OPENCOST_URL = f"http://127.0.0.1:{port}"
    settings.BILLING_OPENCOST_TIMEOUT = 2
    [spend] = budgets.month_to_date([world["alpha"]])
    assert (spend.gpu, spend.other, spend.total, spend.percent) == (
        Decimal("20.00"),
        Decimal(0),
        Decimal("20.00"),
        Decimal("20.0"),
    )
    assert "cannot be reached" in spend.opencost_error


def test_the_budget_task_raises_alerts(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    budgets.do_set_budget(world["bravo"], "10", ["100"], acting_user=world["charlie"])
    gpu_hours(1, "bravo")
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("billing.budgets", trigger=Job.Trigger.SCHEDULE)
    job = Job.objects.get(task="billing.budgets")
    assert job.status == Job.Status.SUCCEEDED and "1 alert raised" in job.log
    assert BudgetAlert.objects.get().threshold == 100
    assert sorted(Notification.objects.values_list("user__username", flat=True)) == [
        "charlie",
        "fiona",
    ]
