"""What approving costs, where approvers and tenants decide: the approval queue names each
waiting request's monthly cost and their total, the decommission page what it saves."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from billing.models import GpuPrice
from catalog import services
from catalog.models import Kind, Resource, ResourceRequest
from gitops.fleet import H200_PRODUCT
from tenants.models import Tenant

pytestmark = pytest.mark.django_db
S = ResourceRequest.State


@pytest.fixture
def prices(db: None) -> None:
    """2.50 EUR a whole H200-hour (1,825.00 a GPU-month of 730 h)."""
    GpuPrice.objects.create(
        gpu_model=H200_PRODUCT, amount=Decimal("2.5"), effective_from=date(2025, 1, 1)
    )


def _share(tenant: Tenant, name: str, count: int) -> Resource:
    spec = {"name": name, "flavor": "h200", "kind": "whole", "count": count}
    return Resource.objects.create(
        tenant=tenant, kind=Kind.GPU_SHARE, name=name, state=Resource.State.ACTIVE, spec=spec
    )


def _endpoint_request(tenant: Tenant, user: Any, share: str, name: str) -> ResourceRequest:
    """A waiting endpoint request: 1 GPU a replica, 1 to 2 replicas on ``share``."""
    spec = {
        "name": name,
        "model_uri": "hf://org/model",
        "share": share,
        "min_replicas": 1,
        "max_replicas": 2,
    }
    resource = Resource.objects.create(tenant=tenant, kind=Kind.ENDPOINT, name=name)
    return ResourceRequest.objects.create(
        tenant=tenant, resource=resource, spec=spec, state=S.SUBMITTED, requested_by=user
    )


def _queue_requests(world: dict[str, Any], tenant: str, user: str, tag: str) -> None:
    """Four waiting requests of ``tenant``: a new 2-GPU share, a share growing from 2 to 4
    GPUs, a 1-GPU share to decommission and an endpoint on the growing share."""
    owner, by = world[tenant], world[user]
    spec = {"name": f"train{tag}", "flavor": "h200", "kind": "whole", "count": 2}
    services.do_create_request(owner, acting_user=by, kind="gpu-share", spec=spec)
    big = _share(owner, f"big{tag}", 2)
    services.do_modify_request(big, acting_user=by, spec={**big.spec, "count": 4})
    old = _share(owner, f"old{tag}", 1)
    services.do_decommission_request(old, acting_user=by, reason="")
    _endpoint_request(owner, by, f"big{tag}", f"chat{tag}")


def _costs(page: str) -> dict[str, str]:
    """The "A month" cell of each waiting request, by request title."""
    rows = re.findall(r'<tr data-request="\d+">(.*?)</tr>', page, re.S)
    found = {}
    for row in rows:
        title = re.search(r'<a href="/approvals/\d+/">([^<]*[a-z][^<]*)</a>', row)
        cell = re.search(r'<td class="num queue-cost[^"]*">(.*?)</td>', row, re.S)
        assert title and cell
        found[title.group(1)] = re.sub(r"<[^>]+>", " ", cell.group(1)).split()
    return {title: " ".join(words) for title, words in found.items()}


def test_the_queue_names_each_requests_monthly_cost_and_their_total(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    _queue_requests(onboarded, "alpha", "bob", "")
    page = login("pam").get("/approvals/").content.decode()
    costs = sorted(_costs(page).values())
    assert costs == sorted(
        [
            "+3,650.00 EUR",  # the new share: 2 x 1,825.00
            "+3,650.00 EUR",  # the share growing by 2 GPUs
            "saves 1,825.00 EUR",  # the share decommissioned
            "+3,650.00 EUR use of its shares",  # the endpoint: at most 2 GPUs of its share
        ]
    )
    # The endpoint runs on a share: its cost is part of that share's, not added again.
    total = re.search(r'<td class="num queue-cost-total">(.*?)</td>', page, re.S)
    assert total and re.sub(r"<[^>]+>", "", total.group(1)) == "+5,475.00 EUR"


def test_an_unpriced_model_is_flagged_in_the_queue(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    spec = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
    services.do_create_request(
        onboarded["alpha"], acting_user=onboarded["bob"], kind="gpu-share", spec=spec
    )
    page = login("pam").get("/approvals/").content.decode()
    assert f'title="No price set for {H200_PRODUCT}: it counts as zero here."' in page
    assert "no price</span>" in page


def test_the_queue_costs_a_bounded_number_of_queries(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    _queue_requests(onboarded, "alpha", "bob", "")
    with CaptureQueriesContext(connection) as few:
        assert pam.get("/approvals/").status_code == 200
    _queue_requests(onboarded, "alpha", "bob", "2")
    _queue_requests(onboarded, "bravo", "charlie", "3")
    with CaptureQueriesContext(connection) as many:
        page = pam.get("/approvals/").content.decode()
    assert len(_costs(page)) == 12
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_decommission_page_says_what_it_saves(
    onboarded: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    share = _share(onboarded["alpha"], "old", 2)
    url = f"/t/alpha/resources/{share.pk}/decommission/"
    page = login("bob").get(url).content.decode()
    assert "What it saves a month" in page
    assert "Up to <strong>3,650.00 EUR</strong> a month" in page
    assert login("charlie").get(url).status_code == 404
