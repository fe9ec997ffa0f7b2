"""What tenant people see in a real browser: signing in, switching tenant, managing members.

The personas come from tests/conftest.py: alice admins alpha (with bob a member and vic a
viewer), charlie admins bravo, nora belongs nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tenants.models import Membership

pytestmark = pytest.mark.browser

SignIn = Callable[[Page, str], None]

# Builds and submits an ordinary (non-htmx) POST form with the page's CSRF token, like a form
# left open in a tab from before the user lost the right to use it.
POST_FORM = """({action, ...fields}) => {
    const form = document.createElement("form");
    form.method = "post";
    form.action = action;
    const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
    for (const [name, value] of Object.entries({csrfmiddlewaretoken: token, ...fields})) {
        const input = document.createElement("input");
        input.type = "hidden";
        input.name = name;
        input.value = value;
        form.append(input);
    }
    document.body.append(form);
    form.submit();
}"""


def _wait_for_htmx(page: Page) -> None:
    """Wait until htmx has finished the request, the swap and the settle.

    htmx binds the hx-* attributes of swapped-in content only when it settles (20 ms after the
    swap; until then the new nodes carry .htmx-added). A select changed in that gap fires a
    change event nobody listens to yet, so the next step must wait for the settle.
    """
    busy = ".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added"
    page.wait_for_function(f"() => !document.querySelector('{busy}')")


def _path_is(live_server: Any, path: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(live_server.url + path)}$")


@pytest.mark.expected_responses(404)
def test_it_switches_to_own_tenant_and_hides_others(
    page: Page, sign_in: SignIn, live_server: Any, world: dict[str, Any], tmp_path: Path
) -> None:
    sign_in(page, "alice")
    # A member lands on the usage page of their tenant; the switcher works from any page.
    expect(page).to_have_url(_path_is(live_server, "/t/alpha/usage/"))
    expect(page.locator("h1")).to_contain_text("Alpha Team")
    page.goto("/tenants/")
    # The switcher offers only the tenants alice belongs to, not the whole fleet.
    switcher = page.locator("#tenant-switcher")
    expect(switcher.locator("option")).to_have_count(2)
    expect(switcher.locator("option[value=alpha]")).to_have_text("Alpha Team (alpha)")
    expect(switcher.locator("option[value=bravo]")).to_have_count(0)

    # Choosing a tenant submits the switcher form by itself (portal.js), no button involved.
    switcher.select_option("alpha")
    expect(page).to_have_url(_path_is(live_server, "/t/alpha/"))

    expect(page.locator("h1")).to_contain_text("Alpha Team")
    expect(page.locator("dl.facts")).to_contain_text("CC-1")
    cost_centre = page.locator("dl.facts dt", has_text="Cost centre").locator("+ dd")
    expect(cost_centre).to_have_text("CC-1")
    members = page.locator("#tenant-members li")
    expect(members).to_have_text([re.compile(rf"^{n}\b") for n in ["alice", "bob", "vic"]])
    # The switcher remembers where alice is now.
    expect(switcher).to_have_value("alpha")
    expect(switcher.locator("option[value=bravo]")).to_have_count(0)
    assert "Bravo Team" not in page.content()
    assert "bravo" not in page.locator("body").inner_text()

    screenshot = page.screenshot(path=tmp_path / "alpha-overview.png", full_page=True)
    assert screenshot.startswith(b"\x89PNG")

    # Typing another tenant's URL gives the same 404 as a tenant that does not exist.
    response = page.goto("/t/bravo/")
    assert response is not None
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    assert "Bravo Team" not in page.content()


def test_it_lets_a_tenant_admin_manage_members_in_place(
    page: Page, sign_in: SignIn, live_server: Any, world: dict[str, Any]
) -> None:
    sign_in(page, "alice")
    page.goto("/t/alpha/members/")
    members_url = page.url
    # A full navigation would drop this; htmx swaps keep it.
    page.evaluate("window.__noReload = true")
    rows = page.locator("#members tbody tr")
    expect(rows).to_have_count(3)

    page.get_by_label("Username or e-mail").fill("nora")
    page.get_by_label("Role", exact=True).select_option("viewer")
    page.get_by_role("button", name="Add", exact=True).click()

    expect(rows.filter(has_text="nora")).to_have_count(1)
    expect(rows).to_have_count(4)
    expect(page.locator("#messages .flash-success")).to_contain_text(
        "If an account matches 'nora', it now has the viewer role here."
    )
    expect(page.get_by_label("Role of nora")).to_have_value("viewer")
    _wait_for_htmx(page)
    assert page.url == members_url
    assert page.evaluate("window.__noReload") is True
    assert Membership.objects.get(tenant=world["alpha"], user=world["nora"]).role == "viewer"

    # An unknown name gets the answer a real one gets (no probing for accounts); the table
    # stays as it was.
    page.get_by_label("Username or e-mail").fill("ghost")
    page.get_by_role("button", name="Add", exact=True).click()
    expect(page.locator("#messages .flash-success")).to_contain_text(
        "If an account matches 'ghost', it now has the member role here."
    )
    expect(page.locator("#id_user-error")).to_have_count(0)
    _wait_for_htmx(page)
    expect(rows).to_have_count(4)
    assert page.url == members_url
    assert page.evaluate("window.__noReload") is True
    assert Membership.objects.filter(tenant=world["alpha"]).count() == 4

    # Changing a role in its <select> saves on change, again without leaving the page.
    page.get_by_label("Role of vic").select_option("member")
    expect(page.locator("#messages .flash-success")).to_have_text("vic is now member.")
    expect(page.get_by_label("Role of vic")).to_have_value("member")
    _wait_for_htmx(page)
    assert page.url == members_url
    assert page.evaluate("window.__noReload") is True
    assert Membership.objects.get(tenant=world["alpha"], user=world["vic"]).role == "member"


@pytest.mark.expected_responses(403)
def test_it_gives_a_plain_member_a_read_only_members_page(
    page: Page, sign_in: SignIn, world: dict[str, Any]
) -> None:
    sign_in(page, "bob")
    page.goto("/t/alpha/members/")

    rows = page.locator("#members tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text="alice")).to_contain_text("Admin")
    # No controls that would only earn him a 403.
    expect(page.get_by_role("heading", name="Add a member")).to_have_count(0)
    expect(page.get_by_label("Username or e-mail")).to_have_count(0)
    expect(page.locator("#members select")).to_have_count(0)
    expect(page.get_by_role("button", name="Remove")).to_have_count(0)
    expect(page.locator("nav.tabs a")).to_have_text(
        [
            "Overview",
            "Catalog",
            "Requests",
            "Members",
            "Jobs",
            "Status",
            "Queue",
            "Usage & cost",
            "Idle GPUs",
            "Invoices",
            "Budget",
            "Webhooks",  # members read the delivery log; only admins change it
        ]
    )

    # A stale or hand-made form still reaches the server: bob gets a page that says why.
    with page.expect_navigation() as navigation:
        page.evaluate(POST_FORM, {"action": "/t/alpha/members/", "user": "nora", "role": "admin"})
    assert navigation.value is not None
    assert navigation.value.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")
    expect(page.locator("main")).to_contain_text(
        "Only an admin of this tenant can manage its members."
    )
    assert not Membership.objects.filter(user=world["nora"]).exists()
