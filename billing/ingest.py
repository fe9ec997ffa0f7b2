"""From DCGM samples to ledger lines: pure functions, no database and no HTTP.

Both sources end up as ``Point``s, one per GPU (or MIG instance) and time step: Prometheus's
range queries (``points_from_prometheus``) and the portal's own scrapes of a dcgm-exporter
(``parse_exposition``). ``rollup`` turns the points of one window into ``Line``s per
namespace, flavor and workload.

Labels, as the exporter and Prometheus write them (../shared/reference/metering.md):
- the workload is ``exported_namespace``/``exported_pod`` when Prometheus scraped with
  ``honorLabels: false`` (the chart's default: the target's own labels win and the
  exporter's are renamed), else ``namespace``/``pod``;
- the host is ``Hostname`` in every released exporter and ``hostname`` on its master branch;
- a MIG instance carries ``GPU_I_PROFILE`` and ``GPU_I_ID``; there is no MIG UUID label.

Attribution is by namespace only: the tenant is the namespace's owner, never a label on the
pod (``fleet.services.tenant_of``, applied by the service that stores the lines).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from prometheus_client.parser import text_string_to_metric_families

from billing.fractions import FractionError, device_fraction, gpu_equivalents

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
METRICS = (GR_ENGINE_ACTIVE, GPU_UTIL, FB_USED, ENERGY)
MJ_PER_KWH = 3_600_000_000


@dataclass(frozen=True)
class Device:
    """One GPU, or one MIG instance of it, on one host."""

    hostname: str
    uuid: str
    instance: str = ""  # GPU_I_ID
    profile: str = ""  # GPU_I_PROFILE


@dataclass
class Point:
    """What DCGM said of one device at one time step; ``None`` where a metric was missing."""

    at: int
    device: Device
    namespace: str = ""
    pod: str = ""
    gr_engine_active: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    energy_mj: float | None = None


@dataclass(frozen=True)
class NodeInfo:
    """What the ledger needs to know of a node: its flavor and how that hands out GPUs."""

    flavor: str
    mode: str  # whole | mig | hami | dra
    gpu_memory_mib: int
    gpus: int
    product: str = ""  # GFD nvidia.com/gpu.product: what prices are keyed by


@dataclass(frozen=True)
class Holder:
    """A pod known from the synced workloads, for the pods DCGM cannot label (HAMi) and to
    name a pod's workload after its owner."""

    namespace: str
    pod: str
    node: str
    owner_kind: str
    owner_name: str
    gpu_requests: Mapping[str, int]

    @property
    def workload(self) -> str:
        return workload_name(self.owner_kind, self.owner_name, self.pod)


@dataclass
class Line:
    """One ledger line in the making: ``allocated``/``used`` in GPU-seconds."""

    namespace: str
    flavor: str
    workload: str
    gpu_model: str = ""
    mig_profile: str = ""  # "" for whole GPUs and HAMi shares
    # Exact: what a tenant held is what it pays for. The readings (activity, energy) are
    # floats from DCGM and summed as floats: turning each into an exact Fraction cost half
    # the rollup's time (bench/billing_ingest.py) for digits below the ledger's millisecond.
    allocated: Fraction = Fraction(0)
    used: float = 0.0
    step: int = 0
    observed: set[int] = field(default_factory=set)  # the steps sampled
    memory_by_step: dict[int, float] = field(default_factory=dict)
    energy_mj: float = 0.0
    fallback: bool = False

    @property
    def observed_seconds(self) -> int:
        return len(self.observed) * self.step

    @property
    def memory_avg_mib(self) -> float:
        values = list(self.memory_by_step.values())
        return sum(values) / len(values) if values else 0.0

    @property
    def memory_peak_mib(self) -> int:
        return int(max(self.memory_by_step.values(), default=0.0))

    @property
    def energy_kwh(self) -> float:
        return self.energy_mj / MJ_PER_KWH


@dataclass
class Rollup:
    lines: list[Line]
    warnings: list[str]


def workload_name(owner_kind: str, owner_name: str, pod: str) -> str:
    return f"{owner_kind}/{owner_name}" if owner_kind and owner_name else f"Pod/{pod}"


def hostname_of(labels: Mapping[str, str]) -> str:
    return labels.get("Hostname") or labels.get("hostname") or ""


def workload_labels(labels: Mapping[str, str], *, renamed: bool = False) -> tuple[str, str]:
    """(namespace, pod) of the pod the exporter mapped to the device, or ("", "").

    ``renamed``: the series came from a scrape with ``honorLabels: false`` (some series of the
    same query carry ``exported_*``), so the plain labels are the scrape target's own, the
    exporter's pod, on every series, and only ``exported_*`` name a workload."""
    if labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels["exported_pod"]
    if renamed or "exported_namespace" in labels or "exported_container" in labels:
        return "", ""
    return labels.get("namespace", ""), labels.get("pod", "")


def is_renamed(series: Iterable[Mapping[str, str]]) -> bool:
    return any("exported_pod" in labels or "exported_namespace" in labels for labels in series)


def device_of(labels: Mapping[str, str]) -> Device:
    return Device(
        hostname=hostname_of(labels),
        uuid=labels.get("UUID") or labels.get("uuid") or "",
        instance=labels.get("GPU_I_ID", ""),
        profile=labels.get("GPU_I_PROFILE", ""),
    )


def _set(point: Point, metric: str, value: float) -> None:
    if not math.isfinite(value):
        return
    if metric == GR_ENGINE_ACTIVE:
        point.gr_engine_active = value
    elif metric == GPU_UTIL:
        point.gpu_util = value
    elif metric == FB_USED:
        point.fb_used_mib = value
    elif metric == ENERGY:
        point.energy_mj = value


def points_from_series(
    series: Iterable[tuple[str, Mapping[str, str], Iterable[tuple[float, float]]]],
) -> list[Point]:
    """Join (metric, labels, [(time, value)]) into one point per device and time."""
    points: dict[tuple[Device, int], Point] = {}
    series = list(series)
    renamed = {
        metric: is_renamed(labels for name, labels, _ in series if name == metric)
        for metric in {name for name, _, _ in series}
    }
    for metric, labels, values in series:
        device = device_of(labels)
        if not device.uuid:
            continue
        namespace, pod = workload_labels(labels, renamed=renamed[metric])
        for at, value in values:
            key = (device, round(at))
            point = points.get(key)
            if point is None:
                point = points[key] = Point(at=round(at), device=device)
            if pod:
                point.namespace, point.pod = namespace, pod
            _set(point, metric, value)
    return sorted(points.values(), key=lambda p: (p.at, _device_key(p.device)))


def parse_exposition(text: str) -> list[Point]:
    """The devices of one dcgm-exporter ``/metrics`` body, as points at time 0 (the caller
    files them under its scrape slot)."""
    series = []
    for family in text_string_to_metric_families(text):
        if family.name not in METRICS:
            continue
        for sample in family.samples:
            series.append((family.name, dict(sample.labels), [(0.0, float(sample.value))]))
    return points_from_series(series)


def _device_key(device: Device) -> tuple[str, str, str]:
    return (device.hostname, device.uuid, device.instance)


def activity(point: Point) -> tuple[float, bool]:
    """How busy the device was (0-1) and whether that came from the GPU_UTIL fallback."""
    if point.gr_engine_active is not None:
        return min(1.0, max(0.0, point.gr_engine_active)), False
    if point.gpu_util is not None:
        return min(1.0, max(0.0, point.gpu_util / 100)), True
    return 0.0, False


def rollup(
    points: Iterable[Point],
    *,
    start: int,
    end: int,
    step: int,
    nodes: Mapping[str, NodeInfo],
    holders: Iterable[Holder],
) -> Rollup:
    """Lines for the window ``[start, end)``: each point at ``start <= at < end`` stands for
    ``step`` seconds. Points before ``start`` only give the energy counters their baseline.

    A device with a pod label is that pod's (whole GPU, or a MIG instance's slices). On a
    HAMi node DCGM's pod labels do not tell the shares apart (the exporter maps a device to
    one pod, and HAMi's pods lose theirs: Project-HAMi/HAMi#112), so each synced pod on the
    node holds its requested fraction for every step the node's GPUs were sampled, with its
    fraction of the mean activity, memory and energy of the node's GPUs that hold a context
    (framebuffer in use).
    """
    warnings: list[str] = []
    lines: dict[tuple[str, str, str, str], Line] = {}
    owners = {(h.namespace, h.pod): h for h in holders}
    by_node: dict[str, list[Holder]] = defaultdict(list)
    for holder in owners.values():
        by_node[holder.node].append(holder)
    unknown_hosts: set[str] = set()

    # Energy per physical GPU and step: the counter's increase since the previous sample,
    # a decrease being a reset (the driver reloaded: the new value is all since then).
    energy_step: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    last_energy: dict[tuple[str, str], tuple[int, float]] = {}
    ordered = sorted(points, key=lambda p: (p.at, _device_key(p.device)))
    for point in ordered:
        if point.energy_mj is None:
            continue
        gpu = (point.device.hostname, point.device.uuid)
        previous = last_energy.get(gpu)
        if previous is not None and previous[0] == point.at:
            continue  # a MIG instance repeats its GPU's counter
        if previous is not None:
            delta = point.energy_mj - previous[1]
            energy_step[gpu][point.at] = delta if delta >= 0 else point.energy_mj
        last_energy[gpu] = (point.at, point.energy_mj)

    # Allocation per GPU and step, to share the GPU's energy among its holders.
    hami_steps: dict[str, dict[int, list[Point]]] = defaultdict(lambda: defaultdict(list))
    shares: dict[tuple[str, str, int], list[tuple[Line, Fraction]]] = defaultdict(list)
    for point in ordered:
        if not start <= point.at < end:
            continue
        node = nodes.get(point.device.hostname)
        if node is None:
            unknown_hosts.add(point.device.hostname)
        if node is not None and node.mode == "hami":
            hami_steps[point.device.hostname][point.at].append(point)
            continue
        if not point.pod:
            continue
        try:
            fraction = device_fraction(point.device.profile)
        except FractionError as exc:
            warnings.append(f"{point.device.hostname} {point.device.uuid}: {exc}")
            continue
        owner = owners.get((point.namespace, point.pod))
        workload = owner.workload if owner else workload_name("", "", point.pod)
        line = _line(
            lines,
            point.namespace,
            node.flavor if node else "",
            workload,
            step,
            gpu_model=node.product if node else "",
            mig_profile=point.device.profile,
        )
        busy, fallback = activity(point)
        line.allocated += fraction * step
        line.used += float(fraction) * step * busy
        line.fallback |= fallback
        line.observed.add(point.at)
        if point.fb_used_mib is not None:
            line.memory_by_step[point.at] = line.memory_by_step.get(point.at, 0.0) + float(
                point.fb_used_mib
            )
        shares[(point.device.hostname, point.device.uuid, point.at)].append((line, fraction))

    for (hostname, uuid, at), holding in shares.items():
        increase = energy_step.get((hostname, uuid), {}).get(at)
        if increase is None:
            continue
        for line, fraction in holding:
            line.energy_mj += increase * float(fraction)

    for hostname, steps in hami_steps.items():
        node = nodes[hostname]
        for holder in by_node.get(hostname, []):
            try:
                fraction = gpu_equivalents(
                    holder.gpu_requests, mode="hami", gpu_memory_mib=node.gpu_memory_mib
                )
            except FractionError as exc:
                warnings.append(f"{holder.namespace}/{holder.pod}: {exc}")
                continue
            if not fraction:
                continue
            line = _line(
                lines, holder.namespace, node.flavor, holder.workload, step, gpu_model=node.product
            )
            for at, sampled in steps.items():
                # The GPUs holding a context (framebuffer in use) are the ones the shares
                # run on; an idle card of the node says nothing of them.
                held = [p for p in sampled if p.fb_used_mib] or sampled
                busy_values = [activity(p) for p in held]
                mean = sum(b for b, _ in busy_values) / len(busy_values)
                line.allocated += fraction * step
                line.used += float(fraction) * step * mean
                line.fallback |= any(f for _, f in busy_values)
                line.observed.add(at)
                memory = [p.fb_used_mib for p in held if p.fb_used_mib is not None]
                if memory:
                    share = sum(memory) / len(memory) * float(fraction)
                    line.memory_by_step[at] = line.memory_by_step.get(at, 0.0) + share
                energy = [
                    energy_step[(hostname, p.device.uuid)][at]
                    for p in held
                    if at in energy_step.get((hostname, p.device.uuid), {})
                ]
                if energy:
                    line.energy_mj += sum(energy) / len(energy) * float(fraction)

    for hostname in sorted(unknown_hosts):
        warnings.append(
            f"node {hostname or '(no hostname label)'} is not in the inventory; "
            "its usage has no flavor"
        )
    ordered_lines = sorted(
        lines.values(), key=lambda x: (x.namespace, x.flavor, x.mig_profile, x.workload)
    )
    return Rollup(ordered_lines, warnings)


def _line(
    lines: dict[tuple[str, str, str, str], Line],
    namespace: str,
    flavor: str,
    workload: str,
    step: int,
    *,
    gpu_model: str = "",
    mig_profile: str = "",
) -> Line:
    key = (namespace, flavor, mig_profile, workload)
    line = lines.get(key)
    if line is None:
        line = lines[key] = Line(
            namespace, flavor, workload, gpu_model=gpu_model, mig_profile=mig_profile, step=step
        )
    return line
