"""The contract with portalctl: what it reads from the declarative API's answers (apply
results, diffs, document status) is what the API writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from django.test import Client

from portalctl import cli
from tests.api.test_declarative import SHARE_SPEC, active, document

pytestmark = pytest.mark.django_db


def test_portalctl_reads_a_dry_run_as_a_diff(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    body = yaml.safe_dump_all([document({**SHARE_SPEC, "count": 4}), document(name="Bad")])
    response = login("bob").post(
        "/api/v1/apply/?dry_run=true", data=body.encode(), content_type="application/yaml"
    )
    changed, bad = response.json()["results"]
    assert cli._diff_lines(changed) == ["  spec.count: 2 -> 4"]
    assert cli._messages(bad).startswith("metadata.name: ")
    assert bad["outcome"] in cli.FAILED_OUTCOMES


def test_portalctl_reads_a_documents_status(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    client = login("bob")
    created = client.put(
        "/api/v1/tenants/alpha/gpushares/train/",
        data=json.dumps(document()),
        content_type="application/json",
    ).json()
    exported = client.get("/api/v1/tenants/alpha/gpushares/train/").json()
    assert cli._state(exported) == ("submitted", "", "")  # nothing runs yet
    columns = {title: value(exported) for title, value in cli.DOCUMENT_COLUMNS}
    assert columns["REQUEST"] == f"#{created['request']} submitted"
    assert columns["STATE"] == "pending"
