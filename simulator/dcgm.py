"""dcgm-exporter's text exposition for the simulated fleet's GPUs.

The shape is dcgm-exporter's (NVIDIA/dcgm-exporter), so Prometheus, the portal's queries and
OpenCost read the simulator as they would a real fleet:

- labels in the exporter's order: ``gpu, UUID, pci_bus_id, device, modelName``, for a MIG
  instance ``GPU_I_PROFILE, GPU_I_ID``, the hostname, ``DCGM_FI_DRIVER_VERSION``, and only
  on a GPU a pod holds ``namespace, pod, container``
  (internal/pkg/rendermetrics/render_metrics.go);
- integer fields printed with ``%d``, doubles with ``%f`` (internal/pkg/collector);
- a MIG instance repeats its GPU's device fields (clocks, temperature, power, energy, XID)
  and has its own profiling and framebuffer fields; ``GPU_UTIL`` and ``MEM_COPY_UTIL``, which
  DCGM leaves blank for instances, are not written, as the exporter skips blank values;
- the hostname label is ``Hostname`` in every released exporter and ``hostname`` on its
  master branch, so both are offered (and ``""`` drops it, like ``--no-hostname``).

Every value is a function of the GPU's uuid and the time: two scrapes at the same moment
agree, and a series drifts plausibly from one scrape to the next.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DEFAULT_MEMORY_MIB = 81920
# A GPU has seven MIG compute slices; a profile "3g.40gb" holds three of them.
MIG_SLICES_PER_GPU = 7
MIG_PROFILE = re.compile(r"(?P<slices>[1-7])g\.(?P<gb>\d+)gb")
FALLEN_OFF_XID = 79

# An H100/H200-class SXM card: clocks in MHz, power in W.
SM_CLOCK_IDLE = 345
SM_CLOCK_MAX = 1980
MEM_CLOCK = 2619
POWER_IDLE = 70.0
POWER_MAX = 700.0
TEMPERATURE_IDLE = 32
# The energy counter runs at a mean draw with an hourly swing well below it, so it only grows.
ENERGY_MEAN_W = 300.0
ENERGY_SWING_W = 150.0
ENERGY_PERIOD_S = 3600.0
# Up to ~28 kWh already counted at the epoch, different for every GPU.
ENERGY_AT_EPOCH_MJ = 10**11
# Utilisation drifts on two waves, half an hour and seven minutes long.
SLOW_PERIOD_S = 1800.0
FAST_PERIOD_S = 420.0
BUSY_RANGE = (55.0, 98.0)
IDLE_RANGE = (0.0, 3.0)


@dataclass(frozen=True)
class GpuSample:
    """One GPU, or one MIG instance of it, as the exporter would see it at a scrape."""

    hostname: str
    gpu: int
    uuid: str
    pci_bus_id: str
    model_name: str
    driver_version: str
    mig_profile: str = ""
    mig_instance: int | None = None
    namespace: str = ""
    pod: str = ""
    container: str = ""
    busy: bool = False  # a workload is placed on it
    xid: int = 0  # last XID, 0 = none
    idle: bool = False  # the ``idle`` fault: placed but doing nothing
    memory_mib: int = 0  # framebuffer of the GPU or MIG instance (0 = unknown -> 81920)

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_profile) or self.mig_instance is not None


@dataclass(frozen=True)
class _Reading:
    """What DCGM would report for one sample: its own load and its GPU's."""

    util: float  # percent, this GPU or instance
    device_util: float  # percent, the whole physical GPU
    memory_mib: int
    busy: bool
    xid: int
    uuid: str
    key: str  # the uuid, or uuid/instance for a MIG instance
    now: float


@dataclass(frozen=True)
class _Family:
    name: str
    kind: str
    help: str
    value: Callable[[_Reading], str]
    device_only: bool = False  # blank in DCGM for a MIG instance


def utilisation(uuid: str, now: float, busy: bool) -> float:
    """Percent busy at ``now``: 55-98 with a workload, 0-3 without, drifting over minutes in a
    phase of the GPU's own (from its uuid), so the fleet's GPUs do not move in step."""
    slow = math.sin(2 * math.pi * (now / SLOW_PERIOD_S + _unit(uuid, "slow")))
    fast = math.sin(2 * math.pi * (now / FAST_PERIOD_S + _unit(uuid, "fast")))
    wave = 0.7 * slow + 0.3 * fast
    low, high = BUSY_RANGE if busy else IDLE_RANGE
    return low + (high - low) * (wave + 1) / 2


def render_exposition(
    samples: Iterable[GpuSample], now: float, *, hostname_label: str = "Hostname"
) -> str:
    """The exporter's ``/metrics`` body for ``samples`` at unix time ``now``."""
    readings = _readings(list(samples), now)
    lines: list[str] = []
    for family in FAMILIES:
        rows = [
            f"{family.name}{{{_labels(sample, hostname_label)}}} {family.value(reading)}"
            for sample, reading in readings
            if not (family.device_only and sample.is_mig)
        ]
        lines += _family_block(family.name, family.kind, family.help, rows)
    xid_rows = [
        f"{XID_COUNT}{{{_labels(sample, hostname_label, xid=reading.xid)}}} 1"
        for sample, reading in readings
        if reading.xid
    ]
    lines += _family_block(XID_COUNT, "gauge", XID_COUNT_HELP, xid_rows)
    return "\n".join(lines) + "\n" if lines else ""


def _readings(samples: list[GpuSample], now: float) -> list[tuple[GpuSample, _Reading]]:
    # A MIG instance reports its GPU's device fields, so the instances of one GPU are summed
    # into the GPU's load first: each busy slice adds its share of the seven.
    groups: dict[tuple[str, str], list[GpuSample]] = {}
    for sample in samples:
        groups.setdefault((sample.hostname, sample.uuid), []).append(sample)
    readings = []
    for sample in samples:
        group = groups[(sample.hostname, sample.uuid)]
        xid = max(member.xid for member in group)
        own = _own_util(sample, now, xid)
        if any(member.is_mig for member in group):
            slices = [_slices(member) for member in group]
            loads = sum(_own_util(m, now, xid) * s for m, s in zip(group, slices, strict=True))
            device = loads / max(MIG_SLICES_PER_GPU, sum(slices))
        else:
            device = max(_own_util(member, now, xid) for member in group)
        readings.append(
            (
                sample,
                _Reading(
                    util=own,
                    device_util=device,
                    memory_mib=_memory(sample),
                    busy=sample.busy,
                    xid=xid,
                    uuid=sample.uuid,
                    key=_key(sample),
                    now=now,
                ),
            )
        )
    return readings


def _own_util(sample: GpuSample, now: float, xid: int) -> float:
    # A GPU that fell off the bus does no work, whatever was placed on it.
    # An idle workload (the ``idle`` fault) holds the GPU and reads as an empty one.
    if xid == FALLEN_OFF_XID:
        return 0.0
    return utilisation(_key(sample), now, sample.busy and not sample.idle)


def _key(sample: GpuSample) -> str:
    if not sample.is_mig:
        return sample.uuid
    instance = sample.mig_profile if sample.mig_instance is None else sample.mig_instance
    return f"{sample.uuid}/{instance}"


def _slices(sample: GpuSample) -> int:
    match = MIG_PROFILE.match(sample.mig_profile)
    return int(match["slices"]) if match else 1


def _memory(sample: GpuSample) -> int:
    if sample.memory_mib:
        return sample.memory_mib
    match = MIG_PROFILE.match(sample.mig_profile)
    return int(match["gb"]) * 1024 if match else DEFAULT_MEMORY_MIB


def _labels(sample: GpuSample, hostname_label: str, *, xid: int = 0) -> str:
    pairs: list[tuple[str, str]] = [
        ("gpu", str(sample.gpu)),
        ("UUID", sample.uuid),
        ("pci_bus_id", sample.pci_bus_id),
        ("device", f"nvidia{sample.gpu}"),
        ("modelName", sample.model_name),
    ]
    if sample.is_mig:
        instance = "" if sample.mig_instance is None else str(sample.mig_instance)
        pairs += [("GPU_I_PROFILE", sample.mig_profile), ("GPU_I_ID", instance)]
    if hostname_label:
        pairs.append((hostname_label, sample.hostname))
    pairs.append(("DCGM_FI_DRIVER_VERSION", sample.driver_version))
    if sample.pod:
        pairs += [
            ("namespace", sample.namespace),
            ("pod", sample.pod),
            ("container", sample.container),
        ]
    if xid:
        pairs.append(("xid", str(xid)))
    return ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family_block(name: str, kind: str, help_text: str, rows: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows] if rows else []


def _unit(key: str, salt: str) -> float:
    """A stable number in [0, 1) for ``key`` (``hash()`` changes with every process)."""
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _int(value: float) -> str:
    # DCGM's int64 fields: the exporter prints them with %d.
    return str(int(value))


def _double(value: float) -> str:
    # DCGM's double fields: the exporter prints them with %f.
    return f"{value:f}"


def _sm_clock(r: _Reading) -> float:
    # Clocks rise with the first bit of load and ease off near full power.
    boost = SM_CLOCK_IDLE + (SM_CLOCK_MAX - SM_CLOCK_IDLE) * min(1.0, r.device_util / 25)
    return boost - 200 * max(0.0, r.device_util - 80) / 20


def _temperature(r: _Reading) -> float:
    return TEMPERATURE_IDLE + 0.45 * r.device_util + 3 * _unit(r.uuid, "temperature")


def _power(r: _Reading) -> float:
    load = (r.device_util / 100) ** 1.3
    return POWER_IDLE + (POWER_MAX - POWER_IDLE - 10) * load + 10 * _unit(r.uuid, "power")


def _energy(r: _Reading) -> float:
    """mJ since "boot": the integral of a draw that swings around its mean. It does not follow
    the load, since a stateless exporter cannot integrate a history it does not keep and a
    counter must not go back when a pod comes or goes."""
    angle = 2 * math.pi * (r.now / ENERGY_PERIOD_S + _unit(r.uuid, "energy"))
    swing = ENERGY_SWING_W * ENERGY_PERIOD_S / (2 * math.pi) * math.sin(angle)
    return 1000 * (ENERGY_MEAN_W * r.now + swing) + ENERGY_AT_EPOCH_MJ * _unit(r.uuid, "boot")


def _dram(r: _Reading) -> float:
    return r.util / 100 * (0.4 + 0.3 * _unit(r.key, "dram"))


def _fb_used(r: _Reading) -> int:
    # Inference servers reserve most of the memory up front and a little more under load.
    return int(r.memory_mib * (0.35 + 0.6 * r.util / 100)) if r.busy else 0


FAMILIES = (
    _Family(
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency (in MHz).",
        lambda r: _int(_sm_clock(r)),
    ),
    _Family(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda r: _int(MEM_CLOCK),
    ),
    _Family(
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        "GPU temperature (in C).",
        lambda r: _int(_temperature(r)),
    ),
    _Family(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        lambda r: _double(_power(r)),
    ),
    _Family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda r: _int(_energy(r)),
    ),
    _Family(
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        "GPU utilization (in %).",
        lambda r: _int(round(r.util)),
        device_only=True,
    ),
    _Family(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        lambda r: _int(round(100 * _dram(r))),
        device_only=True,
    ),
    _Family(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        lambda r: _int(r.xid),
    ),
    _Family(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        lambda r: _int(r.memory_mib - _fb_used(r)),
    ),
    _Family(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        lambda r: _int(_fb_used(r)),
    ),
    _Family(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        lambda r: _double(r.util / 100),
    ),
    _Family(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        # The exporter's wording: "(in %)" although the value is a ratio.
        "Ratio of cycles the device memory interface is active sending or receiving data (in %).",
        lambda r: _double(_dram(r)),
    ),
)
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_COUNT_HELP = "Count of XID errors within the XID count window."
