"""One idle-reclaim evaluation (``billing.idle.detect``) over 1,000 GPUs and 30 days of
metering, against a baseline in the same run.

Data: G GPUs (default 1,000), one single-GPU workload each, spread over 100 tenants, that
ran every hour of the last D days (default 30): G x 24 x D ledger rows (720,000), the
per-hour roll-up of the DCGM samples that ``billing.ingest`` keeps. 5% of the workloads idle
(1% busy) for the last hours; an H200 policy (under 5% for 2 h) covers them all.

Timed, the server side only, from the call to its return:
- ``detect``: the portal's detection, one aggregate query per distinct window over the
  ``hour`` index;
- baseline ``python_scan``: the obvious first version, which reads every ledger row of the
  retention into Python and groups them per workload there;
- ``evaluate``: a whole first pass (detection plus opening, auditing and notifying a case per
  idle workload), once.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_idle \\
        .venv/bin/python bench/idle_detection.py

The PostgreSQL database must exist; it is migrated and its ledger emptied first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

TENANTS = 100
IDLE_SHARE = 20  # one workload in 20 idles


def load(gpus: int, days: int, end: datetime) -> int:
    from billing.models import UsageHour
    from tenants.models import Tenant

    UsageHour.objects.all().delete()
    for t in range(TENANTS):
        Tenant.objects.get_or_create(slug=f"t{t:03d}", defaults={"display_name": f"t{t:03d}"})
    rows = []
    written = 0
    for back in range(days * 24, 0, -1):
        hour = end - timedelta(hours=back)
        for g in range(gpus):
            slug = f"t{g % TENANTS:03d}"
            idle = g % IDLE_SHARE == 0 and back <= 3
            rows.append(
                UsageHour(
                    hour=hour,
                    tenant_slug=slug,
                    namespace=slug,
                    flavor="h200",
                    gpu_model="NVIDIA-H200",
                    workload=f"Job/w{g:04d}",
                    source="exporter",
                    allocated_gpu_seconds=Decimal(3600),
                    used_gpu_seconds=Decimal(36 if idle else 2700),
                    observed_seconds=3600,
                )
            )
        if len(rows) >= 20_000:
            UsageHour.objects.bulk_create(rows)
            written += len(rows)
            rows = []
    UsageHour.objects.bulk_create(rows)
    return written + len(rows)


def python_scan(now: datetime, window: int, threshold: Decimal) -> list[tuple[str, str]]:
    """The baseline: every row of the retention into Python, grouped there."""
    from billing.models import UsageHour

    end = now.replace(minute=0, second=0, microsecond=0)
    by: dict[tuple[str, str], dict[datetime, tuple[Decimal, Decimal]]] = defaultdict(dict)
    for row in UsageHour.objects.values_list(
        "namespace", "workload", "hour", "allocated_gpu_seconds", "used_gpu_seconds"
    ).iterator(chunk_size=10_000):
        by[(row[0], row[1])][row[2]] = (row[3], row[4])
    idle = []
    for key, hours in by.items():
        inside = [v for h, v in hours.items() if end - timedelta(hours=window) <= h < end]
        if len(inside) < window:
            continue
        allocated = sum(a for a, _ in inside)
        used = sum(u for _, u in inside)
        if allocated and 100 * used / allocated < threshold:
            idle.append(key)
    return sorted(idle)


def timed(fn, runs: int) -> tuple[list[float], object]:  # type: ignore[no-untyped-def]
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        from django.db import connection

        from billing import idle
        from billing.models import IdleCase, IdlePolicy

        now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
        end = now.replace(minute=0)
        started = time.perf_counter()
        rows = load(args.gpus, args.days, end)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("ANALYZE billing_usagehour")
        print(
            f"loaded {rows:,} ledger rows in {time.perf_counter() - started:.1f} s "
            f"({connection.vendor})"
        )
        IdleCase.objects.all().delete()
        IdlePolicy.objects.all().delete()
        IdlePolicy.objects.create(flavor="h200", threshold_percent=Decimal(5), window_hours=2)

        detect_times, found = timed(lambda: idle.detect(now), args.runs)
        scan_times, scanned = timed(lambda: python_scan(now, 2, Decimal(5)), max(1, args.runs // 2))
        assert sorted((i.namespace, i.workload) for i in found) == scanned, "the two disagree"
        eval_times, result = timed(lambda: idle.evaluate(now=now), 1)
        print(
            f"{len(found)} idle workloads of {args.gpus} GPUs x {args.days} days "
            f"(load average {os.getloadavg()[0]:.2f})"
        )
        print("| variant | runs | median s | max s |")
        print("| --- | --- | --- | --- |")
        for name, values in (
            ("detect (aggregate over the window)", detect_times),
            ("baseline: python_scan (every row into Python)", scan_times),
            ("evaluate, first pass (detect + open, audit, notify cases)", eval_times),
        ):
            print(
                f"| {name} | {len(values)} | {statistics.median(values):.3f} | {max(values):.3f} |"
            )
        print(f"first pass opened {result.detected} cases")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
