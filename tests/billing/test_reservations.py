"""Reserved nodes on the bill (issue 29): billed per GPU-hour from acceptance to release,
split at price changes, the usage on them not billed twice, their idle hours the tenant's
waste; the reservation price form; who sees the lines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from billing import budgets, dashboards, invoicing, services
from billing.models import InvoiceLine, ReservationPrice, Source, UsageHour
from billing.reservations import is_reserved_flavor, reserved_flavor
from fleet.models import Node, NodeReservation
from gitops.render.reservations import flavor_name
from portal.models import AuditEvent

H200 = "NVIDIA-H200"
OCTOBER = date(2026, 10, 1)
Login = Callable[[str], Client]


def at(day: int, hour: int = 0, month: int = 10) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


def reserve(
    node: str, accepted: datetime, released: datetime | None = None, tenant: str = "bravo"
) -> NodeReservation:
    return NodeReservation.objects.create(
        node_name=node,
        tenant_slug=tenant,
        flavor="h200",
        gpu_product=H200,
        gpus=8,
        accepted_at=accepted,
        released_at=released,
    )


def usage(hour: datetime, flavor: str, tenant: str = "bravo", used: int = 1800) -> UsageHour:
    return UsageHour.objects.create(
        hour=hour,
        tenant_slug=tenant,
        namespace=tenant,
        flavor=flavor,
        gpu_model=H200,
        workload="Job/train",
        source=Source.EXPORTER,
        allocated_gpu_seconds=Decimal(3600),
        used_gpu_seconds=Decimal(used),
        observed_seconds=3600,
    )


@pytest.fixture(autouse=True)
def _no_opencost(settings: Any) -> None:
    settings.BILLING_OPENCOST_URL = ""


@pytest.fixture
def priced(world: dict[str, Any]) -> dict[str, Any]:
    """A usage price of 3.00 and a reservation price of 2.00 per GPU-hour, 2.50 from the
    16th of October."""
    from billing.models import GpuPrice

    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(3), effective_from=date(2026, 9, 1))
    ReservationPrice.objects.create(
        gpu_model=H200, amount=Decimal(2), effective_from=date(2026, 9, 1)
    )
    ReservationPrice.objects.create(
        gpu_model=H200, amount=Decimal("2.5"), effective_from=date(2026, 10, 16)
    )
    return world


def reserved_lines(invoice: Any) -> list[tuple[str, datetime, datetime, Decimal, Decimal, Decimal]]:
    return [
        (
            line.description,
            line.period_start,
            line.period_end,
            line.quantity,
            line.unit_price,
            line.amount,
        )
        for line in invoice.lines.filter(kind=InvoiceLine.Kind.RESERVED)
    ]


def test_the_flavor_name_is_the_renderers() -> None:
    assert reserved_flavor("h200", "bank-risk") == flavor_name("h200", "bank-risk")
    assert is_reserved_flavor("h200.bank-risk", "bank-risk")
    assert not is_reserved_flavor("h200.bank-risk", "bank")
    assert not is_reserved_flavor("h200", "bank-risk")


def test_a_node_reserved_across_the_month_is_billed_for_the_month_split_at_the_price_change(
    priced: dict[str, Any],
) -> None:
    # Accepted in September, never released: October from its first to its last hour.
    reserve("h200-05", at(28, 12, month=9))
    invoice = invoicing.do_draft_invoice(priced["bravo"], OCTOBER, acting_user=priced["fiona"])
    before, after = 15 * 24, 16 * 24
    assert reserved_lines(invoice) == [
        (
            f"Reserved node h200-05: 8 {H200} GPUs, {before}.00 node-hours",
            at(1),
            at(16),
            Decimal(before * 8),
            Decimal(2),
            Decimal(before * 8 * 2),
        ),
        (
            f"Reserved node h200-05: 8 {H200} GPUs, {after}.00 node-hours",
            at(16),
            at(1, month=11),
            Decimal(after * 8),
            Decimal("2.5"),
            Decimal(after * 8) * Decimal("2.5"),
        ),
    ]
    assert invoice.gpu_total == invoice.total == Decimal(before * 16) + Decimal(after * 20)
    assert any("whatever they run" in w for w in invoice.warnings)


def test_a_reservation_accepted_and_released_mid_month_is_billed_for_its_hours_only(
    priced: dict[str, Any],
) -> None:
    reserve("h200-05", at(3, 9), released=at(5, 21))  # 60 hours
    reserve("h200-06", at(31, 23), released=at(2, 1, month=11))  # the month's last hour
    reserve("h200-07", at(20, 0, month=9), released=at(30, 0, month=9))  # all of it before
    invoice = invoicing.do_draft_invoice(priced["bravo"], OCTOBER, acting_user=priced["fiona"])
    lines = reserved_lines(invoice)
    assert [(line[1], line[2], line[3], line[5]) for line in lines] == [
        (at(3, 9), at(5, 21), Decimal(480), Decimal(960)),
        (at(31, 23), at(1, month=11), Decimal(8), Decimal(20)),
    ]


def test_a_reservation_not_accepted_yet_costs_nothing(priced: dict[str, Any]) -> None:
    NodeReservation.objects.create(
        node_name="h200-05", tenant_slug="bravo", flavor="h200", gpu_product=H200, gpus=8
    )
    assert invoicing.reservation_lines(priced["bravo"], at(1), at(1, month=11)).lines == []


def test_usage_on_the_reserved_nodes_is_not_billed_twice(priced: dict[str, Any]) -> None:
    reserve("h200-05", at(10), released=at(11))  # 24 hours
    for hour in range(4):
        usage(at(10, hour), "h200.bravo")
    usage(at(10, 5), "h200")  # on a shared node: billed as usage
    invoice = invoicing.do_draft_invoice(priced["bravo"], OCTOBER, acting_user=priced["fiona"])
    gpu = {
        line.flavor: (line.quantity, line.amount, line.description)
        for line in invoice.lines.filter(kind=InvoiceLine.Kind.GPU)
    }
    assert gpu["h200.bravo"][:2] == (Decimal(4), Decimal(0))
    assert gpu["h200.bravo"][2].endswith("(covered by the node reservation)")
    assert gpu["h200"][:2] == (Decimal(1), Decimal(3))
    assert invoice.total == Decimal(24 * 8 * 2) + Decimal(3)
    # The month so far counts the same way: the reservation and the shared hour.
    [spend] = budgets.month_to_date([priced["bravo"]], OCTOBER, now=at(1, month=11))
    assert spend.gpu == invoice.gpu_total


def test_without_a_reservation_price_the_node_is_listed_at_zero_with_a_warning(
    world: dict[str, Any],
) -> None:
    reserve("h200-05", at(10), released=at(11))
    invoice = invoicing.do_draft_invoice(world["bravo"], OCTOBER, acting_user=world["fiona"])
    [line] = invoice.lines.all()
    assert (line.unit_price, line.amount, line.quantity) == (None, Decimal(0), Decimal(192))
    assert any(f"No reservation price for {H200}" in w for w in invoice.warnings)


def test_a_tenant_with_only_a_reservation_is_invoiced(priced: dict[str, Any]) -> None:
    reserve("h200-05", at(10), released=at(11))
    assert [t.slug for t in invoicing.tenants_to_invoice(OCTOBER)] == ["bravo"]


def test_the_ledger_files_a_reserved_nodes_usage_under_the_tenants_flavor(
    world: dict[str, Any],
) -> None:
    for name in ("h200-05", "h200-06"):
        Node.objects.create(name=name, flavor="h200", product=H200, gpu_count=8, hostname=name)
    reserve("h200-05", at(10), released=at(11))
    during = services.node_infos(at(10, 5), at(10, 6))
    assert (during["h200-05"].flavor, during["h200-06"].flavor) == ("h200.bravo", "h200")
    after = services.node_infos(at(11, 5), at(11, 6))
    assert after["h200-05"].flavor == "h200"


def test_idle_reserved_hours_are_the_tenants_waste_not_the_platforms(
    priced: dict[str, Any],
) -> None:
    reserve("h200-05", at(10), released=at(10, 2))  # 16 GPU-hours
    usage(at(10, 0), "h200.bravo", used=900)  # one GPU-hour held, a quarter used
    usage(at(10, 0), "h200", tenant="alpha", used=3600)
    window = dashboards.Range(at(10), at(10, 3), "hour", "custom")
    board = dashboards.admin_dashboard(window)
    costs = {c.tenant: c for c in board.costs}
    # Held and not used (0.75) plus the reserved GPU-hours no work held (16 - 1).
    assert costs["bravo"].idle_gpu_hours == Decimal("15.75")
    assert costs["alpha"].idle_gpu_hours == 0
    # Cost as the invoice has it: the reservation at 2.00, the usage on it covered.
    assert (costs["bravo"].total.amount, costs["bravo"].by_flavor) == (
        Decimal(32),
        {"h200.bravo": Decimal(32)},
    )
    assert costs["alpha"].total.amount == Decimal(3)
    assert [c.tenant for c in board.costs] == ["bravo", "alpha"]
    assert "h200.bravo" in board.flavors
    # On the platform's series the reserved hours count as allocated, not as idle capacity.
    assert [(b.gpu_hours, b.reserved_idle_gpu_hours) for b in board.series] == [
        (Decimal(2) + 7, Decimal(7)),
        (Decimal(8), Decimal(8)),
        (Decimal(0), Decimal(0)),
    ]
    tenant = dashboards.tenant_dashboard(window, "bravo")
    assert tenant.reserved_idle_gpu_hours == Decimal(15)
    assert dashboards.tenant_dashboard(window, "alpha").reserved_idle_gpu_hours == 0


def url(name: str, *args: Any) -> str:
    return reverse(f"billing:{name}", args=args)


def test_the_reservation_price_form_refuses_bad_input_and_writes_nothing(
    world: dict[str, Any], login: Login
) -> None:
    Node.objects.create(name="h200-01", flavor="h200", product=H200, gpu_count=8)
    fiona = login("fiona")
    tomorrow = invoicing.today_utc() + timedelta(days=1)
    good = {
        "reservation-gpu_model": H200,
        "reservation-amount": "2.6",
        "reservation-effective_from": tomorrow,
    }
    for change, message in (
        ({"reservation-effective_from": invoicing.today_utc()}, "prices never reach back"),
        ({"reservation-amount": "2.12345"}, "at most four decimals"),
        ({"reservation-amount": "-1"}, "zero or more"),
        ({"reservation-gpu_model": "NVIDIA-B300"}, "is not a GPU model of the fleet"),
    ):
        response = fiona.post(url("prices"), {**good, **change})
        assert response.status_code == 400
        assert message in response.content.decode()
    assert not ReservationPrice.objects.exists()
    assert login("alice").post(url("prices"), good).status_code == 404
    assert fiona.post(url("prices"), good).status_code == 302
    price = ReservationPrice.objects.get()
    assert (price.gpu_model, price.amount, price.effective_from, price.created_by) == (
        H200,
        Decimal("2.6"),
        tomorrow,
        world["fiona"],
    )
    assert AuditEvent.objects.filter(action="billing.reservation_price_add").count() == 1
    response = fiona.post(url("prices"), good)
    assert response.status_code == 400
    assert "already has a reservation price from that date" in response.content.decode()
    page = fiona.get(url("prices")).content.decode()
    assert url("reservation_price_withdraw", price.pk) in page
    assert login("pam").post(url("reservation_price_withdraw", price.pk)).status_code == 302
    assert not ReservationPrice.objects.exists()


def test_a_reservation_price_in_effect_cannot_be_withdrawn(
    priced: dict[str, Any], login: Login
) -> None:
    price = ReservationPrice.objects.get(effective_from=date(2026, 9, 1))
    response = login("fiona").post(url("reservation_price_withdraw", price.pk), follow=True)
    assert "never withdrawn" in response.content.decode()
    assert ReservationPrice.objects.filter(pk=price.pk).exists()
    assert login("alice").post(url("reservation_price_withdraw", price.pk)).status_code == 404


def test_members_see_their_reserved_nodes_this_month_and_outsiders_get_404(
    world: dict[str, Any], login: Login
) -> None:
    ReservationPrice.objects.create(
        gpu_model=H200, amount=Decimal("1234.5"), effective_from=date(2026, 1, 1)
    )
    start = invoicing.month_bounds(invoicing.today_utc())[0]
    reserve("h200-05", start - timedelta(hours=2), released=start + timedelta(hours=1))
    page = login("charlie").get(url("tenant_invoices", "bravo")).content.decode()
    assert "Reserved node h200-05" in page
    assert "9,876.00 EUR" in page  # 8 GPU-hours at 1,234.50
    assert login("alice").get(url("tenant_invoices", "bravo")).status_code == 404
    invoice = invoicing.do_draft_invoice(
        world["bravo"], invoicing.previous_month(start.date()), acting_user=world["fiona"]
    )
    invoicing.do_issue_invoice(invoice, acting_user=world["fiona"])
    shown = login("charlie").get(url("invoice", invoice.pk))
    assert shown.status_code == 200
    page = shown.content.decode()
    # The month's last two hours, 16 GPU-hours at 1,234.50, and the rule stated.
    assert "Reserved node h200-05: 8 NVIDIA-H200 GPUs, 2.00 node-hours" in page
    assert "19,752.00 EUR" in page
    assert "covered by the reservation and listed at zero" in page
    assert login("alice").get(url("invoice", invoice.pk)).status_code == 404
