"""Price and free capacity where people decide: the request form, its live preview and the
approval page show what a request would cost at current prices and what each pool has free."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import GpuPrice
from catalog import services
from catalog.models import Kind, Resource
from gitops.fleet import H200_PRODUCT, configured_fleet

HTMX = {"HTTP_HX_REQUEST": "true"}
SHARE_FORM = {"name": "train", "flavor": "h200", "kind": "whole", "count": "2", "borrow": "on"}
PREVIEW = "/t/alpha/catalog/gpu-share/preview/"


@pytest.fixture
def prices(db: None) -> None:
    """2.50 EUR a whole H200-hour and 0.40 an hour of a 1g.18gb slice, since last year."""
    since = date(2025, 1, 1)
    GpuPrice.objects.create(gpu_model=H200_PRODUCT, amount=Decimal("2.5"), effective_from=since)
    GpuPrice.objects.create(
        gpu_model=H200_PRODUCT, mig_profile="1g.18gb", amount=Decimal("0.4"), effective_from=since
    )


def _free(page: str, pool: str, unit: str = "GPUs") -> list[str]:
    """The numbers of one pool's row of the free-capacity table."""
    row = re.search(rf'<tr[^>]*data-pool="{re.escape(pool)} {re.escape(unit)}".*?</tr>', page, re.S)
    assert row, f"no row for {pool} {unit}"
    return re.findall(r'<td class="num">([^<]*)</td>', row.group(0))


@pytest.mark.django_db
def test_the_preview_shows_the_monthly_cost_and_the_free_gpus(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    page = login("bob").post(PREVIEW, SHARE_FORM, **HTMX).content.decode()
    assert "3,650.00 EUR</strong> a month" in page  # 2 GPUs x 2.50 x 730 h
    assert "(730 h)" in page
    assert '<span class="unit-price">2.5000 EUR / GPU-hour</span>' in page
    assert _free(page, "h200") == ["64.00", "62.00", "64.00"]  # free now, with it, capacity
    more = login("bob").post(PREVIEW, {**SHARE_FORM, "count": "5"}, **HTMX).content.decode()
    assert "9,125.00 EUR</strong> a month" in more
    assert _free(more, "h200") == ["64.00", "59.00", "64.00"]


@pytest.mark.django_db
def test_free_capacity_counts_what_other_tenants_are_promised(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    Resource.objects.create(
        tenant=onboarded["bravo"],
        kind=Kind.GPU_SHARE,
        name="theirs",
        state=Resource.State.ACTIVE,
        spec={"name": "theirs", "flavor": "h200", "kind": "whole", "count": 10},
    )
    page = login("bob").get("/t/alpha/catalog/gpu-share/new/").content.decode()
    # Before any choice: free now and capacity, no "with this request" column, no cost.
    assert _free(page, "h200") == ["54.00", "64.00"]
    assert "a month" not in page
    preview = login("bob").post(PREVIEW, SHARE_FORM, **HTMX).content.decode()
    assert _free(preview, "h200") == ["54.00", "52.00", "64.00"]


@pytest.mark.django_db
def test_a_time_bound_share_shows_the_cost_until_its_end_date(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    until = timezone.localdate() + timedelta(days=3)
    form = {**SHARE_FORM, "until": until.isoformat()}
    page = login("bob").post(PREVIEW, form, **HTMX).content.decode()
    assert f"until its end date {until.isoformat()}" in page
    assert "3,650.00 EUR</strong> a month" in page


@pytest.mark.django_db
def test_mig_slices_and_an_unpriced_profile(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    form = {"name": "s", "flavor": "h200-mig", "kind": "mig", "mig_profile": "1g.18gb"}
    page = login("bob").post(PREVIEW, {**form, "count": "3"}, **HTMX).content.decode()
    assert "876.00 EUR</strong> a month" in page  # 3 x 0.40 x 730
    assert _free(page, "h200-mig", "1g.18gb MIG devices") == ["32.00", "29.00", "32.00"]
    GpuPrice.objects.all().delete()
    page = login("bob").post(PREVIEW, {**form, "count": "3"}, **HTMX).content.decode()
    assert f"No price set for {H200_PRODUCT} 1g.18gb: it counts as zero here." in page


@pytest.mark.django_db
def test_the_approver_sees_the_same_cost_and_free_capacity(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    spec = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
    req = services.do_create_request(
        onboarded["alpha"], acting_user=onboarded["bob"], kind="gpu-share", spec=spec
    )
    page = login("pam").get(f"/approvals/{req.pk}/").content.decode()
    assert "3,650.00 EUR</strong> a month" in page
    row = re.search(r"<tr[^>]*>\s*<td>h200</td>.*?</tr>", page, re.S)
    assert row
    assert re.findall(r'<td class="num">([^<]*)</td>', row.group(0)) == ["64.00", "62.00"]


@pytest.mark.django_db
def test_outsiders_get_404_from_the_preview_and_the_approval_page(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    spec = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
    req = services.do_create_request(
        onboarded["alpha"], acting_user=onboarded["bob"], kind="gpu-share", spec=spec
    )
    for outsider in ["charlie", "nora"]:
        client = login(outsider)
        assert client.post(PREVIEW, SHARE_FORM, **HTMX).status_code == 404
        assert client.get("/t/alpha/catalog/gpu-share/new/").status_code == 404
        assert client.get(f"/approvals/{req.pk}/").status_code == 404


@pytest.mark.django_db
def test_a_modify_shows_what_runs_now_beside_what_it_would_cost(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    spec = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
    share = Resource.objects.create(
        tenant=onboarded["alpha"],
        kind=Kind.GPU_SHARE,
        name="train",
        state=Resource.State.ACTIVE,
        spec=spec,
    )
    bob = login("bob")
    page = bob.post(
        f"{PREVIEW}?resource={share.pk}", {**SHARE_FORM, "count": "4"}, **HTMX
    ).content.decode()
    assert "Runs now: 3,650.00 EUR a month" in page
    assert "7,300.00 EUR</strong> a month" in page
    new = bob.post(PREVIEW, {**SHARE_FORM, "name": "other"}, **HTMX).content.decode()
    assert "Runs now" not in new
    modify = services.do_modify_request(
        share, acting_user=onboarded["bob"], spec={**spec, "count": 4}
    )
    approval = login("pam").get(f"/approvals/{modify.pk}/").content.decode()
    assert "Runs now: 3,650.00 EUR a month" in approval
    assert "7,300.00 EUR</strong> a month" in approval


@pytest.mark.django_db
def test_free_pools_are_the_pools_the_tenant_may_ask_for(onboarded: dict[str, Any]) -> None:
    fleet = configured_fleet()
    shared = {row.flavor for row in services.free_pools(onboarded["alpha"], fleet)}
    assert shared == {f.name for f in fleet.flavors}
    # A dedicated tenant shares no GPU (no HAMi) and has no MIG (nor DRA on MIG) until allowed.
    dedicated = {row.flavor for row in services.free_pools(onboarded["bravo"], fleet)}
    assert dedicated == {"h200", "h200-dra"}
