"""The portal's Git engine: one class over a bare repository, the only module that imports pygit2.

Why it looks like this:

* **No working tree, no index file.** A commit is built from in-memory trees: the parent's trees
  are reused by object id and only the trees along a changed path are rewritten, so a change to
  one tenant directory out of 10,000 writes a handful of objects instead of scanning 80,000
  files (see ``docs/benchmarks.md``). Trees are serialised here rather than with libgit2's
  TreeBuilder, because libgit2 always deflates loose objects and deflating the ~330 KB
  ``tenants/`` tree of a large fleet cost more than everything else in a commit together
  (see :meth:`GitRepository._write_tree`). Blobs and commits are written by libgit2.
* **Compare-and-swap refs.** Every branch update names the commit it expects the branch to be
  at. The update takes git's own per-ref lock file (``refs/heads/<name>.lock``, created with
  ``O_EXCL`` by libgit2's reference transaction, the same lock ``git update-ref`` takes), then
  re-reads the ref (loose file, else ``packed-refs``) and only writes when it still holds the
  expected value. The lock is exclusive between threads, processes and the git CLI; the read
  happens while holding it; the write is an atomic rename of the lock file over the ref. So no
  writer can slip in between our read and our write, and a conflict surfaces as
  :class:`RefConflict` instead of a lost commit.
* **Retries rebuild, never overwrite.** :meth:`GitRepository.commit_with_retry` and
  :meth:`GitRepository.merge` re-read the tip and rebuild the change on conflict.
* **Thread safety.** libgit2 objects must not be shared between threads, so each thread (and
  each process after a fork) gets its own ``pygit2.Repository`` handle on the same path.

Semantics chosen (also in the method docstrings):

* ``commit(..., expected_parent=None)`` creates the branch and fails if it exists; the new
  commit has no parent. Start a change branch from main with :meth:`GitRepository.create_branch`.
* A change that leaves the parent's tree as it is creates no commit and returns the parent.
* :meth:`GitRepository.merge` squashes by default: one commit per change on main, with the
  change's message and trailers (request, requester, approvers), parent = main's tip. Plain
  ``git log main`` then reads as the list of approved changes, ``git revert <sha>`` undoes one
  without ``-m``, and the commit Flux reports as applied is the one that names the approvers.
  The reviewed head commit stays recorded by the portal (and on the change branch while it is
  kept). ``strategy="merge"`` makes a two-parent merge commit instead, for teams that want the
  reviewed commits reachable from main. A fast-forward is never done: it would put the
  branch's commits, without approver trailers, on main's first-parent line.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import random
import re
import shutil
import subprocess
import threading
import time
import zlib
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal, TypeVar

import pygit2
from pygit2.enums import DeltaStatus, FileMode

__all__ = [
    "Chain",
    "ChainItem",
    "FileChange",
    "GitRepository",
    "GitRepositoryError",
    "Identity",
    "InvalidPath",
    "MergeConflict",
    "MergeStrategy",
    "PathNotFound",
    "PushRejected",
    "RefConflict",
    "RefLocked",
    "Remote",
    "RemoteError",
    "RemoteUnavailable",
    "Snapshot",
    "SyncResult",
    "UnknownRevision",
    "format_message",
]

MergeStrategy = Literal["squash", "merge"]
T = TypeVar("T")
Changes = Mapping[str, bytes | None]

# libgit2 caches only trees under 4 KiB by default; the tenants/ tree of a large fleet is a few
# hundred KiB and every read_file()/list_dir() below it walks through it, so keep it parsed.
pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, 8 * 1024 * 1024)

_TREE_MODE = 0o040000
_BLOB_MODE = 0o100644
_GITLINK_MODE = 0o160000
# Trees with at least this many entries stay parsed in a small per-thread cache.
_CACHE_MIN_ENTRIES = 256
_CACHE_TREES = 4

_HEX_SHA = re.compile(r"[0-9a-f]{40}")
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRAILER_LIKE = re.compile(r"[A-Za-z0-9-]+[ \t]*:|---(?:\s|$)|\(cherry picked from commit ")
# How long a ref update waits for another writer's lock file before giving up. Writers hold the
# lock for well under a millisecond; a lock older than this is most likely left by a crash.
_LOCK_TIMEOUT_SECONDS = 10.0
# How long a portal writer waits for its turn behind the others writing the same branch.
_QUEUE_TIMEOUT_SECONDS = 60.0


# --- errors ----------------------------------------------------------------------------------


class GitRepositoryError(Exception):
    """Base class for everything this module raises on purpose."""


class InvalidPath(GitRepositoryError, ValueError):
    """A path is not a plain relative POSIX path inside the repository."""


class PathNotFound(GitRepositoryError):
    """A deletion named a file that does not exist in the parent tree."""


class UnknownRevision(GitRepositoryError):
    """A branch or commit id does not resolve to a commit."""


class RefConflict(GitRepositoryError):
    """The branch did not point where the caller expected (someone else moved it)."""

    def __init__(self, ref: str, expected: str | None, actual: str | None) -> None:
        super().__init__(f"{ref} is at {actual or 'nothing'}, expected {expected or 'nothing'}")
        self.ref = ref
        self.expected = expected
        self.actual = actual


class RefLocked(GitRepositoryError):
    """Another writer held the ref's lock file for too long (maybe a stale ``.lock`` file)."""


class MergeConflict(GitRepositoryError):
    """Both sides changed the same paths in ways that do not merge."""

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__("merge conflict in " + ", ".join(paths))
        self.paths = list(paths)


class RemoteError(GitRepositoryError):
    """Talking to a remote failed (network, authentication, protocol)."""


class PushRejected(RemoteError):
    """The remote refused a ref update, usually because it moved (not a fast-forward)."""


class RemoteUnavailable(RemoteError):
    """The remote did not answer for longer than the writer was willing to wait."""


# --- value types -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """A commit author or committer. ``str()`` gives ``Name <email>`` as used in trailers."""

    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            # Angle brackets and line breaks would corrupt the commit header.
            if not value.strip() or _CONTROL.search(value) or "<" in value or ">" in value:
                raise ValueError(f"invalid identity part: {value!r}")

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


@dataclass(frozen=True)
class FileChange:
    """One file's change between two commits, for showing a pull request."""

    path: str
    status: Literal["added", "modified", "deleted"]
    old_bytes: bytes | None
    new_bytes: bytes | None
    patch: str


@dataclass(frozen=True)
class SyncResult:
    """What :meth:`GitRepository.sync_with_remote` did.

    ``rewritten`` maps each local commit that was replayed onto the remote's branch to its new
    id, so callers can update commit ids they stored (for example a change's merge commit).
    """

    tip: str | None
    pushed: bool
    rewritten: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Remote:
    """A Git remote that is the source of truth: its URL, http(s) credentials, and how long
    one call to it may take before it counts as unreachable."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 20.0


@dataclass(frozen=True)
class ChainItem:
    """One change to squash onto a chain (:meth:`GitRepository.squash_chain`): its head commit,
    the message and identities of its squash commit, and the caller's ``key`` for it."""

    key: int
    head: str
    message: str
    author: Identity
    committer: Identity


@dataclass(frozen=True)
class Chain:
    """What :meth:`GitRepository.squash_chain` built on ``base``: one commit per item that
    changed something (``commits``: key -> its commit, in order), the last one (``tip``, or
    ``base`` when none), the items left out for clashing with those before them
    (``conflicts``: key -> paths), and those whose changes ``base`` already had (``empty``)."""

    base: str
    tip: str
    commits: dict[int, str] = field(default_factory=dict)
    conflicts: dict[int, list[str]] = field(default_factory=dict)
    empty: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    """An existing object to place at a path (used when merging, instead of new bytes)."""

    oid: pygit2.Oid
    mode: int


# A leaf of a change set: new content, an existing object, or None for a deletion.
_Leaf = bytes | _Entry | None
_Nested = dict[str, "_Leaf | _Nested"]


def format_message(title: str, body: str = "", trailers: Mapping[str, str] | None = None) -> str:
    """Build a commit message: one-line title, optional body, then git trailers.

    Trailer values are flattened to one line (line breaks and control characters would end the
    trailer block or forge extra trailers), and keys must look like git trailer tokens.
    ``git interpret-trailers --parse`` reads the result back, and reads only ``trailers``: a
    body line that git could take for a trailer or for the patch divider is quoted with
    ``> `` (callers quote user text themselves; this holds for text that was not).
    """
    title = _one_line(title)
    if not title:
        raise ValueError("a commit message needs a title")
    paragraphs = [title]
    body = "\n".join(
        _inert_body_line(line.rstrip()) for line in body.replace("\r\n", "\n").split("\n")
    ).strip("\n")
    if body:
        paragraphs.append(body)
    if trailers:
        lines = []
        for key, value in trailers.items():
            if not _TRAILER_KEY.fullmatch(key):
                raise ValueError(f"invalid trailer key: {key!r}")
            flat = _one_line(value)
            if not flat:
                raise ValueError(f"empty trailer value for {key}")
            lines.append(f"{key}: {flat}")
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs) + "\n"


def _one_line(value: str) -> str:
    return " ".join(_CONTROL.sub(" ", value).split())


def _inert_body_line(line: str) -> str:
    """``line``, quoted if git's trailer parser would act on it.

    git (trailer.c) reads a line as a trailer when a token of letters, digits and hyphens,
    optionally followed by blanks, ends at the separator ``:``; it counts ``(cherry picked from
    commit`` lines as its own trailers; and it looks for trailers only above the first line
    that starts with ``---`` and a blank (``find_patch_start``), so such a line in the body
    would hide the real trailers below it and expose the body's lines instead.
    """
    if _TRAILER_LIKE.match(line):
        return "> " + line
    return line


def _split_path(path: str) -> list[str]:
    """Validate a repository path and return its components."""
    if not isinstance(path, str) or not path:
        raise InvalidPath(f"empty path: {path!r}")
    if path.startswith("/"):
        raise InvalidPath(f"absolute path: {path!r}")
    if _CONTROL.search(path) or "\\" in path:
        raise InvalidPath(f"control character or backslash in path: {path!r}")
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidPath(f"empty, '.' or '..' component in path: {path!r}")
        # Case-folded: .GIT is .git on case-insensitive file systems that clone this repo.
        if part.casefold() == ".git":
            raise InvalidPath(f"'.git' component in path: {path!r}")
    return parts


def _split_prefix(prefix: str) -> list[str]:
    prefix = prefix.strip("/") if prefix not in ("", "/") else ""
    return _split_path(prefix) if prefix else []


def _nest(changes: Mapping[str, _Leaf], *, validate: bool = True) -> _Nested:
    """Turn ``{"a/b/c": data}`` into ``{"a": {"b": {"c": data}}}``, rejecting file/dir clashes."""
    root: _Nested = {}
    for path, value in changes.items():
        *dirs, name = _split_path(path) if validate else path.split("/")
        node = root
        for part in dirs:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidPath(f"{path!r} needs {part!r} to be a directory and a file")
            node = child
        if isinstance(node.get(name), dict):
            raise InvalidPath(f"{path!r} is both a file and a directory in this change")
        node[name] = value
    return root


def _entry_from(raw: bytes, position: int) -> tuple[bytes, bytes, int]:
    """The tree entry starting at ``position`` of a serialised tree: its sort key (a
    directory's name ends in ``/``), its bytes, and where the next entry starts."""
    # Mode and name never contain NUL, so the first NUL ends the name; 20 id bytes follow.
    nul = raw.index(b"\0", position)
    space = raw.index(b" ", position, nul)
    name = raw[space + 1 : nul]
    return (
        (name + b"/" if raw[position:space] == b"40000" else name),
        raw[position : nul + 21],
        nul + 21,
    )


class _TreeEntries:
    """A tree's entries as serialised bytes, kept in git's order, for cheap copy-and-edit.

    Git sorts entries by name bytes, comparing a directory as if its name ended in ``/``;
    ``keys`` holds exactly that sort key, so ``bisect`` finds an entry or its insertion point.
    """

    __slots__ = ("_offsets", "_raw", "entries", "keys")

    def __init__(self, keys: list[bytes], entries: list[bytes], raw: bytes | None = None) -> None:
        self.keys = keys
        self.entries = entries
        self._raw = raw
        self._offsets: list[int] | None = None

    @property
    def raw(self) -> bytes:
        """The serialised tree (what git stores)."""
        if self._raw is None:
            self._raw = b"".join(self.entries)
        return self._raw

    @property
    def offsets(self) -> list[int]:
        """Where each entry starts in ``raw``, and the length of ``raw`` last."""
        if self._offsets is None:
            self._offsets = [0, *accumulate(len(e) for e in self.entries)]
        return self._offsets

    @classmethod
    def parse(cls, raw: bytes) -> _TreeEntries:
        keys, entries = [], []
        position, end = 0, len(raw)
        while position < end:
            key, entry, position = _entry_from(raw, position)
            keys.append(key)
            entries.append(entry)
        return cls(keys, entries, raw)

    def copy(self) -> _TreeEntries:
        return _TreeEntries(list(self.keys), list(self.entries))

    def find(self, name: bytes) -> int | None:
        for key in (name, name + b"/"):
            index = bisect_left(self.keys, key)
            if index < len(self.keys) and self.keys[index] == key:
                return index
        return None

    def entry(self, index: int) -> tuple[int, bytes]:
        """(mode, raw object id) of the entry at ``index``."""
        data = self.entries[index]
        return int(data[: data.index(b" ")], 8), data[-20:]

    def remove(self, name: bytes) -> None:
        index = self.find(name)
        if index is not None:
            self._raw = self._offsets = None
            del self.keys[index]
            del self.entries[index]

    def put(self, name: bytes, mode: int, oid: bytes) -> None:
        self.remove(name)
        self._raw = self._offsets = None
        key = name + b"/" if mode == _TREE_MODE else name
        index = bisect_left(self.keys, key)
        self.keys.insert(index, key)
        self.entries.insert(index, b"%o %s\0%s" % (mode, name, oid))


_UNKNOWN: Any = object()


class _Unsupported(Exception):
    """A tree this module's own diff does not handle (a submodule): libgit2 diffs it."""


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``; compared 4 KiB at a
    time in C, then byte by byte."""
    step, i = 4096, 0
    while i + step <= limit and a[i : i + step] == b[i : i + step]:
        i += step
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    step, i, la, lb = 4096, 0, len(a), len(b)
    while i + step <= limit and a[la - i - step : la - i] == b[lb - i - step : lb - i]:
        i += step
    while i < limit and a[la - i - 1] == b[lb - i - 1]:
        i += 1
    return i


def _differing_entries(
    old: _TreeEntries, b: bytes
) -> tuple[dict[str, tuple[int, bytes]], dict[str, tuple[int, bytes]]]:
    """The entries of the tree ``old`` that the tree serialised as ``b`` does not have as they
    are, and those of ``b`` that ``old`` does not have: name -> (mode, raw id).

    Entries lying whole in the bytes both trees start with are the same in both (parsed from
    the same bytes, from the start), and so are the entries from a position that starts an
    entry in both and lies in the bytes both end with. Only ``b``'s entries in between are
    parsed, and compared with ``old``'s."""
    a = old.raw
    limit = min(len(a), len(b))
    head = _common_prefix(a, b, limit)
    tail = _common_suffix(a, b, limit - head)
    offsets = old.offsets
    # old's entries before ``first`` end within the common prefix; b has them too.
    first = bisect_right(offsets, head) - 1
    shift = len(a) - len(b)
    position = offsets[first]
    added_entries: dict[bytes, bytes] = {}
    while True:
        if position >= len(b) - tail:
            # Where old has an entry start at the same distance from the end, the rest is the
            # same entries.
            last = bisect_left(offsets, position + shift)
            if last < len(offsets) and offsets[last] == position + shift and last >= first:
                break
        key, added_entries[key], position = _entry_from(b, position)
    removed: dict[str, tuple[int, bytes]] = {}
    added: dict[str, tuple[int, bytes]] = {}
    kept: set[bytes] = set()
    for i in range(first, last):
        key = old.keys[i]
        if added_entries.get(key) == old.entries[i]:
            kept.add(key)
        else:
            removed[key.rstrip(b"/").decode("utf-8", "surrogateescape")] = old.entry(i)
    for key, data in added_entries.items():
        if key not in kept:
            mode = int(data[: data.index(b" ")], 8)
            added[key.rstrip(b"/").decode("utf-8", "surrogateescape")] = (mode, data[-20:])
    return removed, added


# --- the repository --------------------------------------------------------------------------


class Snapshot:
    """A read-only view of one commit, or of a branch that does not exist yet (``sha`` None)."""

    def __init__(self, repository: GitRepository, sha: str | None) -> None:
        self.repository = repository
        self.sha = sha

    def read_file(self, path: str) -> bytes | None:
        return self.repository.read_file(self.sha, path) if self.sha else None

    def read_tree(self, prefix: str = "") -> dict[str, bytes]:
        return self.repository.read_tree(self.sha, prefix) if self.sha else {}

    def list_dir(self, prefix: str = "") -> list[str]:
        return self.repository.list_dir(self.sha, prefix) if self.sha else []

    def object_id(self, path: str) -> str | None:
        return self.repository.object_id(self.sha, path) if self.sha else None


class GitRepository:
    """A bare Git repository written through in-memory trees and compare-and-swap ref updates.

    Revisions (``rev``) are a branch name (``main``, ``change/42``) or a full commit id.
    Paths are relative POSIX paths from the repository root.
    """

    def __init__(
        self,
        path: Path,
        *,
        main: str = "main",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Open an existing bare repository (see :meth:`open_or_init` to create one)."""
        self.path = Path(path)
        self.main = main
        self._clock = clock or (lambda: datetime.now(UTC))
        self._local = threading.local()
        self._diff_memo: dict[tuple[str, str], dict[str, _Entry | None]] = {}
        self._memo_lock = threading.Lock()
        # Called with a revision this repository lacks, before giving up on it; True when it
        # fetched something (a replica's mirror fetching a branch another replica pushed).
        self.on_missing: Callable[[str], bool] | None = None
        self._check_branch_name(main)
        try:
            bare = self._repo.is_bare
        except pygit2.GitError as exc:
            raise GitRepositoryError(f"{self.path} is not a Git repository") from exc
        if not bare:
            raise GitRepositoryError(f"{self.path} is not a bare repository")

    @classmethod
    def open_or_init(
        cls,
        path: Path,
        *,
        main: str = "main",
        clock: Callable[[], datetime] | None = None,
    ) -> GitRepository:
        """Open the bare repository at ``path``, creating it (HEAD -> ``main``, no commits) first
        when it does not exist. The main branch stays unborn until the first commit."""
        path = Path(path)
        if not (path / "HEAD").exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # Built aside and renamed into place (atomic): the first requests of a new replica
            # arrive together, and two inits in one directory fail on each other's config.lock.
            staging = path.parent / f".{path.name}.init-{os.getpid()}-{threading.get_ident()}"
            pygit2.init_repository(str(staging), bare=True, initial_head=main)
            try:
                os.rename(staging, path)
            except OSError:
                shutil.rmtree(staging)  # another writer's repository is there now
                if not (path / "HEAD").exists():
                    raise
        return cls(path, main=main, clock=clock)

    @property
    def _repo(self) -> pygit2.Repository:
        # One handle per thread and per process: libgit2 objects are not thread-safe, and a
        # handle inherited through fork() shares file descriptors and pack windows.
        local = self._local
        pid = os.getpid()
        if getattr(local, "pid", None) != pid:
            local.repo = pygit2.Repository(str(self.path))
            local.trees = OrderedDict()
            local.pid = pid
        repo: pygit2.Repository = local.repo
        return repo

    # --- reading ---------------------------------------------------------------------------

    def head(self, branch: str) -> str | None:
        """The commit id the branch points at, or None when the branch does not exist."""
        return self._read_ref(self._ref_name(branch))

    def read_file(self, rev: str, path: str) -> bytes | None:
        """The content of a file at ``rev``; None when absent (or when the path is a directory)."""
        obj = self._lookup_path(self._commit(rev).tree, _split_path(path))
        return obj.data if isinstance(obj, pygit2.Blob) else None

    def read_tree(self, rev: str, prefix: str = "") -> dict[str, bytes]:
        """Every file under ``prefix`` at ``rev``, keyed by its path from the repository root."""
        parts = _split_prefix(prefix)
        obj = self._lookup_path(self._commit(rev).tree, parts)
        if isinstance(obj, pygit2.Blob):
            return {"/".join(parts): obj.data}
        files: dict[str, bytes] = {}
        if isinstance(obj, pygit2.Tree):
            self._collect(obj, "/".join(parts), files)
        return files

    def list_dir(self, rev: str, prefix: str = "") -> list[str]:
        """Entries directly under ``prefix``, sorted; directories end with ``/`` (``"t1/"``) so
        callers can tell them from files. Empty when ``prefix`` is not a directory."""
        obj = self._lookup_path(self._commit(rev).tree, _split_prefix(prefix))
        if not isinstance(obj, pygit2.Tree):
            return []
        return sorted(f"{e.name}/" if isinstance(e, pygit2.Tree) else str(e.name) for e in obj)

    def object_id(self, rev: str, path: str) -> str | None:
        """The id of the file or directory at ``path`` in ``rev`` (None: absent): two equal ids
        are equal contents, found without reading them."""
        obj = self._lookup_path(self._commit(rev).tree, _split_prefix(path))
        return str(obj.id) if obj is not None else None

    def commit_message(self, rev: str) -> str:
        """The full message of the commit at ``rev``."""
        return self._commit(rev).message

    def parents(self, rev: str) -> list[str]:
        """The parent commit ids of ``rev`` (empty for a root commit)."""
        return [str(oid) for oid in self._commit(rev).parent_ids]

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two revisions, or None for unrelated histories."""
        base = self._repo.merge_base(self._commit(a).id, self._commit(b).id)
        return str(base) if base else None

    def is_ancestor(self, ancestor: str, rev: str) -> bool:
        """True when ``ancestor`` is ``rev`` or one of its ancestors."""
        a, b = self._commit(ancestor).id, self._commit(rev).id
        return a == b or self._repo.descendant_of(b, a)

    def diff(self, base: str, head: str) -> list[FileChange]:
        """File-by-file changes from ``base`` to ``head`` (no rename detection), sorted by path."""
        repo = self._repo
        result = []
        for patch in self._commit(base).tree.diff_to_tree(self._commit(head).tree):
            if patch is None:
                continue
            delta = patch.delta
            if delta.status == DeltaStatus.ADDED:
                status: Literal["added", "modified", "deleted"] = "added"
            elif delta.status == DeltaStatus.DELETED:
                status = "deleted"
            else:
                status = "modified"
            old = _blob(repo, delta.old_file.id).data if status != "added" else None
            new = _blob(repo, delta.new_file.id).data if status != "deleted" else None
            text = patch.data.decode("utf-8", errors="replace")
            result.append(FileChange(delta.new_file.path, status, old, new, text))
        return sorted(result, key=lambda change: change.path)

    def changed_paths(self, base: str, head: str) -> set[str]:
        """The files whose content differs between two commits (added, changed or deleted),
        found without reading any file."""
        return set(self._changed(self._commit(base).tree, self._commit(head).tree))

    # --- writing ---------------------------------------------------------------------------

    def commit(
        self,
        changes: Changes,
        *,
        message: str,
        author: Identity,
        branch: str,
        expected_parent: str | None,
        committer: Identity | None = None,
    ) -> str:
        """Commit ``changes`` (path -> new content, or None to delete) on ``branch``.

        ``expected_parent`` is the commit the branch must point at now; it becomes the new
        commit's parent. None means the branch must not exist yet: it is created with a root
        commit. Raises :class:`RefConflict` when the branch is elsewhere, :class:`PathNotFound`
        when deleting a missing file, :class:`InvalidPath` for a bad path. Directories left empty
        disappear. When the resulting tree equals the parent's, no commit is made and the parent
        is returned (after checking the branch is still there).
        """
        ref = self._ref_name(branch)
        nested = _nest(changes)
        parent = self._commit(expected_parent) if expected_parent else None
        tree_id = self._build_tree(parent.tree_id if parent else None, nested)
        if parent is not None and tree_id == parent.tree_id:
            actual = self._read_ref(ref)
            if actual != expected_parent:
                raise RefConflict(ref, expected_parent, actual)
            return str(parent.id)
        sha = self._write_commit(
            tree_id, [parent.id] if parent else [], message, author, committer or author
        )
        self._update_ref(ref, sha, expected_parent)
        return sha

    def commit_with_retry(
        self,
        build: Callable[[Snapshot], Changes],
        *,
        branch: str,
        message: str,
        author: Identity,
        committer: Identity | None = None,
        attempts: int = 20,
    ) -> str:
        """Commit what ``build`` returns for the branch's current tip, retrying on conflict.

        ``build`` receives a :class:`Snapshot` of the tip and is called again, on the new tip,
        whenever another writer moved the branch in between, so no writer's commit is lost.
        The portal's own writers of one branch take turns (a ``flock`` per branch, across
        threads and processes), so ``build`` normally runs once; keep it quick, others wait.
        """
        conflict: RefConflict | None = None
        for attempt in range(attempts):
            try:
                with self._writer_queue(self._ref_name(branch)):
                    tip = self.head(branch)
                    return self.commit(
                        build(Snapshot(self, tip)),
                        message=message,
                        author=author,
                        branch=branch,
                        expected_parent=tip,
                        committer=committer,
                    )
            except RefConflict as exc:
                conflict = exc
                _backoff(attempt)
        assert conflict is not None
        raise conflict

    def create_branch(self, name: str, at: str, *, force: bool = False) -> str:
        """Create branch ``name`` at commit ``at``; :class:`RefConflict` when it exists, unless
        ``force``, which moves an existing branch there (still one atomic ref update)."""
        sha = str(self._commit(at).id)
        ref = self._ref_name(name)
        if not force:
            self._update_ref(ref, sha, None)
            return sha
        for attempt in range(20):
            try:
                self._update_ref(ref, sha, self._read_ref(ref))
            except RefConflict:
                _backoff(attempt)
                continue
            return sha
        raise RefLocked(f"{ref} kept moving while being reset")

    def delete_branch(self, name: str, *, expected: str) -> None:
        """Delete branch ``name`` if it still points at ``expected`` (else :class:`RefConflict`)."""
        if name == self.main:
            raise GitRepositoryError("refusing to delete the main branch")
        self._update_ref(self._ref_name(name), None, expected)

    def merge(
        self,
        branch: str,
        *,
        into: str | None = None,
        message: str,
        author: Identity,
        committer: Identity | None = None,
        strategy: MergeStrategy = "squash",
        attempts: int = 20,
    ) -> str:
        """Merge a change branch into ``into`` (default: main) and return the new tip.

        ``squash`` (default) makes one commit with main's tip as its only parent; ``merge``
        makes a two-parent merge commit. Either way the message is the caller's (with the
        change's trailers), and a commit is made even when main has not moved. When main moved
        since the branch started, the trees are merged three-way in memory (file contents
        line by line, like git); clashing changes raise :class:`MergeConflict`. A branch whose
        changes main already has returns main's tip without a new commit. The update of main
        is compare-and-swap, retried on a fresh tip, so concurrent merges never lose one.
        """
        target = into or self.main
        ref = self._ref_name(target)
        conflict: RefConflict | None = None
        for attempt in range(attempts):
            try:
                with self._writer_queue(ref):
                    return self._merge_once(branch, target, message, author, committer, strategy)
            except RefConflict as exc:
                conflict = exc
                _backoff(attempt)
        assert conflict is not None
        raise conflict

    def _merge_once(
        self,
        branch: str,
        target: str,
        message: str,
        author: Identity,
        committer: Identity | None,
        strategy: MergeStrategy,
    ) -> str:
        ref = self._ref_name(target)
        ours_sha = self.head(target)
        if ours_sha is None:
            raise UnknownRevision(f"branch {target!r} does not exist")
        ours, theirs = self._commit(ours_sha), self._commit(branch)
        if self.is_ancestor(str(theirs.id), ours_sha):
            return ours_sha
        base_sha = self.merge_base(ours_sha, str(theirs.id))
        if base_sha is None:
            raise GitRepositoryError(f"{branch!r} and {target!r} have no common ancestor")
        if base_sha == ours_sha:
            tree_id = theirs.tree_id
        else:
            tree_id = self._merge_trees(self._commit(base_sha).tree, ours.tree, theirs.tree)
        if tree_id == ours.tree_id:
            return ours_sha
        parents = [ours.id] if strategy == "squash" else [ours.id, theirs.id]
        sha = self._write_commit(tree_id, parents, message, author, committer or author)
        self._update_ref(ref, sha, ours_sha)
        return sha

    def squash_chain(
        self,
        base: str,
        items: Sequence[ChainItem],
        *,
        resolve: Callable[[ChainItem, MergeConflict, Snapshot], Changes | None] | None = None,
        replay: Callable[[ChainItem], Callable[[Snapshot], Changes | None] | None] | None = None,
    ) -> Chain:
        """Squash each item's head onto ``base``, one after another, as :meth:`merge` would
        one at a time, but writing commit objects only: no ref moves.

        The result is the history main would have if the items merged in this order (each
        commit's parent the one before, its tree the three-way merge of its change onto the
        tree so far). An item whose changes clash with those before it is left out with the
        paths, unless ``resolve`` (given the item, the conflict and a snapshot of the chain so
        far) returns the files to write instead. ``replay`` gives, for an item, how to build
        its files from the chain so far instead of a three-way merge, used when the chain moved
        past the item's fork (None, or None from the builder: merge it three-way); a
        :class:`MergeConflict` it raises leaves the item out. Nothing is visible to anyone
        until the caller moves a branch to the chain with :meth:`advance_branch`, once.
        """
        base_commit = self._commit(base)
        tip = base_commit
        commits: dict[int, str] = {}
        conflicts: dict[int, list[str]] = {}
        empty: list[int] = []
        # What the chain changed on base so far (path -> entry at the tip, None: deleted): with
        # it, "what changed from a change's fork to the tip" needs no diff of the whole tree
        # per change (at 10,000 tenants each diff walks the 10,000 entries of tenants/).
        applied: dict[str, _Entry | None] = {}
        # The entries of the applied paths on each fork, looked up once (a fork of main is
        # shared by most changes of a burst, and each change compares every applied path).
        forks: dict[bytes, dict[str, _Entry | None]] = {}
        for item in items:
            theirs = self._commit(item.head)
            if self.is_ancestor(str(theirs.id), str(base_commit.id)):
                empty.append(item.key)
                continue
            # The change's own base: where its branch left main (the chain descends from it).
            fork = self.merge_base(str(base_commit.id), str(theirs.id))
            if fork is None:
                conflicts[item.key] = ["(no common history with main)"]
                continue
            touched: set[str] = set()
            rebuild = replay(item) if replay is not None and fork != str(tip.id) else None
            try:
                files = rebuild(Snapshot(self, str(tip.id))) if rebuild is not None else None
                if files is not None:
                    tree_id = self._build_tree(tip.tree_id, _nest(files))
                    touched.update(files)
                elif fork == str(tip.id):
                    tree_id = theirs.tree_id
                    touched.update(self._changed_memo(tip.tree, theirs.tree))
                else:
                    fork_tree = self._commit(fork).tree
                    mine = self._changed_since(
                        fork_tree,
                        base_commit.tree,
                        applied,
                        forks.setdefault(fork_tree.id.raw, {}),
                    )
                    tree_id = self._merge_trees(
                        fork_tree, tip.tree, theirs.tree, mine=mine, touched=touched
                    )
            except MergeConflict as exc:
                resolved = (
                    resolve(item, exc, Snapshot(self, str(tip.id)))
                    if resolve is not None and files is None
                    else None
                )
                if resolved is None:
                    conflicts[item.key] = exc.paths
                    continue
                touched = set(resolved)
                tree_id = self._build_tree(tip.tree_id, _nest(resolved))
            if tree_id == tip.tree_id:
                empty.append(item.key)
                continue
            sha = self._write_commit(tree_id, [tip.id], item.message, item.author, item.committer)
            commits[item.key] = sha
            tip = self._commit(sha)
            for path in touched:
                applied[path] = self._entry_at(tip.tree, path)
        return Chain(str(base_commit.id), str(tip.id), commits, conflicts, empty)

    def advance_branch(self, branch: str, new: str, *, expected: str) -> str:
        """Move ``branch`` from ``expected`` to ``new``, a descendant of it (a chain built by
        :meth:`squash_chain`), in one compare-and-swap; :class:`RefConflict` when the branch
        is elsewhere now. Never rewinds: ``new`` must contain ``expected``."""
        if not self.is_ancestor(expected, new):
            raise GitRepositoryError(f"{new} does not descend from {expected}")
        ref = self._ref_name(branch)
        with self._writer_queue(ref):
            self._update_ref(ref, new, expected)
        return new

    def project(
        self,
        source: GitRepository,
        rev: str,
        prefix: str | Sequence[str],
        *,
        branch: str,
        message: str,
        committer: Identity,
    ) -> str | None:
        """Make ``branch`` of this repository hold only ``prefix`` of ``source`` at ``rev``
        (or several prefixes, none inside another).

        The subtrees keep their paths (``tenants/a/workloads`` stays there), so paths that
        point into them stay valid. Only the objects below the prefixes are copied in: this
        repository never holds anything else of ``source``, so serving it cannot leak another
        object, not even by id. The commit is deterministic (its time is the source commit's,
        the parent is the branch's tip), and none is made when the tree is unchanged. A prefix
        that does not exist at ``rev`` is left out; returns the branch's tip afterwards, or
        None when no prefix exists and the branch does not either. Compare-and-swap like every
        write; retried on a concurrent projection.
        """
        prefixes = [prefix] if isinstance(prefix, str) else list(prefix)
        split = [_split_prefix(p) for p in prefixes]
        if not split or any(not parts for parts in split):
            raise InvalidPath("a projection needs directories, not the whole repository")
        for parts in split:
            for other in split:
                if other is not parts and other[: len(parts)] == parts:
                    raise InvalidPath(f"{'/'.join(other)!r} is inside {'/'.join(parts)!r}")
        origin = source._commit(rev)
        ref = self._ref_name(branch)
        with self._writer_queue(ref):
            tip = self.head(branch)
            found: dict[str, Any] = {}
            for parts in split:
                subtree = source._lookup_path(origin.tree, parts)
                if not isinstance(subtree, pygit2.Tree):
                    continue
                node = found
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = self._copy_tree(source, subtree.id)
            if not found:
                return tip
            oid = self._write_nested(found)
            parent = self._commit(tip) if tip else None
            if parent is not None and parent.tree_id == oid:
                return tip
            when = origin.committer
            signature = pygit2.Signature(committer.name, committer.email, when.time, when.offset)
            sha = str(
                self._repo.create_commit(
                    None,
                    signature,
                    signature,
                    message.rstrip() + "\n",
                    oid,
                    [parent.id] if parent else [],
                )
            )
            self._update_ref(ref, sha, tip)
            return sha

    def _write_nested(self, nested: Mapping[str, Any]) -> pygit2.Oid:
        """A tree of directories only: ``{name: subtree id or a mapping of the same}``."""
        entries = _TreeEntries([], [])
        for name, child in nested.items():
            oid = child if isinstance(child, pygit2.Oid) else self._write_nested(child)
            entries.put(name.encode("utf-8", "surrogateescape"), _TREE_MODE, oid.raw)
        return self._write_tree(entries)

    def _copy_tree(self, source: GitRepository, oid: pygit2.Oid) -> pygit2.Oid:
        """Copy a tree and everything below it from ``source``, skipping what is here already.

        A tree is written only after its entries, so a tree found here has all of them.
        """
        odb = self._repo.odb
        if oid in odb:
            return oid
        for entry in source._tree_entries(oid).entries:
            mode = int(entry[: entry.index(b" ")], 8)
            child = pygit2.Oid(raw=entry[-20:])
            if mode == _TREE_MODE:
                self._copy_tree(source, child)
            elif mode == _GITLINK_MODE:
                raise InvalidPath("a projected directory must not contain a submodule")
            elif child not in odb:
                kind, data = source._repo.odb.read(child)
                odb.write(kind, data)
        kind, data = source._repo.odb.read(oid)
        written = odb.write(kind, data)
        return written

    def maintain(self) -> None:
        """Pack loose objects when there are many (``git gc --auto``); run it periodically.

        Every commit adds loose objects, the large ``tenants/`` tree stored uncompressed
        (about 330 KB at 10,000 tenants), and packing compresses and deltifies them. Safe
        while others write: git keeps unreferenced objects younger than two weeks and takes
        the same ref locks as we do.
        """
        result = subprocess.run(
            # In the foreground: the caller (a periodic job) should see it finish or fail.
            [
                "git",
                f"--git-dir={self.path}",
                "-c",
                "gc.autoDetach=false",
                "gc",
                "--auto",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise GitRepositoryError(f"git gc failed: {result.stderr.strip()}")

    # --- remotes ---------------------------------------------------------------------------

    def fetch(
        self,
        remote_url: str,
        refspecs: Sequence[str],
        *,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """Fetch from a URL (http(s) with username/password, or a local path) with refspecs
        such as ``+refs/heads/main:refs/remotes/origin/main``."""
        remote = self._repo.remotes.create_anonymous(remote_url)
        callbacks = _Callbacks(username, password)
        try:
            remote.fetch(list(refspecs), callbacks=callbacks)
        except pygit2.GitError as exc:
            message = redact(str(exc))
            raise RemoteError(f"fetch from {redact(remote_url)} failed: {message}") from exc

    def push(
        self,
        remote_url: str,
        refspecs: Sequence[str],
        *,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """Push refspecs (``refs/heads/main:refs/heads/main``); a remote that moved makes a
        non-forced update fail with :class:`PushRejected`."""
        remote = self._repo.remotes.create_anonymous(remote_url)
        callbacks = _Callbacks(username, password)
        try:
            remote.push(list(refspecs), callbacks=callbacks)
        except pygit2.GitError as exc:
            text = redact(str(exc))
            if "fastforward" in text or "fast-forward" in text or "not present locally" in text:
                raise PushRejected(f"push to {redact(remote_url)} rejected: {text}") from exc
            raise RemoteError(f"push to {redact(remote_url)} failed: {text}") from exc
        if callbacks.rejected:
            raise PushRejected(f"push to {redact(remote_url)} rejected: {callbacks.rejected}")

    def sync_with_remote(
        self,
        remote_url: str,
        *,
        branch: str | None = None,
        username: str | None = None,
        password: str | None = None,
        committer: Identity | None = None,
        attempts: int = 5,
    ) -> SyncResult:
        """Bring ``branch`` (default: main) and the remote's branch of the same name together.

        Fetch; if the remote moved and we have unpushed commits, replay each of them (its
        first-parent diff, applied as a three-way tree merge) onto the remote's tip, keeping
        author and message (committer: ``committer`` or the original committer, now), move the
        local branch there by compare-and-swap, and push. A replay conflict raises
        :class:`MergeConflict` and changes nothing. A rejected push or a local branch that
        moved meanwhile starts over, up to ``attempts`` times.
        """
        name = branch or self.main
        ref = self._ref_name(name)
        tracking = f"refs/remotes/sync/{name}"
        rewritten: dict[str, str] = {}
        failure: GitRepositoryError | None = None
        for attempt in range(attempts):
            self.fetch(remote_url, [f"+{ref}:{tracking}"], username=username, password=password)
            remote_tip = self._read_ref(tracking)
            try:
                with self._writer_queue(ref):
                    local_tip, mapping = self._catch_up(ref, remote_tip, committer)
                rewritten = _compose(rewritten, mapping)
                if local_tip is None or local_tip == remote_tip:
                    return SyncResult(local_tip, False, rewritten)
                self.push(remote_url, [f"{ref}:{ref}"], username=username, password=password)
            except (RefConflict, PushRejected) as exc:
                failure = exc
                _backoff(attempt)
                continue
            return SyncResult(local_tip, True, rewritten)
        assert failure is not None
        raise failure

    def _catch_up(
        self, ref: str, remote_tip: str | None, committer: Identity | None
    ) -> tuple[str | None, dict[str, str]]:
        """Make the local branch contain ``remote_tip``: take it, fast-forward to it, or
        replay the local-only commits onto it. Returns the new local tip and the rewrites."""
        local_tip = self._read_ref(ref)
        if remote_tip is None:
            return local_tip, {}
        if local_tip is None:
            self._update_ref(ref, remote_tip, None)
            return remote_tip, {}
        if self.is_ancestor(local_tip, remote_tip):
            if local_tip != remote_tip:
                self._update_ref(ref, remote_tip, local_tip)
            return remote_tip, {}
        if self.is_ancestor(remote_tip, local_tip):
            return local_tip, {}
        new_tip, mapping = self._replay(local_tip, remote_tip, committer)
        self._update_ref(ref, new_tip, local_tip)
        return new_tip, mapping

    # --- a remote as the source of truth ----------------------------------------------------
    #
    # Several replicas of the portal each keep this repository as a mirror of one remote. Main
    # is written by compare-and-swap on the remote itself: fetch its tip, build on it, push with
    # ``--force-with-lease=<ref>:<tip>`` (receive-pack updates the ref only if it still holds
    # that value, checked under its own ref lock), and on a rejection start again from the new
    # tip. The local main only ever holds what the remote holds, or the one attempt being
    # pushed. These run the git CLI: libgit2 has no push lease and no timeout.

    def write_through(
        self,
        remote: Remote,
        attempt: Callable[[GitRepository], T],
        *,
        wait: float = 30.0,
        on_wait: Callable[[str], None] | None = None,
        attempts: int = 100,
    ) -> T:
        """Run ``attempt`` (a compare-and-swap write of local main) on the remote's tip and
        push its result to the remote with a lease; replay it on the new tip when rejected.

        Returns what the last ``attempt`` returned, once the remote's main holds its result (an
        attempt that writes nothing pushes nothing). While the remote cannot be reached the
        write waits and tries again with growing pauses, telling ``on_wait`` why, and gives up
        with :class:`RemoteUnavailable` after ``wait`` seconds; local main is then the remote's
        last known tip, never a fork. ``attempt`` may run several times: it must rebuild from
        the tip it finds. A remote without the branch is seeded with the local main's history.
        """
        ref = self._ref_name(self.main)
        deadline = time.monotonic() + wait
        unreachable = 0
        rejected = 0
        with self._writer_queue(f"truth/{ref}"):
            self._clear_stale_lock(ref)
            while True:
                try:
                    remote_tip = self._fetch_truth(remote)
                except RemoteError as exc:
                    unreachable += 1
                    self._wait_for(remote, exc, deadline, unreachable, on_wait)
                    continue
                base = self._align_main(remote_tip)
                result = attempt(self)
                new_tip = self.head(self.main)
                if new_tip == base:
                    return result
                assert new_tip is not None
                try:
                    self._push_lease(remote, ref, new_tip, remote_tip)
                except PushRejected:
                    self._update_ref(ref, base, new_tip)  # back to what the remote had
                    rejected += 1
                    if rejected >= attempts:
                        raise
                    _backoff(rejected)
                    continue
                except RemoteError as exc:
                    # The push may or may not have landed: the next fetch tells, and callers
                    # recognise their own commit there (see gitops.services.write_main).
                    self._update_ref(ref, base, new_tip)
                    unreachable += 1
                    self._wait_for(remote, exc, deadline, unreachable, on_wait)
                    continue
                self._set_tracking(remote_tip, new_tip)
                return result

    def refresh_from(self, remote: Remote) -> tuple[str | None, str | None]:
        """Bring local main level with the remote's (a replica's periodic fetch); returns the
        local tip before and after. Queues with :meth:`write_through`, so it never moves main
        under a write being pushed."""
        with self._writer_queue(f"truth/{self._ref_name(self.main)}"):
            before = self.head(self.main)
            remote_tip = self._fetch_truth(remote)
            if remote_tip is None:
                return before, before
            return before, self._align_main(remote_tip)

    def push_branches(self, remote: Remote, branches: Mapping[str, str | None]) -> None:
        """Set branches on the remote to these commits, or delete them (None), in one push.

        For branches this portal owns alone (a change's branch): forced, the portal's own
        database row decides what they hold. Deleting a branch the remote lacks is no error.
        """
        specs = []
        for name, sha in branches.items():
            ref = self._ref_name(name)
            if name == self.main:
                raise GitRepositoryError("main is written with write_through, not pushed")
            specs.append(f"+{self._commit(sha).id}:{ref}" if sha else f":{ref}")
        if not specs:
            return
        result = self._git_remote(remote, "push", "--porcelain", remote.url, *specs)
        if result.returncode != 0:
            failed = [
                line
                for line in result.stdout.splitlines()
                if line.startswith("!") and "remote ref does not exist" not in line
            ]
            if failed or not result.stdout.strip():
                raise RemoteError(f"push to {redact(remote.url)} failed: {_remote_reason(result)}")

    def fetch_missing(self, remote: Remote, rev: str) -> bool:
        """Fetch the remote's branches when ``rev`` (a commit id or branch) is not here.

        Into ``refs/remotes/truth-all/``, apart from the refs :meth:`write_through` fetches,
        so a miss never disturbs a write. True when ``rev`` resolves afterwards.
        """
        with self._writer_queue("truth/fetch-missing"):
            if self._resolves(rev):
                return True
            result = self._git_remote(
                remote,
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                remote.url,
                "+refs/heads/*:refs/remotes/truth-all/*",
            )
            if result.returncode != 0:
                raise RemoteError(
                    f"fetch from {redact(remote.url)} failed: {_remote_reason(result)}"
                )
            if not _HEX_SHA.fullmatch(rev):
                sha = self._read_ref(f"refs/remotes/truth-all/{rev}")
                if sha is None:
                    return False
                # A branch asked for by name: take the remote's, unless one is here already.
                with contextlib.suppress(RefConflict):
                    self._update_ref(self._ref_name(rev), sha, None)
            return self._resolves(rev)

    def first_parent_with_trailer(
        self, rev: str, since: str | None, key: str, value: str, *, limit: int = 100_000
    ) -> str | None:
        """The newest commit on ``rev``'s first-parent line, after ``since``, whose trailer
        block has ``key: value``; None when there is none.

        How a writer recognises its own commit on the remote after a crash or a push whose
        answer was lost, instead of writing it twice.
        """
        line = f"{key}: {value}"
        stop = self._commit(since).id if since else None
        commit = self._commit(rev)
        for _ in range(limit):
            if commit.id == stop:
                return None
            if line in _trailer_lines(commit.message):
                return str(commit.id)
            if not commit.parents:
                return None
            commit = commit.parents[0]
        return None

    def trailer_values(
        self, rev: str, key: str, *, since: datetime, limit: int = 10_000
    ) -> dict[str, str]:
        """``{value: commit}`` of trailer ``key`` on ``rev``'s first-parent line, newest first,
        back to the first commit made before ``since`` (at most ``limit`` commits)."""
        prefix = f"{key}: "
        floor = since.timestamp()
        found: dict[str, str] = {}
        commit = self._commit(rev)
        for _ in range(limit):
            if commit.commit_time < floor:
                break
            for line in _trailer_lines(commit.message):
                if line.startswith(prefix):
                    found.setdefault(line[len(prefix) :].strip(), str(commit.id))
            if not commit.parents:
                break
            commit = commit.parents[0]
        return found

    def _resolves(self, rev: str) -> bool:
        if _HEX_SHA.fullmatch(rev):
            return pygit2.Oid(hex=rev) in self._repo.odb
        return self.head(rev) is not None

    def _fetch_truth(self, remote: Remote) -> str | None:
        """Fetch the remote's main into ``refs/remotes/truth/<main>``; its tip, None if absent."""
        ref = self._ref_name(self.main)
        tracking = f"refs/remotes/truth/{self.main}"
        result = self._git_remote(
            remote,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            remote.url,
            f"+{ref}:{tracking}",
        )
        if result.returncode != 0:
            if "couldn't find remote ref" in result.stderr:
                return None  # an empty remote: write_through seeds it
            raise RemoteError(f"fetch from {redact(remote.url)} failed: {_remote_reason(result)}")
        return self._read_ref(tracking)

    def _clear_stale_lock(self, ref: str) -> None:
        """Remove ``<ref>.lock`` left by a writer killed while holding it.

        Called holding the replica's writer lock, so no portal writer of main is running;
        git's own holders (``git gc`` packing refs) keep it for microseconds, so a lock file
        older than the lock timeout belongs to a dead process. Without this every write would
        wait out the timeout and fail until someone removed the file by hand.
        """
        lock = self.path / f"{ref}.lock"
        with contextlib.suppress(FileNotFoundError):
            if time.time() - lock.stat().st_mtime > _LOCK_TIMEOUT_SECONDS:
                lock.unlink()

    def _set_tracking(self, old: str | None, new: str) -> None:
        # What we pushed is what the remote has now; saves the next fetch a round of objects.
        with contextlib.suppress(RefConflict, RefLocked):
            self._update_ref(f"refs/remotes/truth/{self.main}", new, old)

    def _align_main(self, remote_tip: str | None) -> str | None:
        """Point local main at the remote's tip (compare-and-swap); returns local main.

        A local main the remote lacks is dropped (a write whose push failed and whose
        process died before putting main back); with no remote main, the local one stays,
        to seed the remote.
        """
        ref = self._ref_name(self.main)
        if remote_tip is None:
            return self._read_ref(ref)
        while True:
            local = self._read_ref(ref)
            if local == remote_tip:
                return local
            try:
                self._update_ref(ref, remote_tip, local)
            except RefConflict:
                continue
            return remote_tip

    def _push_lease(self, remote: Remote, ref: str, new: str, old: str | None) -> None:
        """Push ``new`` to ``ref`` if the remote's ref is still at ``old`` (None: absent)."""
        result = self._git_remote(
            remote,
            "push",
            "--porcelain",
            f"--force-with-lease={ref}:{old or ''}",
            remote.url,
            f"{new}:{ref}",
        )
        if result.returncode == 0:
            return
        reason = _remote_reason(result)
        # The ways git reports that the ref was not at ``old``: checked by the client against
        # what the remote advertised (stale info), or by receive-pack under its lock.
        if any(
            marker in result.stdout
            for marker in ("stale info", "fetch first", "non-fast-forward", "failed to update ref")
        ) or ("cannot lock ref" in result.stderr):
            raise PushRejected(f"push to {redact(remote.url)} rejected: {reason}")
        raise RemoteError(f"push to {redact(remote.url)} failed: {reason}")

    def _wait_for(
        self,
        remote: Remote,
        error: RemoteError,
        deadline: float,
        tries: int,
        on_wait: Callable[[str], None] | None,
    ) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemoteUnavailable(f"{error} (gave up after {tries} tries)") from error
        if on_wait is not None:
            on_wait(str(error))
        # Doubling pauses, a little jittered, and never past the deadline.
        pause = min(left, min(5.0, 0.25 * 2 ** min(tries, 5)) * random.uniform(0.8, 1.2))  # noqa: S311
        time.sleep(pause)

    def _git_remote(self, remote: Remote, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
        if remote.password is not None:
            env.update(basic_auth_env(remote.username, remote.password))
        try:
            return subprocess.run(
                ["git", f"--git-dir={self.path}", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=remote.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise RemoteError(
                f"{redact(remote.url)} did not answer within {remote.timeout:g} s"
            ) from exc

    # --- internals -------------------------------------------------------------------------

    def _check_branch_name(self, name: str) -> None:
        if name.startswith("refs/") or not pygit2.reference_is_valid_name(f"refs/heads/{name}"):
            raise GitRepositoryError(f"invalid branch name: {name!r}")

    def _ref_name(self, branch: str) -> str:
        self._check_branch_name(branch)
        return f"refs/heads/{branch}"

    def _read_ref(self, ref: str) -> str | None:
        # libgit2 reads the loose ref file on every lookup and falls back to packed-refs
        # (re-read when its stat data changes), so this sees other processes' writes.
        reference = self._repo.references.get(ref)
        return str(reference.target) if reference is not None else None

    def _update_ref(self, ref: str, new: str | None, expected: str | None) -> None:
        """Point ``ref`` at ``new`` (None deletes it) if it is at ``expected`` now.

        Correctness: ``lock_ref`` creates ``<ref>.lock`` with O_EXCL (git's own protocol, also
        honoured by ``git update-ref``/``git pack-refs``), so at most one writer holds it. We
        read the current value while holding the lock and compare; the commit renames the lock
        file over the loose ref (atomic), and a delete also rewrites packed-refs under its lock.
        A packed-only ref is read from packed-refs and overridden by the new loose file.
        """
        repo = self._repo
        deadline = time.monotonic() + _LOCK_TIMEOUT_SECONDS
        while True:
            try:
                with repo.transaction() as txn:
                    try:
                        txn.lock_ref(ref)
                    except pygit2.GitError as exc:
                        # libgit2 reports an existing lock file (GIT_ELOCKED) with one of
                        # these, depending on when it sees it; other errors are real.
                        text = str(exc)
                        if "failed to lock file" in text or "File exists" in text:
                            raise _Busy from exc
                        # e.g. "change" when "change/1" exists: git cannot store both
                        raise GitRepositoryError(f"cannot update {ref}: {text}") from exc
                    actual = self._read_ref(ref)
                    if actual != expected:
                        raise RefConflict(ref, expected, actual)
                    if new is None:
                        txn.remove(ref)
                    else:
                        txn.set_target(ref, new)
                return
            except _Busy as exc:
                if time.monotonic() > deadline:
                    raise RefLocked(
                        f"{ref} stayed locked for {_LOCK_TIMEOUT_SECONDS:.0f} s; if no writer "
                        f"is running, remove {ref}.lock from the repository"
                    ) from exc
                time.sleep(random.uniform(0.0002, 0.002))  # noqa: S311 (jitter, not a secret)

    @contextlib.contextmanager
    def _writer_queue(self, ref: str) -> Iterator[None]:
        """Let this repository's own writers of ``ref`` take turns (threads and processes).

        Correctness does not depend on it - every update is compare-and-swap - but without
        it concurrent merges rebuild their trees over and over while losing the race to each
        other. ``flock`` is released by the kernel when a process dies, so a crash leaves no
        stale lock. Writers outside the portal (the git CLI) do not queue; CAS catches them.
        """
        directory = self.path / "portal-locks"
        directory.mkdir(exist_ok=True)
        fd = os.open(directory / f"{ref.replace('/', '-')}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + _QUEUE_TIMEOUT_SECONDS
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if time.monotonic() > deadline:
                        raise RefLocked(f"another writer of {ref} held on for too long") from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.01)
            yield
        finally:
            os.close(fd)  # also releases the lock

    def _commit(self, rev: str | None) -> pygit2.Commit:
        if not rev:
            raise UnknownRevision("no revision given")
        repo = self._repo
        oid: pygit2.Oid | None = None
        if _HEX_SHA.fullmatch(rev):
            oid = pygit2.Oid(hex=rev)
        else:
            target = self._read_ref(self._ref_name(rev))
            oid = pygit2.Oid(hex=target) if target else None
        obj = repo.get(oid) if oid is not None else None
        if not isinstance(obj, pygit2.Commit):
            if self.on_missing is not None and self.on_missing(rev):
                fetched = self.head(rev) if not _HEX_SHA.fullmatch(rev) else rev
                obj = repo.get(pygit2.Oid(hex=fetched)) if fetched else None
            if not isinstance(obj, pygit2.Commit):
                raise UnknownRevision(f"no commit {rev!r}")
        return obj

    def _lookup_path(self, tree: pygit2.Tree, parts: list[str]) -> pygit2.Object | None:
        obj: pygit2.Object = tree
        for part in parts:
            if not isinstance(obj, pygit2.Tree) or part not in obj:
                return None
            obj = obj[part]
        return obj

    def _collect(self, tree: pygit2.Tree, prefix: str, out: dict[str, bytes]) -> None:
        for entry in tree:
            path = f"{prefix}/{entry.name}" if prefix else str(entry.name)
            if isinstance(entry, pygit2.Tree):
                self._collect(entry, path, out)
            elif isinstance(entry, pygit2.Blob):
                out[path] = entry.data

    def _build_tree(self, tree: pygit2.Oid | None, changes: _Nested) -> pygit2.Oid:
        """Write the tree that results from applying ``changes`` to ``tree`` (None: empty)."""
        oid = self._apply(tree, changes, "")
        return oid if oid is not None else self._write_tree(_TreeEntries([], []))

    def _apply(self, tree: pygit2.Oid | None, changes: _Nested, prefix: str) -> pygit2.Oid | None:
        """Apply changes to one tree level, recursing only into changed directories.

        Untouched entries are copied as they are (name, mode, object id), so nothing below
        them is read: a change in one tenant directory out of 10,000 reads and writes the
        root tree, ``tenants/`` and that tenant's directory, nothing else.
        """
        base = self._tree_entries(tree) if tree is not None else _TreeEntries([], [])
        edited = base.copy()
        for name, change in changes.items():
            path = f"{prefix}{name}"
            raw_name = name.encode("utf-8", "surrogateescape")
            index = base.find(raw_name)
            mode, oid = base.entry(index) if index is not None else (None, None)
            if mode == _GITLINK_MODE:
                raise InvalidPath(f"{path!r} is a submodule")
            is_dir = mode == _TREE_MODE
            if isinstance(change, dict):
                if index is not None and not is_dir:
                    raise InvalidPath(f"{path!r} is a file, not a directory")
                sub = self._apply(pygit2.Oid(raw=oid) if oid else None, change, f"{path}/")
                if sub is not None:
                    edited.put(raw_name, _TREE_MODE, sub.raw)
                elif index is not None:
                    edited.remove(raw_name)
            elif change is None:
                if index is None or is_dir:
                    raise PathNotFound(f"cannot delete {path!r}: no such file")
                edited.remove(raw_name)
            elif is_dir:
                raise InvalidPath(f"{path!r} is a directory, not a file")
            elif isinstance(change, _Entry):
                edited.put(raw_name, change.mode, change.oid.raw)
            else:
                # Keep an executable bit the file already had; new files are plain.
                blob = self._repo.create_blob(change)
                edited.put(raw_name, mode if mode is not None else _BLOB_MODE, blob.raw)
        return self._write_tree(edited) if edited.keys else None

    def _tree_entries(self, oid: pygit2.Oid) -> _TreeEntries:
        """A tree's entries, from this thread's cache of large trees or parsed from the odb."""
        cache = self._tree_cache
        key = oid.raw
        cached = cache.get(key)
        if cached is not None:
            cache.move_to_end(key)
            return cached
        kind, raw = self._repo.odb.read(oid)
        if kind != pygit2.enums.ObjectType.TREE:
            raise GitRepositoryError(f"{oid} is not a tree")
        entries = _TreeEntries.parse(raw)
        self._remember(key, entries)
        return entries

    def _raw_tree(self, oid: pygit2.Oid) -> bytes:
        """A tree's serialised entries (from the cache of parsed trees when it is there)."""
        cached = self._tree_cache.get(oid.raw)
        if cached is not None:
            return cached.raw
        kind, raw = self._repo.odb.read(oid)
        if kind != pygit2.enums.ObjectType.TREE:
            raise GitRepositoryError(f"{oid} is not a tree")
        return bytes(raw)

    def _write_tree(self, entries: _TreeEntries) -> pygit2.Oid:
        """Store a tree as a loose object and return its id.

        Why not TreeBuilder: libgit2 deflates loose objects at level 1 at least, and a tree of
        10,000 tenants is ~330 KB of mostly SHA-1 bytes that barely compress, so deflating it
        was most of a commit's time. We serialise the entries (kept sorted in git order) and
        write the object zlib-wrapped without compression, exactly what git does with
        ``core.looseCompression=0``; ``git gc`` compresses and deltifies it into a pack later.
        A tree's id is the SHA-1 of its content, so an existing file is already this object.
        """
        raw = b"".join(entries.entries)
        body = b"tree %d\0" % len(raw) + raw
        digest = hashlib.sha1(body, usedforsecurity=False)
        hexsha = digest.hexdigest()
        directory = self.path / "objects" / hexsha[:2]
        target = directory / hexsha[2:]
        if not target.exists():
            # git prune removes tmp_obj_* files a crashed writer may leave behind.
            temp = directory / f"tmp_obj_{os.getpid()}_{threading.get_ident()}_{hexsha[:8]}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            try:
                fd = os.open(temp, flags, 0o444)  # read-only, like every git object file
            except FileNotFoundError:
                directory.mkdir(exist_ok=True)
                fd = os.open(temp, flags, 0o444)
            with os.fdopen(fd, "wb") as handle:
                handle.write(zlib.compress(body, 0))
            os.replace(temp, target)  # atomic; a concurrent writer wrote the same bytes
        self._remember(digest.digest(), entries)
        return pygit2.Oid(raw=digest.digest())

    @property
    def _tree_cache(self) -> OrderedDict[bytes, _TreeEntries]:
        self._repo  # noqa: B018 (resets the per-thread state after a fork)
        cache: OrderedDict[bytes, _TreeEntries] = self._local.trees
        return cache

    def _remember(self, key: bytes, entries: _TreeEntries) -> None:
        # Only large trees are worth keeping parsed (tenants/ of a big fleet); small ones
        # parse in microseconds. A few per thread: main's tip and the branch being built.
        if len(entries.keys) >= _CACHE_MIN_ENTRIES:
            cache = self._tree_cache
            cache[key] = entries
            cache.move_to_end(key)
            while len(cache) > _CACHE_TREES:
                cache.popitem(last=False)

    def _write_commit(
        self,
        tree: pygit2.Oid,
        parents: list[pygit2.Oid],
        message: str,
        author: Identity | pygit2.Signature,
        committer: Identity,
    ) -> str:
        """Create a commit object (no ref update). A Signature author keeps its own time."""
        message = message.rstrip() + "\n"
        if not message.strip():
            raise ValueError("a commit needs a message")
        when = self._clock()
        offset = when.utcoffset()
        minutes = int(offset.total_seconds() // 60) if offset is not None else 0
        seconds = int(when.timestamp())
        if isinstance(author, Identity):
            author = pygit2.Signature(author.name, author.email, seconds, minutes)
        committer_sig = pygit2.Signature(committer.name, committer.email, seconds, minutes)
        oid = self._repo.create_commit(None, author, committer_sig, message, tree, parents)
        return str(oid)

    def _changed(self, old: pygit2.Tree, new: pygit2.Tree) -> dict[str, _Entry | None]:
        """Files that differ between two trees: path -> new entry, or None when deleted.

        What libgit2's tree diff says (``_changed_by_libgit2``, kept as the reference), found
        faster: libgit2 skips subtrees whose ids are equal, but still walks every entry of a
        level, and at 10,000 tenants a batch of 250 changes spent 10 s walking ``tenants/``
        once per change. Two versions of a large tree share most of their bytes, so only the
        entries between their common prefix and common suffix are compared
        (``_differing_entries``).
        """
        changed: dict[str, _Entry | None] = {}
        try:
            self._diff_level(old.id, new.id, "", changed)
        except _Unsupported:
            return self._changed_by_libgit2(old, new)
        return changed

    def _diff_level(
        self, old: pygit2.Oid, new: pygit2.Oid, prefix: str, out: dict[str, _Entry | None]
    ) -> None:
        if old == new:
            return
        removed, added = _differing_entries(self._tree_entries(old), self._raw_tree(new))
        for name, (mode, oid) in removed.items():
            again = added.get(name)
            if again is not None and again[0] == mode == _TREE_MODE:
                continue  # a directory on both sides: compared below
            if mode == _TREE_MODE:
                self._all_files(oid, f"{prefix}{name}/", out, None)
            elif mode == _GITLINK_MODE:
                raise _Unsupported
            else:
                out.setdefault(f"{prefix}{name}", None)
        for name, (mode, oid) in added.items():
            path = f"{prefix}{name}"
            before = removed.get(name)
            if mode == _TREE_MODE:
                if before is not None and before[0] == _TREE_MODE:
                    self._diff_level(
                        pygit2.Oid(raw=before[1]), pygit2.Oid(raw=oid), f"{path}/", out
                    )
                else:
                    self._all_files(oid, f"{path}/", out, True)
            elif mode == _GITLINK_MODE:
                raise _Unsupported
            else:
                out[path] = _Entry(pygit2.Oid(raw=oid), mode)

    def _all_files(
        self, tree: bytes, prefix: str, out: dict[str, _Entry | None], added: bool | None
    ) -> None:
        """Every file below ``tree`` into ``out``: added (its entry) or deleted (None)."""
        entries = self._tree_entries(pygit2.Oid(raw=tree))
        for index in range(len(entries.entries)):
            mode, oid = entries.entry(index)
            name = entries.keys[index].rstrip(b"/").decode("utf-8", "surrogateescape")
            if mode == _TREE_MODE:
                self._all_files(oid, f"{prefix}{name}/", out, added)
            elif mode == _GITLINK_MODE:
                raise _Unsupported
            elif added:
                out[f"{prefix}{name}"] = _Entry(pygit2.Oid(raw=oid), mode)
            else:
                out.setdefault(f"{prefix}{name}", None)

    def _changed_by_libgit2(self, old: pygit2.Tree, new: pygit2.Tree) -> dict[str, _Entry | None]:
        """``_changed`` as libgit2 computes it (submodules included)."""
        changed: dict[str, _Entry | None] = {}
        for delta in old.diff_to_tree(new).deltas:
            if delta.status == DeltaStatus.DELETED:
                # A type change (file <-> symlink) shows as a delete plus an add of one path.
                changed.setdefault(delta.old_file.path, None)
            else:
                changed[delta.new_file.path] = _Entry(delta.new_file.id, delta.new_file.mode)
        return changed

    def _changed_memo(self, old: pygit2.Tree, new: pygit2.Tree) -> dict[str, _Entry | None]:
        """``_changed``, kept for the pair of trees (a batch squashes a change's head onto its
        fork once to find clashes and again to check it)."""
        key = (str(old.id), str(new.id))
        with self._memo_lock:
            hit = self._diff_memo.get(key)
        if hit is not None:
            return hit
        changed = self._changed(old, new)
        with self._memo_lock:
            self._diff_memo[key] = changed
            while len(self._diff_memo) > 4096:
                self._diff_memo.pop(next(iter(self._diff_memo)))
        return changed

    def _changed_since(
        self,
        fork: pygit2.Tree,
        base: pygit2.Tree,
        applied: Mapping[str, _Entry | None],
        known: dict[str, _Entry | None] | None = None,
    ) -> dict[str, _Entry | None]:
        """``_changed(fork, tip)`` for a tip that is ``base`` with ``applied`` on it: what
        base changed since the fork (one diff per distinct fork, kept) except the applied
        paths, and the applied paths whose entry differs from the fork's (``known``: the
        fork's entries looked up so far, filled in)."""
        known = {} if known is None else known
        since = {} if fork.id == base.id else self._changed_memo(fork, base)
        mine = {path: entry for path, entry in since.items() if path not in applied}
        for path, entry in applied.items():
            before = known.get(path, _UNKNOWN)
            if before is _UNKNOWN:
                before = known[path] = self._entry_at(fork, path)
            if entry != before:
                mine[path] = entry
        return mine

    def _entry_at(self, tree: pygit2.Tree, path: str) -> _Entry | None:
        """The file entry at ``path`` (None: no file there)."""
        obj = self._lookup_path(tree, path.split("/"))
        if obj is None or isinstance(obj, pygit2.Tree):
            return None
        return _Entry(obj.id, int(obj.filemode))

    def _merge_trees(
        self,
        base: pygit2.Tree,
        ours: pygit2.Tree,
        theirs: pygit2.Tree,
        *,
        mine: Mapping[str, _Entry | None] | None = None,
        touched: set[str] | None = None,
    ) -> pygit2.Oid:
        """Three-way merge of trees: apply base->theirs onto ours, or raise MergeConflict.
        ``mine`` is base->ours when the caller knows it; ``touched`` receives the paths
        written."""
        if mine is None:
            mine = self._changed(base, ours)
        # Every directory above a path we changed: theirs writing a file there is a clash.
        my_dirs = {path.rsplit("/", i)[0] for path in mine for i in range(1, path.count("/") + 1)}
        apply: dict[str, _Leaf] = {}
        conflicts = []
        for path, entry in self._changed_memo(base, theirs).items():
            ancestors = {path.rsplit("/", i)[0] for i in range(1, path.count("/") + 1)}
            mine_entry = mine.get(path)
            if path in my_dirs or ancestors & mine.keys():
                conflicts.append(path)
            elif path not in mine:
                apply[path] = entry
            elif mine_entry == entry:
                continue
            elif entry is None or mine_entry is None:
                conflicts.append(path)  # one side deleted what the other changed
            else:
                merged = self._merge_file(base, path, mine_entry, entry)
                if merged is None:
                    conflicts.append(path)
                else:
                    apply[path] = merged
        if conflicts:
            raise MergeConflict(sorted(conflicts))
        if touched is not None:
            touched.update(apply)
        # Paths come from existing trees, so they are not held to the rules for new paths.
        return self._build_tree(ours.id, _nest(apply, validate=False))

    def _merge_file(
        self, base: pygit2.Tree, path: str, ours: _Entry, theirs: _Entry
    ) -> bytes | None:
        """Line-level merge of one file changed on both sides (as git does); None on conflict."""
        old = self._lookup_path(base, path.split("/"))
        ancestor = (
            pygit2.IndexEntry(path, old.id, old.filemode) if isinstance(old, pygit2.Blob) else None
        )
        try:
            result = self._repo.merge_file_from_index(
                ancestor,
                pygit2.IndexEntry(path, ours.oid, FileMode(ours.mode)),
                pygit2.IndexEntry(path, theirs.oid, FileMode(theirs.mode)),
            )
        except UnicodeDecodeError:
            return None  # binary content: no line merge
        if not result.automergeable:
            return None
        return result.contents.encode("utf-8")

    def _replay(
        self, local_tip: str, onto: str, committer: Identity | None
    ) -> tuple[str, dict[str, str]]:
        """Re-apply local commits missing from ``onto`` (oldest first) on top of it.

        Each commit's first-parent diff is merged onto the new tip; extra parents of a merge
        commit are kept, so a merged change branch stays reachable.
        """
        repo = self._repo
        pending: list[pygit2.Commit] = []
        commit = self._commit(local_tip)
        while not self.is_ancestor(str(commit.id), onto):
            pending.append(commit)
            if not commit.parents:
                break
            commit = commit.parents[0]
        empty = repo[self._write_tree(_TreeEntries([], []))]
        assert isinstance(empty, pygit2.Tree)
        tip = self._commit(onto)
        mapping: dict[str, str] = {}
        for commit in reversed(pending):
            parent_tree = commit.parents[0].tree if commit.parents else empty
            tree_id = self._merge_trees(parent_tree, tip.tree, commit.tree)
            if tree_id == tip.tree_id:
                mapping[str(commit.id)] = str(tip.id)  # already upstream: drop, like git rebase
                continue
            original = commit.committer
            sha = self._write_commit(
                tree_id,
                [tip.id, *commit.parent_ids[1:]],
                commit.message,
                commit.author,
                committer or Identity(original.name, original.email),
            )
            tip = self._commit(sha)
            mapping[str(commit.id)] = sha
        return str(tip.id), mapping


class _Busy(Exception):
    """The ref's lock file is held by another writer (internal)."""


class _Callbacks(pygit2.RemoteCallbacks):
    """Credentials for http(s) remotes and collection of per-ref push rejections."""

    def __init__(self, username: str | None, password: str | None) -> None:
        super().__init__()
        self._username = username
        self._password = password
        self._asked = 0
        self.rejected: dict[str, str] = {}

    def credentials(
        self,
        url: str,
        username_from_url: str | None,
        allowed_types: pygit2.enums.CredentialType,
    ) -> pygit2.UserPass:
        # libgit2 asks again after each 401; answering the same forever would loop.
        self._asked += 1
        if self._password is None or self._asked > 1:
            raise RemoteError(f"authentication to {redact(url)} failed")
        return pygit2.UserPass(self._username or username_from_url or "git", self._password)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected[refname] = message


def _blob(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Blob:
    obj = repo[oid]
    assert isinstance(obj, pygit2.Blob)
    return obj


def redact(text: str) -> str:
    """A URL, or a message that quotes one, without its user:password@ part."""
    return re.sub(r"//[^/@\s]*@", "//", text)


def basic_auth_env(username: str | None, password: str) -> dict[str, str]:
    """Environment that makes the git command send HTTP basic credentials: in the
    environment, not on the command line, where any local user could read them."""
    basic = base64.b64encode(f"{username or 'git'}:{password}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


def _trailer_lines(message: str) -> list[str]:
    """The lines of a message's trailer block: its last paragraph, never the title (a title
    that looks like a trailer is not one, as for ``git interpret-trailers``)."""
    paragraphs = message.strip("\n").split("\n\n")
    return paragraphs[-1].split("\n") if len(paragraphs) > 1 else []


def _remote_reason(result: subprocess.CompletedProcess[str]) -> str:
    """The useful part of a failed git fetch/push: rejection lines, else its last error."""
    lines = [line for line in result.stdout.splitlines() if line.startswith("!")]
    lines += [line for line in result.stderr.splitlines() if line.strip()][-2:]
    return redact("; ".join(lines)) or f"git exited with {result.returncode}"


def _compose(first: dict[str, str], second: dict[str, str]) -> dict[str, str]:
    """Chain two old->new commit maps (a commit replayed twice maps to its last copy)."""
    chained = {old: second.get(new, new) for old, new in first.items()}
    for old, new in second.items():
        chained.setdefault(old, new)
    return chained


def _backoff(attempt: int) -> None:
    # Randomised and growing, so writers that collided do not collide again in lockstep.
    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))  # noqa: S311 (jitter)
