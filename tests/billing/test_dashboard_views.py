"""The dashboard pages: who sees them, the range in the URL, fragments, queries, landing."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.models import GpuPrice, Source, UsageHour
from billing.services import rollup_days
from fleet.models import Health, Node
from portal.views import CURRENT_TENANT_KEY
from tenants.models import Membership, Role, Tenant

ADMIN = "/billing/"
H200 = "NVIDIA-H200"
Login = Callable[[str], Client]


def alpha_usage(tenant: str = "alpha", hours: int = 3, workload: str = "Deployment/train") -> None:
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=now - timedelta(hours=h + 1),
            tenant_slug=tenant,
            namespace=tenant,
            flavor="h200",
            gpu_model=H200,
            workload=workload,
            source=Source.EXPORTER,
            allocated_gpu_seconds=Decimal(3600),
            used_gpu_seconds=Decimal(36),
            observed_seconds=3600,
            energy_kwh=Decimal("0.7"),
        )
        for h in range(hours)
    )
    rollup_days({(now - timedelta(hours=h + 1)).date() for h in range(hours)})


@pytest.fixture
def priced_usage(world: dict[str, Any]) -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal("2.50"), effective_from=date(2020, 1, 1))
    Node.objects.create(name="gpu-1", flavor="h200", gpu_count=8, health=Health.HEALTHY)
    alpha_usage()
    alpha_usage("bravo", workload="Deployment/serve")


# --- permissions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pam", "fiona"])
def test_platform_admins_and_finance_see_every_tenants_money(
    login: Login, priced_usage: None, name: str
) -> None:
    response = login(name).get(ADMIN)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'href="/t/alpha/usage/?range=7d"' in page
    assert 'href="/t/bravo/usage/?range=7d"' in page
    assert "7.50" in page  # three GPU-hours at 2.50


@pytest.mark.parametrize("name", ["alice", "bob", "vic", "charlie", "nora"])
def test_tenant_people_may_not_see_the_platform_dashboard(
    login: Login, priced_usage: None, name: str
) -> None:
    assert login(name).get(ADMIN).status_code == 403


def test_the_platform_dashboard_needs_a_sign_in(client: Client, world: dict[str, Any]) -> None:
    response = client.get(ADMIN)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("name", ["alice", "bob", "vic", "pam", "fiona"])
def test_members_viewers_admins_and_finance_see_alphas_dashboard(
    login: Login, priced_usage: None, name: str
) -> None:
    response = login(name).get("/t/alpha/usage/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Deployment/train" in page
    assert "Deployment/serve" not in page  # bravo's
    assert 'class="active">Usage &amp; cost</a>' in page


def test_a_non_member_gets_404(login: Login, priced_usage: None) -> None:
    charlie = login("charlie")
    assert charlie.get("/t/alpha/usage/").status_code == 404
    assert charlie.get("/t/alpha/usage/?range=custom&from=x").status_code == 404
    assert charlie.post("/t/alpha/usage/").status_code == 404
    assert login("alice").post("/t/alpha/usage/").status_code == 405


# --- the range ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("range=custom&from=2026-02-30&to=2026-03-01", "The from date must be a date"),
        ("range=custom&from=2026-03-02&to=2026-03-01", "must not be after the to date"),
        ("range=forever", "Unknown range"),
    ],
)
@pytest.mark.parametrize("url", [ADMIN, "/t/alpha/usage/"])
def test_a_bad_range_is_a_400_with_the_reason_and_nothing_else(
    login: Login, priced_usage: None, url: str, query: str, message: str
) -> None:
    response = login("pam").get(f"{url}?{query}")
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page
    assert 'class="form-errors"' in page
    assert "plotly-chart" not in page and "dash-tiles" not in page
    htmx = login("pam").get(f"{url}?{query}", HTTP_HX_REQUEST="true")
    assert htmx.status_code == 400
    assert htmx.content.decode().strip().startswith('<div class="form-errors" role="alert">')
    assert message in htmx.content.decode() and "<style" not in htmx.content.decode()


def test_the_range_is_kept_in_the_form_and_links(login: Login, priced_usage: None) -> None:
    today = timezone.now().astimezone(UTC).date()
    first, last = (today - timedelta(days=2)).isoformat(), today.isoformat()
    page = login("pam").get(f"{ADMIN}?range=custom&from={first}&to={last}").content.decode()
    assert '<option value="custom" selected>' in page
    assert f'value="{first}"' in page and f'value="{last}"' in page
    assert f'href="/t/alpha/usage/?range=custom&amp;from={first}&amp;to={last}"' in page
    assert 'hx-push-url="true"' in page
    old = login("pam").get(f"{ADMIN}?range=custom&from=2020-01-01&to=2020-01-31")
    assert "No usage in this range." in old.content.decode()


def test_htmx_gets_only_the_panels(login: Login, priced_usage: None) -> None:
    for url in (ADMIN, "/t/alpha/usage/"):
        response = login("pam").get(f"{url}?range=24h", HTTP_HX_REQUEST="true")
        page = response.content.decode()
        assert response.status_code == 200
        assert page.lstrip().startswith('<div id="panels"')
        assert "<html" not in page
        assert page.count('class="plotly-chart"') >= 3


def test_the_pages_draw_charts_without_inline_script(login: Login, priced_usage: None) -> None:
    for url in (ADMIN, "/t/alpha/usage/"):
        response = login("pam").get(url)
        page = response.content.decode()
        assert "data-plotly-figure=" in page
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page)
        assert not re.search(r"\son[a-z]+\s*=|\sstyle\s*=", page)
        assert "'unsafe-inline'" not in response["Content-Security-Policy"]


def test_unpriced_hours_are_flagged_on_both_pages(login: Login, world: dict[str, Any]) -> None:
    alpha_usage()
    admin = login("pam").get(ADMIN).content.decode()
    assert "GPU-hours have no price and count as zero: NVIDIA-H200" in admin
    assert "+3.00 GPU-h unpriced" in admin
    tenant = login("bob").get("/t/alpha/usage/").content.decode()
    assert "3.00 GPU-hours have no price yet" in tenant
    assert "no price</span>" in tenant


@pytest.mark.db_engine
def test_the_tenant_page_lists_idle_workloads_and_efficiency(
    login: Login, priced_usage: None
) -> None:
    page = login("vic").get("/t/alpha/usage/").content.decode()
    idle = page.split("Idle workloads", 1)[1].split("Quota left", 1)[0]
    assert "Deployment/train" in idle and "1%" in idle


# --- queries --------------------------------------------------------------------------------------


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.db_engine
def test_the_number_of_queries_does_not_grow_with_tenants_or_rows(
    login: Login, priced_usage: None, world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    pam, bob = login("pam"), login("bob")
    admin_before, tenant_before = _queries(pam, ADMIN), _queries(bob, "/t/alpha/usage/")
    for i in range(40):
        tenant = Tenant.objects.create(slug=f"t{i}", display_name=f"T{i}")
        Membership.objects.create(user=world["bob"], tenant=tenant, role=Role.VIEWER)
        alpha_usage(f"t{i}", hours=5, workload=f"Deployment/w{i}")
    alpha_usage(hours=48, workload="Deployment/more")
    with django_assert_num_queries(admin_before):
        pam.get(ADMIN)
    with django_assert_num_queries(tenant_before):
        bob.get("/t/alpha/usage/")
    # Pinned: session, user, platform roles; the dashboard's nine (latest hour, fleet,
    # prices, one priced query per price period, series, inventory, shares, requests,
    # ingest runs); whether Kueue's queues are live (watch and sync states: not here, so the
    # ledger's hour stands); the nav's tenants and counters; the GPU-hours idle reclaim won
    # back (total and by day); the reservations of the range (none here: no ledger query);
    # how current the ledger is (its ingest cursor and latest hour).
    assert admin_before == 21
    # The tenant's: session, user, roles, membership; prices, one priced query per price
    # period (by hour, which gives the series too), workloads, endpoints, latest hour,
    # inventory, shares, requests; whether Kueue's queues are live (two); the nav's two; the
    # GPU-hours idle reclaim won back (total and by day); its reservations of the range; how
    # current the ledger is (two).
    assert tenant_before == 21


# --- landing pages --------------------------------------------------------------------------------


def test_a_platform_admin_lands_on_the_usage_dashboard(login: Login) -> None:
    response = login("pam").get("/")
    assert response.status_code == 302 and response["Location"] == reverse(
        "billing:admin_dashboard"
    )


def test_finance_lands_on_the_finance_page(login: Login) -> None:
    response = login("fiona").get("/")
    assert response.status_code == 302 and response["Location"] == reverse("billing:finance")


def test_the_tenant_page_asks_for_its_right_sizing_fragment(
    login: Login, priced_usage: None
) -> None:
    bob = login("bob")
    page = bob.get("/t/alpha/usage/").content.decode()
    url = reverse("billing:rightsizing", kwargs={"tenant": "alpha"})
    assert f'hx-get="{url}"' in page
    fragment = bob.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="recommendations"')
    assert login("charlie").get(url, HTTP_HX_REQUEST="true").status_code == 404


def test_a_member_lands_on_the_usage_of_their_current_tenant(
    login: Login, world: dict[str, Any]
) -> None:
    Membership.objects.create(user=world["bob"], tenant=world["bravo"], role=Role.VIEWER)
    bob = login("bob")
    assert bob.get("/")["Location"] == "/t/alpha/usage/"  # the first membership
    bob.get("/switch/?tenant=bravo")
    assert bob.session[CURRENT_TENANT_KEY] == "bravo"
    assert bob.get("/")["Location"] == "/t/bravo/usage/"


def test_someone_without_a_tenant_stays_home(login: Login) -> None:
    assert login("nora").get("/").status_code == 200


def test_the_main_nav_links_usage_for_platform_admins_and_finance(login: Login) -> None:
    assert 'href="/billing/">Usage</a>' in login("pam").get("/fleet/").content.decode()
    assert 'href="/billing/">Usage</a>' in login("fiona").get("/tenants/").content.decode()
    assert 'href="/billing/"' not in login("nora").get("/").content.decode()
    assert 'href="/billing/"' not in login("alice").get("/tenants/").content.decode()
