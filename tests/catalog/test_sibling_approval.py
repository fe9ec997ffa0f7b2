"""Approvals stick to what was reviewed: a sibling pull request rendered again after another
merge keeps its approval when it asks main for the same as before (its own spec files, from
the same start), and needs a fresh review when that changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from catalog import services
from catalog.models import Notification, ResourceRequest
from gitops import services as gitops
from portal.models import AuditEvent
from tenants.models import PlatformRole
from tests.support.kueue import nominal_gpus

S = ResourceRequest.State
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 1}
ENDPOINT = {
    "name": "chat",
    "model_uri": "hf://org/chat-model",
    "share": "train",
    "gpus_per_replica": 1,
}


def _approved(world: dict[str, Any], run_jobs: Any, kind: str, spec: dict[str, Any]) -> Any:
    request = run_jobs(
        services.do_create_request, world["alpha"], acting_user=world["bob"], kind=kind, spec=spec
    )
    return run_jobs(services.do_approve, request, acting_user=world["pam"])


def _merge(request: ResourceRequest, world: dict[str, Any], run_jobs: Any) -> None:
    request.refresh_from_db()
    run_jobs(gitops.do_merge, request.change, acting_user=world["pam"])
    run_jobs(services.advance_requests)


@pytest.fixture
def alpha(onboarded: dict[str, Any]) -> dict[str, Any]:
    onboarded["alpha"].gpu_quota = 64
    onboarded["alpha"].save()
    return onboarded


@pytest.mark.django_db
def test_a_refresh_whose_own_content_changed_needs_a_fresh_review(
    alpha: dict[str, Any], run_jobs: Any, merged_change: Any
) -> None:
    world = alpha
    first = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "train", "count": 2})
    second = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "evals"})
    approved = second.change
    # Someone writes evals' spec on main by hand (a platform change): what second's pull
    # request starts from is no longer what the approver saw.
    hand = {**SHARE, "name": "evals", "count": 3, "borrowing_limit": None, "gpucores_percent": 0}
    merged_change(changes={"tenants/alpha/spec/shares/evals.json": json.dumps(hand).encode()})
    _merge(first, world, run_jobs)
    second.refresh_from_db()
    fresh = second.change
    assert fresh.pk != approved.pk and fresh.is_open and second.state == S.PR_OPEN
    assert not gitops.same_request(approved, fresh)
    assert not fresh.reviews.exists()
    assert "needs a fresh review" in second.error
    assert "0 of 1 required approvals." in gitops.merge_blockers(fresh)
    notice = Notification.objects.get(
        user=world["pam"], request=second, title__contains="review again"
    )
    assert "review again" in notice.title and notice.url.endswith(f"/changes/{fresh.pk}/")
    audit = AuditEvent.objects.get(
        action="request.pull_request_refreshed", target_id=str(second.pk)
    )
    assert audit.diff["approval"] == ["approved", "needs a fresh review"]
    # A fresh review (the same admin may give it: the change is not theirs) lets it merge.
    run_jobs(gitops.do_review, fresh, acting_user=world["pam"], state="approve")
    _merge(second, world, run_jobs)
    second.refresh_from_db()
    assert second.change.status == "merged"


@pytest.mark.django_db
def test_a_refresh_that_adds_a_siblings_share_keeps_its_approval(
    alpha: dict[str, Any], run_jobs: Any
) -> None:
    world = alpha
    first = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "train", "count": 2})
    second = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "evals"})
    approved = second.change
    _merge(first, world, run_jobs)
    second.refresh_from_db()
    fresh = second.change
    assert fresh.pk != approved.pk and second.error == ""
    # The queue file now holds both shares; what second asks for is what was approved.
    queues = "tenants/alpha/queues.yaml"
    assert nominal_gpus(gitops.repository().read_file(approved.head_sha, queues), "h200") == 1
    assert nominal_gpus(gitops.repository().read_file(fresh.head_sha, queues), "h200") == 3
    assert gitops.same_request(approved, fresh)
    assert gitops.merge_blockers(fresh) == []
    _merge(second, world, run_jobs)
    main = gitops.main_sha() or ""
    assert nominal_gpus(gitops.repository().read_file(main, queues), "h200") == 3


@pytest.mark.django_db
def test_a_byte_identical_refresh_keeps_its_approval(alpha: dict[str, Any], run_jobs: Any) -> None:
    world = alpha
    _merge(_approved(world, run_jobs, "gpu-share", {**SHARE, "name": "train"}), world, run_jobs)
    endpoint = _approved(world, run_jobs, "endpoint", ENDPOINT)
    share = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "evals"})
    approved = endpoint.change
    _merge(share, world, run_jobs)  # quota, queue and policy files: none of the endpoint's
    endpoint.refresh_from_db()
    fresh = endpoint.change
    assert fresh.pk != approved.pk
    assert gitops.same_request(approved, fresh)
    review = fresh.reviews.get()
    assert (review.reviewer, review.state, review.sha) == (world["pam"], "approve", fresh.head_sha)
    assert "carried over" in review.body
    assert gitops.merge_blockers(fresh) == []
    assert not Notification.objects.filter(request=endpoint, title__contains="review again")


@pytest.mark.django_db
def test_an_approval_is_not_carried_by_an_admin_who_lost_the_role(
    alpha: dict[str, Any], run_jobs: Any, make_user: Any
) -> None:
    world = alpha
    olga = make_user("olga")
    PlatformRole.objects.create(user=olga, role=PlatformRole.Name.PLATFORM_ADMIN)
    _merge(_approved(world, run_jobs, "gpu-share", {**SHARE, "name": "train"}), world, run_jobs)
    endpoint = _approved(world, run_jobs, "endpoint", ENDPOINT)
    share = _approved(world, run_jobs, "gpu-share", {**SHARE, "name": "evals"})
    PlatformRole.objects.filter(user=world["pam"]).delete()
    share.change.refresh_from_db()
    run_jobs(gitops.do_merge, share.change, acting_user=olga)
    run_jobs(services.advance_requests)
    endpoint.refresh_from_db()
    assert endpoint.change.is_open and not endpoint.change.reviews.exists()
