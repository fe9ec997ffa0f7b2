"""squash_chain builds the history one-at-a-time merges would, without a whole-tree diff per
change: random changes forked from different points of main, merged both ways, compared."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gitops.repo import ChainItem, GitRepository, Identity, MergeConflict

ME = Identity("Test", "test@example.com")


def _lines(seed: int, count: int = 6) -> bytes:
    return "".join(f"line {seed}-{n}\n" for n in range(count)).encode()


def _scenario(repo: GitRepository, rng: random.Random, changes: int) -> tuple[str, list[str]]:
    """Main with a few commits, and ``changes`` branches forked from any of them, each
    editing, adding or deleting files (often the same ones, so some clash or line-merge)."""
    files = {f"tenants/t{i}/f{j}.yaml": _lines(i * 10 + j) for i in range(6) for j in range(3)}
    mains = [repo.commit(files, message="base", author=ME, branch="main", expected_parent=None)]
    for step in range(3):
        path = rng.choice(sorted(files))
        mains.append(
            repo.commit(
                {path: _lines(100 + step) if rng.random() < 0.7 else None},
                message=f"main {step}",
                author=ME,
                branch="main",
                expected_parent=mains[-1],
            )
        )
    heads = []
    for n in range(changes):
        fork = rng.choice(mains)
        branch = f"change-{n}"
        repo.create_branch(branch, fork)
        edits: dict[str, bytes | None] = {}
        for _ in range(rng.randint(1, 3)):
            tenant, number = rng.randrange(7), rng.randrange(4)
            path = f"tenants/t{tenant}/f{number}.yaml"
            roll = rng.random()
            if roll < 0.15:
                edits[path] = None
            elif roll < 0.55:
                # One line changed: two such edits of one file may merge line by line.
                old = repo.read_file(fork, path) or _lines(tenant * 10 + number)
                lines = old.decode().splitlines(keepends=True)
                lines[rng.randrange(len(lines))] = f"edit {n}\n"
                edits[path] = "".join(lines).encode()
            else:
                edits[path] = _lines(1000 + n)
        try:
            heads.append(
                repo.commit(edits, message=branch, author=ME, branch=branch, expected_parent=fork)
            )
        except Exception:  # a deletion of a file the fork lacks: no such change
            continue
    return mains[-1], heads


@pytest.mark.parametrize("seed", range(12))
def test_a_chain_is_the_one_at_a_time_merges(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    repo = GitRepository.open_or_init(tmp_path / f"fleet-{seed}.git")
    base, heads = _scenario(repo, rng, changes=10)
    items = [ChainItem(n, head, f"merge {n}", ME, ME) for n, head in enumerate(heads)]
    chain = repo.squash_chain(base, items)

    # The same changes merged into a branch one at a time, as a single merge does it.
    repo.create_branch("serial", base)
    expected_commits: dict[int, str] = {}
    expected_conflicts: dict[int, list[str]] = {}
    expected_empty: list[int] = []
    for n, head in enumerate(heads):
        before = repo.head("serial")
        try:
            after = repo.merge(head, message=f"merge {n}", author=ME, into="serial")
        except MergeConflict as exc:
            expected_conflicts[n] = exc.paths
            continue
        if after == before:
            expected_empty.append(n)
        else:
            expected_commits[n] = after

    assert chain.conflicts == expected_conflicts
    assert chain.empty == expected_empty
    assert set(chain.commits) == set(expected_commits)
    for n, sha in chain.commits.items():
        assert repo.read_tree(sha) == repo.read_tree(expected_commits[n]), n
    assert repo.read_tree(chain.tip) == repo.read_tree(repo.head("serial") or base)


def test_the_scenarios_do_clash_and_merge_lines() -> None:
    """The comparison above is worth something only if the scenarios reach every branch."""
    outcomes = {"conflict": 0, "empty": 0, "merged": 0}
    import tempfile

    for seed in range(12):
        with tempfile.TemporaryDirectory() as tmp:
            repo = GitRepository.open_or_init(Path(tmp) / "fleet.git")
            base, heads = _scenario(repo, random.Random(seed), changes=10)
            chain = repo.squash_chain(
                base, [ChainItem(n, h, "m", ME, ME) for n, h in enumerate(heads)]
            )
            outcomes["conflict"] += len(chain.conflicts)
            outcomes["empty"] += len(chain.empty)
            outcomes["merged"] += len(chain.commits)
    assert outcomes["conflict"] > 0 and outcomes["merged"] > 20
