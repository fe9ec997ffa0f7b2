"""How long the usage dashboards take to render as tenants and ledger rows grow, against a bare
portal page (the jobs list, empty) in the same run.

Each tenant has one workload with a ledger row every hour of the last ``--days`` days (500
tenants and 365 days is 4.4 million rows). Pages are rendered through Django's test client,
signed in as a platform admin, so the numbers include the middleware, the queries and the
templates, but no network.

    .venv/bin/python bench/dashboards.py --tenants 500 --days 30 365
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402

BATCH = 20_000


def _grow(tenants: int, days: int, have_days: int) -> None:
    """Add the hours from ``days`` ago up to ``have_days`` ago for every tenant, in raw batched
    INSERTs (building millions of model instances would take longer than the benchmark)."""
    from django.db import connection, transaction

    from billing.models import Source, UsageHour

    ops = connection.ops
    table = UsageHour._meta.db_table
    columns = (
        "hour, tenant_slug, namespace, flavor, gpu_model, mig_profile, workload, source, "
        "allocated_gpu_seconds, used_gpu_seconds, observed_seconds, memory_avg_mib, "
        "memory_peak_mib, energy_kwh, util_fallback, ingested_at"
    )
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * 16)})"  # noqa: S608 - no input
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    stamp = ops.adapt_datetimefield_value(now)
    batch: list[tuple[object, ...]] = []
    with transaction.atomic(), connection.cursor() as cursor:
        for hour in range(have_days * 24, days * 24):
            at = ops.adapt_datetimefield_value(now - timedelta(hours=hour + 1))
            for t in range(tenants):
                slug = f"t{t:04d}"
                held = 3600 * (1 + t % 4)
                batch.append(
                    (
                        at,
                        slug,
                        slug,
                        "h200",
                        "NVIDIA-H200",
                        "",
                        "Deployment/train",
                        Source.EXPORTER.value,
                        held,
                        held // 4,
                        3600,
                        0,
                        0,
                        "0.7",
                        False,
                        stamp,
                    )
                )
                if len(batch) >= BATCH:
                    cursor.executemany(sql, batch)
                    batch.clear()
        cursor.executemany(sql, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--days", type=int, nargs="+", default=[30])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # The test client speaks plain HTTP, and the pages' static files are not collected: run as
    # the development server does (DEBUG records the queries too: some twenty per page).
    os.environ["DEBUG"] = "true"
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        from django.contrib.auth import get_user_model
        from django.test import Client

        from billing.models import GpuPrice
        from fleet.models import Node
        from tenants.models import PlatformRole, Tenant

        logging.disable(logging.WARNING)
        Tenant.objects.bulk_create(
            [Tenant(slug=f"t{t:04d}", display_name=f"T {t}") for t in range(args.tenants)]
        )
        Node.objects.bulk_create(
            [Node(name=f"gpu-{n}", flavor="h200", gpu_count=8) for n in range(args.tenants // 2)]
        )
        GpuPrice.objects.create(
            gpu_model="NVIDIA-H200", amount=Decimal(3), effective_from="2020-01-01"
        )
        admin = get_user_model().objects.create_user("pam", password="x")
        PlatformRole.objects.create(user=admin, role=PlatformRole.Name.PLATFORM_ADMIN)
        client = Client()
        client.force_login(admin)

        def timed(url: str) -> list[float]:
            response = client.get(url)
            assert response.status_code == 200, (
                url,
                response.status_code,
                response.get("Location"),
            )
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - started) * 1000)
            return times

        print("| tenants | days of hours | rows | page | median ms | p95 ms | vs bare page |")
        print("| ---: | ---: | ---: | --- | ---: | ---: | ---: |")
        have = 0
        for days in sorted(args.days):
            started = time.perf_counter()
            _grow(args.tenants, days, have)
            have = days
            rows = args.tenants * days * 24
            print(
                f"# {rows:,} rows ready in {time.perf_counter() - started:.0f} s", file=sys.stderr
            )
            bare = statistics.median(timed("/jobs/"))
            pages = [("/jobs/ (bare)", "/jobs/"), ("/tenants/", "/tenants/")]
            pages += [
                (f"/billing/?range={r}", f"/billing/?range={r}") for r in ("24h", "30d", "365d")
            ]
            pages += [("/t/t0000/usage/?range=365d", "/t/t0000/usage/?range=365d")]
            for name, url in pages:
                times = timed(url)
                median = statistics.median(times)
                print(
                    f"| {args.tenants} | {days} | {rows:,} | `{name}` | {median:.0f} | "
                    f"{p95(times):.0f} | {median / bare:.1f}x |",
                    flush=True,
                )
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
