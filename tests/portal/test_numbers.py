"""The number filters (portal/templatetags/numbers.py) and the favicon every page links."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from django.contrib.staticfiles import finders
from django.template import Context, Template
from django.test import Client

from portal.templatetags.numbers import amount, gpus, num, percent


@pytest.mark.parametrize(
    ("value", "places", "text"),
    [
        (Decimal("3.028571428571428571428571429"), 2, "3.03"),
        (Decimal("35458.6800000000"), 2, "35,458.68"),
        (Decimal("1234567.005"), 2, "1,234,567.01"),  # half up, not to even
        (Decimal("-0.125"), 2, "-0.13"),
        (2, 2, "2.00"),
        (0.1 + 0.2, 2, "0.30"),
        ("16", 2, "16.00"),
        (Decimal("2.12345"), 4, "2.1235"),
    ],
)
def test_it_prints_two_decimals_with_thousands(value: object, places: int, text: str) -> None:
    assert num(value, places) == text


@pytest.mark.parametrize("value", [None, "", "—", "n/a", True, float("nan")])
def test_it_leaves_what_is_not_a_number(value: object) -> None:
    assert num(value) is value
    assert amount(value, "EUR") is value


def test_it_names_the_unit() -> None:
    assert amount(Decimal("35458.68"), "EUR") == "35,458.68 EUR"
    assert gpus(Decimal("3") / 7 * 7) == "3.00 GPUs"
    assert gpus(1) == "1.00 GPU"
    html = Template('{% load numbers %}{{ v|amount:"EUR" }} · {{ g|gpus }}').render(
        Context({"v": Decimal("1000"), "g": Decimal("0.142857")})
    )
    assert html == "1,000.00 EUR · 0.14 GPUs"


def test_a_share_prints_as_a_percentage() -> None:
    assert percent(0.9) == "90.00 %"
    assert percent(Decimal("0.12345")) == "12.35 %"
    assert percent(None) is None


def test_every_page_links_the_favicon_and_it_is_served(
    login: Callable[[str], Client], settings: object
) -> None:
    page = login("alice").get("/tenants/").content.decode()
    assert '<link rel="icon" type="image/svg+xml" href="/static/portal/favicon.svg">' in page
    found = finders.find("portal/favicon.svg")
    assert found, "static/portal/favicon.svg is not found by staticfiles"
    response = Client().get("/static/portal/favicon.svg")
    assert response.status_code == 200
    assert b"<svg" in b"".join(response.streaming_content)  # type: ignore[attr-defined]


def test_htmx_injects_no_style_and_the_indicator_rules_are_in_the_stylesheet(
    login: Callable[[str], Client],
) -> None:
    """The CSP allows no inline style: htmx's own <style> for its indicator is off (htmx
    2.0.10, htmx.js insertIndicatorStyles reads includeIndicatorStyles) and portal.css has
    the rules instead."""
    import json
    import re

    page = login("alice").get("/tenants/").content.decode()
    meta = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
    assert meta, "no htmx-config meta"
    assert json.loads(meta.group(1))["includeIndicatorStyles"] is False
    css_path = finders.find("portal/portal.css")
    assert isinstance(css_path, str)
    with open(css_path, encoding="utf-8") as css:
        text = css.read()
    assert ".htmx-indicator { opacity:0;" in text and ".htmx-request .htmx-indicator" in text
