"""A tenant's gateway key (issue 9, finding 9): made, rotated and revoked by the tenant's
admins, written into the tenant's namespace through the Kubernetes API (here the
simulator over HTTP), shown once and stored only as a digest."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from catalog.keys import do_revoke_gateway_key, do_rotate_gateway_key
from catalog.models import GatewayKey
from portal.models import AuditEvent


def _secret(sim: Any) -> dict[str, str]:
    secret = sim.get_object("secrets", "alpha", "gateway-api-key")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


@pytest.fixture
def namespaced(start_fleet: Callable[..., Any]) -> Any:
    sim = start_fleet()
    sim.put_object("namespaces", {"metadata": {"name": "alpha"}})
    return sim


@pytest.mark.django_db
def test_an_admin_rotates_and_revokes_the_key(namespaced: Any, world: dict[str, Any]) -> None:
    first = do_rotate_gateway_key(world["alpha"], acting_user=world["alice"])
    assert _secret(namespaced) == {"alpha": first}
    stored = GatewayKey.objects.get(tenant=world["alpha"])
    assert stored.digest == hashlib.sha256(first.encode()).hexdigest()
    assert first.startswith(stored.prefix) and first not in str(stored.__dict__)
    second = do_rotate_gateway_key(world["alpha"], acting_user=world["alice"])
    assert second != first and _secret(namespaced) == {"alpha": second}
    do_revoke_gateway_key(world["alpha"], acting_user=world["alice"])
    assert not GatewayKey.objects.filter(tenant=world["alpha"]).exists()
    with pytest.raises(LookupError):
        namespaced.get_object("secrets", "alpha", "gateway-api-key")
    actions = list(
        AuditEvent.objects.filter(tenant_slug="alpha", action__startswith="gateway_key.")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["gateway_key.create", "gateway_key.rotate", "gateway_key.revoke"]


@pytest.mark.django_db
def test_members_cannot_touch_the_key_and_nothing_changes(
    namespaced: Any, world: dict[str, Any]
) -> None:
    with pytest.raises(PermissionDenied):
        do_rotate_gateway_key(world["alpha"], acting_user=world["bob"])
    assert not GatewayKey.objects.exists()


@pytest.mark.django_db
def test_a_refused_secret_keeps_the_old_key(
    start_fleet: Callable[..., Any], world: dict[str, Any]
) -> None:
    start_fleet()  # no alpha namespace: the API server answers 404
    with pytest.raises(ValidationError, match="old one still works"):
        do_rotate_gateway_key(world["alpha"], acting_user=world["alice"])
    assert not GatewayKey.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="gateway_key.").exists()


@pytest.mark.django_db
def test_the_page_shows_a_new_key_once(namespaced: Any, world: dict[str, Any]) -> None:
    admin = Client()
    admin.force_login(world["alice"])
    page = admin.post("/t/alpha/gateway-key/", {"action": "rotate"})
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    key = _secret(namespaced)["alpha"]
    assert key in page.content.decode()
    again = admin.get("/t/alpha/gateway-key/").content.decode()
    assert key not in again and key[:12] in again
    member = Client()
    member.force_login(world["bob"])
    assert member.get("/t/alpha/gateway-key/").status_code == 200
    assert member.post("/t/alpha/gateway-key/", {"action": "rotate"}).status_code == 403
    outsider = Client()
    outsider.force_login(world["charlie"])  # bravo's admin
    assert outsider.get("/t/alpha/gateway-key/").status_code == 404
    assert outsider.post("/t/alpha/gateway-key/", {"action": "revoke"}).status_code == 404
    assert admin.post("/t/alpha/gateway-key/", {"action": "nope"}).status_code == 400
