"""Checking a tree by its tenants: what a check found in a tenant's directory is kept by the
directory's content, so a check run works on what changed instead of walking every tenant.

At 10,000 tenants a tree holds about 110,000 files and one run of the whole-tree rules
(isolation, controllers, capacity, duplicates, Flux's Kustomizations) took about two minutes,
although a merge queue batch changes a few hundred tenants and main's other tenants are the
same as in the run before. The tree is split into parts:

- one part per tenant: the files under ``tenants/<slug>/`` (``slug`` a DNS label);
- the shared part: everything else (``clusters/``, ``infrastructure/``, the tenant index
  ``tenants/kustomization.yaml``, a path no tenant owns).

A rule runs on the shared part together with the tenants whose value is not known yet, and
its result is split back per part (``by_tenant``). What a tenant's part gives is kept under
a key made of the rule, the code of the checks, the rule's parameters, the shared part
(its *context*) and the tenant's own files, so any change to any of them computes it again.
The index is left out of the context except for what it does to names (``namespace``,
prefixes, patches: its other fields) and whether it lists the tenant: adding a tenant does not
make every other tenant's values unknown.

Why the split is sound: the isolation rules confine a tenant's directory to itself. It may
hold only objects of its own namespace plus its Namespace and ClusterQueue, and its
kustomizations may only include its own files (``gitops.checks.isolation``), and those rules
read nothing but the tenant's directory and the shared part. So, on a tree whose isolation
check passes, the other rules see from a tenant's directory exactly what they see from it in
the whole tree. What spans tenants is computed from each tenant's kept *summary* (the
identities each document would have, the guaranteed quota of each queue, the namespaces and
quotas a ClusterQueue may select, the Flux Kustomizations), never from cached verdicts. When
isolation fails, the change fails anyway, and a finding between two tenants that breaks it may
be reported by fewer checks than on a whole-tree run.

Values are kept in this process (bounded) and in a SQLite file beside the portal's data (the
caller names it: the portal's ``GITOPS_CHECK_CACHE``; none: this process only), so a new
worker starts warm. They are
pickled: the file is the portal's own, like its Git store, and nothing else writes it.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import posixpath
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gitops.checks.findings import Finding

logger = logging.getLogger(__name__)

T = TypeVar("T")

TENANTS_DIR = "tenants"
TENANT_INDEX = "tenants/kustomization.yaml"
_SLUG = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def slug_of(path: str) -> str | None:
    """The tenant whose part ``path`` is in, or None for the shared part."""
    parts = path.split("/", 2)
    if len(parts) < 3 or parts[0] != TENANTS_DIR or not _SLUG.fullmatch(parts[1]):
        return None
    return parts[1]


def _code_digest() -> str:
    """The source of the rules and of what they import from the portal: a new release of the
    checks never reads what an older one kept."""
    digest = hashlib.blake2b(digest_size=16)
    root = Path(__file__).resolve().parent.parent
    for path in sorted([*root.glob("checks/*.py"), *root.glob("render/*.py"), root / "specs.py"]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


CODE_DIGEST = _code_digest()


@dataclass
class TreeParts:
    """A tree split by tenant, with a digest per part."""

    shared: dict[str, bytes]
    tenants: dict[str, dict[str, bytes]]
    digests: dict[str, str]
    context: str
    listed: frozenset[str] = frozenset()

    def subtree(self, slugs: Iterable[str]) -> dict[str, bytes]:
        """The shared part and the given tenants' files."""
        files = dict(self.shared)
        for slug in slugs:
            files.update(self.tenants.get(slug, {}))
        return files

    def key(self, slug: str) -> str:
        return f"{self.digests[slug]}{'+' if slug in self.listed else '-'}"


def _digest_files(files: Mapping[str, bytes]) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for path in sorted(files):
        data = files[path]
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _index_facts(shared: Mapping[str, bytes]) -> tuple[bytes, frozenset[str]]:
    """What the tenant index does besides listing tenants, and which tenants it lists."""
    from gitops.checks.manifests import load_documents, resolve_reference

    data = shared.get(TENANT_INDEX)
    if data is None:
        return b"", frozenset()
    try:
        docs = load_documents(data)
    except Exception:  # an unreadable index: the whole of it is context
        return data, frozenset()
    if len(docs) != 1 or not isinstance(docs[0], dict):
        return data, frozenset()
    config = docs[0]
    listed: set[str] = set()
    for ref in config.get("resources") or []:
        target = resolve_reference(TENANTS_DIR, ref) if isinstance(ref, str) else None
        if target is not None and target.count("/") == 1 and target.startswith("tenants/"):
            listed.add(target.split("/")[1])
    rest = {k: v for k, v in config.items() if k != "resources"}
    # Which entries are not plain tenant directories changes what the index includes.
    others = sorted(
        str(r)
        for r in config.get("resources") or []
        if not (isinstance(r, str) and posixpath.normpath(r).count("/") == 0)
    )
    return pickle.dumps((sorted(rest.items(), key=lambda kv: str(kv[0])), others)), frozenset(
        listed
    )


def split(
    files: Mapping[str, bytes],
    *,
    reuse: TreeParts | None = None,
    changed: Iterable[str] | None = None,
) -> TreeParts:
    """``files`` split by tenant. With ``reuse`` (the parts of a tree ``files`` differs from
    only in ``changed``), only the changed tenants are split and digested again."""
    if reuse is not None and changed is not None:
        touched = {slug_of(p) for p in changed}
        tenants = dict(reuse.tenants)
        digests = dict(reuse.digests)
        shared = reuse.shared
        for path in changed:
            if slug_of(path) is None and files.get(path) != reuse.shared.get(path):
                if shared is reuse.shared:
                    shared = dict(reuse.shared)
                if path in files:
                    shared[path] = files[path]
                else:
                    shared.pop(path, None)
        for slug in touched - {None}:
            assert slug is not None
            prefix = f"{TENANTS_DIR}/{slug}/"
            own = {p: d for p, d in reuse.tenants.get(slug, {}).items() if p in files}
            for path in changed:
                if path.startswith(prefix):
                    if path in files:
                        own[path] = files[path]
                    else:
                        own.pop(path, None)
            if own:
                tenants[slug] = own
                digests[slug] = _digest_files(own)
            else:
                tenants.pop(slug, None)
                digests.pop(slug, None)
        if shared is reuse.shared:
            return TreeParts(shared, tenants, digests, reuse.context, reuse.listed)
        return _with_context(shared, tenants, digests)
    shared_files: dict[str, bytes] = {}
    by_slug: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        slug = slug_of(path)
        if slug is None:
            shared_files[path] = data
        else:
            by_slug.setdefault(slug, {})[path] = data
    return _with_context(
        shared_files, by_slug, {slug: _digest_files(own) for slug, own in by_slug.items()}
    )


def _with_context(
    shared: dict[str, bytes], tenants: dict[str, dict[str, bytes]], digests: dict[str, str]
) -> TreeParts:
    index, listed = _index_facts(shared)
    context = hashlib.blake2b(digest_size=20)
    context.update(_digest_files({p: d for p, d in shared.items() if p != TENANT_INDEX}).encode())
    context.update(index)
    return TreeParts(shared, tenants, digests, context.hexdigest(), listed)


# --- the store ---------------------------------------------------------------------------------


@dataclass
class _Store:
    """Values by key: an LRU in this process in front of an optional SQLite file."""

    path: str = ""
    limit: int = 400_000
    _memory: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _db: sqlite3.Connection | None = None
    _db_failed: bool = False

    def _connection(self) -> sqlite3.Connection | None:
        if not self.path or self._db_failed:
            return None
        if self._db is None:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS check_values "
                    "(key TEXT PRIMARY KEY, value BLOB NOT NULL, used REAL NOT NULL)"
                )
                db.commit()
                self._db = db
            except (OSError, sqlite3.Error) as exc:
                # The cache only saves time: without it the checks compute everything.
                logger.warning("check cache %s unusable: %s", self.path, exc)
                self._db_failed = True
                return None
        return self._db

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        missing: list[str] = []
        with self._lock:
            for key in keys:
                if key in self._memory:
                    self._memory.move_to_end(key)
                    found[key] = self._memory[key]
                else:
                    missing.append(key)
            db = self._connection() if missing else None
            if db is not None:
                try:
                    for start in range(0, len(missing), 500):
                        chunk = missing[start : start + 500]
                        marks = ",".join("?" * len(chunk))
                        rows = db.execute(
                            f"SELECT key, value FROM check_values WHERE key IN ({marks})",  # noqa: S608
                            chunk,
                        ).fetchall()
                        for key, blob in rows:
                            value = pickle.loads(blob)  # noqa: S301 (the portal's own file)
                            found[key] = value
                            self._remember(key, value)
                except (sqlite3.Error, pickle.UnpicklingError, EOFError) as exc:
                    logger.warning("check cache %s unreadable: %s", self.path, exc)
        return found

    def put_many(self, values: Mapping[str, Any]) -> None:
        if not values:
            return
        with self._lock:
            for key, value in values.items():
                self._remember(key, value)
            db = self._connection()
            if db is None:
                return
            now = time.time()
            try:
                db.executemany(
                    "INSERT OR REPLACE INTO check_values (key, value, used) VALUES (?, ?, ?)",
                    [
                        (k, pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), now)
                        for k, v in values.items()
                    ],
                )
                db.commit()
                count = db.execute("SELECT count(*) FROM check_values").fetchone()[0]
                if count > self.limit:
                    db.execute(
                        "DELETE FROM check_values WHERE key IN (SELECT key FROM check_values "
                        "ORDER BY used LIMIT ?)",
                        (count - self.limit,),
                    )
                    db.commit()
            except sqlite3.Error as exc:
                logger.warning("check cache %s not written: %s", self.path, exc)

    def _remember(self, key: str, value: Any) -> None:
        self._memory[key] = value
        self._memory.move_to_end(key)
        while len(self._memory) > self.limit:
            self._memory.popitem(last=False)

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()


def store(path: str | None = None) -> _Store:
    """The store kept in the SQLite file ``path`` (one per path in this process); None, ""
    or "memory": this process only. The portal passes ``GITOPS_CHECK_CACHE``."""
    key = "" if path in (None, "", "memory") else str(path)
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = _Store(key)
        return _STORES[key]


# --- running a rule by parts --------------------------------------------------------------------


@dataclass
class Stats:
    """How many tenants' values a run found kept and how many it computed."""

    kept: int = 0
    computed: int = 0


def by_tenant(
    rule: str,
    parts: TreeParts,
    params: str,
    compute: Callable[[Mapping[str, bytes], list[str]], dict[str | None, T]],
    stats: Stats | None = None,
    cache: str | None = None,
) -> dict[str | None, T]:
    """The rule's value for the shared part (key None, computed on every run) and for every
    tenant (kept, or computed with the others that are not kept, in one run of ``compute``
    on the shared part plus those tenants). ``compute(files, slugs)`` returns the value for
    None and for each of ``slugs``. ``cache`` is the store's file (see ``store``)."""
    prefix = hashlib.blake2b(
        f"{rule}\0{CODE_DIGEST}\0{params}\0{parts.context}".encode(), digest_size=16
    ).hexdigest()
    keys = {slug: f"{prefix}:{slug}:{parts.key(slug)}" for slug in parts.tenants}
    kept = store(cache).get_many(list(keys.values()))
    missing = sorted(slug for slug, key in keys.items() if key not in kept)
    computed = compute(parts.subtree(missing), missing)
    values: dict[str | None, T] = {None: computed[None]}
    for slug, key in keys.items():
        values[slug] = kept[key] if key in kept else computed[slug]
    store(cache).put_many({keys[slug]: computed[slug] for slug in missing})
    if stats is not None:
        stats.kept += len(keys) - len(missing)
        stats.computed += len(missing)
    return values


def split_findings(
    findings: Iterable[Finding], slugs: Iterable[str]
) -> dict[str | None, list[Finding]]:
    """Findings by the part their file is in (None: the shared part)."""
    out: dict[str | None, list[Finding]] = {None: []}
    for slug in slugs:
        out[slug] = []
    for finding in findings:
        part = slug_of(finding.path)
        out[part if part in out else None].append(finding)
    return out


def flatten(values: Mapping[str | None, list[T]]) -> list[T]:
    """Every part's list, the shared part first, then the tenants in order."""
    out = list(values.get(None, []))
    for slug in sorted(k for k in values if k is not None):
        out.extend(values[slug])
    return out
