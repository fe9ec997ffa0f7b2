"""What reading Kueue back costs at 10,000 Workloads over 500 tenants.

1. The watch's event handling: ``fleet.services.store_queue_workload`` once per event (what a
   Workload watch event costs: parse, attribute by namespace, one upsert), against a relist of
   the same objects (``store_queue_workloads``: parse all, one pass of upserts and deletes),
   both as Workloads per second. The events are MODIFIED events of every workload moving from
   pending to admitted; the relist stores the same 10,000 admitted objects.
2. The tenant queue page (``/t/<slug>/queue/``) against the tenant list (``/tenants/``), both
   as a platform admin with 500 tenants: server time through ``django.test.Client`` (no
   network, no browser) and queries. The target: the queue page within 2x of the list.

Everything runs in this process on a throwaway SQLite database (``BENCH_DATABASE_URL`` for
PostgreSQL); the objects are built as Kueue v0.19.2 writes them (tests/fleet/kueue_samples.py).

    .venv/bin/python bench/queue_watch.py --tenants 500 --workloads 10000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402


def timed(fn: Any, runs: int) -> list[float]:
    """Wall times (ms) of ``runs`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20, help="timed page requests per page")
    parser.add_argument("--relists", type=int, default=3, help="timed relists")
    args = parser.parse_args()
    # As bench/billing_dashboard.py: no static manifest (nothing was collected) and no HTTPS
    # redirect in front of the test client.
    os.environ.setdefault("STATIC_MANIFEST", "false")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        logging.disable(logging.WARNING)
        run(args)


def run(args: argparse.Namespace) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from fleet import services
    from fleet.models import QueueWorkload, SyncState, WatchState
    from fleet.queues import KUEUE_WATCHES
    from tenants.models import PlatformRole, Tenant
    from tests.fleet import kueue_samples as k

    slugs = [f"t{i:04d}" for i in range(args.tenants)]
    Tenant.objects.bulk_create(Tenant(slug=s, display_name=s.upper()) for s in slugs)
    admin = get_user_model().objects.create_user("pam", password="x")
    PlatformRole.objects.create(user=admin, role=PlatformRole.Name.PLATFORM_ADMIN)
    now = timezone.now()
    for kind in KUEUE_WATCHES:
        WatchState.objects.create(kind=kind, connected=True, last_heard=now)
    SyncState.objects.create(source=SyncState.Source.KUEUE, last_success=now)
    services.store_cluster_queues([k.cluster_queue(s, used=2, pending=5) for s in slugs])
    services.store_local_queues([k.local_queue(s) for s in slugs])

    per = args.workloads // args.tenants
    names = [(slugs[i % args.tenants], f"job-{i:05d}") for i in range(per * args.tenants)]
    pending = [k.workload(ns, n, conditions=k.WAITING_FOR_QUOTA) for ns, n in names]
    admitted = [k.workload(ns, n, conditions=k.ADMITTED, admitted_to=ns, gpus=1) for ns, n in names]
    services.store_queue_workloads(pending)
    assert QueueWorkload.objects.count() == len(names)

    # 1. Events, one store_one each (pending -> admitted), then relists of the same objects.
    start = time.perf_counter()
    for obj in admitted:
        services.store_queue_workload("MODIFIED", obj)
    events_s = time.perf_counter() - start
    assert QueueWorkload.objects.filter(state="admitted").count() == len(names)
    relists = timed(lambda: services.store_queue_workloads(admitted), args.relists)
    relist_ms = statistics.median(relists)

    # 2. Pages, as a platform admin: the tenant list and one tenant's queue.
    services.store_queue_workloads(pending[: len(pending) // 2] + admitted[len(admitted) // 2 :])
    client = Client()
    client.force_login(admin)
    pages = []
    urls = (("tenant list", reverse("tenants:list")), ("tenant queue", f"/t/{slugs[0]}/queue/"))
    for label, url in urls:
        assert client.get(url).status_code == 200, url
        count = [0]

        def counted(execute: Any, *params: Any, count: list[int] = count) -> Any:
            count[0] += 1
            return execute(*params)

        with connection.execute_wrapper(counted):
            client.get(url)
        times = timed(lambda url=url: client.get(url), args.runs)
        pages.append((label, url, statistics.median(times), p95(times), count[0]))

    engine = connection.vendor
    load = os.getloadavg()[0]
    print(f"\n{len(names):,} Workloads over {args.tenants} tenants ({engine}, load {load:.2f})\n")
    print("| path | Workloads | total s | Workloads/s | ms per Workload |")
    print("| --- | ---: | ---: | ---: | ---: |")
    n = len(names)
    print(
        f"| watch events, `store_queue_workload` each | {n:,} | {events_s:.2f} | "
        f"{n / events_s:,.0f} | {1000 * events_s / n:.3f} |"
    )
    print(
        f"| relist, `store_queue_workloads` (median of {args.relists}) | {n:,} | "
        f"{relist_ms / 1000:.2f} | {n / (relist_ms / 1000):,.0f} | {relist_ms / n:.3f} |"
    )
    print("\n| page | median ms | p95 ms | queries | vs tenant list |")
    print("| --- | ---: | ---: | ---: | ---: |")
    base = pages[0][2]
    for label, url, median, high, count in pages:
        print(f"| {label} `{url}` | {median:.1f} | {high:.1f} | {count} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
