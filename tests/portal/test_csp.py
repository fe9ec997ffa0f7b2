"""The Content-Security-Policy the portal sends, and what the pages do to live with it.

The browser tests (tests/browser) enforce it for real: every one of them fails on a violation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import plotly.offline

ROOT = Path(__file__).resolve().parents[2]


def test_it_sends_a_content_security_policy(db: None, client: Any) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    policy = dict(
        part.strip().split(" ", 1)
        for part in response["Content-Security-Policy"].split(";")
        if part.strip()
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"
    # No nonce on a page without a chart: nothing inline is allowed there at all.
    assert policy["style-src"] == "'self'"
    assert policy["object-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["form-action"] == "'self'"
    assert "unsafe" not in response["Content-Security-Policy"]


def test_no_template_has_inline_script_handlers_or_styles() -> None:
    # What the policy refuses, so what a template must not contain: a <script> with a body, an
    # on* handler, a javascript: URL, a style attribute or a <style> without the nonce.
    offenders = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        text = re.sub(r"{% comment %}.*?{% endcomment %}|{#.*?#}", "", text, flags=re.S)
        patterns = [
            r"<script(?![^>]*\bsrc=)[^>]*>",
            r"\son[a-z]+\s*=",
            r"javascript:",
            r"\sstyle\s*=",
            r'<style(?![^>]*nonce="{{ request.csp_nonce }}")',
        ]
        offenders += [f"{path.relative_to(ROOT)}: {p}" for p in patterns if re.search(p, text)]
    assert not offenders


def test_the_maplibre_placeholder_matches_the_installed_plotly_js() -> None:
    # plotly.js skips injecting its bundled map CSS when an element with this id exists; a
    # plotly upgrade that changes the id must change the placeholder too.
    template = (ROOT / "templates" / "portal" / "_plotly.html").read_text()
    ids = re.findall(r'<style id="([0-9a-f]{64})"', template)
    assert len(ids) == 1
    bundle = plotly.offline.get_plotlyjs()
    assert f'document.getElementById("{ids[0]}")' in bundle
    assert f'e.id="{ids[0]}"' in bundle
    # ... and plotly.js still looks for its global sheet by the id the template gives it.
    assert '"plotly.js-style-"+' in bundle and '<style id="plotly.js-style-global"' in template
