"""What the simulator simulates: node groups, topology, timing and seed workloads.

``SimConfig.demo()`` is the fleet of ``gitops.fleet.demo_fleet()`` (16 HGX nodes of 8 H200 in
two NVLink domains) with a few tenant workloads already running, so the demo looks used.
``load_config(path)`` reads another fleet from YAML, for example::

    fleet_name: lab
    nvlink_domains: 1
    node_groups:
      - pool: l40s
        nodes: 2
        product: NVIDIA-L40S
        model_name: NVIDIA L40S
        gpus_per_node: 4
        gpu_memory_mib: 46068
        labels: {ai-factory.io/pool: l40s}
        sriov_resources: {nvidia.com/rdma_ib0: 8}   # fabric VFs per node (multus.py)
      - pool: h200-mig
        nodes: 1
        mode: mig
        mig_config: all-balanced
        mig_profiles: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}
    prices: {cpu_core_hour: 0.031611, ram_gib_hour: 0.004237, gpu_hour: 0.95}
    idle_pods: [lab/notebook-]      # these pods hold their GPUs and do no work
    crd_dir: ../shared/crds

Unknown keys and wrong types are errors naming the key (``node_groups[0].gpus``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

GpuMode = Literal["whole", "mig", "hami", "dra"]
OwnerKind = Literal["Job", "ReplicaSet"]

POOL_LABEL = "ai-factory.io/pool"
# The GPU Operator's per-node switch for its device plugin, "false" on DRA nodes.
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
H200_PRODUCT = "NVIDIA-H200"
H200_MODEL = "NVIDIA H200"
H200_MEMORY_MIB = 143_771
# The per-GPU layout of mig-parted's ``all-balanced`` config on an H200.
H200_ALL_BALANCED = (("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1))


class ConfigError(ValueError):
    """A simulator configuration that cannot be used; the message names the offending keys."""


@dataclass(frozen=True)
class NodeGroup:
    """Identical GPU nodes of one pool, named ``<pool>-01``, ``<pool>-02``, ...

    ``mode``: ``whole`` (the device plugin advertises ``nvidia.com/gpu``), ``mig`` (mixed
    strategy, ``nvidia.com/mig-<profile>``, layout ``mig_profiles`` per GPU), ``hami``
    (HAMi's device plugin advertises ``hami_split`` ``nvidia.com/vgpu`` slots per GPU; memory
    and cores are in its node annotation) or ``dra`` (no device plugin: the NVIDIA DRA driver
    hands the GPUs out through ResourceClaims, and the node advertises no GPU resource).
    ``family`` and ``compute_*`` are derived from known products when left empty; for an
    unknown product they are simply not labelled.
    """

    pool: str
    nodes: int
    product: str = H200_PRODUCT  # GFD nvidia.com/gpu.product
    model_name: str = H200_MODEL  # NVML name, as DCGM's modelName label shows it
    gpus_per_node: int = 8
    gpu_memory_mib: int = H200_MEMORY_MIB
    mode: GpuMode = "whole"
    mig_config: str = ""
    mig_profiles: tuple[tuple[str, int], ...] = ()  # (profile, instances per GPU)
    hami_split: int = 10
    labels: tuple[tuple[str, str], ...] = ()
    family: str = ""
    compute_major: int = 0
    compute_minor: int = 0
    driver_version: str = "570.172.08"
    cuda_version: str = "12.8"
    instance_type: str = "hgx-h200-8gpu"
    cpus: int = 224
    memory_gib: int = 2048
    # SR-IOV VFs per node the SR-IOV network device plugin advertises, by resource name (e.g.
    # nvidia.com/rdma_ib0: 8), for the fabric attachments of dedicated tenants (multus.py).
    sriov_resources: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class SeedWorkload:
    """Pods that run from the start, owned by a Job or a ReplicaSet called ``name``.

    ``resources`` are each pod's container limits; ``pool`` pins the pods to a pool's nodes.
    ``cluster_queue``: Kueue admitted the pods before the simulator started, to that
    ClusterQueue on ResourceFlavor ``flavor`` (the pool's name when empty): the Workload of
    their Job or ReplicaSet holds their requests there, so they count against the tenant's
    quota once its queues are applied. Empty: the pods run outside Kueue. ``priority_class``
    and ``priority``: the WorkloadPriorityClass Kueue resolved for it and its value (the
    simulator starts before Flux applies the classes), so a job of lower priority does not
    preempt it.
    """

    namespace: str
    name: str
    kind: OwnerKind = "Job"
    pods: int = 1
    resources: tuple[tuple[str, str], ...] = ()
    pool: str = ""
    queue: str = "gpu"
    image: str = "nvcr.io/nvidia/pytorch:25.01-py3"
    cluster_queue: str = ""
    flavor: str = ""
    priority_class: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Prices:
    """What the simulator's OpenCost charges, in the units and at the defaults of OpenCost's
    ``configs/default.json`` (USD): per CPU core-hour, per GiB-hour of memory, per GPU-hour."""

    cpu_core_hour: float = 0.031611
    ram_gib_hour: float = 0.004237
    gpu_hour: float = 0.95


@dataclass(frozen=True)
class SimConfig:
    """The simulated fleet and how fast its controllers react (seconds)."""

    node_groups: tuple[NodeGroup, ...] = ()
    nvlink_domains: int = 1
    nodes_per_rack: int = 4
    fleet_name: str = "ai-factory"
    flux_delay: float = 2.0
    ready_delay: float = 1.0
    recreate_delay: float = 1.0
    seed: int = 0
    seed_workloads: tuple[SeedWorkload, ...] = ()
    kubernetes_version: str = "v1.34.1"
    # The CA bundle tenant clusters' API servers trust when they fetch their identity
    # provider's keys (the system roots of the control plane's image, in a real cluster);
    # "" for the system's own.
    oidc_ca_file: str = ""
    # The price table of the OpenCost allocation API the simulator answers.
    prices: Prices = Prices()
    # The CustomResourceDefinitions the simulated API server has installed and serves
    # (``crds``): a directory of CRD YAML, such as the portal's schema directory; "" for none.
    crd_dir: str = ""
    # Watches: how many writes the API keeps for watches to resume from (older ones get 410
    # Gone, as after etcd's compaction), and how often an idle watch gets a BOOKMARK (the API
    # server sends one about every minute; shorter here so a demo shows resumption).
    watch_window: int = 10_000
    watch_bookmark_seconds: float = 5.0
    # notification-controller's generic-hmac Provider: where Kustomization and HelmRelease
    # events are POSTed ("" for nowhere); the HMAC key is given to the Simulator, not here.
    flux_events_address: str = ""
    # How long a pod of a Job runs (simulated seconds) before it succeeds; a pod template's
    # ``sim.ai-factory.io/run-seconds`` annotation overrides it.
    job_seconds: float = 600.0
    # Whether Kueue's Configuration turns fair sharing on (``fairSharing``), as the portal
    # renders it unless the fleet turns it off (``gitops.render.kueue_config``).
    fair_sharing: bool = True
    # Workloads that hold their GPUs and do no work (DCGM reads them as ``fleet_fault idle``
    # does), by ``<namespace>/<pod name prefix>``: a property of what runs, not of a GPU, so
    # it follows the pods wherever they are placed.
    idle_pods: tuple[str, ...] = ()

    @classmethod
    def demo(cls) -> SimConfig:
        """The fleet of ``gitops.fleet.demo_fleet()``, with tenants ``vision`` and
        ``llm-platform`` already using part of it."""
        return cls(
            node_groups=(
                NodeGroup(pool="h200", nodes=8, labels=((POOL_LABEL, "h200"),)),
                NodeGroup(
                    pool="h200-mig",
                    nodes=2,
                    mode="mig",
                    mig_config="all-balanced",
                    mig_profiles=H200_ALL_BALANCED,
                    labels=((POOL_LABEL, "h200-mig"),),
                ),
                NodeGroup(
                    pool="h200-hami",
                    nodes=4,
                    mode="hami",
                    hami_split=10,
                    labels=(
                        (POOL_LABEL, "h200-hami"),
                        ("gpu", "on"),
                        (DEVICE_PLUGIN_LABEL, "false"),
                    ),
                ),
                NodeGroup(
                    pool="h200-dra",
                    nodes=2,
                    mode="dra",
                    labels=((POOL_LABEL, "h200-dra"), (DEVICE_PLUGIN_LABEL, "false")),
                ),
                # Where vCluster control planes and other CPU-only pods run: GPU nodes carry
                # the nvidia.com/gpu taint, which only GPU pods tolerate.
                NodeGroup(
                    pool="system",
                    nodes=2,
                    product="",
                    model_name="",
                    gpus_per_node=0,
                    gpu_memory_mib=0,
                    instance_type="cpu-64c-512g",
                    cpus=64,
                    memory_gib=512,
                    labels=((POOL_LABEL, "system"),),
                ),
            ),
            nvlink_domains=2,
            # vision's endpoint ``caption`` (seeded by ``seed_demo``) is asked nothing: idle
            # reclaim puts it to sleep after its grace, and its tenant wakes it.
            idle_pods=("vision/caption-predictor-",),
            # Every seed workload was admitted by its tenant's Kueue queue, within the shares
            # seed_demo grants (vision: train 16 whole H200s, eval 4 x 1g.18gb, eval-large 1 x
            # 3g.71gb; llm-platform: small, 2 HAMi slots of 14000 MiB and 10% of the cores):
            # what the cluster runs then never exceeds what the tenant's ClusterQueue promises,
            # so the metered history matches the quota charts. Rather than shrinking vision's
            # training run into its 2-GPU serving share (which its endpoint and its portal
            # jobs fill), it has a training share of its own, as a tenant running 16-GPU jobs
            # would. ClusterQueues and priority classes as gitops.render.kueue renders them.
            seed_workloads=(
                SeedWorkload(
                    "vision",
                    "finetune-vit",
                    pods=2,
                    # Within vision's namespace quota (64 CPUs, 512Gi) with room for its
                    # endpoint: the API server counts these pods against it too.
                    resources=(("nvidia.com/gpu", "8"), ("cpu", "16"), ("memory", "128Gi")),
                    pool="h200",
                    cluster_queue="vision",
                    priority_class="training",
                    priority=500,
                ),
                SeedWorkload(
                    "vision",
                    "eval-vit-small",
                    pods=3,
                    resources=(("nvidia.com/mig-1g.18gb", "1"), ("cpu", "2"), ("memory", "32Gi")),
                    pool="h200-mig",
                    cluster_queue="vision",
                    priority_class="batch-low",
                    priority=100,
                ),
                SeedWorkload(
                    "vision",
                    "eval-vit-large",
                    resources=(("nvidia.com/mig-3g.71gb", "1"), ("cpu", "8"), ("memory", "64Gi")),
                    pool="h200-mig",
                    cluster_queue="vision",
                    priority_class="batch-low",
                    priority=100,
                ),
                SeedWorkload(
                    "llm-platform",
                    "chat-small-predictor-6d5f8c7b9c",
                    kind="ReplicaSet",
                    pods=2,
                    # One slot of the share each: the tenant's policy refuses a container
                    # asking more than its largest slot (gitops.render.resources).
                    resources=(
                        ("nvidia.com/vgpu", "1"),
                        ("nvidia.com/gpumem", "14000"),
                        ("nvidia.com/gpucores", "10"),
                        ("cpu", "8"),
                        ("memory", "64Gi"),
                    ),
                    pool="h200-hami",
                    image="docker.io/vllm/vllm-openai:v0.10.1",
                    cluster_queue="llm-platform",
                    priority_class="inference-critical",
                    priority=1000,
                ),
            ),
        )

    def pool(self, name: str) -> NodeGroup | None:
        return next((group for group in self.node_groups if group.pool == name), None)


def validate_config(config: SimConfig) -> None:
    """Raise ``ConfigError`` for values no fleet can have (before any node is built)."""
    problems: list[str] = []
    if not config.node_groups:
        problems.append("node_groups: at least one node group is needed")
    pools = [group.pool for group in config.node_groups]
    for index, group in enumerate(config.node_groups):
        where = f"node_groups[{index}]"
        if pools.count(group.pool) > 1:
            problems.append(f"{where}.pool: pool {group.pool!r} is listed twice")
        if group.nodes < 1 or group.gpus_per_node < 0 or group.gpu_memory_mib < 0:
            problems.append(f"{where}: nodes must be at least 1 and counts not negative")
        if group.mode == "dra" and group.mig_profiles:
            problems.append(f"{where}.mig_profiles: MIG devices through DRA are not simulated")
        if group.mode == "mig" and not group.mig_profiles:
            problems.append(f"{where}.mig_profiles: a MIG group needs its per-GPU layout")
        if group.mode == "hami" and group.hami_split < 1:
            problems.append(f"{where}.hami_split: must be at least 1")
    prices = config.prices
    if min(prices.cpu_core_hour, prices.ram_gib_hour, prices.gpu_hour) < 0:
        problems.append("prices: a price cannot be negative")
    if config.nvlink_domains < 1 or config.nodes_per_rack < 1:
        problems.append("nvlink_domains and nodes_per_rack must be at least 1")
    for index, prefix in enumerate(config.idle_pods):
        if prefix.count("/") != 1 or not all(prefix.split("/")):
            problems.append(f"idle_pods[{index}]: write it as <namespace>/<pod name prefix>")
    for index, workload in enumerate(config.seed_workloads):
        if workload.pool and config.pool(workload.pool) is None:
            problems.append(f"seed_workloads[{index}].pool: no node group {workload.pool!r}")
    if problems:
        raise ConfigError("; ".join(problems))


def load_config(path: str | Path) -> SimConfig:
    """The simulator configuration in the YAML file at ``path``."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    config = _convert(SimConfig, data, "")
    validate_config(config)
    return typing.cast(SimConfig, config)


def _convert(hint: Any, value: object, where: str) -> Any:
    """``value`` from YAML as an instance of the type ``hint`` (dataclasses, tuples, scalars)."""
    label = where or "(file)"
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{label}: expected a mapping")
        fields = {f.name for f in dataclasses.fields(hint)}
        hints = get_type_hints(hint)
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if key not in fields:
                raise ConfigError(f"{path}: unknown key (known: {', '.join(sorted(fields))})")
            kwargs[key] = _convert(hints[key], item, path)
        try:
            return hint(**kwargs)
        except TypeError as exc:  # a required key is missing
            raise ConfigError(f"{label}: {exc}") from exc
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            raise ConfigError(f"{label}: must be one of {', '.join(get_args(hint))}")
        return value
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in get_args(hint) if arg is not type(None)]
        return None if value is None else _convert(options[0], value, where)
    if origin is tuple:
        item_hint = get_args(hint)[0]
        if get_origin(item_hint) is tuple:
            # Pairs (labels, resources, MIG layouts) are written as mappings.
            if not isinstance(value, Mapping):
                raise ConfigError(f"{label}: expected a mapping")
            key_hint, value_hint = get_args(item_hint)
            return tuple(
                (_convert(key_hint, k, f"{where}.{k}"), _convert(value_hint, v, f"{where}.{k}"))
                for k, v in value.items()
            )
        if not isinstance(value, list):
            raise ConfigError(f"{label}: expected a list")
        return tuple(_convert(item_hint, v, f"{where}[{i}]") for i, v in enumerate(value))
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # quantities such as ``cpu: 8`` in resources
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ConfigError(f"{label}: expected {getattr(hint, '__name__', hint)}")
