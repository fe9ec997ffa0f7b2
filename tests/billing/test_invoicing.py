"""Prices and invoices: effective dates that never reach back, lines per price period,
issued invoices that never change, corrections as new versions, the monthly run, OpenCost."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from billing import invoicing
from billing.models import Budget, GpuPrice, Invoice, InvoiceLine, Source, UsageHour
from portal.jobs import enqueue
from portal.models import AuditEvent, Job
from simulator import Simulator
from simulator.config import Prices, SimConfig
from tenants.models import Tenant

H200 = "NVIDIA-H200"
OCTOBER = date(2026, 10, 1)


def usage(hour: datetime, tenant: str = "alpha", **fields: object) -> UsageHour:
    values: dict[str, object] = {
        "tenant_slug": tenant,
        "namespace": tenant,
        "flavor": "h200",
        "gpu_model": H200,
        "mig_profile": "",
        "workload": "Deployment/train",
        "source": Source.EXPORTER,
        "allocated_gpu_seconds": Decimal(3600),
        "used_gpu_seconds": Decimal(1800),
        "observed_seconds": 3600,
        "energy_kwh": Decimal("0.7"),
    }
    values.update(fields)
    return UsageHour.objects.create(hour=hour, **values)


def price(amount: str, day: date, model: str = H200, profile: str = "") -> GpuPrice:
    """A price as it would have been added before ``day`` (the service refuses past dates)."""
    return GpuPrice.objects.create(
        gpu_model=model, mig_profile=profile, amount=Decimal(amount), effective_from=day
    )


@pytest.fixture(autouse=True)
def _no_opencost(settings: Any) -> None:
    # The test settings point at a simulator that is not running; tests that want OpenCost
    # start one (or name a closed port).
    settings.BILLING_OPENCOST_URL = ""


@pytest.fixture
def october(world: dict[str, Any]) -> dict[str, Any]:
    """Alpha used an H200 for two hours at 2.00 and, after the price rose on the 16th, one
    hour at 3.00."""
    price("2.00", date(2026, 9, 1))
    price("3.00", date(2026, 10, 16))
    usage(datetime(2026, 10, 10, 8, tzinfo=UTC))
    usage(datetime(2026, 10, 10, 9, tzinfo=UTC))
    usage(datetime(2026, 10, 20, 8, tzinfo=UTC))
    return world


def test_a_price_change_mid_month_gives_two_lines_at_two_prices(october: dict[str, Any]) -> None:
    invoice = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    lines = list(invoice.lines.all())
    assert [(line.quantity, line.unit_price, line.amount) for line in lines] == [
        (Decimal("2.000"), Decimal("2.0000"), Decimal("2.00") * 2),
        (Decimal("1.000"), Decimal("3.0000"), Decimal("3.00")),
    ]
    assert lines[0].period_end == lines[1].period_start == datetime(2026, 10, 16, tzinfo=UTC)
    assert lines[0].period_start == datetime(2026, 10, 1, tzinfo=UTC)
    assert lines[1].period_end == datetime(2026, 11, 1, tzinfo=UTC)
    assert lines[0].used_gpu_hours == Decimal("1.000")
    assert lines[0].energy_kwh == Decimal("1.400")
    assert (invoice.total, invoice.gpu_total, invoice.gpu_hours) == (
        Decimal("7.00"),
        Decimal("7.00"),
        Decimal("3.000"),
    )
    assert invoice.number == "alpha-2026-10-v1" and invoice.currency == "EUR"
    assert invoice.warnings == []
    assert AuditEvent.objects.filter(action="billing.invoice_draft").count() == 1


def test_re_drafting_replaces_the_lines(october: dict[str, Any]) -> None:
    first = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    usage(datetime(2026, 10, 21, 8, tzinfo=UTC))
    again = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["pam"])
    assert again.pk == first.pk and again.version == 1
    assert [line.quantity for line in again.lines.all()] == [Decimal(2), Decimal(2)]
    assert again.total == Decimal("10.00")
    assert InvoiceLine.objects.count() == 2


def test_an_issued_invoice_never_changes(october: dict[str, Any]) -> None:
    invoice = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    invoicing.do_issue_invoice(invoice, acting_user=october["fiona"])
    invoice.refresh_from_db()
    assert invoice.issued and invoice.issued_by == october["fiona"]
    before = [(line.amount, line.unit_price) for line in invoice.lines.all()]
    # A price added afterwards is for the future: it reaches no hour of the invoice.
    tomorrow = invoicing.today_utc() + timedelta(days=1)
    invoicing.do_add_price(H200, "", "9.5", tomorrow, acting_user=october["fiona"])
    with pytest.raises(ValidationError, match="after today"):
        invoicing.do_add_price(H200, "", "9.5", date(2026, 10, 2), acting_user=october["fiona"])
    usage(datetime(2026, 10, 22, 8, tzinfo=UTC))
    with pytest.raises(ValidationError, match="make a correction"):
        invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    with pytest.raises(ValidationError, match="already issued"):
        invoicing.do_issue_invoice(invoice, acting_user=october["fiona"])
    stored = Invoice.objects.get(pk=invoice.pk)
    assert [(line.amount, line.unit_price) for line in stored.lines.all()] == before
    assert stored.total == Decimal("7.00")
    stored.total = Decimal(0)
    with pytest.raises(ValidationError, match="cannot change"):
        stored.save()
    with pytest.raises(ValidationError, match="cannot be deleted"):
        stored.delete()
    line = stored.lines.first()
    assert line is not None
    line.amount = Decimal(0)
    with pytest.raises(ValidationError, match="cannot change"):
        line.save()
    assert Invoice.objects.get(pk=invoice.pk).total == Decimal("7.00")


def test_a_correction_is_a_new_version_that_supersedes(october: dict[str, Any]) -> None:
    v1 = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    v1 = invoicing.do_issue_invoice(v1, acting_user=october["fiona"])
    usage(datetime(2026, 10, 22, 8, tzinfo=UTC))  # an hour ingested late
    with pytest.raises(ValidationError):
        invoicing.do_correct_invoice(v1, "  ", acting_user=october["fiona"])
    with pytest.raises(PermissionDenied):
        invoicing.do_correct_invoice(v1, "late hour", acting_user=october["alice"])
    v2 = invoicing.do_correct_invoice(v1, "an hour ingested late", acting_user=october["fiona"])
    assert (v2.version, v2.supersedes, v2.status) == (2, v1, Invoice.Status.DRAFT)
    assert v2.reason == "an hour ingested late"
    assert v2.total == Decimal("10.00")
    assert Invoice.objects.get(pk=v1.pk).total == Decimal("7.00")
    assert not invoicing.is_superseded(v1)  # only once the correction is issued
    invoicing.do_issue_invoice(v2, acting_user=october["pam"])
    assert invoicing.is_superseded(v1)
    assert Invoice.objects.get(pk=v1.pk).status == Invoice.Status.ISSUED
    with pytest.raises(ValidationError, match="not the latest"):
        invoicing.do_correct_invoice(v1, "again", acting_user=october["fiona"])
    assert invoicing.latest_invoice(october["alpha"], OCTOBER) == v2


def test_only_a_past_month_is_invoiced(world: dict[str, Any]) -> None:
    this_month = invoicing.today_utc().replace(day=1)
    with pytest.raises(ValidationError, match="not over yet"):
        invoicing.do_draft_invoice(world["alpha"], this_month, acting_user=world["fiona"])
    assert not Invoice.objects.exists()


def test_only_finance_and_platform_admins_draft_and_issue(october: dict[str, Any]) -> None:
    for name in ("alice", "bob", "charlie"):
        with pytest.raises(PermissionDenied):
            invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october[name])
    invoice = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["pam"])
    with pytest.raises(PermissionDenied):
        invoicing.do_issue_invoice(invoice, acting_user=october["bob"])
    assert Invoice.objects.get(pk=invoice.pk).status == Invoice.Status.DRAFT


def test_unpriced_models_and_gaps_are_warned(world: dict[str, Any]) -> None:
    price("2.00", date(2026, 9, 1))
    usage(datetime(2026, 10, 3, 1, tzinfo=UTC), observed_seconds=1800)
    usage(datetime(2026, 10, 3, 1, tzinfo=UTC), gpu_model="NVIDIA-B200", flavor="b200")
    invoice = invoicing.do_draft_invoice(world["alpha"], OCTOBER, acting_user=world["fiona"])
    assert invoice.warnings == [
        "No price for NVIDIA-B200: 1.000 GPU-hours are listed at zero.",
        "1 ledger row of the month had gaps (less than the whole hour observed): time without "
        "samples is not billed.",
    ]
    unpriced = invoice.lines.get(gpu_model="NVIDIA-B200")
    assert (unpriced.unit_price, unpriced.amount) == (None, Decimal(0))


def test_prices_are_checked_and_only_a_future_one_withdrawn(world: dict[str, Any]) -> None:
    tomorrow = invoicing.today_utc() + timedelta(days=1)
    fiona = world["fiona"]
    for args, field in (
        ((H200, "", "-1", tomorrow), "amount"),
        ((H200, "", "1.00001", tomorrow), "amount"),
        ((H200, "", "abc", tomorrow), "amount"),
        ((H200, "9g.1gb", "1", tomorrow), "mig_profile"),
        ((H200, "", "1", invoicing.today_utc()), "effective_from"),
        (("  ", "", "1", tomorrow), "gpu_model"),
    ):
        with pytest.raises(ValidationError) as caught:
            invoicing.do_add_price(*args, acting_user=fiona)
        assert field in caught.value.message_dict
    with pytest.raises(PermissionDenied):
        invoicing.do_add_price(H200, "", "1", tomorrow, acting_user=world["alice"])
    assert not GpuPrice.objects.exists()
    future = invoicing.do_add_price(H200, "1g.18gb", "0.4", tomorrow, acting_user=fiona)
    with pytest.raises(ValidationError, match="already has a price"):
        invoicing.do_add_price(H200, "1g.18gb", "0.5", tomorrow, acting_user=fiona)
    in_effect = price("2.00", date(2026, 9, 1))
    with pytest.raises(ValidationError, match="never withdrawn"):
        invoicing.do_withdraw_price(in_effect, acting_user=fiona)
    invoicing.do_withdraw_price(future, acting_user=world["pam"])
    assert list(GpuPrice.objects.all()) == [in_effect]
    assert AuditEvent.objects.filter(action__startswith="billing.price_").count() == 2


# --- the monthly run --------------------------------------------------------------------------


def test_the_monthly_job_drafts_and_issues_last_month_once(
    world: dict[str, Any], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.BILLING_AUTO_ISSUE = True
    last = invoicing.previous_month(invoicing.today_utc())
    price("1.50", last - timedelta(days=40))
    usage(datetime.combine(last, datetime.min.time(), tzinfo=UTC) + timedelta(hours=5))
    Budget.objects.create(tenant=world["bravo"], monthly_amount=Decimal(100), thresholds=[50])
    Tenant.objects.create(slug="idle", display_name="No usage, no budget")
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            enqueue("billing.invoices", title="scheduled", trigger=Job.Trigger.SCHEDULE)
    assert Job.objects.filter(task="billing.invoices", status=Job.Status.SUCCEEDED).count() == 2
    invoices = {i.tenant_slug: i for i in Invoice.objects.all()}
    assert set(invoices) == {"alpha", "bravo"}
    assert all(i.issued and i.version == 1 for i in invoices.values())
    assert (invoices["alpha"].total, invoices["bravo"].total) == (Decimal("1.50"), Decimal(0))
    assert "issued already, unchanged" in Job.objects.order_by("-pk").first().log  # type: ignore[union-attr]


def test_the_monthly_job_re_drafts_a_draft(
    world: dict[str, Any], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.BILLING_AUTO_ISSUE = False
    last = invoicing.previous_month(invoicing.today_utc())
    price("1.50", last - timedelta(days=40))
    start = datetime.combine(last, datetime.min.time(), tzinfo=UTC)
    usage(start)
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("billing.invoices", trigger=Job.Trigger.SCHEDULE)
    usage(start + timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("billing.invoices", trigger=Job.Trigger.SCHEDULE)
    [invoice] = Invoice.objects.all()
    assert (invoice.status, invoice.total) == (Invoice.Status.DRAFT, Decimal("3.00"))


# --- OpenCost ---------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_opencost_down_still_drafts_with_a_warning(october: dict[str, Any], settings: Any) -> None:
    settings.BILLING_OPENCOST_URL = f"http://127.0.0.1:{closed_port()}"
    settings.BILLING_OPENCOST_TIMEOUT = 2
    invoice = invoicing.do_draft_invoice(october["alpha"], OCTOBER, acting_user=october["fiona"])
    assert invoice.total == Decimal("7.00")
    assert [line.kind for line in invoice.lines.all()] == ["gpu", "gpu"]
    [warning] = invoice.warnings
    assert warning.startswith("OpenCost: OpenCost at http://127.0.0.1:")
    assert "cannot be reached" in warning


@pytest.fixture
def opencost(settings: Any) -> Iterator[Simulator]:
    """The demo fleet's simulator answering OpenCost's allocation API (as tests/simulator's), at
    a price per second rather than per hour, so the second a test waits costs whole cents."""
    config = dataclasses.replace(
        SimConfig.demo(),
        flux_delay=0,
        ready_delay=0,
        recreate_delay=0,
        prices=Prices(cpu_core_hour=3600.0, ram_gib_hour=3600.0, gpu_hour=3600.0),
    )
    sim = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    sim.start("127.0.0.1", 0, tick_seconds=None)
    settings.BILLING_OPENCOST_URL = sim.url
    try:
        yield sim
    finally:
        sim.stop()


def test_opencost_lines_come_from_the_simulator_without_its_gpu_cost(
    world: dict[str, Any], opencost: Simulator
) -> None:
    vision = Tenant.objects.create(slug="vision", display_name="Vision")
    time.sleep(1.2)  # OpenCost's windows are whole seconds: let one pass with the pods placed
    now = datetime.now(UTC)
    draft = invoicing.opencost_lines(vision, now - timedelta(hours=1), now)
    assert draft.warnings == []
    kinds = {line.kind: line.amount for line in draft.lines}
    assert set(kinds) == {"cpu", "ram", "storage", "network"}
    assert kinds["cpu"] > 0 and kinds["ram"] > 0
    # Vision runs 16 whole GPUs, which OpenCost prices; the invoice takes none of that.
    costs = invoicing.opencost_by_tenant(now - timedelta(hours=1), now)["vision"]
    assert costs.opencost_gpu > 0
    assert sum(kinds.values()) < costs.total + costs.opencost_gpu
    assert all(line.period_end == now for line in draft.lines)
    # A tenant with no namespace in OpenCost gets its lines at zero, not someone else's.
    alpha = invoicing.opencost_lines(world["alpha"], now - timedelta(hours=1), now)
    assert {line.amount for line in alpha.lines} == {Decimal(0)}
