"""The API's request preview and its dry runs carry the price (and the preview the free
capacity) the approval page shows: money as decimal strings with the currency, GPUs as
numbers, unpriced models named; portalctl's diff prints the cost."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.test import Client

from billing.models import GpuPrice
from catalog import services as catalog
from catalog.models import Kind, Resource, ResourceRequest
from gitops.fleet import H200_PRODUCT
from portalctl import cli
from tests.api.test_declarative import SHARE_SPEC, active, document

pytestmark = pytest.mark.django_db


@pytest.fixture
def prices(db: None) -> None:
    """2.50 EUR a whole H200-hour since last year."""
    GpuPrice.objects.create(
        gpu_model=H200_PRODUCT, amount=Decimal("2.5"), effective_from=date(2025, 1, 1)
    )


def test_the_preview_names_the_monthly_cost_and_the_free_gpus(
    waiting: ResourceRequest, prices: None, api: Callable, token: Callable
) -> None:
    body = api(token("bob", "read")).get(f"/api/v1/requests/{waiting.pk}/preview/").json()
    cost = body["cost"]
    assert cost["currency"] == "EUR" and cost["billed_directly"] is True
    assert cost["change_per_month"] == "1825.00"  # 1 GPU x 2.50 x 730 h
    assert cost["before"] is None
    after = cost["after"]
    assert after["per_month"] == "1825.00" and after["low_per_month"] is None
    assert after["hours_per_month"] == 730 and after["unpriced"] == []
    [line] = after["lines"]
    assert line["unit_price"] == "2.5000" and line["unit"] == "GPU-hour"
    assert line["quantity"] == "1.0000"
    h200 = next(p for p in body["free_capacity"] if p["flavor"] == "h200" and p["unit"] == "GPUs")
    assert h200 == {
        "flavor": "h200",
        "unit": "GPUs",
        "capacity": 64.0,
        "free_now": 64.0,
        "free_after": 63.0,
        "changed": True,
    }


def test_a_model_without_a_price_is_named_not_counted(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    cost = api(token("bob", "read")).get(f"/api/v1/requests/{waiting.pk}/preview/").json()["cost"]
    assert cost["after"]["per_month"] == "0.00"
    assert cost["after"]["lines"][0]["unit_price"] is None
    assert cost["after"]["unpriced"] == [
        f"No price set for {H200_PRODUCT}: it counts as zero here."
    ]


def test_a_decommission_preview_says_what_it_saves(
    onboarded: dict[str, Any], prices: None, api: Callable, token: Callable
) -> None:
    resource = Resource.objects.create(
        tenant=onboarded["alpha"],
        kind=Kind.GPU_SHARE,
        name="old",
        state=Resource.State.ACTIVE,
        spec={"name": "old", "flavor": "h200", "kind": "whole", "count": 2},
    )
    request = catalog.do_decommission_request(resource, acting_user=onboarded["bob"], reason="")
    cost = api(token("bob", "read")).get(f"/api/v1/requests/{request.pk}/preview/").json()["cost"]
    assert cost["after"] is None
    assert cost["before"]["per_month"] == "3650.00"
    assert cost["change_per_month"] == "-3650.00"


def test_a_non_member_gets_404_for_the_preview(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    url = f"/api/v1/requests/{waiting.pk}/preview/"
    assert api(token("charlie", "admin")).get(url).status_code == 404
    assert api(token("vic", "read")).get(url).status_code == 200


def test_a_dry_run_says_what_each_document_costs_and_portalctl_prints_it(
    world: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    body = yaml.safe_dump_all(
        [
            document({**SHARE_SPEC, "count": 4}),  # 2 -> 4 GPUs
            document({**SHARE_SPEC, "count": 1}, name="small"),  # a new 1-GPU share
            document(),  # as it runs
        ]
    )
    response = login("bob").post(
        "/api/v1/apply/?dry_run=true", data=body.encode(), content_type="application/yaml"
    )
    grown, new, unchanged = response.json()["results"]
    assert grown["outcome"] == "modified"
    assert grown["cost"]["change_per_month"] == "3650.00"
    assert grown["cost"]["before"]["per_month"] == "3650.00"
    assert grown["cost"]["after"]["per_month"] == "7300.00"
    assert new["cost"]["change_per_month"] == "1825.00" and new["cost"]["before"] is None
    assert unchanged["outcome"] == "unchanged" and unchanged["cost"] is None
    assert cli._cost_lines(grown) == ["  cost: +3650.00 EUR a month at current prices"]
    GpuPrice.objects.all().delete()
    shrink = document({**SHARE_SPEC, "count": 1})
    response = login("bob").post(
        "/api/v1/apply/?dry_run=true",
        data=yaml.safe_dump(shrink).encode(),
        content_type="application/yaml",
    )
    [unpriced] = response.json()["results"]
    assert cli._cost_lines(unpriced) == [
        "  cost: +0.00 EUR a month at current prices",
        f"  ! No price set for {H200_PRODUCT}: it counts as zero here.",
    ]


def test_portalctl_says_what_a_smaller_share_saves(
    world: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    response = login("bob").post(
        "/api/v1/apply/?dry_run=true",
        data=yaml.safe_dump(document({**SHARE_SPEC, "count": 1})).encode(),
        content_type="application/yaml",
    )
    [smaller] = response.json()["results"]
    assert cli._cost_lines(smaller) == ["  cost: saves 1825.00 EUR a month at current prices"]


def test_putting_and_deleting_one_document_answers_with_its_cost(
    world: dict[str, Any], prices: None, login: Callable[[str], Client]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    bob = login("bob")
    url = "/api/v1/tenants/alpha/gpushares/train/"
    grown = bob.put(
        url, data=json.dumps(document({**SHARE_SPEC, "count": 3})), content_type="application/json"
    ).json()
    assert grown["outcome"] == "modified" and grown["cost"]["change_per_month"] == "1825.00"
    removed = bob.delete("/api/v1/tenants/alpha/gpushares/serve/?dry_run=true")
    assert removed.status_code == 404
    active(world, "gpu-share", {"name": "serve", **SHARE_SPEC})
    removed = bob.delete("/api/v1/tenants/alpha/gpushares/serve/?dry_run=true").json()
    assert removed["outcome"] == "decommission"
    assert removed["cost"]["change_per_month"] == "-3650.00"
    assert removed["cost"]["after"] is None
    assert (
        login("charlie")
        .put(url, data=json.dumps(document()), content_type="application/json")
        .status_code
        == 404
    )
