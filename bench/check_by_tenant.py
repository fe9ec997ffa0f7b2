"""One check run over a large fleet repository, cold and with each tenant's values kept.

Run by hand from the project root, on a fleet repository of many tenants, e.g. the one
``bench/approval_burst.py --keep`` leaves (10,000 tenants: about 110,000 files):

    .venv/bin/python bench/check_by_tenant.py --repo /tmp/approval-burst-10000-XXXX/fleet.git

In one process, each row a check run (``gitops.checks.run_checks``) of main with N tenants
changed (their ClusterQueue's fair-sharing weight), as the merge queue runs it (the base's split
reused, only the changed tenants split again):

- **cold**: nothing kept (a new release of the checks, or the first run): every tenant's
  values computed, which is what every check run cost before the checks ran by tenant;
- **N changed, kept**: the same tree's other tenants kept from the cold run.

Columns: wall seconds of the run, of its kustomize check, and how many tenant values were kept
and computed. Schemas come from ``--schemas`` (default: the configured directory).
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True, help="a bare fleet repository")
    parser.add_argument("--changed", type=int, nargs="+", default=[1, 10, 250, 1000])
    parser.add_argument("--schemas", default="", help="CRD directory (default: configured)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["GITOPS_CHECK_CACHE"] = "memory"  # this process only: the cold run is cold
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault(
        "PORTAL_ENCRYPTION_KEYS", base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    )
    import django

    django.setup()
    from django.conf import settings

    from gitops import checks
    from gitops.checks import partition
    from gitops.fleet import base_fleet
    from gitops.repo import GitRepository

    repo = GitRepository(Path(args.repo))
    started = time.perf_counter()
    base = repo.read_tree("main")
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    base_parts = partition.split(base)
    split_s = time.perf_counter() - started
    fleet = base_fleet()
    schema_dir = args.schemas or settings.GITOPS_SCHEMA_DIR or None
    slugs = sorted(base_parts.tenants)
    print(
        f"{len(base):,} files, {len(slugs):,} tenants: tree read in {read_s:.1f} s, "
        f"split in {split_s:.1f} s; {os.cpu_count()} CPUs"
    )

    timings: dict[str, float] = {}
    guarded = checks._guarded

    def timed(name: checks.CheckName, run: object) -> checks.CheckResult:
        begun = time.perf_counter()
        result = guarded(name, run)  # type: ignore[arg-type]
        timings[name] = time.perf_counter() - begun
        return result

    checks._guarded = timed  # type: ignore[assignment]
    print("\n| run | tenants changed | wall s | kustomize s | kept | computed | verdict |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    offset = 0  # each run changes tenants no run before it changed
    for label, count in [("cold", args.changed[0]), *(("kept", n) for n in args.changed)]:
        if label == "cold":
            partition.store().clear_memory()
        head = dict(base)
        changed = set()
        chosen = slugs[offset : offset + count]
        offset += count
        for slug in chosen:
            path = f"tenants/{slug}/queues.yaml"
            if path in head:
                head[path] = head[path].replace(b"weight: '1'", b"weight: '2'")
                changed.add(path)
        stats = partition.Stats()
        begun = time.perf_counter()
        parts = partition.split(head, reuse=base_parts, changed=changed)
        results = checks.run_checks(
            head,
            fleet=fleet,
            changed=changed,
            schema_dir=schema_dir,
            base=base,
            parts=parts,
            base_parts=base_parts,
            stats=stats,
        )
        wall = time.perf_counter() - begun
        verdict = ", ".join(f"{r.name} {r.status}" for r in results if r.status != "passed")
        print(
            f"| {label} | {len(changed):,} | {wall:.1f} | {timings.get('kustomize', 0):.1f} | "
            f"{stats.kept:,} | {stats.computed:,} | {verdict or 'all passed'} |"
        )


if __name__ == "__main__":
    main()
