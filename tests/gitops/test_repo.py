"""GitRepository: commits from in-memory trees, compare-and-swap refs, diffs, merges, remotes.

Everything written is read back with the real git CLI (``git show``, ``git fsck --strict``),
so the repository is proven valid for git and for Flux, not only for pygit2.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import gitops.repo
from gitops.repo import (
    GitRepository,
    Identity,
    InvalidPath,
    MergeConflict,
    PathNotFound,
    PushRejected,
    RefConflict,
    RefLocked,
    RemoteError,
    Snapshot,
    UnknownRevision,
    format_message,
)

ALICE = Identity("Alice Admin", "alice@example.com")
BOB = Identity("Bob Builder", "bob@example.com")
WHEN = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)


def git(git_dir: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args],
        capture_output=True,
        text=True,
        check=False,
        env=_git_env(),
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="Carol CLI",
        GIT_AUTHOR_EMAIL="carol@example.com",
        GIT_COMMITTER_NAME="Carol CLI",
        GIT_COMMITTER_EMAIL="carol@example.com",
    )
    return env


def run(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, check=False, env=_git_env()
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def repo(tmp_path: Path) -> GitRepository:
    return GitRepository.open_or_init(tmp_path / "fleet.git", clock=lambda: WHEN)


def seed(repo: GitRepository) -> str:
    return repo.commit(
        {
            "clusters/ai-factory/tenants.yaml": b"kind: Kustomization\n",
            "tenants/alpha/quota.yaml": b"gpu: 4\n",
            "tenants/alpha/limits.yaml": b"cpu: 8\n",
            "tenants/bravo/quota.yaml": b"gpu: 2\n",
        },
        message="Bootstrap\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )


# --- basics ------------------------------------------------------------------------------


def test_it_starts_with_an_unborn_main(repo: GitRepository) -> None:
    assert repo.head("main") is None
    assert git(repo.path, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo.path, "rev-parse", "--is-bare-repository").strip() == "true"
    # Opening it again neither fails nor resets anything.
    assert GitRepository.open_or_init(repo.path).head("main") is None


def test_it_opens_only_bare_repositories(tmp_path: Path) -> None:
    with pytest.raises(gitops.repo.GitRepositoryError, match="not a Git repository"):
        GitRepository(tmp_path / "missing.git")
    run("git", "init", "-q", str(tmp_path / "checkout"))
    with pytest.raises(gitops.repo.GitRepositoryError, match="not a bare repository"):
        GitRepository(tmp_path / "checkout" / ".git")


def test_it_commits_and_reads_back(repo: GitRepository) -> None:
    sha = seed(repo)
    assert repo.head("main") == sha
    assert repo.read_file("main", "tenants/alpha/quota.yaml") == b"gpu: 4\n"
    assert repo.read_file(sha, "tenants/alpha/missing.yaml") is None
    assert repo.read_file(sha, "tenants/alpha") is None  # a directory is not a file
    assert repo.read_tree(sha, "tenants/alpha/") == {
        "tenants/alpha/limits.yaml": b"cpu: 8\n",
        "tenants/alpha/quota.yaml": b"gpu: 4\n",
    }
    assert len(repo.read_tree(sha)) == 4
    assert repo.read_tree(sha, "nothing/here") == {}
    assert repo.list_dir(sha) == ["clusters/", "tenants/"]
    assert repo.list_dir(sha, "tenants") == ["alpha/", "bravo/"]
    assert repo.list_dir(sha, "tenants/alpha") == ["limits.yaml", "quota.yaml"]
    assert repo.list_dir(sha, "tenants/alpha/quota.yaml") == []
    # The real git reads the same content from the bare repository.
    assert git(repo.path, "show", "main:tenants/bravo/quota.yaml") == "gpu: 2\n"
    assert git(repo.path, "log", "--format=%an <%ae>|%s", "main").strip() == (
        "Alice Admin <alice@example.com>|Bootstrap"
    )
    git(repo.path, "fsck", "--strict", "--no-dangling")


def test_it_uses_the_injected_clock(repo: GitRepository) -> None:
    seed(repo)
    assert (
        git(repo.path, "log", "-1", "--format=%at %ct", "main").split()
        == [str(int(WHEN.timestamp()))] * 2
    )
    local = GitRepository(repo.path, clock=lambda: WHEN.astimezone(timezone(timedelta(hours=2))))
    local.commit(
        {"a.txt": b"a\n"},
        message="Later\n",
        author=ALICE,
        branch="main",
        expected_parent=repo.head("main"),
    )
    assert git(repo.path, "log", "-1", "--format=%ai", "main").strip().endswith("+0200")


def test_it_rebuilds_only_the_trees_on_the_changed_path(repo: GitRepository) -> None:
    first = seed(repo)
    second = repo.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 8\n"},
        message="More GPUs for alpha\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    assert git(repo.path, "rev-parse", f"{second}^").strip() == first

    def tree(rev: str, path: str) -> str:
        return git(repo.path, "rev-parse", f"{rev}:{path}").strip()

    # Untouched subtrees keep their object ids; the ones above the change are new.
    assert tree(first, "tenants/bravo") == tree(second, "tenants/bravo")
    assert tree(first, "clusters") == tree(second, "clusters")
    assert tree(first, "tenants/alpha") != tree(second, "tenants/alpha")
    assert tree(first, "tenants") != tree(second, "tenants")


def test_it_writes_trees_git_would_write(repo: GitRepository) -> None:
    # Names that sort differently as files and as directories ("a-" < "a.b" < "a/" < "a0"),
    # and a directory big enough (300 entries) to take the cached large-tree path.
    changes: dict[str, bytes | None] = {f"tenants/t{i:03d}/x.yaml": b"x\n" for i in range(300)}
    changes.update({"a-": b"1\n", "a.b": b"2\n", "a/c": b"3\n", "a0": b"4\n"})
    sha = repo.commit(changes, message="Many\n", author=ALICE, branch="main", expected_parent=None)
    sha = repo.commit(
        {"tenants/t150/x.yaml": None, "tenants/t150-b/y.yaml": b"y\n", "tenants/t299/z": b"z\n"},
        message="Edit\n",
        author=ALICE,
        branch="main",
        expected_parent=sha,
    )
    git(repo.path, "fsck", "--strict", "--no-dangling")
    # git mktree re-sorts and re-serialises what ls-tree lists: the same id means the same
    # bytes, so our serialisation is git's own.
    for path in ("", "tenants", "a"):
        listing = git(repo.path, "ls-tree", f"{sha}:{path}" if path else f"{sha}^{{tree}}")
        rebuilt = subprocess.run(
            ["git", f"--git-dir={repo.path}", "mktree"],
            input=listing,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        expected = git(repo.path, "rev-parse", f"{sha}:{path}" if path else f"{sha}^{{tree}}")
        assert rebuilt == expected.strip()
    assert "t150/" not in repo.list_dir(sha, "tenants")
    assert "t150-b/" in repo.list_dir(sha, "tenants")


def test_it_deletes_files_and_drops_empty_directories(repo: GitRepository) -> None:
    first = seed(repo)
    sha = repo.commit(
        {"tenants/bravo/quota.yaml": None, "tenants/alpha/limits.yaml": None},
        message="Offboard bravo\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    assert repo.list_dir(sha, "tenants") == ["alpha/"]
    assert repo.read_tree(sha, "tenants") == {"tenants/alpha/quota.yaml": b"gpu: 4\n"}
    assert git(repo.path, "ls-tree", "-d", "main:tenants").count("\n") == 1


def test_it_refuses_to_delete_a_missing_file(repo: GitRepository) -> None:
    first = seed(repo)
    for path in ("tenants/alpha/nope.yaml", "tenants/alpha", "nowhere/at/all"):
        with pytest.raises(PathNotFound):
            repo.commit(
                {path: None},
                message="Delete\n",
                author=ALICE,
                branch="main",
                expected_parent=first,
            )
    assert repo.head("main") == first


def test_it_returns_the_parent_for_an_empty_change(repo: GitRepository) -> None:
    first = seed(repo)
    same = repo.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 4\n"},
        message="No-op\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    assert same == first
    assert git(repo.path, "rev-list", "--count", "main").strip() == "1"
    # Still compare-and-swap: a stale parent is a conflict even when nothing would change.
    second = repo.commit(
        {"x": b"x\n"}, message="x\n", author=ALICE, branch="main", expected_parent=first
    )
    with pytest.raises(RefConflict):
        repo.commit({}, message="No-op\n", author=ALICE, branch="main", expected_parent=first)
    assert repo.head("main") == second


@pytest.mark.parametrize(
    "path",
    [
        "../outside.yaml",
        "tenants/../../etc/passwd",
        "/etc/passwd",
        ".git/config",
        "tenants/.GIT/hooks/pre-receive",
        "",
        "tenants//x.yaml",
        "tenants/x/",
        "./x.yaml",
        "tenants/./x.yaml",
        "tenants\\x.yaml",
        "tenants/x\n.yaml",
        "tenants/x\x00.yaml",
    ],
)
def test_it_rejects_bad_paths(repo: GitRepository, path: str) -> None:
    first = seed(repo)
    with pytest.raises(InvalidPath):
        repo.commit(
            {path: b"x"}, message="Bad\n", author=ALICE, branch="main", expected_parent=first
        )
    with pytest.raises(InvalidPath):
        repo.read_file(first, path)
    assert repo.head("main") == first


def test_it_rejects_a_file_where_a_directory_is(repo: GitRepository) -> None:
    first = seed(repo)
    for changes in (
        {"tenants/alpha": b"a file now\n"},
        {"tenants/alpha/quota.yaml/deeper": b"x\n"},
        {"new/a": b"1\n", "new/a/b": b"2\n"},
        {"new/a/b": b"2\n", "new/a": b"1\n"},
    ):
        with pytest.raises(InvalidPath):
            repo.commit(
                changes, message="Bad\n", author=ALICE, branch="main", expected_parent=first
            )
    assert repo.head("main") == first


def test_it_validates_identities_and_branch_names(repo: GitRepository) -> None:
    for name, email in (("A <evil>", "a@x"), ("A", "a@x>\nB"), ("", "a@x"), ("A", " ")):
        with pytest.raises(ValueError):
            Identity(name, email)
    with pytest.raises(gitops.repo.GitRepositoryError):
        repo.head("bad..name")
    with pytest.raises(UnknownRevision):
        repo.read_file("main", "x")  # main is unborn
    with pytest.raises(UnknownRevision):
        repo.read_file("0" * 40, "x")


# --- compare-and-swap ----------------------------------------------------------------------


def test_it_detects_a_moved_branch(repo: GitRepository) -> None:
    first = seed(repo)
    second = repo.commit(
        {"a.txt": b"a\n"}, message="A\n", author=ALICE, branch="main", expected_parent=first
    )
    with pytest.raises(RefConflict) as caught:
        repo.commit(
            {"b.txt": b"b\n"}, message="B\n", author=BOB, branch="main", expected_parent=first
        )
    assert (caught.value.ref, caught.value.expected, caught.value.actual) == (
        "refs/heads/main",
        first,
        second,
    )
    assert repo.head("main") == second
    assert repo.read_file("main", "b.txt") is None


def test_it_creates_branches_only_once(repo: GitRepository) -> None:
    first = seed(repo)
    with pytest.raises(RefConflict) as caught:
        repo.commit({"x": b"x"}, message="x\n", author=ALICE, branch="main", expected_parent=None)
    assert caught.value.expected is None and caught.value.actual == first
    assert repo.create_branch("change/1", at=first) == first
    with pytest.raises(RefConflict):
        repo.create_branch("change/1", at="main")
    second = repo.commit(
        {"x": b"x\n"}, message="x\n", author=ALICE, branch="change/1", expected_parent=first
    )
    assert repo.head("change/1") == second
    assert repo.create_branch("change/1", at=first, force=True) == first
    assert repo.head("change/1") == first
    with pytest.raises(gitops.repo.GitRepositoryError, match="cannot update"):
        repo.create_branch("change", at=first)  # git cannot hold change and change/1
    repo.delete_branch("change/1", expected=first)
    assert repo.head("change/1") is None
    with pytest.raises(gitops.repo.GitRepositoryError):
        repo.delete_branch("main", expected=first)


def test_it_sees_refs_moved_by_the_git_cli(repo: GitRepository) -> None:
    first = seed(repo)
    second = repo.commit(
        {"a.txt": b"a\n"}, message="A\n", author=ALICE, branch="main", expected_parent=first
    )
    # Someone rewinds main with plain git: our compare-and-swap notices.
    git(repo.path, "update-ref", "refs/heads/main", first, second)
    with pytest.raises(RefConflict):
        repo.commit({"b": b"b"}, message="B\n", author=ALICE, branch="main", expected_parent=second)
    assert repo.head("main") == first


def test_it_handles_packed_refs(repo: GitRepository) -> None:
    first = seed(repo)
    repo.create_branch("change/7", at=first)
    git(repo.path, "pack-refs", "--all", "--prune")
    git(repo.path, "repack", "-a", "-d", "-q")  # and the objects: reads come from the pack
    assert not (repo.path / "refs/heads/main").exists()
    assert f"{first} refs/heads/main" in (repo.path / "packed-refs").read_text()
    assert repo.head("main") == first
    second = repo.commit(
        {"x": b"x\n"}, message="x\n", author=ALICE, branch="main", expected_parent=first
    )
    # The new loose ref wins over the stale packed one, for us and for git.
    assert repo.head("main") == second
    assert git(repo.path, "rev-parse", "main").strip() == second
    git(repo.path, "pack-refs", "--all", "--prune")
    with pytest.raises(RefConflict):
        repo.commit({"y": b"y"}, message="y\n", author=ALICE, branch="main", expected_parent=first)
    assert repo.head("main") == second
    repo.delete_branch("change/7", expected=first)
    assert repo.head("change/7") is None
    assert "change/7" not in (repo.path / "packed-refs").read_text()
    git(repo.path, "fsck", "--strict", "--no-dangling")


def test_it_keeps_working_after_maintenance(repo: GitRepository) -> None:
    tip = seed(repo)
    for i in range(20):
        tip = repo.commit(
            {f"tenants/t{i}/quota.yaml": b"gpu: 1\n"},
            message=f"Tenant {i}\n",
            author=ALICE,
            branch="main",
            expected_parent=tip,
        )
    git(repo.path, "config", "gc.auto", "1")
    repo.maintain()
    assert repo.read_file("main", "tenants/t7/quota.yaml") == b"gpu: 1\n"
    after = repo.commit(
        {"tenants/t7/quota.yaml": b"gpu: 2\n"},
        message="After gc\n",
        author=ALICE,
        branch="main",
        expected_parent=tip,
    )
    assert repo.read_file(after, "tenants/t7/quota.yaml") == b"gpu: 2\n"
    git(repo.path, "fsck", "--strict", "--no-dangling")


def test_it_waits_for_a_ref_lock_held_by_another_writer(repo: GitRepository) -> None:
    first = seed(repo)
    lock = repo.path / "refs/heads/main.lock"
    lock.write_text("")  # what git update-ref holds while it updates main
    releaser = threading.Timer(0.3, lock.unlink)
    releaser.start()
    started = time.monotonic()
    second = repo.commit(
        {"x": b"x\n"}, message="x\n", author=ALICE, branch="main", expected_parent=first
    )
    releaser.join()
    assert time.monotonic() - started >= 0.25
    assert repo.head("main") == second


def test_it_gives_up_on_a_stale_ref_lock(
    repo: GitRepository, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = seed(repo)
    (repo.path / "refs/heads/main.lock").write_text("")
    monkeypatch.setattr(gitops.repo, "_LOCK_TIMEOUT_SECONDS", 0.2)
    with pytest.raises(RefLocked, match=r"main\.lock"):
        repo.commit({"x": b"x"}, message="x\n", author=ALICE, branch="main", expected_parent=first)
    assert repo.head("main") == first


def test_it_rebuilds_on_conflict_in_commit_with_retry(repo: GitRepository) -> None:
    first = seed(repo)
    seen: list[str | None] = []

    def build(tip: Snapshot) -> dict[str, bytes | None]:
        seen.append(tip.sha)
        if len(seen) == 1:
            # Another writer gets in between our read and our write.
            repo.commit(
                {"tenants/bravo/quota.yaml": b"gpu: 3\n"},
                message="Racer\n",
                author=BOB,
                branch="main",
                expected_parent=tip.sha,
            )
        gpus = tip.read_file("tenants/bravo/quota.yaml")
        return {"tenants/alpha/seen.yaml": gpus or b""}

    sha = repo.commit_with_retry(build, branch="main", message="Mine\n", author=ALICE)
    assert seen[0] == first and seen[1] != first and len(seen) == 2
    assert repo.read_file(sha, "tenants/alpha/seen.yaml") == b"gpu: 3\n"
    assert git(repo.path, "log", "--format=%s", "main").split() == ["Mine", "Racer", "Bootstrap"]


def test_it_creates_the_branch_in_commit_with_retry(repo: GitRepository) -> None:
    sha = repo.commit_with_retry(
        lambda tip: {"first.txt": b"%d\n" % len(tip.read_tree())},
        branch="main",
        message="First\n",
        author=ALICE,
    )
    assert repo.head("main") == sha
    assert repo.read_file(sha, "first.txt") == b"0\n"


# --- diff and merge --------------------------------------------------------------------------


def test_it_diffs_two_commits(repo: GitRepository) -> None:
    first = seed(repo)
    second = repo.commit(
        {
            "tenants/alpha/quota.yaml": b"gpu: 6\n",
            "tenants/bravo/quota.yaml": None,
            "tenants/charlie/quota.yaml": b"gpu: 1\n",
        },
        message="Change\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    changes = {c.path: c for c in repo.diff(first, second)}
    assert list(changes) == sorted(changes)
    alpha = changes["tenants/alpha/quota.yaml"]
    assert (alpha.status, alpha.old_bytes, alpha.new_bytes) == (
        "modified",
        b"gpu: 4\n",
        b"gpu: 6\n",
    )
    assert "-gpu: 4\n+gpu: 6\n" in alpha.patch
    bravo = changes["tenants/bravo/quota.yaml"]
    assert (bravo.status, bravo.old_bytes, bravo.new_bytes) == ("deleted", b"gpu: 2\n", None)
    charlie = changes["tenants/charlie/quota.yaml"]
    assert (charlie.status, charlie.old_bytes, charlie.new_bytes) == ("added", None, b"gpu: 1\n")
    assert "+gpu: 1" in charlie.patch
    assert repo.diff(second, second) == []


def _open_change(
    repo: GitRepository, name: str, base: str, changes: dict[str, bytes | None]
) -> str:
    repo.create_branch(name, at=base)
    return repo.commit(changes, message=f"{name}\n", author=BOB, branch=name, expected_parent=base)


def _trailers(repo: GitRepository, rev: str) -> str:
    return git(repo.path, "log", "-1", "--format=%(trailers:only,unfold)", rev).strip()


def test_it_merges_a_branch_as_one_squash_commit(repo: GitRepository) -> None:
    first = seed(repo)
    _open_change(repo, "change/1", first, {"tenants/alpha/quota.yaml": b"gpu: 6\n"})
    # A second revision on the branch: still one commit on main.
    head = repo.commit(
        {"tenants/alpha/endpoints/llm.yaml": b"kind: InferenceService\n"},
        message="Add endpoint\n",
        author=BOB,
        branch="change/1",
        expected_parent=repo.head("change/1"),
    )
    message = format_message(
        "More GPUs for alpha",
        "Requested through the portal.",
        {
            "Change-Request": "1",
            "Requested-by": str(BOB),
            "Approved-by": str(ALICE),
        },
    )
    merged = repo.merge("change/1", message=message, author=BOB, committer=ALICE)
    assert repo.head("main") == merged
    assert git(repo.path, "rev-list", "--parents", "-1", merged).split() == [merged, first]
    assert git(repo.path, "rev-parse", f"{merged}^{{tree}}") == git(
        repo.path, "rev-parse", f"{head}^{{tree}}"
    )
    assert git(repo.path, "log", "-1", "--format=%an|%cn|%s", merged).strip() == (
        "Bob Builder|Alice Admin|More GPUs for alpha"
    )
    assert _trailers(repo, merged) == (
        "Change-Request: 1\n"
        "Requested-by: Bob Builder <bob@example.com>\n"
        "Approved-by: Alice Admin <alice@example.com>"
    )
    # Merging again changes nothing: main already holds the change.
    assert repo.merge("change/1", message=message, author=BOB) == merged
    git(repo.path, "fsck", "--strict", "--no-dangling")


def test_it_makes_a_real_merge_commit_when_asked(repo: GitRepository) -> None:
    first = seed(repo)
    head = _open_change(repo, "change/2", first, {"tenants/bravo/quota.yaml": b"gpu: 3\n"})
    merged = repo.merge("change/2", message="Merge change 2\n", author=ALICE, strategy="merge")
    assert git(repo.path, "rev-list", "--parents", "-1", merged).split() == [merged, first, head]
    assert repo.merge("change/2", message="Again\n", author=ALICE, strategy="merge") == merged


def test_it_merges_after_main_moved(repo: GitRepository) -> None:
    first = seed(repo)
    _open_change(repo, "change/1", first, {"tenants/alpha/quota.yaml": b"gpu: 6\n"})
    moved = repo.commit(
        {"tenants/bravo/quota.yaml": b"gpu: 5\n", "tenants/delta/quota.yaml": b"gpu: 1\n"},
        message="Elsewhere\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    merged = repo.merge("change/1", message="Merge\n", author=BOB)
    assert git(repo.path, "rev-list", "--parents", "-1", merged).split() == [merged, moved]
    files = repo.read_tree(merged, "tenants")
    assert files["tenants/alpha/quota.yaml"] == b"gpu: 6\n"
    assert files["tenants/bravo/quota.yaml"] == b"gpu: 5\n"
    assert files["tenants/delta/quota.yaml"] == b"gpu: 1\n"


def test_it_merges_separate_lines_of_one_file(repo: GitRepository) -> None:
    base = repo.commit(
        {"tenants/kustomization.yaml": b"resources:\n- alpha\n- bravo\n- charlie\n- delta\n"},
        message="Index\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )
    _open_change(
        repo,
        "change/1",
        base,
        {"tenants/kustomization.yaml": b"resources:\n- alpha-1\n- bravo\n- charlie\n- delta\n"},
    )
    repo.commit(
        {"tenants/kustomization.yaml": b"resources:\n- alpha\n- bravo\n- charlie\n- delta-2\n"},
        message="Other line\n",
        author=ALICE,
        branch="main",
        expected_parent=base,
    )
    merged = repo.merge("change/1", message="Merge\n", author=BOB)
    assert repo.read_file(merged, "tenants/kustomization.yaml") == (
        b"resources:\n- alpha-1\n- bravo\n- charlie\n- delta-2\n"
    )


def test_it_raises_merge_conflict(repo: GitRepository) -> None:
    first = seed(repo)
    _open_change(
        repo,
        "change/1",
        first,
        {"tenants/alpha/quota.yaml": b"gpu: 6\n", "tenants/bravo/quota.yaml": b"gpu: 9\n"},
    )
    moved = repo.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 7\n", "tenants/bravo/quota.yaml": None},
        message="Competing\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    with pytest.raises(MergeConflict) as caught:
        repo.merge("change/1", message="Merge\n", author=BOB)
    # Same line edited on both sides, and modified here but deleted there.
    assert caught.value.paths == ["tenants/alpha/quota.yaml", "tenants/bravo/quota.yaml"]
    assert repo.head("main") == moved


def test_it_reports_a_file_directory_clash_as_a_conflict(repo: GitRepository) -> None:
    first = seed(repo)
    _open_change(repo, "change/1", first, {"tenants/echo": b"a file\n"})
    repo.commit(
        {"tenants/echo/quota.yaml": b"gpu: 1\n"},
        message="Echo as a directory\n",
        author=ALICE,
        branch="main",
        expected_parent=first,
    )
    with pytest.raises(MergeConflict) as caught:
        repo.merge("change/1", message="Merge\n", author=BOB)
    assert caught.value.paths == ["tenants/echo"]


def test_it_returns_the_merge_base(repo: GitRepository) -> None:
    first = seed(repo)
    _open_change(repo, "change/1", first, {"a": b"a\n"})
    repo.commit({"b": b"b\n"}, message="b\n", author=ALICE, branch="main", expected_parent=first)
    assert repo.merge_base("main", "change/1") == first
    assert repo.is_ancestor(first, "main")
    assert not repo.is_ancestor("change/1", "main")
    assert repo.commit_message("change/1") == "change/1\n"


# --- commit messages ---------------------------------------------------------------------


def test_it_formats_messages_with_git_trailers(repo: GitRepository) -> None:
    message = format_message(
        "  Add an endpoint\nfor alpha ",
        "Line one\r\nLine two   \n",
        {
            "Change-Request": "42",
            "Requested-by": "Alice <alice@example.com>\nApproved-by: Mallory <m@example.com>",
            "Approved-by": "Bob\x00 <bob@example.com>",
        },
    )
    assert message == (
        "Add an endpoint for alpha\n\n"
        "Line one\nLine two\n\n"
        "Change-Request: 42\n"
        "Requested-by: Alice <alice@example.com> Approved-by: Mallory <m@example.com>\n"
        "Approved-by: Bob <bob@example.com>\n"
    )
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"],
        input=message,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The injected "Approved-by" stays inside Alice's value: exactly three trailers.
    assert parsed.count("\n") == 3
    assert format_message("Title") == "Title\n"
    for bad in ({"Bad Key": "x"}, {"Empty": " \n "}):
        with pytest.raises(ValueError):
            format_message("Title", "", bad)
    with pytest.raises(ValueError):
        format_message(" \n ")


# --- remotes -------------------------------------------------------------------------------


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    path = tmp_path / "remote.git"
    run("git", "init", "-q", "--bare", "--initial-branch=main", str(path))
    return path


def _commit_on_remote(remote: Path, tmp_path: Path, path: str, content: str) -> str:
    """Someone else pushes to the remote with the plain git CLI."""
    work = tmp_path / f"work-{time.monotonic_ns()}"
    run("git", "clone", "-q", str(remote), str(work))
    target = work / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    run("git", "add", "-A", cwd=work)
    run("git", "commit", "-q", "-m", f"CLI edit of {path}", cwd=work)
    run("git", "push", "-q", "origin", "HEAD:main", cwd=work)
    return run("git", "rev-parse", "HEAD", cwd=work).strip()


def test_it_pushes_and_fetches(repo: GitRepository, remote: Path, tmp_path: Path) -> None:
    first = seed(repo)
    repo.push(str(remote), ["refs/heads/main:refs/heads/main"])
    assert git(remote, "rev-parse", "main").strip() == first
    other = GitRepository.open_or_init(tmp_path / "mirror.git")
    other.fetch(str(remote), ["+refs/heads/main:refs/heads/main"])
    assert other.head("main") == first
    assert other.read_file("main", "tenants/alpha/quota.yaml") == b"gpu: 4\n"


def test_it_rejects_a_push_when_the_remote_moved(
    repo: GitRepository, remote: Path, tmp_path: Path
) -> None:
    first = seed(repo)
    repo.push(str(remote), ["refs/heads/main:refs/heads/main"])
    theirs = _commit_on_remote(remote, tmp_path, "infrastructure/policy.yaml", "kind: Policy\n")
    repo.commit({"a": b"a\n"}, message="a\n", author=ALICE, branch="main", expected_parent=first)
    with pytest.raises(PushRejected):
        repo.push(str(remote), ["refs/heads/main:refs/heads/main"])
    assert git(remote, "rev-parse", "main").strip() == theirs


def test_it_rebases_onto_a_remote_that_moved(
    repo: GitRepository, remote: Path, tmp_path: Path
) -> None:
    first = seed(repo)
    assert repo.sync_with_remote(str(remote)).pushed
    theirs = _commit_on_remote(remote, tmp_path, "infrastructure/policy.yaml", "kind: Policy\n")
    ours = repo.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 6\n"},
        message=format_message("More GPUs", "", {"Change-Request": "3"}),
        author=BOB,
        branch="main",
        expected_parent=first,
    )
    result = repo.sync_with_remote(str(remote), committer=ALICE)
    assert result.pushed
    assert list(result.rewritten) == [ours]
    rebased = result.rewritten[ours]
    assert result.tip == rebased == repo.head("main") == git(remote, "rev-parse", "main").strip()
    assert git(remote, "rev-list", "--parents", "-1", rebased).split() == [rebased, theirs]
    assert git(remote, "log", "-1", "--format=%an|%cn|%s", rebased).strip() == (
        "Bob Builder|Alice Admin|More GPUs"
    )
    assert _trailers(repo, rebased) == "Change-Request: 3"
    assert git(remote, "show", "main:infrastructure/policy.yaml") == "kind: Policy\n"
    assert git(remote, "show", "main:tenants/alpha/quota.yaml") == "gpu: 6\n"
    git(remote, "fsck", "--strict", "--no-dangling")
    # Nothing left to do the second time.
    again = repo.sync_with_remote(str(remote))
    assert (again.pushed, again.tip, again.rewritten) == (False, rebased, {})


def test_it_fast_forwards_to_a_remote_that_moved(
    repo: GitRepository, remote: Path, tmp_path: Path
) -> None:
    seed(repo)
    repo.sync_with_remote(str(remote))
    theirs = _commit_on_remote(remote, tmp_path, "README.md", "fleet\n")
    result = repo.sync_with_remote(str(remote))
    assert (result.pushed, result.tip) == (False, theirs)
    assert repo.head("main") == theirs
    assert repo.read_file("main", "README.md") == b"fleet\n"


def test_it_stops_a_rebase_on_conflict(repo: GitRepository, remote: Path, tmp_path: Path) -> None:
    first = seed(repo)
    repo.sync_with_remote(str(remote))
    theirs = _commit_on_remote(remote, tmp_path, "tenants/alpha/quota.yaml", "gpu: 1\n")
    ours = repo.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 6\n"},
        message="Mine\n",
        author=BOB,
        branch="main",
        expected_parent=first,
    )
    with pytest.raises(MergeConflict) as caught:
        repo.sync_with_remote(str(remote))
    assert caught.value.paths == ["tenants/alpha/quota.yaml"]
    assert repo.head("main") == ours
    assert git(remote, "rev-parse", "main").strip() == theirs


def test_it_keeps_an_executable_bit(repo: GitRepository, remote: Path, tmp_path: Path) -> None:
    seed(repo)
    repo.sync_with_remote(str(remote))
    work = tmp_path / "work"
    run("git", "clone", "-q", str(remote), str(work))
    (work / "hook.sh").write_text("#!/bin/sh\n")
    (work / "hook.sh").chmod(0o755)
    run("git", "add", "-A", cwd=work)
    run("git", "commit", "-q", "-m", "Hook", cwd=work)
    run("git", "push", "-q", "origin", "HEAD:main", cwd=work)
    repo.sync_with_remote(str(remote))
    sha = repo.commit(
        {"hook.sh": b"#!/bin/sh\nexit 0\n"},
        message="Edit hook\n",
        author=ALICE,
        branch="main",
        expected_parent=repo.head("main"),
    )
    assert git(repo.path, "ls-tree", sha, "hook.sh").startswith("100755 blob")


def test_it_hides_credentials_in_remote_errors(repo: GitRepository) -> None:
    seed(repo)
    with pytest.raises(RemoteError) as caught:
        repo.push(
            "http://flux:hunter2@127.0.0.1:9/fleet.git",
            ["refs/heads/main:refs/heads/main"],
            username="flux",
            password="hunter2",
        )
    assert "hunter2" not in str(caught.value)
