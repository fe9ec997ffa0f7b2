""" "Approve selected": a platform admin approves many waiting requests at once; a background
job approves each in turn, exactly as from its own page, and says what became of each. Bad
selections are refused whole, with nothing queued; end to end on a real repository with the
in-process (eager) runner, the merge queue included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from catalog import services
from catalog.models import ResourceRequest
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest, MergeQueueEntry
from portal.models import Job
from tenants.models import PlatformRole

S = ResourceRequest.State

pytestmark = pytest.mark.django_db


@pytest.fixture
def ask(onboarded: dict[str, Any]) -> Callable[..., ResourceRequest]:
    """A submitted GPU-share request (alpha's by bob unless told otherwise)."""

    def make(
        name: str, count: int = 1, *, by: str = "bob", tenant: str = "alpha"
    ) -> ResourceRequest:
        return services.do_create_request(
            onboarded[tenant],
            acting_user=onboarded[by],
            kind="gpu-share",
            spec={"name": name, "flavor": "h200", "kind": "whole", "count": count},
        )

    return make


def _job_lines(job: Job) -> list[str]:
    """The job's log lines without their time of day."""
    job.refresh_from_db()
    return [line.split(" ", 1)[1] for line in job.log.splitlines() if line.strip()]


def test_it_approves_each_selected_request_and_merges_them_through_the_queue(
    onboarded: dict[str, Any], ask: Callable[..., ResourceRequest], run_jobs: Any
) -> None:
    world = onboarded
    chosen = [ask("train"), ask("eval", by="charlie", tenant="bravo")]
    job = run_jobs(
        services.do_approve_many,
        [r.pk for r in chosen],
        acting_user=world["pam"],
        note="reorganisation",
    )
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED and job.progress == 100
    assert job.created_by == world["pam"]
    lines = _job_lines(job)
    main = gitops.repository().head("main")
    for request in chosen:
        request.refresh_from_db()
        assert request.decided_by == world["pam"] and request.decision_note == "reorganisation"
        change = request.change
        assert change is not None, request.error
        # Each its own pull request, reviewed by pam, merged by the queue's batches.
        assert [(r.reviewer, r.state) for r in change.reviews.all()] == [(world["pam"], "approve")]
        assert change.status == "merged", MergeQueueEntry.objects.values("state", "reason")
        assert main is not None and gitops.repository().is_ancestor(change.merge_sha, main)
        assert f"#{request.pk} {request.title}: approved, pull request #{change.pk}" in lines
    assert lines[-1] == "2 approved, 0 left waiting"
    assert MergeQueueEntry.objects.filter(state="merged").count() == 2


def test_without_merge_each_pull_request_stays_open_with_its_own_checks(
    onboarded: dict[str, Any], ask: Callable[..., ResourceRequest], run_jobs: Any
) -> None:
    chosen = [ask("train"), ask("eval", by="charlie", tenant="bravo")]
    run_jobs(
        services.do_approve_many, [r.pk for r in chosen], acting_user=onboarded["pam"], merge=False
    )
    for request in chosen:
        request.refresh_from_db()
        assert request.state == S.PR_OPEN
        assert request.change is not None and request.change.status == "open"
    assert not MergeQueueEntry.objects.exists()


def test_one_that_fails_its_check_at_its_turn_stays_waiting_and_the_log_says_why(
    onboarded: dict[str, Any], ask: Callable[..., ResourceRequest], run_jobs: Any
) -> None:
    """alpha holds more than half the h200 pool; bravo's request for as much again would
    overcommit it, which is allowed only on its own page: the job leaves it waiting and
    approves the next one."""
    world = onboarded
    gpus = next(f.gpus for f in configured_fleet().flavors if f.name == "h200")
    for tenant in (world["alpha"], world["bravo"]):
        tenant.gpu_quota = gpus
        tenant.save()
    held = run_jobs(
        services.do_approve, ask("big", count=gpus // 2 + 1), acting_user=world["pam"], merge=True
    )
    services.advance_requests()
    held.refresh_from_db()
    assert held.state == S.MERGED
    too_big = ask("also-big", count=gpus // 2 + 1, by="charlie", tenant="bravo")
    fits = ask("small", count=1)
    job = run_jobs(
        services.do_approve_many, [too_big.pk, fits.pk], acting_user=world["pam"], merge=True
    )
    too_big.refresh_from_db()
    fits.refresh_from_db()
    assert too_big.state == S.SUBMITTED and too_big.change is None
    assert fits.change is not None and fits.change.status == "merged"
    lines = _job_lines(job)
    [line] = [x for x in lines if x.startswith(f"#{too_big.pk} ")]
    assert "not approved" in line and "overcommits h200" in line, line
    assert lines[-1] == "1 approved, 1 left waiting"


@pytest.mark.parametrize(
    "case",
    ["empty", "unknown", "decided", "own", "too many"],
)
def test_a_bad_selection_is_refused_whole_and_changes_nothing(
    case: str,
    onboarded: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    run_jobs: Any,
) -> None:
    world = onboarded
    good = ask("train")
    other = ask("eval", by="charlie", tenant="bravo")
    ids = [good.pk, other.pk]
    expected = ""
    if case == "empty":
        ids, expected = [], "Select at least one request"
    elif case == "unknown":
        ids, expected = [*ids, 99999], "No such request: #99999."
    elif case == "decided":
        run_jobs(services.do_reject, other, acting_user=world["pam"], note="no budget")
        expected = f"No longer waiting for a decision: #{other.pk}."
    elif case == "own":
        mine = ask("mine", by="pam")
        ids, expected = (
            [*ids, mine.pk],
            f"You asked for these; another platform admin decides: #{mine.pk}.",
        )
    else:
        ids, expected = list(range(1, services.APPROVE_MANY_MAX + 2)), "approve at most 1000"
    jobs_before = Job.objects.count()
    with pytest.raises(ValidationError) as refused:
        run_jobs(services.do_approve_many, ids, acting_user=world["pam"])
    assert any(expected in m for m in refused.value.messages), refused.value.messages
    assert Job.objects.count() == jobs_before
    good.refresh_from_db()
    assert good.state == S.SUBMITTED and good.change is None
    assert not ChangeRequest.objects.filter(kind="gpu-share").exists()


def test_only_a_platform_admin_approves_many(
    onboarded: dict[str, Any], ask: Callable[..., ResourceRequest], run_jobs: Any
) -> None:
    request = ask("train", by="alice")
    for name in ["alice", "bob", "charlie", "fiona", "nora"]:
        with pytest.raises(PermissionDenied):
            run_jobs(services.do_approve_many, [request.pk], acting_user=onboarded[name])
    assert not Job.objects.filter(task="catalog.approve_many").exists()
    request.refresh_from_db()
    assert request.state == S.SUBMITTED


def test_an_approver_demoted_before_the_job_runs_approves_nothing(
    onboarded: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The job acts as whoever queued it, and the service checks again at each request: the
    permission of the moment, not the one at the click."""
    world = onboarded
    request = ask("train")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = services.do_approve_many([request.pk], acting_user=world["pam"])
    PlatformRole.objects.filter(user=world["pam"]).delete()
    world["pam"].refresh_from_db()
    for callback in callbacks:
        callback()
    request.refresh_from_db()
    assert request.state == S.SUBMITTED and request.change is None
    lines = _job_lines(job)
    assert "not approved: Only a platform admin can decide on requests." in lines[0], lines
    assert lines[-1].endswith("0 approved, 1 left waiting")


# --- the queue page ---------------------------------------------------------------------------


def test_the_queue_page_selects_and_approves_and_shows_the_job(
    onboarded: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    django_capture_on_commit_callbacks: Any,
) -> None:
    theirs = [ask("train"), ask("eval", by="charlie", tenant="bravo")]
    mine = ask("mine", by="pam")
    pam = login("pam")
    page = pam.get("/approvals/").content.decode()
    for request in theirs:
        assert f'name="requests" value="{request.pk}"' in page
    # Your own request has a checkbox that cannot be ticked.
    assert f'name="requests" value="{mine.pk}"' not in page
    assert "data-select-all" in page and "Approve selected" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = pam.post(
            "/approvals/approve-selected/",
            {"requests": [str(r.pk) for r in theirs], "note": "reorg", "merge": "on"},
        )
    assert response.status_code == 302
    job = Job.objects.get(task="catalog.approve_many")
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.kwargs == {"request_ids": [r.pk for r in theirs], "note": "reorg", "merge": True}
    for request in theirs:
        request.refresh_from_db()
        assert request.change is not None and request.change.status == "merged"
    shown = pam.get(response["Location"]).content.decode()
    assert "2 approved, 0 left waiting" in shown


@pytest.mark.parametrize(
    "posted",
    [{}, {"requests": ["abc"]}, {"requests": ["99999"]}, {"requests": ["9" * 30]}],
    ids=["none", "not a number", "unknown", "too big for any column"],
)
def test_the_queue_page_refuses_a_bad_selection_with_a_reason(
    posted: dict[str, Any],
    onboarded: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
) -> None:
    waiting = ask("train")
    response = login("pam").post("/approvals/approve-selected/", posted)
    assert response.status_code == 422
    page = response.content.decode()
    assert "Nothing was approved." in page
    assert any(
        reason in page
        for reason in ["Select at least one request", "Select a valid choice", "No such request"]
    ), page
    assert not Job.objects.filter(task="catalog.approve_many").exists()
    waiting.refresh_from_db()
    assert waiting.state == S.SUBMITTED


@pytest.mark.parametrize("name", ["alice", "bob", "nora", "fiona"])
def test_the_bulk_approval_answers_404_to_all_but_platform_admins(
    name: str,
    onboarded: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
) -> None:
    request = ask("train", by="charlie", tenant="bravo")
    response = login(name).post("/approvals/approve-selected/", {"requests": [str(request.pk)]})
    assert response.status_code == 404
    assert login("pam").get("/approvals/approve-selected/").status_code == 405
    request.refresh_from_db()
    assert request.state == S.SUBMITTED
    assert not Job.objects.filter(task="catalog.approve_many").exists()
