"""Every tenant-scoped URL answers 404 to a non-member, for every method that does something.

The URLs are found by walking the URL configuration, so a new tenant-scoped page is covered
the day it is added, without anyone remembering to list it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tenants.models import Membership


def _tenant_patterns() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
                walk(p.url_patterns, prefix + str(p.pattern), ns)
            elif isinstance(p, URLPattern) and p.name:
                route = prefix + str(p.pattern)
                if "<slug:tenant>" in route:
                    found.append((f"{namespace}{p.name}", route))

    walk(get_resolver().url_patterns, "", "")
    return found


TENANT_PATTERNS = _tenant_patterns()


def _url(route: str, tenant: str, member_id: int, **ids: int) -> str:
    """The route with real ids: a placeholder left in would 404 for the wrong reason."""
    url = "/" + route.replace("<slug:tenant>", tenant).replace("<int:member_id>", str(member_id))
    for name in (
        "request_id",
        "resource_id",
        "endpoint_id",
        "delivery_id",
        "invitation_id",
        "case_id",
    ):
        url = url.replace(f"<int:{name}>", str(ids.get(name, 1)))
    url = url.replace("<str:kind>", "gpu-share").replace("<slug:job>", "train-1")
    url = url.replace("<slug:endpoint>", "chat")
    assert "<" not in url, f"unfilled URL argument in {route}"
    return url


@pytest.fixture
def alpha_ids(world: dict[str, Any]) -> dict[str, int]:
    """A catalog resource, request and webhook of alpha, so their URLs exist for members."""
    from catalog.models import Resource, ResourceRequest

    resource = Resource.objects.create(
        tenant=world["alpha"],
        kind="gpu-share",
        name="train",
        state="active",
        spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 1},
    )
    request = ResourceRequest.objects.create(
        tenant=world["alpha"],
        resource=resource,
        state="submitted",
        spec=resource.spec,
        requested_by=world["bob"],
    )
    from catalog.models import WebhookDelivery, WebhookEndpoint

    endpoint = WebhookEndpoint.objects.create(
        tenant=world["alpha"], url="https://1.1.1.1/hook", secret="whsec_AAAA"
    )
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, message_id="msg_1", body="{}")
    from datetime import timedelta

    from django.utils import timezone

    from tenants.models import Invitation

    invitation = Invitation.objects.create(
        tenant=world["alpha"],
        email="newhire@example.com",
        role="admin",
        expires_at=timezone.now() + timedelta(days=1),
    )
    from catalog.models import BatchJob

    BatchJob.objects.create(
        tenant=world["alpha"],
        name="train-1",
        namespace="alpha",
        kind="Job",
        uid="4b1c8a52-0000-4000-8000-000000000001",
        spec={"name": "train-1"},
        submitted_by=world["bob"],
    )
    from decimal import Decimal

    from billing.models import IdleCase, IdleKind

    case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="tenant-alpha",
        flavor="h200",
        workload="Job/train-1",
        kind=IdleKind.JOB,
        state=IdleCase.State.ACTED,
        utilisation_percent=Decimal("1.00"),
        gpus=Decimal("1"),
        act_after=timezone.now(),
    )
    return {
        "case_id": case.pk,
        "invitation_id": invitation.pk,
        "request_id": request.pk,
        "resource_id": resource.pk,
        "endpoint_id": endpoint.pk,
        "delivery_id": delivery.pk,
    }


def test_it_finds_the_tenant_scoped_urls() -> None:
    names = {name for name, _ in TENANT_PATTERNS}
    assert {"tenants:detail", "tenants:members", "tenants:audit", "tenants:member_role"} <= names


@pytest.mark.parametrize(("name", "route"), TENANT_PATTERNS, ids=[n for n, _ in TENANT_PATTERNS])
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_hides_tenant_from_non_member(
    name: str,
    route: str,
    method: str,
    world: dict[str, Any],
    login: Callable[[str], Client],
    alpha_ids: dict[str, int],
) -> None:
    member = Membership.objects.get(user=world["bob"], tenant=world["alpha"])
    url = _url(route, "alpha", member.pk, **alpha_ids)
    before = Membership.objects.count()
    for outsider in ["charlie", "nora"]:
        response = getattr(login(outsider), method)(url, {"role": "admin", "user": "nora"})
        assert response.status_code == 404, (outsider, url, response.status_code)
    assert Membership.objects.count() == before
    assert Membership.objects.get(pk=member.pk).role == "member"


@pytest.mark.parametrize(("name", "route"), TENANT_PATTERNS, ids=[n for n, _ in TENANT_PATTERNS])
def test_it_sends_anonymous_users_to_sign_in(
    name: str, route: str, world: dict[str, Any], alpha_ids: dict[str, int]
) -> None:
    response = Client().get(_url(route, "alpha", 1, **alpha_ids))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize(("name", "route"), TENANT_PATTERNS, ids=[n for n, _ in TENANT_PATTERNS])
def test_it_answers_404_for_a_tenant_that_does_not_exist(
    name: str, route: str, login: Callable[[str], Client], alpha_ids: dict[str, int]
) -> None:
    # Same answer as for a tenant that exists but is not yours: no probing for names.
    assert login("pam").get(_url(route, "no-such-tenant", 1, **alpha_ids)).status_code == 404


def test_it_keeps_a_member_id_of_another_tenant_out(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    # alice admins alpha; charlie's membership lives in bravo.
    foreign = Membership.objects.get(user=world["charlie"])
    response = login("alice").post(f"/t/alpha/members/{foreign.pk}/role/", {"role": "viewer"})
    assert response.status_code == 404
    assert Membership.objects.get(pk=foreign.pk).role == "admin"
    response = login("alice").post(f"/t/alpha/members/{foreign.pk}/remove/")
    assert response.status_code == 404
    assert Membership.objects.filter(pk=foreign.pk).exists()


def test_it_404s_the_switcher_for_a_foreign_tenant(login: Callable[[str], Client]) -> None:
    assert login("alice").get("/switch/", {"tenant": "bravo"}).status_code == 404
    response = login("alice").get("/switch/", {"tenant": "alpha"})
    assert response.status_code == 302
    assert response["Location"] == "/t/alpha/"


def test_a_member_reaches_the_catalog_pages_the_outsiders_cannot(
    login: Callable[[str], Client], alpha_ids: dict[str, int]
) -> None:
    """The 404s above are about membership, not about URLs that do not resolve."""
    bob = login("bob")
    for route in [
        "t/<slug:tenant>/requests/<int:request_id>/",
        "t/<slug:tenant>/catalog/",
        "t/<slug:tenant>/resources/<int:resource_id>/modify/",
        "t/<slug:tenant>/jobs/",
        "t/<slug:tenant>/jobs/new/",
    ]:
        url = _url(route, "alpha", 0, **alpha_ids)
        assert bob.get(url).status_code == 200, url
