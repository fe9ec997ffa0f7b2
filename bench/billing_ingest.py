"""How long the GPU-usage ingest takes for a month of a 1,000-GPU fleet, and what it holds.

The portal's path for one hour (``billing.services.ingest_hour`` minus the HTTP fetch from
Prometheus): Prometheus-shaped series (metric, labels, [(time, value)]) of the four DCGM
metrics at the default 60 s step, joined into points (``billing.ingest.points_from_series``),
rolled up (``billing.ingest.rollup``, with the nodes and pods read from the database as
``window_rollup`` reads them), turned into rows (``billing.services.ledger_rows``) and
written (delete the hour, bulk insert, the day's sums, one transaction). Baselines in the
same run: a bare loop over the same samples (the floor of any ingest written in Python) and
a plain bulk insert of the same number of rows.

    .venv/bin/python bench/billing_ingest.py --gpus 1000 --hours 24
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

GPUS_PER_NODE = 8
H200_MIB = 143_771
# Per GPU, mig-parted's all-balanced layout on an H200.
MIG_LAYOUT = (("1g.18gb", 1), ("1g.18gb", 2), ("2g.35gb", 3), ("3g.71gb", 4))
HAMI_PODS_PER_NODE = 20
STEP = 60
Series = list[tuple[str, dict[str, str], list[tuple[float, float]]]]


def fleet_shape(gpus: int) -> tuple[int, int, int]:
    """Nodes per mode: 60% of the GPUs whole, 20% MIG, 20% HAMi (at least one node each)."""
    nodes = max(3, gpus // GPUS_PER_NODE)
    mig = max(1, nodes // 5)
    hami = max(1, nodes // 5)
    return nodes - mig - hami, mig, hami


def build_fleet(gpus: int) -> list[dict[str, Any]]:
    """Nodes, pods and tenants in the database; returns the devices as label sets."""
    from fleet.models import Node, Workload
    from tenants.models import Tenant

    whole, mig, hami = fleet_shape(gpus)
    nodes, workloads, devices = [], [], []
    tenants = set()
    for index in range(whole + mig + hami):
        mode = "whole" if index < whole else "mig" if index < whole + mig else "hami"
        name = f"{mode}-{index:04d}"
        nodes.append(
            Node(
                name=name,
                hostname=name,
                pool=f"h200-{mode}",
                flavor="h200" if mode == "whole" else f"h200-{mode}",
                product="NVIDIA-H200",
                gpu_count=GPUS_PER_NODE,
                gpu_memory_mib=H200_MIB,
                sharing=mode,
            )
        )
        namespace = f"t{index % 200:04d}"
        tenants.add(namespace)
        if mode == "hami":
            for pod in range(HAMI_PODS_PER_NODE):
                workloads.append(
                    Workload(
                        namespace=namespace,
                        name=f"serve-{index}-{pod}",
                        node=name,
                        owner_kind="ReplicaSet",
                        owner_name=f"serve-{index}",
                        gpu_requests={
                            "nvidia.com/vgpu": 1,
                            "nvidia.com/gpumem": 24000,
                            "nvidia.com/gpucores": 30,
                        },
                    )
                )
        for gpu in range(GPUS_PER_NODE):
            base = {
                "gpu": str(gpu),
                "UUID": f"GPU-{index:04d}-{gpu}",
                "pci_bus_id": f"00000000:{gpu:02X}:00.0",
                "device": f"nvidia{gpu}",
                "modelName": "NVIDIA H200",
                "Hostname": name,
                "DCGM_FI_DRIVER_VERSION": "570.172.08",
            }
            if mode == "whole":
                # One 8-GPU job per node; one node in ten is idle (no pod labels).
                pod = {} if index % 10 == 9 else {"namespace": namespace, "pod": f"train-{index}-0"}
                devices.append({**base, **pod})
                if pod and gpu == 0:
                    workloads.append(
                        Workload(
                            namespace=namespace,
                            name=f"train-{index}-0",
                            node=name,
                            owner_kind="Job",
                            owner_name=f"train-{index}",
                            gpu_requests={"nvidia.com/gpu": GPUS_PER_NODE},
                        )
                    )
            elif mode == "mig":
                for profile, instance in MIG_LAYOUT:
                    pod = f"eval-{index}-{gpu}-{instance}"
                    labels = {"GPU_I_PROFILE": profile, "GPU_I_ID": str(instance)}
                    devices.append({**base, **labels, "namespace": namespace, "pod": pod})
                    workloads.append(
                        Workload(
                            namespace=namespace,
                            name=pod,
                            node=name,
                            owner_kind="Job",
                            owner_name=f"eval-{index}",
                            gpu_requests={f"nvidia.com/mig-{profile}": 1},
                        )
                    )
            else:
                devices.append(base)  # HAMi's pods lose their labels (Project-HAMi/HAMi#112)
    Node.objects.bulk_create(nodes, batch_size=1000)
    Workload.objects.bulk_create(workloads, batch_size=1000)
    Tenant.objects.bulk_create([Tenant(slug=s, display_name=s) for s in sorted(tenants)])
    return devices


def hour_series(devices: list[dict[str, Any]], start: int, rng: random.Random) -> Series:
    """What four range queries return for ``[start - step, start + 3600 - step]``."""
    from billing import ingest

    times = [float(start - STEP + i * STEP) for i in range(3600 // STEP + 1)]
    series: Series = []
    for labels in devices:
        busy = rng.uniform(0.05, 0.95)
        energy = rng.uniform(1e9, 2e9) + start * 400_000.0
        series.append(
            (
                ingest.GR_ENGINE_ACTIVE,
                labels,
                [(t, min(1.0, busy + rng.uniform(-0.05, 0.05))) for t in times],
            )
        )
        series.append((ingest.GPU_UTIL, labels, [(t, busy * 100) for t in times]))
        series.append((ingest.FB_USED, labels, [(t, 40_000.0 + busy * 60_000) for t in times]))
        series.append(
            (ingest.ENERGY, labels, [(t, energy + (t - start) * 400_000.0) for t in times])
        )
    return series


def portal_hour(hour: datetime, series: Series, timings: dict[str, float]) -> int:
    """``ingest_hour`` with the series in hand of the Prometheus fetch; returns the rows."""
    from django.db import transaction

    from billing import ingest, services
    from billing.models import Source, UsageHour
    from fleet.services import platform_namespaces, tenant_of
    from tenants.models import Tenant

    start = int(hour.timestamp())
    clock = time.perf_counter()
    points = ingest.points_from_series(series)
    timings["join"] += time.perf_counter() - clock

    clock = time.perf_counter()
    result = ingest.rollup(
        points,
        start=start,
        end=start + 3600,
        step=STEP,
        nodes=services.node_infos(),
        holders=services.holders(),
    )
    platform = platform_namespaces()
    lines = [
        line for line in result.lines if not line.namespace or tenant_of(line.namespace, platform)
    ]
    timings["rollup"] += time.perf_counter() - clock

    clock = time.perf_counter()
    tenants = set(Tenant.objects.values_list("slug", flat=True))
    rows = services.ledger_rows(hour, Source.PROMETHEUS, lines, tenants)
    timings["rows"] += time.perf_counter() - clock

    clock = time.perf_counter()
    with transaction.atomic():
        UsageHour.objects.filter(hour=hour).delete()
        UsageHour.objects.bulk_create(rows)
        services.rollup_days([hour.date()])  # the day's sums, as ingest_hour keeps them
    timings["write"] += time.perf_counter() - clock
    return len(rows)


def bare_loop(series: Series) -> float:
    """The floor: touch every sample once."""
    total = 0.0
    for _, _, values in series:
        for _, value in values:
            total += value
    return total


def plain_insert(hour: datetime, count: int) -> None:
    from django.db import transaction

    from billing.models import UsageHour

    rows = [
        UsageHour(
            hour=hour,
            namespace="plain",
            workload=f"Pod/p{i}",
            source="prometheus",
            allocated_gpu_seconds=3600,
            used_gpu_seconds=1800,
        )
        for i in range(count)
    ]
    with transaction.atomic():
        UsageHour.objects.filter(hour=hour).delete()
        UsageHour.objects.bulk_create(rows)


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], Any]) -> float:
    clock = time.perf_counter()
    fn()
    return time.perf_counter() - clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24, help="hours ingested (a month is 720)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        logging.disable(logging.WARNING)
        rng = random.Random(args.seed)  # noqa: S311 (seeded for repeatable runs)
        clock = time.perf_counter()
        devices = build_fleet(args.gpus)
        whole, mig, hami = fleet_shape(args.gpus)
        gpus = (whole + mig + hami) * GPUS_PER_NODE
        print(
            f"# fleet: {gpus} GPUs ({whole * 8} whole, {mig * 8} MIG in {mig * 32} instances, "
            f"{hami * 8} HAMi with {hami * HAMI_PODS_PER_NODE} shares), {len(devices)} device "
            f"series per metric, built in {time.perf_counter() - clock:.1f} s",
            file=sys.stderr,
        )
        first = datetime(2026, 1, 1, tzinfo=UTC)
        timings = dict.fromkeys(("generate", "join", "rollup", "rows", "write"), 0.0)
        baseline = {"loop": 0.0, "insert": 0.0}
        per_hour: list[float] = []
        rows = samples = 0
        rss_before = max_rss_mib()
        for n in range(args.hours):
            hour = first + timedelta(hours=n)
            clock = time.perf_counter()
            series = hour_series(devices, int(hour.timestamp()), rng)
            timings["generate"] += time.perf_counter() - clock
            samples += sum(len(values) for _, _, values in series)
            before = sum(timings[k] for k in ("join", "rollup", "rows", "write"))
            written = portal_hour(hour, series, timings)
            per_hour.append(sum(timings[k] for k in ("join", "rollup", "rows", "write")) - before)
            rows += written
            baseline["loop"] += timed(lambda series=series: bare_loop(series))
            baseline["insert"] += timed(
                lambda hour=hour, written=written: plain_insert(
                    hour + timedelta(days=3650), written
                )
            )
            if n % 6 == 5:
                print(f"# {n + 1}/{args.hours} hours, {rows:,} rows", file=sys.stderr)
        # One more hour under tracemalloc: what the path holds at its peak.
        hour = first + timedelta(hours=args.hours)
        series = hour_series(devices, int(hour.timestamp()), rng)
        tracemalloc.start()
        portal_hour(hour, series, dict.fromkeys(timings, 0.0))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        path = sum(timings[k] for k in ("join", "rollup", "rows", "write"))
        month = 720 / args.hours
        print(
            f"\n{gpus:,} GPUs, {args.hours} hours, step {STEP} s: {samples:,} samples "
            f"({samples // args.hours:,} per hour), {rows:,} ledger rows "
            f"({rows // args.hours:,} per hour)\n"
        )
        print("| stage | s total | ms per hour | samples/s | rows/s | 720 h (extrapolated) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        entries = [
            (
                "synthetic series (stands in for the fetch, not timed in the path)",
                timings["generate"],
            ),
            ("portal: join series into points", timings["join"]),
            ("portal: rollup (with nodes and pods from the database)", timings["rollup"]),
            ("portal: ledger_rows", timings["rows"]),
            ("portal: delete hour + bulk insert + day sums", timings["write"]),
            ("**portal: the whole hour**", path),
            ("baseline: bare loop over the same samples", baseline["loop"]),
            ("baseline: plain bulk insert of as many rows", baseline["insert"]),
        ]
        for name, seconds in entries:
            print(
                f"| {name} | {seconds:.1f} | {1000 * seconds / args.hours:.0f} | "
                f"{samples / seconds:,.0f} | {rows / seconds:,.0f} | "
                f"{seconds * month / 60:.1f} min |"
            )
        print(
            f"\nper hour through the path: median {1000 * statistics.median(per_hour):.0f} ms, "
            f"max {1000 * max(per_hour):.0f} ms; whole path vs bare loop "
            f"{path / baseline['loop']:.1f}x, write vs plain insert "
            f"{timings['write'] / baseline['insert']:.2f}x"
        )
        print(
            f"memory: tracemalloc peak of one hour through the path {peak / 2**20:.0f} MiB; "
            f"max RSS {max_rss_mib():.0f} MiB (before the hours {rss_before:.0f} MiB)"
        )
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
