"""The repository's own tree diff says what libgit2's says: random trees with large levels
(most bytes shared), files turned into directories and back, whole directories added and
deleted, executable bits and symlinks changed."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest

from gitops.repo import GitRepository, Identity

ME = Identity("Test", "test@example.com")


def _tree(repo: GitRepository, files: dict[str, tuple[int, bytes]]) -> pygit2.Tree:
    """A tree holding ``files`` (path -> (mode, content)), written with libgit2's own index."""
    raw = repo._repo
    index = pygit2.Index()
    for path, (mode, data) in files.items():
        index.add(pygit2.IndexEntry(path, raw.create_blob(data), mode))
    tree = raw[index.write_tree(raw)]
    assert isinstance(tree, pygit2.Tree)
    return tree


def _fleet(rng: random.Random, tenants: int) -> dict[str, tuple[int, bytes]]:
    files = {"tenants/kustomization.yaml": (0o100644, b"index\n")}
    for n in range(tenants):
        for name in rng.sample(["a.yaml", "b.yaml", "c.yaml", "sub/d.yaml"], rng.randint(1, 4)):
            files[f"tenants/t{n:05d}/{name}"] = (0o100644, f"{n} {name}\n".encode())
    files["platform/x.yaml"] = (0o100644, b"x\n")
    return files


def _edit(rng: random.Random, files: dict[str, tuple[int, bytes]], edits: int) -> dict:
    files = dict(files)
    paths = sorted(files)
    for step in range(edits):
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.2:
            files.pop(path, None)
        elif roll < 0.3:  # a whole directory goes
            top = path.rsplit("/", 1)[0]
            for other in [p for p in files if p.startswith(f"{top}/")]:
                del files[other]
        elif roll < 0.4:  # a file becomes a directory
            if path in files:
                del files[path]
                if not any(p.startswith(f"{path}/") for p in files):
                    files[f"{path}/inner.yaml"] = (0o100644, f"inner {step}\n".encode())
        elif roll < 0.5:  # a directory becomes a file
            top = path.rsplit("/", 1)[0]
            for other in [p for p in files if p.startswith(f"{top}/")]:
                del files[other]
            if not any(p.startswith(f"{top}/") for p in files):
                files[top] = (0o100644, b"now a file\n")
        elif roll < 0.6 and path in files:  # executable, or a symlink
            mode = rng.choice([0o100755, 0o120000, 0o100644])
            files[path] = (mode, files[path][1])
        elif roll < 0.8:
            files[f"tenants/t{rng.randrange(100000):05d}/new.yaml"] = (0o100644, b"new\n")
        elif path in files:
            files[path] = (files[path][0], f"changed {step}\n".encode())
    # No file may sit where a directory is (git cannot hold both).
    for path in list(files):
        if any(p.startswith(f"{path}/") for p in files):
            del files[path]
    return files


@pytest.mark.parametrize("seed", range(40))
def test_the_diff_is_libgit2s(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    repo = GitRepository.open_or_init(tmp_path / "fleet.git")
    files = _fleet(rng, rng.choice([3, 40, 600]))
    old = _tree(repo, files)
    new = _tree(repo, _edit(rng, files, rng.choice([1, 2, 5, 30])))
    for a, b in ((old, new), (new, old), (old, old)):
        expected = repo._changed_by_libgit2(a, b)
        assert repo._changed(a, b) == expected
        # And when the first tree is parsed already (kept, as main's tip is).
        repo._tree_cache.clear()
        repo._tree_entries(a.id)
        assert repo._changed(a, b) == expected


def test_one_tenant_changed_among_many(tmp_path: Path) -> None:
    """The case the diff is for: one file of one tenant of thousands, at the start, middle and
    end of ``tenants/``, and a tenant added after the last."""
    rng = random.Random(7)
    repo = GitRepository.open_or_init(tmp_path / "fleet.git")
    files = _fleet(rng, 3000)
    old = _tree(repo, files)
    slugs = sorted({p.split("/")[1] for p in files if p.startswith("tenants/t")})
    for slug in (slugs[0], slugs[1500], slugs[-1], "t99999"):
        edited = {**files, f"tenants/{slug}/a.yaml": (0o100644, b"edited\n")}
        new = _tree(repo, edited)
        changed = repo._changed(old, new)
        assert set(changed) == {f"tenants/{slug}/a.yaml"}
        assert changed == repo._changed_by_libgit2(old, new)
        back = repo._changed(new, old)
        assert back == repo._changed_by_libgit2(new, old)
