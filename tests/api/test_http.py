"""The HTTP contract: ETags (304, 412), pagination, problem details for bad input with
nothing written, the body size limit, and the docs page under the portal's CSP."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog.models import RequestEvent, ResourceRequest
from portal.models import AuditEvent
from tenants.models import Membership, Tenant

pytestmark = pytest.mark.django_db
JSON = "application/json"


def test_it_answers_304_when_the_etag_matches(world: Any, api: Callable, token: Callable) -> None:
    client = api(token("alice", "read"))
    first = client.get("/api/v1/tenants/alpha/")
    tag = first["ETag"]
    assert first.status_code == 200 and tag.startswith('"')
    again = client.get("/api/v1/tenants/alpha/", HTTP_IF_NONE_MATCH=tag)
    assert again.status_code == 304 and again["ETag"] == tag and not again.content
    Tenant.objects.filter(slug="alpha").update(display_name="Alpha Renamed")
    changed = client.get("/api/v1/tenants/alpha/", HTTP_IF_NONE_MATCH=tag)
    assert changed.status_code == 200 and changed["ETag"] != tag


def test_it_refuses_a_write_on_a_stale_etag(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    bob = api(token("bob", "request"))
    url = f"/api/v1/requests/{waiting.pk}/"
    tag = bob.get(url)["ETag"]
    ResourceRequest.objects.filter(pk=waiting.pk).update(reason="edited elsewhere")
    events = RequestEvent.objects.count()
    stale = bob.post(url + "cancel/", {}, content_type=JSON, HTTP_IF_MATCH=tag)
    assert stale.status_code == 412
    assert stale["Content-Type"] == "application/problem+json"
    waiting.refresh_from_db()
    assert waiting.state == "submitted" and RequestEvent.objects.count() == events
    fresh = bob.get(url)["ETag"]
    done = bob.post(url + "cancel/", {}, content_type=JSON, HTTP_IF_MATCH=fresh)
    assert done.status_code == 200 and done.json()["state"] == "cancelled"
    assert done["ETag"] != fresh


def test_a_member_role_change_honours_if_match(world: Any, api: Callable, token: Callable) -> None:
    alice = api(token("alice", "admin"))
    url = "/api/v1/tenants/alpha/members/vic/"
    tag = alice.get(url)["ETag"]
    assert (
        alice.patch(url, {"role": "member"}, content_type=JSON, HTTP_IF_MATCH='"other"').status_code
        == 412
    )
    assert Membership.objects.get(user=world["vic"]).role == "viewer"
    assert (
        alice.patch(url, {"role": "member"}, content_type=JSON, HTTP_IF_MATCH=tag).status_code
        == 200
    )


def test_it_paginates_with_a_default_and_a_maximum(
    world: Any, make_user: Callable, api: Callable, token: Callable
) -> None:
    for n in range(3):
        Membership.objects.create(user=make_user(f"extra{n}"), tenant=world["alpha"], role="viewer")
    client = api(token("alice", "read"))
    page = client.get("/api/v1/tenants/alpha/members/?page_size=2").json()
    assert page["count"] == 6 and len(page["results"]) == 2 and page["next"]
    last = client.get("/api/v1/tenants/alpha/members/?page_size=2&page=3").json()
    assert len(last["results"]) == 2 and last["next"] is None
    assert client.get("/api/v1/tenants/alpha/members/?page=99").status_code == 404
    capped = client.get("/api/v1/tenants/alpha/members/?page_size=100000").json()
    assert len(capped["results"]) == 6


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"note": ', ""),  # malformed JSON
        ('{"note": 5, "allow_overcommit": "maybe"}', "allow_overcommit"),  # wrong type
        ('{"note": "ok", "alow_overcommit": true}', "alow_overcommit"),  # unknown field
        ("[1, 2]", ""),  # not an object
    ],
)
def test_bad_input_is_a_problem_and_writes_nothing(
    waiting: ResourceRequest, api: Callable, token: Callable, body: str, field: str
) -> None:
    pam = api(token("pam", "admin"))
    before = (AuditEvent.objects.count(), RequestEvent.objects.count())
    response = pam.post(f"/api/v1/requests/{waiting.pk}/approve/", body, content_type=JSON)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 400 and problem["title"] and problem["detail"]
    if field:
        assert field in problem["errors"]
    waiting.refresh_from_db()
    assert waiting.state == "submitted"
    assert (AuditEvent.objects.count(), RequestEvent.objects.count()) == before


def test_an_unknown_field_on_a_member_is_refused(
    world: Any, api: Callable, token: Callable
) -> None:
    response = api(token("alice", "admin")).patch(
        "/api/v1/tenants/alpha/members/vic/", {"role": "member", "admin": True}, content_type=JSON
    )
    assert response.status_code == 400 and "admin" in response.json()["errors"]
    assert Membership.objects.get(user=world["vic"]).role == "viewer"


def test_a_body_of_the_wrong_media_type_is_415(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    response = api(token("bob", "request")).post(
        f"/api/v1/requests/{waiting.pk}/cancel/", "note=x", content_type="text/plain"
    )
    assert response.status_code == 415 and response.json()["status"] == 415


def test_an_oversized_body_is_413_not_500(
    waiting: ResourceRequest, api: Callable, token: Callable, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = '{"note": "' + "x" * 2000 + '"}'
    response = api(token("bob", "request")).post(
        f"/api/v1/requests/{waiting.pk}/cancel/", body, content_type=JSON
    )
    assert response.status_code == 413
    assert response.json()["title"] == "Request body too large"
    waiting.refresh_from_db()
    assert waiting.state == "submitted"


def test_the_docs_page_loads_under_the_csp(login: Callable) -> None:
    client = login("bob")
    page = client.get("/api/v1/docs/")
    assert page.status_code == 200
    policy = page["Content-Security-Policy"]
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    html = page.content.decode()
    # Nothing inline for the CSP to refuse: every script and style is a file of the portal.
    assert "<script>" not in html.replace(" ", "") and "<style" not in html
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets)
    for asset in assets:
        assert Client().get(asset).status_code == 200, asset
    init = client.get("/api/v1/docs/?script=")
    assert init.status_code == 200 and "SwaggerUIBundle" in init.content.decode()
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200 and "/api/v1/requests/" in schema.json()["paths"]


def test_if_match_compares_strongly(
    waiting: ResourceRequest, api: Callable, token: Callable
) -> None:
    bob = api(token("bob", "request"))
    url = f"/api/v1/requests/{waiting.pk}/"
    tag = bob.get(url)["ETag"]
    assert bob.get(url, HTTP_IF_NONE_MATCH=f"W/{tag}").status_code == 304
    weak = bob.post(url + "cancel/", {}, content_type=JSON, HTTP_IF_MATCH=f"W/{tag}")
    assert weak.status_code == 412
    assert bob.post(url + "cancel/", {}, content_type=JSON, HTTP_IF_MATCH="*").status_code == 200
