"""Sign-in with OpenID Connect, end to end, against a real provider (tests/oidc/server.mjs).

Nothing is mocked: the portal runs in pytest-django's live server, the provider is npm
oidc-provider in a node subprocess, and a plain HTTP client walks the browser's path through
both, PKCE and all. Needs `make node-deps`; skipped without it unless
PORTAL_TEST_REQUIRE_SERVICES is set.
"""

from __future__ import annotations

import re
import runpy
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.urls import reverse

import portal.settings
from portal.models import AuditEvent
from tenants.models import Membership, PlatformRole, Role, Source, Tenant
from tests.support.oidc import (
    CLIENT_ID,
    CLIENT_SECRET,
    HTTP_TIMEOUT,
    Browser,
    OidcServer,
    run_oidc_server,
)

pytestmark = pytest.mark.services

PROVIDER_ID = "keycloak"

ANN = {
    "email": "ann@example.com",
    "email_verified": True,
    "preferred_username": "ann",
    "name": "Ann Example",
}
OSCAR = {
    "email": "oscar@example.com",
    "email_verified": True,
    "preferred_username": "oscar",
    "name": "Oscar Outsider",
}


@pytest.fixture(scope="module")
def oidc_server(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcServer]:
    # One provider per module: starting node costs about a second. Tests set their own accounts.
    callback = reverse("openid_connect_callback", kwargs={"provider_id": PROVIDER_ID})
    with run_oidc_server(
        redirect_uri=live_server.url + callback, workdir=tmp_path_factory.mktemp("oidc")
    ) as server:
        yield server


@pytest.fixture
def oidc(oidc_server: OidcServer, settings: Any, monkeypatch: pytest.MonkeyPatch) -> OidcServer:
    """Point the portal at the provider the way an operator does: through OIDC_* variables.

    SOCIALACCOUNT_PROVIDERS is built when settings.py is imported, so settings.py is run again
    with the variables set and its results are copied over; the test so covers that code too.
    """
    for name in (
        "OIDC_PROVIDER_ID",
        "OIDC_PROVIDER_NAME",
        "OIDC_SCOPES",
        "OIDC_GROUPS_CLAIM",
        "OIDC_GROUP_PREFIX",
    ):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    for name, value in {
        "OIDC_SERVER_URL": oidc_server.issuer,
        "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    # run_path, not run_module: the module stays as imported, only its code runs again.
    fresh = runpy.run_path(portal.settings.__file__, run_name="portal_settings_from_env")
    for name in ("SOCIALACCOUNT_PROVIDERS", "OIDC_GROUPS_CLAIM", "OIDC_GROUP_PREFIX"):
        setattr(settings, name, fresh[name])
    assert fresh["OIDC_PROVIDER_ID"] == PROVIDER_ID
    oidc_server.set_accounts({})
    return oidc_server


@pytest.fixture
def tenants(transactional_db: None) -> dict[str, Tenant]:
    # transactional_db, not db: the live server's thread must see these rows.
    return {
        slug: Tenant.objects.create(slug=slug, display_name=f"{slug.title()} Team")
        for slug in ("alpha", "bravo", "charlie")
    }


def sign_in(browser: Browser, portal: str, oidc: OidcServer, account: str) -> requests.Response:
    """Sign in from the portal's login page through the provider, as a person would."""
    login_page = browser.get(portal + reverse("account_login"))
    assert login_page.status_code == 200
    provider_login = reverse("openid_connect_login", kwargs={"provider_id": PROVIDER_ID})
    # SOCIALACCOUNT_LOGIN_ON_GET is off: the login page's SSO button is a form that POSTs,
    # with its CSRF token, to the provider login URL.
    assert provider_login in login_page.text, f"no SSO button on the login page:\n{login_page.text}"
    page = browser.submit(login_page, action_contains=provider_login)

    # At the provider: sign in if it asks (a live provider session skips this), then back.
    for _ in range(3):
        if not page.url.startswith(oidc.issuer) or page.status_code != 200:
            break
        page = browser.submit(page, login=account)
    assert page.url.startswith(portal), (
        f"stuck at {page.url} ({page.status_code}):\n{page.text[:2000]}\n{oidc.log()}"
    )
    return page


def sign_out(browser: Browser, portal: str) -> None:
    page = browser.get(portal + reverse("account_logout"))
    page = browser.submit(page, action_contains=reverse("account_logout"))
    assert page.status_code == 200


def _authorize_url(browser: Browser, oidc: OidcServer) -> str:
    hops = browser.visited_on(oidc.issuer, "/auth")
    assert hops, f"never reached the provider: {browser.visited}"
    return hops[0]


def _assert_signed_in(page: requests.Response, username: str, oidc: OidcServer) -> None:
    # Home, or where home sends the person (portal.views.home): a usage or finance page.
    landing = re.compile(r"^/(billing/([a-z-]+/)?|t/[a-z0-9-]+/usage/)?$")
    assert landing.match(urlsplit(page.url).path), (
        f"ended at {page.url}, not the home page or a landing page:\n{page.text[:3000]}\n"
        f"--- provider log\n{oidc.log()}"
    )
    assert page.status_code == 200
    # The header names whoever is signed in.
    assert f"<span>{username}" in page.text


def test_it_creates_the_user_on_first_sign_in_and_maps_groups(
    live_server: Any, oidc: OidcServer, tenants: dict[str, Tenant]
) -> None:
    oidc.set_accounts(
        {
            "sub-ann": {
                **ANN,
                # ghost is not a tenant of this portal: ignored, not created.
                "groups": ["/tenants/alpha/admin", "/platform/finance", "/tenants/ghost/admin"],
            }
        }
    )
    browser = Browser()

    home = sign_in(browser, live_server.url, oidc, "sub-ann")

    _assert_signed_in(home, "ann", oidc)
    assert browser.visited_on(oidc.issuer, "/interaction"), "the provider never asked who it is"
    user = get_user_model().objects.get(username="ann")
    assert user.email == "ann@example.com"
    link = SocialAccount.objects.get(user=user)
    assert (link.provider, link.uid) == (PROVIDER_ID, "sub-ann")
    assert list(
        Membership.objects.filter(user=user).values_list("tenant__slug", "role", "source")
    ) == [("alpha", Role.ADMIN, Source.OIDC)]
    assert list(PlatformRole.objects.filter(user=user).values_list("role", "source")) == [
        (PlatformRole.Name.FINANCE, Source.OIDC)
    ]
    assert not Tenant.objects.filter(slug="ghost").exists()
    listing = browser.get(live_server.url + reverse("tenants:list"))
    assert listing.status_code == 200
    assert "Alpha Team" in listing.text

    # The portal asked with PKCE (S256) ...
    authorize = _authorize_url(browser, oidc)
    query = parse_qs(urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert query["client_id"] == [CLIENT_ID]
    assert "openid" in query["scope"][0].split()
    # ... and the provider refuses the same request without it, so the sign-in above could not
    # have worked had the portal left PKCE out.
    without = {k: v for k, v in query.items() if not k.startswith("code_challenge")}
    refused = requests.get(
        urlunsplit(urlsplit(authorize)._replace(query=urlencode(without, doseq=True))),
        allow_redirects=False,
        timeout=HTTP_TIMEOUT,
    )
    assert refused.is_redirect, refused.text
    error = parse_qs(urlsplit(refused.headers["Location"]).query)
    assert error["error"] == ["invalid_request"]
    assert "PKCE" in error["error_description"][0]


def test_it_resyncs_groups_on_the_next_sign_in_and_keeps_local_grants(
    live_server: Any, oidc: OidcServer, tenants: dict[str, Tenant]
) -> None:
    oidc.set_accounts({"sub-ann": {**ANN, "groups": ["/tenants/alpha/admin", "/platform/finance"]}})
    browser = Browser()
    _assert_signed_in(sign_in(browser, live_server.url, oidc, "sub-ann"), "ann", oidc)
    user = get_user_model().objects.get(username="ann")
    # Granted in the portal by an admin; the identity provider knows nothing of it.
    Membership.objects.create(user=user, tenant=tenants["charlie"], role=Role.MEMBER)
    sign_out(browser, live_server.url)
    assert urlsplit(browser.get(live_server.url + "/").url).path == reverse("account_login")

    # The IdP admin moves ann from alpha to bravo and takes finance away.
    oidc.set_groups("sub-ann", ["/tenants/bravo/viewer"])
    browser.visited.clear()
    home = sign_in(browser, live_server.url, oidc, "sub-ann")

    _assert_signed_in(home, "ann", oidc)
    # The provider session was still alive, so no login form: the sync must not depend on one.
    assert not browser.visited_on(oidc.issuer, "/interaction"), browser.visited
    assert get_user_model().objects.filter(username="ann").count() == 1
    assert sorted(
        Membership.objects.filter(user=user).values_list("tenant__slug", "role", "source")
    ) == [("bravo", Role.VIEWER, Source.OIDC), ("charlie", Role.MEMBER, Source.LOCAL)]
    assert not PlatformRole.objects.filter(user=user).exists()
    audit = set(AuditEvent.objects.values_list("action", "tenant_slug"))
    assert {
        ("membership.create", "alpha"),
        ("membership.sync_remove", "alpha"),
        ("membership.create", "bravo"),
    } <= audit
    assert ("membership.sync_remove", "charlie") not in audit
    assert AuditEvent.objects.filter(action="platform_role.sync_remove", actor=user).exists()
    assert browser.get(live_server.url + "/t/alpha/").status_code == 404
    assert browser.get(live_server.url + "/t/bravo/").status_code == 200


def test_it_hides_other_tenants_from_an_sso_user(
    live_server: Any, oidc: OidcServer, tenants: dict[str, Tenant]
) -> None:
    oidc.set_accounts({"sub-oscar": {**OSCAR, "groups": ["/tenants/alpha/viewer"]}})
    browser = Browser()

    _assert_signed_in(sign_in(browser, live_server.url, oidc, "sub-oscar"), "oscar", oidc)

    assert browser.get(live_server.url + "/t/alpha/").status_code == 200
    assert browser.get(live_server.url + "/t/bravo/").status_code == 404
    assert browser.get(live_server.url + "/t/ghost/").status_code == 404
    listing = browser.get(live_server.url + reverse("tenants:list"))
    assert "Alpha Team" in listing.text
    assert "Bravo Team" not in listing.text
