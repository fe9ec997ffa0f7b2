"""Debian's Chromium under Playwright: how it is launched and how a page's Content-Security-Policy
violations reach Python. Shared by the browser tests and docs/screenshots.py, so the pictures in
the guides are taken by the same browser, under the same checks, as the tests."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import BrowserContext

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
