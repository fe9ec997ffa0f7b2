"""A partial or skipped check is never shown as passed: the schema check is partial when some
objects have no schema, a change with such a check is "partial", every place that shows the
state says so (pages, API), and whether it may merge is GITOPS_ALLOW_PARTIAL_CHECKS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from gitops import services
from gitops.checks import run_checks
from gitops.checks.schema import SchemaRegistry
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, CheckRun
from gitops.specs import TenantSpec
from tests.gitops import checks_samples as samples
from tests.support.crds import crd

WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}


def test_checks_state_counts_a_partial_or_skipped_check_as_partial() -> None:
    state = ChangeRequest.checks_state_of
    assert state(["passed", "passed"]) == ChangeRequest.Checks.PASSED
    assert state(["passed", "skipped"]) == ChangeRequest.Checks.PARTIAL
    assert state(["passed", "partial"]) == ChangeRequest.Checks.PARTIAL
    assert state(["partial", "failed"]) == ChangeRequest.Checks.FAILED
    assert ChangeRequest.Checks.PARTIAL.label == "Checks partial"


def test_an_object_without_a_schema_is_not_validated_and_the_check_says_partial(
    schema_dir: Path,
) -> None:
    files = {
        "tenants/alpha/widget.yaml": samples.dump(WIDGET),
        "tenants/alpha/queues.yaml": samples.dump(samples.local_queue("alpha")),
    }
    [result, *_] = run_checks(files, fleet=samples.FLEET, schema_dir=schema_dir)
    assert result.status == "partial"
    assert result.summary == (
        "1 object validated, 1 custom resource without a schema: Widget; schemas: directory crds"
    )
    assert result.details[1] == (
        "tenants/alpha/widget.yaml: warning: Widget/w apiVersion: no schema for example.com/v1 "
        "Widget, not validated; add its CRD to the schema directory"
    )


def test_a_known_kind_at_an_unknown_version_is_still_an_error() -> None:
    registry = SchemaRegistry.from_crds([crd("Widget", version="v2")])
    [error] = registry.validate(WIDGET)
    assert (error.severity, error.unvalidated) == ("error", False)
    assert error.message == (
        "no schema for example.com/v1 Widget (known versions: example.com/v2); "
        "the cluster serves no CRD for it"
    )


@pytest.fixture
def incomplete_change(
    world: dict[str, Any], settings: Any, django_capture_on_commit_callbacks: Any
) -> ChangeRequest:
    """A change whose schema check is partial: no CRDs anywhere, as in a fresh clone."""
    settings.GITOPS_SCHEMA_SOURCE = "directory"
    settings.GITOPS_SCHEMA_DIR = ""
    with django_capture_on_commit_callbacks(execute=True):
        change = services.open_tenant_change(
            acting_user=world["bob"],
            tenant=TenantSpec(slug="alpha", display_name="Alpha Team"),
            fleet=demo_fleet(),
            title="Alpha",
            kind=ChangeRequest.Kind.TENANT,
        )
    change.refresh_from_db()
    return change


def test_a_change_with_a_partial_check_is_partial_not_passed(
    incomplete_change: ChangeRequest,
) -> None:
    runs = {c.name: c for c in CheckRun.objects.filter(change=incomplete_change)}
    assert runs["schemas"].status == "partial"
    assert runs["schemas"].summary.startswith("19 objects validated, 8 custom resources without ")
    assert runs["schemas"].details[0].endswith("(no GITOPS_SCHEMA_DIR is set)"), runs[
        "schemas"
    ].details[0]
    assert {c.status for n, c in runs.items() if n != "schemas"} == {"passed"}
    assert incomplete_change.checks_state == ChangeRequest.Checks.PARTIAL


def test_whether_a_partial_change_merges_is_the_setting(
    incomplete_change: ChangeRequest, settings: Any, login: Callable[[str], Client]
) -> None:
    settings.GITOPS_ALLOW_PARTIAL_CHECKS = True
    assert "Checks failed." not in services.merge_blockers(incomplete_change)
    assert services.PARTIAL_REFUSED not in services.merge_blockers(incomplete_change)
    page = login("bob").get(f"/changes/{incomplete_change.pk}/").content.decode()
    assert "This portal lets partial checks merge" in page

    settings.GITOPS_ALLOW_PARTIAL_CHECKS = False
    assert services.PARTIAL_REFUSED in services.merge_blockers(incomplete_change)
    page = login("bob").get(f"/changes/{incomplete_change.pk}/").content.decode()
    assert "This portal merges only changes whose checks passed" in page


def test_pages_and_the_api_show_partial_checks_apart_from_passed(
    incomplete_change: ChangeRequest, login: Callable[[str], Client]
) -> None:
    bob = login("bob")
    detail = bob.get(f"/changes/{incomplete_change.pk}/").content.decode()
    assert '<span class="badge checks-partial">Checks partial</span>' in detail
    assert "Checks passed" not in detail
    assert '<span class="badge status-partial">Partial</span> 19 objects validated' in detail
    listing = bob.get("/changes/").content.decode()
    assert "checks-partial" in listing and "checks-passed" not in listing
    answer = bob.get(f"/api/v1/changes/{incomplete_change.pk}/").json()
    assert answer["checks_state"] == "partial"
    assert {c["name"]: c["status"] for c in answer["checks"]}["schemas"] == "partial"
