"""Every operation of the OpenAPI document, called by an outsider: charlie (bravo's admin)
with an admin-scoped token gets 404 on everything of alpha's, whatever the method, and lists
never show alpha's rows. A new route must be placed in one of the two tables below, so none
escapes the walk."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from billing.models import IdleCase, Invoice
from catalog import services as catalog
from catalog.models import BatchJob, Resource
from portal.models import Job
from tenants.specs import tenant_spec

pytestmark = pytest.mark.django_db

# Lists: reachable by anyone signed in, and must hold none of alpha's rows.
LISTS = {
    "/api/v1/tenants/": "slug",
    "/api/v1/requests/": "tenant",
    "/api/v1/changes/": "tenant",
    "/api/v1/invoices/": "tenant",
}
# Not about one tenant's things (the caller's own documents, the fleet's totals).
NOT_TENANT_SCOPED = {"/api/v1/apply/", "/api/v1/fleet/capacity/"}
# Platform admins' operations across tenants: a 403 for anyone else, whose body is not read
# before the role (tests/api/test_approve_many_api.py).
NOT_TENANT_SCOPED |= {"/api/v1/requests/approve-many/", "/api/v1/fleet/queues/"}


def _paths() -> dict[str, list[str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        path: sorted(m for m in ops if m in ("get", "post", "put", "patch", "delete"))
        for path, ops in schema["paths"].items()
    }


@pytest.fixture
def alphas(world: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, str]:
    """One of each of alpha's things, by the path parameter that names it."""
    change = merged_change(tenant_spec(world["alpha"]))
    request = catalog.do_create_request(
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 1},
    )
    for kind, name in (("cluster", "dev"), ("endpoint", "chat")):
        Resource.objects.create(tenant=world["alpha"], kind=kind, name=name, state="active")
    invoice = Invoice.objects.create(
        tenant=world["alpha"],
        tenant_slug="alpha",
        month=date(2026, 10, 1),
        currency="EUR",
        status="issued",
    )
    # A job bob started in alpha: his to read, and alpha's admins' (its audit log).
    job = Job.objects.create(
        task="catalog.advance", title="alpha's job", tenant=world["alpha"], created_by=world["bob"]
    )
    BatchJob.objects.create(
        tenant=world["alpha"],
        name="ft-1",
        namespace="alpha",
        kind="Job",
        uid="0b7c7d0e-0000-4000-8000-000000000001",
        spec={"name": "ft-1", "nodes": 1},
        submitted_by=world["bob"],
    )
    idle_case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="alpha",
        flavor="h200",
        workload="Job/ft-1",
        kind="job",
        state="acted",
        utilisation_percent=1,
        gpus=1,
        act_after=job.created_at,
        acted_at=job.created_at,
    )
    ids = {
        "/requests/": request.pk,
        "/changes/": change.pk,
        "/invoices/": invoice.pk,
        "/jobs/": job.pk,
    }
    return {
        "slug": "alpha",
        "tenant": "alpha",
        "username": "alice",
        "case_id": str(idle_case.pk),
        "ids": json.dumps(ids),
    }


def _fill(path: str, alphas: dict[str, str]) -> str:
    ids = json.loads(alphas["ids"])
    for segment, pk in ids.items():
        if segment in path:
            path = path.replace("{id}", str(pk))
    path = path.replace("/resources/{kind}/{name}/", "/resources/endpoint/chat/")
    name = {"clusters": "dev", "gpushares": "train", "endpoints": "chat", "jobs": "ft-1"}
    for plural, value in name.items():
        if f"/{plural}/" in path:
            path = path.replace("{name}", value)
    for key in ("slug", "tenant", "username", "case_id"):
        path = path.replace("{" + key + "}", alphas[key])
    assert "{" not in path, path
    return path


def test_an_outsider_gets_404_on_every_operation_of_alphas(
    world: dict[str, Any],
    alphas: dict[str, str],
    api: Callable[[str], Client],
    token: Callable[..., str],
) -> None:
    charlie = api(token("charlie", "admin"))
    bob = api(token("bob", "read"))
    scoped = {p: m for p, m in _paths().items() if p not in LISTS and p not in NOT_TENANT_SCOPED}
    assert len(scoped) >= 15  # the walk walks
    answers = {}
    for template, methods in scoped.items():
        url = _fill(template, alphas)
        # The same URL is alpha's member's to read: the 404 is about who asks.
        if "get" in methods:
            assert bob.get(url).status_code == 200, url
        for method in methods:
            if method == "get":
                response = charlie.get(url)
            else:
                response = getattr(charlie, method)(url, data="{}", content_type="application/json")
            answers[f"{method.upper()} {url}"] = response.status_code
            if response.status_code == 404:
                assert response["Content-Type"] == "application/problem+json"
    assert {k: v for k, v in answers.items() if v != 404} == {}


def test_lists_show_an_outsider_none_of_alphas_rows(
    world: dict[str, Any],
    alphas: dict[str, str],
    api: Callable[[str], Client],
    token: Callable[..., str],
) -> None:
    charlie = api(token("charlie", "admin"))
    paths = _paths()
    assert set(LISTS) | NOT_TENANT_SCOPED <= set(paths)
    for path, key in LISTS.items():
        rows = charlie.get(path).json()["results"]
        assert all(row.get(key) != "alpha" for row in rows), (path, rows)
        filtered = charlie.get(path, {key: "alpha"} if key == "tenant" else {})
        assert filtered.status_code in (200, 404)
        if filtered.status_code == 200:
            assert all(r.get(key) != "alpha" for r in filtered.json()["results"]), path
