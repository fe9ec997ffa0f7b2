"""The API docs page in a real browser: Swagger UI renders the portal's operations under the
portal's Content-Security-Policy, with no violation and no JavaScript error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import TIMEOUT_MS, watch_for_console_errors, watch_for_csp_violations

# The browser fixtures, re-exported so pytest finds them here (tests/browser is a sibling).
from tests.browser.conftest import browser as browser
from tests.browser.conftest import sign_in as sign_in

pytestmark = pytest.mark.browser


@pytest.fixture
def docs_page(
    browser: Browser, live_server: Any, transactional_db: None
) -> Iterator[tuple[Page, list[str], list[str]]]:
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    violations = watch_for_csp_violations(context)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    console = watch_for_console_errors(page)
    try:
        yield page, violations, errors
    finally:
        context.close()
    assert not console, f"Console errors: {console}"


def test_it_renders_the_operations_under_the_csp(
    docs_page: tuple[Page, list[str], list[str]],
    world: Any,
    sign_in: Any,
) -> None:
    page, violations, errors = docs_page
    sign_in(page, "bob")
    page.goto("/api/v1/docs/")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    expect(page.get_by_text("/api/v1/requests/{id}/approve/")).to_be_visible()
    # In the portal's layout: its header, nav and sign-out stay on the page.
    expect(page.locator("header.topbar .brand")).to_have_text("AI factory")
    expect(page.locator("header.topbar").get_by_role("link", name="Changes")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page).to_have_title("API docs · AI factory")
    assert not errors, errors
    assert not violations, violations
