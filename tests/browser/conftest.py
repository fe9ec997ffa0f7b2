"""Browser fixtures: headless Debian Chromium, driven by Playwright, against the live server.

The browser is Debian's own package (/usr/bin/chromium, installed by `make system-deps`), never
one fetched by `playwright install`: browser downloads are not possible where the suite runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import PASSWORD
from tests.support import skip_or_fail
from tests.support.chromium import (
    CHROMIUM,
    CHROMIUM_ARGS,
    watch_for_console_errors,
    watch_for_csp_violations,
)

# Long enough for a slow CI runner, short enough that a missing element fails in seconds
# rather than after Playwright's default 30 s.
TIMEOUT_MS = 10_000


def require_chromium() -> None:
    """Skip without Chromium on a developer's machine; fail in CI, where it must be installed."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        skip_or_fail(
            f"{CHROMIUM} is not installed (apt-get install chromium, or `make system-deps`)"
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium per test module.

    Playwright's sync API runs an asyncio event loop in this thread, and the loop counts as
    running from ``start()`` until ``stop()``. Django then refuses every ORM call made in this
    thread (fixtures building the personas, the DB checks in the tests, the transactional_db
    flush on teardown) with SynchronousOnlyOperation, although nothing here is actually async.
    DJANGO_ALLOW_ASYNC_UNSAFE turns that check off, so we set it exactly for the lifetime of the
    loop and restore it afterwards. That is also why the scope is the module and not the session:
    a session-wide loop would outlive tests/browser and leave every later test in the run
    (tests/portal, tests/tenants) inside a "running" loop, needing the override too.
    """
    require_chromium()
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def expected_statuses(request: pytest.FixtureRequest) -> set[int | str]:
    """What a test declared with ``@pytest.mark.expected_responses(...)``: HTTP statuses, and
    ``"network"`` for requests it makes fail without a response."""
    marker = request.node.get_closest_marker("expected_responses")
    return set(marker.args) if marker else set()


@pytest.fixture
def page(
    browser: Browser, live_server: Any, transactional_db: None, request: pytest.FixtureRequest
) -> Iterator[Page]:
    """A page in a fresh context (no cookies, no storage) whose relative URLs hit the live server.

    transactional_db: the live server answers from its own thread and connection, so it only
    sees rows the test has committed, and the test only sees what the server committed.

    The test fails on a JavaScript error, a Content-Security-Policy violation, or any console
    message of type "error": htmx logs there what went wrong (a swap target missing, a request
    failing, a request aborted), and a script's ``console.error`` is a bug too. One kind of
    console error can be expected: for every response with an error status Chromium logs
    "Failed to load resource: the server responded with a status of 422", and htmx "Response
    Status Error Code 400 from ..." for one it does not swap. A test that provokes such
    responses on purpose (a 403 page, a 404 for an outsider, a form answered with its errors)
    declares their statuses, ``@pytest.mark.expected_responses(403, 422)``, and a test that
    cuts requests off (``route.abort()``, a poll that must fail) declares ``"network"``; any
    other status, and every other console error, still fails it.
    """
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    expect.set_options(timeout=TIMEOUT_MS)
    violations = watch_for_csp_violations(context)
    page = context.new_page()
    # A JavaScript error (htmx failing to load or to parse a response) would otherwise only
    # show up as a confusing timeout further down; collect them and fail the test on any.
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    console = watch_for_console_errors(page, expected_statuses(request))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"
    # Every browser test doubles as a check of the policy against what the page really does.
    assert not violations, f"Content-Security-Policy violations: {violations}"
    assert not console, (
        f"Console errors in the page: {console}. Fix their cause; for an error status the test "
        "provokes on purpose, declare it: @pytest.mark.expected_responses(<status>)."
    )


@pytest.fixture
def sign_in(live_server: Any) -> Callable[[Page, str], None]:
    """Sign in through allauth's real login form, as a person would, and land where the home
    page sends them: the usage dashboard of a platform admin or of a member's tenant, finance's
    page, else home itself."""

    def submit(page: Page, username: str) -> None:
        page.goto("/accounts/login/")
        page.locator("input[name=login]").fill(username)
        page.locator("input[name=password]").fill(PASSWORD)
        page.locator("form[action='/accounts/login/'] button[type=submit]").click()
        landing = r"/(billing/(finance/)?|t/[a-z0-9-]+/usage/)?$"
        expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}{landing}"))

    return submit
