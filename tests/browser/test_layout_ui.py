"""The portal's layout in a real browser: the platform nav on one line at 1440 px, a usable
compact nav at 390 px without sideways scrolling of the page, and tenant tabs that scroll with
a fade on the edge that hides more of them.

Personas from tests/conftest.py: pam is a platform admin, alice admins alpha, bob is a member.
The page fixture fails each test on any console error, so the preview test below also checks
that a preview overtaken by more typing logs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tenants.specs import tenant_spec

pytestmark = pytest.mark.browser

SignIn = Callable[[Page, str], None]

# The boxes of the header's items: the brand, each nav link and menu, the switcher, the inbox,
# the name and the sign-out button.
HEADER_BOXES = """() => Array.from(document.querySelectorAll(
    ".topbar > .brand, .mainnav > *, .topbar > .switcher, .who > *"
)).map((el) => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; })"""

PAGE_OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


def test_it_keeps_the_platform_nav_on_one_line_at_1440(
    page: Page, sign_in: SignIn, world: dict[str, Any]
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, "pam")
    page.goto("/t/alpha/")
    boxes = page.evaluate(HEADER_BOXES)
    # Brand, 2 links, 4 menus, switcher, inbox, name, sign out.
    assert len(boxes) == 11
    # On one line, every item overlaps every other vertically.
    assert max(box["top"] for box in boxes) < min(box["bottom"] for box in boxes), boxes
    assert page.evaluate(PAGE_OVERFLOW) == 0

    # The menus open by keyboard (a <details>), and Escape closes them again.
    page.locator("summary", has_text="Money").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="Finance")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("link", name="Finance")).to_be_hidden()


def test_it_keeps_the_nav_usable_at_390(
    page: Page, sign_in: SignIn, live_server: Any, world: dict[str, Any]
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "pam")
    for path in ["/t/alpha/", "/tenants/", "/changes/", "/fleet/"]:
        page.goto(path)
        assert page.evaluate(PAGE_OVERFLOW) == 0, f"{path} scrolls sideways at 390 px"

    page.locator("summary", has_text="Fleet").click()
    link = page.get_by_role("link", name="Fleet overview")
    expect(link).to_be_visible()
    box = link.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    # Opening another menu closes the first (portal.js): one open at a time.
    page.locator("summary", has_text="Admin").click()
    expect(link).to_be_hidden()
    page.locator("summary", has_text="Fleet").click()
    link.click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/fleet/$"))


def test_it_fades_the_edge_of_tenant_tabs_that_hide_more(
    page: Page, sign_in: SignIn, world: dict[str, Any]
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "alice")
    page.goto("/t/alpha/")
    tabs = page.locator("nav.tabs")
    expect(tabs).to_have_class(re.compile(r"\btabs-more-end\b"))
    expect(tabs).not_to_have_class(re.compile(r"\btabs-more-start\b"))
    assert page.evaluate(PAGE_OVERFLOW) == 0

    # Scrolled to the end, the hint moves to the start edge.
    tabs.evaluate("(el) => { el.scrollLeft = el.scrollWidth; }")
    expect(tabs).to_have_class(re.compile(r"\btabs-more-start\b"))
    expect(tabs).not_to_have_class(re.compile(r"\btabs-more-end\b"))
    expect(page.get_by_role("link", name="Audit log", exact=True)).to_be_in_viewport()

    # Wide enough for every tab, there is no hint at all.
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/t/alpha/")
    page.evaluate("() => { document.querySelector('nav.tabs').style.width = '200rem'; }")
    page.evaluate("() => window.dispatchEvent(new Event('resize'))")
    expect(tabs).not_to_have_class(re.compile(r"tabs-more"))


def test_a_preview_overtaken_by_typing_logs_no_error(
    page: Page, sign_in: SignIn, world: dict[str, Any], merged_change: Callable[..., Any]
) -> None:
    merged_change(tenant_spec(world["alpha"]))
    sign_in(page, "bob")
    page.goto("/t/alpha/catalog/gpu-share/new/")
    h200 = page.locator('#preview tr[data-pool="h200 GPUs"] td.num')
    expect(h200.first).to_have_text("64.00")
    page.get_by_label("Name", exact=True).fill("train")
    page.get_by_label("Kind", exact=True).select_option("h200")
    expect(h200).to_have_text(["64.00", "63.00", "64.00"])

    # Hold the first answer, so that its preview is still out when bob types again.
    held: list[Route] = []

    def hold_first(route: Route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r"/preview/"), hold_first)
    page.get_by_label("Count", exact=True).fill("2")
    _wait_until(page, lambda: bool(held))
    page.get_by_label("Count", exact=True).fill("3")
    # The preview still out is not cancelled (cancelling makes htmx log an error): it answers,
    # and only then the one for the latest input goes out.
    with page.expect_request(re.compile(r"/preview/")) as latest:
        held[0].continue_()
    assert "count=3" in (latest.value.post_data or "")
    expect(h200).to_have_text(["64.00", "61.00", "64.00"])


def _wait_until(page: Page, condition: Callable[[], bool]) -> None:
    """Let Playwright dispatch its events (route handlers run then) until ``condition``."""
    for _ in range(500):
        if condition():
            return
        page.wait_for_timeout(20)
    raise AssertionError("the condition never held")
