"""OpenCost's allocation API for the simulated fleet, from its own placements and prices.

``GET /allocation/compute`` (and ``/allocation``) with ``window``, ``aggregate=namespace``,
``step``, ``accumulate`` and ``includeIdle`` answers as OpenCost does
(opencost ``pkg/costmodel/aggregation.go`` ComputeAllocationHandler, ``router.go``):

- the envelope ``{"code":200,"status":"success","data":[{<namespace>: Allocation}, ...]}``,
  one map per step; an error is ``{"code":400,"status":"","data":null,"message":...}``,
  except a bad ``window`` or ``aggregate``, which ``http.Error`` answers in plain text;
- windows as ``core/pkg/opencost/window.go`` parseWindow reads them (UTC): ``today``,
  ``yesterday``, ``week``, ``lastweek``, ``month``, ``lastmonth``; ``<n>m|h|d|w`` back from
  now, where days and weeks are rounded forward to midnight; ``<unix>,<unix>`` (or ``-``);
  ``<RFC3339>,<RFC3339>``;
- floats rounded to 5 decimals, NaN and Inf written as ``null`` (``allocation_json.go``).

What is priced: every pod's CPU and memory requests (limits where no request is set, as the
API server defaults them) for the time it was placed, at ``SimConfig.prices`` in the units of
OpenCost's ``configs/default.json`` (per core-hour, per GiB-hour, per GPU-hour). GPUs are
counted as OpenCost counts them: ``nvidia.com/gpu`` requests only (``pkg/costmodel``
costmodel.go), so MIG slices, HAMi shares and DRA claims cost nothing here and their GPUs
show up as idle, which is exactly the blind spot the portal's own GPU ledger corrects. The
simulator measures no CPU or memory use, so usage averages and efficiencies are 0. Storage,
network and load balancers are not simulated and cost 0. Only ``aggregate=namespace`` is
served.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from simulator.config import Prices

HOUR = 3600.0
DAY = 86400.0
GIB = float(2**30)
MAX_STEPS = 10_000
IDLE = "__idle__"
_DURATION = re.compile(r"^(\d+)(m|h|d|w)$")
_STEP = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNIX_PAIR = re.compile(r"^(\d+)[,-](\d+)$")
_RFC3339 = r"\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ"
_RFC_PAIR = re.compile(rf"^({_RFC3339}),({_RFC3339})$")
_UNITS = {"s": 1.0, "m": 60.0, "h": HOUR, "d": DAY, "w": 7 * DAY}
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


class BadWindow(ValueError):
    """A ``window`` OpenCost would refuse (answered in plain text)."""


class BadRequest(ValueError):
    """Another parameter OpenCost would refuse (answered in the error envelope)."""


@dataclass
class Placement:
    """A pod on a node from ``start`` until ``end`` (None: still there), and its requests."""

    namespace: str
    pod: str
    node: str
    cpu_cores: float
    ram_bytes: float
    gpus: int
    start: float
    end: float | None = None


@dataclass(frozen=True)
class NodeCapacity:
    """What a node offers, priced as a whole from ``since`` (the simulator's start)."""

    name: str
    cpu_cores: float
    ram_bytes: float
    gpus: int
    since: float


def parse_window(window: str, now: float) -> tuple[float, float]:
    """``window`` as (start, end) unix seconds, the way OpenCost's parseWindow reads it."""
    moment = datetime.fromtimestamp(now, UTC)
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    named = {
        "today": (midnight, midnight + timedelta(days=1)),
        "yesterday": (midnight - timedelta(days=1), midnight),
        # Weeks start on Sunday (Go's Weekday: Sunday is 0).
        "week": (midnight - timedelta(days=(moment.weekday() + 1) % 7), moment),
        "lastweek": (
            midnight - timedelta(days=(moment.weekday() + 1) % 7 + 7),
            midnight - timedelta(days=(moment.weekday() + 1) % 7),
        ),
        "month": (midnight.replace(day=1), moment),
    }
    if window in named:
        start, end = named[window]
        return start.timestamp(), end.timestamp()
    if window == "lastmonth":
        end = midnight.replace(day=1)
        start = (end - timedelta(days=1)).replace(day=1)
        return start.timestamp(), end.timestamp()
    match = _DURATION.match(window)
    if match:
        unit = _UNITS[match[2]]
        start_at, end_at = now - int(match[1]) * unit, now
        if match[2] in ("d", "w"):
            # "The past 7 days" is today and the six before it, midnight to midnight UTC.
            end_at = math.floor(end_at / DAY) * DAY + DAY
            start_at = math.floor(start_at / DAY) * DAY + DAY
        return start_at, end_at
    match = _UNIX_PAIR.match(window)
    if match:
        return float(match[1]), float(match[2])
    match = _RFC_PAIR.match(window)
    if match:
        return _rfc3339(match[1]), _rfc3339(match[2])
    raise BadWindow(f"illegal window: {window}")


def _rfc3339(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError as exc:
        raise BadWindow(f"illegal window: {text}") from exc


def parse_step(step: str) -> float:
    """A step such as ``1h``, ``30m`` or ``1d`` in seconds."""
    match = _STEP.match(step)
    seconds = float(match[1]) * _UNITS[match[2]] if match else 0.0
    if seconds <= 0:
        raise BadRequest(f"Invalid step parameter: illegal duration: {step!r}")
    return seconds


def accumulate_step(value: str) -> float | None:
    """The step that ``accumulate`` implies: None (keep ``step``), ``math.inf`` (the whole
    window) or a period; an accumulated set of linear costs equals one set that long."""
    value = value.lower()
    if value in ("", "false", "0", "none"):
        return None
    if value in ("true", "1", "all"):
        return math.inf
    periods = {"hour": HOUR, "day": DAY, "week": 7 * DAY}
    if value in periods:
        return periods[value]
    raise BadRequest(
        f"Invalid 'accumulateBy' parameter: {value!r} is not served by the simulator "
        "(true, false, all, hour, day or week)"
    )


def allocation_sets(
    *,
    cluster: str,
    placements: Iterable[Placement],
    nodes: Iterable[NodeCapacity],
    prices: Prices,
    window: tuple[float, float],
    step: float,
    now: float,
    include_idle: bool,
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> list[dict[str, Any]]:
    """One map of namespace -> allocation per step of ``window``; nothing is counted past
    ``now`` (a window reaching into the future ends, in effect, now)."""
    start, end = window
    if end < start:
        raise BadRequest(f"bad request - illegal window: [{_rfc(start)}, {_rfc(end)})")
    if step != math.inf and (end - start) / step > MAX_STEPS:
        raise BadRequest(f"Invalid step parameter: more than {MAX_STEPS} steps in the window")
    placed = list(placements)
    capacity = list(nodes)
    sets = []
    step_start = start
    while step_start < end:
        step_end = end if step == math.inf else min(step_start + step, end)
        sets.append(
            _one_set(
                cluster,
                placed,
                capacity,
                prices,
                (step_start, step_end),
                now,
                include_idle,
                namespace_labels,
            )
        )
        step_start = step_end
    return sets


@dataclass
class _Sum:
    start: float = math.inf
    end: float = -math.inf
    cpu_core_hours: float = 0.0
    ram_byte_hours: float = 0.0
    gpu_hours: float = 0.0

    def add(self, start: float, end: float, cpu: float, ram: float, gpus: float) -> None:
        hours = (end - start) / HOUR
        self.start, self.end = min(self.start, start), max(self.end, end)
        self.cpu_core_hours += cpu * hours
        self.ram_byte_hours += ram * hours
        self.gpu_hours += gpus * hours


def _one_set(
    cluster: str,
    placements: list[Placement],
    nodes: list[NodeCapacity],
    prices: Prices,
    window: tuple[float, float],
    now: float,
    include_idle: bool,
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    window_start, window_end = window
    sums: dict[str, _Sum] = {}
    for placement in placements:
        start = max(window_start, placement.start)
        end = min(window_end, now, now if placement.end is None else placement.end)
        if end <= start:
            continue
        sums.setdefault(placement.namespace, _Sum()).add(
            start, end, placement.cpu_cores, placement.ram_bytes, placement.gpus
        )
    result: dict[str, Any] = {}
    for namespace, total in sorted(sums.items()):
        properties: dict[str, Any] = {"cluster": cluster, "namespace": namespace}
        labels = namespace_labels.get(namespace)
        if labels:
            # OpenCost reads labels through Prometheus, which sanitises their names.
            properties["namespaceLabels"] = {
                _LABEL_CHARS.sub("_", key): value for key, value in labels.items()
            }
        result[namespace] = _allocation(namespace, properties, window, total, prices)
    if include_idle:
        idle = _idle(nodes, window, now, sums.values())
        if idle is not None:
            result[IDLE] = _allocation(IDLE, {"cluster": cluster}, window, idle, prices)
    return result


def _idle(
    nodes: list[NodeCapacity], window: tuple[float, float], now: float, used: Iterable[_Sum]
) -> _Sum | None:
    """The capacity no pod requested: the nodes' core-, byte- and GPU-hours less the pods'."""
    capacity = _Sum()
    for node in nodes:
        start, end = max(window[0], node.since), min(window[1], now)
        if end > start:
            capacity.add(start, end, node.cpu_cores, node.ram_bytes, node.gpus)
    if capacity.end <= capacity.start:
        return None
    for total in used:
        capacity.cpu_core_hours -= total.cpu_core_hours
        capacity.ram_byte_hours -= total.ram_byte_hours
        capacity.gpu_hours -= total.gpu_hours
    capacity.cpu_core_hours = max(0.0, capacity.cpu_core_hours)
    capacity.ram_byte_hours = max(0.0, capacity.ram_byte_hours)
    capacity.gpu_hours = max(0.0, capacity.gpu_hours)
    return capacity


def _allocation(
    name: str,
    properties: dict[str, Any],
    window: tuple[float, float],
    total: _Sum,
    prices: Prices,
) -> dict[str, Any]:
    minutes = (total.end - total.start) / 60
    hours = minutes / 60
    cpu_cost = total.cpu_core_hours * prices.cpu_core_hour
    ram_cost = total.ram_byte_hours / GIB * prices.ram_gib_hour
    gpu_cost = total.gpu_hours * prices.gpu_hour
    cpu_cores = _per_hour(total.cpu_core_hours, hours)
    ram_bytes = _per_hour(total.ram_byte_hours, hours)
    gpus = _per_hour(total.gpu_hours, hours)
    values: dict[str, Any] = {
        "name": name,
        "properties": properties,
        "window": {"start": _rfc(window[0]), "end": _rfc(window[1])},
        "start": _rfc(total.start),
        "end": _rfc(total.end),
        "minutes": minutes,
        "cpuCores": cpu_cores,
        "cpuCoreRequestAverage": cpu_cores,
        "cpuCoreUsageAverage": 0,
        "cpuCoreHours": total.cpu_core_hours,
        "cpuCost": cpu_cost,
        "cpuCostAdjustment": 0,
        "cpuCostIdle": 0,
        "cpuEfficiency": 0,
        "gpuCount": gpus,
        "gpuRequestAverage": gpus,
        "gpuUsageAverage": 0,
        "gpuHours": total.gpu_hours,
        "gpuCost": gpu_cost,
        "gpuCostAdjustment": 0,
        "gpuCostIdle": 0,
        "gpuEfficiency": 0,
        "networkTransferBytes": 0,
        "networkReceiveBytes": 0,
        "networkCost": 0,
        "networkCrossZoneCost": 0,
        "networkCrossRegionCost": 0,
        "networkInternetCost": 0,
        "networkCostAdjustment": 0,
        "loadBalancerCost": 0,
        "loadBalancerCostAdjustment": 0,
        "pvBytes": 0,
        "pvByteHours": 0,
        "pvCost": 0,
        "pvs": None,
        "pvCostAdjustment": 0,
        "ramBytes": ram_bytes,
        "ramByteRequestAverage": ram_bytes,
        "ramByteUsageAverage": 0,
        "ramByteHours": total.ram_byte_hours,
        "ramCost": ram_cost,
        "ramCostAdjustment": 0,
        "ramCostIdle": 0,
        "ramEfficiency": 0,
        "externalCost": 0,
        "sharedCost": 0,
        "totalCost": cpu_cost + ram_cost + gpu_cost,
        # CPU and RAM only, weighted by cost (allocation.go TotalEfficiency); nothing is used.
        "totalEfficiency": 0,
        "rawAllocationOnly": None,
        "proportionalAssetResourceCosts": {},
        "lbAllocations": None,
        "sharedCostBreakdown": {},
    }
    return {key: _rounded(value) for key, value in values.items()}


def _per_hour(amount: float, hours: float) -> float:
    return amount / hours if hours > 0 else math.nan


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 5) if math.isfinite(value) else None
    return value


def _rfc(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def envelope(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"code": 200, "status": "success", "data": data}


def to_json(payload: Any) -> bytes:
    """``payload`` as Go's encoding/json writes it: floats in plain decimal notation (``0.00004``
    where Python would write ``4e-05``) and without a ``.0`` on whole numbers."""
    return _encode(payload).encode()


def _encode(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, float):
        return _go_float(value)
    return json.dumps(value)


def _go_float(value: float) -> str:
    # Go's encoding/json: %f-style below 1e21 (and above 1e-6, which 5 decimals guarantee).
    if not math.isfinite(value):
        return "null"
    if abs(value) >= 1e21:
        return repr(value)
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def error_envelope(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "status": "", "data": None, "message": f"Error: {message}"}


# --- quantities -------------------------------------------------------------------------------

_SUFFIXES = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def quantity(value: object) -> float:
    """A Kubernetes quantity (``500m``, ``16``, ``128Gi``) as a number; unreadable is 0."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return 0.0
    return float(match[1]) * _SUFFIXES[match[2] or ""]


def pod_requests(spec: Mapping[str, Any]) -> tuple[float, float, int]:
    """CPU cores, memory bytes and ``nvidia.com/gpu`` of a pod's containers: requests, else
    limits (the API server copies a limit into a missing request)."""
    cpu = ram = 0.0
    gpus = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        cpu += quantity(requests.get("cpu", limits.get("cpu", 0)))
        ram += quantity(requests.get("memory", limits.get("memory", 0)))
        gpus += int(quantity(requests.get("nvidia.com/gpu", limits.get("nvidia.com/gpu", 0))))
    return cpu, ram, gpus
