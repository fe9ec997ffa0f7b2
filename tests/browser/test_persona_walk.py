"""Every persona walks the portal in Chromium, wide and narrow, and meets no broken page.

Each persona signs in through the login form and follows, once each, every same-origin link of
the top bar (and the tenant switcher's tenants) and of the tab bars it finds on the pages it
reaches, at 1440x900 and at 390x844. A page fails the walk on a JavaScript error, a console
error, a Content-Security-Policy violation, a response of 400 or more for it or anything it
loads, a visible number of three or more decimals outside a unit price
(tests/support/numbers.py), a page wider than a 390 px screen, or a missing top bar. All of a
persona's problems are listed at once.

The world is the numbers walk's (tests/conftest.py ``odd_amounts``): alpha holds whole GPUs
and MIG slices with usage, a drafted invoice and a request waiting for approval; bravo holds
nothing, so charlie walks an empty tenant. The fleet is the simulator's demo fleet as the
portal's sync read it. Pages that poll keep doing so: the walk waits for each page's load and
for htmx to settle, never for the network to fall silent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Response,
    ViewportSize,
)

from fleet import services as fleet
from simulator import Simulator
from tests.browser.conftest import TIMEOUT_MS
from tests.support.chromium import watch_for_csp_violations
from tests.support.numbers import SKIPPED_TAGS, UNIT_PRICE_CLASS, long_decimals_in

pytestmark = pytest.mark.browser

WIDE: ViewportSize = {"width": 1440, "height": 900}
NARROW: ViewportSize = {"width": 390, "height": 844}
PERSONAS = {
    "pam": "platform admin",
    "fiona": "finance",
    "alice": "tenant admin",
    "bob": "tenant member",
    "vic": "viewer",
    "charlie": "admin of an empty tenant",
}
# Pages a persona's walk must reach: deep in the tabs, or behind the tenant switcher.
REACHES = {
    "pam": {"/fleet/remediation/", "/t/bravo/audit/", "/api/v1/docs/"},
    "fiona": {"/billing/finance/", "/t/alpha/invoices/"},
    "alice": {"/t/alpha/settings/", "/t/alpha/usage/"},
    "bob": {"/t/alpha/webhooks/", "/api/tokens/"},
    "vic": {"/t/alpha/budget/"},
    "charlie": {"/t/bravo/usage/", "/t/bravo/audit/"},
}
# Links the walk does not follow: signing out ends it, a download opens no page.
SIGN_OUT = "/accounts/logout/"
DOWNLOAD_SUFFIXES = (".csv", ".json", ".yaml", ".yml", ".pdf", ".zip", ".txt", ".tar.gz")

# What the walk reads from a page, in one call once htmx has settled: whether the top bar is
# there, the links of the top bar and of every tab bar as the browser resolves them (the tenant
# switcher is a GET form, so each of its tenants counts as a link), the text nodes a person sees
# (rendered, outside code and unit prices; a chart's SVG text included) and, when the page is
# wider than the screen, by how much and the outermost elements that stick out.
# htmx marks an element while its request runs, so a page's "load" fragments (recommendations,
# logs) have arrived when none is marked; waiting for the network to fall silent would never
# end on a page that polls.
INSPECT_JS = """async ({skipped, unitPrice, timeoutMs}) => {
  const busy = ".htmx-request, .htmx-swapping, .htmx-settling";
  const deadline = performance.now() + timeoutMs;
  while (document.querySelector(busy)) {
    if (performance.now() > deadline) return {busy: true};
    await new Promise((resolve) => requestAnimationFrame(resolve));
  }
  const links = Array.from(
    document.querySelectorAll("header.topbar a[href], nav.tabs a[href]"),
    (a) => (a.hasAttribute("download") ? "" : a.href),
  ).filter(Boolean);
  const switcher = document.querySelector("header.topbar form.switcher");
  for (const option of switcher ? switcher.querySelectorAll("select option") : []) {
    if (option.value) {
      const url = new URL(switcher.action);
      url.searchParams.set(option.parentElement.name, option.value);
      links.push(url.href);
    }
  }
  const outside = skipped.concat(["." + unitPrice]).join(",");
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const element = node.parentElement;
    if (!element || !node.data.trim() || element.closest(outside)) continue;
    if (element.checkVisibility({visibilityProperty: true})) texts.push(node.data);
  }
  const root = document.documentElement;
  const width = root.clientWidth;
  let overflow = null;
  if (root.scrollWidth > width + 1) {
    const name = (el) =>
      el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
      Array.from(el.classList, (c) => "." + c).join("");
    const sticking = [];
    for (const el of document.body.querySelectorAll("*")) {
      const parent = el.parentElement;
      if (el.getBoundingClientRect().right > width + 1 &&
          parent.getBoundingClientRect().right <= width + 1) {
        sticking.push(name(parent) + " > " + name(el));
        if (sticking.length === 3) break;
      }
    }
    overflow = `${root.scrollWidth} px wide (${sticking.join(", ") || "?"})`;
  }
  return {busy: false, topbar: !!document.querySelector("header.topbar"), links, texts, overflow};
}"""


def _same_origin_page(url: str, origin: str) -> str:
    """``url`` without its fragment, or "" when the walk must not follow it."""
    parts = urlsplit(url)
    if f"{parts.scheme}://{parts.netloc}" != origin:
        return ""
    if parts.path == SIGN_OUT or parts.path.endswith(DOWNLOAD_SUFFIXES):
        return ""
    return urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))


def problems_of(found: dict[str, Any], viewport: ViewportSize) -> list[str]:
    """What is wrong with a page, from what ``INSPECT_JS`` found on it at ``viewport``."""
    if found["busy"]:
        return [f"htmx still busy after {TIMEOUT_MS} ms"]
    problems = []
    if not found["topbar"]:
        problems.append("no top bar (header.topbar)")
    decimals = long_decimals_in(found["texts"])
    if decimals:
        problems.append(f"numbers with three or more decimals: {', '.join(decimals[:5])}")
    if viewport is NARROW and found["overflow"]:
        problems.append(f"wider than the screen: {found['overflow']}")
    return problems


def inspect(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.evaluate(
        INSPECT_JS,
        {"skipped": sorted(SKIPPED_TAGS), "unitPrice": UNIT_PRICE_CLASS, "timeoutMs": TIMEOUT_MS},
    )
    return found


class Walk:
    """One persona's walk in one browser context (``problems`` holds all it found, ``checked``
    the pages, as paths, it checked)."""

    def __init__(self, context: BrowserContext, origin: str) -> None:
        self.origin = origin
        self.csp_violations = watch_for_csp_violations(context)
        # A page per screen size, each keeping its size: resizing one page would lay out (and
        # redraw the charts of) the page it holds, only to leave it.
        self.pages: list[tuple[ViewportSize, Page]] = []
        for viewport in (NARROW, WIDE):
            page = context.new_page()
            page.set_viewport_size(viewport)
            page.on("pageerror", lambda error: self.report(f"JavaScript error: {error}"))
            page.on("console", self._console)
            page.on("response", self._response)
            self.pages.append((viewport, page))
        self.problems: list[str] = []
        self.checked: set[str] = set()
        self.where = "signing in"

    def report(self, problem: str) -> None:
        self.problems.append(f"{self.where}: {problem}")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.report(f"console error: {message.text}")

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.report(f"{response.status} for {self.path(response.url)}")

    def path(self, url: str) -> str:
        return url.removeprefix(self.origin) or "/"

    def run(self, start: str) -> None:
        """Follow every link of the top bar and the tab bars once, breadth first, from
        ``start``."""
        queue = [_same_origin_page(start, self.origin)]
        linked = set(queue)
        while queue:
            for link in self.visit(queue.pop(0)):
                if link not in linked:
                    linked.add(link)
                    queue.append(link)

    def visit(self, url: str) -> list[str]:
        """Check the page at ``url`` narrow, then wide; return the links it offers."""
        links: list[str] = []
        if self.path(url) in self.checked:
            return links
        for viewport, page in self.pages:
            self.where = f"{self.path(url)} at {viewport['width']} px"
            violations = len(self.csp_violations)
            page.goto(url, wait_until="load")
            landed = self.path(page.url.partition("#")[0])
            if landed != self.path(url):
                # A redirect (home to the landing page, the switcher to a tenant's page): the
                # page it ends on is checked as a page of its own, once.
                self.where = f"{landed} (from {self.path(url)}) at {viewport['width']} px"
                if landed in self.checked:
                    return []
            found = inspect(page)
            for problem in problems_of(found, viewport):
                self.report(problem)
            for violation in self.csp_violations[violations:]:
                self.report(f"Content-Security-Policy violation: {violation}")
            links = [_same_origin_page(link, self.origin) for link in found.get("links", [])]
        self.checked.add(landed)
        return [link for link in links if link]


BROKEN_PAGE = """<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width">
</head><body><nav class="tabs"><a href="/t/alpha/usage/#top">Usage</a>
<a href="/report.csv">CSV</a><a href="/export/" download>Export</a></nav>
<p>quota 3.0286 GPUs</p><p class="unit-price">2.1234 EUR</p><code>1.23456</code>
<p hidden>4.56789</p><style>#wide { width: 500px; }</style>
<div id="wide"><table class="grid"><tr><td>1,234.56 EUR</td></tr></table></div>
</body></html>"""


def test_it_sees_what_is_wrong_with_a_page(page: Page, live_server: Any) -> None:
    """The walk's eyes on a page with every fault it looks for (and things that are fine)."""
    # Served at the portal's origin (so its links resolve there) but by the test, without the
    # portal's Content-Security-Policy, which would refuse the <style> that makes it too wide.
    page.route("**/walk-self-test/", lambda route: route.fulfill(body=BROKEN_PAGE))
    page.set_viewport_size(NARROW)
    page.goto("/walk-self-test/")
    found = inspect(page)
    assert problems_of(found, NARROW) == [
        "no top bar (header.topbar)",
        "numbers with three or more decimals: 3.0286",
        "wider than the screen: 508 px wide (body > div#wide)",
    ]
    assert problems_of(found, WIDE) == problems_of(found, NARROW)[:2]
    links = [_same_origin_page(link, live_server.url) for link in found["links"]]
    assert links == [f"{live_server.url}/t/alpha/usage/", ""]


@pytest.fixture
def fleet_seen(start_fleet: Callable[..., Simulator]) -> None:
    """The demo fleet (nodes, GPUs, queues) as the portal's sync last read it."""
    start_fleet()
    fleet.sync_all()


@pytest.mark.parametrize("persona", list(PERSONAS))
def test_persona_walk_finds_no_broken_page(
    persona: str,
    browser: Browser,
    live_server: Any,
    transactional_db: None,
    odd_amounts: dict[str, int],
    fleet_seen: None,
    sign_in: Callable[[Page, str], None],
) -> None:
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        walk = Walk(context, live_server.url)
        page = walk.pages[0][1]
        sign_in(page, persona)
        walk.run(page.url)
    finally:
        context.close()
    # A walk that stopped early would find nothing wrong; these pages lie at its far end.
    assert REACHES[persona] <= walk.checked, (
        f"{persona} never reached {REACHES[persona] - walk.checked}"
    )
    if walk.problems:
        found = "\n".join(walk.problems)
        pytest.fail(f"{persona} ({PERSONAS[persona]}) found:\n{found}", pytrace=False)
