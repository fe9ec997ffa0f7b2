"""Whether a merged change is applied: the Flux Kustomizations that own its files, their state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gitops import applied, services
from gitops.applied import FluxReport
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest
from gitops.repo import Identity
from gitops.specs import EndpointSpec, GpuShare, TenantSpec
from portal.models import AuditEvent

FLEET = demo_fleet()
SHARE = GpuShare(name="train", flavor="h200", kind="whole", count=8)
ENDPOINT = EndpointSpec(name="chat", model_uri="hf://org/model", share="train")


@pytest.fixture
def merge(merged_change: Callable[..., ChangeRequest]) -> Callable[..., ChangeRequest]:
    return merged_change


def _ready(key: str, sha: str | None, **extra: Any) -> FluxReport:
    namespace, name = key.split("/")
    fields: dict[str, Any] = {"ready": "True", "applied_sha": sha, "attempted_sha": sha}
    fields.update(extra)
    return FluxReport(namespace=namespace, name=name, **fields)


def test_it_finds_the_kustomizations_that_own_a_change(merge: Callable[..., ChangeRequest]) -> None:
    repo = services.repository()
    onboarding = merge(TenantSpec(slug="alpha"))
    assert applied.owners(repo, onboarding.merge_sha, onboarding.files_changed) == (
        "alpha/alpha-workloads",
        "flux-system/tenants",
    )
    share = merge(TenantSpec(slug="alpha", shares=(SHARE,)))
    assert applied.owners(repo, share.merge_sha, share.files_changed) == ("flux-system/tenants",)
    endpoint = merge(TenantSpec(slug="alpha", shares=(SHARE,), endpoints=(ENDPOINT,)))
    assert "alpha/alpha-workloads" in applied.owners(
        repo, endpoint.merge_sha, endpoint.files_changed
    )
    # Removing the tenant: its own Kustomization goes with it, "tenants" prunes the rest.
    removal = merge(remove="alpha")
    assert applied.owners(repo, removal.merge_sha, removal.files_changed) == (
        "flux-system/tenants",
    )


def test_it_is_pending_until_every_owner_is_ready_at_the_merge(
    merge: Callable[..., ChangeRequest],
) -> None:
    repo = services.repository()
    change = merge(TenantSpec(slug="alpha"))
    assert change.apply_state == "pending"
    nothing = applied.verdict(repo, change, {})
    assert nothing.state == "pending"
    assert "alpha/alpha-workloads does not exist in the cluster yet" in nothing.message
    older = {r.key: r for r in [_ready("flux-system/tenants", change.base_sha)]}
    assert applied.verdict(repo, change, older).state == "pending"
    half = {r.key: r for r in [_ready("flux-system/tenants", change.merge_sha)]}
    assert applied.verdict(repo, change, half).state == "pending"
    both = {
        r.key: r
        for r in [
            _ready("flux-system/tenants", change.merge_sha),
            _ready("alpha/alpha-workloads", change.merge_sha),
        ]
    }
    result = applied.verdict(repo, change, both)
    assert result.state == "applied"
    assert change.merge_sha[:12] in result.message


def test_it_counts_a_later_revision_as_containing_the_merge(
    merge: Callable[..., ChangeRequest],
) -> None:
    repo = services.repository()
    first = merge(TenantSpec(slug="alpha"))
    later = merge(TenantSpec(slug="alpha", shares=(SHARE,)))
    reports = {
        r.key: r
        for r in [
            _ready("flux-system/tenants", later.merge_sha),
            _ready("alpha/alpha-workloads", later.merge_sha),
        ]
    }
    assert applied.verdict(repo, first, reports).state == "applied"
    # A revision the repository has never seen contains nothing.
    unknown = {k: _ready(k, "f" * 40) for k in reports}
    assert applied.verdict(repo, first, unknown).state == "pending"


def test_it_fails_with_the_reconcilers_message_only_for_an_attempt_at_the_merge(
    merge: Callable[..., ChangeRequest],
) -> None:
    repo = services.repository()
    merge(TenantSpec(slug="alpha"))
    change = merge(TenantSpec(slug="alpha", shares=(SHARE,)))
    stalled_before = _ready(
        "flux-system/tenants",
        change.base_sha,
        ready="False",
        stalled=True,
        reason="BuildFailed",
        message="old failure",
    )
    assert applied.verdict(repo, change, {stalled_before.key: stalled_before}).state == "pending"
    stalled = _ready(
        "flux-system/tenants",
        change.base_sha,
        attempted_sha=change.merge_sha,
        ready="False",
        stalled=True,
        reason="BuildFailed",
        message="accumulating resources: missing file",
    )
    result = applied.verdict(repo, change, {stalled.key: stalled})
    assert result.state == "failed"
    assert "BuildFailed" in result.message
    assert "accumulating resources: missing file" in result.message
    retrying = _ready(
        "flux-system/tenants",
        change.base_sha,
        attempted_sha=change.merge_sha,
        ready="False",
        reconciling=True,
    )
    assert applied.verdict(repo, change, {retrying.key: retrying}).state == "pending"


def test_it_moves_changes_on_and_audits_each_transition(
    merge: Callable[..., ChangeRequest],
) -> None:
    repo = services.repository()
    change = merge(TenantSpec(slug="alpha"))
    failing = [
        _ready(
            "flux-system/tenants",
            change.base_sha,
            attempted_sha=change.merge_sha,
            ready="False",
            stalled=True,
            message="boom",
        )
    ]
    assert [c.pk for c in applied.update_apply_states(repo, failing)] == [change.pk]
    change.refresh_from_db()
    assert (change.apply_state, "boom" in change.apply_message) == ("failed", True)
    assert applied.update_apply_states(repo, failing) == []  # no news, no audit row
    fixed = [
        _ready("flux-system/tenants", change.merge_sha),
        _ready("alpha/alpha-workloads", change.merge_sha),
    ]
    applied.update_apply_states(repo, fixed)
    change.refresh_from_db()
    assert change.apply_state == "applied"
    actions = list(
        AuditEvent.objects.filter(target_id=str(change.pk), action__startswith="change.apply_")
        .order_by("pk")
        .values_list("action", "tenant_slug")
    )
    assert actions == [("change.apply_failed", "alpha"), ("change.apply_applied", "alpha")]


def test_it_applies_a_change_no_kustomization_reads(world: dict[str, Any]) -> None:
    services.ensure_bootstrapped(FLEET)
    repo = services.repository()
    sha = repo.commit(
        {"docs/README.md": b"notes"},
        message="docs",
        author=Identity("t", "t@example.com"),
        branch="main",
        expected_parent=services.main_sha(),
    )
    change = ChangeRequest.objects.create(
        title="docs",
        status="merged",
        merge_sha=sha,
        apply_state="pending",
        files_changed=["docs/README.md"],
    )
    assert applied.verdict(repo, change, {}).state == "applied"
