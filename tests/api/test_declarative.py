"""Declarative specs on one resource's URL: read, put (create, unchanged, modify), delete,
conflicts, who may, and every way a document can be wrong (nothing written)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from catalog.models import Notification, RequestEvent, Resource, ResourceRequest
from catalog.specs import from_json, to_json
from portal.models import AuditEvent
from tests.support.text import refusal, refused_params

pytestmark = pytest.mark.django_db

S = ResourceRequest.State
SHARE_SPEC = {"flavor": "h200", "kind": "whole", "count": 2}
URL = "/api/v1/tenants/alpha/gpushares/train/"


def document(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "portal.ai-factory.dev/v1",
        "kind": "GpuShare",
        "metadata": {"tenant": "alpha", "name": "train", **metadata},
        "spec": dict(SHARE_SPEC if spec is None else spec),
    }


def put(client: Client, body: Any, url: str = URL) -> Any:
    return client.put(url, data=json.dumps(body), content_type="application/json")


def counts() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (Resource, ResourceRequest, RequestEvent, AuditEvent, Notification)
    )


def active(world: dict[str, Any], kind: str, spec: dict[str, Any], tenant: str = "alpha") -> Any:
    """A resource as a merged request leaves it: active, its full spec on main."""
    return Resource.objects.create(
        tenant=world[tenant],
        kind=kind,
        name=spec["name"],
        state=Resource.State.ACTIVE,
        spec=to_json(from_json(kind, spec)),
    )


@pytest.fixture
def share(world: dict[str, Any]) -> Resource:
    return active(world, "gpu-share", {"name": "train", **SHARE_SPEC})


def test_it_creates_a_resource_as_a_submitted_request(login: Callable[[str], Client]) -> None:
    body = document(**{"annotations": {"portal.ai-factory.dev/reason": "fine-tuning"}})
    response = put(login("bob"), body)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["outcome"] == "created"
    request = ResourceRequest.objects.get(pk=data["request"])
    assert (request.action, request.state, request.reason) == ("create", S.SUBMITTED, "fine-tuning")
    assert request.resource.state == Resource.State.PENDING
    assert request.spec["count"] == 2 and request.spec["name"] == "train"
    assert data["diff"]["spec.count"] == {"old": None, "new": 2}
    assert data["document"]["spec"]["count"] == 2
    assert data["document"]["status"]["request"]["id"] == request.pk
    assert data["document"]["status"]["state"] == "pending"


def test_it_takes_kind_and_metadata_from_the_url(login: Callable[[str], Client]) -> None:
    response = put(login("bob"), {"spec": SHARE_SPEC})
    assert response.status_code == 201, response.json()
    assert Resource.objects.get().name == "train"


def test_an_unchanged_put_writes_nothing(login: Callable[[str], Client], share: Resource) -> None:
    before = counts()
    response = put(login("bob"), document())
    assert response.status_code == 200, response.json()
    assert response.json()["outcome"] == "unchanged"
    assert response.json()["request"] is None and response.json()["diff"] == {}
    # spelling out a default is the same spec
    assert put(login("bob"), document({**SHARE_SPEC, "until": ""})).status_code == 200
    assert counts() == before


def test_what_a_request_in_flight_asks_for_is_unchanged(login: Callable[[str], Client]) -> None:
    created = put(login("bob"), document()).json()
    before = counts()
    response = put(login("alice"), document())
    assert response.status_code == 200
    assert response.json() | {"document": None} == {
        "outcome": "unchanged",
        "request": created["request"],
        "diff": {},
        "document": None,
        "cost": None,  # nothing asked, nothing priced
    }
    assert counts() == before


def test_a_changed_spec_becomes_a_submitted_modify_request(
    login: Callable[[str], Client], share: Resource
) -> None:
    response = put(login("bob"), document({**SHARE_SPEC, "count": 4}))
    assert response.status_code == 202, response.json()
    data = response.json()
    assert data["outcome"] == "modified"
    assert data["diff"] == {"spec.count": {"old": 2, "new": 4}}
    request = ResourceRequest.objects.get(pk=data["request"])
    assert (request.action, request.state, request.spec["count"]) == ("modify", S.SUBMITTED, 4)
    share.refresh_from_db()
    assert share.spec["count"] == 2  # what runs changes when the pull request merges


def test_delete_becomes_a_decommission_request(
    login: Callable[[str], Client], share: Resource
) -> None:
    response = login("bob").delete(URL + "?reason=done+with+it")
    assert response.status_code == 202, response.json()
    data = response.json()
    assert data["outcome"] == "decommission"
    request = ResourceRequest.objects.get(pk=data["request"])
    assert (request.action, request.state, request.reason) == (
        "decommission",
        S.SUBMITTED,
        "done with it",
    )
    assert data["diff"]["spec.count"] == {"old": 2, "new": None}


def test_a_request_in_flight_is_a_conflict(login: Callable[[str], Client], share: Resource) -> None:
    first = put(login("bob"), document({**SHARE_SPEC, "count": 4})).json()["request"]
    before = counts()
    response = put(login("alice"), document({**SHARE_SPEC, "count": 3}))
    assert response.status_code == 409
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["request"] == first
    assert str(first) in response.json()["detail"]
    deleted = login("alice").delete(URL)
    assert deleted.status_code == 409 and deleted.json()["request"] == first
    assert counts() == before


def test_a_resource_being_decommissioned_is_a_conflict(
    login: Callable[[str], Client], share: Resource
) -> None:
    gone = login("bob").delete(URL).json()["request"]
    before = counts()
    response = put(login("bob"), document())
    assert response.status_code == 409 and response.json()["request"] == gone
    assert counts() == before


@pytest.mark.parametrize("outsider", ["charlie", "nora"])
def test_it_hides_the_tenant_from_non_members(
    login: Callable[[str], Client], share: Resource, outsider: str
) -> None:
    client = login(outsider)
    before = counts()
    for url in (URL, "/api/v1/tenants/alpha/gpushares/", "/api/v1/tenants/nowhere/gpushares/"):
        assert client.get(url).status_code == 404
    assert put(client, document({**SHARE_SPEC, "count": 4})).status_code == 404
    # even a bad document: the tenant is resolved first
    assert put(client, {"spec": {"gpuz": 1}}).status_code == 404
    assert client.delete(URL).status_code == 404
    assert counts() == before


def test_a_viewer_reads_but_may_not_write(login: Callable[[str], Client], share: Resource) -> None:
    client = login("vic")
    before = counts()
    assert client.get(URL).status_code == 200
    refused = put(client, document({**SHARE_SPEC, "count": 4}))
    assert refused.status_code == 403
    assert "Viewers" in refused.json()["detail"]
    assert put(client, document()).status_code == 403  # unchanged or not: a write
    assert client.delete(URL).status_code == 403
    assert counts() == before


def test_an_unknown_kind_or_resource_is_404(login: Callable[[str], Client]) -> None:
    client = login("bob")
    assert client.get("/api/v1/tenants/alpha/widgets/train/").status_code == 404
    assert client.get(URL).status_code == 404
    assert client.delete(URL).status_code == 404


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({**document(), "spec": {**SHARE_SPEC, "gpuz": 1}}, "spec.gpuz", "Unknown field."),
    ({**document(), "apiVersion": "v1"}, "apiVersion", "portal.ai-factory.dev/v1"),
    ({**document(), "kind": "Deployment"}, "kind", "Must be one of"),
    ({**document(), "kind": "TenantCluster"}, "kind", "Does not match the URL"),
    ({**document(), "colour": "blue"}, "colour", "Unknown field."),
    (document(owner="me"), "metadata.owner", "Unknown field."),
    (document(name="other"), "metadata.name", "Does not match the URL"),
    (document(tenant="bravo"), "metadata.tenant", "Does not match the URL"),
    (document({**SHARE_SPEC, "count": "2"}), "spec.count", "whole number"),
    (document({**SHARE_SPEC, "count": True}), "spec.count", "whole number"),
    (document({**SHARE_SPEC, "count": 2.5}), "spec.count", "whole number"),
    (document({**SHARE_SPEC, "count": 10**30}), "spec.count", "between"),
    (document({"flavor": "h200", "count": 2}), "spec.kind", "required"),
    ({**document(), "spec": [1]}, "spec", "mapping"),
    ({key: v for key, v in document().items() if key != "spec"}, "spec", "required"),
    (document({**SHARE_SPEC, "name": "train"}), "spec.name", "metadata.name"),
    (document({**SHARE_SPEC, "mig_profile": "a\nb"}), "spec.mig_profile", "control"),
    (document({**SHARE_SPEC, "count": 0}), "spec.count", "at least 1"),
    (document({**SHARE_SPEC, "count": 17}), "spec.count", "quota"),
    (document({**SHARE_SPEC, "flavor": "no-such-gpu"}), "spec.flavor", "no-such-gpu"),
    (document({**SHARE_SPEC, "kind": "bogus"}), "spec.kind", "must be one of"),
    (document({**SHARE_SPEC, "until": "2020-01-01"}), "spec.until", "future"),
    (document({**SHARE_SPEC, "until": "soon"}), "spec.until", "date"),
    (
        document(annotations={"portal.ai-factory.dev/reasn": "typo"}),
        "metadata.annotations.portal.ai-factory.dev/reasn",
        "Unknown annotation",
    ),
    (
        document(annotations={"portal.ai-factory.dev/reason": "x" * 2001}),
        "metadata.annotations.portal.ai-factory.dev/reason",
        "2000",
    ),
    ([document()], "", "mapping"),
]


@pytest.mark.parametrize(
    ("body", "path", "words"), BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)]
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    login: Callable[[str], Client], body: Any, path: str, words: str
) -> None:
    before = counts()
    response = put(login("bob"), body)
    assert response.status_code == 400, response.json()
    assert response["Content-Type"] == "application/problem+json"
    errors = response.json()["errors"]
    assert path in errors, errors
    assert any(words.lower() in message.lower() for message in errors[path]), errors
    assert counts() == before


@pytest.mark.parametrize("name", ["Bad_Name", "-train", "x" * 64])
def test_a_name_that_is_no_dns_label_is_refused(login: Callable[[str], Client], name: str) -> None:
    before = counts()
    response = put(login("bob"), {"spec": SHARE_SPEC}, f"/api/v1/tenants/alpha/gpushares/{name}/")
    assert response.status_code == 400
    assert "metadata.name" in response.json()["errors"]
    assert counts() == before


def test_a_modify_is_checked_like_the_form(login: Callable[[str], Client], share: Resource) -> None:
    before = counts()
    response = put(login("bob"), document({**SHARE_SPEC, "count": 17}))
    assert response.status_code == 400
    assert "quota" in response.json()["errors"]["spec.count"][0]
    assert counts() == before


def test_a_reason_on_delete_is_bounded(login: Callable[[str], Client], share: Resource) -> None:
    before = counts()
    response = login("bob").delete(URL + "?reason=" + "x" * 2001)
    assert response.status_code == 400 and "reason" in response.json()["errors"]
    assert counts() == before


@pytest.mark.parametrize("char", refused_params())
def test_bidi_overrides_and_separators_are_refused_in_reasons_and_spec_text(
    login: Callable[[str], Client], char: str
) -> None:
    bob = login("bob")
    before = counts()
    reason = f"fine-tuning{char} next week"
    response = put(bob, document(annotations={"portal.ai-factory.dev/reason": reason}))
    assert response.status_code == 400, response.json()
    errors = response.json()["errors"]["metadata.annotations.portal.ai-factory.dev/reason"]
    assert any(refusal(char) in message for message in errors), errors
    spec_text = put(bob, document({**SHARE_SPEC, "mig_profile": f"1g{char}.18gb"}))
    assert spec_text.status_code == 400
    assert any(refusal(char) in m for m in spec_text.json()["errors"]["spec.mig_profile"])
    assert counts() == before


@pytest.mark.parametrize("char", refused_params())
def test_a_reason_on_delete_may_not_hide_text_either(
    login: Callable[[str], Client], share: Resource, char: str
) -> None:
    before = counts()
    response = login("bob").delete(URL + "?" + urlencode({"reason": f"done{char}"}))
    assert response.status_code == 400
    assert any(refusal(char) in m for m in response.json()["errors"]["reason"])
    assert counts() == before


def test_export_round_trips_as_unchanged(
    login: Callable[[str], Client], world: dict[str, Any], share: Resource
) -> None:
    client = login("bob")
    exported = client.get(URL).json()
    assert exported["apiVersion"] == "portal.ai-factory.dev/v1"
    assert exported["kind"] == "GpuShare"
    assert exported["metadata"] == {"tenant": "alpha", "name": "train"}
    assert exported["spec"]["count"] == 2 and "name" not in exported["spec"]
    assert exported["status"]["state"] == "active"
    assert exported["status"]["readiness"] == {"state": "ready", "message": ""}
    before = counts()
    response = put(client, exported)  # status included: accepted and ignored
    assert response.status_code == 200 and response.json()["outcome"] == "unchanged"
    assert counts() == before


def test_it_lists_a_tenants_documents_of_a_kind(
    login: Callable[[str], Client], world: dict[str, Any], share: Resource
) -> None:
    active(world, "gpu-share", {"name": "serve", **SHARE_SPEC})
    active(world, "gpu-share", {"name": "theirs", **SHARE_SPEC}, tenant="bravo")
    Resource.objects.create(
        tenant=world["alpha"], kind="gpu-share", name="old", state=Resource.State.DECOMMISSIONED
    )
    items = login("bob").get("/api/v1/tenants/alpha/gpushares/").json()["items"]
    assert [item["metadata"]["name"] for item in items] == ["serve", "train"]
    assert login("bob").get("/api/v1/tenants/alpha/endpoints/").json() == {"items": []}


def test_an_endpoint_exports_its_url(login: Callable[[str], Client], world: dict[str, Any]) -> None:
    active(world, "gpu-share", {"name": "train", **SHARE_SPEC})
    active(
        world,
        "endpoint",
        {"name": "chat", "model_uri": "hf://org/chat-model", "share": "train"},
    )
    exported = login("bob").get("/api/v1/tenants/alpha/endpoints/chat/").json()
    assert exported["kind"] == "ModelEndpoint"
    assert exported["status"]["url"].startswith("https://")
    assert exported["status"]["cluster_url"] == (
        "http://chat-predictor.alpha.svc.cluster.local/openai"
    )
    assert exported["status"]["readiness"]["state"] == "waiting"
    assert (
        put(login("bob"), exported, "/api/v1/tenants/alpha/endpoints/chat/").json()["outcome"]
        == "unchanged"
    )


def test_a_cluster_goes_through_the_same_checks(login: Callable[[str], Client]) -> None:
    url = "/api/v1/tenants/alpha/clusters/dev/"
    before = counts()
    bad = put(login("bob"), {"spec": {"size": "huge"}}, url)
    assert bad.status_code == 400 and "spec.size" in bad.json()["errors"]
    assert counts() == before
    good = put(login("bob"), {"kind": "TenantCluster", "spec": {"size": "medium"}}, url)
    assert good.status_code == 201, good.json()
    assert good.json()["document"]["spec"]["size"] == "medium"


def test_a_different_spec_while_the_create_waits_is_a_conflict(
    login: Callable[[str], Client],
) -> None:
    created = put(login("bob"), document()).json()["request"]
    before = counts()
    response = put(login("bob"), document({**SHARE_SPEC, "count": 1}))
    assert response.status_code == 409 and response.json()["request"] == created
    assert "New GPU share train" in response.json()["detail"]
    # not running yet: nothing to decommission, the create request is what to cancel
    assert login("bob").delete(URL).status_code == 409
    assert counts() == before


def test_a_finance_user_reads_every_tenant_but_writes_none(
    login: Callable[[str], Client], share: Resource
) -> None:
    client = login("fiona")
    assert client.get(URL).status_code == 200
    before = counts()
    assert put(client, document({**SHARE_SPEC, "count": 4})).status_code == 403
    assert counts() == before


def test_a_deeply_nested_body_is_400_not_500(login: Callable[[str], Client]) -> None:
    body = "[" * 100_000 + "]" * 100_000
    response = login("bob").put(URL, data=body, content_type="application/json")
    assert response.status_code == 400
    response = login("bob").post("/api/v1/apply/", data=body, content_type="application/yaml")
    assert response.status_code == 400


@pytest.mark.parametrize("plural", ["clusters", "gpushares", "endpoints"])
def test_every_kind_hides_the_tenant_from_non_members(
    login: Callable[[str], Client], world: dict[str, Any], plural: str
) -> None:
    kind = {"clusters": "cluster", "gpushares": "gpu-share", "endpoints": "endpoint"}[plural]
    Resource.objects.create(tenant=world["alpha"], kind=kind, name="x", state="active")
    client = login("charlie")
    before = counts()
    url = f"/api/v1/tenants/alpha/{plural}/x/"
    assert client.get(f"/api/v1/tenants/alpha/{plural}/").status_code == 404
    assert client.get(url).status_code == 404
    assert put(client, {"spec": {}}, url).status_code == 404
    response = client.delete(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert counts() == before


def test_a_document_follows_its_request_to_main(
    login: Callable[[str], Client],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Through the real workflow: approved, a pull request, merged; the status says so, and
    the document read back applies again as unchanged."""
    from catalog import services
    from gitops import services as gitops
    from tenants.specs import tenant_spec

    merged_change(tenant_spec(world["alpha"]))
    created = put(login("bob"), document()).json()
    request = ResourceRequest.objects.get(pk=created["request"])
    with django_capture_on_commit_callbacks(execute=True):
        request = services.do_approve(request, acting_user=world["pam"])
    assert request.state == S.PR_OPEN, request.error
    status = login("bob").get(URL).json()["status"]
    assert status["request"]["state"] == "pr_open"
    assert status["request"]["change"]["id"] == request.change_id
    assert status["request"]["change"]["url"] == f"/changes/{request.change_id}/"
    assert status["readiness"] is None  # nothing runs yet
    assert put(login("bob"), document({**SHARE_SPEC, "count": 3})).status_code == 409

    with django_capture_on_commit_callbacks(execute=True):
        gitops.do_merge(request.change, acting_user=world["pam"])
    services.advance_requests()
    exported = login("bob").get(URL).json()
    assert exported["status"]["state"] == "active"
    assert exported["status"]["request"]["state"] == "merged"
    before = counts()
    again = put(login("bob"), exported)
    assert again.status_code == 200 and again.json()["outcome"] == "unchanged"
    assert counts() == before
    modified = put(login("bob"), document({**SHARE_SPEC, "count": 3}))
    assert modified.status_code == 202, modified.json()


@pytest.mark.db_engine
def test_listing_costs_the_same_queries_for_more_shares(
    login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = login("bob")
    url = "/api/v1/tenants/alpha/gpushares/"

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    for name in ("a", "b"):
        active(world, "gpu-share", {"name": name, **SHARE_SPEC, "count": 1})
    put(client, document({**SHARE_SPEC, "count": 1}, name="c"), url + "c/")
    few = queries()
    for name in ("d", "e", "f", "g"):
        active(world, "gpu-share", {"name": name, **SHARE_SPEC, "count": 1})
    assert queries() == few
    assert len(client.get(url).json()["items"]) == 7


def test_a_dry_run_delete_writes_nothing(login: Callable[[str], Client], share: Resource) -> None:
    before = counts()
    response = login("bob").delete(URL + "?dry_run=true")
    assert response.status_code == 200, response.json()
    assert response.json()["outcome"] == "decommission"
    assert response.json()["request"] is None
    assert response.json()["diff"]["spec.flavor"] == {"old": "h200", "new": None}
    assert counts() == before


def test_a_share_an_endpoint_runs_on_cannot_be_deleted_first(
    login: Callable[[str], Client], world: dict[str, Any], share: Resource
) -> None:
    active(
        world,
        "endpoint",
        {"name": "chat", "model_uri": "hf://org/chat-model", "share": "train"},
    )
    before = counts()
    for query in ("?dry_run=true", ""):
        response = login("bob").delete(URL + query)
        assert response.status_code == 400, response.json()
        assert "chat" in response.json()["detail"]
    assert counts() == before
