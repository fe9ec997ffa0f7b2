"""The catalog workflow end to end on a real Git repository: request, decide, pull request,
merge, and the cluster (the simulator) reporting the resource ready."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError

from catalog import services, states
from catalog.models import Notification, RequestEvent, Resource, ResourceRequest
from fleet import services as fleet
from gitops import services as gitops
from gitops.models import ChangeRequest
from portal.models import AuditEvent
from simulator import Simulator
from tenants.specs import tenant_spec
from tests.support.kueue import nominal_gpus

S = ResourceRequest.State
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
ENDPOINT = {
    "name": "chat",
    "model_uri": "hf://org/chat-model",
    "share": "train",
    "gpus_per_replica": 1,
}


def _merge(request: ResourceRequest, world: dict[str, Any], run_jobs: Any) -> ChangeRequest:
    request.refresh_from_db()
    assert request.change is not None, request.error
    change = request.change
    change.refresh_from_db()
    # Passed, or partial where its custom resources have no CRD here (tests' settings).
    assert change.checks_mergeable, list(change.checks.values("name", "summary"))
    return run_jobs(gitops.do_merge, change, acting_user=world["pam"])


def _approve(request: ResourceRequest, world: dict[str, Any], run_jobs: Any) -> ResourceRequest:
    return run_jobs(services.do_approve, request, acting_user=world["pam"])


@pytest.mark.django_db
def test_a_gpu_share_goes_from_request_to_ready(onboarded: dict[str, Any], run_jobs: Any) -> None:
    world = onboarded
    request = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec=SHARE,
        reason="fine-tuning next week",
    )
    assert request.state == S.SUBMITTED
    assert request.resource.state == Resource.State.PENDING
    # pam hears about it, in the portal and by mail
    assert Notification.objects.filter(user=world["pam"], request=request).exists()
    assert any("pam@example.com" in m.to for m in mail.outbox)

    request = _approve(request, world, run_jobs)
    assert request.state == S.PR_OPEN, request.error
    change = request.change
    assert change is not None and change.kind == "gpu-share"
    assert change.requested_by == world["bob"] and change.author is None
    assert change.reviews.filter(reviewer=world["pam"], state="approve").exists()
    assert any(path.startswith("tenants/alpha/") for path in change.files_changed)

    _merge(request, world, run_jobs)
    services.advance_requests()
    request.refresh_from_db()
    assert request.state == S.MERGED
    assert request.resource.state == Resource.State.ACTIVE
    assert {key: request.resource.spec[key] for key in SHARE} == SHARE
    # Flux applied it (the fleet sync would say so): a share is ready once applied
    ChangeRequest.objects.filter(pk=change.pk).update(apply_state="applied")
    run_jobs(services.advance_requests)
    request.refresh_from_db()
    assert request.state == S.READY
    assert request.finished_at is not None
    path = list(request.events.values_list("from_state", "to_state"))
    assert path == [
        ("draft", "submitted"),
        ("submitted", "approved"),
        ("approved", "pr_open"),
        ("pr_open", "merged"),
        ("merged", "ready"),
    ]
    audited = set(AuditEvent.objects.filter(tenant_slug="alpha").values_list("action", flat=True))
    assert {"request.submitted", "request.approved", "request.pr_open", "request.ready"} <= audited
    assert Notification.objects.filter(user=world["bob"], title__contains="is ready").exists()


@pytest.mark.django_db
def test_bad_input_changes_nothing(onboarded: dict[str, Any]) -> None:
    world = onboarded
    cases = [
        ({**SHARE, "name": "Bad_Name"}, "name"),
        ({**SHARE, "count": 0}, "count"),
        ({**SHARE, "flavor": "no-such-gpu"}, "flavor"),
        ({**SHARE, "count": 17}, "count"),  # beyond alpha's quota of 16 GPUs
        ({**SHARE, "colour": "blue"}, "colour"),
    ]
    for spec, field in cases:
        with pytest.raises(ValidationError) as caught:
            services.do_create_request(
                world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=spec
            )
        assert field in caught.value.message_dict, (spec, caught.value.message_dict)
    with pytest.raises(PermissionDenied, match="Viewers"):
        services.do_create_request(
            world["alpha"], acting_user=world["vic"], kind="gpu-share", spec=SHARE
        )
    assert not Resource.objects.exists() and not ResourceRequest.objects.exists()


@pytest.mark.django_db
def test_a_dedicated_tenant_gets_no_shared_gpu(onboarded: dict[str, Any]) -> None:
    world = onboarded
    hami = {
        "name": "frac",
        "flavor": "h200-hami",
        "kind": "hami",
        "count": 2,
        "gpumem_mib": 20000,
        "gpucores_percent": 30,
    }
    check = services.check_request(world["bravo"], "gpu-share", "frac", hami)
    assert "kind" in check.errors or any("dedicated" in m for m in check.errors.values())
    ok = services.check_request(world["alpha"], "gpu-share", "frac", hami)
    assert ok.ok, ok.errors


@pytest.mark.django_db
def test_the_approver_is_never_the_requester(onboarded: dict[str, Any], run_jobs: Any) -> None:
    world = onboarded
    request = services.do_create_request(
        world["alpha"], acting_user=world["pam"], kind="gpu-share", spec=SHARE
    )
    with pytest.raises(ValidationError, match="another platform admin"):
        services.do_approve(request, acting_user=world["pam"])
    with pytest.raises(PermissionDenied, match="platform admin"):
        services.do_approve(request, acting_user=world["alice"])
    request.refresh_from_db()
    assert request.state == S.SUBMITTED and request.change is None


@pytest.mark.django_db
def test_overcommit_needs_an_explicit_mark(
    onboarded: dict[str, Any], run_jobs: Any, make_user: Any
) -> None:
    world = onboarded
    world["alpha"].gpu_quota = 64
    world["alpha"].save()
    big = {**SHARE, "count": 60}
    first = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec=big,
    )
    first = _approve(first, world, run_jobs)
    _merge(first, world, run_jobs)
    services.advance_requests()
    world["bravo"].gpu_quota = 64
    world["bravo"].save()
    second = services.do_create_request(
        world["bravo"],
        acting_user=world["charlie"],
        kind="gpu-share",
        spec={**SHARE, "count": 30},
    )
    check = services.check_request(world["bravo"], "gpu-share", "train", second.spec)
    assert check.ok and [row.flavor for row in check.overcommit] == ["h200"]
    assert any("Overcommit" in w for w in check.warnings)
    with pytest.raises(ValidationError, match="overcommit"):
        services.do_approve(second, acting_user=world["pam"])
    second.refresh_from_db()
    assert second.state == S.SUBMITTED
    second = run_jobs(services.do_approve, second, acting_user=world["pam"], allow_overcommit=True)
    assert second.state == S.PR_OPEN and second.allow_overcommit
    assert second.change is not None and second.change.allow_overcommit


@pytest.mark.django_db
def test_a_stale_diff_is_not_approved(onboarded: dict[str, Any], run_jobs: Any) -> None:
    world = onboarded
    request = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
    )
    check = services.check_request(world["alpha"], "gpu-share", "train", SHARE)
    seen = services.digest(services.preview_changes(check))
    # Another share of alpha merges meanwhile: alpha's quota and queues on main change.
    other = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec={**SHARE, "name": "b"}
    )
    _merge(_approve(other, world, run_jobs), world, run_jobs)
    with pytest.raises(ValidationError, match="changed since you opened"):
        services.do_approve(request, acting_user=world["pam"], seen=seen)
    request.refresh_from_db()
    assert request.state == S.SUBMITTED


@pytest.mark.django_db
def test_a_failed_git_write_leaves_a_retryable_request(
    onboarded: dict[str, Any], run_jobs: Any, settings: Any, tmp_path: Any
) -> None:
    world = onboarded
    request = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
    )
    # The approval reads main (the request is checked against it), then writes the branch,
    # which the Git remote of this replica refuses: there is no repository at its address.
    settings.GITOPS_REMOTE_URL = str(tmp_path / "no-repository-here.git")
    request = run_jobs(services.do_approve, request, acting_user=world["pam"])
    assert request.state == S.APPROVED
    assert "Opening the pull request failed" in request.error
    assert not ChangeRequest.objects.filter(kind="gpu-share").exists()
    settings.GITOPS_REMOTE_URL = ""
    request = run_jobs(services.open_pull_request, request, acting_user=world["pam"])
    assert request.state == S.PR_OPEN and request.error == ""
    # A second retry from a page opened before the first (its copy still says "approved"):
    # the state is read under the request's lock, so it is refused and records nothing.
    stale = ResourceRequest.objects.get(pk=request.pk)
    stale.state = S.APPROVED
    with pytest.raises(ValidationError, match="Only an approved or failed request"):
        services.open_pull_request(stale, acting_user=world["pam"])
    request.refresh_from_db()
    assert request.state == S.PR_OPEN and request.error == ""
    assert ChangeRequest.objects.filter(kind="gpu-share").count() == 1


@pytest.mark.django_db
def test_reject_and_changes_requested(onboarded: dict[str, Any], run_jobs: Any) -> None:
    world = onboarded
    request = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
    )
    with pytest.raises(ValidationError):
        services.do_request_changes(request, acting_user=world["pam"], note=" ")
    run_jobs(services.do_request_changes, request, acting_user=world["pam"], note="ask for 1")
    request.refresh_from_db()
    assert request.state == S.CHANGES_REQUESTED
    request = services.do_update_request(
        request, acting_user=world["bob"], spec={**SHARE, "count": 1}
    )
    assert request.state == S.SUBMITTED and request.spec["count"] == 1
    run_jobs(services.do_reject, request, acting_user=world["pam"], note="no budget")
    request.refresh_from_db()
    assert request.state == S.REJECTED
    assert request.resource.state == Resource.State.WITHDRAWN
    assert any("rejected" in m.subject for m in mail.outbox)
    # the name is free again
    again = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
    )
    assert again.state == S.SUBMITTED
    with pytest.raises(ValidationError, match="cannot become"):
        services.do_reject(request, acting_user=world["pam"], note="again")


def test_every_state_is_reachable_and_terminal_states_stay() -> None:
    reachable = {S.DRAFT}
    frontier = [S.DRAFT]
    while frontier:
        for nxt in states.TRANSITIONS[frontier.pop()]:
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    assert reachable == set(S.values)
    assert {S.READY, S.REJECTED, S.CANCELLED, S.DECOMMISSIONED} == states.TERMINAL


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    return start_fleet()


def _reconcile(sim: Simulator) -> None:
    """Flux applies main; a fleet sync writes the tenants' Git Secrets into the namespaces that
    now exist (as the portal does); Flux then fetches the tenants' sources with them."""
    for _ in range(3):
        sim.tick()
    fleet.sync_all()
    for _ in range(3):
        sim.tick()


@pytest.mark.django_db
def test_an_endpoint_is_ready_when_the_cluster_serves_it_then_decommissioned(
    onboarded: dict[str, Any], run_jobs: Any, sim: Simulator
) -> None:
    world = onboarded
    share = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec=SHARE,
    )
    _merge(_approve(share, world, run_jobs), world, run_jobs)
    services.advance_requests()
    endpoint = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="endpoint",
        spec=ENDPOINT,
    )
    _merge(_approve(endpoint, world, run_jobs), world, run_jobs)
    _reconcile(sim)
    run_jobs(fleet.sync_all)
    run_jobs(services.advance_requests)
    share.refresh_from_db()
    endpoint.refresh_from_db()
    assert share.state == S.READY, share.error
    assert endpoint.state == S.READY, endpoint.error
    access = services.endpoint_access(endpoint)
    # The tenant's own host on the gateway, and the predictor inside the cluster.
    assert access["url"] == f"https://alpha.models.ai-factory.example.com/{endpoint.resource.name}"
    assert access["cluster_url"] == (
        f"http://{endpoint.resource.name}-predictor.alpha.svc.cluster.local/openai"
    )
    # That address is what KServe reports (status.address.url), read by the fleet sync.
    from fleet.models import FluxObject

    isvc = FluxObject.objects.get(kind="InferenceService", namespace="alpha", name="chat")
    assert isvc.address == "http://chat-predictor.alpha.svc.cluster.local"
    FluxObject.objects.filter(pk=isvc.pk).update(address="http://chat.alpha.example.internal")
    assert services.endpoint_access(endpoint)["cluster_url"] == (
        "http://chat.alpha.example.internal/openai"
    )
    assert access["model"] in access["curl"] and "/v1/chat/completions" in access["curl"]
    # The example carries the key header with a placeholder, never a key.
    assert '-H "x-api-key: $AI_FACTORY_API_KEY"' in access["curl"]

    # A share an endpoint runs on cannot go first.
    with pytest.raises(ValidationError, match="chat"):
        services.do_decommission_request(share.resource, acting_user=world["bob"])
    gone = run_jobs(
        services.do_decommission_request,
        endpoint.resource,
        acting_user=world["bob"],
        reason="done testing",
    )
    gone = _approve(gone, world, run_jobs)
    assert gone.state == S.DECOMMISSIONING
    assert gone.resource.state == Resource.State.DECOMMISSIONING
    _merge(gone, world, run_jobs)
    _reconcile(sim)
    run_jobs(fleet.sync_all)
    run_jobs(services.advance_requests)
    gone.refresh_from_db()
    assert gone.state == S.DECOMMISSIONED, gone.error
    assert gone.resource.state == Resource.State.DECOMMISSIONED
    assert not any(e.name == "chat" for e in services.desired_tenant(world["alpha"]).endpoints)


@pytest.mark.django_db
def test_a_closed_pull_request_fails_the_request_and_retry_opens_another(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    request = _approve(
        services.do_create_request(
            world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
        ),
        world,
        run_jobs,
    )
    first = request.change
    assert first is not None
    gitops.do_close(first, acting_user=world["pam"], reason="not now")
    services.advance_requests()
    request.refresh_from_db()
    assert request.state == S.FAILED and "closed without merging" in request.error
    request = run_jobs(services.open_pull_request, request, acting_user=world["pam"])
    assert request.state == S.PR_OPEN and request.change_id != first.pk


@pytest.mark.django_db
def test_open_siblings_are_rendered_again_after_a_merge(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    a = _approve(
        services.do_create_request(
            world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE
        ),
        world,
        run_jobs,
    )
    b = _approve(
        services.do_create_request(
            world["alpha"],
            acting_user=world["bob"],
            kind="gpu-share",
            spec={**SHARE, "name": "infer", "count": 1},
        ),
        world,
        run_jobs,
    )
    old = b.change
    _merge(a, world, run_jobs)
    run_jobs(services.advance_requests)
    b.refresh_from_db()
    assert b.change_id != old.pk and b.state == S.PR_OPEN
    old.refresh_from_db()
    assert old.status == "closed"
    # The queue file now holds both shares, but what b asks for is what pam approved (its
    # own spec file, from the same start): the approval is carried over.
    (review,) = b.change.reviews.all()
    assert review.reviewer == world["pam"] and "carried over" in review.body
    assert b.error == ""
    queues = gitops.repository().read_file(b.change.head_sha, "tenants/alpha/queues.yaml")
    assert nominal_gpus(queues, "h200") == 2 + 1
    _merge(b, world, run_jobs)  # merges cleanly: rendered with "train" already on main
    services.advance_requests()
    names = {s.name for s in services.desired_tenant(world["alpha"]).shares}
    assert names == {"train", "infer"}
    assert RequestEvent.objects.filter(request=b, to_state="merged").exists()


@pytest.mark.django_db
def test_an_expired_reservation_gets_its_decommission_pull_request(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    from datetime import date

    world = onboarded
    spec = {**SHARE, "until": "2030-01-31"}
    request = _approve(
        services.do_create_request(
            world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=spec
        ),
        world,
        run_jobs,
    )
    _merge(request, world, run_jobs)
    services.advance_requests()
    assert services.expire_reservations(date(2030, 1, 31)) == []
    opened = run_jobs(services.expire_reservations, date(2030, 2, 1))
    assert len(opened) == 1
    gone = opened[0]
    assert gone.action == "decommission" and gone.state == S.DECOMMISSIONING
    assert gone.change is not None and gone.change.kind == "decommission"
    assert "ended on 2030-01-31" in gone.reason
    assert services.expire_reservations(date(2030, 2, 2)) == []  # not twice
    # The reservation's end is the platform's decision: the tenant's admin cannot close it
    # away (issue 25), though the plain close rule would let them.
    from django.core.exceptions import PermissionDenied

    from gitops import services as gitops

    with pytest.raises(PermissionDenied, match="operate the fleet"):
        gitops.do_close(gone.change, acting_user=world["alice"])
    assert gone.change.close_action == "operate_fleet"


@pytest.mark.django_db
def test_the_pull_request_the_portal_opened_shows_on_the_change_pages(
    onboarded: dict[str, Any], run_jobs: Any, login: Callable[[str], Any]
) -> None:
    # Opened by the portal (no author) for bob: the change pages must still render.
    request = _approve(
        services.do_create_request(
            onboarded["alpha"], acting_user=onboarded["bob"], kind="gpu-share", spec=SHARE
        ),
        onboarded,
        run_jobs,
    )
    assert request.change is not None and request.change.author is None
    pam = login("pam")
    page = pam.get(f"/changes/{request.change_id}/")
    assert page.status_code == 200
    assert "requested by bob" in page.content.decode()
    assert "by bob" in pam.get("/changes/").content.decode()


@pytest.mark.django_db
def test_a_status_event_moves_requests_on_without_the_schedule(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    """The watcher's and the Flux hook's follow-up (fleet.signals) reaches the catalog."""
    from fleet.watch import follow_up

    world = onboarded
    request = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec=SHARE,
    )
    request = _approve(request, world, run_jobs)
    _merge(request, world, run_jobs)
    follow_up(changes=False, requests=True)
    request.refresh_from_db()
    assert request.state == S.MERGED
    ChangeRequest.objects.filter(pk=request.change_id).update(apply_state="applied")
    follow_up(changes=False, requests=True)
    request.refresh_from_db()
    assert request.state == S.READY


MIG_SHARE = {
    "name": "slices",
    "flavor": "h200-mig",
    "kind": "mig",
    "count": 4,
    "mig_profile": "1g.18gb",
}


@pytest.mark.django_db
def test_a_dedicated_tenant_gets_mig_only_with_the_opt_in(
    onboarded: dict[str, Any], merged_change: Callable[..., Any]
) -> None:
    world = onboarded
    refused = services.check_request(world["bravo"], "gpu-share", "slices", MIG_SHARE)
    assert refused.errors["kind"].startswith("MIG slices are off for a dedicated tenant")
    with pytest.raises(ValidationError) as caught:
        services.do_create_request(
            world["bravo"], acting_user=world["charlie"], kind="gpu-share", spec=MIG_SHARE
        )
    assert "MIG slices are off" in caught.value.message_dict["kind"][0]
    assert not ResourceRequest.objects.filter(tenant=world["bravo"]).exists()
    assert services.check_request(world["alpha"], "gpu-share", "slices", MIG_SHARE).ok
    # A platform admin's opt-in, merged: main's spec holds it, and the same request passes.
    merged_change(dataclasses.replace(tenant_spec(world["bravo"]), mig_allowed=True))
    allowed = services.check_request(world["bravo"], "gpu-share", "slices", MIG_SHARE)
    assert allowed.ok, allowed.errors
