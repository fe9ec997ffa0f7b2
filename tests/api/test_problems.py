"""The API's error shape (RFC 9457) and its door: signed in, scopes before the view."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions

from api.permissions import ScopedAccess, scope_needed, token_allows
from api.problems import MEDIA_TYPE, exception_handler, flatten


def test_it_flattens_nested_errors_to_dotted_paths() -> None:
    detail = {"spec": {"gpus": ["Too many."], "tags": [{}, {"name": ["Bad name."]}]}, "x": "No."}
    assert flatten(detail) == {
        "spec.gpus": ["Too many."],
        "spec.tags[1].name": ["Bad name."],
        "x": ["No."],
    }


def test_it_turns_a_validation_error_into_problem_details() -> None:
    response = exception_handler(exceptions.ValidationError({"name": ["Required."]}), {})
    assert response is not None
    assert response.status_code == 400
    assert response.content_type == MEDIA_TYPE
    assert response.data["title"] == "Bad request"
    assert response.data["detail"] == "name: Required."
    assert response.data["errors"] == {"name": ["Required."]}
    assert response.data["type"].endswith("/invalid-input")


def test_it_answers_a_service_refusal_as_4xx_not_500() -> None:
    refused = exception_handler(PermissionDenied("Only tenant admins may do that."), {})
    assert refused is not None and refused.status_code == 403
    assert refused.data["detail"] == "Only tenant admins may do that."
    invalid = exception_handler(DjangoValidationError({"gpus": ["At most 8."]}), {})
    assert invalid is not None and invalid.status_code == 400
    assert invalid.data["errors"] == {"gpus": ["At most 8."]}


def test_it_leaves_an_unexpected_exception_alone() -> None:
    assert exception_handler(RuntimeError("boom"), {}) is None


@pytest.mark.parametrize(
    ("method", "write_scope", "needed"),
    [
        ("GET", "admin", "read"),
        ("HEAD", None, "read"),
        ("PUT", None, "request"),
        ("POST", "admin", "admin"),
    ],
)
def test_it_asks_read_for_safe_methods_and_the_views_scope_for_writes(
    method: str, write_scope: str | None, needed: str
) -> None:
    view = SimpleNamespace(write_scope=write_scope) if write_scope else SimpleNamespace()
    assert scope_needed(method, view) == needed


def test_it_refuses_a_token_without_the_scope() -> None:
    token = SimpleNamespace(allows=lambda scope: scope == "read")
    user = SimpleNamespace(is_authenticated=True)
    permission = ScopedAccess()
    assert permission.has_permission(SimpleNamespace(user=user, auth=token, method="GET"), None)
    assert not permission.has_permission(SimpleNamespace(user=user, auth=token, method="PUT"), None)
    assert "'request' scope" in permission.message
    assert token_allows(None, "admin")  # a session: the role decides


@pytest.mark.django_db
def test_it_answers_anonymous_callers_with_problem_details(client) -> None:
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code in (401, 403)
    assert response.json()["status"] == response.status_code


@pytest.mark.django_db
def test_it_serves_the_openapi_schema_to_a_signed_in_user(login) -> None:
    response = login("alice").get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
