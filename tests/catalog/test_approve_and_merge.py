""" "Approve and merge": the pull request goes into the merge queue, which checks it with its
batch and merges it; end to end with the in-process (eager) runner on a real repository."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from catalog import services
from catalog.models import ResourceRequest
from gitops import services as gitops
from gitops.models import CheckRun, MergeQueueBatch, MergeQueueEntry
from portal.models import Job
from tests.gitops.checks_support import FLOW_CHECKS, FLOW_CHECKS_STATE, flow_check_statuses

S = ResourceRequest.State
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}

pytestmark = pytest.mark.django_db


def _submitted(world: dict[str, Any], tenant: str, run_jobs: Any) -> ResourceRequest:
    return run_jobs(
        services.do_create_request,
        world[tenant],
        acting_user=world["alice" if tenant == "alpha" else "charlie"],
        kind="gpu-share",
        spec=SHARE,
    )


def test_approve_and_merge_takes_the_request_to_main_through_the_queue(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    request = _submitted(world, "alpha", run_jobs)
    request = run_jobs(services.do_approve, request, acting_user=world["pam"], merge=True)
    assert request.state == S.PR_OPEN and request.error == ""
    change = request.change
    assert change is not None
    change.refresh_from_db()
    # No check run of its own: the batch checked it, once, and merged it.
    assert not Job.objects.filter(task="gitops.run_checks", kwargs__change_id=change.pk).exists()
    assert change.status == "merged", MergeQueueEntry.objects.values("state", "reason")
    assert change.merged_by == world["pam"]
    assert gitops.repository().head("main") == change.merge_sha
    entry = MergeQueueEntry.objects.get(change=change)
    assert entry.state == "merged" and entry.enqueued_by == world["pam"]
    assert MergeQueueBatch.objects.get().check_runs == 1
    assert flow_check_statuses(CheckRun.objects.filter(change=change)) == FLOW_CHECKS
    services.advance_requests()
    request.refresh_from_db()
    assert request.state == S.MERGED


def test_plain_approval_still_opens_a_pull_request_with_its_own_checks(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    request = _submitted(world, "alpha", run_jobs)
    request = run_jobs(services.do_approve, request, acting_user=world["pam"])
    assert request.change is not None
    request.change.refresh_from_db()
    assert request.change.status == "open" and request.change.checks_state == FLOW_CHECKS_STATE
    assert not MergeQueueEntry.objects.exists()


def test_a_request_that_cannot_be_queued_waits_with_its_own_checks(
    onboarded: dict[str, Any], run_jobs: Any, settings: Any
) -> None:
    settings.GITOPS_REQUIRED_APPROVALS = 2
    world = onboarded
    request = _submitted(world, "alpha", run_jobs)
    request = run_jobs(services.do_approve, request, acting_user=world["pam"], merge=True)
    assert request.state == S.PR_OPEN
    assert request.error == "Not added to the merge queue: 1 of 2 required approvals."
    assert request.change is not None
    request.change.refresh_from_db()
    assert request.change.status == "open" and request.change.checks_state == FLOW_CHECKS_STATE


def test_the_approval_page_approves_and_merges(
    onboarded: dict[str, Any], run_jobs: Any, login: Any, django_capture_on_commit_callbacks: Any
) -> None:
    world = onboarded
    request = _submitted(world, "alpha", run_jobs)
    pam: Client = login("pam")
    page = pam.get(f"/approvals/{request.pk}/")
    assert "Approve and merge" in page.content.decode()
    seen = page.context["seen"]
    with django_capture_on_commit_callbacks(execute=True):
        response = pam.post(
            f"/approvals/{request.pk}/approve/",
            {"approve-seen": seen, "approve-note": "", "approve-merge": "on"},
        )
    assert response.status_code == 302, response.content.decode()[:500]
    request.refresh_from_db()
    assert request.change is not None and request.change.status == "merged"
