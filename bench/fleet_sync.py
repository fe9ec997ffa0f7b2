"""How fast, and in how much memory, the portal reads a large fleet's nodes from the API.

The portal lists nodes with the official ``kubernetes`` client but reads the answer as raw
JSON (``_preload_content=False``) and parses each node on its own (``fleet.inventory``). The
baseline is the client's usual path: ``CoreV1Api.list_node()`` deserialising into typed
``V1Node`` models, then reading the same facts from their attributes. Both run in this
process, one after the other, against the same simulator over HTTP in a process of its
own (so its JSON encoding is not counted).

Also timed: the whole ``fleet.services.sync_all()`` (nodes, pods, Flux objects,
InferenceServices, written to the database), which is what the beat schedule runs, against
its first implementation, which rewrote every node row on every sync (``bulk_update``).

    .venv/bin/python bench/fleet_sync.py --nodes 250 1000 4000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402


def typed_facts(node: Any) -> tuple[str, int, int, bool]:
    """The facts the portal keeps, read from a typed V1Node (the baseline's second half)."""
    labels = node.metadata.labels or {}
    allocatable = (node.status.allocatable or {}) if node.status else {}
    gpus = int(allocatable.get("nvidia.com/gpu", "0") or 0)
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    return (
        labels.get("nvidia.com/gpu.product", ""),
        int(labels.get("nvidia.com/gpu.count", 0)),
        gpus,
        ready,
    )


def measure(fn: Callable[[], Any], runs: int) -> tuple[list[float], int, Any]:
    """Wall times (ms) of ``runs`` calls after one warm-up, and the tracemalloc peak of one."""
    result = fn()
    times = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1000)
    gc.collect()
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return times, peak, result


def start_simulator(config: str) -> tuple[str, subprocess.Popen[bytes]]:
    """The simulator in its own process, so its JSON encoding is not in this one's numbers."""
    tmp = Path(tempfile.mkdtemp(prefix="fleet-sim-"))
    (tmp / "fleet.yaml").write_text(config)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PORTAL_VAR_DIR": str(tmp), "DATABASE_URL": f"sqlite:///{tmp}/s.db"}
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "simulator",
            "--addr",
            f"127.0.0.1:{port}",
            "--config",
            str(tmp / "fleet.yaml"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1):  # noqa: S310 (http only)
                return url, process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the simulator did not start")


def break_one_node(url: str, core: Any, raw: Callable[[], int], typed: Callable[[], int]) -> str:
    """Give one node a condition without ``type`` (as a buggy node agent might) and see what
    each path still reads."""
    name = core.list_node(limit=1).items[0].metadata.name
    with urllib.request.urlopen(f"{url}/api/v1/nodes/{name}", timeout=30) as response:  # noqa: S310
        node = json.load(response)
    node["status"]["conditions"].append({"status": "True", "reason": "AgentBug"})
    request = urllib.request.Request(  # noqa: S310
        f"{url}/sim/objects",
        data=json.dumps({"resource": "nodes", "object": node}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=30).close()  # noqa: S310
    parsed = raw()
    try:
        outcome = f"typed path read {typed()} nodes"
    except Exception as exc:  # the point: which exception, and that it loses every node
        outcome = f"typed path read no node ({type(exc).__name__})"
    return f"one malformed node: portal read {parsed} nodes, {outcome}"


def run(nodes: int, runs: int) -> list[dict[str, Any]]:
    from kubernetes import client

    from fleet import inventory, services
    from fleet.kube import Kube

    mig = max(1, nodes // 8)
    config = "\n".join(
        [
            "node_groups:",
            f"- {{pool: h200, nodes: {nodes - mig}}}",
            "- pool: h200-mig",
            f"  nodes: {mig}",
            "  mode: mig",
            "  mig_config: all-balanced",
            "  mig_profiles: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}",
            f"nvlink_domains: {max(1, nodes // 18)}",
            "",
        ]
    )
    url, sim = start_simulator(config)
    configuration = client.Configuration()
    configuration.host = url
    api = client.ApiClient(configuration)
    core = client.CoreV1Api(api)
    kube = Kube(api, timeout=120)

    def raw() -> int:
        parsed = [inventory.parse_node(obj) for obj in kube.list_nodes()]
        return sum(1 for info in parsed if info is not None)

    def typed() -> int:
        return len([typed_facts(n) for n in core.list_node(_request_timeout=120).items])

    def fetch_only() -> int:
        return len(core.list_node(_preload_content=False, _request_timeout=120).data)

    def sync() -> int:
        report = services.sync_all(kube)
        assert not report.errors, report.errors
        return nodes

    def sync_rewriting_every_node() -> int:
        # The first implementation: bulk_update of every node row on every sync.
        kept = services._node_values
        services._node_values = lambda node: object()  # type: ignore[assignment]
        try:
            return sync()
        finally:
            services._node_values = kept

    rows = []
    for name, fn, n in [
        ("HTTP only (bytes, no decoding)", fetch_only, runs),
        ("portal: raw JSON + fleet.inventory.parse_node", raw, runs),
        ("baseline: typed V1Node models (list_node)", typed, runs),
        ("portal: whole sync_all() into the database", sync, max(3, runs // 3)),
        (
            "baseline: sync_all() rewriting every node row",
            sync_rewriting_every_node,
            max(3, runs // 3),
        ),
    ]:
        times, peak, result = measure(fn, n)
        rows.append(
            {
                "nodes": nodes,
                "variant": name,
                "runs": n,
                "median": statistics.median(times),
                "p95": p95(times),
                "peak": peak,
                "result": result,
            }
        )
    body = fetch_only()
    robustness = break_one_node(url, core, raw, typed)
    api.close()
    sim.terminate()
    sim.wait(timeout=30)
    print(f"# {nodes} nodes: node list {body / 1e6:.1f} MB; {robustness}", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[250, 1000])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        logging.disable(logging.WARNING)
        print("| nodes | variant | runs | median ms | p95 ms | vs typed | Python peak MiB |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for nodes in args.nodes:
            rows = run(nodes, args.runs)
            typed = next(r for r in rows if r["variant"].startswith("baseline"))
            for row in rows:
                ratio = row["median"] / typed["median"]
                print(
                    f"| {row['nodes']:,} | {row['variant']} | {row['runs']} | "
                    f"{row['median']:.1f} | {row['p95']:.1f} | {ratio:.2f}x | "
                    f"{row['peak'] / 2**20:.1f} |",
                    flush=True,
                )
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
