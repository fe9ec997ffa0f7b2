"""The simulator's dcgm-exporter exposition: read back with Prometheus's own parser and
compared with a real exporter's scrape in ``../shared/fixtures/dcgm``."""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.dcgm import GpuSample, render_exposition, utilisation
from tests.support import shared_dir

NOW = 1_767_225_600.0
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
FAMILIES = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
}
GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
TAIL_LABELS = ["Hostname", "DCGM_FI_DRIVER_VERSION"]
POD_LABELS = ["namespace", "pod", "container"]


@pytest.fixture
def dcgm_fixtures() -> Path:
    """The upstream dcgm-exporter scrapes beside the checkout; skipped without them, failed
    in CI."""
    return shared_dir("fixtures") / "dcgm"


def gpu(index: int = 0, **fields: Any) -> GpuSample:
    sample = GpuSample(
        hostname="gpu-node-01",
        gpu=index,
        uuid=f"GPU-5c7e1c4a-0000-4000-8000-00000000000{index}",
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        model_name="NVIDIA H200",
        driver_version="570.124.06",
        memory_mib=143771,
    )
    return replace(sample, **fields)


def busy(index: int = 0, **fields: Any) -> GpuSample:
    workload: dict[str, Any] = {"namespace": "team-a", "pod": "llm-0", "container": "vllm"}
    return gpu(index, busy=True, **{**workload, **fields})


def mig(instance: int, profile: str, **fields: Any) -> GpuSample:
    return gpu(2, mig_profile=profile, mig_instance=instance, memory_mib=0, **fields)


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    parsed = {}
    for family in text_string_to_metric_families(text):
        parsed[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return parsed


def value(text: str, metric: str, **labels: str) -> float:
    matches = [v for found, v in families(text)[metric] if labels.items() <= found.items()]
    assert len(matches) == 1, (metric, labels, matches)
    return matches[0]


def raw_labels(text: str, metric: str) -> list[list[str]]:
    """Label names in the order written, per sample line of ``metric``."""
    lines = [line for line in text.splitlines() if line.startswith(metric + "{")]
    return [[name for name, _ in LABEL.findall(line.split("}", 1)[0])] for line in lines]


def test_it_writes_every_family_with_help_and_type() -> None:
    text = render_exposition([gpu(0), busy(1)], NOW)
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    # The parser strips a counter's _total suffix only; our names have none.
    assert {name: f.type for name, f in parsed.items()} == FAMILIES
    assert all(len(f.samples) == 2 for f in parsed.values())
    assert all(f.documentation for f in parsed.values())
    for name in FAMILIES:
        help_line = text.index(f"# HELP {name} ")
        assert text.index(f"# TYPE {name} ") > help_line
    assert text.endswith("\n")


def test_it_writes_labels_in_the_exporters_order() -> None:
    text = render_exposition([gpu(0), busy(1), mig(3, "3g.71gb")], NOW)
    for metric in FAMILIES:
        rows = raw_labels(text, metric)
        assert rows[0] == GPU_LABELS + TAIL_LABELS
        assert rows[1] == GPU_LABELS + TAIL_LABELS + POD_LABELS
        if metric not in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"):
            assert rows[2] == [*GPU_LABELS, "GPU_I_PROFILE", "GPU_I_ID", *TAIL_LABELS]


def test_it_labels_the_device_and_the_workload() -> None:
    text = render_exposition([busy(3)], NOW)
    labels, _ = families(text)["DCGM_FI_DEV_GPU_UTIL"][0]
    assert labels == {
        "gpu": "3",
        "UUID": "GPU-5c7e1c4a-0000-4000-8000-000000000003",
        "pci_bus_id": "00000000:1B:00.0",
        "device": "nvidia3",
        "modelName": "NVIDIA H200",
        "Hostname": "gpu-node-01",
        "DCGM_FI_DRIVER_VERSION": "570.124.06",
        "namespace": "team-a",
        "pod": "llm-0",
        "container": "vllm",
    }


def test_it_puts_no_workload_labels_on_a_gpu_without_a_pod() -> None:
    # Busy without a pod: a workload outside Kubernetes's view.
    text = render_exposition([gpu(0), gpu(1, busy=True)], NOW)
    for _, samples in families(text).items():
        for labels, _ in samples:
            assert not {"namespace", "pod", "container"} & labels.keys()


def test_it_reports_mig_instances_with_their_own_labels_and_memory() -> None:
    instances = [
        mig(1, "3g.71gb", busy=True, namespace="team-b", pod="train-0", container="main"),
        mig(5, "2g.35gb"),
        mig(9, "1g.18gb", busy=True, namespace="team-c", pod="eval-0", container="main"),
    ]
    text = render_exposition(instances, NOW)
    parsed = families(text)
    assert "DCGM_FI_DEV_GPU_UTIL" not in parsed
    assert "DCGM_FI_DEV_MEM_COPY_UTIL" not in parsed
    assert [
        (s["GPU_I_PROFILE"], s["GPU_I_ID"]) for s, _ in parsed["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    ] == [
        ("3g.71gb", "1"),
        ("2g.35gb", "5"),
        ("1g.18gb", "9"),
    ]
    for instance, memory in ((1, 72704), (5, 35840), (9, 18432)):
        used = value(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID=str(instance))
        free = value(text, "DCGM_FI_DEV_FB_FREE", GPU_I_ID=str(instance))
        assert used + free == memory
    assert value(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID="5") == 0
    assert value(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID="1") > 0.5
    assert value(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID="5") <= 0.03
    assert value(text, "DCGM_FI_PROF_DRAM_ACTIVE", pod="eval-0") > 0
    # Device fields are the GPU's, the same on each of its instances.
    for metric in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"):
        assert len({v for _, v in parsed[metric]}) == 1


def test_it_shows_an_xid_and_stops_a_gpu_that_fell_off_the_bus() -> None:
    text = render_exposition([busy(0, xid=79), gpu(1), gpu(2, xid=13)], NOW)
    assert value(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79
    assert value(text, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 0
    assert [(s["gpu"], s["xid"], v) for s, v in families(text)["DCGM_EXP_XID_ERRORS_COUNT"]] == [
        ("0", "79", 1),
        ("2", "13", 1),
    ]
    assert raw_labels(text, "DCGM_EXP_XID_ERRORS_COUNT")[0] == (
        GPU_LABELS + TAIL_LABELS + POD_LABELS + ["xid"]
    )
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 0
    assert value(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == 0


def test_it_writes_no_xid_count_without_an_xid() -> None:
    text = render_exposition([busy(0), gpu(1)], NOW)
    assert "DCGM_EXP_XID_ERRORS_COUNT" not in text


def test_it_counts_energy_up_with_time() -> None:
    samples = [busy(0), gpu(1), mig(1, "3g.71gb", busy=True)]
    readings = []
    for step in range(0, 4 * 3600, 15):
        text = render_exposition(samples, NOW + step)
        readings.append([v for _, v in families(text)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]])
    for before, after in pairwise(readings):
        assert all(b < a for b, a in zip(before, after, strict=True))
    # 15 s at 150-450 W, in mJ.
    assert 15 * 150_000 <= readings[1][0] - readings[0][0] <= 15 * 450_000


def test_it_keeps_the_energy_counter_when_a_pod_comes_or_goes() -> None:
    def energy(sample: GpuSample, now: float) -> float:
        return value(render_exposition([sample], now), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")

    assert energy(busy(0), NOW) == energy(gpu(0), NOW)
    assert energy(gpu(0), NOW + 15) > energy(busy(0), NOW)


def test_it_keeps_busy_and_idle_utilisation_in_their_ranges() -> None:
    uuid = gpu(0).uuid
    busy_values = [utilisation(uuid, NOW + step, True) for step in range(0, 7200, 15)]
    idle_values = [utilisation(uuid, NOW + step, False) for step in range(0, 7200, 15)]
    assert all(55 <= v <= 98 for v in busy_values)
    assert all(0 <= v <= 3 for v in idle_values)
    # It moves over two hours, but slowly from one scrape to the next.
    assert max(busy_values) - min(busy_values) > 20
    assert max(abs(a - b) for a, b in pairwise(busy_values)) < 3


def test_it_reports_plausible_device_values() -> None:
    for step in range(0, 3600, 300):
        text = render_exposition([busy(0), gpu(1)], NOW + step)
        for metric, low, high in (
            ("DCGM_FI_DEV_POWER_USAGE", 70, 700),
            ("DCGM_FI_DEV_GPU_TEMP", 25, 90),
            ("DCGM_FI_DEV_SM_CLOCK", 300, 2000),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, 1),
            ("DCGM_FI_PROF_DRAM_ACTIVE", 0, 1),
        ):
            assert all(low <= v <= high for _, v in families(text)[metric]), metric
        assert value(text, "DCGM_FI_DEV_POWER_USAGE", gpu="0") > 300
        assert value(text, "DCGM_FI_DEV_POWER_USAGE", gpu="1") < 100
        assert value(text, "DCGM_FI_DEV_GPU_UTIL", gpu="0") >= 55
        assert value(text, "DCGM_FI_DEV_GPU_UTIL", gpu="1") <= 3
        used = value(text, "DCGM_FI_DEV_FB_USED", gpu="0")
        assert used + value(text, "DCGM_FI_DEV_FB_FREE", gpu="0") == 143771
        assert 0.5 * 143771 < used < 143771
        assert value(text, "DCGM_FI_DEV_FB_USED", gpu="1") == 0


def test_it_defaults_an_unknown_memory_size() -> None:
    text = render_exposition([gpu(0, memory_mib=0)], NOW)
    assert value(text, "DCGM_FI_DEV_FB_FREE") == 81920


def test_it_formats_integers_and_doubles_as_the_exporter_does() -> None:
    text = render_exposition([busy(0)], NOW)
    values = {
        line.split("{")[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if "{" in line
    }
    for metric in (
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ):
        assert re.fullmatch(r"\d+\.\d{6}", values[metric]), metric
    for metric in FAMILIES.keys() - {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }:
        assert re.fullmatch(r"\d+", values[metric]), metric


def test_it_is_deterministic_and_differs_between_gpus() -> None:
    samples = [busy(0), busy(1), gpu(2), mig(1, "3g.71gb", busy=True)]
    assert render_exposition(samples, NOW) == render_exposition(list(samples), NOW)
    assert utilisation("GPU-a", NOW, True) == utilisation("GPU-a", NOW, True)
    assert utilisation("GPU-a", NOW, True) != utilisation("GPU-b", NOW, True)
    assert render_exposition(samples, NOW) != render_exposition(samples, NOW + 60)


def test_it_escapes_label_values() -> None:
    odd = 'NVIDIA "H200"\\SXM\nrev 2'
    text = render_exposition([busy(0, model_name=odd, container='say "hi"')], NOW)
    assert 'modelName="NVIDIA \\"H200\\"\\\\SXM\\nrev 2"' in text
    for samples in families(text).values():
        for labels, _ in samples:
            assert labels["modelName"] == odd
            assert labels["container"] == 'say "hi"'


def test_it_spells_the_hostname_label_as_asked() -> None:
    lower = render_exposition([gpu(0)], NOW, hostname_label="hostname")
    assert raw_labels(lower, "DCGM_FI_DEV_GPU_UTIL")[0] == [
        *GPU_LABELS,
        "hostname",
        "DCGM_FI_DRIVER_VERSION",
    ]
    assert value(lower, "DCGM_FI_DEV_GPU_UTIL", hostname="gpu-node-01") <= 3
    none = render_exposition([gpu(0)], NOW, hostname_label="")
    assert raw_labels(none, "DCGM_FI_DEV_GPU_UTIL")[0] == [*GPU_LABELS, "DCGM_FI_DRIVER_VERSION"]


def test_it_writes_nothing_for_no_gpus() -> None:
    assert render_exposition([], NOW) == ""


def test_it_matches_a_real_exporters_help_type_and_label_order(dcgm_fixtures: Path) -> None:
    ours = render_exposition([busy(0)], NOW)
    ours_parsed = {f.name: f for f in text_string_to_metric_families(ours)}
    real_text = (dcgm_fixtures / "dcgm-exporter-t4-default-counters.prom").read_text()
    shared = 0
    for real in text_string_to_metric_families(real_text):
        if real.name not in ours_parsed:
            continue
        shared += 1
        assert (ours_parsed[real.name].documentation, ours_parsed[real.name].type) == (
            real.documentation,
            real.type,
        )
    assert shared == 10
    # Older exporters wrote no pci_bus_id and a process name; the rest is in the same order.
    real_order = [
        n for n in raw_labels(real_text, "DCGM_FI_DEV_SM_CLOCK")[0] if n != "DCGM_FI_PROCESS_NAME"
    ]
    our_order = [n for n in raw_labels(ours, "DCGM_FI_DEV_SM_CLOCK")[0] if n != "pci_bus_id"]
    assert our_order[: len(real_order)] == real_order
    pods_text = (dcgm_fixtures / "dcgm-exporter-k8s-pod-labels.prom").read_text()
    real_dram = {f.name: f for f in text_string_to_metric_families(pods_text)}[
        "DCGM_FI_PROF_DRAM_ACTIVE"
    ]
    assert ours_parsed["DCGM_FI_PROF_DRAM_ACTIVE"].documentation == real_dram.documentation
