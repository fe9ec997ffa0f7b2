"""docs/screenshots.py's browser parts against the live server: signing in through the form,
and the watch that fails a picture on a JavaScript error, a console error, a failed response or
a Content-Security-Policy violation. (Its demo parts are in tests/portal/test_screenshots.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext

from docs.screenshots import PageWatch, ScreenshotError, sign_in
from tests.browser.conftest import TIMEOUT_MS
from tests.conftest import PASSWORD

pytestmark = pytest.mark.browser


@pytest.fixture
def context(browser: Browser, live_server: Any, transactional_db: None) -> Iterator[BrowserContext]:
    """A fresh context without the ``page`` fixture's own checks: these tests make the errors."""
    made = browser.new_context(viewport={"width": 1440, "height": 900})
    made.set_default_timeout(TIMEOUT_MS)
    try:
        yield made
    finally:
        made.close()


def test_signing_in_returns_where_it_lands(
    context: BrowserContext, live_server: Any, world: dict[str, Any]
) -> None:
    page = context.new_page()
    assert sign_in(page, live_server.url, "bob", PASSWORD) == "/t/alpha/usage/"
    context.clear_cookies()
    assert sign_in(page, live_server.url, "pam", PASSWORD) == "/billing/"


def test_a_sign_in_that_does_not_land_fails_saying_why(
    context: BrowserContext, live_server: Any, world: dict[str, Any]
) -> None:
    page = context.new_page()
    with pytest.raises(ScreenshotError, match="signing in as bob did not land") as failure:
        sign_in(page, live_server.url, "bob", "not-the-password")
    assert "/accounts/login/" in str(failure.value)
    assert "password" in str(failure.value)


def test_a_clean_page_passes_the_watch(
    context: BrowserContext, live_server: Any, world: dict[str, Any]
) -> None:
    watch = PageWatch(context)
    sign_in(context.new_page(), live_server.url, "bob", PASSWORD)
    watch.check("bob's landing")


def test_the_watch_fails_on_what_a_picture_would_hide(
    context: BrowserContext, live_server: Any, world: dict[str, Any]
) -> None:
    watch = PageWatch(context)
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    # htmx's report of a request it dropped for a newer one is not a problem.
    page.evaluate("console.error('htmx:sendAbort, ' + document.body)")
    watch.check("the login page")

    with page.expect_event("pageerror"):
        page.evaluate("setTimeout(() => { throw new Error('boom') })")
    with page.expect_console_message():
        page.evaluate("console.error('htmx:responseError, ' + document.body)")
    # The watch hears of a violation through the listener it put in first; this one after it
    # says when the browser has reported it.
    page.evaluate(
        "window.refused = 0;"
        "document.addEventListener('securitypolicyviolation', () => { window.refused += 1 })"
    )
    page.evaluate(
        "const inline = document.createElement('script');"
        "inline.textContent = 'document.title = 1';"
        "document.body.append(inline)"
    )
    page.wait_for_function("() => window.refused > 0")
    page.goto(f"{live_server.url}/no-such-page/")
    with pytest.raises(ScreenshotError) as failure:
        watch.check("the login page")
    said = str(failure.value)
    assert said.startswith("the login page:")
    assert "JavaScript error: boom" in said
    assert "console error: htmx:responseError" in said
    assert "sendAbort" not in said
    assert "CSP violation: script-src-elem refused inline" in said
    assert f"HTTP 404 for {live_server.url}/no-such-page/" in said
