"""Forms that explain, in a real browser: the share form shows only the fields of the chosen
kind (and all of them, for the server to sort out, without JavaScript), and issuing an invoice
asks to confirm first."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from billing import invoicing
from billing.models import GpuPrice, Invoice, Source, UsageHour
from catalog.models import ResourceRequest
from tests.browser.conftest import TIMEOUT_MS
from tests.conftest import PASSWORD

pytestmark = pytest.mark.browser

H200 = "NVIDIA-H200"
KIND_FIELDS = ("MIG profile", "GPU memory per slot (MiB)", "GPU compute per slot (%)")


def _shown(page: Page) -> list[str]:
    """The labels of the kind-specific fields that show."""
    return [label for label in KIND_FIELDS if page.get_by_label(label, exact=True).is_visible()]


def test_choosing_a_kind_shows_only_its_fields(
    page: Page, sign_in: Callable[[Page, str], None], world: dict[str, Any]
) -> None:
    sign_in(page, "bob")
    page.goto("/t/alpha/catalog/gpu-share/new/")
    kind = page.get_by_label("Kind", exact=True)
    expect(kind).to_have_value("h200")
    expect(page.get_by_label("MIG profile", exact=True)).to_be_hidden()
    assert _shown(page) == []
    page.get_by_label("Name", exact=True).fill("slots")

    kind.select_option("h200-hami")
    expect(page.get_by_label("GPU memory per slot (MiB)", exact=True)).to_be_visible()
    assert _shown(page) == ["GPU memory per slot (MiB)", "GPU compute per slot (%)"]
    # The live preview still follows the form: HAMi wants memory and compute per slot.
    expect(page.locator("#preview .form-errors")).to_contain_text("GPU memory per slot")

    kind.select_option("h200-mig")
    profile = page.get_by_label("MIG profile", exact=True)
    expect(profile).to_be_visible()
    assert _shown(page) == ["MIG profile"]
    # Each profile says how much of a GPU it is.
    profile.select_option("2g.35gb")
    expect(profile.locator("option:checked")).to_have_text(
        "2g.35gb: 2/7 of the compute, 35 GB memory (16 in the pool)"
    )

    kind.select_option("h200-dra")
    expect(profile).to_be_hidden()
    assert _shown(page) == []


def _sign_in(page: Page, username: str) -> None:
    """Through the login form, landing wherever the portal sends ``username``."""
    page.goto("/accounts/login/")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form[action='/accounts/login/'] button[type=submit]").click()
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))


def test_without_javascript_every_field_shows_and_the_server_ignores_other_kinds(
    browser: Browser, live_server: Any, world: dict[str, Any], transactional_db: None
) -> None:
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    try:
        _sign_in(page, "bob")
        page.goto("/t/alpha/catalog/gpu-share/new/")
        assert _shown(page) == list(KIND_FIELDS)
        page.get_by_label("Name", exact=True).fill("train")
        page.get_by_label("Kind", exact=True).select_option("h200")
        page.get_by_label("Count", exact=True).fill("2")
        # Left over from other kinds: not asked for, so no error either.
        page.get_by_label("MIG profile", exact=True).select_option("1g.18gb")
        page.get_by_label("GPU memory per slot (MiB)", exact=True).fill("-5")
        page.get_by_role("button", name="Submit request").click()
        expect(page).to_have_url(f"{live_server.url}/t/alpha/requests/{_request_id()}/")
    finally:
        context.close()


def _request_id() -> int:
    request = ResourceRequest.objects.get(resource__name="train")
    assert request.spec["kind"] == "whole" and request.spec["gpumem_mib"] == 0
    return request.pk


@pytest.mark.expected_responses(422)
def test_issuing_an_invoice_asks_to_confirm(page: Page, world: dict[str, Any]) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(2), effective_from=date(2026, 9, 1))
    UsageHour.objects.create(
        hour=datetime(2026, 10, 5, 3, tzinfo=UTC),
        tenant_slug="alpha",
        namespace="alpha",
        flavor="h200",
        gpu_model=H200,
        workload="Deployment/train",
        source=Source.EXPORTER,
        allocated_gpu_seconds=Decimal(3600),
        used_gpu_seconds=Decimal(900),
        observed_seconds=3600,
    )
    draft = invoicing.do_draft_invoice(
        world["alpha"], date(2026, 10, 1), acting_user=world["fiona"]
    )
    _sign_in(page, "fiona")
    page.goto(f"/billing/invoices/{draft.pk}/")
    page.get_by_role("link", name="Issue…").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Issue invoice {draft.number}")
    expect(page.locator("main")).to_contain_text("Issuing is final")

    page.get_by_role("button", name=f"Issue {draft.number}").click()
    expect(page.locator(".field.has-error")).to_contain_text("nothing was issued")
    assert Invoice.objects.get(pk=draft.pk).status == Invoice.Status.DRAFT

    page.get_by_label(f"Type the number, {draft.number}, to confirm").fill(draft.number)
    page.get_by_role("button", name=f"Issue {draft.number}").click()
    expect(page.locator("#messages")).to_contain_text(f"Issued {draft.number}")
    assert Invoice.objects.get(pk=draft.pk).status == Invoice.Status.ISSUED
