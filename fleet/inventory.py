"""Kubernetes API objects, as the JSON the API returns, read into plain frozen data.

The status sync reads with ``_preload_content=False`` and hands the decoded JSON here. Real
objects are often partial (a node without GPU Feature Discovery labels, a HelmRelease the
controller has not reconciled yet) and a broken or fake server can send anything, so nothing
here raises on its input: each parser returns its value with ``problems`` (sentences for the
log and the admin pages), or ``None`` when the object has no name to file it under.

Where the names come from:

- GPU labels: NVIDIA GPU Feature Discovery and the MIG manager (NVIDIA/k8s-device-plugin
  ``docs/gpu-feature-discovery/README.md``, NVIDIA/mig-parted); HAMi resources and the node
  annotation from Project-HAMi/HAMi; topology labels as the portal's Kueue Topology uses them.
- Health conditions and XIDs: see the constants below.
- Flux: ``kustomize.toolkit.fluxcd.io/v1``, ``helm.toolkit.fluxcd.io/v2`` (and the legacy
  ``v2beta1`` status), KServe ``serving.kserve.io/v1beta1`` InferenceService.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from gitops.fleet import POOL_LABEL
from gitops.render.meta import QUEUE_NAME_LABEL

Health = Literal["healthy", "degraded", "unhealthy", "unknown"]
Sharing = Literal["mig", "hami", "dra", "time-slicing", "whole", ""]

GPU = "nvidia.com/gpu"
# HAMi's vGPU slots under the resourceName the fleet gives HAMi (gitops.render.resources).
VGPU = "nvidia.com/vgpu"
GPUMEM = "nvidia.com/gpumem"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# The resources GPU accounting counts: the NVIDIA device plugin and HAMi (``nvidia.com/*``),
# DRA extended resources named after a DeviceClass (``gpu.nvidia.com``...), HAMi's own.
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "gpu.nvidia.com", "hami.io/")

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_MACHINE = "nvidia.com/gpu.machine"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_DRIVER = "nvidia.com/cuda.driver-version.full"
# Older GFD releases only wrote the driver version in parts (510.73.08 on the T4 capture).
LABEL_DRIVER_PARTS = (
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
)
# The GPU Operator's per-node switches: no device plugin (a DRA node of the ClusterPolicy
# stack), or the DRA driver's kubelet plugin (the GPUCluster stack) (NVIDIA/gpu-operator
# v26.7.0 controllers/state_manager.go).
LABEL_DEPLOY_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
LABEL_DEPLOY_DRA_DRIVER = "nvidia.com/gpu.deploy.dra-driver"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_DISABLED_CONFIG = "all-disabled"
MIG_COUNT_LABEL = re.compile(r"nvidia\.com/mig-(?P<profile>.+)\.count")
LABEL_BLOCK = "network.topology.kubernetes.io/block"
LABEL_RACK = "network.topology.kubernetes.io/rack"
LABEL_HOSTNAME = "kubernetes.io/hostname"
# Cloud nodes carry the well-known instance-type label; bare metal only GFD's machine model.
INSTANCE_TYPE_LABELS = (
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    LABEL_MACHINE,
)
HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
# Older GFD wrote gpu.memory in bytes (16106127360 on a T4), current GFD in MiB (81559 on an
# H100). No GPU has a TiB of memory, so a larger number is bytes.
MIB = 1 << 20

# XIDs that mean drain or replace the GPU: AWS eks-node-monitoring-agent
# monitors/nvidia/dcgm/dcgm_policies.go ``WellKnownXidCodes``, after NVIDIA's XID catalogue
# (docs.nvidia.com/deploy/xid-errors).
FATAL_XIDS = frozenset(
    {46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158}
)
XID_DESCRIPTIONS = {
    13: "graphics engine exception (application error)",
    31: "GPU memory page fault (application error)",
    43: "GPU stopped processing (application error)",
    45: "preemptive cleanup after an earlier error (application error)",
    48: "double-bit ECC error",
    63: "row remapping recorded",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
}

# Node conditions that report GPU health, True when something is wrong. NVIDIA NVSentinel sets
# Gpu*Watch (DCGM health watches), SysLogs* (XID, SXID, fallen off the bus), NVSwitchFatalError
# and DCGMError (NVIDIA/NVSentinel docs/INTEGRATIONS.md). AKS's Node Problem Detector sets
# GPUMissing, XIDErrors, NVLinkStatusInactive and IBLinkFlapping (learn.microsoft.com, "Node
# Problem Detector in AKS nodes"); GPUXIDErrors and NvidiaXIDError are the names other NPD
# GPU plugins give the XID check.
GPU_CONDITION_PREFIXES = ("Gpu", "SysLogs")
GPU_CONDITION_TYPES = frozenset(
    {
        "NVSwitchFatalError",
        "DCGMError",
        "GPUMissing",
        "XIDErrors",
        "GPUXIDErrors",
        "NvidiaXIDError",
        "NVLinkStatusInactive",
        "IBLinkFlapping",
    }
)
# The GPU is gone or the NVLink fabric is down, whatever the message says.
FATAL_CONDITION_TYPES = frozenset({"SysLogsGPUFallenOff", "NVSwitchFatalError", "GPUMissing"})
# AWS's node monitoring agent sets this False on a fatal XID (reason NvidiaXID<N>Error): the
# one GPU condition where False, not True, is the problem.
ACCELERATOR_READY = "AcceleratedHardwareReady"
# The kubelet's resource pressure conditions and the network plugin's: the node still runs
# pods, but the scheduler avoids it or they may be evicted.
PRESSURE_CONDITION_TYPES = frozenset(
    {"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}
)
HEALTH_RANK: dict[Health, int] = {"healthy": 0, "degraded": 1, "unknown": 2, "unhealthy": 3}
# "XID 79", "NvidiaXID79Error", "xid=48" and the kernel's "Xid (PCI:0000:3b:00): 79".
XID_PATTERN = re.compile(r"xid(?:\s*\([^)]*\))?[\s:=#_-]*(\d{1,3})(?!\d)", re.IGNORECASE)
FALLEN_OFF_PATTERN = re.compile(r"fallen off the bus", re.IGNORECASE)

KUSTOMIZATION = "Kustomization"
HELM_RELEASE = "HelmRelease"
INFERENCE_SERVICE = "InferenceService"
FLUX_KINDS = (KUSTOMIZATION, HELM_RELEASE, INFERENCE_SERVICE)
# Revisions: Flux 2 ``<ref>@sha1:<hex>``, before Flux 2.0 ``<ref>/<hex>``.
HEX_LENGTHS = {"sha1": (40,), "sha256": (64,), "": (40, 64)}
HEX = re.compile(r"[0-9a-f]+")

QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?")
QUANTITY_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A node as the fleet pages show it: its GPUs, where it sits, and whether it is healthy.

    ``gpu_count`` counts physical GPUs; ``gpu_capacity``/``gpu_allocatable`` are what the
    device plugins advertise (vGPU slots, time-slicing replicas or MIG devices).
    """

    name: str
    product: str = ""
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    gpu_family: str = ""
    driver_version: str = ""
    mig_capable: bool = False
    mig_strategy: str = ""
    mig_config: str = ""
    mig_config_state: str = ""
    mig_profiles: tuple[tuple[str, int], ...] = ()
    clique: str = ""
    block: str = ""
    rack: str = ""
    hostname: str = ""
    pool: str = ""
    instance_type: str = ""
    sharing: Sharing = ""
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    gpu_capacity: dict[str, int] = field(default_factory=dict)
    gpu_allocatable: dict[str, int] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()
    unschedulable: bool = False
    conditions: tuple[Condition, ...] = ()
    ready: bool | None = None
    health: Health = "unknown"
    health_reasons: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodInfo:
    """A pod and the GPUs it holds: ``gpu_requests`` is what the scheduler counts for it."""

    namespace: str
    name: str
    uid: str = ""
    node: str = ""
    phase: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    gpu_requests: dict[str, int] = field(default_factory=dict)
    queue: str = ""
    containers: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class FluxStatus:
    """The reconcile state of a Kustomization, HelmRelease or InferenceService.

    ``reason``/``message`` explain ``ready``: the Ready condition's, the Stalled condition's
    when the controller gave up, and for an InferenceService that is not ready the first
    condition that is False (Ready itself only says "not ready").
    """

    kind: str
    namespace: str
    name: str
    ready: Literal["True", "False", "Unknown"] = "Unknown"
    reconciling: bool = False
    stalled: bool = False
    released: bool | None = None
    reason: str = ""
    message: str = ""
    last_applied_revision: str = ""
    last_attempted_revision: str = ""
    observed_generation: int | None = None
    generation: int | None = None
    suspended: bool = False
    url: str = ""
    # An InferenceService's address inside the cluster (status.address.url), as KServe reports it.
    address: str = ""
    path: str = ""
    chart: str = ""
    problems: tuple[str, ...] = ()


def parse_quantity(value: object) -> int | None:
    """A Kubernetes quantity as a whole number, or ``None`` when it is not one.

    Takes integers and decimal strings with the decimal (``k``, ``M``, ``G``... and ``m``) or
    binary (``Ki``, ``Mi``, ``Gi``...) suffixes; exponents and fractions that do not come to
    a whole number are ``None``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if not isinstance(value, str):
        return None
    match = QUANTITY.fullmatch(value.strip())
    if match is None:
        return None
    amount = Fraction(match[1]) * QUANTITY_SUFFIXES[match[2] or ""]
    return int(amount) if amount.denominator == 1 else None


def revision_sha(revision: str) -> str | None:
    """The commit sha in a Flux revision, or ``None`` when it names none (a chart version).

    ``main@sha1:<hex>`` (Flux 2), ``main/<hex>`` (before Flux 2.0), ``sha1:<hex>`` and a bare
    sha; 40 hex digits for sha1, 64 for sha256.
    """
    if not isinstance(revision, str):
        return None
    text = revision.strip().lower()
    if "@" in text:
        text = text.rsplit("@", 1)[1]
    elif "/" in text:
        text = text.rsplit("/", 1)[1]
    algorithm, _, digest = text.rpartition(":")
    lengths = HEX_LENGTHS.get(algorithm)
    if lengths is None or len(digest) not in lengths or not HEX.fullmatch(digest):
        return None
    return digest


def xid_description(xid: int) -> str:
    """A few words on a well-known XID, or ``""``."""
    return XID_DESCRIPTIONS.get(xid, "")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


def parse_node(obj: object, *, pool_label: str = POOL_LABEL) -> NodeInfo | None:
    """A Node as the API returns it, or ``None`` when it has no name."""
    named = _named(obj)
    if named is None:
        return None
    node, meta, name = named
    problems: list[str] = []
    labels = _string_map(meta.get("labels"), "metadata.labels", problems)
    annotations = _string_map(meta.get("annotations"), "metadata.annotations", problems)
    spec = _mapping(node.get("spec"), "spec", problems)
    status = _mapping(node.get("status"), "status", problems)
    capacity = _string_map(status.get("capacity"), "status.capacity", problems)
    allocatable = _string_map(status.get("allocatable"), "status.allocatable", problems)
    gpu_capacity = _gpu_quantities(capacity, "status.capacity", problems)
    gpu_allocatable = _gpu_quantities(allocatable, "status.allocatable", problems)
    conditions = _conditions(status.get("conditions"), "status.conditions", problems)

    gpu_count = _label_int(labels, LABEL_COUNT, problems)
    replicas = _label_int(labels, LABEL_REPLICAS, problems) or 0
    advertised = {**gpu_capacity, **gpu_allocatable}
    sharing = _sharing(
        labels,
        annotations,
        advertised,
        replicas,
        has_gpu=bool(gpu_count) or advertised.get(GPU, 0) > 0 or advertised.get(VGPU, 0) > 0,
    )
    if gpu_count is None:
        gpu_count = _fallback_count(sharing, annotations, advertised)
    memory = _label_int(labels, LABEL_MEMORY, problems) or 0
    if memory >= MIB:
        memory //= MIB
    ready_condition = _first(conditions, "Ready")
    ready = None
    if ready_condition is not None:
        ready = {"True": True, "False": False}.get(ready_condition.status)
        if ready_condition.status not in ("True", "False", "Unknown"):
            problems.append(f"condition Ready has status {ready_condition.status!r}")
    health, reasons = _judge(conditions, ready_condition)
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        problems.append(f"spec.unschedulable is not a boolean: {_brief(unschedulable)}")
    return NodeInfo(
        name=name,
        product=labels.get(LABEL_PRODUCT, ""),
        gpu_count=gpu_count,
        gpu_memory_mib=memory,
        gpu_family=labels.get(LABEL_FAMILY, ""),
        driver_version=_driver_version(labels),
        mig_capable=labels.get(LABEL_MIG_CAPABLE) == "true",
        mig_strategy=labels.get(LABEL_MIG_STRATEGY, ""),
        mig_config=labels.get(LABEL_MIG_CONFIG, ""),
        mig_config_state=labels.get(LABEL_MIG_CONFIG_STATE, ""),
        mig_profiles=_mig_profiles(labels, problems),
        clique=labels.get(LABEL_CLIQUE, ""),
        block=labels.get(LABEL_BLOCK, ""),
        rack=labels.get(LABEL_RACK, ""),
        hostname=labels.get(LABEL_HOSTNAME) or name,
        pool=labels.get(pool_label, ""),
        instance_type=next((labels[k] for k in INSTANCE_TYPE_LABELS if labels.get(k)), ""),
        sharing=sharing,
        capacity=capacity,
        allocatable=allocatable,
        gpu_capacity=gpu_capacity,
        gpu_allocatable=gpu_allocatable,
        taints=_taints(spec.get("taints"), problems),
        unschedulable=unschedulable is True,
        conditions=conditions,
        ready=ready,
        health=health,
        health_reasons=reasons,
        problems=tuple(problems),
        labels=labels,
        annotations=annotations,
    )


def parse_pod(obj: object) -> PodInfo | None:
    """A Pod as the API returns it, or ``None`` when it has no name."""
    named = _named(obj)
    if named is None:
        return None
    pod, meta, name = named
    problems: list[str] = []
    labels = _string_map(meta.get("labels"), "metadata.labels", problems)
    spec = _mapping(pod.get("spec"), "spec", problems)
    status = _mapping(pod.get("status"), "status", problems)
    owner_kind, owner_name = _controller(meta.get("ownerReferences"), problems)
    containers = _containers(spec.get("containers"), "spec.containers", problems)
    init_containers = _containers(spec.get("initContainers"), "spec.initContainers", problems)
    return PodInfo(
        namespace=_text(meta.get("namespace"), "metadata.namespace", problems),
        name=name,
        uid=_text(meta.get("uid"), "metadata.uid", problems),
        node=_text(spec.get("nodeName"), "spec.nodeName", problems),
        phase=_text(status.get("phase"), "status.phase", problems),
        owner_kind=owner_kind,
        owner_name=owner_name,
        labels=labels,
        gpu_requests=_pod_requests(init_containers, containers),
        queue=labels.get(QUEUE_NAME_LABEL, ""),
        containers=tuple(c.name for c in containers),
        problems=tuple(problems),
    )


def parse_flux_object(kind: str, obj: object) -> FluxStatus | None:
    """The status of a Kustomization, HelmRelease or InferenceService (``kind``), or ``None``
    when the object has no name. Another kind is read by its Ready condition alone."""
    named = _named(obj)
    if named is None:
        return None
    flux, meta, name = named
    problems: list[str] = []
    if kind not in FLUX_KINDS:
        problems.append(f"kind {kind} is read by its Ready condition only")
    spec = _mapping(flux.get("spec"), "spec", problems)
    status = _mapping(flux.get("status"), "status", problems)
    conditions = _conditions(status.get("conditions"), "status.conditions", problems)
    ready_condition = _first(conditions, "Ready")
    stalled_condition = _first(conditions, "Stalled")
    ready: Literal["True", "False", "Unknown"] = "Unknown"
    if ready_condition is not None:
        if ready_condition.status in ("True", "False"):
            ready = "True" if ready_condition.status == "True" else "False"
        elif ready_condition.status != "Unknown":
            problems.append(f"condition Ready has status {ready_condition.status!r}")
    stalled = stalled_condition is not None and stalled_condition.status == "True"
    explained_by = stalled_condition if stalled else ready_condition
    if kind == INFERENCE_SERVICE and ready != "True":
        explained_by = next((c for c in conditions if c.status == "False"), ready_condition)
    released_condition = _first(conditions, "Released")
    released = None
    if kind == HELM_RELEASE and released_condition is not None:
        released = {"True": True, "False": False}.get(released_condition.status)
    reconciling_condition = _first(conditions, "Reconciling")
    last_applied = _text(status.get("lastAppliedRevision"), "status.lastAppliedRevision", problems)
    if kind == HELM_RELEASE and not last_applied:
        last_applied = _deployed_chart_version(status.get("history"), problems)
    return FluxStatus(
        kind=kind,
        namespace=_text(meta.get("namespace"), "metadata.namespace", problems),
        name=name,
        ready=ready,
        reconciling=reconciling_condition is not None and reconciling_condition.status == "True",
        stalled=stalled,
        released=released,
        reason=explained_by.reason if explained_by else "",
        message=explained_by.message if explained_by else "",
        last_applied_revision=last_applied,
        last_attempted_revision=_text(
            status.get("lastAttemptedRevision"), "status.lastAttemptedRevision", problems
        ),
        observed_generation=_optional_int(
            status.get("observedGeneration"), "status.observedGeneration", problems
        ),
        generation=_optional_int(meta.get("generation"), "metadata.generation", problems),
        suspended=spec.get("suspend") is True,
        url=_text(status.get("url"), "status.url", problems) if kind == INFERENCE_SERVICE else "",
        address=_text(
            _mapping(status.get("address"), "status.address", problems).get("url"),
            "status.address.url",
            problems,
        )
        if kind == INFERENCE_SERVICE
        else "",
        path=_text(spec.get("path"), "spec.path", problems) if kind == KUSTOMIZATION else "",
        chart=_chart(spec, problems) if kind == HELM_RELEASE else "",
        problems=tuple(problems),
    )


# Nodes


def _label_int(labels: Mapping[str, str], key: str, problems: list[str]) -> int | None:
    value = labels.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        problems.append(f"label {key} is not a number: {value!r}")
        return None


def _driver_version(labels: Mapping[str, str]) -> str:
    if labels.get(LABEL_DRIVER):
        return labels[LABEL_DRIVER]
    parts = [labels.get(key, "") for key in LABEL_DRIVER_PARTS]
    return ".".join(parts) if all(parts) else ""


def _mig_profiles(labels: Mapping[str, str], problems: list[str]) -> tuple[tuple[str, int], ...]:
    profiles = []
    for key in labels:
        match = MIG_COUNT_LABEL.fullmatch(key)
        if match is None:
            continue
        count = _label_int(labels, key, problems)
        if count is not None:
            profiles.append((match["profile"], count))
    return tuple(sorted(profiles))


def _sharing(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    advertised: Mapping[str, int],
    replicas: int,
    *,
    has_gpu: bool,
) -> Sharing:
    """How the node's GPUs are handed out. A resource the plugin no longer advertises stays in
    the node status at 0, so only positive amounts count."""
    mig_resources = any(
        name.startswith(MIG_RESOURCE_PREFIX) and amount > 0 for name, amount in advertised.items()
    )
    mig_layout = labels.get(LABEL_MIG_STRATEGY) in ("single", "mixed") and labels.get(
        LABEL_MIG_CONFIG, ""
    ) not in ("", MIG_DISABLED_CONFIG)
    if mig_resources or mig_layout:
        return "mig"
    hami_resources = (advertised.get(name, 0) > 0 for name in (VGPU, GPUMEM))
    if any(hami_resources) or HAMI_REGISTER_ANNOTATION in annotations:
        return "hami"
    if has_gpu and (
        labels.get(LABEL_DEPLOY_DRA_DRIVER) == "true"
        or labels.get(LABEL_DEPLOY_DEVICE_PLUGIN) == "false"
    ):
        # No device plugin on a GPU node: its GPUs are the DRA driver's to hand out.
        return "dra"
    if replicas > 1:
        return "time-slicing"
    return "whole" if has_gpu else ""


def _fallback_count(
    sharing: Sharing, annotations: Mapping[str, str], advertised: Mapping[str, int]
) -> int:
    """Physical GPUs of a node without GFD's count label: HAMi's registered devices, or the
    device plugin's whole GPUs. Slots of shared GPUs say nothing about the hardware."""
    if sharing == "hami":
        register = annotations.get(HAMI_REGISTER_ANNOTATION, "")
        # "<uuid>,<split>,<MiB>,<cores>,<type>,<numa>,<healthy>:" per device.
        return sum(1 for device in register.split(":") if device.strip())
    if sharing == "whole":
        return advertised.get(GPU, 0)
    return 0


def _gpu_quantities(resources: Mapping[str, str], what: str, problems: list[str]) -> dict[str, int]:
    quantities = {}
    for name, value in resources.items():
        if not is_gpu_resource(name):
            continue
        amount = parse_quantity(value)
        if amount is None:
            problems.append(f"{what} {name} is not a quantity: {value!r}")
        else:
            quantities[name] = amount
    return quantities


def _taints(value: object, problems: list[str]) -> tuple[tuple[str, str, str], ...]:
    taints = []
    for index, item in enumerate(_sequence(value, "spec.taints", problems)):
        what = f"spec.taints[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            problems.append(f"{what} has no key: {_brief(item)}")
            continue
        taints.append(
            (
                item["key"],
                _text(item.get("value"), f"{what}.value", problems),
                _text(item.get("effect"), f"{what}.effect", problems),
            )
        )
    return tuple(taints)


def _judge(
    conditions: tuple[Condition, ...], ready: Condition | None
) -> tuple[Health, tuple[str, ...]]:
    """The node's health and the sentences that explain it; conditions of other types are
    shown as they are, not judged."""
    verdicts: list[tuple[Health, str]] = []
    if ready is None:
        verdicts.append(("unknown", "no Ready condition reported"))
    elif ready.status in ("False", "Unknown"):
        verdicts.append(("unhealthy", f"NotReady: {_detail(ready)}"))
    elif ready.status != "True":
        verdicts.append(("unknown", f"Ready has status {ready.status!r}"))
    for condition in conditions:
        if condition.type == ACCELERATOR_READY and condition.status == "False":
            verdicts.append(("unhealthy", _gpu_sentence(condition)[1]))
        elif _is_gpu_condition(condition.type) and condition.status == "True":
            fatal, sentence = _gpu_sentence(condition)
            verdicts.append(("unhealthy" if fatal else "degraded", sentence))
        elif condition.type in PRESSURE_CONDITION_TYPES and condition.status == "True":
            verdicts.append(("degraded", f"{condition.type}: {_detail(condition)}"))
    if not verdicts:
        return "healthy", ()
    worst = max((health for health, _ in verdicts), key=HEALTH_RANK.__getitem__)
    return worst, tuple(sentence for _, sentence in verdicts)


def _is_gpu_condition(condition_type: str) -> bool:
    return condition_type in GPU_CONDITION_TYPES or condition_type.startswith(
        GPU_CONDITION_PREFIXES
    )


def _gpu_sentence(condition: Condition) -> tuple[bool, str]:
    """(fatal?, the sentence) for a GPU condition reporting a problem."""
    text = f"{condition.reason} {condition.message}"
    xids = list(dict.fromkeys(int(number) for number in XID_PATTERN.findall(text)))
    fatal = (
        condition.type in FATAL_CONDITION_TYPES
        or condition.type == ACCELERATOR_READY
        or bool(FATAL_XIDS.intersection(xids))
        or FALLEN_OFF_PATTERN.search(text) is not None
    )
    notes = [f"XID {xid}: {d}" if (d := xid_description(xid)) else f"XID {xid}" for xid in xids]
    suffix = f" ({'; '.join(notes)})" if notes else ""
    return fatal, f"{condition.type}: {_detail(condition)}{suffix}"


def _detail(condition: Condition) -> str:
    return condition.message or condition.reason or f"status {condition.status or 'missing'}"


# Pods


@dataclass(frozen=True)
class _Container:
    name: str
    gpus: dict[str, int]
    sidecar: bool


def _containers(value: object, what: str, problems: list[str]) -> list[_Container]:
    containers = []
    for index, item in enumerate(_sequence(value, what, problems)):
        where = f"{what}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where} is not a mapping: {_brief(item)}")
            continue
        resources = _mapping(item.get("resources"), f"{where}.resources", problems)
        requests = _mapping(resources.get("requests"), f"{where}.resources.requests", problems)
        limits = _mapping(resources.get("limits"), f"{where}.resources.limits", problems)
        gpus = {}
        # An extended resource's request defaults to its limit (and may not differ from it).
        for resource, value in {**limits, **requests}.items():
            if not isinstance(resource, str) or not is_gpu_resource(resource):
                continue
            amount = parse_quantity(value)
            if amount is None:
                problems.append(f"{where} {resource} is not a quantity: {_brief(value)}")
            else:
                gpus[resource] = amount
        containers.append(
            _Container(
                name=_text(item.get("name"), f"{where}.name", problems),
                gpus=gpus,
                sidecar=item.get("restartPolicy") == "Always",
            )
        )
    return containers


def _pod_requests(
    init_containers: Iterable[_Container], containers: Iterable[_Container]
) -> dict[str, int]:
    """What the scheduler reserves for the pod: the larger of the busiest init step and the
    steady state. Init containers run one at a time, each beside the sidecars (init
    containers with ``restartPolicy: Always``) started before it; sidecars keep running next
    to the app containers."""
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in init_containers:
        if container.sidecar:
            _add(sidecars, container.gpus)
            step = dict(sidecars)
        else:
            step = dict(sidecars)
            _add(step, container.gpus)
        for resource, amount in step.items():
            init_peak[resource] = max(init_peak.get(resource, 0), amount)
    steady = dict(sidecars)
    for container in containers:
        _add(steady, container.gpus)
    total = {
        resource: max(steady.get(resource, 0), init_peak.get(resource, 0))
        for resource in sorted({*steady, *init_peak})
    }
    return {resource: amount for resource, amount in total.items() if amount > 0}


def _add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, 0) + amount


def _controller(value: object, problems: list[str]) -> tuple[str, str]:
    for index, item in enumerate(_sequence(value, "metadata.ownerReferences", problems)):
        if isinstance(item, Mapping) and item.get("controller") is True:
            what = f"metadata.ownerReferences[{index}]"
            return (
                _text(item.get("kind"), f"{what}.kind", problems),
                _text(item.get("name"), f"{what}.name", problems),
            )
    return "", ""


# Flux and KServe


def _chart(spec: Mapping[str, Any], problems: list[str]) -> str:
    """``<chart>@<version>`` from ``spec.chart.spec``, or ``<kind>/<name>`` of ``spec.chartRef``
    (a HelmChart or OCIRepository the release points at)."""
    chart_ref = _mapping(spec.get("chartRef"), "spec.chartRef", problems)
    if chart_ref:
        kind = _text(chart_ref.get("kind"), "spec.chartRef.kind", problems)
        return f"{kind}/{_text(chart_ref.get('name'), 'spec.chartRef.name', problems)}"
    chart_spec = _mapping(spec.get("chart"), "spec.chart", problems)
    template = _mapping(chart_spec.get("spec"), "spec.chart.spec", problems)
    chart = _text(template.get("chart"), "spec.chart.spec.chart", problems)
    version = _text(template.get("version"), "spec.chart.spec.version", problems)
    return f"{chart}@{version}" if chart and version else chart


def _deployed_chart_version(value: object, problems: list[str]) -> str:
    """The chart version of the newest deployed release in ``status.history``: helm-controller
    v2 dropped ``lastAppliedRevision`` and keeps the releases there, newest first."""
    for item in _sequence(value, "status.history", problems):
        if isinstance(item, Mapping) and item.get("status") == "deployed":
            return _text(item.get("chartVersion"), "status.history[].chartVersion", problems)
    return ""


# Shapes


def _named(obj: object) -> tuple[Mapping[str, Any], Mapping[str, Any], str] | None:
    """(object, metadata, name), or None when there is no name to file the object under."""
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    return obj, meta, name


def _conditions(value: object, what: str, problems: list[str]) -> tuple[Condition, ...]:
    conditions = []
    for index, item in enumerate(_sequence(value, what, problems)):
        where = f"{what}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where} is not a mapping: {_brief(item)}")
            continue
        condition_type = item.get("type")
        if not isinstance(condition_type, str) or not condition_type:
            problems.append(f"{where} has no type")
            continue
        conditions.append(
            Condition(
                type=condition_type,
                status=_text(item.get("status"), f"{where}.status", problems),
                reason=_text(item.get("reason"), f"{where}.reason", problems),
                message=_text(item.get("message"), f"{where}.message", problems),
                last_transition=_text(
                    item.get("lastTransitionTime"), f"{where}.lastTransitionTime", problems
                ),
            )
        )
    return tuple(conditions)


def _first(conditions: Iterable[Condition], condition_type: str) -> Condition | None:
    return next((c for c in conditions if c.type == condition_type), None)


def _mapping(value: object, what: str, problems: list[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    problems.append(f"{what} is not a mapping: {_brief(value)}")
    return {}


def _sequence(value: object, what: str, problems: list[str]) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    problems.append(f"{what} is not a list: {_brief(value)}")
    return []


def _string_map(value: object, what: str, problems: list[str]) -> dict[str, str]:
    """String values as given; numbers (as YAML writes unquoted ones) as text; others left out."""
    strings = {}
    for key, item in _mapping(value, what, problems).items():
        if isinstance(key, str) and isinstance(item, str):
            strings[key] = item
        elif isinstance(key, str) and isinstance(item, int | float) and not isinstance(item, bool):
            strings[key] = str(item)
        else:
            problems.append(f"{what} {key!r} is not a string: {_brief(item)}")
    return strings


def _text(value: object, what: str, problems: list[str]) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        # YAML reads unquoted True/1 as such; the API itself always sends strings.
        return str(value)
    problems.append(f"{what} is not a string: {_brief(value)}")
    return ""


def _optional_int(value: object, what: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    problems.append(f"{what} is not a number: {_brief(value)}")
    return None


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
