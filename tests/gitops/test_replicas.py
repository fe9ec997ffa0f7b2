"""Several replicas, one truth: a real Git remote (``git daemon``) that portal processes, each
with its own mirror under its own var/, write main to with compare-and-swap pushes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.exceptions import ValidationError
from django.db import transaction

from api.tokens import do_create_token
from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, Review
from gitops.repo import GitRepository, Identity, PushRejected, Remote, format_message
from portal.celery import app as celery_app
from portal.models import AuditEvent
from tests.support import free_port, wait_for_port
from tests.support.processes import (
    Started,
    database_url,
    gunicorn,
    launch,
    portal_env,
    stop,
    use_celery_broker,
)

ROOT = Path(__file__).resolve().parents[2]
FLEET = demo_fleet()
BOT = Identity("bot", "bot@example.com")


@dataclass
class Daemon:
    """``git daemon`` serving (and accepting pushes to) ``root/fleet.git`` on ``port`` (the
    same one again after a restart)."""

    root: Path
    port: int
    server: Started | None = None

    @property
    def url(self) -> str:
        return f"git://127.0.0.1:{self.port}/fleet.git"

    @property
    def path(self) -> Path:
        return self.root / "fleet.git"

    def start(self) -> None:
        self.server = launch(
            [
                "git",
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--informative-errors",
                f"--base-path={self.root}",
                "--listen=127.0.0.1",
                f"--port={self.port}",
                str(self.root),
            ],
            log_file=self.root.parent / "git-daemon.log",
        )
        wait_for_port(self.port, "git daemon", process=self.server.proc, details=self.server.log)

    def stop(self) -> None:
        if self.server is not None:
            stop(self.server.proc)
            self.server = None

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={self.path}", *args], capture_output=True, text=True, check=True
        ).stdout


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    root = tmp_path / "remote"
    subprocess.run(
        ["git", "init", "-q", "--bare", "-b", "main", str(root / "fleet.git")], check=True
    )
    served = Daemon(root, free_port())
    served.start()
    try:
        yield served
    finally:
        served.stop()


def _first_parents(daemon: Daemon, since: str) -> list[str]:
    """Commits on the remote's main after ``since``, oldest first (first-parent line)."""
    return daemon.git("rev-list", "--first-parent", "--reverse", f"{since}..main").split()


def _trailer(daemon: Daemon, sha: str) -> str:
    return daemon.git("log", "-1", "--format=%(trailers:key=Change-Request,valueonly)", sha).strip()


# --- the engine: write_through against a real remote --------------------------------------


def test_writers_on_two_mirrors_land_every_commit_once(daemon: Daemon, tmp_path: Path) -> None:
    remote = Remote(daemon.url, timeout=10)
    mirrors = [GitRepository.open_or_init(tmp_path / f"replica{i}" / "fleet.git") for i in (1, 2)]
    seed = mirrors[0].write_through(
        remote,
        lambda repo: repo.commit(
            {"README": b"fleet\n"}, message="seed", author=BOT, branch="main", expected_parent=None
        ),
    )

    def write(i: int) -> str:
        def attempt(repo: GitRepository) -> str:
            return repo.commit_with_retry(
                lambda tip: {f"notes/{i:03}.txt": f"{i}\n".encode()},
                branch="main",
                message=f"note {i}\n\nNote: {i}\n",
                author=BOT,
            )

        return mirrors[i % 2].write_through(remote, attempt)

    with ThreadPoolExecutor(8) as pool:
        shas = list(pool.map(write, range(40)))

    line = _first_parents(daemon, seed)
    assert len(line) == 40 and sorted(line) == sorted(shas)
    tip = daemon.git("rev-parse", "main").strip()
    for i in range(40):
        assert daemon.git("show", f"{tip}:notes/{i:03}.txt") == f"{i}\n"
    # Each mirror's main is a commit the remote has (its own last write or older), never a fork.
    for mirror in mirrors:
        head = mirror.head("main")
        assert head is not None and daemon.git("merge-base", "--is-ancestor", head, "main") == ""


def test_a_rejected_push_replays_the_write_on_the_new_tip(daemon: Daemon, tmp_path: Path) -> None:
    remote = Remote(daemon.url, timeout=10)
    repo = GitRepository.open_or_init(tmp_path / "replica" / "fleet.git")
    other = GitRepository.open_or_init(tmp_path / "other" / "fleet.git")
    seed = repo.write_through(
        remote,
        lambda r: r.commit(
            {"a": b"1"}, message="a", author=BOT, branch="main", expected_parent=None
        ),
    )
    tips: list[str | None] = []

    def attempt(r: GitRepository) -> str:
        tips.append(r.head("main"))
        if len(tips) == 1:
            # Another replica wins the race between our fetch and our push.
            other.write_through(
                remote,
                lambda o: o.commit_with_retry(
                    lambda tip: {"b": b"2"}, branch="main", message="b", author=BOT
                ),
            )
        return r.commit_with_retry(lambda tip: {"c": b"3"}, branch="main", message="c", author=BOT)

    mine = repo.write_through(remote, attempt)
    theirs = other.head("main")
    assert tips == [seed, theirs]  # the second run built on the winner's commit
    assert _first_parents(daemon, seed) == [theirs, mine]
    assert repo.head("main") == mine


def test_a_lock_file_left_by_a_killed_writer_does_not_block_main(
    daemon: Daemon, tmp_path: Path
) -> None:
    remote = Remote(daemon.url, timeout=10)
    repo = GitRepository.open_or_init(tmp_path / "replica" / "fleet.git")
    seed = repo.write_through(
        remote,
        lambda r: r.commit(
            {"a": b"1"}, message="a", author=BOT, branch="main", expected_parent=None
        ),
    )
    # What a process killed inside a ref update leaves: git's lock file, the ref itself whole.
    lock = repo.path / "refs" / "heads" / "main.lock"
    lock.write_text("0" * 40 + "\n")
    os.utime(lock, (time.time() - 60, time.time() - 60))
    sha = repo.write_through(
        remote,
        lambda r: r.commit_with_retry(
            lambda tip: {"b": b"2"}, branch="main", message="b", author=BOT
        ),
    )
    assert _first_parents(daemon, seed) == [sha]
    assert not lock.exists()


def test_a_stale_lease_is_rejected_by_the_remote(daemon: Daemon, tmp_path: Path) -> None:
    remote = Remote(daemon.url, timeout=10)
    repo = GitRepository.open_or_init(tmp_path / "replica" / "fleet.git")
    first = repo.write_through(
        remote,
        lambda r: r.commit(
            {"a": b"1"}, message="a", author=BOT, branch="main", expected_parent=None
        ),
    )
    second = repo.commit({"b": b"2"}, message="b", author=BOT, branch="main", expected_parent=first)
    # Another replica moved the remote meanwhile; a push leased on ``first`` must not land.
    other = GitRepository.open_or_init(tmp_path / "other" / "fleet.git")
    other.write_through(
        remote,
        lambda r: r.commit_with_retry(
            lambda tip: {"c": b"3"}, branch="main", message="c", author=BOT
        ),
    )
    with pytest.raises(PushRejected):
        repo._push_lease(remote, "refs/heads/main", second, first)
    assert daemon.git("cat-file", "-p", "main:c") == "3"
    assert "b" not in daemon.git("ls-tree", "--name-only", "main").split()


def test_a_new_replicas_first_requests_create_its_mirror_together(tmp_path: Path) -> None:
    path = tmp_path / "var" / "git" / "fleet.git"
    with ThreadPoolExecutor(8) as pool:
        opened = list(pool.map(lambda _: GitRepository.open_or_init(path), range(16)))
    assert {repo.path for repo in opened} == {path}
    assert opened[0].head("main") is None
    assert [p.name for p in path.parent.iterdir()] == ["fleet.git"]  # no staging left over


def test_a_commit_is_found_by_its_trailer_only(tmp_path: Path) -> None:
    repo = GitRepository.open_or_init(tmp_path / "fleet.git")
    base = repo.commit({"a": b"1"}, message="a", author=BOT, branch="main", expected_parent=None)
    # A title or a body line that reads like the trailer is not it.
    title = repo.commit(
        {"b": b"2"}, message="Change-Request: 7\n", author=BOT, branch="main", expected_parent=base
    )
    body = repo.commit(
        {"c": b"3"},
        message=format_message("c", "Change-Request: 7", {"Change-Request": "8"}),
        author=BOT,
        branch="main",
        expected_parent=title,
    )
    real = repo.commit(
        {"d": b"4"},
        message=format_message("d", "", {"Change-Request": "7"}),
        author=BOT,
        branch="main",
        expected_parent=body,
    )
    assert repo.first_parent_with_trailer(real, base, "Change-Request", "7") == real
    assert repo.first_parent_with_trailer(body, base, "Change-Request", "7") is None
    assert repo.first_parent_with_trailer(real, base, "Change-Request", "8") == body
    # Not looked for before the change's base.
    assert repo.first_parent_with_trailer(real, body, "Change-Request", "8") is None


# --- the portal: merges through services, idempotent by trailer --------------------------------


@pytest.fixture
def truth(daemon: Daemon, settings: Any) -> Daemon:
    settings.GITOPS_REMOTE_URL = daemon.url
    settings.GITOPS_REMOTE_TIMEOUT_SECONDS = 5
    # The changes here add plain notes, no manifests: their checks need no schemas (which
    # cost seconds to load and are not what these tests are about).
    settings.GITOPS_SCHEMA_DIR = ""
    services.ensure_bootstrapped(FLEET)
    return daemon


@contextmanager
def _checks_left_queued(settings: Any) -> Iterator[None]:
    """Queue the jobs opening a change enqueues (its checks) on an in-memory Celery broker
    that no worker reads: they cost ~0.4 s each and are not what these tests are about."""
    settings.PORTAL_TASK_RUNNER = "celery"
    old = use_celery_broker(celery_app, broker_url="memory://")
    try:
        yield
    finally:
        use_celery_broker(celery_app, **old)


def _approved(world: dict[str, Any], count: int, settings: Any) -> list[ChangeRequest]:
    """``count`` open changes adding one note each, approved by pam, checks passed."""
    with _checks_left_queued(settings):
        changes = [
            services.open_change(
                acting_user=world["bob"],
                title=f"note {i}",
                changes={f"notes/{i:03}.txt": f"note {i}\n".encode()},
            )
            for i in range(count)
        ]
    settings.PORTAL_TASK_RUNNER = "eager"
    ChangeRequest.objects.filter(pk__in=[c.pk for c in changes]).update(checks_state="passed")
    Review.objects.bulk_create(
        Review(change=c, reviewer=world["pam"], state="approve", sha=c.head_sha) for c in changes
    )
    return [ChangeRequest.objects.get(pk=c.pk) for c in changes]


@pytest.mark.django_db(transaction=True)
def test_change_branches_are_on_the_remote_and_a_merge_is_final(
    world: dict[str, Any], truth: Daemon, settings: Any
) -> None:
    (change,) = _approved(world, 1, settings)
    assert truth.git("rev-parse", change.branch).strip() == change.head_sha
    merged = services.do_merge(change, acting_user=world["pam"])
    assert truth.git("rev-parse", "main").strip() == merged.merge_sha
    assert _trailer(truth, merged.merge_sha) == str(change.pk)
    assert services.repository().head("main") == merged.merge_sha


@pytest.mark.django_db(transaction=True)
def test_a_replica_fetches_a_branch_it_does_not_have(
    world: dict[str, Any], truth: Daemon, settings: Any, tmp_path: Path
) -> None:
    (change,) = _approved(world, 1, settings)
    # Another replica: its own, empty mirror. Checking and merging need the change's commits.
    settings.GITOPS_REPO_PATH = tmp_path / "replica2" / "fleet.git"
    services._open_repository.cache_clear()
    repo = services.repository()
    assert repo.read_file(change.head_sha, "notes/000.txt") == b"note 0\n"
    merged = services.do_merge(change, acting_user=world["pam"])
    assert truth.git("rev-parse", "main").strip() == merged.merge_sha


@pytest.mark.django_db(transaction=True)
def test_a_merge_pushed_before_its_row_committed_is_found_not_repeated(
    world: dict[str, Any], truth: Daemon, settings: Any
) -> None:
    change, other = _approved(world, 2, settings)
    base = truth.git("rev-parse", "main").strip()

    class Crash(Exception):
        pass

    # The push lands, then the process "dies" before its transaction commits.
    with pytest.raises(Crash), transaction.atomic():
        services.do_merge(change, acting_user=world["pam"])
        raise Crash
    change.refresh_from_db()
    assert change.status == "open"
    (pushed,) = _first_parents(truth, base)
    services.do_merge(other, acting_user=world["pam"])  # main moves on meanwhile
    # Merging again records the commit already there instead of adding a second one.
    again = services.do_merge(change, acting_user=world["pam"])
    assert again.merge_sha == pushed
    line = _first_parents(truth, base)
    assert [_trailer(truth, sha) for sha in line] == [str(change.pk), str(other.pk)]


@pytest.mark.django_db(transaction=True)
def test_the_maintenance_run_records_a_merge_a_dead_replica_pushed(
    world: dict[str, Any], truth: Daemon, settings: Any
) -> None:
    (change,) = _approved(world, 1, settings)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.do_merge(change, acting_user=world["pam"])
        raise RuntimeError("killed")
    assert services.reconcile_merged() == [change.pk]
    change.refresh_from_db()
    assert change.status == "merged"
    assert change.merge_sha == truth.git("rev-parse", "main").strip()
    event = AuditEvent.objects.get(action="change.merge")
    assert "reconciled" in event.diff
    assert services.reconcile_merged() == []


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_remote_fails_the_merge_visibly_and_forks_nothing(
    world: dict[str, Any], truth: Daemon, settings: Any
) -> None:
    (change,) = _approved(world, 1, settings)
    before = truth.git("rev-parse", "main").strip()
    settings.GITOPS_REMOTE_WAIT_SECONDS = 2
    truth.stop()
    started = time.monotonic()
    with pytest.raises(ValidationError, match="Waiting for the Git remote") as failure:
        services.do_merge(change, acting_user=world["pam"])
    assert time.monotonic() - started >= 2  # it waited and retried before giving up
    assert "127.0.0.1" in str(failure.value)
    change.refresh_from_db()
    assert change.status == "open" and not change.merge_sha
    assert services.repository().head("main") == before  # no local-only commit on main
    truth.start()
    merged = services.do_merge(change, acting_user=world["pam"])
    assert truth.git("rev-parse", "main").strip() == merged.merge_sha
    assert truth.git("rev-parse", f"{merged.merge_sha}^").strip() == before


# --- two portal processes, 200 merges ----------------------------------------------------------


def _portal_env(var: Path, daemon: Daemon) -> dict[str, str]:
    return portal_env(
        DATABASE_URL=database_url(),
        PORTAL_VAR_DIR=str(var),
        GITOPS_REPO_PATH=str(var / "git" / "fleet.git"),
        GITOPS_REMOTE_URL=daemon.url,
        PORTAL_TASK_RUNNER="thread",
    )


@pytest.fixture
def portals(truth: Daemon, tmp_path: Path) -> Iterator[list[str]]:
    """Two portal processes (gunicorn, four threads each), each with its own var/."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                gunicorn(
                    _portal_env(tmp_path / name, truth),
                    log_file=tmp_path / f"{name}.log",
                    options=["--threads=4", "--timeout=120"],
                )
            )
            for name in ("replica-a", "replica-b")
        ]


@pytest.mark.django_db(transaction=True)
def test_200_merges_split_across_two_replicas_land_once_each(
    world: dict[str, Any], truth: Daemon, portals: list[str], settings: Any, tmp_path: Path
) -> None:
    base = truth.git("rev-parse", "main").strip()
    changes = _approved(world, 200, settings)
    _, token = do_create_token(
        acting_user=world["pam"], owner=world["pam"], name="merge", scope="admin", expires_in_days=1
    )

    def merge(index: int) -> tuple[int, int, str]:
        change = changes[index]
        url = f"{portals[index % 2]}/api/v1/changes/{change.pk}/merge/"
        response = requests.post(
            url, json={}, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        return change.pk, response.status_code, response.text

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(merge, range(200)))

    failed = [(pk, code) for pk, code, _ in answers if code != 200]
    logs = "".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("replica-*.log")))
    assert failed == [], logs
    rows = {c.pk: c for c in ChangeRequest.objects.filter(pk__in=[c.pk for c in changes])}
    assert {row.status for row in rows.values()} == {"merged"}
    line = _first_parents(truth, base)
    assert len(line) == 200
    trailers = [_trailer(truth, sha) for sha in line]
    assert sorted(trailers) == sorted(str(pk) for pk in rows)  # each change once
    assert {row.merge_sha for row in rows.values()} == set(line)
    for row in rows.values():
        assert _trailer(truth, row.merge_sha) == str(row.pk)
    tree = truth.git("ls-tree", "-r", "--name-only", "main", "notes/").split()
    assert tree == [f"notes/{i:03}.txt" for i in range(200)]
    assert truth.git("show", "main:notes/123.txt") == "note 123\n"
    # Every merge has its audit row, written in the same transaction as the row.
    assert AuditEvent.objects.filter(action="change.merge").count() == 200


# --- a replica killed in the middle of merging --------------------------------------------------

MERGER = """
import sys
from django.contrib.auth import get_user_model
from gitops import services
from gitops.models import ChangeRequest
pam = get_user_model().objects.get(username="pam")
for pk in sys.argv[1:]:
    change = ChangeRequest.objects.get(pk=int(pk))
    if change.is_open:
        services.do_merge(change, acting_user=pam)
        print("merged", pk, flush=True)
"""


def _merger(var: Path, daemon: Daemon, pks: list[int]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import django; django.setup()\n" + MERGER, *map(str, pks)],
        cwd=ROOT,
        env=_portal_env(var, daemon),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.django_db(transaction=True)
def test_a_replica_killed_mid_merge_loses_nothing_and_merges_nothing_twice(
    world: dict[str, Any], truth: Daemon, tmp_path: Path, settings: Any
) -> None:
    base = truth.git("rev-parse", "main").strip()
    changes = _approved(world, 12, settings)
    pks = [c.pk for c in changes]
    var = tmp_path / "replica-k"
    proc = _merger(var, truth, pks)
    ref = truth.path / "refs" / "heads" / "main"
    seen = ref.read_text()
    moves = 0
    deadline = time.monotonic() + 120
    # SIGKILL the moment the remote's main moves for the fourth time: the merger is then
    # between its push and its database commit, the window a crash is most harmful in.
    while moves < 4:
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline
        now = ref.read_text() if ref.exists() else seen
        if now != seen:
            seen, moves = now, moves + 1
            if moves == 4:
                os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    # No half-written ref: both repositories check out whole, main resolves in each.
    truth.git("fsck", "--no-dangling")
    mirror = var / "git" / "fleet.git"
    subprocess.run(["git", f"--git-dir={mirror}", "fsck", "--no-dangling"], check=True)
    subprocess.run(
        ["git", f"--git-dir={mirror}", "rev-parse", "--verify", "main"],
        check=True,
        capture_output=True,
    )
    on_remote = {_trailer(truth, sha): sha for sha in _first_parents(truth, base)}
    # Four or more (a busy machine may let two pushes pass between two looks), never all.
    assert 4 <= len(on_remote) < len(pks)
    rows = {c.pk: c for c in ChangeRequest.objects.filter(pk__in=pks)}
    for pk, row in rows.items():
        if row.status == "merged":
            assert on_remote[str(pk)] == row.merge_sha
    # What the kill left: merged rows agree with the remote; at most the change being
    # merged is on the remote while its row is still open.
    assert len([pk for pk in on_remote if rows[int(pk)].status == "open"]) <= 1

    # The replica comes back (same var/) and merges what is still open.
    again = _merger(var, truth, pks)
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err.decode()[-2000:]
    line = _first_parents(truth, base)
    assert sorted(_trailer(truth, sha) for sha in line) == sorted(str(pk) for pk in pks)
    rows = {c.pk: c for c in ChangeRequest.objects.filter(pk__in=pks)}
    assert {row.status for row in rows.values()} == {"merged"}
    assert {row.merge_sha for row in rows.values()} == set(line)
