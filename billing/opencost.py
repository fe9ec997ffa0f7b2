"""OpenCost's allocation API: CPU, RAM, storage and network cost per namespace.

The portal asks ``GET /allocation/compute?window=...&aggregate=namespace&step=...``
(opencost ``pkg/costmodel/router.go``, ``aggregation.go`` ComputeAllocationHandler) and reads
the answer into plain dataclasses: one ``AllocationSet`` per step, one ``CostLine`` per
namespace in it. Numbers are read as ``Decimal`` straight from the JSON text, so a cost of
``1.43086`` stays exactly that (OpenCost rounds every float to 5 decimals and writes NaN or
Inf as ``null``, ``core/pkg/opencost/allocation_json.go``).

Cost is attributed by namespace only (``attribute``): a tenant's namespace is named after the
tenant, labels are never read, the platform's namespaces are the platform's and OpenCost's
``__idle__`` / ``__unallocated__`` lines belong to nobody. OpenCost's GPU columns are kept on
each line but left out of every tenant total: OpenCost reads only ``nvidia.com/gpu`` requests,
so it bills a MIG slice or a HAMi share as a whole GPU, or not at all (opencost#3828); the
portal's own GPU ledger prices GPUs instead (``merge_gpu``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal

import requests
from django.conf import settings

from fleet.services import tenant_of

IDLE = "__idle__"
UNALLOCATED = "__unallocated__"
UNMOUNTED = "__unmounted__"
FILTERED = "__filtered__"
SPECIAL_KEYS = frozenset({IDLE, UNALLOCATED, UNMOUNTED, FILTERED})
ZERO = Decimal(0)
CENT = Decimal("0.01")

OwnerKind = Literal["tenant", "platform", "idle", "unattributed"]


class OpenCostError(Exception):
    """OpenCost could not be asked, or its answer cannot be read; the message says which."""


@dataclass(frozen=True)
class CostLine:
    """One namespace (or special key) over one step, as OpenCost reports it.

    Each cost includes its ``*CostAdjustment`` (OpenCost's ``totalCost`` does too).
    Efficiencies are ``None`` where OpenCost wrote ``null`` (a NaN: nothing requested).
    """

    name: str
    window_start: datetime
    window_end: datetime
    start: datetime
    end: datetime
    minutes: Decimal
    cpu_core_hours: Decimal
    ram_byte_hours: Decimal
    gpu_hours: Decimal
    cpu_cost: Decimal
    ram_cost: Decimal
    pv_cost: Decimal
    network_cost: Decimal
    load_balancer_cost: Decimal
    shared_cost: Decimal
    external_cost: Decimal
    gpu_cost: Decimal  # OpenCost's whole-GPU view; never in a tenant's total
    total_cost: Decimal  # OpenCost's own total, GPU included
    cpu_efficiency: Decimal | None
    ram_efficiency: Decimal | None
    total_efficiency: Decimal | None

    @property
    def cost_without_gpu(self) -> Decimal:
        """What the portal takes from OpenCost: everything but its GPU cost."""
        return (
            self.cpu_cost
            + self.ram_cost
            + self.pv_cost
            + self.network_cost
            + self.load_balancer_cost
            + self.shared_cost
            + self.external_cost
        )


@dataclass(frozen=True)
class AllocationSet:
    """One step of the window: its bounds and a line per aggregate key."""

    start: datetime | None  # None for a step with no allocations at all
    end: datetime | None
    lines: dict[str, CostLine]


# --- parsing --------------------------------------------------------------------------------


def parse_response(status: int, content_type: str, body: bytes) -> list[AllocationSet]:
    """The allocation sets in an answer of ``/allocation/compute``; ``OpenCostError`` for an
    error envelope, a plain-text error (OpenCost answers a bad ``window`` with text, not
    JSON) or a body that is not the envelope."""
    text = body.decode("utf-8", errors="replace")
    if "json" not in content_type.lower() and status >= 400:
        raise OpenCostError(f"OpenCost answered HTTP {status}: {text.strip()[:300]}")
    try:
        payload = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except ValueError as exc:
        raise OpenCostError(f"OpenCost's answer (HTTP {status}) is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise OpenCostError("OpenCost's answer is not a JSON object")
    code = payload.get("code", status)
    if status >= 400 or code != 200:
        message = str(payload.get("message") or text.strip()[:300])
        raise OpenCostError(f"OpenCost answered {code}: {message}")
    data = payload.get("data")
    if not isinstance(data, list):
        raise OpenCostError("OpenCost's answer has no list of allocation sets in 'data'")
    return [_parse_set(index, step) for index, step in enumerate(data)]


def _no_constant(name: str) -> Any:
    # OpenCost writes NaN and Inf as null; a bare NaN is not its JSON.
    raise ValueError(f"{name} is not valid JSON")


def _parse_set(index: int, step: Any) -> AllocationSet:
    if step is None:
        step = {}
    if not isinstance(step, dict):
        raise OpenCostError(f"data[{index}] is not an object of allocations")
    lines = {str(key): _parse_line(f"data[{index}][{key!r}]", value) for key, value in step.items()}
    first = next(iter(lines.values()), None)
    return AllocationSet(
        start=first.window_start if first else None,
        end=first.window_end if first else None,
        lines=lines,
    )


def _parse_line(where: str, raw: Any) -> CostLine:
    if not isinstance(raw, dict):
        raise OpenCostError(f"{where} is not an allocation object")
    window = raw.get("window")
    if not isinstance(window, dict):
        raise OpenCostError(f"{where}.window is missing")

    def cost(name: str) -> Decimal:
        return _number(where, raw, name) + _number(where, raw, f"{name}Adjustment")

    return CostLine(
        name=str(raw.get("name") or ""),
        window_start=_time(where, window, "start"),
        window_end=_time(where, window, "end"),
        start=_time(where, raw, "start"),
        end=_time(where, raw, "end"),
        minutes=_number(where, raw, "minutes"),
        cpu_core_hours=_number(where, raw, "cpuCoreHours"),
        ram_byte_hours=_number(where, raw, "ramByteHours"),
        gpu_hours=_number(where, raw, "gpuHours"),
        cpu_cost=cost("cpuCost"),
        ram_cost=cost("ramCost"),
        pv_cost=cost("pvCost"),
        network_cost=cost("networkCost"),
        load_balancer_cost=cost("loadBalancerCost"),
        shared_cost=_number(where, raw, "sharedCost"),
        external_cost=_number(where, raw, "externalCost"),
        gpu_cost=cost("gpuCost"),
        total_cost=_number(where, raw, "totalCost"),
        cpu_efficiency=_optional(where, raw, "cpuEfficiency"),
        ram_efficiency=_optional(where, raw, "ramEfficiency"),
        total_efficiency=_optional(where, raw, "totalEfficiency"),
    )


def _optional(where: str, raw: Mapping[str, Any], name: str) -> Decimal | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise OpenCostError(f"{where}.{name} is not a number: {value!r}")
    return Decimal(value)


def _number(where: str, raw: Mapping[str, Any], name: str) -> Decimal:
    """A cost or quantity; absent (older servers) and ``null`` (a NaN) count as zero, which is
    what OpenCost itself adds up for them."""
    value = _optional(where, raw, name)
    return ZERO if value is None else value


def _time(where: str, raw: Mapping[str, Any], name: str) -> datetime:
    value = raw.get(name)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise OpenCostError(f"{where}.{name} is not an RFC 3339 time: {value!r}") from exc
    if parsed.tzinfo is None:
        raise OpenCostError(f"{where}.{name} has no time zone: {value!r}")
    return parsed


# --- the client -----------------------------------------------------------------------------


@dataclass
class OpenCostClient:
    """``base_url`` is OpenCost's API (port 9003; Kubecost's ends in ``/model``)."""

    base_url: str
    timeout: float = 30.0
    session: requests.Session = field(default_factory=requests.Session)

    def allocation(
        self,
        window: str,
        *,
        step: str = "",
        include_idle: bool = True,
        accumulate: bool = False,
    ) -> list[AllocationSet]:
        """Cost per namespace over ``window`` (``7d``, ``today``, ``<RFC3339>,<RFC3339>``,
        ``<unix>,<unix>``), one set per ``step`` (default: the whole window)."""
        if not self.base_url:
            raise OpenCostError("no OpenCost URL is configured (BILLING_OPENCOST_URL)")
        params = {
            "window": window,
            "aggregate": "namespace",
            "includeIdle": "true" if include_idle else "false",
            "accumulate": "true" if accumulate else "false",
        }
        if step:
            params["step"] = step
        url = self.base_url.rstrip("/") + "/allocation/compute"
        try:
            response = self.session.get(url, params=params, timeout=self.timeout)
        except requests.Timeout as exc:
            raise OpenCostError(f"OpenCost at {self.base_url} did not answer in time") from exc
        except requests.RequestException as exc:
            raise OpenCostError(f"OpenCost at {self.base_url} cannot be reached: {exc}") from exc
        return parse_response(
            response.status_code, response.headers.get("Content-Type", ""), response.content
        )


def configured_client() -> OpenCostClient:
    """A client for ``settings.BILLING_OPENCOST_URL``."""
    return OpenCostClient(settings.BILLING_OPENCOST_URL, settings.BILLING_OPENCOST_TIMEOUT)


# --- attribution ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Whose a line is: a tenant's (``tenant`` its slug), the platform's, idle capacity, or
    nobody's (a namespace of no tenant, shown as a warning rather than dropped)."""

    kind: OwnerKind
    tenant: str = ""


def attribute(key: str, tenants: frozenset[str] | set[str], platform: frozenset[str]) -> Owner:
    """The owner of the line aggregated under namespace ``key``: by the namespace's name
    only. ``platform`` is ``fleet.services.platform_namespaces()``."""
    if key in (IDLE, UNMOUNTED):
        return Owner("idle")
    if key in SPECIAL_KEYS:
        return Owner("unattributed")
    tenant = tenant_of(key, platform)
    if not tenant:
        return Owner("platform")
    if tenant in tenants:
        return Owner("tenant", tenant)
    return Owner("unattributed")


@dataclass
class CostTotals:
    """OpenCost's non-GPU cost of one owner over one step."""

    cpu: Decimal = ZERO
    ram: Decimal = ZERO
    pv: Decimal = ZERO
    network: Decimal = ZERO
    load_balancer: Decimal = ZERO
    shared: Decimal = ZERO
    external: Decimal = ZERO
    opencost_gpu: Decimal = ZERO  # shown for comparison only
    namespaces: list[str] = field(default_factory=list)

    @property
    def total(self) -> Decimal:
        return (
            self.cpu
            + self.ram
            + self.pv
            + self.network
            + self.load_balancer
            + self.shared
            + self.external
        )

    def add(self, line: CostLine) -> None:
        self.cpu += line.cpu_cost
        self.ram += line.ram_cost
        self.pv += line.pv_cost
        self.network += line.network_cost
        self.load_balancer += line.load_balancer_cost
        self.shared += line.shared_cost
        self.external += line.external_cost
        self.opencost_gpu += line.gpu_cost
        self.namespaces.append(line.name)

    def absorb(self, other: CostTotals) -> None:
        """Add another owner's or step's totals to these."""
        self.cpu += other.cpu
        self.ram += other.ram
        self.pv += other.pv
        self.network += other.network
        self.load_balancer += other.load_balancer
        self.shared += other.shared
        self.external += other.external
        self.opencost_gpu += other.opencost_gpu
        self.namespaces += [n for n in other.namespaces if n not in self.namespaces]


@dataclass
class StepCosts:
    """One step's cost split by owner: per tenant, the platform, idle, and unattributed."""

    start: datetime | None
    end: datetime | None
    tenants: dict[str, CostTotals] = field(default_factory=dict)
    platform: CostTotals = field(default_factory=CostTotals)
    idle: CostTotals = field(default_factory=CostTotals)
    unattributed: CostTotals = field(default_factory=CostTotals)


def costs_by_owner(
    sets: Iterable[AllocationSet], tenants: frozenset[str] | set[str], platform: frozenset[str]
) -> list[StepCosts]:
    """Each step's lines added up per owner (see ``attribute``)."""
    steps = []
    for allocation_set in sets:
        step = StepCosts(start=allocation_set.start, end=allocation_set.end)
        for key, line in sorted(allocation_set.lines.items()):
            owner = attribute(key, tenants, platform)
            if owner.kind == "tenant":
                step.tenants.setdefault(owner.tenant, CostTotals()).add(line)
            else:
                getattr(step, owner.kind).add(line)
        steps.append(step)
    return steps


@dataclass(frozen=True)
class TenantBill:
    """A tenant's cost over a period: the portal's GPU ledger plus OpenCost's other lines."""

    tenant: str
    gpu: Decimal
    opencost: CostTotals

    @property
    def total(self) -> Decimal:
        # Half a cent rounds up, as on an invoice (Decimal's default would round to even).
        return (self.gpu + self.opencost.total).quantize(CENT, rounding=ROUND_HALF_UP)


def merge_gpu(gpu_cost: Mapping[str, Decimal], steps: Iterable[StepCosts]) -> list[TenantBill]:
    """Per tenant: GPU cost from the portal's ledger (``gpu_cost``, which counts fractions
    right) and CPU, RAM, storage and network from OpenCost, summed over ``steps``. OpenCost's
    own GPU cost is carried for comparison and never added."""
    totals: dict[str, CostTotals] = {}
    for step in steps:
        for tenant, costs in step.tenants.items():
            totals.setdefault(tenant, CostTotals()).absorb(costs)
    names = sorted(set(totals) | set(gpu_cost))
    return [
        TenantBill(tenant, gpu_cost.get(tenant, ZERO), totals.get(tenant, CostTotals()))
        for tenant in names
    ]
