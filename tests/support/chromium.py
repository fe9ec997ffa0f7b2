"""Debian's Chromium under Playwright: how it is launched and how a page's Content-Security-Policy
violations reach Python. Shared by the browser tests and docs/screenshots.py, so the pictures in
the guides are taken by the same browser, under the same checks, as the tests."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from playwright.sync_api import BrowserContext, ConsoleMessage, Page

# Debian's own package (`make system-deps`), never one fetched by `playwright install`: browser
# downloads are not possible where the suite runs.
CHROMIUM = Path("/usr/bin/chromium")
# Root in a container needs --no-sandbox; the rest keep Chromium from reaching for a network
# that is closed here (updates, sync, QUIC probes) and for a GPU the test runner lacks.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# The browser fires securitypolicyviolation at the document for everything the
# Content-Security-Policy refuses (an inline script or handler, a style, eval); Chromium only
# logs it to its own console, which Playwright does not relay, so hand it to Python.
_REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__reportCspViolation(
    `${event.effectiveDirective} refused ${event.blockedURI || "inline"} ` +
    `at ${event.sourceFile || document.location.href}:${event.lineNumber}`
  );
});
"""


def watch_for_csp_violations(context: BrowserContext) -> list[str]:
    """Collect the Content-Security-Policy violations of every page in ``context``."""
    violations: list[str] = []

    def report(violation: str) -> None:
        violations.append(violation)

    context.expose_function("__reportCspViolation", report)
    context.add_init_script(_REPORT_CSP_VIOLATIONS)
    return violations


# The console lines of a response with an error status: Chromium's, for a page or an XHR
# alike, and htmx's for a response it does not swap (base.html's responseHandling).
_FAILED_RESPONSE = re.compile(
    r"^(?:Failed to load resource: the server responded with a status of"
    r"|Response Status Error Code) (\d{3})\b"
)
# The console lines of a request that got no response at all: Chromium's (net::ERR_FAILED and
# the like) and htmx's events for it.
_NO_RESPONSE = re.compile(
    r"^(?:Failed to load resource: net::|htmx:sendError\b|htmx:afterRequest\b)"
)
NETWORK = "network"


def watch_for_console_errors(page: Page, expected: Collection[int | str] = ()) -> list[str]:
    """Collect the console errors of ``page``, but for the lines of a response whose status is
    in ``expected``, and of a request that got no response when ``expected`` holds
    ``NETWORK`` (see the ``page`` fixture in tests/browser/conftest.py)."""
    errors: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        failed = _FAILED_RESPONSE.match(message.text)
        if failed and int(failed.group(1)) in expected:
            return
        if NETWORK in expected and _NO_RESPONSE.match(message.text):
            return
        where = message.location.get("url", "")
        errors.append(f"{message.text} ({where})" if where else message.text)

    page.on("console", seen)
    return errors
