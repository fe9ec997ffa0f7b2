"""plotly.js (several megabytes) loads only on a page that shows a chart, or whose fragments
(a poll, a range change) may bring one, from a versioned URL the browser may keep for a year.

The pages are those of tests/portal/test_numbers_walk.py's walk of the URL configuration, so a
new page is covered the day it is added."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import plotly
import pytest
from django.test import Client

from portal.views import plotly_js_url
from tests.portal.test_numbers_walk import _pages

SCRIPT = f'<script src="{plotly_js_url()}"></script>'
# Pages whose htmx fragments may bring the first chart (an empty chart is left out): they load
# plotly.js with or without one, since the fragment cannot load it under the CSP's nonce.
SWAPS_CHARTS_IN = {"/billing/", "/t/alpha/usage/", "/fleet/", "/fleet/queues/"}


@pytest.mark.parametrize("persona", ["alice", "pam", "fiona"])
def test_plotly_js_loads_where_a_chart_is_or_may_come(
    persona: str, world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    client = login(persona)
    wrong: dict[str, str] = {}
    for url in _pages({}):
        response = client.get(url)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        html = response.content.decode()
        chart = "data-plotly-figure" in html
        loaded = "/static-vendor/plotly.min.js" in html
        if url in SWAPS_CHARTS_IN and not loaded:
            wrong[url] = "no plotly.js where a fragment may bring a chart"
        elif url not in SWAPS_CHARTS_IN and chart != loaded:
            wrong[url] = "a chart without plotly.js" if chart else "plotly.js without a chart"
        elif loaded:
            assert SCRIPT in html, url
    assert wrong == {}


def test_plotly_js_is_cached_for_a_year_under_a_versioned_url(client: Client) -> None:
    url = plotly_js_url()
    assert url.endswith(f"?v={plotly.__version__}")
    response = client.get(url)
    assert response.status_code == 200
    assert set(response["Cache-Control"].split(", ")) == {
        "public",
        "max-age=31536000",
        "immutable",
    }
