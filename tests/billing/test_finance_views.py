"""The finance pages through HTTP: who sees which money, forms that refuse bad input and
write nothing, invoices issued and corrected, CSV exports that a spreadsheet cannot run."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from billing import invoicing
from billing.exports import cell, safe_filename
from billing.models import Budget, GpuPrice, Invoice, Source, UsageHour
from fleet.models import Node
from portal.models import Job

H200 = "NVIDIA-H200"
OCTOBER = date(2026, 10, 1)
Login = Callable[[str], Client]


@pytest.fixture(autouse=True)
def _no_opencost(settings: Any) -> None:
    settings.BILLING_OPENCOST_URL = ""


def row(hour: datetime, tenant: str = "alpha", workload: str = "Deployment/train") -> UsageHour:
    return UsageHour.objects.create(
        hour=hour,
        tenant_slug=tenant,
        namespace=tenant,
        flavor="h200",
        gpu_model=H200,
        workload=workload,
        source=Source.EXPORTER,
        allocated_gpu_seconds=Decimal(3600),
        used_gpu_seconds=Decimal(900),
        observed_seconds=3600,
    )


@pytest.fixture
def invoices(world: dict[str, Any]) -> dict[str, Invoice]:
    """Alpha's October issued and bravo's October a draft."""
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(2), effective_from=date(2026, 9, 1))
    row(datetime(2026, 10, 5, 3, tzinfo=UTC))
    row(datetime(2026, 10, 5, 3, tzinfo=UTC), "bravo")
    alpha = invoicing.do_draft_invoice(world["alpha"], OCTOBER, acting_user=world["fiona"])
    alpha = invoicing.do_issue_invoice(alpha, acting_user=world["fiona"])
    bravo = invoicing.do_draft_invoice(world["bravo"], OCTOBER, acting_user=world["fiona"])
    return {"alpha": alpha, "bravo": bravo}


def url(name: str, *args: Any) -> str:
    return reverse(f"billing:{name}", args=args)


# --- who sees what ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["finance", "prices", "usage_csv"])
def test_finance_pages_are_finances_and_platform_admins(
    name: str, invoices: dict[str, Invoice], login: Login
) -> None:
    for person in ("fiona", "pam"):
        assert login(person).get(url(name)).status_code == 200
    for person in ("alice", "bob", "charlie", "nora"):
        assert login(person).get(url(name)).status_code == 404


def test_the_dashboard_shows_invoices_trend_and_budgets(
    invoices: dict[str, Invoice], login: Login, world: dict[str, Any]
) -> None:
    Budget.objects.create(tenant=world["alpha"], monthly_amount=Decimal(50), thresholds=[50])
    this_month = datetime.combine(invoicing.today_utc().replace(day=1), datetime.min.time(), UTC)
    row(this_month)
    page = login("fiona").get(url("finance")).content.decode()
    assert invoices["alpha"].number in page and invoices["bravo"].number in page
    assert page.count('class="plotly-chart"') == 2
    assert "2.00 EUR" in page  # alpha's month so far: one H200-hour
    assert url("finance_draft") in page


def test_alice_sees_alphas_issued_invoices_only(
    invoices: dict[str, Invoice], login: Login, world: dict[str, Any]
) -> None:
    draft = invoicing.do_correct_invoice(invoices["alpha"], "recount", acting_user=world["pam"])
    alice, charlie = login("alice"), login("charlie")
    assert alice.get(url("invoice", invoices["alpha"].pk)).status_code == 200
    assert login("vic").get(url("invoice_csv", invoices["alpha"].pk)).status_code == 200
    assert alice.get(url("invoice", draft.pk)).status_code == 404
    assert alice.get(url("invoice", invoices["bravo"].pk)).status_code == 404
    assert charlie.get(url("invoice", invoices["alpha"].pk)).status_code == 404
    assert charlie.get(url("invoice_csv", invoices["alpha"].pk)).status_code == 404
    listing = alice.get(url("tenant_invoices", "alpha")).content.decode()
    assert invoices["alpha"].number in listing and draft.number not in listing
    finance_listing = login("fiona").get(url("tenant_invoices", "alpha")).content.decode()
    assert draft.number in finance_listing
    assert charlie.get(url("tenant_invoices", "alpha")).status_code == 404
    for person in ("fiona", "pam"):
        assert login(person).get(url("invoice", draft.pk)).status_code == 200
        assert login(person).get(url("invoice", invoices["bravo"].pk)).status_code == 200


def test_bob_cannot_issue_and_fiona_can(invoices: dict[str, Invoice], login: Login) -> None:
    bravo = invoices["bravo"]
    assert login("bob").post(url("invoice_issue", bravo.pk)).status_code == 404
    assert login("charlie").post(url("invoice_issue", bravo.pk)).status_code == 404
    assert Invoice.objects.get(pk=bravo.pk).status == Invoice.Status.DRAFT
    alpha = invoices["alpha"]
    response = login("bob").post(url("invoice", alpha.pk), {"reason": "cheaper please"})
    assert response.status_code == 403
    assert Invoice.objects.count() == 2
    response = login("fiona").post(url("invoice_issue", bravo.pk), {"confirm": bravo.number})
    assert response.status_code == 302
    assert Invoice.objects.get(pk=bravo.pk).status == Invoice.Status.ISSUED


def test_issuing_asks_to_confirm_first(invoices: dict[str, Invoice], login: Login) -> None:
    bravo = invoices["bravo"]
    fiona = login("fiona")
    page = fiona.get(url("invoice", bravo.pk)).content.decode()
    # The invoice page links to the confirm step; it has no form that issues at once.
    assert f'href="{url("invoice_issue", bravo.pk)}"' in page
    assert f'action="{url("invoice_issue", bravo.pk)}"' not in page
    confirm = fiona.get(url("invoice_issue", bravo.pk))
    assert confirm.status_code == 200
    assert f"Type the number, {bravo.number}, to confirm" in confirm.content.decode()
    assert Invoice.objects.get(pk=bravo.pk).status == Invoice.Status.DRAFT
    for typed in ({}, {"confirm": ""}, {"confirm": "alpha-2026-10-v1"}):
        response = fiona.post(url("invoice_issue", bravo.pk), typed)
        assert response.status_code == 422
        assert "to confirm; nothing was issued" in response.content.decode()
        assert Invoice.objects.get(pk=bravo.pk).status == Invoice.Status.DRAFT
    assert login("charlie").get(url("invoice_issue", bravo.pk)).status_code == 404
    # A member of the tenant may read its issued invoice, never issue one.
    alpha = invoices["alpha"]
    assert login("alice").get(url("invoice_issue", alpha.pk)).status_code == 403
    response = fiona.post(url("invoice_issue", bravo.pk), {"confirm": f" {bravo.number} "})
    assert response["Location"] == url("invoice", bravo.pk)
    assert Invoice.objects.get(pk=bravo.pk).status == Invoice.Status.ISSUED
    again = fiona.get(url("invoice_issue", bravo.pk), follow=True).content.decode()
    assert f"{bravo.number} is issued already" in again


def test_a_correction_from_the_page(invoices: dict[str, Invoice], login: Login) -> None:
    alpha = invoices["alpha"]
    fiona = login("fiona")
    response = fiona.post(url("invoice", alpha.pk), {"reason": "   "})
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert Invoice.objects.count() == 2
    response = fiona.post(url("invoice", alpha.pk), {"reason": "late hours"})
    correction = Invoice.objects.get(version=2)
    assert response["Location"] == url("invoice", correction.pk)
    assert correction.supersedes == alpha and correction.reason == "late hours"
    fiona.post(url("invoice_issue", correction.pk), {"confirm": correction.number})
    page = fiona.get(url("invoice", alpha.pk)).content.decode()
    assert "superseded" in page and correction.number in page


def test_the_month_job_from_the_dashboard(
    invoices: dict[str, Invoice], login: Login, django_capture_on_commit_callbacks: Any
) -> None:
    fiona = login("fiona")
    response = fiona.post(url("finance_draft"), {"month": "2999-01"})
    assert response.status_code == 302 and not Job.objects.filter(task="billing.invoices")
    with django_capture_on_commit_callbacks(execute=True):
        response = fiona.post(url("finance_draft"), {"month": "2026-10"})
    job = Job.objects.get(task="billing.invoices")
    assert response["Location"] == reverse("job_detail", args=[job.pk])
    assert job.status == Job.Status.SUCCEEDED
    assert "alpha-2026-10-v1: issued already, unchanged" in job.log
    assert Invoice.objects.get(pk=invoices["bravo"].pk).status == Invoice.Status.DRAFT


# --- prices -----------------------------------------------------------------------------------


def test_the_price_form_refuses_bad_input_and_writes_nothing(
    world: dict[str, Any], login: Login
) -> None:
    Node.objects.create(name="h200-01", flavor="h200", product=H200, gpu_count=8)
    fiona = login("fiona")
    tomorrow = invoicing.today_utc() + timedelta(days=1)
    good = {"gpu_model": H200, "mig_profile": "", "amount": "2.5", "effective_from": tomorrow}
    page = fiona.get(url("prices")).content.decode()
    # The GPU model is a select of the models the fleet's nodes have.
    assert f'<option value="{H200}">{H200}</option>' in page
    for change, message in (
        (
            {"gpu_model": "NVIDIA-B300"},
            f"is not a GPU model of the fleet&#x27;s nodes (they have: {H200})",
        ),
        ({"gpu_model": ""}, "This field is required"),
        ({"effective_from": invoicing.today_utc()}, "prices never reach back"),
        ({"amount": "2.12345"}, "at most four decimals"),
        ({"amount": "-1"}, "zero or more"),
        ({"mig_profile": "big"}, "is not a MIG profile"),
    ):
        response = fiona.post(url("prices"), {**good, **change})
        assert response.status_code == 400
        assert message in response.content.decode()
    assert not GpuPrice.objects.exists()
    assert fiona.post(url("prices"), good).status_code == 302
    price = GpuPrice.objects.get()
    assert (price.amount, price.effective_from, price.created_by) == (
        Decimal("2.5"),
        tomorrow,
        world["fiona"],
    )
    page = fiona.get(url("prices")).content.decode()
    assert url("price_withdraw", price.pk) in page
    assert login("pam").post(url("price_withdraw", price.pk)).status_code == 302
    assert not GpuPrice.objects.exists()


def test_a_price_in_effect_cannot_be_withdrawn(world: dict[str, Any], login: Login) -> None:
    price = GpuPrice.objects.create(gpu_model=H200, amount=Decimal(2), effective_from=OCTOBER)
    response = login("fiona").post(url("price_withdraw", price.pk), follow=True)
    assert "never withdrawn" in response.content.decode()
    assert GpuPrice.objects.filter(pk=price.pk).exists()
    assert login("alice").post(url("price_withdraw", price.pk)).status_code == 404


# --- budgets ----------------------------------------------------------------------------------


def test_the_budget_page(world: dict[str, Any], login: Login) -> None:
    alice = login("alice")
    response = alice.post(url("tenant_budget", "alpha"), {"monthly_amount": "0", "thresholds": ""})
    assert response.status_code == 400 and "more than zero" in response.content.decode()
    response = alice.post(
        url("tenant_budget", "alpha"), {"monthly_amount": "100", "thresholds": "50, x"}
    )
    assert response.status_code == 400 and "whole percentage" in response.content.decode()
    assert not Budget.objects.exists()
    assert (
        login("bob").post(url("tenant_budget", "alpha"), {"monthly_amount": "5"}).status_code == 403
    )
    response = alice.post(
        url("tenant_budget", "alpha"), {"monthly_amount": "100", "thresholds": "90, 75"}
    )
    assert response.status_code == 302
    budget = Budget.objects.get()
    assert (budget.monthly_amount, budget.thresholds) == (Decimal(100), [75, 90])
    page = login("vic").get(url("tenant_budget", "alpha")).content.decode()
    assert "of 100.00 EUR" in page and "Save budget" not in page
    assert login("charlie").get(url("tenant_budget", "alpha")).status_code == 404
    assert (
        login("fiona")
        .post(url("tenant_budget", "alpha"), {"monthly_amount": "120", "thresholds": ""})
        .status_code
        == 302
    )


# --- CSV --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("=1+2", "'=1+2"),
        ("+SUM(A1)", "'+SUM(A1)"),
        ("-2+3", "'-2+3"),
        ("@cmd", "'@cmd"),
        ("\tTAB", "'\tTAB"),
        ("\rCR", "'\rCR"),
        ("plain", "plain"),
        (Decimal("-1.50"), "-1.50"),
        (None, ""),
    ],
)
def test_cells_that_start_a_formula_are_neutralised(value: object, written: str) -> None:
    assert cell(value) == written


def test_the_usage_export_escapes_and_scopes(world: dict[str, Any], login: Login) -> None:
    row(datetime(2026, 10, 5, 3, tzinfo=UTC), workload='=HYPERLINK("http://evil","x")')
    row(datetime(2026, 10, 5, 3, tzinfo=UTC), "bravo")
    query = "?start=2026-10-01&end=2026-10-31"
    response = login("alice").get(url("tenant_usage_csv", "alpha") + query)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert (
        response["Content-Disposition"]
        == 'attachment; filename="usage-alpha-2026-10-01-2026-10-31.csv"'
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["hour", "tenant", "namespace"]
    assert [r[1] for r in rows[1:]] == ["alpha"]
    assert rows[1][6] == '\'=HYPERLINK("http://evil","x")'
    everyone = login("fiona").get(url("usage_csv") + query).content.decode()
    assert sorted(r[1] for r in list(csv.reader(io.StringIO(everyone)))[1:]) == ["alpha", "bravo"]
    bad = login("fiona").get(url("usage_csv") + "?start=2026-10-31&end=2026-10-01")
    assert bad.status_code == 400 and "before the start" in bad.content.decode()
    assert login("charlie").get(url("tenant_usage_csv", "alpha")).status_code == 404


def test_the_invoice_csv(invoices: dict[str, Invoice], login: Login) -> None:
    alpha = invoices["alpha"]
    response = login("alice").get(url("invoice_csv", alpha.pk))
    assert response["Content-Disposition"] == 'attachment; filename="invoice-alpha-2026-10-v1.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["kind"], r["quantity"], r["unit_price"], r["amount"]) for r in rows] == [
        ("gpu", "1.000", "2.0000", "2.00")
    ]
    assert rows[0]["status"] == "issued" and rows[0]["currency"] == "EUR"


def test_file_names_are_safe() -> None:
    assert safe_filename('a"b\r\nc/../d.csv') == "a_b_c_.._d.csv"
    assert safe_filename("...") == "export"
