"""Right-sizing: whole GPUs that a tenant keeps mostly idle, and the slice that would do.

For each active GPU share of whole GPUs (``whole``, or ``dra`` whole devices) the ledger of the
last ``WINDOW_DAYS`` is read, and the smallest option that holds what was measured, with
headroom, is recommended: a MIG profile of a flavor with the same GPU model, or a HAMi share
(memory and cores) on such a flavor when the tenant's trust level allows a shared GPU.

Which usage belongs to a share: a share is quota on a flavor for the tenant's namespaces
(Kueue's ClusterQueue, ``gitops.render.kueue``), not a placement of named workloads, so any of
the tenant's pods on that flavor may run under it. The usage of a share is therefore the
tenant's ledger rows on the share's flavor (``tenant_slug`` comes from the namespace's owner,
never a label). A tenant with two such shares on one flavor gets no recommendation for them:
the ledger cannot tell their usage apart.

What is measured, per hour of the window that has usage:

- memory per GPU: each ledger row's ``memory_peak_mib`` is the peak of the frame buffer summed
  over the GPUs its workload held (``billing.ingest``), so it is divided by the GPUs held
  (``allocated_gpu_seconds / observed_seconds``); the window's peak is the largest of those;
- compute: ``used / allocated`` GPU-seconds of the hour (how busy the held GPUs were); the p95
  over the hours must fit the option's compute share (MIG: slices/7; HAMi: its cores), with
  ``HEADROOM``; the peak hour is shown, and a note says when it would not fit;
- a workload that held more than one GPU at once cannot move: a MIG instance or a HAMi vGPU is
  part of one GPU, so multi-GPU work has nowhere to go.

Fewer than ``MIN_HOURS`` hours with usage is too little to judge: no recommendation, and the
reason says so. Money comes from the ``PriceBook`` (prices in effect now): the current price of
a GPU-hour against the option's (a MIG profile's own price or its share of the GPU's; a HAMi
share its dominant fraction of the GPU's, as the ledger bills it), for ``HOURS_PER_MONTH``
hours per GPU of the share. Without a price the option is still shown, without a saving.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.costing import HOURS_PER_MONTH, PriceBook, money
from billing.fractions import hami_fraction, mig_fraction
from billing.models import UsageHour
from catalog.models import Kind, Resource
from catalog.services import DEDICATED_KINDS
from catalog.specs import from_json, mig_opt_in, to_json
from gitops.fleet import configured_fleet
from gitops.specs import Flavor, FleetSpec, GpuShare, SpecError
from tenants.models import Tenant

WINDOW_DAYS = 14
MIN_HOURS = 24
# Room above what was measured: a job's next run may need a little more than its last.
HEADROOM = Decimal("1.2")
# A MIG profile's name gives its memory in GB (10^9 bytes): 1g.18gb holds about 18 GB.
MIB_PER_GB = Decimal(10**9) / Decimal(2**20)
HAMI_MEMORY_STEP_MIB = 1024
HAMI_CORES_STEP = 5
WHOLE_KINDS = ("whole", "dra")


@dataclass(frozen=True)
class Usage:
    """What a share's GPUs did over the window."""

    hours: int  # hours with usage
    peak_memory_mib: int  # per GPU
    p95_compute: Decimal  # busy fraction of the GPUs held, 0-1
    peak_compute: Decimal
    max_gpus_held: Decimal  # by one workload at once


@dataclass(frozen=True)
class Option:
    """A slice a whole GPU of the share could become."""

    kind: str  # the share kind on ``flavor``: mig, dra (MIG devices) or hami
    flavor: str
    mig_profile: str = ""
    gpumem_mib: int = 0
    gpucores_percent: int = 0
    fraction: Fraction = Fraction(1)  # of a GPU, as the ledger bills it
    memory_mib: int = 0
    compute: Fraction = Fraction(1)

    @property
    def key(self) -> str:
        """What identifies the option in a form: the page's choice, compared at POST."""
        fields = (self.kind, self.flavor, self.mig_profile, self.gpumem_mib, self.gpucores_percent)
        return ":".join(str(value) for value in fields)

    @property
    def label(self) -> str:
        if self.kind == "hami":
            gib = Decimal(self.gpumem_mib) / 1024
            return (
                f"HAMi share of {gib.normalize():f} GiB and {self.gpucores_percent}% cores "
                f"on {self.flavor}"
            )
        return f"MIG {self.mig_profile} on {self.flavor}"

    def spec(self, share: GpuShare) -> dict[str, Any]:
        """The share's spec with this option: same name, count (one slice per GPU), limits
        and end date."""
        return {
            **to_json(share),
            "flavor": self.flavor,
            "kind": self.kind,
            "mig_profile": self.mig_profile,
            "gpumem_mib": self.gpumem_mib,
            "gpucores_percent": self.gpucores_percent,
        }


@dataclass
class Recommendation:
    """One share: the option to move to, or why there is none."""

    resource: Resource
    share: GpuShare | None
    usage: Usage | None = None
    option: Option | None = None
    reason: str = ""  # why there is no option
    current_hourly: Decimal | None = None  # per GPU
    option_hourly: Decimal | None = None  # per GPU (one slice)
    monthly_saving: Decimal | None = None
    price_note: str = ""  # why there is no saving
    notes: list[str] = field(default_factory=list)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.option is not None and self.share is not None
        return self.option.spec(self.share)

    def summary(self) -> str:
        """The numbers behind the recommendation, for the request's reason."""
        assert self.option is not None and self.usage is not None and self.share is not None
        usage = self.usage
        busy, peak = _percent(usage.p95_compute), _percent(usage.peak_compute)
        text = (
            f"From a right-sizing recommendation: over the last {WINDOW_DAYS} days "
            f"({usage.hours} hours with usage) the share's GPUs peaked at "
            f"{usage.peak_memory_mib} MiB of memory per GPU and were busy {busy} of the time "
            f"at the 95th percentile (peak hour {peak}). "
            f"{self.share.count} whole GPU(s) of {self.share.flavor} -> {self.option.label}."
        )
        if self.monthly_saving is not None:
            text += f" Saves about {self.monthly_saving} {settings.BILLING_CURRENCY} a month."
        return text


def _percent(value: Decimal) -> str:
    return f"{(value * 100).quantize(Decimal('0.1'))}%"


def _p95(values: Sequence[Decimal]) -> Decimal:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(len(ordered) * 0.95) - 1, 0)]


def measure(rows: Iterable[dict[str, Any]]) -> Usage | None:
    """The usage of ledger rows (dicts with hour, allocated_gpu_seconds, used_gpu_seconds,
    observed_seconds, memory_peak_mib); None when none had GPUs allocated."""
    allocated: dict[datetime, Decimal] = defaultdict(Decimal)
    used: dict[datetime, Decimal] = defaultdict(Decimal)
    peak = Decimal(0)
    held_most = Decimal(0)
    for row in rows:
        seconds = Decimal(row["allocated_gpu_seconds"])
        if seconds <= 0:
            continue
        allocated[row["hour"]] += seconds
        used[row["hour"]] += Decimal(row["used_gpu_seconds"])
        held = seconds / Decimal(row["observed_seconds"] or 3600)
        held_most = max(held_most, held)
        peak = max(peak, Decimal(row["memory_peak_mib"]) / held)
    if not allocated:
        return None
    busy = [min(used[hour] / allocated[hour], Decimal(1)) for hour in allocated]
    return Usage(
        hours=len(allocated),
        peak_memory_mib=int(peak.to_integral_value(rounding=ROUND_CEILING)),
        p95_compute=_p95(busy),
        peak_compute=max(busy),
        max_gpus_held=held_most,
    )


def _mig_memory_mib(profile: str) -> int:
    gb = int(profile.split(".")[1].removesuffix("gb"))
    return int(gb * MIB_PER_GB)


def _round_up(value: Decimal, step: int) -> int:
    return int((value / step).to_integral_value(rounding=ROUND_CEILING)) * step


def allowed_kinds(tenant: Tenant) -> tuple[str, ...]:
    """The share kinds the tenant may have: the catalog's rule (a dedicated tenant never gets
    a shared GPU, and MIG slices only with the platform admin's opt-in,
    ``catalog.services.check_request``). The options here are all slices (MIG, DRA's MIG
    devices, HAMi), so a dedicated tenant without the opt-in is advised none."""
    if tenant.trust_level == Tenant.TrustLevel.DEDICATED:
        return DEDICATED_KINDS if mig_opt_in(tenant) else ("whole",)
    return (*DEDICATED_KINDS, "hami")


def options(usage: Usage, product: str, fleet: FleetSpec, *, kinds: Sequence[str]) -> list[Option]:
    """Every slice of a GPU model ``product`` in the fleet, of a share kind in ``kinds``, that
    holds ``usage`` with headroom, smallest first (by the share of a GPU it is billed as)."""
    memory = Decimal(usage.peak_memory_mib) * HEADROOM
    compute = usage.p95_compute * HEADROOM
    found: list[Option] = []
    for flavor in fleet.flavors:
        if flavor.product != product or flavor.mode not in kinds:
            continue
        if flavor.mode in ("mig", "dra") and flavor.mig_profiles:
            found.extend(_mig_options(flavor, memory, compute))
        elif flavor.mode == "hami":
            hami = _hami_option(flavor, memory, compute)
            if hami is not None:
                found.append(hami)
    return sorted(found, key=lambda o: (o.fraction, o.memory_mib, o.flavor, o.mig_profile))


def _mig_options(flavor: Flavor, memory: Decimal, compute: Decimal) -> list[Option]:
    found = []
    for profile, capacity in flavor.mig_profiles:
        if capacity <= 0:
            continue
        share = mig_fraction(profile)
        memory_mib = _mig_memory_mib(profile)
        if memory <= memory_mib and compute <= Decimal(share.numerator) / share.denominator:
            found.append(
                Option(
                    kind=flavor.mode,
                    flavor=flavor.name,
                    mig_profile=profile,
                    fraction=share,
                    memory_mib=memory_mib,
                    compute=share,
                )
            )
    return found


def _hami_option(flavor: Flavor, memory: Decimal, compute: Decimal) -> Option | None:
    gpumem = max(_round_up(memory, HAMI_MEMORY_STEP_MIB), HAMI_MEMORY_STEP_MIB)
    cores = max(_round_up(compute * 100, HAMI_CORES_STEP), HAMI_CORES_STEP)
    if gpumem > flavor.gpu_memory_mib or cores > 100:
        return None
    fraction = hami_fraction(
        {"nvidia.com/gpumem": gpumem, "nvidia.com/gpucores": cores}, flavor.gpu_memory_mib
    )
    return Option(
        kind="hami",
        flavor=flavor.name,
        gpumem_mib=gpumem,
        gpucores_percent=cores,
        fraction=fraction,
        memory_mib=gpumem,
        compute=Fraction(cores, 100),
    )


def _hourly(book: PriceBook, product: str, option: Option | None, at: datetime) -> Decimal | None:
    """The price of one GPU-hour (``option`` None) or of one hour of the option's slice."""
    if option is None or option.kind == "hami":
        whole = book.unit_price(product, "", at)
        if whole is None:
            return None
        if option is None:
            return whole.amount
        return whole.amount * option.fraction.numerator / option.fraction.denominator
    price = book.unit_price(product, option.mig_profile, at)
    return price.amount if price else None


def recommend(
    resource: Resource,
    share: GpuShare,
    usage: Usage | None,
    *,
    fleet: FleetSpec,
    book: PriceBook,
    kinds: Sequence[str],
    at: datetime,
) -> Recommendation:
    """The recommendation for one share of whole GPUs from its measured ``usage``."""
    result = Recommendation(resource, share, usage)
    flavor = fleet.flavor(share.flavor)
    if flavor is None:
        result.reason = f"The fleet has no flavor {share.flavor!r} any more."
        return result
    if usage is None or usage.hours < MIN_HOURS:
        hours = usage.hours if usage else 0
        result.reason = (
            f"Too little data: {hours} hour(s) with usage in the last {WINDOW_DAYS} days; "
            f"at least {MIN_HOURS} are needed to judge."
        )
        return result
    if usage.max_gpus_held > 1:
        result.reason = (
            f"A workload used {usage.max_gpus_held.quantize(Decimal('0.1'))} GPUs at once; "
            "a MIG instance or HAMi share is part of one GPU, so it cannot hold that work."
        )
        return result
    if usage.peak_memory_mib <= 0:
        result.reason = (
            "The ledger has no memory readings for these GPUs (DCGM_FI_DEV_FB_USED), and no "
            "slice can be sized without them."
        )
        return result
    if not set(kinds) - {"whole"}:
        result.reason = (
            "A dedicated tenant gets whole GPUs only: MIG slices are off until a platform admin "
            "enables them for it."
        )
        return result
    fitting = [o for o in options(usage, flavor.product, fleet, kinds=kinds) if o.fraction < 1]
    if not fitting:
        result.reason = (
            f"The GPUs are used too much for a slice: {usage.peak_memory_mib} MiB peak memory "
            f"per GPU and {_percent(usage.p95_compute)} busy at the 95th percentile (plus "
            f"{_percent(HEADROOM - 1)} headroom) fit no MIG profile"
            + (" or HAMi share." if "hami" in kinds else ".")
        )
        return result
    option = result.option = fitting[0]
    if usage.peak_compute > Decimal(option.compute.numerator) / option.compute.denominator:
        result.notes.append(
            f"The busiest hour ({_percent(usage.peak_compute)}) is above the slice's "
            f"{_percent(Decimal(option.compute.numerator) / option.compute.denominator)} of "
            "compute: such hours would run slower."
        )
    result.current_hourly = _hourly(book, flavor.product, None, at)
    result.option_hourly = _hourly(book, flavor.product, option, at)
    if result.current_hourly is None or result.option_hourly is None:
        result.price_note = f"No price is set for {flavor.product}, so no saving is shown."
    else:
        per_gpu = result.current_hourly - result.option_hourly
        result.monthly_saving = money(per_gpu * HOURS_PER_MONTH * share.count)
    return result


def _whole_shares(tenant: Tenant) -> list[tuple[Resource, GpuShare | None]]:
    shares: list[tuple[Resource, GpuShare | None]] = []
    for resource in tenant.resources.filter(kind=Kind.GPU_SHARE, state=Resource.State.ACTIVE):
        try:
            share: GpuShare | None = from_json(Kind.GPU_SHARE, resource.spec)
        except SpecError:
            share = None
        if share is None or (share.kind in WHOLE_KINDS and not share.mig_profile):
            shares.append((resource, share))
    return shares


def tenant_recommendations(
    tenant: Tenant,
    *,
    now: datetime | None = None,
    fleet: FleetSpec | None = None,
    book: PriceBook | None = None,
) -> list[Recommendation]:
    """A recommendation (or the reason for none) for each active share of whole GPUs of
    ``tenant``, in the order of the shares' names. Two queries for the ledger and prices."""
    now = now or timezone.now()
    fleet = fleet or configured_fleet()
    shares = _whole_shares(tenant)
    if not shares:
        return []
    book = book or PriceBook.load()
    by_flavor = _ledger_by_flavor(tenant, {s.flavor for _, s in shares if s is not None}, now)
    per_flavor: dict[str, list[str]] = defaultdict(list)
    for resource, share in shares:
        if share is not None:
            per_flavor[share.flavor].append(resource.name)
    kinds = allowed_kinds(tenant)
    results = []
    for resource, share in sorted(shares, key=lambda pair: pair[0].name):
        if share is None:
            results.append(Recommendation(resource, None, reason="Its spec does not load."))
            continue
        usage = measure(by_flavor.get(share.flavor, []))
        names = per_flavor[share.flavor]
        if len(names) > 1:
            reason = (
                f"The tenant has several shares of whole GPUs on {share.flavor} "
                f"({', '.join(sorted(names))}); usage is metered per flavor, so it "
                "cannot be told apart between them (the usage shown is all of them)."
            )
            results.append(Recommendation(resource, share, usage, reason=reason))
            continue
        results.append(
            recommend(resource, share, usage, fleet=fleet, book=book, kinds=kinds, at=now)
        )
    return results


def _ledger_by_flavor(
    tenant: Tenant, flavors: set[str], now: datetime
) -> dict[str, list[dict[str, Any]]]:
    """The tenant's whole-GPU ledger rows of the window on ``flavors``, by flavor: the full
    hours before the current one."""
    end = now.replace(minute=0, second=0, microsecond=0)
    rows = UsageHour.objects.filter(
        tenant_slug=tenant.slug,
        flavor__in=flavors,
        mig_profile="",
        hour__gte=end - timedelta(days=WINDOW_DAYS),
        hour__lt=end,
    ).values(
        "flavor",
        "hour",
        "allocated_gpu_seconds",
        "used_gpu_seconds",
        "observed_seconds",
        "memory_peak_mib",
    )
    by_flavor: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_flavor[row["flavor"]].append(dict(row))
    return by_flavor


def resource_recommendation(resource: Resource, *, now: datetime | None = None) -> Recommendation:
    """The recommendation for one resource, worked out afresh (as at POST time)."""
    for recommendation in tenant_recommendations(resource.tenant, now=now):
        if recommendation.resource.pk == resource.pk:
            return recommendation
    return Recommendation(
        resource,
        None,
        reason=f"{resource} is not an active share of whole GPUs: there is nothing to right-size.",
    )
