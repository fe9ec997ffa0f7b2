"""Concurrent writers on one bare repository: threads and separate processes lose no commit.

Each scenario starts many writers at once against the same branch and then walks main's
history with the git CLI: every change must be there exactly once, as its own commit.
"""

from __future__ import annotations

import multiprocessing
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gitops.repo import GitRepository, Identity, Snapshot, format_message

ALICE = Identity("Alice Admin", "alice@example.com")
CHANGES = 50


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={repo}", *args], capture_output=True, text=True, check=True
    )
    return result.stdout


def _message(i: int) -> str:
    return format_message(f"Change {i}", "", {"Change-Request": str(i)})


def _merge_in_process(path: str, i: int) -> str:
    # Runs in a spawned process: its own GitRepository, its own libgit2 handles.
    repo = GitRepository(Path(path))
    return repo.merge(f"change/{i}", message=_message(i), author=ALICE)


def _commit_in_process(path: str, worker: int, count: int) -> list[str]:
    repo = GitRepository(Path(path))
    return [_append(repo, worker, n) for n in range(count)]


def _append(repo: GitRepository, worker: int, n: int) -> str:
    def build(tip: Snapshot) -> dict[str, bytes | None]:
        # Reads the tip it builds on, like a renderer comparing with main would.
        seen = len(tip.list_dir("writers/"))
        return {f"writers/w{worker}/{n}.yaml": f"seen: {seen}\n".encode()}

    return repo.commit_with_retry(
        build, branch="main", message=f"Writer {worker} commit {n}\n", author=ALICE
    )


@pytest.fixture
def fifty_branches(tmp_path: Path) -> GitRepository:
    """Main with a base commit and 50 change branches from its tip, one tenant each."""
    repo = GitRepository.open_or_init(tmp_path / "fleet.git")
    base = repo.commit(
        {"tenants/kustomization.yaml": b"resources: []\n"},
        message="Bootstrap\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )
    for i in range(CHANGES):
        branch = f"change/{i}"
        repo.create_branch(branch, at=base)
        repo.commit(
            {f"tenants/t{i}/x.yaml": f"tenant: t{i}\n".encode()},
            message=f"Tenant t{i}\n",
            author=ALICE,
            branch=branch,
            expected_parent=base,
        )
    return repo


def assert_all_merged(repo: GitRepository) -> None:
    main = repo.head("main")
    assert main is not None
    # One squash commit per change on a linear history, plus the bootstrap commit.
    assert git(repo.path, "rev-list", "--count", "main").strip() == str(CHANGES + 1)
    assert git(repo.path, "rev-list", "--merges", "main").strip() == ""
    requests = git(repo.path, "log", "--format=%(trailers:key=Change-Request,valueonly)", "main")
    assert sorted(int(v) for v in requests.split()) == list(range(CHANGES))
    files = repo.read_tree(main, "tenants")
    for i in range(CHANGES):
        assert files[f"tenants/t{i}/x.yaml"] == f"tenant: t{i}\n".encode()
    git(repo.path, "fsck", "--strict", "--no-dangling")


def test_it_merges_fifty_branches_from_eight_threads(fifty_branches: GitRepository) -> None:
    repo = fifty_branches
    with ThreadPoolExecutor(max_workers=8) as pool:
        shas = list(
            pool.map(
                lambda i: repo.merge(f"change/{i}", message=_message(i), author=ALICE),
                range(CHANGES),
            )
        )
    assert len(set(shas)) == CHANGES
    assert_all_merged(repo)


def test_it_merges_fifty_branches_from_separate_processes(
    fifty_branches: GitRepository,
) -> None:
    repo = fifty_branches
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes=6) as pool:
        shas = pool.starmap(_merge_in_process, [(str(repo.path), i) for i in range(CHANGES)])
    assert len(set(shas)) == CHANGES
    assert_all_merged(repo)


def _assert_all_appended(repo: GitRepository, workers: int, count: int, shas: list[str]) -> None:
    assert len(set(shas)) == workers * count
    assert git(repo.path, "rev-list", "--count", "main").strip() == str(workers * count + 1)
    history = set(git(repo.path, "rev-list", "main").split())
    assert set(shas) <= history
    files = repo.read_tree("main", "writers")
    assert len(files) == workers * count
    git(repo.path, "fsck", "--strict", "--no-dangling")


def _seeded(tmp_path: Path) -> GitRepository:
    repo = GitRepository.open_or_init(tmp_path / "fleet.git")
    repo.commit(
        {"README.md": b"fleet\n"},
        message="Start\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )
    return repo


def test_it_commits_with_retry_from_eight_threads(tmp_path: Path) -> None:
    repo = _seeded(tmp_path)
    with ThreadPoolExecutor(max_workers=8) as pool:
        batches = list(pool.map(lambda w: [_append(repo, w, n) for n in range(10)], range(8)))
    _assert_all_appended(repo, 8, 10, [sha for batch in batches for sha in batch])


def test_it_commits_with_retry_from_separate_processes(tmp_path: Path) -> None:
    repo = _seeded(tmp_path)
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes=4) as pool:
        batches = pool.starmap(_commit_in_process, [(str(repo.path), w, 10) for w in range(4)])
    _assert_all_appended(repo, 4, 10, [sha for batch in batches for sha in batch])
