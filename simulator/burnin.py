"""What the programs of a node's burn-in write to their log: ``dcgmi diag -r 3 -j`` and
nccl-tests' ``all_reduce_perf``, on the node the pod runs on, with the faults injected there.

A simulated container runs nothing; a container whose command runs one of these programs
gets the program's output in its log once it terminated (``output_lines``), in the program's
own format, so a client parses what it would parse on a real node:

- ``dcgmi diag -j`` (NVIDIA/DCGM v4.6.0 ``dcgmi/Diag.cpp``, schema
  ``testing/python3/dcgm_diag_schema.json``): one JSON document, ``"DCGM Diagnostic"`` with
  ``test_categories`` (``Deployment``, ``Integration``, ``Hardware``, ``Stress``:
  ``nvvs/include/PluginStrings.h`` ``PLUGIN_CATEGORY_*``), each test with ``name``, per-GPU
  ``results`` (``entity_group`` "GPU", ``entity_id``, ``status`` "Pass", "Fail" or "Skip",
  failures with ``warnings`` [{``warning``, ``error_id``, ``error_category``,
  ``error_severity``}]) and a ``test_summary``; plus ``entity_groups`` and ``metadata``. Level
  3 runs software, pcie, memory, diagnostic, targeted_stress, targeted_power and
  memory_bandwidth.
- ``all_reduce_perf`` (NVIDIA/nccl-tests v2.19.6 ``src/util.cu`` ``writeResultFooter``): the
  size table, then ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : <GB/s>``
  (``%g``), then ``# Collective test concluded: all_reduce_perf``.

The bandwidth a healthy node reaches is ``NOMINAL_BUSBW`` for its GPU product; the
``nccl-slow`` fault scales it, the ``diag-fail`` fault fails one named test on GPU 0.

Across nodes, ``mpirun ... all_reduce_perf -g 1`` in the pod of completion index 0 of an
indexed Job (the launcher; the other pods serve ssh and print nothing) prints the same table
for one GPU per process and ``BURN_IN_RANKS`` ranks; its bus bandwidth is
``NOMINAL_DOMAIN_BUSBW`` of the product, held down by the slowest member: a ring all-reduce
moves at the pace of its slowest link, so ``nccl-slow`` on any node of the Job slows it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.store import as_dict, as_list

DIAG_LEVEL_3 = (
    ("Deployment", "software"),
    ("Integration", "pcie"),
    ("Hardware", "memory"),
    ("Hardware", "diagnostic"),
    ("Stress", "targeted_stress"),
    ("Stress", "targeted_power"),
    ("Stress", "memory_bandwidth"),
)
DIAG_TESTS = frozenset(name for _, name in DIAG_LEVEL_3)
DCGM_VERSION = "4.4.1"
# all_reduce_perf's average bus bandwidth over 8 GPUs of one node, GB/s, as public NVLink
# (H100, H200: NVLink 4) and PCIe (L40S) runs report it; an unknown product gets DEFAULT.
NOMINAL_BUSBW = {
    "NVIDIA-H200": 480.0,
    "NVIDIA-H100-80GB-HBM3": 480.0,
    "NVIDIA-A100-SXM4-80GB": 230.0,
    "NVIDIA-L40S": 22.0,
}
DEFAULT_BUSBW = 100.0
# all_reduce_perf's average bus bandwidth across nodes, one rank per GPU, GB/s: bounded by the
# nodes' links out (8x 400 Gb/s InfiniBand for HGX H100/H200, 8x 200 Gb/s for A100) or, for
# GB200 NVL72, by multi-node NVLink; rounded figures of public runs, not a measurement here.
NOMINAL_DOMAIN_BUSBW = {
    "NVIDIA-GB200": 760.0,
    "NVIDIA-H200": 370.0,
    "NVIDIA-H100-80GB-HBM3": 370.0,
    "NVIDIA-A100-SXM4-80GB": 190.0,
}
DEFAULT_DOMAIN_BUSBW = 50.0
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass
class BurnInFaults:
    """Faults a burn-in finds: a diag test that fails on a node, and a node whose NCCL bus
    bandwidth is a share of nominal."""

    diag_fail: dict[str, str] = field(default_factory=dict)  # node -> failing test
    nccl_slow: dict[str, float] = field(default_factory=dict)  # node -> share of nominal
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_diag(self, node: str, test: str) -> None:
        if test not in DIAG_TESTS:
            raise ValueError(f"test must be one of {', '.join(sorted(DIAG_TESTS))}")
        with self.lock:
            self.diag_fail[node] = test

    def slow_nccl(self, node: str, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError("fraction must be above 0 and at most 1")
        with self.lock:
            self.nccl_slow[node] = share

    def clear(self) -> None:
        with self.lock:
            self.diag_fail.clear()
            self.nccl_slow.clear()


def _command(pod: Mapping[str, Any], container: str) -> list[str]:
    for c in as_list(as_dict(pod.get("spec")).get("containers")):
        c = as_dict(c)
        if c.get("name") == container:
            return [str(a) for a in as_list(c.get("command")) + as_list(c.get("args"))]
    return []


def diag_document(gpus: int, failing: str = "") -> dict[str, Any]:
    """``dcgmi diag -r 3 -j``'s JSON for ``gpus`` GPUs, ``failing`` failed on GPU 0."""
    categories: dict[str, list[dict[str, Any]]] = {}
    for category, name in DIAG_LEVEL_3:
        results = []
        for gpu in range(gpus):
            result: dict[str, Any] = {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entity_id": gpu,
                "status": "Pass",
            }
            if name == failing and gpu == 0:
                result["status"] = "Fail"
                result["warnings"] = [
                    {
                        "error_category": 2,
                        "error_id": 83,
                        "error_severity": 2,
                        "warning": f"GPU 0 failed the {name} test (injected fault)",
                    }
                ]
            results.append(result)
        summary = "Fail" if name == failing else "Pass"
        categories.setdefault(category, []).append(
            {"name": name, "results": results, "test_summary": {"status": summary}}
        )
    return {
        "DCGM Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in categories.items()]
        },
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [
                    {"entity_id": g, "device_id": "2335", "serial_num": f"165232{g:07d}"}
                    for g in range(gpus)
                ],
            }
        ],
        "metadata": {"version": DCGM_VERSION, "Driver Version Detected": "570.172.08"},
    }


def nccl_lines(gpus: int, busbw: float, ranks: int = 0) -> list[str]:
    """``all_reduce_perf -b 8 -e 8G -f 2 -g <gpus>``'s table and footer at ``busbw`` GB/s;
    ``ranks`` GPUs in all when run by ``mpirun`` (``gpus`` is then per process)."""
    lines = [
        f"# nThread 1 nGpus {gpus} minBytes 8 maxBytes 8589934592 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)       ",
    ]
    total = ranks or gpus
    factor = 2 * (total - 1) / total if total > 1 else 1.0
    for size in (1 << 20, 1 << 26, 1 << 30, 1 << 33):
        bus = busbw * (0.4 if size < 1 << 26 else 0.9 if size < 1 << 30 else 1.0)
        alg = bus / factor
        time_us = size / (alg * 1e3)
        cells = f"{time_us:8.1f} {alg:7.2f} {bus:7.2f}      0"
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1 {cells} {cells}")
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {busbw:g} ",
        "#",
        "# Collective test concluded: all_reduce_perf",
    ]
    return lines


def _env(pod: Mapping[str, Any], container: str, name: str) -> str:
    for c in as_list(as_dict(pod.get("spec")).get("containers")):
        if as_dict(c).get("name") == container:
            for var in as_list(as_dict(c).get("env")):
                if as_dict(var).get("name") == name:
                    return str(as_dict(var).get("value", ""))
    return ""


def domain_busbw(members: Sequence[tuple[str, str]], faults: BurnInFaults) -> float:
    """The bus bandwidth across ``members`` ((node, GPU product) each): the slowest sets it."""
    with faults.lock:
        return round(
            min(
                NOMINAL_DOMAIN_BUSBW.get(product, DEFAULT_DOMAIN_BUSBW)
                * faults.nccl_slow.get(node, 1.0)
                for node, product in members
            ),
            2,
        )


def output_lines(
    pod: Mapping[str, Any],
    container: str,
    product: str,
    gpus: int,
    faults: BurnInFaults,
    members: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """What ``container`` of ``pod`` printed before it exited, when it ran a burn-in
    program; [] otherwise. ``members``: (node, GPU product) of every pod of the pod's
    indexed Job, for the launcher of a run across nodes."""
    command = " ".join(_command(pod, container))
    if "mpirun" in command and "all_reduce_perf" in command:
        labels = as_dict(as_dict(pod.get("metadata")).get("labels"))
        if str(labels.get(COMPLETION_INDEX)) != "0" or not members:
            return []  # a worker: sshd until the Job controller stops it
        ranks = int(_env(pod, container, "BURN_IN_RANKS") or len(members) * gpus)
        return nccl_lines(1, domain_busbw(members, faults), ranks)
    node = str(as_dict(pod.get("spec")).get("nodeName") or "")
    with faults.lock:
        failing = faults.diag_fail.get(node, "")
        share = faults.nccl_slow.get(node, 1.0)
    if "dcgmi" in command and "diag" in command:
        return json.dumps(diag_document(gpus, failing), indent=4).splitlines()
    if "all_reduce_perf" in command:
        nominal = NOMINAL_BUSBW.get(product, DEFAULT_BUSBW)
        return nccl_lines(gpus, round(nominal * share, 2))
    return []
