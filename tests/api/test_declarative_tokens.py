"""Declarative routes with API tokens: scopes narrow, the role decides, every call is logged."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from api.models import TokenUse
from catalog.models import Resource, ResourceRequest

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/alpha/gpushares/train/"
DOCUMENT = {
    "apiVersion": "portal.ai-factory.dev/v1",
    "kind": "GpuShare",
    "metadata": {"tenant": "alpha", "name": "train"},
    "spec": {"flavor": "h200", "kind": "whole", "count": 2},
}
YAML = b"""apiVersion: portal.ai-factory.dev/v1
kind: GpuShare
metadata: {tenant: alpha, name: train}
spec: {flavor: h200, kind: whole, count: 2}
"""


def put(client: Client) -> Any:
    return client.put(URL, data=json.dumps(DOCUMENT), content_type="application/json")


def test_a_read_token_reads_but_may_not_write(
    world: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    client = api(token("bob", "read"))
    assert client.get("/api/v1/tenants/alpha/gpushares/").status_code == 200
    refused = put(client)
    assert refused.status_code == 403
    assert "'request' scope" in refused.json()["detail"]
    applied = client.post("/api/v1/apply/", data=YAML, content_type="application/yaml")
    assert applied.status_code == 403
    assert Resource.objects.count() == 0


def test_a_request_token_asks_with_its_users_role(
    world: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    created = put(api(token("bob", "request")))
    assert created.status_code == 201, created.json()
    request = ResourceRequest.objects.get(pk=created.json()["request"])
    assert request.requested_by == world["bob"]
    # The scope does not lift the role: a viewer's admin-scoped token still may not ask.
    assert put(api(token("vic", "admin"))).status_code == 403
    # Nor reach another tenant: 404, as for a session.
    assert api(token("charlie", "admin")).get(URL).status_code == 404


def test_a_robot_applies_yaml_as_its_tenant_member(
    world: dict[str, Any], api: Callable[[str], Client], robot_token: Callable[..., str]
) -> None:
    client = api(robot_token(role="member", scope="request"))
    answer = client.post("/api/v1/apply/", data=YAML, content_type="application/yaml")
    assert answer.status_code == 200
    [result] = answer.json()["results"]
    assert result["outcome"] == "created", result
    request = ResourceRequest.objects.get(pk=result["request"])
    assert request.requested_by.username.startswith("robot")
    assert request.state == ResourceRequest.State.SUBMITTED
    viewer = api(robot_token(role="viewer", scope="request"))
    again = viewer.post("/api/v1/apply/", data=YAML, content_type="application/yaml")
    assert again.json()["results"][0]["status"] == 403


def test_every_declarative_call_with_a_token_is_logged(
    world: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    client = api(token("bob", "request"))
    put(client)
    client.get(URL)
    client.delete(URL)  # refused: a create request is in flight
    uses = list(TokenUse.objects.order_by("pk").values_list("method", "path", "status"))
    assert uses == [("PUT", URL, 201), ("GET", URL, 200), ("DELETE", URL, 409)]
