"""The simulated hardware and the controllers that act on it: nodes with GPUs (whole, MIG or
HAMi-shared), pods and their placement, evictions, and faults.

The store holds the API objects; this module keeps what the API objects are derived from
(every GPU, its health and who uses it) and rewrites the derived parts of a Node (allocatable,
conditions, taints, the HAMi annotation) when that changes, leaving the rest (labels or
``spec.unschedulable`` patched by a client) alone.

Placement is a small kube-scheduler: the filters are ``spec.unschedulable``, the node
selector, taints against tolerations, the GPU devices and the SR-IOV VFs a node group
advertises (``multus.py``, which also holds a bound pod in ``ContainerCreating`` while Multus
cannot attach the networks it names); among the nodes that pass, the one
already using the most GPUs wins (bin packing, what a GPU fleet wants), then the name.
Device plugin semantics (each node group is served by one of them, see
``gitops.specs.Flavor``):

- ``nvidia.com/gpu`` asks whole GPUs of a ``whole`` node, the only kind that advertises it;
- ``nvidia.com/vgpu`` asks HAMi vGPUs: that many distinct GPUs of a ``hami`` node, each with
  a free slot, the memory (``nvidia.com/gpumem`` MiB, the whole card when unset) and the cores
  (``nvidia.com/gpucores`` percent). HAMi's webhook adds one vGPU to a container that sets only
  memory or cores (HAMi v2.10.0 pkg/device/nvidia/device.go ``mutateContainerResource``,
  ``defaultGPUNum: 1``) and reads no memory as 100% of the card (``GenerateResourceRequests``
  with the chart's ``defaultMemory: 0``). A HAMi node advertises ``hami_split`` slots per GPU
  as ``nvidia.com/vgpu`` and nothing for memory or cores, which HAMi's scheduler extender
  reads from the ``hami.io/node-nvidia-register`` annotation (see ``_gpu_resources``);
- ``nvidia.com/mig-<profile>`` asks MIG instances of a ``mig`` node;
- a DRA ``resourceClaims`` entry asks the claim template's device count of whole GPUs of a
  ``dra`` node, whose GPUs no device plugin advertises (MIG devices through DRA are not
  simulated).

Pods that asked for GPUs tolerate the ``nvidia.com/gpu`` taint, as the tolerations of a Kueue
ResourceFlavor added on admission would make them, and every pod gets the default
``not-ready``/``unreachable`` NoExecute tolerations of the DefaultTolerationSeconds admission
plugin. A pod deleted or evicted that has a controller owner (Job, ReplicaSet) comes back under
a new name after ``recreate_delay`` on another node, or stays Pending when none fits; Pending
pods are retried on every tick.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from simulator import disruption, multus
from simulator.admission import Rejected, admit_object, admit_pod
from simulator.config import (
    DEVICE_PLUGIN_LABEL,
    POOL_LABEL,
    QUEUE_LABEL,
    NodeGroup,
    SeedWorkload,
    SimConfig,
)
from simulator.dcgm import GpuSample
from simulator.hami import HamiWebhook
from simulator.jobs import Batch
from simulator.kserve import StorageInitializerWebhook
from simulator.kueue import Kueue, quantity_string
from simulator.kueue import gated as kueue_gated
from simulator.opencost import NodeCapacity, Placement, pod_requests
from simulator.pods_ready import PODS_READY
from simulator.store import (
    CLAIM_TEMPLATES,
    EVENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    WORKLOADS,
    JsonObject,
    Resource,
    Store,
    as_dict,
    as_list,
    key_of,
    timestamp,
)
from simulator.workloads import (
    MAIN,
    PRIORITY_CLASS_LABEL,
    QUOTA_RESERVED,
    condition,
    finisher,
    holds_quota,
    is_evicted,
    is_finished,
    new_workload,
    owner_of,
    per_pod_requests,
    pod_set,
    reserve_quota,
    set_condition,
    workload_name,
)

logger = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
VGPU = "nvidia.com/vgpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENT = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
MIG_PREFIX = "nvidia.com/mig-"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NOT_READY = "node.kubernetes.io/not-ready"
HAMI_REGISTER = "hami.io/node-nvidia-register"
HAMI_HANDSHAKE = "hami.io/node-handshake"
HAMI_SCHEDULER = "hami-scheduler"
# Condition types as NVSentinel's syslog health monitor sets them on the node.
XID_FALLEN_OFF = 79
FALLEN_OFF_CONDITION = "SysLogsGPUFallenOff"
XID_CONDITION = "SysLogsXIDError"
# XIDs the NVIDIA device plugin treats as application errors: the GPU stays healthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_DESCRIPTIONS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
# Bus ids of the eight GPUs of an HGX H100/H200 baseboard.
PCI_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)
# GFD's gpu.family and compute capability for products it is likely to meet.
_ARCHITECTURES = {
    "H100": ("hopper", 9, 0),
    "H200": ("hopper", 9, 0),
    "H800": ("hopper", 9, 0),
    "GH200": ("hopper", 9, 0),
    "B200": ("blackwell", 10, 0),
    "GB200": ("blackwell", 10, 0),
    "A100": ("ampere", 8, 0),
    "A30": ("ampere", 8, 0),
    "L40S": ("ada-lovelace", 8, 9),
    "L4": ("ada-lovelace", 8, 9),
    "T4": ("turing", 7, 5),
    "V100": ("volta", 7, 0),
}
_MIG_PROFILE = re.compile(r"([1-7])g\.(\d+)gb")
# First GPU instance id nvidia-smi hands out per instance size (slices) on Hopper.
_FIRST_GI_ID = {7: 0, 4: 1, 3: 1, 2: 3, 1: 7}
_MULTIPROCESSORS = {1: 16, 2: 32, 3: 60, 4: 64, 7: 132}
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what generateName suffixes are made of
_UUIDS = uuid.UUID("6f1d1c3e-5a53-4d0c-9a59-2c7a3f1e9b10")  # namespace for derived UUIDs

PodKey = tuple[str, str]


class NotFound(LookupError):
    """No such node, GPU or pod."""


class AlreadyExists(Exception):
    """An object of that name exists already (HTTP 409)."""


def running_status(
    key: tuple[str, str],
    containers: list[JsonObject],
    node_ip: str,
    pod_ip: str,
    started: str,
    now: float,
) -> JsonObject:
    """The status the kubelet writes for a pod whose containers all started."""
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
        for kind in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": node_ip,
        "hostIPs": [{"ip": node_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": str(c.get("name", "")),
                "image": str(c.get("image", "")),
                "imageID": "",
                "containerID": "containerd://"
                + derived_uuid(*key, c.get("name")).replace("-", "")
                + derived_uuid(now).replace("-", ""),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
                "lastState": {},
            }
            for c in containers
        ],
    }


def derived_uuid(*parts: object) -> str:
    return str(uuid.uuid5(_UUIDS, "/".join(str(part) for part in parts)))


def mig_slices(profile: str) -> int:
    match = _MIG_PROFILE.match(profile)
    return int(match.group(1)) if match else 1


def mig_memory_mib(profile: str) -> int:
    """The MIG memory GFD labels; ``<n>gb`` less the 256 MiB the driver keeps (nvidia-smi
    shows 9984 MiB for an H100 1g.10gb; larger profiles come out within 1%)."""
    match = _MIG_PROFILE.match(profile)
    return int(match.group(2)) * 1024 - 256 if match else 0


def quantity(value: object) -> int:
    """An integer resource quantity (``"8"``, ``8``); anything else counts as 0."""
    try:
        return int(str(value))
    except ValueError:
        return 0


# --- hardware --------------------------------------------------------------------------------


@dataclass
class MigDevice:
    profile: str
    gi_id: int
    uuid: str
    pod: PodKey | None = None
    container: str = ""


@dataclass
class Slot:
    """A pod's use of a GPU: the whole card, or a HAMi share of it."""

    pod: PodKey
    container: str
    memory_mib: int
    cores: int


@dataclass
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str
    memory_mib: int
    mig: list[MigDevice] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    xid: int = 0
    healthy: bool = True
    # The ``idle`` fault: what runs on the GPU holds it but does no work (GR_ENGINE_ACTIVE ~0).
    idle: bool = False


@dataclass
class SimNode:
    name: str
    group: NodeGroup
    block: str
    rack: str
    clique: str
    internal_ip: str
    gpus: list[Gpu]
    ready: bool = True
    # Conditions a node agent sets (NVSentinel's Gpu*Watch from DCGM health watches, Node
    # Problem Detector's GPU checks): type -> (status, reason, message).
    agent_conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def busy_gpus(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.slots or any(d.pod for d in gpu.mig))


@dataclass(frozen=True)
class GpuRequest:
    """What a pod asks of the GPU device plugins, summed over its containers."""

    container: str = ""
    gpus: int = 0
    vgpus: int = 0
    memory_mib: int = 0
    memory_percent: int = 0
    cores: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    dra_devices: int = 0

    @property
    def hami(self) -> bool:
        return self.vgpus > 0

    @property
    def wants_gpu(self) -> bool:
        return bool(self.gpus or self.vgpus or self.mig or self.dra_devices)

    def shortfall(self) -> str:
        """The scheduler's reason when no node has the devices."""
        if self.mig:
            return f"Insufficient {MIG_PREFIX}{self.mig[0][0]}"
        if self.hami:
            return f"Insufficient {VGPU}"
        if self.dra_devices and not self.gpus:
            return "cannot allocate all claims"
        return f"Insufficient {GPU}"


@dataclass(frozen=True)
class _Recreation:
    due: float
    template: JsonObject
    base: str
    exclude: str
    # Whether Kueue queues the replacement: a pod that had a Workload is replaced by a pod
    # with a new one; the seed's pods, admitted before the simulator started, are not.
    queue: bool = True


def pod_request(pod: Mapping[str, Any], claim_devices: Callable[[str, str], int]) -> GpuRequest:
    """The GPU request of a pod (limits, else requests, of every container)."""
    spec = as_dict(pod.get("spec"))
    totals: Counter[str] = Counter()
    gpu_container = ""
    for container in as_list(spec.get("containers")):
        resources = as_dict(as_dict(container).get("resources"))
        wanted = as_dict(resources.get("limits")) or as_dict(resources.get("requests"))
        for name, value in wanted.items():
            if str(name).startswith("nvidia.com/"):
                totals[str(name)] += quantity(value)
                gpu_container = gpu_container or str(as_dict(container).get("name", ""))
        if as_list(resources.get("claims")):
            gpu_container = gpu_container or str(as_dict(container).get("name", ""))
    namespace = str(as_dict(pod.get("metadata")).get("namespace", ""))
    dra = 0
    for claim in as_list(spec.get("resourceClaims")):
        template = as_dict(claim).get("resourceClaimTemplateName")
        dra += claim_devices(namespace, template) if isinstance(template, str) else 1
    # HAMi's webhook gives a container that sets only memory or cores one vGPU.
    hami_only = any(totals[name] for name in (GPUMEM, GPUMEM_PERCENT, GPUCORES))
    return GpuRequest(
        container=gpu_container,
        gpus=totals[GPU],
        vgpus=totals[VGPU] or (1 if hami_only else 0),
        memory_mib=totals[GPUMEM],
        memory_percent=totals[GPUMEM_PERCENT],
        cores=totals[GPUCORES],
        mig=tuple(
            (name.removeprefix(MIG_PREFIX), count)
            for name, count in sorted(totals.items())
            if name.startswith(MIG_PREFIX) and count > 0
        ),
        dra_devices=dra,
    )


# The workload controllers that replace a pod they own (a tenant cluster's synced pods name
# the chart's Service as their controller owner, which replaces nothing).
POD_CONTROLLERS = frozenset({"ReplicaSet", "Job", "StatefulSet", "DaemonSet"})


def controller_of(pod: Mapping[str, Any]) -> JsonObject | None:
    """The pod's controller ownerReference (a Job or ReplicaSet), if it has one."""
    for owner in as_list(as_dict(pod.get("metadata")).get("ownerReferences")):
        if (
            isinstance(owner, dict)
            and owner.get("controller") is True
            and owner.get("kind") in POD_CONTROLLERS
        ):
            return owner
    return None


def node_affinity_matches(pod_spec: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """The pod's required node affinity: any term matches, a term when all its label
    expressions do (kubernetes v1.34 staging/src/k8s.io/component-helpers/scheduling/corev1/
    nodeaffinity/nodeaffinity.go ``NodeSelector.Match``; In, NotIn, Exists, DoesNotExist;
    ``matchFields``, Gt and Lt are not modelled and never match; an empty term matches
    nothing)."""
    node_affinity = as_dict(as_dict(pod_spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    # No terms at all (nil or empty) match no node.
    terms = [as_dict(t) for t in as_list(as_dict(required).get("nodeSelectorTerms"))]

    def matches(expression: Mapping[str, Any]) -> bool:
        key, operator = str(expression.get("key", "")), expression.get("operator")
        values = [str(v) for v in as_list(expression.get("values"))]
        if operator == "In":
            return key in labels and str(labels[key]) in values
        if operator == "NotIn":
            return key not in labels or str(labels[key]) not in values
        if operator == "Exists":
            return key in labels
        if operator == "DoesNotExist":
            return key not in labels
        return False

    return any(
        term.get("matchExpressions")
        and not term.get("matchFields")
        and all(matches(as_dict(e)) for e in as_list(term.get("matchExpressions")))
        for term in terms
    )


def _tolerates(tolerations: Iterable[Any], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        toleration = as_dict(toleration)
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _condition(
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    previous: Mapping[str, JsonObject],
) -> JsonObject:
    """A node condition that keeps its transition time while its status stays the same; an
    Unknown condition keeps the last heartbeat, as nothing reports any more."""
    old = previous.get(kind, {})
    changed = old.get("status") != status
    heartbeat = old.get("lastHeartbeatTime") if status == "Unknown" and not changed else None
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": heartbeat or timestamp(now),
        "lastTransitionTime": old.get("lastTransitionTime") if not changed else timestamp(now),
        "reason": reason,
        "message": message,
    }


# --- the cluster -----------------------------------------------------------------------------


class Cluster:
    """Nodes, GPUs and pods of the simulated fleet, kept in ``store``."""

    def __init__(self, config: SimConfig, store: Store, now: float) -> None:
        self.config = config
        self.store = store
        self.nodes: dict[str, SimNode] = {}
        self._random = random.Random(config.seed)  # noqa: S311 (pod names, not secrets)
        self._recreations: list[_Recreation] = []
        self.kueue = Kueue(store, fair_sharing=config.fair_sharing)
        self.batch = Batch(self)
        self.storage_initializer = StorageInitializerWebhook(store)
        self.hami = HamiWebhook(store)
        self._pod_ips = 0
        self._started = now
        # Every placement with its requests, kept after the pod goes: OpenCost prices the past.
        self.placements: list[Placement] = []
        with store.lock:
            self._build_nodes(now)
            for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self.ensure_namespace(name, now)
            for workload in config.seed_workloads:
                self._seed(workload, now)

    # --- nodes -------------------------------------------------------------------------------

    def _build_nodes(self, now: float) -> None:
        config = self.config
        planned = [
            (group, f"{group.pool}-{number:02d}")
            for group in config.node_groups
            if group.gpus_per_node
            for number in range(1, group.nodes + 1)
        ]
        per_domain = math.ceil(len(planned) / config.nvlink_domains)
        rack = 0
        for domain in range(config.nvlink_domains):
            members = planned[domain * per_domain : (domain + 1) * per_domain]
            clique = f"{derived_uuid(config.fleet_name, 'nvlink', domain + 1)}.1"
            for position, (group, name) in enumerate(members):
                if position % config.nodes_per_rack == 0:
                    rack += 1
                gpus = [self._gpu(group, name, index) for index in range(group.gpus_per_node)]
                node = SimNode(
                    name=name,
                    group=group,
                    block=f"block-{domain + 1}",
                    rack=f"rack-{rack}",
                    clique=clique,
                    internal_ip=f"10.42.{domain + 1}.{10 + len(self.nodes)}",
                    gpus=gpus,
                )
                self.nodes[name] = node
                self.store.apply(NODES, self._node_object(node, now), now)
        # CPU-only nodes (control planes, system pods) are outside the NVLink fabric.
        for group in config.node_groups:
            if group.gpus_per_node:
                continue
            for number in range(1, group.nodes + 1):
                name = f"{group.pool}-{number:02d}"
                self.nodes[name] = node = SimNode(
                    name=name,
                    group=group,
                    block="block-system",
                    rack="rack-system",
                    clique="",
                    internal_ip=f"10.42.0.{10 + len(self.nodes)}",
                    gpus=[],
                )
                self.store.apply(NODES, self._node_object(node, now), now)

    def _gpu(self, group: NodeGroup, node: str, index: int) -> Gpu:
        gpu = Gpu(
            index=index,
            uuid=f"GPU-{derived_uuid(node, 'gpu', index)}",
            pci_bus_id=PCI_BUS_IDS[index]
            if index < len(PCI_BUS_IDS)
            else f"00000000:{index:02X}:00.0",
            memory_mib=group.gpu_memory_mib,
        )
        if group.mode == "mig":
            used: set[int] = set()
            for profile, count in group.mig_profiles:
                for _ in range(count):
                    gi_id = _FIRST_GI_ID.get(mig_slices(profile), 7)
                    while gi_id in used:
                        gi_id += 1
                    used.add(gi_id)
                    gpu.mig.append(
                        MigDevice(profile, gi_id, f"MIG-{derived_uuid(node, 'mig', index, gi_id)}")
                    )
        return gpu

    def node(self, name: str) -> SimNode:
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found')
        return node

    def _architecture(self, group: NodeGroup) -> tuple[str, int, int]:
        if group.family:
            return group.family, group.compute_major, group.compute_minor
        tokens = group.product.upper().split("-")
        for token, architecture in _ARCHITECTURES.items():
            if token in tokens:
                return architecture
        return "", group.compute_major, group.compute_minor

    def _labels(self, node: SimNode) -> dict[str, str]:
        group = node.group
        driver = group.driver_version.split(".")
        cuda = group.cuda_version.split(".")
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": group.instance_type,
            "network.topology.kubernetes.io/block": node.block,
            "network.topology.kubernetes.io/rack": node.rack,
            POOL_LABEL: group.pool,
        }
        if group.gpus_per_node:
            family, major, minor = self._architecture(group)
            labels.update(
                {
                    "nvidia.com/cuda.driver-version.full": group.driver_version,
                    "nvidia.com/cuda.driver-version.major": driver[0],
                    "nvidia.com/cuda.driver-version.minor": driver[1] if len(driver) > 1 else "0",
                    "nvidia.com/cuda.driver-version.revision": driver[2]
                    if len(driver) > 2
                    else "0",
                    "nvidia.com/cuda.runtime-version.full": group.cuda_version,
                    "nvidia.com/cuda.runtime-version.major": cuda[0],
                    "nvidia.com/cuda.runtime-version.minor": cuda[1] if len(cuda) > 1 else "0",
                    "nvidia.com/gfd.timestamp": str(int(self._started)),
                    "nvidia.com/gpu.count": str(group.gpus_per_node),
                    "nvidia.com/gpu.machine": group.instance_type,
                    "nvidia.com/gpu.memory": str(group.gpu_memory_mib),
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": group.product,
                    "nvidia.com/gpu.replicas": "1",
                    "nvidia.com/gpu.sharing-strategy": "none",
                    "nvidia.com/gpu.clique": node.clique,
                    "nvidia.com/gpu.deploy.device-plugin": "true",
                    "nvidia.com/gpu.deploy.dcgm-exporter": "true",
                    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
                    "nvidia.com/gpu.deploy.mig-manager": "true",
                    "nvidia.com/mig.capable": "true",
                    "nvidia.com/mig.strategy": "mixed",
                    "nvidia.com/mig.config": group.mig_config
                    or ("all-balanced" if group.mode == "mig" else "all-disabled"),
                    "nvidia.com/mig.config.state": "success",
                    "nvidia.com/mps.capable": "false",
                }
            )
            if family:
                labels["nvidia.com/gpu.family"] = family
            if major:
                labels["nvidia.com/gpu.compute.major"] = str(major)
                labels["nvidia.com/gpu.compute.minor"] = str(minor)
        if group.mode == "mig":
            for profile, count in group.mig_profiles:
                slices = mig_slices(profile)
                prefix = f"{MIG_PREFIX}{profile}"
                labels.update(
                    {
                        f"{prefix}.count": str(count * group.gpus_per_node),
                        f"{prefix}.engines.copy": str(slices),
                        f"{prefix}.engines.decoder": str(slices),
                        f"{prefix}.engines.encoder": "0",
                        f"{prefix}.engines.jpeg": str(slices),
                        f"{prefix}.engines.ofa": "1" if slices == 7 else "0",
                        f"{prefix}.memory": str(mig_memory_mib(profile)),
                        f"{prefix}.multiprocessors": str(_MULTIPROCESSORS.get(slices, 16 * slices)),
                        f"{prefix}.product": f"{group.product}-MIG-{profile}",
                        f"{prefix}.replicas": "1",
                        f"{prefix}.sharing-strategy": "none",
                        f"{prefix}.slices.ci": str(slices),
                        f"{prefix}.slices.gi": str(slices),
                    }
                )
        labels.update(dict(group.labels))
        return dict(sorted(labels.items()))

    def _gpu_resources(self, node: SimNode, gpus: Iterable[Gpu]) -> dict[str, int]:
        """What the device plugins advertise for ``gpus`` of ``node``."""
        group = node.group
        gpus = list(gpus)
        if not group.gpus_per_node:
            return {}
        # The GPU Operator runs NVIDIA's device plugin on every GPU node unless the node says
        # nvidia.com/gpu.deploy.device-plugin=false: it labels GPU nodes "true" where the label
        # is missing (gpu-operator v26.7.0 controllers/state_manager.go ``gpuStateLabels``) and
        # the plugin's DaemonSet selects "true". On a HAMi or DRA node it would advertise the
        # same GPUs as whole ones beside HAMi's slots or the DRA driver's devices.
        plugin = dict(group.labels).get(DEVICE_PLUGIN_LABEL, "true") != "false"
        nvidia = {GPU: len(gpus)} if plugin else {}
        if group.mode == "mig":
            counts: Counter[str] = Counter()
            for gpu in gpus:
                counts.update(f"{MIG_PREFIX}{device.profile}" for device in gpu.mig)
            for profile, _ in group.mig_profiles:
                counts.setdefault(f"{MIG_PREFIX}{profile}", 0)
            return {GPU: 0, **dict(sorted(counts.items()))}
        if group.mode == "hami":
            # HAMi's device plugin registers its resourceName (the fleet's nvidia.com/vgpu)
            # with the kubelet and lists deviceSplitCount devices per GPU (HAMi v2.10.0
            # cmd/device-plugin/nvidia/vgpucfg.go sets the plugin's ResourceName from
            # resourceCountName; pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go
            # ``GetPluginDevices``). Memory and cores are never registered with the kubelet:
            # the plugin writes them per GPU into the hami.io/node-nvidia-register annotation
            # (nvinternal/plugin/register.go ``RegisterInAnnotation``), and the chart lists
            # them ``ignoredByScheduler`` for kube-scheduler (charts/hami/templates/_helpers.tpl
            # ``managedResources``).
            shared = {VGPU: len(gpus) * group.hami_split}
            return {**shared, **nvidia}
        if group.mode == "dra":
            # The DRA driver publishes its GPUs in ResourceSlices, not in the node's status.
            return nvidia
        return {GPU: len(gpus)}

    def _capacity(self, node: SimNode, *, allocatable: bool) -> dict[str, str]:
        group = node.group
        memory_kib = group.memory_gib * 1024 * 1024
        # Allocatable keeps back the kubelet's system and eviction reserves.
        resources: dict[str, str] = {
            "cpu": str(group.cpus - 2 if allocatable else group.cpus),
            "ephemeral-storage": "3455599035905" if allocatable else "3749638656Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{memory_kib - 4 * 1024 * 1024 if allocatable else memory_kib}Ki",
            "pods": "110",
        }
        gpus = [gpu for gpu in node.gpus if gpu.healthy or not allocatable]
        resources.update({k: str(v) for k, v in self._gpu_resources(node, gpus).items()})
        resources.update({name: str(count) for name, count in group.sriov_resources})
        return resources

    def _node_object(self, node: SimNode, now: float) -> JsonObject:
        index = list(self.nodes).index(node.name)
        obj: JsonObject = {
            "metadata": {
                "name": node.name,
                "labels": self._labels(node),
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {
                "podCIDR": f"10.244.{index}.0/24",
                "podCIDRs": [f"10.244.{index}.0/24"],
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": node.internal_ip},
                    {"type": "Hostname", "address": node.name},
                ],
                "capacity": self._capacity(node, allocatable=False),
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": derived_uuid(node.name, "boot"),
                    "containerRuntimeVersion": "containerd://2.0.5",
                    "kernelVersion": "6.8.0-60-generic",
                    "kubeProxyVersion": self.config.kubernetes_version,
                    "kubeletVersion": self.config.kubernetes_version,
                    "machineID": derived_uuid(node.name, "machine").replace("-", ""),
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 24.04.2 LTS",
                    "systemUUID": derived_uuid(node.name, "system"),
                },
            },
        }
        self._derive(node, obj, now)
        return obj

    def _derive(self, node: SimNode, obj: JsonObject, now: float) -> None:
        """Rewrite the parts of the Node that follow from the hardware state."""
        status = obj["status"] = as_dict(obj.get("status"))
        spec = obj["spec"] = as_dict(obj.get("spec"))
        metadata = obj["metadata"] = as_dict(obj.get("metadata"))
        status["allocatable"] = self._capacity(node, allocatable=True)
        previous = {
            str(c.get("type")): c for c in as_list(status.get("conditions")) if isinstance(c, dict)
        }
        conditions = []
        if node.ready:
            kubelet = [
                ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                ("Ready", "True", "KubeletReady"),
            ]
            messages = {
                "MemoryPressure": "kubelet has sufficient memory available",
                "DiskPressure": "kubelet has no disk pressure",
                "PIDPressure": "kubelet has sufficient PID available",
                "Ready": "kubelet is posting ready status",
            }
            for kind, state, reason in kubelet:
                conditions.append(_condition(kind, state, reason, messages[kind], now, previous))
        else:
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
                conditions.append(
                    _condition(
                        kind,
                        "Unknown",
                        "NodeStatusUnknown",
                        "Kubelet stopped posting node status.",
                        now,
                        previous,
                    )
                )
        faults: dict[str, list[Gpu]] = {}
        for gpu in node.gpus:
            if gpu.xid and not gpu.healthy:
                kind = FALLEN_OFF_CONDITION if gpu.xid == XID_FALLEN_OFF else XID_CONDITION
                faults.setdefault(kind, []).append(gpu)
        for kind, gpus in sorted(faults.items()):
            message = "; ".join(self._xid_message(gpu) for gpu in gpus)
            conditions.append(
                _condition(kind, "True", f"XID{gpus[-1].xid}", message, now, previous)
            )
        for kind, (state, reason, message) in sorted(node.agent_conditions.items()):
            conditions.append(_condition(kind, state, reason, message, now, previous))
        status["conditions"] = conditions

        managed = {GPU, UNREACHABLE, UNSCHEDULABLE}
        old_taints = {
            (str(t.get("key")), str(t.get("effect"))): t
            for t in as_list(spec.get("taints"))
            if isinstance(t, dict)
        }
        taints = [t for key, t in old_taints.items() if key[0] not in managed]
        if node.gpus:
            taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
        if spec.get("unschedulable") is True:
            taints.append({"key": UNSCHEDULABLE, "effect": "NoSchedule"})
        if not node.ready:
            taints.append({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": None})
            taints.append({"key": UNREACHABLE, "effect": "NoSchedule"})
        for taint in taints:
            if "timeAdded" in taint:
                old = old_taints.get((taint["key"], taint["effect"]), {})
                taint["timeAdded"] = old.get("timeAdded") or timestamp(now)
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

        if node.group.mode == "hami":
            annotations = metadata["annotations"] = as_dict(metadata.get("annotations"))
            annotations[HAMI_REGISTER] = self._hami_register(node)
            annotations.setdefault(
                HAMI_HANDSHAKE,
                "Reported "
                + datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S.%f000 +0000 UTC"),
            )

    def _hami_register(self, node: SimNode) -> str:
        """HAMi's device list: ``id,count,devmem,devcore,type,numa,health:`` per GPU."""
        group = node.group
        half = max(len(node.gpus) // 2, 1)
        return "".join(
            f"{gpu.uuid},{group.hami_split},{gpu.memory_mib},100,NVIDIA-{group.model_name},"
            f"{gpu.index // half},{'true' if gpu.healthy else 'false'}:"
            for gpu in node.gpus
        )

    @staticmethod
    def _xid_message(gpu: Gpu) -> str:
        if gpu.xid == XID_FALLEN_OFF:
            return f"GPU {gpu.index} ({gpu.uuid}) has fallen off the bus (XID 79)"
        description = XID_DESCRIPTIONS.get(gpu.xid, "GPU error")
        return f"GPU {gpu.index} ({gpu.uuid}) reported XID {gpu.xid}: {description}"

    def sync_node(self, name: str, now: float) -> None:
        """Re-derive a node's status after its hardware state or ``spec`` changed."""
        node = self.nodes.get(name)
        if node is not None:
            self.store.mutate(NODES, "", name, lambda obj: self._derive(node, obj, now))

    # --- faults ------------------------------------------------------------------------------

    def inject_xid(self, node_name: str, gpu_index: int, xid: int, now: float) -> None:
        """An XID error on one GPU. A fatal XID makes the GPU unhealthy: the device plugin
        withdraws it from allocatable and NVSentinel sets a node condition."""
        with self.store.lock:
            node = self.node(node_name)
            if not 0 <= gpu_index < len(node.gpus):
                raise NotFound(f"node {node_name} has no GPU {gpu_index}")
            gpu = node.gpus[gpu_index]
            gpu.xid = xid
            if xid not in APPLICATION_XIDS:
                gpu.healthy = False
            logger.info("XID %s on %s GPU %s", xid, node_name, gpu_index)
            self.sync_node(node_name, now)

    def set_agent_condition(
        self, node_name: str, kind: str, status: str, reason: str, message: str, now: float
    ) -> None:
        """A node agent reports a condition: NVSentinel's ``Gpu<System>Watch`` when a DCGM
        health watch fails (NVIDIA/NVSentinel docs/INTEGRATIONS.md), or a Node Problem Detector
        GPU check (``GPUMissing``, ``XIDErrors``...). Status "False" is the check passing."""
        with self.store.lock:
            self.node(node_name).agent_conditions[kind] = (status, reason, message)
            logger.info("condition %s=%s on %s", kind, status, node_name)
            self.sync_node(node_name, now)

    def set_gpu_idle(self, node_name: str, gpu_index: int | None, idle: bool, now: float) -> None:
        """The ``idle`` fault: the workloads on one GPU (``gpu_index``) or on every GPU of the
        node keep their allocation but stop working, so DCGM's GR_ENGINE_ACTIVE reads ~0."""
        with self.store.lock:
            node = self.node(node_name)
            if gpu_index is not None and not 0 <= gpu_index < len(node.gpus):
                raise NotFound(f"node {node_name} has no GPU {gpu_index}")
            for gpu in node.gpus if gpu_index is None else [node.gpus[gpu_index]]:
                gpu.idle = idle
            logger.info("idle=%s on %s GPU %s", idle, node_name, gpu_index)

    def set_node_ready(self, node_name: str, ready: bool, now: float) -> None:
        with self.store.lock:
            self.node(node_name).ready = ready
            logger.info("node %s ready=%s", node_name, ready)
            self.sync_node(node_name, now)

    def clear_faults(self, now: float) -> None:
        with self.store.lock:
            for node in self.nodes.values():
                node.ready = True
                node.agent_conditions.clear()
                for gpu in node.gpus:
                    gpu.xid = 0
                    gpu.healthy = True
                    gpu.idle = False
                self.sync_node(node.name, now)

    # --- namespaces and pods -----------------------------------------------------------------

    def ensure_namespace(self, name: str, now: float) -> None:
        if self.store.get(NAMESPACES, "", name) is None:
            self.store.apply(
                NAMESPACES,
                {
                    "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
                now,
            )

    def _seed(self, workload: SeedWorkload, now: float) -> None:
        self.ensure_namespace(workload.namespace, now)
        owner_uid = derived_uuid(workload.namespace, workload.kind, workload.name)
        labels = {QUEUE_LABEL: workload.queue}
        if workload.kind == "Job":
            owner_api = "batch/v1"
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": owner_uid,
                    "batch.kubernetes.io/job-name": workload.name,
                }
            )
        else:
            owner_api = "apps/v1"
            labels["pod-template-hash"] = workload.name.rsplit("-", 1)[-1]
        limits = dict(workload.resources)
        container = {
            "name": "main",
            "image": workload.image,
            "resources": {"limits": limits, "requests": dict(limits)},
        }
        spec: JsonObject = {
            "containers": [container],
            "restartPolicy": "Never" if workload.kind == "Job" else "Always",
        }
        if workload.pool:
            spec["nodeSelector"] = {POOL_LABEL: workload.pool}
        for _ in range(workload.pods):
            pod = {
                "metadata": {
                    "namespace": workload.namespace,
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": owner_api,
                            "kind": workload.kind,
                            "name": workload.name,
                            "uid": owner_uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec,
            }
            self.create_pod(pod, workload.name, now, admission=False)
        if workload.cluster_queue:
            owner = {
                "apiVersion": owner_api,
                "metadata": {
                    "namespace": workload.namespace,
                    "name": workload.name,
                    "uid": owner_uid,
                    "labels": {QUEUE_LABEL: workload.queue},
                },
            }
            template = {"metadata": {"labels": labels}, "spec": spec}
            self._seed_admission(workload, owner, template, now)

    def _seed_admission(
        self, workload: SeedWorkload, owner: JsonObject, template: JsonObject, now: float
    ) -> None:
        """The Workload Kueue admitted the seed's Job or ReplicaSet with before the simulator
        started: one pod set of its pods, their requests held in ``workload.cluster_queue`` on
        its flavor, as ``Kueue.usage`` and the ClusterQueue's status count them, its pods
        ready. A pod its controller replaces runs under the same admission, as a Job's do."""
        podset = pod_set(MAIN, template, workload.pods)
        requests = per_pod_requests(podset)
        flavor = workload.flavor or workload.pool
        admission: JsonObject = {
            "clusterQueue": workload.cluster_queue,
            "podSetAssignments": [
                {
                    "name": MAIN,
                    "count": workload.pods,
                    "flavors": {resource: flavor for resource in sorted(requests)},
                    "resourceUsage": {
                        resource: quantity_string(resource, amount * workload.pods)
                        for resource, amount in sorted(requests.items())
                    },
                }
            ],
        }
        group = "batch" if workload.kind == "Job" else "apps"
        wl = new_workload(self.store, owner, workload.kind, group, [podset])
        if workload.priority_class:
            wl["metadata"]["labels"][PRIORITY_CLASS_LABEL] = workload.priority_class
            wl["spec"]["priority"] = workload.priority
            wl["spec"]["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": workload.priority_class,
            }
        reserve_quota(wl, admission, now)
        set_condition(wl, PODS_READY, True, "PodsReady", "All pods reached readiness", now)
        self.store.apply(WORKLOADS, wl, now)

    def _pod_name(self, namespace: str, base: str) -> str:
        while True:
            suffix = "".join(self._random.choice(_NAME_ALPHABET) for _ in range(5))
            name = f"{base}-{suffix}"
            if self.store.get(PODS, namespace, name) is None:
                return name

    def create_pod(
        self,
        pod: Mapping[str, Any],
        base_name: str,
        now: float,
        *,
        exclude: str = "",
        name: str = "",
        admission: bool = True,
        queue: bool = True,
        requester: str = "",
    ) -> JsonObject:
        """Store a new pod named ``<base_name>-<5 random>`` (or ``name``) and try to place it.

        ``pod`` needs metadata (namespace, labels, owners) and spec; node and status are filled
        in here. With ``admission`` (every pod a controller creates) it goes through the API
        server's admission chain first (``admission.py``) and ``Rejected`` says why it was
        refused; a pod Kueue gates gets its Workload and waits for its admission (``kueue.py``),
        unless ``queue`` is False (the replacement of a seed pod, admitted before the simulator
        started); ``requester`` is who creates it (its controller's service account when not given,
        ``kyverno.pod_creator``). Without ``admission`` (pods that were running before the
        simulator started) GPU pods get the GPU taint's toleration, as their admitted flavor
        would have given them.
        """
        with self.store.lock:
            new = dict(pod)
            metadata = dict(as_dict(new.get("metadata")))
            namespace = str(metadata.get("namespace") or "default")
            metadata["namespace"] = namespace
            if name:
                metadata["name"] = name
            else:
                metadata["name"] = self._pod_name(namespace, base_name)
                metadata["generateName"] = f"{base_name}-"
            spec = dict(as_dict(new.get("spec")))
            spec.pop("nodeName", None)
            request = pod_request({"metadata": metadata, "spec": spec}, self._claim_devices)
            spec.setdefault(
                "schedulerName", HAMI_SCHEDULER if request.hami else "default-scheduler"
            )
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, dict)]
            wanted: list[JsonObject] = []
            if request.wants_gpu and not admission:
                wanted.append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
            # The DefaultTolerationSeconds admission plugin.
            for key in (NOT_READY, UNREACHABLE):
                wanted.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )
            spec["tolerations"] = tolerations + [t for t in wanted if t not in tolerations]
            new.update(
                metadata=metadata, spec=spec, status={"phase": "Pending", "qosClass": "Burstable"}
            )
            if admission:
                webhooks = [
                    self.storage_initializer,
                    *([self.kueue.mutate] if queue else []),
                    self.hami,
                ]
                new = admit_pod(self.store, new, webhooks=webhooks, requester=requester)
            stored = self.store.apply(PODS, new, now)
            if kueue_gated(stored):
                self._admit_queued(stored, now, exclude=exclude)
            else:
                self._schedule(stored, now, exclude=exclude)
            return self.store.get(PODS, namespace, metadata["name"]) or stored

    def create_object(
        self, resource: Resource, obj: Mapping[str, Any], now: float, requester: str = ""
    ) -> JsonObject:
        """Create an object of another kind (a Job, a JobSet) through the admission chain
        (Kueue's job webhooks, Kyverno's); ``Rejected`` when a webhook refuses it. An object
        that exists already is refused as the API server does (409 in the API)."""
        with self.store.lock:
            new = dict(obj)
            metadata = new["metadata"] = dict(as_dict(new.get("metadata")))
            if resource.namespaced:
                metadata["namespace"] = str(metadata.get("namespace") or "default")
            if self.store.get(resource, *key_of(new)) is not None:
                raise AlreadyExists(f'{resource.qualified} "{metadata.get("name")}" already exists')
            admitted = admit_object(
                self.store, new, resource, requester=requester or "system:admin"
            )
            return self.store.apply(resource, admitted, now)

    def update_pod(self, pod: Mapping[str, Any], now: float, *, requester: str) -> JsonObject:
        """Replace a pod's metadata and spec as ``requester`` (its status stays), through
        Kyverno's webhooks as an UPDATE with the stored pod as the old object; ``Rejected``
        with the API server's message. A Pending pod no scheduling gate holds any more is
        placed at once, as the scheduler sees the update."""
        with self.store.lock:
            key = key_of(pod)
            old = self.store.get(PODS, *key)
            if old is None:
                raise NotFound(f'pods "{key[1]}" not found')
            new = {**dict(pod), "status": old.get("status", {})}
            metadata = new["metadata"] = dict(as_dict(new.get("metadata")))
            old_meta = as_dict(old.get("metadata"))
            for field in ("uid", "creationTimestamp", "generateName", "generation"):
                if field in old_meta:
                    metadata[field] = old_meta[field]
            if new.get("spec") != old.get("spec"):
                metadata["generation"] = int(old_meta.get("generation") or 0) + 1
            new = admit_object(
                self.store, new, PODS, requester=requester, operation="UPDATE", old=old
            )
            self.store.replace(PODS, *key, new)
            stored = self.store.get(PODS, *key) or new
            spec, status = as_dict(stored.get("spec")), as_dict(stored.get("status"))
            if (
                not spec.get("nodeName")
                and status.get("phase") == "Pending"
                and not as_list(spec.get("schedulingGates"))
            ):
                self._schedule(stored, now)
            return self.store.get(PODS, *key) or stored

    # --- Kueue's pod integration ---------------------------------------------------------------

    def pod_workload(self, pod: Mapping[str, Any]) -> JsonObject | None:
        """The Workload of a standalone pod Kueue manages (``pod-<name>-<hash>``)."""
        metadata = as_dict(pod.get("metadata"))
        name = workload_name(str(metadata.get("name", "")), str(metadata.get("uid", "")), "Pod", "")
        return self.store.get(WORKLOADS, str(metadata.get("namespace", "")), name)

    def pod_pending(self, pod: Mapping[str, Any]) -> str | None:
        """Why Kueue has not admitted the pod's Workload yet (its QuotaReserved message), or
        None when the pod is not queued."""
        if not kueue_gated(pod):
            return None
        wl = self.pod_workload(pod)
        found = condition(wl, QUOTA_RESERVED) if wl is not None else None
        return str(found.get("message", "")) if found else "waiting for its workload"

    def _ensure_pod_workload(self, pod: JsonObject, now: float) -> JsonObject:
        """The pod integration's reconciler: one Workload per gated pod, pod set ``main`` of
        1 (``pkg/controller/jobs/pod/pod_controller.go`` ``ConstructComposableWorkload``)."""
        found = self.pod_workload(pod)
        if found is not None:
            return found
        pod = {**pod, "apiVersion": "v1"}
        podsets = [pod_set(MAIN, pod, 1)]
        return self.store.apply(WORKLOADS, new_workload(self.store, pod, "Pod", "", podsets), now)

    def _reconcile_pod_workloads(self, now: float) -> None:
        """A pod's Workload follows its pod: finished with it, gone with it; an evicted one
        (preempted or deactivated) stops the pod, which its controller replaces, queued
        again."""
        for wl in self.store.list(WORKLOADS):
            kind, name = owner_of(wl)
            if kind != "Pod":
                continue
            namespace = str(as_dict(wl.get("metadata")).get("namespace", ""))
            pod = self.store.get(PODS, namespace, name)
            if pod is None:
                self.store.delete(WORKLOADS, *key_of(wl))
                continue
            phase = as_dict(pod.get("status")).get("phase")
            if phase in ("Succeeded", "Failed") and not is_finished(wl):
                reason = "Succeeded" if phase == "Succeeded" else "Failed"
                message = "Pod succeeded" if phase == "Succeeded" else "Pod failed"
                self.store.mutate(WORKLOADS, *key_of(wl), finisher(reason, message, now))
            elif is_evicted(wl) and holds_quota(wl):
                self.delete_pod(namespace, name, now)

    def _admit_queued(
        self, pod: JsonObject, now: float, *, exclude: str = "", schedule: bool = True
    ) -> None:
        """Kueue for one gated pod: its Workload, a scheduling cycle (``schedule``), and once
        admitted the gate goes, the flavors' node labels and tolerations join the pod
        (``pkg/podset``) and the pod is placed."""
        key = key_of(pod)
        wl = self._ensure_pod_workload(pod, now)
        if schedule and not holds_quota(wl):
            self.kueue.schedule(now)
            wl = self.pod_workload(pod) or wl
        if holds_quota(wl) and not is_evicted(wl):
            admission = as_dict(as_dict(wl.get("status")).get("admission"))
            flavors = [
                str(flavor)
                for assignment in as_list(admission.get("podSetAssignments"))
                for flavor in as_dict(as_dict(assignment).get("flavors")).values()
            ]

            def ungate(obj: JsonObject) -> None:
                self.kueue.apply_admission(obj, flavors)
                spec = obj["spec"]
                spec["schedulingGates"] = [
                    g
                    for g in as_list(spec.get("schedulingGates"))
                    if not kueue_gated({"spec": {"schedulingGates": [g]}})
                ]
                if not spec["schedulingGates"]:
                    del spec["schedulingGates"]

            admitted = self.store.mutate(PODS, *key, ungate)
            if admitted is not None:
                self._schedule(admitted, now, exclude=exclude)
            return
        message = "Scheduling is blocked due to non-empty scheduling gates"
        self.store.mutate(
            PODS, *key, lambda obj: self._mark_unschedulable(obj, message, now, "SchedulingGated")
        )

    def _claim_devices(self, namespace: str, template: str) -> int:
        """Devices a DRA claim made from ``template`` asks for (1 when it cannot tell)."""
        obj = self.store.get(CLAIM_TEMPLATES, namespace, template)
        if obj is None:
            return 1
        devices = as_dict(as_dict(as_dict(obj.get("spec")).get("spec")).get("devices"))
        total = 0
        for request in as_list(devices.get("requests")):
            request = as_dict(request)
            exactly = as_dict(request.get("exactly")) or request
            total += quantity(exactly.get("count", 1)) or 1
        return total or 1

    def _fit(self, node: SimNode, request: GpuRequest) -> list[tuple[Gpu, MigDevice | None]] | None:
        """The devices of ``node`` that would serve ``request``, or None when it does not fit."""
        group = node.group
        healthy = [gpu for gpu in node.gpus if gpu.healthy]
        if request.mig:
            if group.mode != "mig":
                return None
            chosen: list[tuple[Gpu, MigDevice | None]] = []
            for profile, count in request.mig:
                free = [
                    (g, d) for g in healthy for d in g.mig if d.profile == profile and not d.pod
                ]
                if len(free) < count:
                    return None
                chosen += free[:count]
            return chosen
        if request.hami:
            # Whole GPUs or DRA claims as well: no node advertises both.
            if group.mode != "hami" or request.gpus or request.dra_devices:
                return None
            options = []
            for gpu in healthy:
                memory = self._hami_memory(gpu, request)
                used_memory = sum(slot.memory_mib for slot in gpu.slots)
                used_cores = sum(slot.cores for slot in gpu.slots)
                if (
                    len(gpu.slots) < group.hami_split
                    and used_memory + memory <= gpu.memory_mib
                    and used_cores + request.cores <= 100
                ):
                    options.append(gpu)
            # HAMi's default GPU policy spreads a node's pods over its GPUs.
            options.sort(key=lambda gpu: (len(gpu.slots), gpu.index))
            if len(options) < request.vgpus:
                return None
            return [(gpu, None) for gpu in options[: request.vgpus]]
        if request.gpus or request.dra_devices:
            # nvidia.com/gpu only on device-plugin nodes, claims only on DRA nodes.
            if request.gpus and request.dra_devices:
                return None
            if group.mode != ("dra" if request.dra_devices else "whole"):
                return None
            wanted = request.gpus + request.dra_devices
            free_gpus = [gpu for gpu in healthy if not gpu.slots]
            if len(free_gpus) < wanted:
                return None
            return [(gpu, None) for gpu in free_gpus[:wanted]]
        return []

    @staticmethod
    def _hami_memory(gpu: Gpu, request: GpuRequest) -> int:
        # HAMi reads no memory request as the whole card.
        if request.memory_mib:
            return request.memory_mib
        if request.memory_percent:
            return gpu.memory_mib * request.memory_percent // 100
        return gpu.memory_mib

    def _unfit_reason(self, node: SimNode, pod: Mapping[str, Any]) -> str | None:
        obj = self.store.get(NODES, "", node.name)
        if obj is None:
            return "node(s) were not found"
        spec = as_dict(obj.get("spec"))
        pod_spec = as_dict(pod.get("spec"))
        # kube-scheduler's NodeUnschedulable filter (kubernetes v1.34 pkg/scheduler/framework/
        # plugins/nodeunschedulable/node_unschedulable.go ``Filter``): a cordoned node takes
        # only a pod tolerating the node.kubernetes.io/unschedulable:NoSchedule taint.
        if spec.get("unschedulable") is True and not _tolerates(
            as_list(pod_spec.get("tolerations")), {"key": UNSCHEDULABLE, "effect": "NoSchedule"}
        ):
            return "node(s) were unschedulable"
        labels = as_dict(as_dict(obj.get("metadata")).get("labels"))
        selector = as_dict(pod_spec.get("nodeSelector"))
        if any(labels.get(key) != value for key, value in selector.items()) or not (
            node_affinity_matches(pod_spec, labels)
        ):
            return "node(s) didn't match Pod's node affinity/selector"
        tolerations = as_list(pod_spec.get("tolerations"))
        for taint in as_list(spec.get("taints")):
            taint = as_dict(taint)
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
                tolerations, taint
            ):
                shown = f"{taint.get('key')}: {taint.get('value', '')}"
                return f"node(s) had untolerated taint {{{shown}}}"
        return self._sriov_shortfall(node, pod)

    def _sriov_shortfall(self, node: SimNode, pod: Mapping[str, Any]) -> str | None:
        """kube-scheduler's NodeResourcesFit for the SR-IOV resources (``multus.py``)."""
        names = {name for group in self.config.node_groups for name, _ in group.sriov_resources}
        wanted = multus.extended_requests(pod, dict.fromkeys(names, 0))
        if not wanted:
            return None
        offered = dict(node.group.sriov_resources)
        used: Counter[str] = Counter()
        for other in self.store.list(PODS):
            if as_dict(other.get("spec")).get("nodeName") != node.name or as_dict(
                other.get("status")
            ).get("phase") in ("Succeeded", "Failed"):
                continue
            used.update(multus.extended_requests(other, offered))
        for name, count in sorted(wanted.items()):
            if used[name] + count > offered.get(name, 0):
                return f"Insufficient {name}"
        return None

    def _schedule(self, pod: JsonObject, now: float, *, exclude: str = "") -> bool:
        """Place a Pending pod, or record why it cannot be placed."""
        metadata = as_dict(pod.get("metadata"))
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        request = pod_request(pod, self._claim_devices)
        reasons: Counter[str] = Counter()
        best: tuple[tuple[int, str], SimNode, list[tuple[Gpu, MigDevice | None]]] | None = None
        for node in self.nodes.values():
            if node.name == exclude:
                reasons["node(s) were unschedulable"] += 1
                continue
            reason = self._unfit_reason(node, pod)
            devices = self._fit(node, request) if reason is None else None
            if reason is None and devices is None:
                reason = request.shortfall()
            if reason is not None or devices is None:
                reasons[reason or request.shortfall()] += 1
                continue
            rank = (-node.busy_gpus(), node.name)
            if best is None or rank < best[0]:
                best = (rank, node, devices)
        if best is None:
            detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
            message = f"0/{len(self.nodes)} nodes are available: {detail}."
            self.store.mutate(PODS, *key, lambda obj: self._mark_unschedulable(obj, message, now))
            return False
        _, node, devices = best
        self._bind(key, pod, node, devices, request, now)
        return True

    @staticmethod
    def _mark_unschedulable(
        obj: JsonObject, message: str, now: float, reason: str = "Unschedulable"
    ) -> None:
        status = obj["status"] = as_dict(obj.get("status"))
        old: JsonObject = next(
            (
                as_dict(c)
                for c in as_list(status.get("conditions"))
                if as_dict(c).get("type") == "PodScheduled"
            ),
            {},
        )
        if old.get("message") == message:
            return
        status["phase"] = "Pending"
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": old.get("lastTransitionTime") or timestamp(now),
            }
        ]

    def _bind(
        self,
        key: PodKey,
        pod: JsonObject,
        node: SimNode,
        devices: list[tuple[Gpu, MigDevice | None]],
        request: GpuRequest,
        now: float,
    ) -> None:
        for gpu, device in devices:
            if device is not None:
                device.pod, device.container = key, request.container
            elif request.hami:
                gpu.slots.append(
                    Slot(key, request.container, self._hami_memory(gpu, request), request.cores)
                )
            else:
                gpu.slots.append(Slot(key, request.container, gpu.memory_mib, 100))
        cpu, ram, gpus = pod_requests(as_dict(pod.get("spec")))
        self.placements.append(Placement(*key, node.name, cpu, ram, gpus, start=now))
        self._pod_ips += 1
        pod_ip = f"10.244.{list(self.nodes).index(node.name)}.{self._pod_ips % 250 + 2}"
        started = timestamp(now)
        containers = [as_dict(c) for c in as_list(as_dict(pod.get("spec")).get("containers"))]

        def bind(obj: JsonObject) -> None:
            obj["spec"] = as_dict(obj.get("spec"))
            obj["spec"]["nodeName"] = node.name
            if request.hami:
                metadata = obj["metadata"] = as_dict(obj.get("metadata"))
                annotations = metadata["annotations"] = as_dict(metadata.get("annotations"))
                allocated = "".join(
                    f"{gpu.uuid},NVIDIA,{self._hami_memory(gpu, request)},{request.cores}:"
                    for gpu, _ in devices
                )
                annotations.update(
                    {
                        "hami.io/vgpu-node": node.name,
                        "hami.io/vgpu-time": str(int(now)),
                        "hami.io/vgpu-devices-allocated": f"{allocated};",
                        "hami.io/bind-phase": "success",
                    }
                )
            if blocked is not None:
                # Multus could not attach the pod's networks: no sandbox, no IP (multus.py).
                obj["status"] = multus.waiting_status(obj, node.internal_ip, started)
                return
            obj["status"] = running_status(key, containers, node.internal_ip, pod_ip, started, now)

        blocked = multus.sandbox_error(self.store, pod)
        self.store.mutate(PODS, *key, bind)
        if blocked is not None:
            self._sandbox_event(key, *blocked, now)
        logger.debug("placed pod %s/%s on %s", *key, node.name)

    def _sandbox_event(self, key: PodKey, reason: str, message: str, now: float) -> None:
        """The Warning Multus (``NoNetworkFound``) or the kubelet records on the pod."""
        pod = self.store.get(PODS, *key)
        uid = str(as_dict(as_dict(pod).get("metadata")).get("uid", ""))
        name = f"{key[1]}.{derived_uuid(uid, reason).replace('-', '')[:16]}"
        old = self.store.get(EVENTS, key[0], name)
        self.store.apply(
            EVENTS,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": key[0]},
                "involvedObject": {"kind": "Pod", "namespace": key[0], "name": key[1], "uid": uid},
                "type": "Warning",
                "reason": reason,
                "message": message,
                "source": {"component": "multus" if reason == "NoNetworkFound" else "kubelet"},
                "count": int(as_dict(old).get("count") or 0) + 1,
                "firstTimestamp": as_dict(old).get("firstTimestamp") or timestamp(now),
                "lastTimestamp": timestamp(now),
            },
            now,
        )

    def _retry_sandboxes(self, now: float) -> None:
        """The kubelet retries a pod's sandbox: it starts once Multus can attach its networks."""
        for pod in self.store.list(PODS):
            if not multus.is_waiting_for_sandbox(pod):
                continue
            key = key_of(pod)
            blocked = multus.sandbox_error(self.store, pod)
            if blocked is not None:
                self._sandbox_event(key, *blocked, now)
                continue
            node = self.nodes.get(str(as_dict(pod.get("spec")).get("nodeName")))
            if node is None:
                continue
            self._pod_ips += 1
            pod_ip = f"10.244.{list(self.nodes).index(node.name)}.{self._pod_ips % 250 + 2}"
            containers = [as_dict(c) for c in as_list(as_dict(pod.get("spec")).get("containers"))]
            status = running_status(key, containers, node.internal_ip, pod_ip, timestamp(now), now)

            def start(obj: JsonObject, status: JsonObject = status) -> None:
                obj["status"] = status

            self.store.mutate(PODS, *key, start)

    def _release(self, key: PodKey, node_name: str, now: float) -> None:
        for placement in self.placements:
            if (placement.namespace, placement.pod) == key and placement.end is None:
                placement.end = now
        node = self.nodes.get(node_name)
        if node is None:
            return
        for gpu in node.gpus:
            gpu.slots = [slot for slot in gpu.slots if slot.pod != key]
            for device in gpu.mig:
                if device.pod == key:
                    device.pod, device.container = None, ""

    def delete_pod(
        self, namespace: str, name: str, now: float, *, recreate: bool = True
    ) -> JsonObject:
        """Delete a pod and free its devices; its controller (if any) replaces it later."""
        with self.store.lock:
            pod = self.store.delete(PODS, namespace, name)
            if pod is None:
                raise NotFound(f'pods "{name}" not found')
            node_name = str(as_dict(pod.get("spec")).get("nodeName") or "")
            self._release((namespace, name), node_name, now)
            # The garbage collector follows the Workload's ownerReference to the pod.
            wl = self.pod_workload(pod)
            if wl is not None:
                self.store.delete(WORKLOADS, *key_of(wl))
            queued = wl is not None
            owner = controller_of(pod)
            if recreate and owner is not None:
                template = {
                    "metadata": {
                        key: value
                        for key, value in as_dict(pod.get("metadata")).items()
                        if key in ("namespace", "labels", "ownerReferences")
                    },
                    "spec": as_dict(pod.get("spec")),
                }
                annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
                kept = {k: v for k, v in annotations.items() if not k.startswith("hami.io/")}
                if kept:
                    template["metadata"]["annotations"] = kept
                self._recreations.append(
                    _Recreation(
                        due=now + self.config.recreate_delay,
                        template=template,
                        base=str(owner.get("name") or name),
                        exclude=node_name,
                        queue=queued,
                    )
                )
            logger.info("deleted pod %s/%s", namespace, name)
            return pod

    def forget_recreations(self, owner_uids: Collection[str]) -> None:
        """Drop the pending replacements of pods whose controller is gone (``owner_uids``)."""
        with self.store.lock:
            self._recreations = [
                r
                for r in self._recreations
                if not any(
                    as_dict(o).get("uid") in owner_uids
                    for o in as_list(as_dict(r.template.get("metadata")).get("ownerReferences"))
                )
            ]

    def evict(self, namespace: str, name: str, now: float) -> None:
        """The eviction subresource: the pod's PodDisruptionBudget decides
        (``disruption.decide``, after kubernetes pkg/registry/core/pod/storage/eviction.go);
        ``disruption.Refused`` carries the API server's refusal."""
        with self.store.lock:
            pod = self.store.get(PODS, namespace, name)
            if pod is None:
                raise NotFound(f'pods "{name}" not found')
            decision = disruption.decide(pod, self.store.list(PDBS, namespace))
            if decision.budget:
                self.store.mutate(
                    PDBS,
                    namespace,
                    decision.budget,
                    lambda obj: disruption.record_disruption(obj, name, now),
                )
            self.delete_pod(namespace, name, now)

    def update_disruption_budgets(self, now: float) -> None:
        """The disruption controller: every budget's status from the pods it selects
        (``disruption.pdb_status``, after kubernetes pkg/controller/disruption)."""
        with self.store.lock:
            for pdb in self.store.list(PDBS):
                namespace = str(as_dict(pdb.get("metadata")).get("namespace"))
                status = disruption.pdb_status(pdb, self.store.list(PODS, namespace), now)

                def write(obj: JsonObject, status: dict[str, Any] = status) -> None:
                    obj["status"] = status

                self.store.mutate(
                    PDBS, namespace, str(as_dict(pdb.get("metadata")).get("name")), write
                )

    def delete_pods(self, namespace: str, labels: Mapping[str, str], now: float) -> None:
        """Delete pods (no replacement) whose labels include ``labels``; their owner is gone."""
        with self.store.lock:
            for pod in self.store.list(PODS, namespace):
                pod_labels = as_dict(as_dict(pod.get("metadata")).get("labels"))
                if all(pod_labels.get(k) == v for k, v in labels.items()):
                    _, name = str(namespace), str(as_dict(pod.get("metadata")).get("name"))
                    self.delete_pod(namespace, name, now, recreate=False)
            self._recreations = [
                r
                for r in self._recreations
                if not (
                    as_dict(r.template.get("metadata")).get("namespace") == namespace
                    and all(
                        as_dict(as_dict(r.template.get("metadata")).get("labels")).get(k) == v
                        for k, v in labels.items()
                    )
                )
            ]

    def finish_pod(self, namespace: str, name: str, phase: str, now: float) -> None:
        """A pod's containers exit (``phase`` Succeeded or Failed): its devices are free."""
        with self.store.lock:
            pod = self.store.get(PODS, namespace, name)
            if pod is None:
                raise NotFound(f'pods "{name}" not found')
            node_name = str(as_dict(pod.get("spec")).get("nodeName") or "")
            self._release((namespace, name), node_name, now)
            ended = timestamp(now)
            code = 0 if phase == "Succeeded" else 1
            reason = "Completed" if phase == "Succeeded" else "Error"

            def end(obj: JsonObject) -> None:
                status = obj["status"] = as_dict(obj.get("status"))
                status["phase"] = phase
                for container in as_list(status.get("containerStatuses")):
                    container = as_dict(container)
                    started = as_dict(as_dict(container.get("state")).get("running"))
                    container["ready"] = False
                    container["started"] = False
                    container["state"] = {
                        "terminated": {
                            "exitCode": code,
                            "reason": reason,
                            "startedAt": started.get("startedAt", ended),
                            "finishedAt": ended,
                        }
                    }
                for cond in as_list(status.get("conditions")):
                    if as_dict(cond).get("type") in ("Ready", "ContainersReady"):
                        cond["status"] = "False"
                        cond["reason"] = "PodCompleted"
                        cond["lastTransitionTime"] = ended

            self.store.mutate(PODS, namespace, name, end)

    def tick(self, now: float) -> None:
        """Replace deleted pods that are due; Kueue's controllers (pod and job Workloads, the
        scheduling cycle, starting and stopping jobs) and the Job and JobSet controllers; then
        retry every Pending pod and write the queues' status."""
        with self.store.lock:
            due = [r for r in self._recreations if r.due <= now]
            self._recreations = [r for r in self._recreations if r.due > now]
            for recreation in due:
                try:
                    # A replacement is a new pod: Kueue queues it as a new Workload.
                    self.create_pod(
                        recreation.template,
                        recreation.base,
                        now,
                        exclude=recreation.exclude,
                        queue=recreation.queue,
                    )
                except Rejected as exc:
                    # The controller retries, as a ReplicaSet or Job controller does.
                    logger.info("recreating a pod of %s: %s", recreation.base, exc)
                    self._recreations.append(
                        dataclasses.replace(recreation, due=now + self.config.recreate_delay)
                    )
            self.kueue.reconcile_workloads(now)
            self._reconcile_pod_workloads(now)
            self.update_disruption_budgets(now)
            for pod in self.store.list(PODS):
                if kueue_gated(pod) and as_dict(pod.get("status")).get("phase") == "Pending":
                    self._ensure_pod_workload(pod, now)
            self.batch.tick_before_schedule(now)
            self.kueue.schedule(now)
            self.batch.tick_after_schedule(now)
            for pod in self.store.list(PODS):
                spec = as_dict(pod.get("spec"))
                status = as_dict(pod.get("status"))
                if spec.get("nodeName") or status.get("phase") != "Pending":
                    continue
                if kueue_gated(pod):
                    self._admit_queued(pod, now, schedule=False)
                else:
                    self._schedule(pod, now)
            self._retry_sandboxes(now)
            self.kueue.update_status(now)

    # --- metrics -----------------------------------------------------------------------------

    def node_capacities(self) -> list[NodeCapacity]:
        """What each node offers, for OpenCost's idle line; nodes exist from the start."""
        return [
            NodeCapacity(
                node.name,
                node.group.cpus,
                node.group.memory_gib * 2.0**30,
                len(node.gpus),
                self._started,
            )
            for node in self.nodes.values()
        ]

    def _idle_pod(self, pod: PodKey | None) -> bool:
        """Whether the pod is one the configuration says does no work (``idle_pods``)."""
        return pod is not None and any(
            pod[0] == namespace and pod[1].startswith(prefix)
            for namespace, _, prefix in (p.partition("/") for p in self.config.idle_pods)
        )

    def gpu_samples(self) -> list[GpuSample]:
        """One DCGM sample per GPU (per MIG instance on MIG GPUs), with the pod using it; a
        HAMi GPU shows the first of the pods sharing it."""
        samples = []
        with self.store.lock:
            for node in self.nodes.values():
                for gpu in node.gpus:
                    if gpu.mig:
                        samples += [
                            _sample(
                                node,
                                gpu,
                                device.pod,
                                device.container,
                                device,
                                idle=gpu.idle or self._idle_pod(device.pod),
                            )
                            for device in gpu.mig
                        ]
                    else:
                        slot = gpu.slots[0] if gpu.slots else None
                        pod = slot.pod if slot else None
                        samples.append(
                            _sample(
                                node,
                                gpu,
                                pod,
                                slot.container if slot else "",
                                idle=gpu.idle or self._idle_pod(pod),
                            )
                        )
        return samples


def _sample(
    node: SimNode,
    gpu: Gpu,
    pod: PodKey | None,
    container: str,
    device: MigDevice | None = None,
    *,
    idle: bool = False,
) -> GpuSample:
    namespace, name = pod or ("", "")
    return GpuSample(
        hostname=node.name,
        gpu=gpu.index,
        uuid=gpu.uuid,
        pci_bus_id=gpu.pci_bus_id,
        model_name=node.group.model_name,
        driver_version=node.group.driver_version,
        mig_profile=device.profile if device else "",
        mig_instance=device.gi_id if device else None,
        namespace=namespace,
        pod=name,
        container=container,
        busy=pod is not None,
        xid=gpu.xid,
        idle=idle,
        memory_mib=mig_memory_mib(device.profile) if device else gpu.memory_mib,
    )
