"""Parsing DCGM samples and rolling them up into ledger lines, without a database."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from billing.ingest import (
    Device,
    Holder,
    NodeInfo,
    Point,
    parse_exposition,
    points_from_series,
    rollup,
    workload_labels,
)
from simulator.dcgm import GpuSample, render_exposition
from tests.support import shared_dir

H200_MIB = 143771
NODES = {
    "h200-01": NodeInfo("h200", "whole", H200_MIB, 8, "NVIDIA-H200"),
    "mig-01": NodeInfo("h200-mig", "mig", H200_MIB, 8, "NVIDIA-H200"),
    "hami-01": NodeInfo("h200-hami", "hami", H200_MIB, 8, "NVIDIA-H200"),
}
HOUR = 1_767_225_600  # 2026-01-01 00:00 UTC


@pytest.fixture
def dcgm_fixtures() -> Path:
    return shared_dir("fixtures") / "dcgm"


def test_it_parses_a_real_exporters_scrape(dcgm_fixtures: Path) -> None:
    text = (dcgm_fixtures / "dcgm-exporter-t4-default-counters.prom").read_text()
    [point] = parse_exposition(text)
    assert point.device == Device("424773df46e0", "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e")
    assert (point.namespace, point.pod) == ("", "")
    # A T4 has no profiling metrics in the default set: only GPU_UTIL.
    assert point.gr_engine_active is None
    assert point.gpu_util == 0
    assert point.fb_used_mib == 0
    assert point.energy_mj == 128996013


def test_it_reads_the_pod_labels_of_a_real_scrape(dcgm_fixtures: Path) -> None:
    text = (dcgm_fixtures / "dcgm-exporter-k8s-pod-labels.prom").read_text()
    # Only the utilisation family is one the ledger reads; the DRAM one is skipped.
    [point] = parse_exposition(text)
    assert (point.namespace, point.pod, point.gpu_util) == ("foo", "bar", 0)


def test_it_reads_both_label_spellings() -> None:
    assert workload_labels({"namespace": "team-a", "pod": "p"}) == ("team-a", "p")
    # honorLabels false: the exporter's labels are renamed, the plain ones are the target's.
    renamed = {
        "namespace": "gpu-operator",
        "pod": "nvidia-dcgm-exporter-x",
        "exported_namespace": "team-a",
        "exported_pod": "p",
    }
    assert workload_labels(renamed) == ("team-a", "p")
    # An idle GPU of the same scrape: the exporter wrote no pod, the plain labels are the
    # target's (the exporter's own pod), which must not be taken for a workload.
    target = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x"}
    series = [
        ("DCGM_FI_DEV_FB_USED", {"UUID": "GPU-1", "hostname": "h200-01", **renamed}, [(1, 5)]),
        ("DCGM_FI_DEV_FB_USED", {"UUID": "GPU-2", "Hostname": "h200-01", **target}, [(1, 7)]),
    ]
    first, second = points_from_series(series)
    assert (first.device.hostname, first.namespace, first.pod) == ("h200-01", "team-a", "p")
    assert (second.device.hostname, second.namespace, second.pod) == ("h200-01", "", "")


def test_it_reads_the_simulators_mig_instances() -> None:
    samples = [
        GpuSample("mig-01", 0, "GPU-m", "00:18", "NVIDIA H200", "570", "1g.18gb", 9, "a", "e-0")
    ]
    [point] = parse_exposition(render_exposition(samples, HOUR, hostname_label="hostname"))
    assert point.device == Device("mig-01", "GPU-m", "9", "1g.18gb")
    assert point.gpu_util is None  # DCGM leaves it blank for an instance
    assert point.gr_engine_active is not None


def _point(at: int, host: str, uuid: str, **fields: object) -> Point:
    instance = str(fields.pop("instance", ""))
    profile = str(fields.pop("profile", ""))
    return Point(at=at, device=Device(host, uuid, instance, profile), **fields)  # type: ignore[arg-type]


def test_it_counts_whole_gpus_and_mig_slices_per_step() -> None:
    points = []
    for minute in range(-1, 60):
        at = HOUR + 60 * minute
        for gpu in ("GPU-a", "GPU-b"):
            points.append(
                _point(at, "h200-01", gpu, namespace="vision", pod="train-0", gr_engine_active=0.5)
            )
        points.append(
            _point(
                at,
                "mig-01",
                "GPU-m",
                instance="9",
                profile="1g.18gb",
                namespace="vision",
                pod="eval-0",
                gr_engine_active=1.0,
            )
        )
    holders = [Holder("vision", "train-0", "h200-01", "Job", "train", {"nvidia.com/gpu": 2})]
    result = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=holders)
    by_workload = {line.workload: line for line in result.lines}
    train = by_workload["Job/train"]
    assert (train.flavor, train.allocated, train.used) == ("h200", 7200, 3600)
    assert train.observed_seconds == 3600
    evaluation = by_workload["Pod/eval-0"]
    assert (evaluation.flavor, evaluation.allocated) == ("h200-mig", Fraction(3600, 7))
    # Readings are summed as floats; the ledger keeps a thousandth of a GPU-second.
    assert evaluation.used == pytest.approx(float(evaluation.allocated), abs=1e-6)
    # Prices are per GPU model and MIG profile, so each line says both.
    assert (train.gpu_model, train.mig_profile) == ("NVIDIA-H200", "")
    assert (evaluation.gpu_model, evaluation.mig_profile) == ("NVIDIA-H200", "1g.18gb")
    assert result.warnings == []


def test_it_marks_a_gap_and_does_not_fill_it() -> None:
    points = [
        _point(HOUR + 60 * m, "h200-01", "GPU-a", namespace="a", pod="p", gpu_util=50.0)
        for m in range(0, 60)
        if not 10 <= m < 40
    ]
    [line] = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=[]).lines
    assert (line.allocated, line.observed_seconds) == (1800, 1800)
    # No profiling metric: GPU_UTIL/100, and the line says so.
    assert (line.used, line.fallback) == (900, True)


def test_it_counts_energy_increases_across_a_counter_reset() -> None:
    values = {-1: 1000.0, 0: 61000.0, 1: 121000.0, 2: 5000.0, 3: 65000.0}
    points = [
        _point(HOUR + 60 * m, "h200-01", "GPU-a", namespace="a", pod="p", energy_mj=v)
        for m, v in values.items()
    ]
    # Out of order and a point after the window: neither changes the sum.
    points.reverse()
    points.append(_point(HOUR + 3600, "h200-01", "GPU-a", namespace="a", pod="p", energy_mj=9e9))
    [line] = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=[]).lines
    # 60000 + 60000 + 5000 (reset: all since) + 60000 mJ.
    assert line.energy_mj == 185000
    assert line.energy_kwh == pytest.approx(185000 / 3_600_000_000, rel=1e-12)


def test_it_shares_a_mig_gpus_energy_by_slices() -> None:
    points = []
    for m, energy in ((-1, 0.0), (0, 70000.0)):
        for instance, profile, pod in (("1", "3g.71gb", "big"), ("9", "1g.18gb", "small")):
            points.append(
                _point(
                    HOUR + 60 * m,
                    "mig-01",
                    "GPU-m",
                    instance=instance,
                    profile=profile,
                    namespace="a",
                    pod=pod,
                    energy_mj=energy,
                )
            )
    result = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=[])
    assert {line.workload: line.energy_mj for line in result.lines} == {
        "Pod/big": 30000,
        "Pod/small": 10000,
    }


def test_it_attributes_hami_gpus_from_the_synced_pods_not_the_device_label() -> None:
    points = [
        _point(
            HOUR + 60 * m,
            "hami-01",
            gpu,
            # The exporter maps the device to one pod only; it must not get it all.
            namespace="llm",
            pod="chat-0",
            gr_engine_active=0.4,
            fb_used_mib=1000.0,
        )
        for m in range(0, 60)
        for gpu in ("GPU-h1", "GPU-h2")
    ]
    share = {"nvidia.com/vgpu": 1, "nvidia.com/gpumem": 24000, "nvidia.com/gpucores": 30}
    holders = [
        Holder("llm", "chat-0", "hami-01", "ReplicaSet", "chat", share),
        Holder("llm", "chat-1", "hami-01", "ReplicaSet", "chat", share),
        Holder("other", "x", "h200-01", "Job", "x", {"nvidia.com/gpu": 1}),
    ]
    result = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=holders)
    [line] = result.lines
    assert (line.namespace, line.flavor, line.workload) == ("llm", "h200-hami", "ReplicaSet/chat")
    assert line.allocated == 2 * Fraction(3, 10) * 3600
    assert line.used == pytest.approx(float(line.allocated) * 0.4, abs=1e-6)
    assert line.memory_peak_mib == 600  # 1000 MiB x 0.3, for each of the two pods


def test_it_warns_about_a_node_it_does_not_know() -> None:
    points = [_point(HOUR, "ghost", "GPU-g", namespace="a", pod="p", gpu_util=10.0)]
    result = rollup(points, start=HOUR, end=HOUR + 3600, step=60, nodes=NODES, holders=[])
    assert [line.flavor for line in result.lines] == [""]
    assert result.warnings == ["node ghost is not in the inventory; its usage has no flavor"]


def test_it_drops_nan_samples() -> None:
    series = [
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {"UUID": "GPU-1", "Hostname": "h"}, [(1, float("nan"))]),
        ("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-1", "Hostname": "h"}, [(1, 40.0)]),
    ]
    [point] = points_from_series(series)
    # No profiling value to trust: the fallback counts instead of a NaN.
    assert (point.gr_engine_active, point.gpu_util) == (None, 40.0)
