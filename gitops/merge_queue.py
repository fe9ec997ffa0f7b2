"""The merge queue's batches: many approved changes checked once and merged together.

Merging one change at a time runs the checks once per change, over the whole tree, and a
burst of a thousand approvals then waits for a thousand check runs. A batch instead takes up
to ``GITOPS_MERGE_QUEUE_BATCH`` queued changes in the order they were queued and:

1. squashes each change's branch onto main's tip, one after another, in memory
   (``GitRepository.squash_chain``): one commit per change with its own message and trailers,
   as a single merge makes; a change that clashes with those before it is taken out;
2. runs the checks once over the combined tree, with the union of the changed files and main's
   tip before the batch as the base;
3. when they pass, moves main to the chain's tip in one compare-and-swap through
   ``services.write_main`` and records every change merged as its own commit of the chain;
4. when they fail, bisects: the first half is checked on the base, then the second half on top
   of what passed, recursively, until each failing change is found alone; those fail with the
   findings as their check runs, the others merge. Checking the second half on top of the
   first (not on the base alone) catches changes that pass alone and fail together (two GPU
   shares that each fit, but not both);
5. when main moved meanwhile (the compare-and-swap lost), the chain is built again on the new
   tip and checked again.

Only one batch runs at a time, across processes and replicas: the runner holds the lease row
(``MergeQueueLease``) for as long as it works through the queue.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Prefetch, Q
from django.utils import timezone

from gitops import services
from gitops.checks import CheckResult, partition, run_checks
from gitops.fleet import configured_fleet
from gitops.models import (
    ChangeRequest,
    CheckRun,
    MergeQueueBatch,
    MergeQueueEntry,
    MergeQueueLease,
    Review,
    checks_may_merge,
)
from gitops.repo import (
    Chain,
    ChainItem,
    GitRepository,
    MergeConflict,
    RefConflict,
    RemoteUnavailable,
    Snapshot,
)
from gitops.schemas import schema_source
from portal.jobs import enqueue

logger = logging.getLogger(__name__)

E = MergeQueueEntry.State
Log = Callable[[str], None]

# How often a batch is built again when main keeps moving under it before it gives up (its
# changes go back to the queue for the next run).
REBUILDS = 3


# --- the lease: one runner at a time ---------------------------------------------------------


def new_holder(label: str) -> str:
    return f"{label} {uuid.uuid4().hex[:8]}"[:64]


def acquire_lease(holder: str) -> bool:
    """Take the runner's lease when it is free or expired; False when another runner has it."""
    now = timezone.now()
    until = now + timedelta(seconds=settings.GITOPS_MERGE_QUEUE_LEASE_SECONDS)
    free = Q(holder="") | Q(expires_at__lt=now) | Q(holder=holder)
    if MergeQueueLease.objects.filter(free, pk=1).update(holder=holder, expires_at=until):
        return True
    try:
        with transaction.atomic():
            MergeQueueLease.objects.create(pk=1, holder=holder, expires_at=until)
    except IntegrityError:
        return False  # the row exists and someone else holds it
    return True


def lease_held() -> bool:
    """Whether a runner holds the lease now (not expired): it is working through the queue."""
    return (
        MergeQueueLease.objects.filter(pk=1, expires_at__gte=timezone.now())
        .exclude(holder="")
        .exists()
    )


def release_lease(holder: str) -> None:
    MergeQueueLease.objects.filter(pk=1, holder=holder).update(holder="", expires_at=None)


def _recover_orphans(log: Log) -> None:
    """Put back in the queue the entries of a batch whose runner died (its lease expired and we
    hold it now, so no batch is running).

    Main moves as the last step of the transaction that records the batch, so a runner that
    died between the two left main holding commits whose rows rolled back: those changes are
    found on main by their Change-Request trailer and recorded merged first
    (``services.reconcile_merged``), and their entries then finish as merged, not twice."""
    stale = MergeQueueEntry.objects.filter(state=E.CHECKING)
    count = stale.update(state=E.QUEUED, batch=None)
    if count:
        recorded = services.reconcile_merged()
        if recorded:
            log(f"{len(recorded)} changes of an interrupted batch were on main already")
        MergeQueueBatch.objects.filter(state=MergeQueueBatch.State.CHECKING).update(
            state=MergeQueueBatch.State.FAILED, finished_at=timezone.now()
        )
        log(f"{count} changes of an interrupted batch are queued again")


# --- running the queue -------------------------------------------------------------------------


def run_queue(label: str, log: Log) -> str:
    """Work through the queue, batch after batch, while holding the lease; what it did.

    After letting the lease go it looks once more: a change queued while this runner was
    finishing found the lease taken and left the work to it."""
    holder = new_holder(label)
    merged = failed = batches = 0
    while True:
        if not acquire_lease(holder):
            if batches:
                break
            return "another runner is working through the queue; it takes these changes"
        try:
            _recover_orphans(log)
            while True:
                batch, entries = _claim(holder)
                if batch is None:
                    break
                batches += 1
                done, lost = _run_batch(batch, entries, log)
                merged, failed = merged + done, failed + lost
                if not acquire_lease(holder):  # renew; lost only after a batch past the lease
                    log("the lease expired during a batch; another runner goes on")
                    return f"{batches} batches: {merged} changes merged, {failed} failed"
        finally:
            release_lease(holder)
        if not MergeQueueEntry.objects.filter(state=E.QUEUED).exists():
            break
    return f"{batches} batches: {merged} changes merged, {failed} failed"


def _claim(holder: str) -> tuple[MergeQueueBatch | None, list[MergeQueueEntry]]:
    """The next batch: queued entries in order, up to the batch size. A change allowed to
    overcommit goes alone (the capacity check's permission is per change, and the batch's check
    must not extend it to the others)."""
    size = max(1, settings.GITOPS_MERGE_QUEUE_BATCH)
    with transaction.atomic():
        # Locked so that a change taken out of the queue meanwhile (do_dequeue) is not taken.
        queued = list(
            MergeQueueEntry.objects.select_for_update()
            .filter(state=E.QUEUED)
            .order_by("enqueued_at", "id")[:size]
        )
        if not queued:
            return None, []
        changes = ChangeRequest.objects.in_bulk([e.change_id for e in queued])
        for entry in queued:
            entry.change = changes[entry.change_id]
        entries = queued[:1]
        if not queued[0].change.allow_overcommit:
            for entry in queued[1:]:
                if entry.change.allow_overcommit:
                    break
                entries.append(entry)
        batch = MergeQueueBatch.objects.create(size=len(entries))
        MergeQueueEntry.objects.filter(pk__in=[e.pk for e in entries]).update(
            state=E.CHECKING, batch=batch
        )
        for entry in entries:
            entry.state, entry.batch = E.CHECKING, batch
    return batch, entries


@dataclass
class _Member:
    """A change in the batch being built, with what its squash commit needs."""

    entry: MergeQueueEntry
    change: ChangeRequest
    approved_by: str
    item: ChainItem = field(init=False)

    def __post_init__(self) -> None:
        enqueuer = self.entry.enqueued_by
        self.item = ChainItem(
            key=self.entry.pk,
            head=self.change.head_sha,
            message=services._merge_message(
                self.change,
                enqueuer,
                self.approved_by,
                **{"Merge-Queue-Batch": str(self.entry.batch_id)},
            ),
            author=services.identity(self.change.requested_by or self.change.author),
            committer=services.identity(enqueuer),
        )


@dataclass
class _Verdict:
    """A chain that was checked: whether it passed, and the results (one per check)."""

    chain: Chain
    passed: bool
    results: list[CheckResult]


def _run_batch(batch: MergeQueueBatch, entries: list[MergeQueueEntry], log: Log) -> tuple[int, int]:
    """Check and merge one batch; (merged, failed)."""
    repo = services.repository()
    main = settings.GITOPS_MAIN_BRANCH
    members = _admissible(entries)
    failed = len(entries) - len(members)
    for _attempt in range(REBUILDS):
        base = repo.head(main)
        if base is None or not members:
            break
        batch.base_sha = base
        chain = repo.squash_chain(
            base,
            [m.item for m in members],
            resolve=_index_resolver(members),
            replay=_replayer(members),
        )
        for member in [m for m in members if m.entry.pk in chain.conflicts]:
            paths = ", ".join(chain.conflicts[member.entry.pk])
            _finish(member.entry, E.FAILED, f"conflicts with the changes before it in {paths}")
            failed += 1
        for member in [m for m in members if m.entry.pk in chain.empty]:
            _finish(
                member.entry,
                E.FAILED,
                "nothing to merge: main, with the changes before it in this batch, already "
                "holds every file this change writes",
            )
            failed += 1
        members = [m for m in members if m.entry.pk in chain.commits]
        checker = _Checker(repo, base, batch)
        # The chain of exactly these members is the one just built (the items it left out
        # changed nothing on it): the first check needs no second squash.
        checker.remember(members, dataclasses.replace(chain, conflicts={}, empty=[]))
        accepted, verdict, rejected = _isolate(members, checker)
        for member, bad in rejected:
            _fail_checks(member, bad, batch)
            failed += 1
        if not accepted or verdict is None:
            members = []
            break
        try:
            merged = _merge_chain(batch, base, accepted, verdict)
        except RemoteUnavailable as exc:
            # Nothing reached main (the remote never took the push): the changes wait, in their
            # places, and the reason is on the queue page.
            MergeQueueEntry.objects.filter(pk__in=[m.entry.pk for m in accepted]).update(
                state=E.QUEUED, batch=None, reason=f"Waiting for the Git remote: {exc}"
            )
            log(f"batch {batch.pk}: waiting for the Git remote: {exc}")
            batch.state = MergeQueueBatch.State.FAILED
            batch.finished_at = timezone.now()
            batch.save()
            raise  # the job fails and is retried later; claiming again now would only wait again
        except RefConflict:
            batch.rebuilds += 1
            log(f"batch {batch.pk}: main moved while it was checked; building it again")
            members = [m for m in accepted if _still_open(m)]
            continue
        except _Moved as moved:
            for member in accepted:
                if member.entry.pk in moved.gone:
                    _finish(member.entry, E.REMOVED, moved.gone[member.entry.pk])
            members = [m for m in accepted if m.entry.pk not in moved.gone]
            failed += len(moved.gone)
            continue
        _remember_tree(verdict.chain.tip, checker.trees.get(verdict.chain.tip))
        log(
            f"batch {batch.pk}: {merged} changes merged onto {base[:12]} as {batch.tip_sha[:12]}"
            f" with {batch.check_runs} check runs (tenants' check values kept "
            f"{checker.stats.kept}, computed {checker.stats.computed})"
        )
        return merged, failed
    else:
        # Main kept moving: the changes wait for the next run, in their places.
        MergeQueueEntry.objects.filter(pk__in=[m.entry.pk for m in members]).update(
            state=E.QUEUED, batch=None
        )
        log(f"batch {batch.pk}: main kept moving; {len(members)} changes queued again")
        members = []
    batch.state = MergeQueueBatch.State.FAILED
    batch.finished_at = timezone.now()
    batch.save()
    log(f"batch {batch.pk}: nothing merged ({failed} changes failed)")
    return 0, failed


def _admissible(entries: list[MergeQueueEntry]) -> list[_Member]:
    """The entries whose changes may still merge; the others fail (or are removed) with why."""
    members = []
    # Every change, its reviews and who queued it in three queries (a batch holds hundreds).
    changes = (
        ChangeRequest.objects.select_related("requested_by", "author")
        .prefetch_related(Prefetch("reviews", queryset=Review.objects.select_related("reviewer")))
        .in_bulk([e.change_id for e in entries])
    )
    enqueuers = get_user_model().objects.in_bulk(
        {e.enqueued_by_id for e in entries if e.enqueued_by_id is not None}
    )
    for entry in entries:
        if entry.enqueued_by_id is not None:
            entry.enqueued_by = enqueuers[entry.enqueued_by_id]
        change = changes[entry.change_id]
        if change.status == ChangeRequest.Status.MERGED:
            _finish(entry, E.MERGED, "")
            continue
        if not change.is_open:
            _finish(entry, E.REMOVED, f"the change was {change.get_status_display().lower()}")
            continue
        reasons = services.queue_blockers(change)
        if reasons:
            _finish(entry, E.FAILED, " ".join(reasons))
            continue
        approvers, _ = services.review_summary(change)
        approved_by = ", ".join(services._trailer(u) for u in approvers)
        members.append(_Member(entry, change, approved_by))
    return members


def _index_resolver(
    members: Sequence[_Member],
) -> Callable[[ChainItem, MergeConflict, Snapshot], Mapping[str, bytes | None] | None]:
    """Side-by-side onboardings clash only in the tenant index, which is derived: render it
    again (as a single merge does), and treat any other clash as one."""
    by_key = {m.entry.pk: m.change for m in members}

    def resolve(
        item: ChainItem, conflict: MergeConflict, tip: Snapshot
    ) -> Mapping[str, bytes | None] | None:
        if list(conflict.paths) != [services.TENANT_INDEX]:
            return None
        try:
            return services.regenerating_index(by_key[item.key])(tip)
        except MergeConflict:
            return None

    return resolve


def _replayer(
    members: Sequence[_Member],
) -> Callable[[ChainItem], Callable[[Snapshot], Mapping[str, bytes | None] | None] | None]:
    """A member whose tenant's directory the chain changed since its base goes on as its
    request, not its text: the directory rendered again from the chain's spec plus its own
    (``services.replaying``). One whose tenants the chain did not touch (most of a burst over
    many tenants) merges three-way, which gives the same tree without rendering; a change
    without spec files too."""
    by_key = {m.entry.pk: m.change for m in members}

    def replay(item: ChainItem) -> Callable[[Snapshot], Mapping[str, bytes | None] | None] | None:
        change = by_key[item.key]
        build = services.replaying(change)
        if build is None:
            return None

        def rebuild(tip: Snapshot) -> Mapping[str, bytes | None] | None:
            return None if services.tenants_untouched(change, tip) else build(tip)

        return rebuild

    return replay


# The tree of the last chain this process merged, by its commit: the next batch's base, read
# again otherwise (a second at 10,000 tenants, and its split another half).
_LAST_TREE: dict[str, tuple[dict[str, bytes], partition.TreeParts]] = {}


def _remember_tree(sha: str, tree: tuple[dict[str, bytes], partition.TreeParts] | None) -> None:
    _LAST_TREE.clear()
    if tree is not None:
        _LAST_TREE[sha] = tree


def warm(log: Log) -> str:
    """Fill this process with what a batch reads: the schema registry, main's tree and its
    split (the next batch's base, unless main moves first), and every tenant's kept check
    values, read from the check cache into memory (computed where missing). A worker does it
    when it starts (``portal.celery``), so its first batch is not the one that waits."""
    sha = services.main_sha()
    if sha is None:
        return "no main yet: nothing to warm"
    repo = services.repository()
    files = repo.read_tree(sha)
    parts = partition.split(files)
    stats = partition.Stats()
    run_checks(
        files,
        fleet=configured_fleet(),
        changed=set(),  # as a change that touches nothing: no file's schema, no build
        schema_source=schema_source(),
        parts=parts,
        stats=stats,
        cache=settings.GITOPS_CHECK_CACHE,
    )
    if services.main_sha() == sha:
        _remember_tree(sha, (files, parts))
    message = (
        f"warm: main {sha[:12]}, {len(parts.tenants)} tenants; check values kept "
        f"{stats.kept}, computed {stats.computed}"
    )
    log(message)
    return message


class _Checker:
    """Runs the checks over chains built on one base, counting the runs on the batch.

    The tree of a chain is the base's tree read once, with the files the chain changed read
    from its tip: a batch at 10,000 tenants reads the whole tree once, not once per check."""

    def __init__(self, repo: GitRepository, base: str, batch: MergeQueueBatch) -> None:
        self.repo = repo
        self.base = base
        self.batch = batch
        kept = _LAST_TREE.get(base)
        if kept is not None:
            # This worker merged main's tip: its tree and split are at hand.
            self.base_files, self.base_parts = kept
        else:
            self.base_files = repo.read_tree(base)
            self.base_parts = partition.split(self.base_files)
        self.trees: dict[str, tuple[dict[str, bytes], partition.TreeParts]] = {}
        self.chains: dict[tuple[int, ...], Chain] = {}
        self.fleet = configured_fleet()
        self.schemas = schema_source()
        self.stats = partition.Stats()

    def remember(self, members: Sequence[_Member], chain: Chain) -> None:
        self.chains[tuple(m.entry.pk for m in members)] = chain

    def check(self, members: Sequence[_Member]) -> _Verdict:
        chain = self.chains.pop(tuple(m.entry.pk for m in members), None)
        if chain is None:
            chain = self.repo.squash_chain(
                self.base,
                [m.item for m in members],
                resolve=_index_resolver(members),
                replay=_replayer(members),
            )
        if chain.conflicts or chain.empty:
            # Without a change before it, a later one may clash (rare: it built on the other).
            keys = ", ".join(f"#{k}" for k in [*chain.conflicts, *chain.empty])
            result = CheckResult(
                "duplicates",
                "failed",
                f"the changes do not squash cleanly without the others: {keys}",
            )
            return _Verdict(chain, False, [result])
        # A change replayed onto the ones before it (``services.replaying``) may write more
        # than its own branch did: what the chain changed is read from the chain.
        changed = {p for m in members for p in m.change.files_changed}
        changed |= self.repo.changed_paths(self.base, chain.tip)
        files = dict(self.base_files)
        for path in changed | {services.TENANT_INDEX}:
            data = self.repo.read_file(chain.tip, path)
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
        # Only the tenants the chain touched are split again (and checked: the others'
        # values are kept by content, gitops.checks.partition).
        parts = partition.split(
            files, reuse=self.base_parts, changed=changed | {services.TENANT_INDEX}
        )
        self.trees[chain.tip] = (files, parts)
        results = run_checks(
            files,
            fleet=self.fleet,
            changed=changed,
            schema_source=self.schemas,
            allow_overcommit=all(m.change.allow_overcommit for m in members),
            base=self.base_files,
            parts=parts,
            base_parts=self.base_parts,
            stats=self.stats,
            cache=settings.GITOPS_CHECK_CACHE,
            scopes=services.change_scopes(m.change for m in members),
            drift=False,
        )
        self.batch.check_runs += 1
        MergeQueueBatch.objects.filter(pk=self.batch.pk).update(check_runs=self.batch.check_runs)
        state = ChangeRequest.checks_state_of(r.status for r in results)
        return _Verdict(chain, checks_may_merge(state), results)


def _isolate(
    members: list[_Member], checker: _Checker
) -> tuple[list[_Member], _Verdict | None, list[tuple[_Member, _Verdict]]]:
    """The changes that pass together (and their passing verdict), and each failing change
    with the verdict of the check that found it alone."""
    rejected: list[tuple[_Member, _Verdict]] = []

    def attempt(
        accepted: list[_Member], verdict: _Verdict | None, todo: list[_Member]
    ) -> tuple[list[_Member], _Verdict | None]:
        if not todo:
            return accepted, verdict
        outcome = checker.check([*accepted, *todo])
        if outcome.passed:
            return [*accepted, *todo], outcome
        if len(todo) == 1:
            rejected.append((todo[0], outcome))
            return accepted, verdict
        half = len(todo) // 2
        accepted, verdict = attempt(accepted, verdict, todo[:half])
        return attempt(accepted, verdict, todo[half:])

    accepted, verdict = attempt([], None, members)
    return accepted, verdict, rejected


class _Moved(Exception):
    """Changes of the batch were closed or merged by someone else while it was checked."""

    def __init__(self, gone: dict[int, str]) -> None:
        super().__init__(f"{len(gone)} changes left the batch")
        self.gone = gone  # entry id -> why


def _still_open(member: _Member) -> bool:
    return ChangeRequest.objects.filter(pk=member.change.pk, status="open").exists()


def _merge_chain(
    batch: MergeQueueBatch,
    base: str,
    accepted: list[_Member],
    verdict: _Verdict,
) -> int:
    """Record the accepted changes merged and move main to their chain, in one transaction
    whose last step is the compare-and-swap: a lost swap rolls the rows back."""
    chain = verdict.chain
    main = settings.GITOPS_MAIN_BRANCH
    with transaction.atomic():
        locked = {
            c.pk: c
            for c in ChangeRequest.objects.select_for_update().filter(
                pk__in=[m.change.pk for m in accepted]
            )
        }
        gone = {
            m.entry.pk: f"the change was {locked[m.change.pk].get_status_display().lower()} "
            "while its batch was checked"
            for m in accepted
            if locked[m.change.pk].status != ChangeRequest.Status.OPEN
        }
        if gone:
            raise _Moved(gone)
        now = timezone.now()
        _save_check_runs([locked[m.change.pk] for m in accepted], verdict, batch)
        for member in accepted:
            change = locked[member.change.pk]
            change.checks_state = ChangeRequest.checks_state_of(r.status for r in verdict.results)
            services._record_merge(
                change,
                chain.commits[member.entry.pk],
                acting_user=member.entry.enqueued_by,
                audit={"merge_queue": [None, f"batch {batch.pk}"]},
                publish=False,
            )
        MergeQueueEntry.objects.filter(pk__in=[m.entry.pk for m in accepted]).update(
            state=E.MERGED, reason="", finished_at=now
        )
        batch.state = MergeQueueBatch.State.MERGED
        batch.tip_sha = chain.tip
        batch.merged = len(accepted)
        batch.finished_at = now
        batch.save()
        services.write_main(lambda repo: repo.advance_branch(main, chain.tip, expected=base))
        # One publication for the batch: its tenants projected once, Flux nudged once.
        enqueue(
            "gitops.after_merge",
            title=f"Publish merge queue batch {batch.pk}",
            change_ids=[m.change.pk for m in accepted],
        )
    return len(accepted)


def _save_check_runs(
    changes: Sequence[ChangeRequest], verdict: _Verdict, batch: MergeQueueBatch
) -> None:
    """The verdict as each change's check runs on its head (replacing those it had there)."""
    if not changes:
        return
    heads = Q()
    for change in changes:
        heads |= Q(change=change, sha=change.head_sha)
    CheckRun.objects.filter(heads).delete()
    CheckRun.objects.bulk_create(
        [
            CheckRun(
                change=change,
                sha=change.head_sha,
                name=r.name,
                status=r.status,
                summary=f"merge queue batch {batch.pk}: {r.summary}"[:300],
                details=list(r.details)[:500],
            )
            for change in changes
            for r in verdict.results
        ],
        batch_size=500,
    )


def _fail_checks(member: _Member, verdict: _Verdict, batch: MergeQueueBatch) -> None:
    with transaction.atomic():
        _save_check_runs([member.change], verdict, batch)
        state = ChangeRequest.checks_state_of(r.status for r in verdict.results)
        ChangeRequest.objects.filter(pk=member.change.pk, head_sha=member.change.head_sha).update(
            checks_state=state
        )
        failing = [r for r in verdict.results if r.status == "failed"]
        if not failing and state == ChangeRequest.Checks.PARTIAL:
            partial = [r for r in verdict.results if r.status in ("partial", "skipped")]
            reason = "; ".join(f"{r.name}: {r.summary}" for r in partial)
            _finish(
                member.entry,
                E.FAILED,
                f"checks partial in batch {batch.pk}, and partial checks may not merge here "
                f"(GITOPS_ALLOW_PARTIAL_CHECKS): {reason}",
            )
            return
        reason = "; ".join(f"{r.name}: {r.summary}" for r in failing) or "its checks failed"
        _finish(member.entry, E.FAILED, f"checks failed in batch {batch.pk}: {reason}")


def _finish(entry: MergeQueueEntry, state: str, reason: str) -> None:
    entry.state = state
    entry.reason = reason[:2000]
    entry.finished_at = timezone.now()
    MergeQueueEntry.objects.filter(pk=entry.pk).update(
        state=state, reason=entry.reason, finished_at=entry.finished_at
    )


def queue_position(entries: Sequence[MergeQueueEntry]) -> dict[int, int]:
    """Position (1 = next) of each queued entry, in the order batches take them."""
    queued = [e for e in entries if e.state == E.QUEUED]
    return {e.pk: n for n, e in enumerate(sorted(queued, key=lambda e: (e.enqueued_at, e.pk)), 1)}
