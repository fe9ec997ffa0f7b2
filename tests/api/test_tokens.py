"""Tokens: the bearer door (401 for unknown, expired, revoked), the use log, the pages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.utils import timezone

from api.models import ApiToken, Robot, TokenUse
from api.tokens import do_create_robot, do_create_token, do_revoke_token, find_token
from portal.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_it_stores_only_a_hash(world: Any, token: Callable) -> None:
    text = token("bob", "read")
    assert text.startswith("afp_") and len(text.split("_", 2)[2]) >= 43
    stored = ApiToken.objects.get()
    assert text not in (stored.digest, stored.prefix) and stored.prefix in text
    assert find_token(text) == stored
    assert find_token(text[:-1] + ("A" if text[-1] != "A" else "B")) is None


def test_scopes_include_the_ones_before(world: Any, token: Callable) -> None:
    token("bob", "request")
    stored = ApiToken.objects.get()
    assert stored.allows("read") and stored.allows("request") and not stored.allows("admin")
    assert not stored.allows("nonsense")


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("Bearer afp_deadbeef_nothing", "not valid"),
        ("Bearer", "must be"),
        ("Bearer a b", "must be"),
    ],
)
def test_it_refuses_an_unknown_token_with_401(world: Any, header: str, why: str) -> None:
    response = Client(HTTP_AUTHORIZATION=header).get("/api/v1/tenants/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert why in response.json()["detail"]


def test_it_refuses_an_expired_token(world: Any, token: Callable, api: Callable) -> None:
    text = token("bob", "read")
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = api(text).get("/api/v1/tenants/")
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_a_revoked_token_is_refused_and_its_reuse_logged(
    world: Any, token: Callable, api: Callable
) -> None:
    text = token("bob", "read")
    assert api(text).get("/api/v1/tenants/").status_code == 200
    do_revoke_token(ApiToken.objects.get(), acting_user=world["bob"])
    response = api(text).get("/api/v1/tenants/")
    assert response.status_code == 401 and "revoked" in response.json()["detail"]
    assert list(TokenUse.objects.order_by("at", "id").values_list("status", flat=True)) == [
        200,
        401,
    ]
    assert AuditEvent.objects.filter(action="api_token.revoke").count() == 1


def test_every_call_is_logged_with_its_status_and_address(
    world: Any, token: Callable, api: Callable
) -> None:
    text = token("charlie", "read")
    api(text).get("/api/v1/tenants/alpha/")
    use = TokenUse.objects.get()
    assert (use.method, use.path, use.status, use.ip) == (
        "GET",
        "/api/v1/tenants/alpha/",
        404,
        "127.0.0.1",
    )
    stored = ApiToken.objects.get()
    assert stored.last_used_at is not None and stored.last_used_ip == "127.0.0.1"


def test_it_checks_a_new_tokens_fields_and_writes_nothing_on_error(world: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        do_create_token(
            acting_user=world["bob"], owner=world["bob"], name="", scope="root", expires_in_days=999
        )
    assert set(caught.value.message_dict) == {"name", "scope", "expires_in_days"}
    assert ApiToken.objects.count() == 0


def test_nobody_makes_tokens_for_someone_else(world: Any) -> None:
    with pytest.raises(PermissionDenied):
        do_create_token(
            acting_user=world["pam"], owner=world["bob"], name="x", scope="read", expires_in_days=1
        )
    assert ApiToken.objects.count() == 0


def test_only_tenant_admins_make_robots_never_admin_ones(world: Any) -> None:
    with pytest.raises(PermissionDenied):
        do_create_robot(world["alpha"], acting_user=world["bob"], name="ci", role="member")
    with pytest.raises(ValidationError):
        do_create_robot(world["alpha"], acting_user=world["alice"], name="ci", role="admin")
    assert Robot.objects.count() == 0
    robot = do_create_robot(world["alpha"], acting_user=world["alice"], name="ci", role="viewer")
    assert not robot.user.has_usable_password()
    assert robot.user.memberships.get().role == "viewer"
    with pytest.raises(PermissionDenied):
        do_create_token(
            acting_user=world["charlie"],
            owner=robot.user,
            name="x",
            scope="read",
            expires_in_days=1,
        )


def test_a_robot_cannot_sign_in_to_pages(world: Any) -> None:
    robot = do_create_robot(world["alpha"], acting_user=world["alice"], name="ci", role="member")
    assert not Client().login(username=robot.user.username, password="")


def test_the_tokens_page_shows_the_secret_once(login: Callable) -> None:
    client = login("bob")
    made = client.post("/api/tokens/", {"name": "laptop", "scope": "read", "expires_in_days": 30})
    assert made.status_code == 200 and made["Cache-Control"] == "no-store"
    text = made.context["new_token"]
    assert text and text in made.content.decode()
    again = client.get("/api/tokens/")
    assert text not in again.content.decode() and "laptop" in again.content.decode()
    prefix = ApiToken.objects.get().prefix
    client.post(f"/api/tokens/{prefix}/")
    assert ApiToken.objects.get().revoked
    assert login("alice").get(f"/api/tokens/{prefix}/").status_code == 404


def test_the_robots_page_is_for_tenant_admins(login: Callable) -> None:
    assert login("charlie").get("/t/alpha/robots/").status_code == 404
    assert login("charlie").post("/t/alpha/robots/", {"action": "robot"}).status_code == 404
    assert login("bob").get("/t/alpha/robots/").status_code == 403
    alice = login("alice")
    alice.post("/t/alpha/robots/", {"action": "robot", "name": "deploy", "role": "member"})
    made = alice.post(
        "/t/alpha/robots/",
        {
            "action": "token",
            "robot": "deploy",
            "name": "ci",
            "scope": "request",
            "expires_in_days": 7,
        },
    )
    assert made.context["new_token"].startswith("afp_")
    assert ApiToken.objects.get().user.username == "robot.alpha.deploy"
    alice.post("/t/alpha/robots/", {"action": "remove", "robot": "deploy"})
    assert Robot.objects.count() == 0 and ApiToken.objects.get().revoked


def test_the_use_log_is_append_only(world: Any, token: Callable, api: Callable) -> None:
    api(token("bob", "read")).get("/api/v1/tenants/")
    use = TokenUse.objects.get()
    use.status = 500
    with pytest.raises(ValidationError):
        use.save()
    assert TokenUse.objects.get().status == 200


def test_the_robots_page_shows_a_refused_name_and_writes_nothing(login: Callable) -> None:
    response = login("alice").post(
        "/t/alpha/robots/", {"action": "robot", "name": "Not_A_Label", "role": "member"}
    )
    assert response.status_code == 200
    assert response.context["robot_form"].errors["name"]
    assert Robot.objects.count() == 0
    refused = login("alice").post(
        "/t/alpha/robots/", {"action": "robot", "name": "ci", "role": "admin"}
    )
    assert refused.context["robot_form"].errors["role"]
    assert Robot.objects.count() == 0
