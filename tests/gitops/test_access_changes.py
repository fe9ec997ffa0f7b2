"""Changes of who may use a tenant's clusters, on a real bare repository: what they rewrite,
and which of them merge without a review."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops import services
from gitops.models import ChangeRequest
from gitops.specs import ClusterMember, FleetSpec, GpuShare, TenantClusterSpec, TenantSpec
from portal.models import AuditEvent
from tests import cluster_oidc
from tests.cluster_oidc import ISSUER

BINDINGS = "tenants/alpha/cluster-access/dev/bindings.yaml"
MEMBERS = "tenants/alpha/spec/members.json"


def spec(**roles: str) -> TenantSpec:
    return TenantSpec(
        slug="alpha",
        shares=(GpuShare(name="infer", flavor="h200", kind="whole", count=2),),
        clusters=(TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2),),
        members=tuple(
            ClusterMember(name, role, ISSUER, f"sub-{name}")  # type: ignore[arg-type]
            for name, role in roles.items()
        ),
    )


@pytest.fixture
def fleet(settings: Any, tmp_path: Path, merged_change: Callable[..., Any]) -> FleetSpec:
    """alpha on main with cluster dev, ann its admin and bob a member in it."""
    fleet = cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc())
    merged_change(spec(ann="admin", bob="member"))
    return fleet


def users(data: bytes | None) -> set[str]:
    return {d["subjects"][0]["name"] for d in yaml.safe_load_all(data or b"") if d}


def open_access_change(
    world: dict[str, Any], on_commit: Any, fleet: FleetSpec, tenant: TenantSpec
) -> ChangeRequest:
    with on_commit(execute=True):
        change = services.open_change(
            acting_user=None,
            title="Who may use alpha's clusters",
            changes=services.cluster_access_changes(tenant, fleet),
            kind=ChangeRequest.Kind.TENANT,
            tenant_slug="alpha",
            requested_by=world["alice"],
        )
    change.refresh_from_db()
    return change


@pytest.mark.django_db
def test_it_rewrites_the_bindings_of_the_clusters_main_has(fleet: FleetSpec) -> None:
    without_bob = services.cluster_access_changes(spec(ann="admin"), fleet)
    # The bindings and the members they are rendered from (main's spec of alpha), no more.
    assert sorted(without_bob) == [BINDINGS, MEMBERS]
    assert users(without_bob[BINDINGS]) == {"oidc:sub-ann"}
    assert [m["subject"] for m in json.loads(without_bob[MEMBERS] or b"")] == ["sub-ann"]
    assert services.cluster_access_changes(spec(ann="admin", bob="member"), fleet) == {}
    # The clusters come from main: the tenant's own spec needs none (a membership change
    # knows no catalog resources).
    no_clusters = dataclasses.replace(spec(ann="admin"), clusters=(), shares=())
    assert services.cluster_access_changes(no_clusters, fleet) == without_bob


@pytest.mark.django_db
def test_a_revocation_merges_once_its_checks_pass_and_a_grant_waits(
    fleet: FleetSpec,
    world: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    on_commit = django_capture_on_commit_callbacks
    removal = open_access_change(world, on_commit, fleet, spec(ann="admin"))
    assert removal.checks_state == ChangeRequest.Checks.PASSED
    assert removal.status == ChangeRequest.Status.MERGED
    assert removal.merged_by is None and not removal.reviews.exists()
    message = services.repository().commit_message(removal.merge_sha)
    assert "Approved-by: none needed: it only takes cluster access away" in message
    audit = AuditEvent.objects.get(action="change.merge", target_id=str(removal.pk))
    assert audit.diff["without_review"] == [None, "takes away: oidc:sub-bob (edit in dev)"]
    assert users(services.repository().read_file(removal.merge_sha, BINDINGS)) == {"oidc:sub-ann"}

    grant = open_access_change(world, on_commit, fleet, spec(ann="admin", carl="viewer"))
    assert grant.checks_state == ChangeRequest.Checks.PASSED
    assert grant.status == ChangeRequest.Status.OPEN
    assert services.merge_blockers(grant) == ["0 of 1 required approvals."]
    assert services.do_merge_revocation(grant) is None


@pytest.mark.django_db
def test_revocations_wait_when_the_setting_is_off_or_a_forge_merges(
    fleet: FleetSpec,
    world: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.GITOPS_AUTO_MERGE_REVOCATIONS = False
    change = open_access_change(world, django_capture_on_commit_callbacks, fleet, spec(ann="admin"))
    assert change.checks_state == ChangeRequest.Checks.PASSED
    assert change.status == ChangeRequest.Status.OPEN
    settings.GITOPS_AUTO_MERGE_REVOCATIONS = True
    settings.GITOPS_FORGE = "gitea"
    assert services.do_merge_revocation(change) is None
    settings.GITOPS_FORGE = ""
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state=ChangeRequest.Checks.FAILED)
    assert services.do_merge_revocation(change) is None  # failed checks: never
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state=ChangeRequest.Checks.PASSED)
    merged = services.do_merge_revocation(change)
    assert merged is not None and merged.status == ChangeRequest.Status.MERGED
