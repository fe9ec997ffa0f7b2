"""``POST /api/v1/apply/``: many documents, JSON or YAML, each on its own; dry runs; and the
YAML body's guards (size, aliases, number of documents)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from django.test import Client

from catalog.models import Resource, ResourceRequest
from tests.api.test_declarative import SHARE_SPEC, active, counts, document

pytestmark = pytest.mark.django_db

APPLY = "/api/v1/apply/"


def post_json(client: Client, documents: Any, query: str = "") -> Any:
    return client.post(
        APPLY + query, data=json.dumps({"documents": documents}), content_type="application/json"
    )


def post_yaml(client: Client, text: str, query: str = "", kind: str = "application/yaml") -> Any:
    return client.post(APPLY + query, data=text.encode(), content_type=kind)


def named(name: str, spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    body = document(spec, **metadata)
    body["metadata"]["name"] = name
    return body


def test_each_document_is_applied_on_its_own(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    active(world, "gpu-share", {"name": "serve", **SHARE_SPEC})
    documents = [
        named("train"),  # unchanged
        named("serve", {**SHARE_SPEC, "count": 3}),  # modified
        named("new-one", {**SHARE_SPEC, "gpuz": 1}),  # bad
        named("other", {**SHARE_SPEC, "count": 1}),  # created
        named("hidden", tenant="bravo"),  # not alpha's member: not found
        "not a document",
    ]
    response = post_json(login("bob"), documents)
    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["ok"] is False and data["dry_run"] is False
    results = data["results"]
    assert [r["index"] for r in results] == list(range(6))
    assert [r["outcome"] for r in results] == [
        "unchanged",
        "modified",
        "error",
        "created",
        "error",
        "error",
    ]
    assert [r["status"] for r in results] == [200, 202, 400, 201, 404, 400]
    assert results[1]["diff"] == {"spec.count": {"old": 2, "new": 3}}
    assert results[2]["errors"] == {"spec.gpuz": ["Unknown field."]}
    assert results[2]["name"] == "new-one" and results[2]["kind"] == "GpuShare"
    assert results[4]["errors"] == {"metadata.tenant": ["Not found."]}
    assert results[4]["tenant"] == "bravo"
    modify = ResourceRequest.objects.get(pk=results[1]["request"])
    assert (modify.action, modify.state) == ("modify", "submitted")
    create = ResourceRequest.objects.get(pk=results[3]["request"])
    assert (create.action, create.resource.name) == ("create", "other")
    assert not Resource.objects.filter(name="new-one").exists()


def test_all_good_documents_answer_ok(login: Callable[[str], Client]) -> None:
    response = post_json(login("bob"), [named("a"), named("b", {**SHARE_SPEC, "count": 1})])
    assert response.json()["ok"] is True
    assert [r["outcome"] for r in response.json()["results"]] == ["created", "created"]


def test_a_later_document_sees_an_earlier_one(login: Callable[[str], Client]) -> None:
    # An endpoint on a share asked for in the same apply: the share is only asked for, not
    # on main, so the endpoint's check refuses it (as the form would).
    endpoint = {
        "apiVersion": "portal.ai-factory.dev/v1",
        "kind": "ModelEndpoint",
        "metadata": {"tenant": "alpha", "name": "chat"},
        "spec": {"model_uri": "hf://org/chat-model", "share": "train"},
    }
    results = post_json(login("bob"), [named("train"), endpoint]).json()["results"]
    assert results[0]["outcome"] == "created"
    assert results[1]["outcome"] == "error" and "spec.share" in results[1]["errors"]


def test_a_conflict_is_reported_with_the_request_in_flight(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    first = post_json(login("bob"), [named("train", {**SHARE_SPEC, "count": 4})]).json()
    before = counts()
    data = post_json(login("alice"), [named("train", {**SHARE_SPEC, "count": 3})]).json()
    result = data["results"][0]
    assert data["ok"] is False
    assert (result["outcome"], result["status"]) == ("conflict", 409)
    assert result["request"] == first["results"][0]["request"]
    assert result["diff"] == {"spec.count": {"old": 4, "new": 3}}
    assert counts() == before


def test_a_viewer_gets_a_403_per_document(login: Callable[[str], Client]) -> None:
    before = counts()
    result = post_json(login("vic"), [named("train")]).json()["results"][0]
    assert (result["outcome"], result["status"]) == ("error", 403)
    assert counts() == before


def test_a_dry_run_writes_nothing(login: Callable[[str], Client], world: dict[str, Any]) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    documents = [
        named("train", {**SHARE_SPEC, "count": 4}),
        named("fresh"),
        named("train2", {**SHARE_SPEC, "count": 0}),
        named("train2", {**SHARE_SPEC}, tenant="nowhere"),
    ]
    before = counts()
    data = post_json(login("bob"), documents, "?dry_run=true").json()
    assert data["dry_run"] is True and data["ok"] is False
    assert [r["outcome"] for r in data["results"]] == ["modified", "created", "error", "error"]
    assert data["results"][0]["diff"] == {"spec.count": {"old": 2, "new": 4}}
    assert data["results"][0]["request"] is None
    assert data["results"][1]["diff"]["spec.flavor"] == {"old": None, "new": "h200"}
    assert "spec.count" in data["results"][2]["errors"]
    assert data["results"][3]["status"] == 404
    assert counts() == before
    # and the same as YAML
    text = yaml.safe_dump_all(documents[:2])
    again = post_yaml(login("bob"), text, "?dry_run=true").json()
    assert [r["outcome"] for r in again["results"]] == ["modified", "created"]
    assert counts() == before


def test_a_bad_dry_run_flag_is_refused(login: Callable[[str], Client]) -> None:
    before = counts()
    response = post_json(login("bob"), [named("a")], "?dry_run=1")
    assert response.status_code == 400 and "dry_run" in response.json()["errors"]
    assert counts() == before


YAML_STREAM = """\
apiVersion: portal.ai-factory.dev/v1
kind: GpuShare
metadata:
  tenant: alpha
  name: train
  annotations:
    portal.ai-factory.dev/reason: fine-tuning next week
spec:
  flavor: h200
  kind: whole
  count: 2
  until: 2999-12-31
---
# an empty document is skipped
---
apiVersion: portal.ai-factory.dev/v1
kind: GpuShare
metadata: {tenant: alpha, name: Bad_Name}
spec: {flavor: h200, kind: whole, count: 1}
"""


@pytest.mark.parametrize("media_type", ["application/yaml", "application/x-yaml"])
def test_it_applies_a_yaml_stream(login: Callable[[str], Client], media_type: str) -> None:
    response = post_yaml(login("bob"), YAML_STREAM, kind=media_type)
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    assert [r["outcome"] for r in results] == ["created", "error"]
    assert "metadata.name" in results[1]["errors"]
    request = ResourceRequest.objects.get(pk=results[0]["request"])
    # the unquoted date stays the string it was typed as
    assert request.spec["until"] == "2999-12-31"
    assert request.reason == "fine-tuning next week"


def test_an_export_applies_again_as_unchanged(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    client = login("bob")
    items = client.get("/api/v1/tenants/alpha/gpushares/").json()["items"]
    before = counts()
    data = post_yaml(client, yaml.safe_dump_all(items)).json()
    assert data["ok"] is True
    assert [r["outcome"] for r in data["results"]] == ["unchanged"]
    assert post_json(client, items).json()["results"][0]["outcome"] == "unchanged"
    assert counts() == before


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &x [1, 2]\nb: *x\n", "aliases"),
        ("spec: &x {count: 1}\n", "aliases"),
        ("key: [unclosed\n", "line"),
        ("", "at least one document"),
        ("---\n---\n", "at least one document"),
        ("\n---\n".join(["a: 1"] * 101), "At most 100"),
        ("[" + ",".join(["1"] * 60_000) + "]", "too many values"),
    ],
)
def test_a_yaml_body_that_cannot_be_read_is_400(
    login: Callable[[str], Client], text: str, words: str
) -> None:
    before = counts()
    response = post_yaml(login("bob"), text)
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert words in json.dumps(response.json())
    assert counts() == before


def test_a_billion_laughs_is_refused(login: Callable[[str], Client]) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    response = post_yaml(login("bob"), "\n".join(lines))
    assert response.status_code == 400
    assert "aliases" in response.json()["detail"]


def test_a_body_over_the_limit_is_413(login: Callable[[str], Client], settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    before = counts()
    big = YAML_STREAM + "#" + "x" * 1000 + "\n"
    response = post_yaml(login("bob"), big)
    assert response.status_code == 413
    assert response.json()["status"] == 413
    as_json = post_json(login("bob"), [named("a", annotations={"x": "y" * 1000})])
    assert as_json.status_code == 413
    assert counts() == before


@pytest.mark.parametrize(
    "body",
    [{"documents": []}, {"documents": "x"}, {"docs": [1]}, [1, 2], {"documents": [{}] * 101}],
)
def test_a_json_body_without_documents_is_400(login: Callable[[str], Client], body: Any) -> None:
    before = counts()
    response = login("bob").post(APPLY, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert "documents" in response.json()["errors"]
    assert counts() == before


def test_other_media_types_are_415(login: Callable[[str], Client]) -> None:
    response = login("bob").post(APPLY, data=b"a=1", content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["status"] == 415


def test_anonymous_callers_are_refused(client: Client, world: dict[str, Any]) -> None:
    before = counts()
    response = post_json(client, [named("a")])
    assert response.status_code in (401, 403)
    assert client.get("/api/v1/tenants/alpha/gpushares/").status_code in (401, 403)
    assert counts() == before


def test_the_schema_describes_each_kind_as_strictly_as_the_server(
    login: Callable[[str], Client],
) -> None:
    schema = login("alice").get("/api/v1/schema/?format=json").json()
    paths, components = schema["paths"], schema["components"]["schemas"]

    def resolve(ref: dict[str, Any]) -> dict[str, Any]:
        if "allOf" in ref:
            ref = ref["allOf"][0]
        return components[ref["$ref"].rsplit("/", 1)[1]]

    for plural in ("clusters", "gpushares", "endpoints"):
        assert set(paths[f"/api/v1/tenants/{{tenant}}/{plural}/{{name}}/"]) >= {
            "get",
            "put",
            "delete",
        }
        assert "get" in paths[f"/api/v1/tenants/{{tenant}}/{plural}/"]
    put = paths["/api/v1/tenants/{tenant}/gpushares/{name}/"]["put"]
    assert {"200", "201", "202", "400", "403", "404", "409", "413"} <= set(put["responses"])
    assert "application/problem+json" in put["responses"]["409"]["content"]
    document = resolve(put["requestBody"]["content"]["application/json"]["schema"])
    assert document["additionalProperties"] is False and document["required"] == ["spec"]
    spec = resolve(document["properties"]["spec"])
    assert spec["additionalProperties"] is False
    assert sorted(spec["required"]) == ["count", "flavor", "kind"]
    assert "name" not in spec["properties"]
    endpoint = paths["/api/v1/tenants/{tenant}/endpoints/{name}/"]["get"]["responses"]["200"]
    assert resolve(endpoint["content"]["application/json"]["schema"])["properties"]["kind"] == {
        "anyOf": [{"type": "string", "enum": ["ModelEndpoint"]}]
    }
    body = paths["/api/v1/apply/"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/yaml", "application/x-yaml"} <= set(body)
