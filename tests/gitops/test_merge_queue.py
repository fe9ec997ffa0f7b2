"""The merge queue on a real bare repository with the real checks: batches of changes squashed
onto main together, checked once, bisected when they fail, merged in one compare-and-swap."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.utils import timezone

from gitops import merge_queue, services
from gitops.checks import partition
from gitops.fleet import demo_fleet
from gitops.models import (
    ChangeRequest,
    CheckRun,
    MergeQueueBatch,
    MergeQueueEntry,
    MergeQueueLease,
)
from gitops.repo import GitRepository, format_message
from gitops.specs import GpuShare, TenantClusterSpec, TenantSpec
from portal.jobs import run_job
from portal.models import AuditEvent, Job
from tests.gitops.checks_support import FLOW_CHECKS, FLOW_CHECKS_STATE, flow_check_statuses

FLEET = demo_fleet()


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    return django_capture_on_commit_callbacks


def _approved(world: dict[str, Any], on_commit: Any, spec: TenantSpec) -> ChangeRequest:
    """A change opened without its own check run (as for the queue), approved by pam."""
    with on_commit(execute=True):
        change = services.open_tenant_change(
            acting_user=world["bob"],
            tenant=spec,
            fleet=FLEET,
            title=f"Change {spec.slug}",
            kind=ChangeRequest.Kind.TENANT,
            run_checks=False,
        )
    services.do_review(change, acting_user=world["pam"], state="approve")
    change.refresh_from_db()
    return change


def _merged(world: dict[str, Any], on_commit: Any, spec: TenantSpec) -> ChangeRequest:
    change = _approved(world, on_commit, spec)
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    change.refresh_from_db()
    with on_commit(execute=True):
        return services.do_merge(change, acting_user=world["pam"])


def _enqueue_and_kick(world: dict[str, Any], on_commit: Any, changes: list[ChangeRequest]) -> None:
    """Queue every change first, then run each enqueue's kick after all of them committed
    (as a burst's approvals do), the runs the kicks queue held back (not dispatched)."""
    with on_commit(execute=False) as callbacks:
        for change in changes:
            services.do_enqueue_merge(change, acting_user=world["pam"])
    assert len(callbacks) == len(changes)
    with on_commit(execute=False):
        for kick in callbacks:
            kick()


def _enqueue_all(world: dict[str, Any], on_commit: Any, changes: list[ChangeRequest]) -> None:
    """Queue every change first (their runs held back), then let the first run take them."""
    _enqueue_and_kick(world, on_commit, changes)
    # One waiting run is enough for all of them.
    first = Job.objects.get(task="gitops.merge_queue", status="queued")
    with on_commit(execute=True):
        run_job(first.pk)


def _share(slug: str, count: int = 1) -> TenantSpec:
    return TenantSpec(
        slug=slug, shares=(GpuShare(name="train", flavor="h200", kind="whole", count=count),)
    )


def test_a_batch_merges_one_commit_per_change_in_order_with_one_check_run(
    world: dict[str, Any], on_commit: Any
) -> None:
    for slug in ("t1", "t2", "t3"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    before = services.main_sha()
    changes = [_approved(world, on_commit, _share(slug)) for slug in ("t1", "t2", "t3")]
    assert not Job.objects.filter(
        task="gitops.run_checks", kwargs__change_id__in=[c.pk for c in changes]
    ).exists()
    _enqueue_all(world, on_commit, changes)

    batch = MergeQueueBatch.objects.get()
    assert (batch.state, batch.size, batch.merged, batch.check_runs) == ("merged", 3, 3, 1)
    repo = services.repository()
    shas = []
    for change in changes:
        change.refresh_from_db()
        assert change.status == "merged" and change.checks_state == FLOW_CHECKS_STATE
        shas.append(change.merge_sha)
        message = repo.commit_message(change.merge_sha)
        assert f"Change-Request: {change.pk}" in message
        assert "Approved-by: pam <pam@example.com>" in message
        assert "Merged-by: pam <pam@example.com>" in message
        assert f"Merge-Queue-Batch: {batch.pk}" in message
        runs = CheckRun.objects.filter(change=change, sha=change.head_sha)
        assert flow_check_statuses(runs) == FLOW_CHECKS, [(r.name, r.summary) for r in runs]
        assert all(r.summary.startswith(f"merge queue batch {batch.pk}:") for r in runs)
    # A chain on the old tip, in the order queued, and main at its end.
    assert repo.parents(shas[0]) == [before]
    assert repo.parents(shas[1]) == [shas[0]]
    assert repo.parents(shas[2]) == [shas[1]]
    assert repo.head("main") == shas[2] == batch.tip_sha
    for slug in ("t1", "t2", "t3"):
        assert b"h200" in (repo.read_file("main", f"tenants/{slug}/queues.yaml") or b"")
    assert set(MergeQueueEntry.objects.values_list("state", flat=True)) == {"merged"}
    assert AuditEvent.objects.filter(action="change.merge").count() == 3 + 3
    # The batch is published once (its tenants projected together), not once per change.
    publish = Job.objects.filter(task="gitops.after_merge", status="succeeded")
    assert publish.count() == 3 + 1
    batch_publish = publish.get(title=f"Publish merge queue batch {batch.pk}")
    assert sorted(batch_publish.kwargs["change_ids"]) == sorted(c.pk for c in changes)
    assert "published at" in batch_publish.log or batch_publish.progress == 100


def test_side_by_side_onboardings_merge_in_one_batch_with_the_index_rendered_again(
    world: dict[str, Any], on_commit: Any
) -> None:
    changes = [_approved(world, on_commit, TenantSpec(slug=s)) for s in ("delta", "echo")]
    assert changes[0].base_sha == changes[1].base_sha  # both add a line to the index
    _enqueue_all(world, on_commit, changes)
    index = services.repository().read_file("main", services.TENANT_INDEX) or b""
    assert b"- delta" in index and b"- echo" in index
    assert ChangeRequest.objects.filter(status="merged").count() == 2


def _second_of_two_on_alpha(
    world: dict[str, Any], on_commit: Any, *, cpu_quotas: tuple[int, int]
) -> MergeQueueEntry:
    """Two changes of alpha from the same main, with these CPU quotas, queued together: the
    first merges, the second stays open; the second's queue entry."""
    _merged(world, on_commit, TenantSpec(slug="alpha"))
    first, second = (
        _approved(world, on_commit, TenantSpec(slug="alpha", cpu_quota=quota))
        for quota in cpu_quotas
    )
    _enqueue_all(world, on_commit, [first, second])
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == "merged" and second.status == "open"
    return MergeQueueEntry.objects.get(change=second)


def test_a_conflicting_change_is_taken_out_and_the_others_merge(
    world: dict[str, Any], on_commit: Any
) -> None:
    entry = _second_of_two_on_alpha(world, on_commit, cpu_quotas=(10, 20))
    assert entry.state == "failed" and "conflicts" in entry.reason
    # Both set alpha's settings: a true conflict, in the spec both write (not in what is
    # rendered from it, which the queue renders again).
    assert "tenants/alpha/spec/tenant.json" in entry.reason


def test_a_change_writing_what_one_before_it_wrote_is_taken_out_as_nothing_to_merge(
    world: dict[str, Any], on_commit: Any
) -> None:
    """Two changes rendered from the same main to the same files (two requests of one tenant
    whose files come out alike): the first merges; the second would change nothing, and says
    so without claiming that it is on main."""
    entry = _second_of_two_on_alpha(world, on_commit, cpu_quotas=(10, 10))
    assert entry.state == "failed"
    assert entry.reason.startswith("nothing to merge: main, with the changes before it in this")


def test_a_failing_change_is_found_by_bisection_and_the_others_merge(
    world: dict[str, Any], on_commit: Any
) -> None:
    # llm + platform-x is on main; llm-platform + x writes the same HelmRelease.
    _merged(world, on_commit, TenantSpec(slug="llm", clusters=(TenantClusterSpec("platform-x"),)))
    for slug in ("t1", "t2", "t3"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    good = [_approved(world, on_commit, _share(slug)) for slug in ("t1", "t2", "t3")]
    bad = _approved(
        world, on_commit, TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec("x"),))
    )
    _enqueue_all(world, on_commit, [good[0], bad, good[1], good[2]])

    batch = MergeQueueBatch.objects.get()
    # The whole batch; its first half; the good change of it alone, then the bad one on top
    # (found); the second half on top of the good one.
    assert batch.check_runs == 5
    assert batch.merged == 3
    bad.refresh_from_db()
    assert bad.status == "open" and bad.checks_state == "failed"
    failed = CheckRun.objects.get(change=bad, sha=bad.head_sha, name="duplicates")
    assert failed.status == "failed"
    assert "HelmRelease.helm.toolkit.fluxcd.io/flux-system/llm-platform-x" in failed.details[0]
    entry = MergeQueueEntry.objects.get(change=bad)
    assert entry.state == "failed" and "duplicates" in entry.reason
    repo = services.repository()
    merged = [ChangeRequest.objects.get(pk=c.pk) for c in good]
    assert [c.status for c in merged] == ["merged"] * 3
    assert repo.parents(merged[1].merge_sha) == [merged[0].merge_sha]
    assert repo.head("main") == merged[2].merge_sha


def test_changes_that_fit_alone_but_not_together_are_told_apart(
    world: dict[str, Any], on_commit: Any, settings: Any
) -> None:
    """The second half is checked on top of the first, so a pair that overcommits the fleet
    together is caught although each half passes alone."""
    h200 = FLEET.flavor("h200")
    assert h200 is not None
    total = h200.gpus
    for slug in ("big1", "big2"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    first = _approved(world, on_commit, _share("big1", total - 1))
    second = _approved(world, on_commit, _share("big2", 2))
    _enqueue_all(world, on_commit, [first, second])
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == ("merged", "open")
    assert (
        CheckRun.objects.get(change=second, sha=second.head_sha, name="capacity").status == "failed"
    )


def test_only_who_may_merge_queues_and_only_an_approved_change(
    world: dict[str, Any], on_commit: Any
) -> None:
    with on_commit(execute=True):
        change = services.open_tenant_change(
            acting_user=world["bob"],
            tenant=TenantSpec(slug="alpha"),
            fleet=FLEET,
            title="t",
            kind="tenant",
            run_checks=False,
        )
    for name in ("alice", "bob", "charlie", "fiona", "vic"):
        with pytest.raises(PermissionDenied):
            services.do_enqueue_merge(change, acting_user=world[name])
    with pytest.raises(ValidationError, match="0 of 1 required approvals"):
        services.do_enqueue_merge(change, acting_user=world["pam"])
    services.do_review(change, acting_user=world["pam"], state="approve")
    with on_commit(execute=False):
        services.do_enqueue_merge(change, acting_user=world["pam"])
        with pytest.raises(ValidationError, match="already in the merge queue"):
            services.do_enqueue_merge(change, acting_user=world["pam"])
    assert MergeQueueEntry.objects.filter(change=change).count() == 1
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="failed")
    change.refresh_from_db()
    assert services.queue_blockers(change) == ["Checks failed."]


def test_a_change_taken_out_or_closed_is_not_merged(world: dict[str, Any], on_commit: Any) -> None:
    _merged(world, on_commit, TenantSpec(slug="alpha"))
    _merged(world, on_commit, TenantSpec(slug="t1"))
    out = _approved(world, on_commit, _share("alpha"))
    closed = _approved(world, on_commit, _share("t1"))
    main = services.main_sha()
    with on_commit(execute=False):
        services.do_enqueue_merge(out, acting_user=world["pam"])
        services.do_enqueue_merge(closed, acting_user=world["pam"])
    with pytest.raises(PermissionDenied):
        services.do_dequeue(out, acting_user=world["alice"])
    services.do_dequeue(out, acting_user=world["pam"], reason="not now")
    services.do_close(closed, acting_user=world["pam"])
    with pytest.raises(ValidationError, match="not in the merge queue"):
        services.do_dequeue(out, acting_user=world["pam"])
    assert (
        merge_queue.run_queue("test", lambda line: None) == "0 batches: 0 changes merged, 0 failed"
    )
    assert services.main_sha() == main
    states = dict(MergeQueueEntry.objects.values_list("change_id", "state"))
    assert states == {out.pk: "removed", closed.pk: "removed"}
    assert AuditEvent.objects.filter(action="change.dequeue").count() == 1


def test_main_moving_during_the_batch_rebuilds_it_on_the_new_tip(
    world: dict[str, Any], on_commit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for slug in ("t1", "t2", "other"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    changes = [_approved(world, on_commit, _share(slug)) for slug in ("t1", "t2")]
    real = merge_queue.run_checks
    moved: list[str] = []

    def checks_while_another_writer_merges(*args: Any, **kwargs: Any) -> Any:
        # A real write to main by someone else while the batch is being checked.
        if not moved:
            repo = services.repository()
            tip = repo.head("main")
            moved.append(
                repo.commit(
                    services.tenant_changes(TenantSpec(slug="other", cpu_quota=12), FLEET),
                    message=format_message("Another writer"),
                    author=services.identity(None),
                    branch="main",
                    expected_parent=tip,
                )
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(merge_queue, "run_checks", checks_while_another_writer_merges)
    _enqueue_all(world, on_commit, changes)
    batch = MergeQueueBatch.objects.get()
    assert (batch.rebuilds, batch.check_runs, batch.merged) == (1, 2, 2)
    assert batch.base_sha == moved[0]
    first = ChangeRequest.objects.get(pk=changes[0].pk)
    repo = services.repository()
    assert repo.parents(first.merge_sha) == moved[0:1]
    assert b"12" in (repo.read_file("main", "tenants/other/quota.yaml") or b"")


def test_one_runner_at_a_time_and_an_interrupted_batch_is_taken_up_again(
    world: dict[str, Any], on_commit: Any
) -> None:
    _merged(world, on_commit, TenantSpec(slug="t1"))
    change = _approved(world, on_commit, _share("t1"))
    with on_commit(execute=False):
        services.do_enqueue_merge(change, acting_user=world["pam"])
    assert merge_queue.acquire_lease("a worker that will die")
    assert merge_queue.run_queue("test", lambda line: None).startswith("another runner")
    # The dead worker had claimed the change into a batch of its own.
    batch, entries = merge_queue._claim("a worker that will die")
    assert batch is not None and [e.change_id for e in entries] == [change.pk]
    assert merge_queue.run_queue("test", lambda line: None).startswith("another runner")
    MergeQueueLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    lines: list[str] = []
    assert merge_queue.run_queue("test", lines.append).endswith("1 changes merged, 0 failed")
    assert "1 changes of an interrupted batch are queued again" in lines
    change.refresh_from_db()
    assert change.status == "merged"
    assert MergeQueueLease.objects.get().holder == ""


# --- pages and API -----------------------------------------------------------------------------


def test_the_change_page_offers_the_queue_and_the_queue_page_shows_it(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client]
) -> None:
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    pam = login("pam")
    page = pam.get(f"/changes/{change.pk}/").content.decode()
    assert "Add to merge queue" in page
    with on_commit(execute=False):
        response = pam.post(f"/changes/{change.pk}/enqueue/")
    assert response.status_code == 302
    assert MergeQueueEntry.objects.get(change=change).state == "queued"
    queue = pam.get("/changes/queue/").content.decode()
    assert f"#{change.pk}" in queue and "Queued" in queue
    page = pam.get(f"/changes/{change.pk}/").content.decode()
    assert "Take out of the queue" in page
    pam.post(f"/changes/{change.pk}/dequeue/")
    assert MergeQueueEntry.objects.get(change=change).state == "removed"


@pytest.mark.parametrize("who", ["charlie", "nora"])
def test_outsiders_get_404_on_the_queue_actions(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client], who: str
) -> None:
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    client = login(who)
    for action in ("enqueue", "dequeue"):
        assert client.post(f"/changes/{change.pk}/{action}/").status_code == 404
    assert not MergeQueueEntry.objects.exists()


def test_the_queue_page_is_for_platform_admins(login: Callable[[str], Client]) -> None:
    for who in ("alice", "fiona", "nora"):
        assert login(who).get("/changes/queue/").status_code == 403
    assert login("pam").get("/changes/queue/").status_code == 200


def test_members_cannot_queue_their_tenants_change(
    world: dict[str, Any], on_commit: Any, login: Callable[[str], Client]
) -> None:
    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    assert login("alice").post(f"/changes/{change.pk}/enqueue/").status_code == 403
    assert not MergeQueueEntry.objects.exists()


def test_the_api_queues_a_change_and_shows_it(
    world: dict[str, Any], on_commit: Any, django_user_model: Any
) -> None:
    from api.tokens import do_create_token

    change = _approved(world, on_commit, TenantSpec(slug="alpha"))
    text = do_create_token(
        acting_user=world["pam"], owner=world["pam"], name="pam", scope="admin", expires_in_days=1
    )[1]
    pam = Client(HTTP_AUTHORIZATION=f"Bearer {text}")
    with on_commit(execute=False):
        response = pam.post(f"/api/v1/changes/{change.pk}/enqueue/", "{}", "application/json")
    assert response.status_code == 200, response.content
    assert response.json()["merge_queue"]["state"] == "queued"
    again = pam.post(f"/api/v1/changes/{change.pk}/enqueue/", "{}", "application/json")
    assert again.status_code == 400 and "already in the merge queue" in again.content.decode()
    out = pam.post(f"/api/v1/changes/{change.pk}/dequeue/", "{}", "application/json")
    assert out.status_code == 200 and out.json()["merge_queue"]["state"] == "removed"


@pytest.mark.db_engine
def test_the_queue_page_costs_the_same_queries_for_3_and_30_entries(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    pam = login("pam")

    def grow(count: int) -> None:
        for n in range(count):
            change = ChangeRequest.objects.create(title=f"c{n}", tenant_slug="alpha")
            state = ("queued", "checking", "merged", "failed")[n % 4]
            batch = MergeQueueBatch.objects.create(size=1) if state != "queued" else None
            MergeQueueEntry.objects.create(
                change=change, enqueued_by=world["pam"], state=state, batch=batch, reason="r"
            )

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert pam.get("/changes/queue/").status_code == 200
        return len(captured)

    grow(3)
    small = count()
    grow(27)
    assert count() == small


@pytest.mark.db_engine
def test_a_batch_reads_its_changes_and_reviews_in_the_same_queries_for_2_and_6(
    world: dict[str, Any], on_commit: Any, settings: Any
) -> None:
    """Who may still merge is decided for the whole batch at once, not a query per change."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for slug in ("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    changes = [_approved(world, on_commit, _share(f"t{n}")) for n in range(1, 9)]
    with on_commit(execute=False):  # queued, no run started
        for change in changes:
            services.do_enqueue_merge(change, acting_user=world["pam"])

    def admit(size: int) -> tuple[int, int]:
        settings.GITOPS_MERGE_QUEUE_BATCH = size
        _, entries = merge_queue._claim("test")
        with CaptureQueriesContext(connection) as captured:
            members = merge_queue._admissible(entries)
        assert [m.change.pk for m in members] == [e.change_id for e in entries]
        assert all(m.approved_by == "pam <pam@example.com>" for m in members)
        return len(members), len(captured)

    assert admit(2)[1] == admit(6)[1] == 3


# --- a runner that died after main moved, and a Git remote as the truth ------------------------


def test_a_batch_whose_runner_died_after_main_moved_is_recorded_not_merged_twice(
    world: dict[str, Any], on_commit: Any
) -> None:
    _merged(world, on_commit, TenantSpec(slug="t1"))
    change = _approved(world, on_commit, _share("t1"))
    with on_commit(execute=False):
        services.do_enqueue_merge(change, acting_user=world["pam"])
    assert merge_queue.acquire_lease("a worker that will die")
    batch, entries = merge_queue._claim("a worker that will die")
    assert batch is not None and [e.change_id for e in entries] == [change.pk]
    # It moved main to its chain, then died before the rows committed.
    repo = services.repository()
    message = format_message(change.title, "", {"Change-Request": str(change.pk)})
    pushed = repo.merge(change.branch, message=message, author=services.identity(None), into="main")
    MergeQueueLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    lines: list[str] = []
    merge_queue.run_queue("test", lines.append)

    change.refresh_from_db()
    assert (change.status, change.merge_sha) == ("merged", pushed)
    assert repo.head("main") == pushed  # nothing merged a second time
    assert "1 changes of an interrupted batch were on main already" in lines
    assert MergeQueueEntry.objects.get(change=change).state == "merged"


def test_the_queue_writes_a_git_remote_and_waits_visibly_while_it_is_unreachable(
    world: dict[str, Any], on_commit: Any, settings: Any, tmp_path: Path
) -> None:
    remote = tmp_path / "truth.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    settings.GITOPS_REMOTE_URL = str(remote)
    settings.GITOPS_REMOTE_TIMEOUT_SECONDS = 5
    for slug in ("t1", "t2"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    first = [_approved(world, on_commit, _share(slug)) for slug in ("t1", "t2")]
    _enqueue_all(world, on_commit, first)
    on_remote = GitRepository(remote, main="main")
    for change in first:
        change.refresh_from_db()
        assert change.status == "merged"
        assert on_remote.is_ancestor(change.merge_sha, on_remote.head("main") or "")
    tip = on_remote.head("main")

    later = _approved(world, on_commit, TenantSpec(slug="t1", shares=_share("t1", 2).shares))
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings.GITOPS_REMOTE_URL = f"git://127.0.0.1:{closed}/truth.git"
    settings.GITOPS_REMOTE_WAIT_SECONDS = 1
    with on_commit(execute=False) as kicks:
        services.do_enqueue_merge(later, acting_user=world["pam"])
    with on_commit(execute=False):
        for kick in kicks:
            kick()
    job = Job.objects.get(task="gitops.merge_queue", status="queued")
    with on_commit(execute=True):
        run_job(job.pk)

    later.refresh_from_db()
    assert later.status == "open"
    entry = MergeQueueEntry.objects.get(change=later)
    assert entry.state == "queued" and entry.reason.startswith("Waiting for the Git remote")
    assert on_remote.head("main") == tip  # the remote did not move
    assert services.repository().head("main") == tip  # and the mirror did not fork


def test_a_burst_of_enqueues_makes_one_waiting_run(world: dict[str, Any], on_commit: Any) -> None:
    for slug in ("t1", "t2", "t3"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    changes = [_approved(world, on_commit, _share(slug)) for slug in ("t1", "t2", "t3")]
    before = Job.objects.filter(task="gitops.merge_queue").count()
    _enqueue_and_kick(world, on_commit, changes)
    assert Job.objects.filter(task="gitops.merge_queue").count() == before + 1
    run = Job.objects.get(task="gitops.merge_queue", status="queued")
    with on_commit(execute=True):
        run_job(run.pk)
    assert {c.status for c in ChangeRequest.objects.filter(pk__in=[c.pk for c in changes])} == {
        "merged"
    }
    # Once that run has started, the next change makes a run of its own.
    later = _approved(world, on_commit, TenantSpec(slug="t1", shares=_share("t1", 2).shares))
    _enqueue_and_kick(world, on_commit, [later])
    assert Job.objects.filter(task="gitops.merge_queue", status="queued").count() == 1


def test_a_change_queued_while_a_runner_works_starts_no_run_and_the_runner_takes_it(
    world: dict[str, Any], on_commit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a runner holds the lease an enqueue queues no run of its own (in a burst each
    would only find the lease taken); the runner looks at the queue once more after letting
    the lease go, so a change that arrived as it finished is merged by it."""
    _merged(world, on_commit, TenantSpec(slug="t1"))
    first = _approved(world, on_commit, _share("t1"))
    late = _approved(world, on_commit, TenantSpec(slug="t2"))
    with on_commit(execute=False):
        services.do_enqueue_merge(first, acting_user=world["pam"])
    runs_before = Job.objects.filter(task="gitops.merge_queue").count()
    real_release = merge_queue.release_lease
    arrived: list[int] = []

    def release(holder: str) -> None:
        if not arrived:  # an approval lands just as the runner finishes its last batch
            assert merge_queue.lease_held()
            with on_commit(execute=True):
                services.do_enqueue_merge(late, acting_user=world["pam"])
            arrived.append(late.pk)
        real_release(holder)

    monkeypatch.setattr(merge_queue, "release_lease", release)
    outcome = merge_queue.run_queue("test", lambda line: None)
    assert outcome == "2 batches: 2 changes merged, 0 failed", outcome
    assert arrived == [late.pk]
    assert Job.objects.filter(task="gitops.merge_queue").count() == runs_before
    late.refresh_from_db()
    assert late.status == "merged"
    assert not merge_queue.lease_held()


def test_a_lease_expired_with_its_runner_does_not_hold_back_a_run(
    world: dict[str, Any], on_commit: Any
) -> None:
    _merged(world, on_commit, TenantSpec(slug="t1"))
    change = _approved(world, on_commit, _share("t1"))
    assert merge_queue.acquire_lease("a worker that died")
    MergeQueueLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not merge_queue.lease_held()
    _enqueue_and_kick(world, on_commit, [change])
    assert Job.objects.filter(task="gitops.merge_queue", status="queued").count() == 1


def test_warming_keeps_mains_tree_and_every_tenants_values(
    world: dict[str, Any], on_commit: Any
) -> None:
    """What a worker does when it starts: the next batch finds main's tree at hand and every
    tenant's check values kept, and computes only the tenants its changes touch."""
    assert merge_queue.warm(lambda line: None) == "no main yet: nothing to warm"
    for slug in ("t1", "t2", "t3"):
        _merged(world, on_commit, TenantSpec(slug=slug))
    partition.store("memory").clear_memory()
    merge_queue._LAST_TREE.clear()
    said = merge_queue.warm(lambda line: None)
    main = services.main_sha()
    assert main is not None and said.startswith(f"warm: main {main[:12]}, 3 tenants")
    assert set(merge_queue._LAST_TREE) == {main}
    assert "computed 0" not in said  # nothing was kept before: every value computed
    assert "kept 0," not in merge_queue.warm(lambda line: None)  # kept now

    change = _approved(world, on_commit, _share("t2"))
    with on_commit(execute=True):  # the queue's run follows, here
        services.do_enqueue_merge(change, acting_user=world["pam"])
    change.refresh_from_db()
    assert change.status == "merged"
    # Only t2 computed (its five rules), the other tenants' values kept.
    log = Job.objects.filter(task="gitops.merge_queue").latest("pk").log
    [line] = [line for line in log.splitlines() if "merged onto" in line]
    assert "computed 5)" in line and "kept 10," in line, line
