"""No page of any persona prints a number with more than two decimals, outside unit prices.

The pages are found by walking the URL configuration (the GET pages that need no argument,
and those that need only the tenant), so a new page is covered the day it is added. The world
holds amounts that do not round to two places: a MIG slice is 1/7 of a GPU, a price of four
decimals times such hours. Unit prices may keep four decimals: a template marks them with
``class="unit-price"``, and their text is left out of the check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tests.support.numbers import long_decimals

# Django's admin, the JSON API and vendored assets are not pages of the portal.
SKIPPED_PREFIXES = ("django-admin/", "api/v1/", "static-vendor/", "accounts/")


def test_it_finds_a_long_decimal_outside_unit_prices_only() -> None:
    html = (
        "<p>quota 3.028571428571428571428571429 GPUs</p>"
        '<td><span class="unit-price">2.1234 EUR</span></td>'
        "<script>var x = 1.23456;</script><p>1,234.56 EUR on 2026-12-06 at 10.0.0.1</p>"
    )
    assert long_decimals(html) == ["3.028571428571428571428571429"]


def _pages(ids: dict[str, int]) -> list[str]:
    found: list[str] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and p.name:
                route = prefix + str(p.pattern)
                route = route.replace("<slug:tenant>", "alpha").replace("<str:kind>", "gpu-share")
                for name, pk in ids.items():
                    route = route.replace(f"<int:{name}>", str(pk))
                if "<" not in route and "^" not in route and not route.startswith(SKIPPED_PREFIXES):
                    found.append("/" + route)

    walk(get_resolver().url_patterns, "")
    return sorted(set(found))


@pytest.mark.parametrize("persona", ["alice", "vic", "pam", "fiona"])
def test_no_page_prints_more_than_two_decimals(
    persona: str, odd_amounts: dict[str, int], login: Callable[[str], Client]
) -> None:
    client = login(persona)
    offenders: dict[str, list[str]] = {}
    pages = _pages(odd_amounts)
    invoice, request = odd_amounts["invoice_id"], odd_amounts["request_id"]
    assert {
        "/t/alpha/catalog/",
        "/t/alpha/usage/",
        f"/billing/invoices/{invoice}/",
        f"/approvals/{request}/",
    } <= set(pages)
    for url in pages:
        response = client.get(url)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        found = long_decimals(response.content.decode())
        if found:
            offenders[url] = found
    assert offenders == {}
