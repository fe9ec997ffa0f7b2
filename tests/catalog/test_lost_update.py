"""Nothing merged is ever lost (issue 24): every change of a tenant is rendered from what main
holds plus its own request, and requests of one tenant approved together each land whole, with
their approval and their "and merge" intent, through the real merge queue and the simulator.

The reported sequence: endpoint ``chat`` merged (its commit on main), a second request of the
same tenant rendered while ``chat`` was not yet reported ready, merged by the queue: its
commit deleted chat's files and Flux pruned the running InferenceService."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from catalog import services
from catalog.models import Resource, ResourceRequest
from fleet import services as fleet
from gitops import merge_queue
from gitops import services as gitops
from gitops.models import MergeQueueBatch
from simulator import Simulator
from tests.support.kueue import nominal_gpus

S = ResourceRequest.State
TRAIN = {"name": "train", "flavor": "h200", "kind": "whole", "count": 4}

# Locking and ordering of merges decide the outcome: run on SQLite as well as PostgreSQL.
pytestmark = [pytest.mark.django_db, pytest.mark.db_engine]


def _endpoint(name: str) -> dict[str, Any]:
    return {"name": name, "model_uri": f"hf://org/{name}", "share": "train", "gpus_per_replica": 1}


def _share(name: str) -> dict[str, Any]:
    return {"name": name, "flavor": "h200", "kind": "whole", "count": 1}


def _ask(world: dict[str, Any], run_jobs: Any, kind: str, spec: dict[str, Any]) -> Any:
    return run_jobs(
        services.do_create_request, world["alpha"], acting_user=world["bob"], kind=kind, spec=spec
    )


def _main(path: str) -> bytes | None:
    return gitops.repository().read_file(gitops.main_sha() or "", path)


def _reconcile(sim: Simulator, run_jobs: Any) -> None:
    """Flux applies main (the fleet sync writes the tenants' Git Secrets as the portal does),
    then the portal moves the requests on from what the cluster says."""
    for _ in range(3):
        sim.tick()
    fleet.sync_all()
    for _ in range(3):
        sim.tick()
    fleet.sync_all()
    run_jobs(services.advance_requests)
    run_jobs(services.advance_requests)


@pytest.fixture
def alpha(
    onboarded: dict[str, Any], run_jobs: Any, start_fleet: Callable[..., Simulator]
) -> tuple[dict[str, Any], Simulator]:
    """alpha with share ``train`` (4 H200) merged, applied and ready; quota room for more."""
    world = onboarded
    world["alpha"].gpu_quota = 64
    world["alpha"].save()
    sim = start_fleet()
    train = _ask(world, run_jobs, "gpu-share", TRAIN)
    run_jobs(services.do_approve, train, acting_user=world["pam"], merge=True)
    _reconcile(sim, run_jobs)
    train.refresh_from_db()
    assert train.state == S.READY, train.error
    return world, sim


def test_a_request_rendered_before_the_one_merged_ahead_is_ready_keeps_it(
    alpha: tuple[dict[str, Any], Simulator], run_jobs: Any
) -> None:
    world, sim = alpha
    chat = _ask(world, run_jobs, "endpoint", _endpoint("chat"))
    chat = run_jobs(services.do_approve, chat, acting_user=world["pam"], merge=True)
    assert chat.change is not None
    chat.change.refresh_from_db()
    assert chat.change.status == "merged"
    # chat is on main; the database has not followed yet (no advance, no cluster report).
    assert Resource.objects.get(name="chat").state == Resource.State.PENDING
    big = _ask(world, run_jobs, "endpoint", _endpoint("big"))
    big = run_jobs(services.do_approve, big, acting_user=world["pam"], merge=True)
    assert big.change is not None
    big.change.refresh_from_db()
    assert big.change.status == "merged"
    deleted = [d.path for d in gitops.repository().diff(big.change.base_sha, big.change.merge_sha)]
    assert not any("chat" in path for path in deleted), deleted
    for name in ("chat", "big"):
        assert _main(f"tenants/alpha/workloads/endpoints/{name}.yaml") is not None
        assert _main(f"tenants/alpha/litellm/{name}.yaml") is not None
        assert _main(f"tenants/alpha/spec/endpoints/{name}.json") is not None
    _reconcile(sim, run_jobs)
    for request in (chat, big):
        request.refresh_from_db()
        assert request.state == S.READY, (request.title, request.state, request.error)
    for name in ("chat", "big"):  # both run in the cluster: nothing was pruned
        assert sim.get_object("inferenceservices", "alpha", name)["metadata"]["name"] == name


def test_three_shares_approved_and_merged_one_after_another_all_land(
    alpha: tuple[dict[str, Any], Simulator], run_jobs: Any
) -> None:
    world, sim = alpha
    requests = [_ask(world, run_jobs, "gpu-share", _share(f"s{n}")) for n in range(3)]
    for request in requests:
        run_jobs(services.do_approve, request, acting_user=world["pam"], merge=True)
    assert nominal_gpus(_main("tenants/alpha/queues.yaml"), "h200") == 4 + 3
    _reconcile(sim, run_jobs)
    for request in requests:
        request.refresh_from_db()
        assert request.state == S.READY, (request.title, request.state, request.error)
        assert request.change is not None and request.change.status == "merged"
        assert request.change.reviews.filter(reviewer=world["pam"], state="approve").exists()


def test_thirty_shares_approved_together_land_in_one_batch_with_their_approvals(
    alpha: tuple[dict[str, Any], Simulator], run_jobs: Any
) -> None:
    world, sim = alpha
    requests = [_ask(world, run_jobs, "gpu-share", _share(f"s{n:02}")) for n in range(30)]
    # "Approve selected" while the queue's runner is busy elsewhere: all thirty are queued,
    # each opened from the same main, before one batch takes them all.
    assert merge_queue.acquire_lease("a runner busy with another batch")
    job = run_jobs(
        services.do_approve_many, [r.pk for r in requests], acting_user=world["pam"], merge=True
    )
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert "not approved" not in job.log
    merge_queue.release_lease("a runner busy with another batch")
    outcome = merge_queue.run_queue("test", lambda line: None)
    assert outcome.endswith("30 changes merged, 0 failed"), outcome
    assert MergeQueueBatch.objects.filter(merged=30).count() == 1
    assert nominal_gpus(_main("tenants/alpha/queues.yaml"), "h200") == 4 + 30
    for n in range(30):
        assert _main(f"tenants/alpha/spec/shares/s{n:02}.json") is not None
    _reconcile(sim, run_jobs)
    for request in requests:
        request.refresh_from_db()
        assert request.state == S.READY, (request.title, request.state, request.error)


def test_a_sibling_merging_while_an_approval_renders_is_not_taken_away(
    alpha: tuple[dict[str, Any], Simulator], run_jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the approval burst with ten requests per tenant (docs/benchmarks.md): an
    approval read main's spec of the tenant (without the sibling merging that moment), then
    diffed its render against, and branched from, main after the sibling's merge, so its
    change deleted the sibling's files (the scope check refused it; nothing was lost, but the
    request failed). Main is now read once per approval (gitops.services.reading_main)."""
    world, _ = alpha
    first = _ask(world, run_jobs, "gpu-share", _share("first"))
    first = run_jobs(services.do_approve, first, acting_user=world["pam"], merge=False)
    assert first.change is not None
    second = _ask(world, run_jobs, "gpu-share", _share("second"))
    checked = services.check_request

    def check_then_sibling_merges(*args: Any, **kwargs: Any) -> Any:
        result = checked(*args, **kwargs)
        if args[2] == "second":  # the second's approval, after it read main
            change = first.change
            type(change).objects.filter(pk=change.pk).update(checks_state="passed")
            change.refresh_from_db()
            gitops.do_merge(change, acting_user=world["pam"])
        return result

    monkeypatch.setattr(services, "check_request", check_then_sibling_merges)
    second = run_jobs(services.do_approve, second, acting_user=world["pam"], merge=True)
    assert second.change is not None
    second.change.refresh_from_db()
    assert second.change.status == "merged", second.error
    assert second.change.files_changed and not any(
        "first" in path for path in second.change.files_changed
    ), second.change.files_changed
    for name in ("first", "second"):
        assert _main(f"tenants/alpha/spec/shares/{name}.json") is not None
    assert nominal_gpus(_main("tenants/alpha/queues.yaml"), "h200") == 4 + 2
