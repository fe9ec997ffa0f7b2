"""The demo's made-up month (``billing.demo``, run by ``seed_demo``): the same ledger keys and
GPU-seconds the real ingest writes for the demo's placements, the same rows on every run,
no overlap with metered hours, prices and a budget."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from billing import demo, services
from billing.costing import PriceBook, priced, totals
from billing.models import Budget, GpuPrice, ReservationPrice, Source, UsageHour
from fleet import services as fleet_services
from portal.management.commands.seed_demo import planned_workloads
from simulator import Simulator
from simulator.config import SeedWorkload, SimConfig
from tenants.models import Tenant

HOUR = timedelta(hours=1)
STEP = 60
# A GPU pod in a namespace no tenant owns, and one in a platform namespace.
SCRATCH = SeedWorkload(
    "scratch", "notebook", resources=(("nvidia.com/gpu", "1"),), pool="h200", queue=""
)
SYSTEM = SeedWorkload(
    "kube-system", "burn-in", resources=(("nvidia.com/gpu", "1"),), pool="h200", queue=""
)
FIELDS = (
    "hour",
    "tenant_slug",
    "namespace",
    "flavor",
    "gpu_model",
    "mig_profile",
    "workload",
    "allocated_gpu_seconds",
    "used_gpu_seconds",
    "observed_seconds",
    "memory_avg_mib",
    "memory_peak_mib",
    "energy_kwh",
)


@pytest.fixture
def tenants(db: None) -> None:
    for slug in ("vision", "llm-platform"):
        Tenant.objects.create(slug=slug, display_name=slug)


@pytest.fixture
def fleet(start_fleet: Callable[..., Simulator], settings: Any, tenants: None) -> Simulator:
    sim = start_fleet(seed_workloads=(*SimConfig.demo().seed_workloads, SCRATCH, SYSTEM))
    report = fleet_services.sync_all()
    assert report.ok, report.errors
    settings.BILLING_EXPORTER_URLS = [f"{sim.url}/metrics"]
    settings.BILLING_EXPORTER_TOKEN = ""
    settings.BILLING_STEP_SECONDS = STEP
    return sim


def demo_rows() -> list[tuple[Any, ...]]:
    return list(UsageHour.objects.filter(source=Source.DEMO).order_by(*FIELDS).values_list(*FIELDS))


def by_key(rows: Any) -> dict[tuple[str, ...], UsageHour]:
    return {
        (r.tenant_slug, r.namespace, r.flavor, r.gpu_model, r.mig_profile, r.workload): r
        for r in rows
    }


@pytest.mark.django_db
def test_it_writes_what_the_ingest_writes_for_the_same_placements(fleet: Simulator) -> None:
    # One hour metered for real, from the simulator's exporter.
    metered = services.last_complete_hour() - 5 * HOUR
    for slot in range(-1, 60):
        moment = metered.timestamp() + slot * STEP + 7.5
        fleet.clock = lambda moment=moment: moment
        services.scrape_exporters(now=moment)
    services.ingest_hour(metered, Source.EXPORTER)
    real = by_key(UsageHour.objects.filter(hour=metered))
    real_before = sorted(UsageHour.objects.filter(hour=metered).values_list(*FIELDS))

    seeded = demo.seed_history()

    assert seeded.skipped_hours == 1
    assert seeded.rows == (demo.DAYS * 24 - 1) * len(real)
    # The metered hour is left as the ingest wrote it, and no demo row joins it.
    assert sorted(UsageHour.objects.filter(hour=metered).values_list(*FIELDS)) == real_before
    end = services.last_complete_hour() + HOUR
    hours = set(UsageHour.objects.filter(source=Source.DEMO).values_list("hour", flat=True))
    assert min(hours) == end - timedelta(days=demo.DAYS) and max(hours) == end - HOUR
    assert metered not in hours
    # Every demo hour has the ingest's keys (tenant by namespace: "scratch" is no tenant's,
    # kube-system not billed) and, where fully observed, its GPU-seconds.
    an_hour = by_key(UsageHour.objects.filter(hour=metered - HOUR))
    assert an_hour.keys() == real.keys()
    assert ("", "scratch", "h200", "NVIDIA-H200", "", "Job/notebook") in real
    assert not UsageHour.objects.filter(namespace="kube-system").exists()
    for key, row in an_hour.items():
        if row.observed_seconds == 3600:
            assert row.allocated_gpu_seconds == real[key].allocated_gpu_seconds, key
        assert row.used_gpu_seconds <= row.allocated_gpu_seconds
        assert row.memory_peak_mib >= row.memory_avg_mib > 0
        assert row.energy_kwh > 0


@pytest.mark.django_db
def test_it_is_deterministic_and_idempotent(fleet: Simulator) -> None:
    first = demo.seed_history()
    rows = demo_rows()
    prices = list(GpuPrice.objects.values_list("gpu_model", "mig_profile", "amount"))
    budget = list(Budget.objects.values_list("tenant__slug", "monthly_amount"))
    again = demo.seed_history()
    assert demo_rows() == rows
    assert again.rows == first.rows == len(rows) == UsageHour.objects.count()
    assert again.prices == 0
    assert list(GpuPrice.objects.values_list("gpu_model", "mig_profile", "amount")) == prices
    assert ReservationPrice.objects.count() == 1
    assert list(Budget.objects.values_list("tenant__slug", "monthly_amount")) == budget


@pytest.mark.django_db
def test_it_leaves_one_tenant_idle_on_a_daily_cycle(fleet: Simulator) -> None:
    demo.seed_history()
    used: dict[str, Decimal] = defaultdict(Decimal)
    allocated: dict[str, Decimal] = defaultdict(Decimal)
    by_hour: dict[int, list[Decimal]] = defaultdict(list)
    for row in UsageHour.objects.filter(source=Source.DEMO):
        used[row.tenant_slug] += row.used_gpu_seconds
        allocated[row.tenant_slug] += row.allocated_gpu_seconds
        if row.tenant_slug == "vision" and row.hour.weekday() < 5:
            by_hour[row.hour.hour].append(row.efficiency)
    assert used[demo.IDLE_TENANT] / allocated[demo.IDLE_TENANT] < Decimal("0.1")
    assert used["vision"] / allocated["vision"] > Decimal("0.4")

    def mean(values: list[Decimal]) -> Decimal:
        return sum(values, Decimal(0)) / len(values)

    assert mean(by_hour[14]) > mean(by_hour[2]) + Decimal("0.3")


@pytest.mark.django_db
def test_it_prices_the_fleets_models_with_a_history_and_sets_a_budget(fleet: Simulator) -> None:
    seeded = demo.seed_history()
    whole = list(
        GpuPrice.objects.filter(gpu_model="NVIDIA-H200", mig_profile="").values_list(
            "amount", flat=True
        )
    )
    assert whole == [amount for _, amount in demo.WHOLE_PRICES]  # older first
    profiles = set(GpuPrice.objects.exclude(mig_profile="").values_list("mig_profile", flat=True))
    assert profiles == {"1g.18gb", "2g.35gb", "3g.71gb"}
    # Five usage prices and H200's price per reserved GPU-hour (bank-risk's nodes).
    assert seeded.prices == 6
    assert list(ReservationPrice.objects.values_list("gpu_model", "amount")) == [
        ("NVIDIA-H200", demo.RESERVATION_PRICE)
    ]
    # The price change falls inside the month: two price periods to bill.
    end = services.last_complete_hour() + HOUR
    start = end - timedelta(days=demo.DAYS)
    assert len(PriceBook.load().periods(start, end)) == 2
    # Every demo GPU-hour has a price; the budget is above the tenant's month, not far.
    lines = priced(UsageHour.objects.all(), start, end, by=("tenant_slug",))
    assert all(line.priced for line in lines)
    spent = totals(lines, "tenant_slug")[demo.BUDGET_TENANT].amount
    budget = Budget.objects.get(tenant__slug=demo.BUDGET_TENANT)
    assert spent < budget.monthly_amount < spent * 2
    assert budget.thresholds == [50, 80, 100]


@pytest.mark.django_db
def test_it_uses_the_simulators_workloads_before_the_fleet_is_synced(
    tenants: None, settings: Any
) -> None:
    settings.FLEET_SIMULATOR_CONFIG = ""
    planned = planned_workloads()
    found = {
        (p.namespace, p.flavor, p.mig_profile, p.workload): p for p in demo.placements(planned)
    }
    assert {key: p.gpu_equivalents for key, p in found.items()} == {
        # Two HAMi slots of 14000 MiB and 10% of the cores: 0.1 of an H200 each.
        ("llm-platform", "h200-hami", "", "ReplicaSet/chat-small-predictor-6d5f8c7b9c"): (
            Fraction(1, 5)
        ),
        ("vision", "h200", "", "Job/finetune-vit"): 16,
        ("vision", "h200-mig", "1g.18gb", "Job/eval-vit-small"): Fraction(3, 7),
        ("vision", "h200-mig", "3g.71gb", "Job/eval-vit-large"): Fraction(3, 7),
    }
    seeded = demo.seed_history(
        now=datetime.fromisoformat("2026-06-01T12:30:00+00:00"), planned=planned
    )
    assert seeded.rows == demo.DAYS * 24 * 4
    assert set(UsageHour.objects.values_list("tenant_slug", flat=True)) == {
        "vision",
        "llm-platform",
    }


@pytest.mark.django_db
def test_the_demo_has_an_idle_policy_and_a_case_for_the_idle_tenant(fleet: Simulator) -> None:
    from billing.models import IdleCase, IdlePolicy

    demo.seed_history()
    assert demo.seed_idle() >= 1
    cases = IdleCase.objects.all()
    assert {c.tenant.slug for c in cases} == {demo.IDLE_TENANT}
    assert all(c.utilisation_percent < demo.DEMO_IDLE_THRESHOLD for c in cases)
    assert IdlePolicy.objects.filter(
        grace_minutes=demo.DEMO_GRACE_MINUTES, act_on_endpoints=True
    ).exists()
    # Seeding again opens nothing twice.
    assert demo.seed_idle() == 0


@pytest.mark.django_db
def test_the_history_holds_no_more_than_the_shares_on_main_grant_up_to_this_hour(
    tenants: None, settings: Any
) -> None:
    from billing.dashboards import granted
    from catalog.models import Resource

    settings.FLEET_SIMULATOR_CONFIG = ""
    shares = {
        "vision": [
            {"name": "serve", "flavor": "h200", "kind": "whole", "count": 2},
            {"name": "eval", "flavor": "h200-mig", "kind": "mig", "count": 4}
            | {"mig_profile": "1g.18gb"},
        ],
        "llm-platform": [
            {"name": "small", "flavor": "h200-hami", "kind": "hami", "count": 2}
            | {"gpumem_mib": 24000, "gpucores_percent": 25},
        ],
    }
    for slug, specs in shares.items():
        for spec in specs:
            Resource.objects.create(
                tenant=Tenant.objects.get(slug=slug),
                kind="gpu-share",
                name=spec["name"],
                state="active",
                spec=spec,
            )
    grants = granted()
    assert grants[("vision", "h200")] == 2
    now = datetime.fromisoformat("2026-06-01T12:30:00+00:00")

    demo.seed_history(now=now, planned=planned_workloads(), grants=grants)

    held: dict[tuple[Any, ...], Decimal] = defaultdict(Decimal)
    for row in UsageHour.objects.all():
        held[(row.hour, row.tenant_slug, row.flavor)] += row.allocated_gpu_seconds
    assert held
    for (_, slug, flavor), seconds in held.items():
        # Each row's GPU-seconds are rounded to a thousandth (4/7 of an hour is not).
        assert seconds <= grants[(slug, flavor)] * 3600 + Decimal("0.01"), (slug, flavor)
    # Without its training share, vision's 16-GPU training job is cut to its serving share.
    assert max(v for (_, s, f), v in held.items() if (s, f) == ("vision", "h200")) == 7200
    # Every workload the demo talks about keeps a history, the idle tenant's among them.
    assert set(UsageHour.objects.values_list("workload", flat=True)) == {
        "Job/finetune-vit",
        "Job/eval-vit-small",
        "Job/eval-vit-large",
        "ReplicaSet/chat-small-predictor-6d5f8c7b9c",
    }
    # The history reaches the current hour: its last hour ends where this one begins.
    last = UsageHour.objects.order_by("-hour").values_list("hour", flat=True)[0]
    assert last + HOUR == now.replace(minute=0)


def _demo_share_equivalents(spec: dict[str, Any]) -> tuple[str, Decimal]:
    """(flavor, GPU-equivalents) of a share spec as the catalog counts it."""
    from catalog.models import Kind
    from catalog.services import share_gpu_equivalents
    from catalog.specs import from_json
    from gitops.fleet import configured_fleet

    share = from_json(Kind.GPU_SHARE, spec)
    flavor = configured_fleet().flavor(share.flavor)
    assert flavor is not None, share.flavor
    return share.flavor, share_gpu_equivalents(share, flavor)


@pytest.mark.django_db
def test_the_demo_clusters_seed_workloads_are_metered_within_the_shares_seed_demo_grants(
    fleet: Simulator,
) -> None:
    """What the live demo meters (the simulator's exporter, as the ingest reads it) stays
    within the shares seed_demo merges, with room for what the demo adds through the portal:
    its endpoints' predictors and the jobs meant to run; the job meant to wait does not fit
    even with everything the other tenants could lend."""
    from billing.dashboards import granted
    from catalog.models import Resource
    from portal.management.commands.seed_demo import CATALOG
    from portal.management.demo_jobs import DEMO_JOBS, PENDING

    specs = {
        (slug, spec["name"]): spec
        for slug, _, kind, spec, merged in CATALOG
        if kind == "gpu-share" and merged and slug in ("vision", "llm-platform")
    }
    for (slug, name), spec in specs.items():
        Resource.objects.create(
            tenant=Tenant.objects.get(slug=slug),
            kind="gpu-share",
            name=name,
            state="active",
            spec=spec,
        )
    grants = granted()
    metered = services.last_complete_hour() - 5 * HOUR
    for slot in range(-1, 60):
        moment = metered.timestamp() + slot * STEP + 7.5
        fleet.clock = lambda moment=moment: moment
        services.scrape_exporters(now=moment)
    services.ingest_hour(metered, Source.EXPORTER)

    held: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for row in UsageHour.objects.filter(hour=metered).exclude(tenant_slug=""):
        held[(row.tenant_slug, row.flavor)] += row.allocated_gpu_seconds / 3600
    # Every seed workload metered in full (none cut down, none left out): 16 whole GPUs,
    # three 1g.18gb slices and a 3g.71gb one (6/7 of a GPU), two HAMi slots of a tenth.
    mig = ("vision", "h200-mig")
    assert set(held) == {("vision", "h200"), mig, ("llm-platform", "h200-hami")}
    assert held[("vision", "h200")] == 16
    assert abs(held[mig] - Decimal(6) / 7) < Decimal("0.001")
    assert held[("llm-platform", "h200-hami")] == Decimal("0.2")
    # What the portal adds: the endpoints main holds awake, the demo jobs meant to run.
    added: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for slug, _, kind, spec, merged in CATALOG:
        if kind == "endpoint" and merged:
            share = specs[(slug, spec["share"])]
            flavor, amount = _demo_share_equivalents({**share, "count": spec["gpus_per_replica"]})
            added[(slug, flavor)] += amount
    waiting = []
    for job in DEMO_JOBS:
        share = specs[(job.tenant, job.data["share"])]
        flavor, amount = _demo_share_equivalents({**share, "count": job.data["gpus"]})
        if job.expect == PENDING:
            waiting.append(((job.tenant, flavor), amount))
        else:
            added[(job.tenant, flavor)] += amount
    for key in {*held, *added}:
        assert held[key] + added[key] <= grants[key] + Decimal("0.001"), key
    assert waiting
    for (slug, flavor), amount in waiting:
        lendable = sum(v for (s, f), v in grants.items() if f == flavor and s != slug)
        assert held[(slug, flavor)] + added[(slug, flavor)] + amount > grants[(slug, flavor)] + (
            lendable
        )
