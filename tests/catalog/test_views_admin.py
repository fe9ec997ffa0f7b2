"""The platform admin's approval pages: who sees them, the what-if they show (quota, capacity,
the manifest diff), and the decisions, on a real Git repository."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from catalog import services
from catalog.models import Notification, ResourceRequest
from catalog.services import CapacityRow
from catalog.specs import to_json
from catalog.views_admin import AFTER_COLOUR, OVER_COLOUR, capacity_figure
from fleet.models import Workload
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.specs import GpuShare

S = ResourceRequest.State
OUTSIDERS = ["alice", "bob", "nora", "fiona"]


@pytest.fixture
def flavor(db: None) -> str:
    """A whole-GPU flavor of the configured fleet, whose repository has a main (a preview
    compares with main and never creates it)."""
    gitops.ensure_bootstrapped(configured_fleet())
    return next(f.name for f in configured_fleet().flavors if f.mode == "whole")


@pytest.fixture
def ask(world: dict[str, Any], flavor: str) -> Callable[..., ResourceRequest]:
    """A GPU share request of alpha, submitted (by bob unless told otherwise)."""

    def make(
        count: int = 2, *, by: str = "bob", name: str = "train", tenant: str = "alpha"
    ) -> ResourceRequest:
        spec = to_json(GpuShare(name=name, flavor=flavor, kind="whole", count=count))
        return services.do_create_request(
            world[tenant], acting_user=world[by], kind="gpu-share", spec=spec, reason="training"
        )

    return make


def _seen(client: Client, request: ResourceRequest) -> str:
    """What an admin's browser posts back: the digest of the diff the page showed."""
    response = client.get(f"/approvals/{request.pk}/")
    assert response.status_code == 200
    return str(response.context["seen"])


def _live(client: Client, request: ResourceRequest, world: dict[str, Any]) -> ResourceRequest:
    """Approve ``request`` on the page, merge its pull request and let Flux apply it."""
    assert _approve(client, request).status_code == 302
    request.refresh_from_db()
    assert request.change is not None, request.error
    ChangeRequest.objects.filter(pk=request.change.pk).update(checks_state="passed")
    gitops.do_merge(request.change, acting_user=world["pam"])
    services.advance_requests()
    ChangeRequest.objects.filter(pk=request.change.pk).update(apply_state="applied")
    services.advance_requests()
    request.refresh_from_db()
    assert request.state == S.READY
    return request


def _approve(client: Client, request: ResourceRequest, **data: Any) -> Any:
    fields = {"approve-seen": _seen(client, request), "approve-note": "ok", **data}
    return client.post(f"/approvals/{request.pk}/approve/", fields)


# --- who sees the approval pages ------------------------------------------------------------


@pytest.mark.parametrize("name", OUTSIDERS)
def test_it_hides_the_approval_pages_from_all_but_platform_admins(
    name: str, ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    request = ask()
    client = login(name)
    assert client.get("/approvals/").status_code == 404
    assert client.get(f"/approvals/{request.pk}/").status_code == 404
    for action in ["approve", "reject", "request-changes", "retry"]:
        response = client.post(f"/approvals/{request.pk}/{action}/", {"reject-note": "no"})
        assert response.status_code == 404, action
    request.refresh_from_db()
    assert request.state == S.SUBMITTED
    assert not ChangeRequest.objects.exists()


def test_it_sends_anonymous_visitors_to_sign_in(ask: Callable[..., ResourceRequest]) -> None:
    request = ask()
    for url in ["/approvals/", f"/approvals/{request.pk}/"]:
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_it_answers_404_for_an_unknown_request(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    assert pam.get("/approvals/999/").status_code == 404
    assert pam.post("/approvals/999/reject/", {"reject-note": "no"}).status_code == 404


def test_it_takes_decisions_by_post_only(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    request = ask()
    assert login("pam").get(f"/approvals/{request.pk}/approve/").status_code == 405


# --- the queue ------------------------------------------------------------------------------


def test_it_lists_waiting_requests_then_those_in_flight(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    flying = ask(name="train")
    assert _approve(pam, flying).status_code == 302
    flying.refresh_from_db()
    waiting = ask(name="infer")
    response = pam.get("/approvals/")
    assert list(response.context["waiting"]) == [waiting]
    assert list(response.context["in_flight"]) == [flying]
    page = response.content.decode()
    assert page.index(waiting.title) < page.index(flying.title)
    assert f"/approvals/{waiting.pk}/" in page
    assert "bob" in page and "alpha" in page
    assert f"/changes/{flying.change_id}/" in page


# --- the approval page ----------------------------------------------------------------------


def test_it_shows_quota_capacity_before_and_after_and_the_diff(
    world: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    flavor: str,
) -> None:
    Workload.objects.create(
        namespace="alpha", name="job-1", tenant_slug="alpha", gpu_requests={"nvidia.com/gpu": 3}
    )
    request = ask(count=2)
    response = login("pam").get(f"/approvals/{request.pk}/")
    assert response.status_code == 200
    context = response.context
    row = next(r for r in context["check"].capacity if r.flavor == flavor and r.unit == "GPUs")
    assert (row.before, row.after) == (0, 2)
    assert context["check"].gpu_equivalents == 2
    assert context["gpus_in_use"] == {"nvidia.com/gpu": 3}
    page = response.content.decode()
    assert 'class="plotly-chart" data-plotly-figure="{' in page
    assert "/static-vendor/plotly.min.js?v=" in page
    assert "2.00 of 16 GPUs" in page
    # the diff is what the pull request would write: the share's quota in the tenant's tree
    paths = [f.path for f in context["files"]]
    assert paths and all(p.startswith("tenants/") for p in paths)
    assert any(f.status == "added" and f.added for f in context["files"])
    assert context["seen"] == services.digest(services.preview_changes(context["check"]))
    assert f'value="{context["seen"]}"' in page
    assert "Approve and open the pull request" in page
    assert "allow_overcommit" not in page  # nothing overcommits


def test_it_shows_a_modify_next_to_what_runs_now(
    world: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    flavor: str,
) -> None:
    pam = login("pam")
    request = _live(pam, ask(count=2), world)
    spec = to_json(GpuShare(name="train", flavor=flavor, kind="whole", count=4))
    modify = services.do_modify_request(request.resource, acting_user=world["bob"], spec=spec)
    response = pam.get(f"/approvals/{modify.pk}/")
    rows = {row.field: row for row in response.context["spec_rows"]}
    assert (rows["count"].now, rows["count"].wanted, rows["count"].changed) == ("2", "4", True)
    assert not rows["flavor"].changed
    capacity = next(r for r in response.context["check"].capacity if r.flavor == flavor)
    assert (capacity.before, capacity.after) == (2, 4)
    assert "Runs now" in response.content.decode()


def test_it_links_the_pull_request_and_its_checks(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    _approve(pam, request)
    request.refresh_from_db()
    page = pam.get(f"/approvals/{request.pk}/").content.decode()
    assert f"/changes/{request.change_id}/" in page
    assert "Checks running" in page
    assert "Approve and open the pull request" not in page  # decided already


# --- deciding -------------------------------------------------------------------------------


def test_it_approves_and_opens_the_pull_request_with_pams_review(
    world: dict[str, Any], ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    response = _approve(pam, request, **{"approve-note": "fits"})
    assert response.status_code == 302
    assert response["Location"] == f"/approvals/{request.pk}/"
    request.refresh_from_db()
    assert request.state == S.PR_OPEN
    assert (request.decided_by, request.decision_note, request.error) == (world["pam"], "fits", "")
    change = request.change
    assert change is not None and change.is_open
    assert change.requested_by == world["bob"]
    assert [(r.reviewer, r.state) for r in change.reviews.all()] == [(world["pam"], "approve")]
    assert "pull request" in pam.get(response["Location"]).content.decode()


def test_it_changes_nothing_when_the_diff_moved_on(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    for seen in ["0123456789abcdef", ""]:
        response = pam.post(
            f"/approvals/{request.pk}/approve/", {"approve-seen": seen, "approve-note": "ok"}
        )
        assert response.status_code == 422
        request.refresh_from_db()
        assert request.state == S.SUBMITTED
        assert not ChangeRequest.objects.exists()
    stale = pam.post(f"/approvals/{request.pk}/approve/", {"approve-seen": "0123456789abcdef"})
    assert "The manifests changed since you opened this page" in stale.content.decode()
    # the page shows the diff as it is now, so approving again works
    assert _approve(pam, request).status_code == 302


def test_it_approves_an_overcommit_only_with_the_checkbox(
    world: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    flavor: str,
) -> None:
    # bravo holds half the flavor; alpha asks for a little more than the other half
    gpus = next(f.gpus for f in configured_fleet().flavors if f.name == flavor)
    for tenant in (world["alpha"], world["bravo"]):
        tenant.gpu_quota = gpus
        tenant.save()
    pam = login("pam")
    _live(pam, ask(count=gpus // 2, by="charlie", tenant="bravo"), world)
    request = ask(count=gpus // 2 + 1)
    page = pam.get(f"/approvals/{request.pk}/")
    assert [r.flavor for r in page.context["check"].overcommit] == [flavor]
    assert 'name="approve-allow_overcommit"' in page.content.decode()
    assert "Overcommit:" in page.content.decode()

    refused = _approve(pam, request)
    assert refused.status_code == 422
    assert "allow overcommit" in refused.content.decode()
    request.refresh_from_db()
    assert request.state == S.SUBMITTED and request.change is None

    assert _approve(pam, request, **{"approve-allow_overcommit": "on"}).status_code == 302
    request.refresh_from_db()
    assert request.state == S.PR_OPEN and request.allow_overcommit
    assert request.change is not None and request.change.allow_overcommit


def test_it_rejects_only_with_a_note_and_tells_bob(
    world: dict[str, Any],
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    django_capture_on_commit_callbacks: Any,
) -> None:
    pam = login("pam")
    request = ask()
    missing = pam.post(f"/approvals/{request.pk}/reject/", {"reject-note": "  "})
    assert missing.status_code == 422
    assert "Say why, so the team can act on it." in missing.content.decode()
    request.refresh_from_db()
    assert request.state == S.SUBMITTED

    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = pam.post(f"/approvals/{request.pk}/reject/", {"reject-note": "Use h200-mig."})
    assert response.status_code == 302
    request.refresh_from_db()
    assert (request.state, request.decision_note) == (S.REJECTED, "Use h200-mig.")
    notice = Notification.objects.get(user=world["bob"], request=request)
    assert "rejected" in notice.title and "Use h200-mig." in notice.body
    sent = [m for m in mail.outbox if world["bob"].email in m.to]
    assert len(sent) == 1 and "Use h200-mig." in sent[0].body
    assert "Rejected" in pam.get(response["Location"]).content.decode()


def test_it_requests_changes_only_with_a_note(
    world: dict[str, Any], ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    missing = pam.post(f"/approvals/{request.pk}/request-changes/", {})
    assert missing.status_code == 422
    assert "Say what needs to change." in missing.content.decode()
    response = pam.post(f"/approvals/{request.pk}/request-changes/", {"changes-note": "Fewer."})
    assert response.status_code == 302
    request.refresh_from_db()
    assert request.state == S.CHANGES_REQUESTED
    assert Notification.objects.filter(user=world["bob"], title__contains="changes").exists()


def test_it_refuses_a_decision_on_a_request_no_longer_waiting(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    pam.post(f"/approvals/{request.pk}/reject/", {"reject-note": "No."})
    for action, data in [
        ("reject", {"reject-note": "Again."}),
        ("request-changes", {"changes-note": "More."}),
        ("approve", {"approve-seen": "0123456789abcdef"}),
    ]:
        response = pam.post(f"/approvals/{request.pk}/{action}/", data)
        assert response.status_code == 422, action
        page = response.content.decode()
        assert "rejected" in page and "Nothing was changed." in page
    request.refresh_from_db()
    assert (request.state, request.decision_note) == (S.REJECTED, "No.")
    assert not ChangeRequest.objects.exists()


def test_the_requester_cannot_decide_on_their_own_request(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask(by="pam")
    page = pam.get(f"/approvals/{request.pk}/")
    text = page.content.decode()
    assert "You asked for this request or wrote part of it" in text
    assert f"/approvals/{request.pk}/approve/" not in text
    assert f"/approvals/{request.pk}/reject/" not in text
    response = pam.post(f"/approvals/{request.pk}/approve/", {"approve-seen": page.context["seen"]})
    assert response.status_code == 422
    assert "another platform admin must decide" in response.content.decode()
    response = pam.post(f"/approvals/{request.pk}/reject/", {"reject-note": "Mine anyway."})
    assert response.status_code == 422
    request.refresh_from_db()
    assert request.state == S.SUBMITTED and request.decided_by is None


# --- retrying the pull request --------------------------------------------------------------


def test_it_retries_the_pull_request_after_a_failed_git_write(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    seen = _seen(pam, request)
    # A branch called "change" leaves no room for change/<id>: Git cannot store both refs.
    repo = gitops.repository()
    main = gitops.main_sha()
    assert main is not None
    repo.create_branch("change", at=main)
    response = pam.post(f"/approvals/{request.pk}/approve/", {"approve-seen": seen})
    assert response.status_code == 302
    request.refresh_from_db()
    assert request.state == S.APPROVED and request.change is None
    assert request.error.startswith("Opening the pull request failed")
    page = pam.get(f"/approvals/{request.pk}/").content.decode()
    assert "Retry: open the pull request again" in page
    assert f"/approvals/{request.pk}/retry/" in page
    assert pam.get("/approvals/").context["in_flight"][0] == request

    repo.delete_branch("change", expected=main)
    response = pam.post(f"/approvals/{request.pk}/retry/")
    assert response.status_code == 302
    request.refresh_from_db()
    assert (request.state, request.error) == (S.PR_OPEN, "")
    assert request.change is not None and request.change.is_open
    assert (
        "Retry: open the pull request again" not in pam.get(response["Location"]).content.decode()
    )


def test_it_refuses_a_retry_with_nothing_to_retry(
    ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    request = ask()
    response = login("pam").post(f"/approvals/{request.pk}/retry/")
    assert response.status_code == 422
    assert "there is no pull request to open again" in response.content.decode()
    request.refresh_from_db()
    assert (request.state, request.error, request.change) == (S.SUBMITTED, "", None)


# --- the chart ------------------------------------------------------------------------------


def test_the_capacity_chart_shows_each_pool_as_a_share_of_its_capacity() -> None:
    rows = [
        CapacityRow("h200", "GPUs", Decimal(80), Decimal(40), Decimal(60)),
        CapacityRow("h200-hami", "MiB", Decimal(1000), Decimal(900), Decimal(1100)),
    ]
    figure = capacity_figure(rows)
    now, after = figure.data
    assert (now.name, after.name) == ("Promised now", "After approval")
    assert list(now.y) == [50.0, 90.0]
    assert list(after.y) == [75.0, 110.0]
    assert list(after.marker.color) == [AFTER_COLOUR, OVER_COLOUR]
    assert list(after.customdata[1]) == ["1100", "1000", "MiB"]
    assert figure.layout.barmode == "group"
