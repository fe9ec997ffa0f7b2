"""How long the catalog's check of one request takes as the number of tenants grows.

``catalog.services.check_request`` runs on every keystroke of a request form (the live
preview, debounced) and on the approval page. Its capacity what-if sums every tenant's GPU
shares. The portal keeps every tenant's shares in the process and reads one version row to
know they are current (``ShareVersion``); after a share changed it reads them all again in
one query (the second variant, what every check did before). The baseline is the first
version, which built each other tenant's whole spec (a query or two per tenant).

    .venv/bin/python bench/catalog_check.py --tenants 100 1000 5000
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402


def measure(fn: Callable[[], Any], runs: int) -> tuple[list[float], int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fn()
    times = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as queries:
        tracemalloc.start()
        fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return times, peak, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        from catalog import services
        from catalog.models import Resource, bump_share_version
        from catalog.specs import desired_tenant
        from gitops.fleet import configured_fleet
        from tenants.models import Tenant

        logging.disable(logging.WARNING)
        fleet = configured_fleet()
        spec = {"name": "new", "flavor": "h200", "kind": "whole", "count": 2}

        def per_tenant(tenant: Any) -> list[Any]:
            # The first version: every other tenant's whole spec, then its shares.
            others = Tenant.objects.exclude(pk=tenant.pk).filter(
                resources__state__in=[Resource.State.ACTIVE, Resource.State.DECOMMISSIONING]
            )
            return [s for other in others.distinct() for s in desired_tenant(other).shares]

        def check() -> Any:
            return services.check_request(tenant, "gpu-share", "new", spec, fleet=fleet)

        def check_reread() -> Any:
            # A share changed since the last check: every share is read again, in one query
            # (what every check did before the shares were kept by version).
            bump_share_version()
            return check()

        def check_per_tenant() -> Any:
            kept = services._others_promised
            services._others_promised = lambda t, f: services._promised(per_tenant(t), f)  # type: ignore[assignment]
            try:
                return check()
            finally:
                services._others_promised = kept

        print(
            "| tenants | variant | runs | median ms | p95 ms | vs baseline | queries | peak MiB |"
        )
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        have = 0
        for count in sorted(args.tenants):
            started = time.perf_counter()
            _grow(count - have, have)
            have = count
            tenant = Tenant.objects.order_by("slug").first()
            elapsed = time.perf_counter() - started
            print(f"# {count} tenants ready in {elapsed:.1f} s", file=sys.stderr)
            rows = []
            for name, fn, runs in [
                ("portal: shares kept, one version row read", check, args.runs),
                ("portal after a share changed: all read in one query", check_reread, args.runs),
                (
                    "baseline: each other tenant's spec built",
                    check_per_tenant,
                    max(3, args.runs // 3),
                ),
            ]:
                times, peak, queries = measure(fn, runs)
                rows.append((name, runs, statistics.median(times), p95(times), queries, peak))
            baseline = rows[-1][2]
            for name, runs, median, slow, queries, peak in rows:
                print(
                    f"| {count:,} | {name} | {runs} | {median:.1f} | {slow:.1f} | "
                    f"{median / baseline:.2f}x | {queries} | {peak / 2**20:.1f} |",
                    flush=True,
                )
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


def _grow(extra: int, start: int) -> None:
    """Add ``extra`` tenants with two active GPU shares each (whole GPUs and MIG slices)."""
    from catalog.models import Resource, bump_share_version
    from tenants.models import Tenant

    new = Tenant.objects.bulk_create(
        [Tenant(slug=f"t{i:05d}", display_name=f"Tenant {i}") for i in range(start, start + extra)],
        batch_size=1000,
    )
    rows = []
    for tenant in Tenant.objects.filter(slug__in=[t.slug for t in new]):
        rows.append(
            Resource(
                tenant=tenant,
                kind="gpu-share",
                name="train",
                state="active",
                spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 1},
            )
        )
        rows.append(
            Resource(
                tenant=tenant,
                kind="gpu-share",
                name="eval",
                state="active",
                spec={
                    "name": "eval",
                    "flavor": "h200-mig",
                    "kind": "mig",
                    "count": 1,
                    "mig_profile": "1g.18gb",
                },
            )
        )
    Resource.objects.bulk_create(rows, batch_size=1000)
    bump_share_version()  # bulk_create sends no signals


if __name__ == "__main__":
    main()
