"""Reading Kubernetes API objects into fleet data: the real upstream captures in
``../shared/fixtures/k8s`` and the broken shapes a sync must survive."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.inventory import (
    FATAL_XIDS,
    Condition,
    parse_flux_object,
    parse_node,
    parse_pod,
    parse_quantity,
    revision_sha,
    xid_description,
)
from tests.support import shared_dir

SHA = "0647aea75b85755411b007a290b9321668370be5"


@pytest.fixture
def k8s() -> Path:
    """The upstream Kubernetes captures beside the checkout; skipped without them, failed in CI."""
    return shared_dir("fixtures") / "k8s"


def node(
    labels: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    **status: Any,
) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    return {
        "metadata": {"name": "gpu-1", "labels": labels or {}},
        "status": {"conditions": [ready] if conditions is None else conditions, **status},
    }


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def describe_section(text: str, heading: str) -> list[str]:
    """The indented lines under ``heading:`` in ``kubectl describe`` output."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{heading}:"))
    section = [lines[start].split(":", 1)[1].strip()]
    for line in lines[start + 1 :]:
        if line and not line[0].isspace():
            break
        section.append(line.strip())
    return [line for line in section if line]


# Nodes: GPU labels


def test_it_reads_the_mig_mixed_labels_of_an_h100(k8s: Path) -> None:
    labels = json.loads((k8s / "gpu-node/h100-mig-mixed-all-balanced.node-labels.json").read_text())
    info = parse_node({"metadata": {"name": "h100-a", "labels": labels}})
    assert info is not None
    assert info.product == "NVIDIA-H100-80GB-HBM3"
    assert (info.gpu_count, info.gpu_memory_mib, info.gpu_family) == (1, 81559, "hopper")
    assert info.driver_version == "550.54.15"
    assert info.mig_capable
    assert (info.mig_strategy, info.mig_config, info.mig_config_state) == (
        "mixed",
        "all-balanced",
        "success",
    )
    assert info.mig_profiles == (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))
    assert info.sharing == "mig"
    assert info.hostname == "s4124-0073"
    assert info.instance_type == "PIO-4124GS-TNR-01-NC24B"
    assert info.problems == ()


def test_it_reads_the_mig_single_all_disabled_labels_as_whole_gpus(k8s: Path) -> None:
    labels = json.loads(
        (k8s / "gpu-node/h100-mig-single-all-disabled.node-labels.json").read_text()
    )
    info = parse_node({"metadata": {"name": "h100-b", "labels": labels}})
    assert info is not None
    assert (info.mig_strategy, info.mig_config) == ("single", "all-disabled")
    assert info.mig_capable
    assert info.mig_profiles == ()
    assert info.sharing == "whole"
    assert (info.product, info.gpu_count, info.gpu_memory_mib) == (
        "NVIDIA-H100-80GB-HBM3",
        1,
        81559,
    )


def test_it_reads_a_time_sliced_t4_with_memory_in_bytes(k8s: Path) -> None:
    fragment = k8s / "gpu-node/t4-g4dn-time-slicing-8-replicas.node-labels-nvidia-only.txt"
    labels = json.loads("{" + fragment.read_text().strip().rstrip(",") + "}")
    capacity = json.loads(
        (k8s / "gpu-node/t4-g4dn-time-slicing-8-replicas.status-capacity.json").read_text()
    )
    info = parse_node(node(labels, capacity=capacity))
    assert info is not None
    assert info.sharing == "time-slicing"
    assert info.product == "Tesla-T4-SHARED"
    # One physical T4 advertised as eight replicas.
    assert info.gpu_count == 1
    assert info.gpu_capacity == {"nvidia.com/gpu": 8}
    assert info.gpu_memory_mib == 15360
    assert info.driver_version == "510.73.08"
    assert info.instance_type == "g4dn.xlarge"
    assert info.capacity["memory"] == "16105592Ki"
    assert info.problems == ()


def test_it_counts_mig_devices_when_whole_gpus_drop_to_zero(k8s: Path) -> None:
    text = k8s / "gpu-node/dgx-h100-mig-mixed-all-balanced.oc-describe-node-capacity.txt"
    lines = text.read_text().splitlines()
    start = lines.index("Allocatable:") + 1
    allocatable = dict(line.split(":") for line in lines[start : start + 4])
    info = parse_node(node(allocatable={k: v.strip() for k, v in allocatable.items()}))
    assert info is not None
    assert info.gpu_allocatable == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert info.sharing == "mig"


def test_it_recognises_a_hami_node_by_its_register_annotation(k8s: Path) -> None:
    text = (k8s / "gpu-node/hami-node-annotations-v100-mlu.hami-protocol-doc.txt").read_text()
    annotations = dict(line.split(": ", 1) for line in text.splitlines() if line)
    raw = node(capacity={"nvidia.com/gpu": "20"})
    raw["metadata"]["annotations"] = annotations
    info = parse_node(raw)
    assert info is not None
    assert info.sharing == "hami"
    # Two V100s registered, each split into ten vGPU slots.
    assert info.gpu_count == 2
    assert info.gpu_capacity == {"nvidia.com/gpu": 20}


def test_it_recognises_hami_by_its_memory_resource() -> None:
    info = parse_node(node(allocatable={"nvidia.com/gpu": "80", "nvidia.com/gpumem": "655360"}))
    assert info is not None
    assert info.sharing == "hami"
    assert info.gpu_allocatable["nvidia.com/gpumem"] == 655360


def test_it_recognises_hami_by_its_vgpu_slots() -> None:
    # What a HAMi node with resourceName nvidia.com/vgpu advertises: slots, no memory.
    info = parse_node(node(allocatable={"nvidia.com/vgpu": "80"}))
    assert info is not None
    assert info.sharing == "hami"


def test_it_recognises_a_dra_node_by_its_device_plugin_switch() -> None:
    raw = node()
    raw["metadata"]["labels"].update(
        {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.deploy.device-plugin": "false"}
    )
    info = parse_node(raw)
    assert info is not None
    assert (info.sharing, info.gpu_count, info.gpu_allocatable) == ("dra", 8, {})


def test_it_keeps_an_unknown_gpu_product_as_given() -> None:
    info = parse_node(
        node({"nvidia.com/gpu.product": "Some-Future-GPU-1TB", "nvidia.com/gpu.count": "4"})
    )
    assert info is not None
    assert info.product == "Some-Future-GPU-1TB"
    assert (info.gpu_count, info.sharing) == (4, "whole")


def test_it_reads_pool_and_topology_labels() -> None:
    labels = {
        "ai-factory.io/pool": "h200",
        "team.example/pool": "other",
        "network.topology.kubernetes.io/block": "block-a",
        "network.topology.kubernetes.io/rack": "rack-3",
        "nvidia.com/gpu.clique": "5f0b.1",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
    }
    info = parse_node(node(labels))
    assert info is not None
    assert (info.pool, info.block, info.rack, info.clique) == (
        "h200",
        "block-a",
        "rack-3",
        "5f0b.1",
    )
    assert info.instance_type == "p5.48xlarge"
    assert info.hostname == "gpu-1"
    other = parse_node(node(labels), pool_label="team.example/pool")
    assert other is not None
    assert other.pool == "other"


def test_it_reads_whole_gpus_from_capacity_without_gfd_labels() -> None:
    info = parse_node(node(capacity={"nvidia.com/gpu": "8", "cpu": "96"}))
    assert info is not None
    assert (info.gpu_count, info.sharing) == (8, "whole")
    assert info.gpu_capacity == {"nvidia.com/gpu": 8}


def test_it_finds_no_gpus_on_a_cpu_node(k8s: Path) -> None:
    raw = yaml.safe_load((k8s / "core/node-kube-worker-1.get-node-o-yaml.yaml").read_text())
    info = parse_node(raw)
    assert info is not None
    assert (info.gpu_count, info.sharing, info.product) == (0, "", "")
    assert info.capacity["memory"] == "2025188Ki"
    assert info.gpu_capacity == {}


# Nodes: health


def test_it_reads_the_healthy_node_yaml(k8s: Path) -> None:
    raw = yaml.safe_load((k8s / "core/node-kube-worker-1.get-node-o-yaml.yaml").read_text())
    info = parse_node(raw)
    assert info is not None
    assert (info.ready, info.health, info.health_reasons) == (True, "healthy", ())
    assert [c.type for c in info.conditions] == [
        "NetworkUnavailable",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    assert info.conditions[-1] == Condition(
        type="Ready",
        status="True",
        reason="KubeletReady",
        message="kubelet is posting ready status",
        last_transition="2022-02-17T22:15:15Z",
    )
    assert (info.taints, info.unschedulable, info.problems) == ((), False, ())


def test_it_reads_the_ready_condition_from_the_node_status_doc(k8s: Path) -> None:
    conditions = json.loads((k8s / "core/node-ready-condition.node-status-doc.json").read_text())
    info = parse_node(node(conditions=conditions))
    assert info is not None
    assert (info.ready, info.health) == (True, "healthy")


def test_it_marks_the_notready_node_from_its_describe_text_unhealthy(k8s: Path) -> None:
    text = (k8s / "core/node-kube-worker-1-notready.kubectl-describe.txt").read_text()
    conditions = []
    for row in describe_section(text, "Conditions")[2:]:
        kind, status, _heartbeat, transition, reason, message = re.split(r"\s{2,}", row)
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastTransitionTime": transition,
                "reason": reason,
                "message": message,
            }
        )
    taints = []
    for taint in describe_section(text, "Taints"):
        key, effect = taint.split(":")
        taints.append({"key": key, "effect": effect})
    raw = {
        "metadata": {"name": "kube-worker-1"},
        "spec": {"taints": taints},
        "status": {"conditions": conditions},
    }
    info = parse_node(raw)
    assert info is not None
    assert info.ready is None
    assert info.health == "unhealthy"
    assert info.health_reasons == ("NotReady: Kubelet stopped posting node status.",)
    assert info.taints == (
        ("node.kubernetes.io/unreachable", "", "NoExecute"),
        ("node.kubernetes.io/unreachable", "", "NoSchedule"),
    )
    assert info.problems == ()


def test_it_marks_a_node_that_is_not_ready_unhealthy() -> None:
    ready = condition("Ready", "False", "KubeletNotReady", "container runtime is down")
    info = parse_node(node(conditions=[ready]))
    assert info is not None
    assert (info.ready, info.health) == (False, "unhealthy")
    assert info.health_reasons == ("NotReady: container runtime is down",)


def test_it_does_not_know_the_health_of_a_node_without_a_ready_condition() -> None:
    for raw in (node(conditions=[]), {"metadata": {"name": "new"}}):
        info = parse_node(raw)
        assert info is not None
        assert (info.ready, info.health) == (None, "unknown")
        assert info.health_reasons == ("no Ready condition reported",)


@pytest.mark.parametrize(
    ("gpu_condition", "health", "reason"),
    [
        (
            condition(
                "SysLogsXIDError",
                reason="SysLogsXIDErrorIsNotHealthy",
                message="NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
            ),
            "unhealthy",
            "SysLogsXIDError: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the "
            "bus. (XID 79: GPU has fallen off the bus)",
        ),
        (
            condition("SysLogsGPUFallenOff", message="GPU 3 is not reachable"),
            "unhealthy",
            "SysLogsGPUFallenOff: GPU 3 is not reachable",
        ),
        (
            condition("SysLogsXIDError", message="XID 48 on GPU 2"),
            "unhealthy",
            "SysLogsXIDError: XID 48 on GPU 2 (XID 48: double-bit ECC error)",
        ),
        (
            condition("SysLogsXIDError", message="XID 13 on GPU 0"),
            "degraded",
            "SysLogsXIDError: XID 13 on GPU 0 (XID 13: graphics engine exception "
            "(application error))",
        ),
        (
            condition("GpuThermalWatch", reason="GpuThermalWatchIsNotHealthy"),
            "degraded",
            "GpuThermalWatch: GpuThermalWatchIsNotHealthy",
        ),
        (
            condition("GpuMemWatch", message="uncontained ECC error, XID 95"),
            "unhealthy",
            "GpuMemWatch: uncontained ECC error, XID 95 (XID 95: uncontained ECC error)",
        ),
        (condition("NVSwitchFatalError", message="SXID 12028"), "unhealthy", None),
        (condition("GPUMissing", message="Observed 7 of 8 GPUs"), "unhealthy", None),
        (condition("NVLinkStatusInactive", message="link 3 down"), "degraded", None),
        (
            condition("AcceleratedHardwareReady", "False", reason="NvidiaXID79Error"),
            "unhealthy",
            "AcceleratedHardwareReady: NvidiaXID79Error (XID 79: GPU has fallen off the bus)",
        ),
    ],
)
def test_it_judges_gpu_health_conditions(
    gpu_condition: dict[str, str], health: str, reason: str | None
) -> None:
    info = parse_node(node(conditions=[condition("Ready"), gpu_condition]))
    assert info is not None
    assert info.health == health
    assert len(info.health_reasons) == 1
    assert info.health_reasons[0].startswith(gpu_condition["type"] + ": ")
    if reason is not None:
        assert info.health_reasons[0] == reason


def test_it_ignores_gpu_conditions_that_report_no_problem() -> None:
    quiet = [
        condition("Ready"),
        condition("GpuMemWatch", "False"),
        condition("SysLogsXIDError", "False", message="XID 79"),
        condition("AcceleratedHardwareReady", "True"),
    ]
    info = parse_node(node(conditions=quiet))
    assert info is not None
    assert (info.health, info.health_reasons) == ("healthy", ())


def test_it_marks_pressure_degraded() -> None:
    pressure = condition("DiskPressure", reason="KubeletHasDiskPressure", message="disk is full")
    info = parse_node(node(conditions=[condition("Ready"), pressure]))
    assert info is not None
    assert (info.ready, info.health) == (True, "degraded")
    assert info.health_reasons == ("DiskPressure: disk is full",)


def test_it_reports_the_worst_health_with_every_reason() -> None:
    conditions = [
        condition("Ready"),
        condition("MemoryPressure", message="low memory"),
        condition("SysLogsGPUFallenOff", message="GPU 1 fell off"),
    ]
    info = parse_node(node(conditions=conditions))
    assert info is not None
    assert info.health == "unhealthy"
    assert info.health_reasons == (
        "MemoryPressure: low memory",
        "SysLogsGPUFallenOff: GPU 1 fell off",
    )


def test_it_keeps_unknown_conditions_without_judging_them() -> None:
    odd = condition("FrequentKubeletRestart", reason="FrequentKubeletRestart")
    info = parse_node(node(conditions=[condition("Ready"), odd]))
    assert info is not None
    assert info.health == "healthy"
    assert [c.type for c in info.conditions] == ["Ready", "FrequentKubeletRestart"]


def test_it_knows_the_fatal_xids() -> None:
    assert {48, 74, 79, 95}.issubset(FATAL_XIDS)
    assert not {13, 31, 43, 45}.intersection(FATAL_XIDS)
    assert xid_description(79) == "GPU has fallen off the bus"
    assert "ECC" in xid_description(48)
    assert xid_description(12345) == ""


# Malformed input


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            {"metadata": {"name": "n", "labels": ["gpu", "h100"]}},
            "metadata.labels is not a mapping: ['gpu', 'h100']",
        ),
        ({"metadata": {"name": "n"}, "status": "Ready"}, "status is not a mapping: 'Ready'"),
        (
            {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.count": "x"}}},
            "label nvidia.com/gpu.count is not a number: 'x'",
        ),
        (
            {"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": "lots"}}},
            "status.capacity nvidia.com/gpu is not a quantity: 'lots'",
        ),
        (
            {"metadata": {"name": "n"}, "status": {"conditions": [{"status": "True"}, "Ready"]}},
            "status.conditions[0] has no type",
        ),
        (
            {"metadata": {"name": "n"}, "status": {"conditions": {"type": "Ready"}}},
            "status.conditions is not a list: {'type': 'Ready'}",
        ),
        (
            {"metadata": {"name": "n"}, "spec": {"taints": [{"effect": "NoSchedule"}]}},
            "spec.taints[0] has no key: {'effect': 'NoSchedule'}",
        ),
        (
            {"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}},
            "spec.unschedulable is not a boolean: 'yes'",
        ),
        (
            {"metadata": {"name": "n", "labels": {"nvidia.com/mig-1g.10gb.count": "two"}}},
            "label nvidia.com/mig-1g.10gb.count is not a number: 'two'",
        ),
        (
            {"metadata": {"name": "n", "annotations": {"a": {"nested": True}}}},
            "metadata.annotations 'a' is not a string: {'nested': True}",
        ),
    ],
)
def test_it_records_problems_in_a_malformed_node(raw: dict[str, Any], problem: str) -> None:
    info = parse_node(raw)
    assert info is not None
    assert info.name == "n"
    assert problem in info.problems


def test_it_keeps_what_it_can_of_a_malformed_node() -> None:
    raw = {
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200", "x": None}},
        "status": {
            "capacity": {"nvidia.com/gpu": "lots", "nvidia.com/mig-1g.18gb": "14", "cpu": 96},
            "conditions": [{"type": "Ready"}, {"type": "DiskPressure", "status": "True"}],
        },
    }
    info = parse_node(raw)
    assert info is not None
    assert info.product == "NVIDIA-H200"
    assert info.capacity == {"nvidia.com/gpu": "lots", "nvidia.com/mig-1g.18gb": "14", "cpu": "96"}
    assert info.gpu_capacity == {"nvidia.com/mig-1g.18gb": 14}
    assert info.health == "unknown"
    assert "condition Ready has status ''" in info.problems
    assert "DiskPressure: status True" in info.health_reasons


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "node",
        ["metadata"],
        {},
        {"metadata": None},
        {"metadata": "gpu-1"},
        {"metadata": {"labels": {}}},
        {"metadata": {"name": ""}},
        {"metadata": {"name": 7}},
    ],
)
def test_it_returns_none_for_an_object_without_a_name(raw: object) -> None:
    assert parse_node(raw) is None
    assert parse_pod(raw) is None
    assert parse_flux_object("Kustomization", raw) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8", 8),
        (8, 8),
        (8.0, 8),
        ("0", 0),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("1G", 10**9),
        ("1Ki", 1024),
        ("3Mi", 3 * 2**20),
        ("1Gi", 2**30),
        ("1.5Gi", 3 * 2**29),
        ("2000m", 2),
        (" 4 ", 4),
        ("500m", None),
        ("lots", None),
        ("", None),
        ("1e3", None),
        ("4 GPUs", None),
        (True, None),
        (None, None),
        ([1], None),
        (0.5, None),
    ],
)
def test_it_parses_quantities(value: object, expected: int | None) -> None:
    assert parse_quantity(value) == expected


# Pods


def pod(containers: list[Any], init: object = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": containers, "initContainers": init or [], **spec},
    }


def gpus(name: str = "c", *, requests: dict | None = None, limits: dict | None = None) -> dict:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}}


def test_it_reads_the_device_plugin_readme_pod(k8s: Path) -> None:
    raw = yaml.safe_load(
        (k8s / "pods/pod-gpu-pod-nvidia-gpu-1.k8s-device-plugin-readme.yaml").read_text()
    )
    info = parse_pod(raw)
    assert info is not None
    assert (info.name, info.namespace, info.node, info.phase) == ("gpu-pod", "", "", "")
    assert info.gpu_requests == {"nvidia.com/gpu": 1}
    assert info.containers == ("cuda-container",)
    assert info.problems == ()


def test_it_reads_a_scheduled_pod() -> None:
    raw = pod([gpus(limits={"nvidia.com/gpu": "2", "cpu": "8"})], nodeName="gpu-7")
    raw["metadata"].update(
        uid="1f0c",
        labels={"kueue.x-k8s.io/queue-name": "default", "app": "llm"},
        ownerReferences=[
            {"kind": "Workload", "name": "w", "controller": False},
            {"kind": "ReplicaSet", "name": "llm-5d9f", "controller": True},
        ],
    )
    raw["status"] = {"phase": "Running"}
    info = parse_pod(raw)
    assert info is not None
    assert (info.namespace, info.uid, info.node, info.phase) == (
        "team-a",
        "1f0c",
        "gpu-7",
        "Running",
    )
    assert (info.owner_kind, info.owner_name) == ("ReplicaSet", "llm-5d9f")
    assert info.queue == "default"
    assert info.gpu_requests == {"nvidia.com/gpu": 2}


def test_it_takes_requests_before_limits() -> None:
    info = parse_pod(pod([gpus(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"})]))
    assert info is not None
    assert info.gpu_requests == {"nvidia.com/gpu": 1}


def test_it_adds_app_containers_and_takes_the_largest_init_container() -> None:
    app = [gpus("a", limits={"nvidia.com/gpu": 1}), gpus("b", limits={"nvidia.com/gpu": 2})]
    big_init = [
        gpus("warm", limits={"nvidia.com/gpu": 4}),
        gpus("load", limits={"nvidia.com/gpu": 1}),
    ]
    info = parse_pod(pod(app, big_init))
    assert info is not None
    assert info.gpu_requests == {"nvidia.com/gpu": 4}
    assert info.containers == ("a", "b")
    small_init = [gpus("warm", limits={"nvidia.com/gpu": 2})]
    info = parse_pod(pod(app, small_init))
    assert info is not None
    assert info.gpu_requests == {"nvidia.com/gpu": 3}


def test_it_counts_sidecars_beside_the_app_and_later_init_containers() -> None:
    sidecar = {**gpus("proxy", limits={"nvidia.com/gpu": 1}), "restartPolicy": "Always"}
    init = [sidecar, gpus("warm", limits={"nvidia.com/gpu": 3})]
    info = parse_pod(pod([gpus("app", limits={"nvidia.com/gpu": 2})], init))
    assert info is not None
    # max(1 + 3 while warming up, 1 + 2 when running)
    assert info.gpu_requests == {"nvidia.com/gpu": 4}


def test_it_reads_mig_and_hami_resources() -> None:
    containers = [
        gpus("mig", limits={"nvidia.com/mig-1g.10gb": "2", "memory": "8Gi"}),
        gpus("vgpu", limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000"}),
        gpus("dra", requests={"gpu.nvidia.com": 1}),
    ]
    info = parse_pod(pod(containers))
    assert info is not None
    assert info.gpu_requests == {
        "gpu.nvidia.com": 1,
        "nvidia.com/gpu": 1,
        "nvidia.com/gpumem": 3000,
        "nvidia.com/mig-1g.10gb": 2,
    }


def test_it_records_problems_in_a_malformed_pod() -> None:
    raw = pod(
        [
            gpus("a", limits={"nvidia.com/gpu": "lots"}),
            gpus("b", limits={"nvidia.com/gpu": 1}),
            "x",
        ],
        init="warm",
    )
    raw["metadata"]["ownerReferences"] = {"kind": "Job"}
    info = parse_pod(raw)
    assert info is not None
    assert info.gpu_requests == {"nvidia.com/gpu": 1}
    assert info.containers == ("a", "b")
    assert set(info.problems) == {
        "spec.containers[0] nvidia.com/gpu is not a quantity: 'lots'",
        "spec.containers[2] is not a mapping: 'x'",
        "spec.initContainers is not a list: 'warm'",
        "metadata.ownerReferences is not a list: {'kind': 'Job'}",
    }


# Flux and KServe

FLUX_EXPECTED: dict[str, dict[str, Any] | None] = {
    "flux/helmrelease-podinfo-status-history.helm-controller-docs.yaml": {
        "kind": "HelmRelease",
        "name": "<release-name>",
        "ready": "Unknown",
        # helm-controller v2 keeps the applied chart version in the history only.
        "last_applied_revision": "6.6.1+0cc9a8446c95",
    },
    "flux/helmrelease-podinfo-upgradefailed-rolledback.argocd-testdata.yaml": {
        "kind": "HelmRelease",
        "namespace": "default",
        "name": "podinfo",
        "ready": "False",
        "reconciling": True,
        "stalled": False,
        "released": False,
        "reason": "RollbackSucceeded",
        "message": "Helm rollback to previous release default/podinfo.v24 with chart "
        "podinfo@6.5.4 succeeded",
        "chart": "podinfo@6.5.*",
    },
    "flux/helmrelease-sample-v2beta1-ready.karmada-testdata.yaml": {
        "kind": "HelmRelease",
        "ready": "True",
        "released": True,
        "reason": "ReconciliationSucceeded",
        "message": "Release reconciliation succeeded",
        "last_applied_revision": "6.3.5",
        "last_attempted_revision": "6.3.5",
        "generation": 1,
        "observed_generation": 1,
        "chart": "./charts/podinfo@>=4.0.0 <5.0.0",
    },
    "flux/kustomization-sample-ready.karmada-testdata.yaml": {
        "kind": "Kustomization",
        "namespace": "test-kustomization",
        "name": "sample",
        "ready": "True",
        "reconciling": False,
        "released": None,
        "reason": "ReconciliationSucceeded",
        "message": f"Applied revision: master@sha1:{SHA}",
        "last_applied_revision": f"master@sha1:{SHA}",
        "last_attempted_revision": f"master@sha1:{SHA}",
        "generation": 1,
        "observed_generation": 1,
        "suspended": True,
        "path": "./kustomize",
    },
    # A status fragment without metadata: nothing to file it under.
    "flux/kustomization-status-history.kustomize-controller-docs.yaml": None,
    "kserve/isvc-flower-sample-ready-sdk-output.yaml": {
        "kind": "InferenceService",
        "namespace": "kserve-test",
        "name": "flower-sample",
        "ready": "True",
        "url": "http://flower-sample.kserve-test.example.com",
        "generation": 2,
        "observed_generation": None,
    },
    "kserve/isvc-helloworld-degraded-revisionfailed.argocd-testdata.yaml": {
        "kind": "InferenceService",
        "ready": "False",
        "reason": "Predictor ingress not created",
        "url": "",
    },
    "kserve/isvc-helloworld-healthy-rawdeployment.argocd-testdata.yaml": {
        "kind": "InferenceService",
        "name": "helloworld",
        "ready": "True",
        "reason": "",
    },
    "kserve/isvc-sklearn-iris-status-components-predictor-canary.json": None,
}


@pytest.mark.parametrize("relative", sorted(FLUX_EXPECTED))
def test_it_reads_the_flux_and_kserve_fixtures(k8s: Path, relative: str) -> None:
    raw = yaml.safe_load((k8s / relative).read_text())
    expected = FLUX_EXPECTED[relative]
    kind = raw.get("kind") or "Kustomization"
    status = parse_flux_object(kind, raw)
    if expected is None:
        assert status is None
        return
    assert status is not None
    assert {field: getattr(status, field) for field in expected} == expected
    assert status.problems == ()


def test_it_has_an_expectation_for_every_flux_and_kserve_fixture(k8s: Path) -> None:
    files = {
        str(path.relative_to(k8s))
        for folder in ("flux", "kserve")
        for path in (k8s / folder).iterdir()
        if path.suffix in (".yaml", ".json")
    }
    assert files == set(FLUX_EXPECTED)


def test_it_explains_a_stalled_helm_release_by_its_stalled_condition() -> None:
    # The conditions of helmrelease-podinfo-test-failed-stalled.kubectl-describe.txt.
    raw = {
        "metadata": {"name": "podinfo", "namespace": "podinfo", "generation": 1},
        "spec": {"chart": {"spec": {"chart": "podinfo", "version": "6.5.3"}}},
        "status": {
            "conditions": [
                condition(
                    "Stalled", "True", "RetriesExceeded", "Failed to install after 1 attempt(s)"
                ),
                condition("Ready", "False", "TestFailed", "Helm test failed for release podinfo"),
                condition("Released", "True", "InstallSucceeded", "Helm install succeeded"),
                condition("TestSuccess", "False", "TestFailed", "Helm test failed"),
            ],
            "lastAttemptedRevision": "6.5.3",
            "observedGeneration": 1,
        },
    }
    status = parse_flux_object("HelmRelease", raw)
    assert status is not None
    assert (status.ready, status.stalled, status.released) == ("False", True, True)
    assert (status.reason, status.message) == (
        "RetriesExceeded",
        "Failed to install after 1 attempt(s)",
    )
    assert status.chart == "podinfo@6.5.3"
    assert status.last_attempted_revision == "6.5.3"


def test_it_reads_a_pre_flux_2_kustomization_revision() -> None:
    # The revisions of kustomization-podinfo-artifactfailed.kubectl-describe.txt.
    revision = "master/67e2c98a60dc92283531412a9e604dd4bae005a9"
    raw = {
        "metadata": {"name": "podinfo", "namespace": "flux-system", "generation": 3},
        "spec": {"path": "./invalid"},
        "status": {
            "conditions": [
                condition("Reconciling", "True", "ProgressingWithRetry", "Fetching manifests"),
                condition("Ready", "False", "ArtifactFailed", "kustomization path not found"),
            ],
            "lastAppliedRevision": revision,
            "lastAttemptedRevision": revision,
            "observedGeneration": 2,
        },
    }
    status = parse_flux_object("Kustomization", raw)
    assert status is not None
    assert (status.ready, status.reconciling, status.reason) == ("False", True, "ArtifactFailed")
    assert (status.generation, status.observed_generation) == (3, 2)
    assert revision_sha(status.last_applied_revision) == "67e2c98a60dc92283531412a9e604dd4bae005a9"


def test_it_records_problems_in_a_malformed_flux_object() -> None:
    raw = {
        "metadata": {"name": "k", "generation": "three"},
        "spec": ["path"],
        "status": {
            "conditions": [{"type": "Ready", "status": "Maybe"}, {"reason": "x"}],
            "observedGeneration": 2.5,
            "lastAppliedRevision": {"sha": "abc"},
        },
    }
    status = parse_flux_object("Kustomization", raw)
    assert status is not None
    assert (status.ready, status.generation, status.observed_generation) == ("Unknown", None, None)
    assert status.last_applied_revision == ""
    assert set(status.problems) == {
        "spec is not a mapping: ['path']",
        "status.conditions[1] has no type",
        "condition Ready has status 'Maybe'",
        "status.lastAppliedRevision is not a string: {'sha': 'abc'}",
        "status.observedGeneration is not a number: 2.5",
        "metadata.generation is not a number: 'three'",
    }


def test_it_reads_another_kind_by_its_ready_condition() -> None:
    raw = {"metadata": {"name": "repo"}, "status": {"conditions": [condition("Ready", "True")]}}
    status = parse_flux_object("GitRepository", raw)
    assert status is not None
    assert (status.kind, status.ready) == ("GitRepository", "True")
    assert status.problems == ("kind GitRepository is read by its Ready condition only",)


@pytest.mark.parametrize(
    ("revision", "sha"),
    [
        (f"main@sha1:{SHA}", SHA),
        (f"refs/heads/main@sha1:{SHA.upper()}", SHA),
        (f"main/{SHA}", SHA),
        (f"feature/gpu/{SHA}", SHA),
        (f"sha1:{SHA}", SHA),
        (SHA, SHA),
        (f"v1.0.1@sha1:{SHA}", SHA),
        ("main@sha256:" + "ab" * 32, "ab" * 32),
        ("6.5.3", None),
        ("6.6.1+0cc9a8446c95", None),
        ("main@sha1:abc", None),
        (f"main@sha256:{SHA}", None),
        (f"main@md5:{SHA}", None),
        ("main@sha1:" + "g" * 40, None),
        ("", None),
    ],
)
def test_it_finds_the_sha_in_a_revision(revision: str, sha: str | None) -> None:
    assert revision_sha(revision) == sha
