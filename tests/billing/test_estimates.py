"""The cost estimate of a catalog request (``billing.estimates``), without HTTP or database:
the prices come in as a ``PriceBook`` of unsaved rows, the moment as ``now``."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from billing.costing import PriceBook
from billing.estimates import estimate
from billing.models import GpuPrice
from gitops.fleet import H200_PRODUCT, demo_fleet
from gitops.specs import GpuShare, TenantSpec

FLEET = demo_fleet()
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}


def _book(*prices: tuple[str, str, str]) -> PriceBook:
    """Prices of (GPU model, MIG profile, amount per hour), in effect since 2026-01-01."""
    rows = [
        GpuPrice(
            gpu_model=model,
            mig_profile=profile,
            amount=Decimal(amount),
            effective_from=date(2026, 1, 1),
        )
        for model, profile, amount in prices
    ]
    return PriceBook({(p.gpu_model, p.mig_profile): [p] for p in rows})


H200 = (H200_PRODUCT, "", "2.5000")


def test_whole_gpus_cost_their_gpu_hours_for_730_hours() -> None:
    found = estimate("gpu-share", SHARE, None, FLEET, book=_book(H200), now=NOW)
    assert found is not None
    assert found.per_month == Decimal("3650.0000")  # 2 GPUs x 2.50 x 730 h
    assert found.hours_per_month == 730
    assert found.until_end is None and found.low_per_month is None
    assert found.unpriced == []
    assert found.lines[0].what == "2 whole GPUs of h200"


def test_a_later_price_is_not_the_price_now() -> None:
    book = _book(H200)
    later = GpuPrice(gpu_model=H200_PRODUCT, amount=Decimal(9), effective_from=date(2027, 1, 1))
    book.prices[(H200_PRODUCT, "")] = [*book.prices[(H200_PRODUCT, "")], later]
    found = estimate("gpu-share", SHARE, None, FLEET, book=book, now=NOW)
    assert found is not None and found.lines[0].unit_price == Decimal("2.5")


def test_mig_slices_pay_their_profiles_own_price_per_instance_hour() -> None:
    spec = {"name": "s", "flavor": "h200-mig", "kind": "mig", "count": 3, "mig_profile": "1g.18gb"}
    own = estimate(
        "gpu-share", spec, None, FLEET, book=_book(H200, (H200_PRODUCT, "1g.18gb", "0.5")), now=NOW
    )
    assert own is not None
    assert own.lines[0].unit == "instance-hour"
    assert own.per_month == Decimal("1095.0")  # 3 x 0.50 x 730
    # Without a price of its own, a slice pays its share of the GPU's: 1/7 of 2.50.
    shared = estimate("gpu-share", spec, None, FLEET, book=_book(H200), now=NOW)
    assert shared is not None
    assert round(shared.per_month, 2) == round(Decimal(3) * Decimal("2.5") / 7 * 730, 2)


def test_hami_slots_pay_their_dominant_fraction_of_the_gpu() -> None:
    spec = {
        "name": "frac",
        "flavor": "h200-hami",
        "kind": "hami",
        "count": 4,
        "gpumem_mib": 0,
        "gpucores_percent": 25,
    }
    # No memory asked: HAMi gives the slot the whole card, so each counts 1.
    whole = estimate("gpu-share", spec, None, FLEET, book=_book(H200), now=NOW)
    assert whole is not None and whole.lines[0].quantity == 4
    memory = FLEET.flavor("h200-hami").gpu_memory_mib  # type: ignore[union-attr]
    quarter = {**spec, "gpumem_mib": memory // 4}
    found = estimate("gpu-share", quarter, None, FLEET, book=_book(H200), now=NOW)
    assert found is not None
    assert found.lines[0].quantity == Decimal(1)  # 4 slots of a quarter card
    assert found.per_month == Decimal("1825.0")


def test_a_time_bound_share_costs_until_the_end_of_its_end_date() -> None:
    spec = {**SHARE, "until": "2026-12-09"}  # 12:00 on the 7th to 00:00 on the 10th: 60 h
    found = estimate("gpu-share", spec, None, FLEET, book=_book(H200), now=NOW)
    assert found is not None
    assert found.hours_to_end == Decimal(60)
    assert found.until_end == Decimal("300.0")  # 2 GPUs x 2.50 x 60 h
    assert found.ends == date(2026, 12, 9)


def test_an_unpriced_model_is_named_not_silently_zero() -> None:
    found = estimate("gpu-share", SHARE, None, FLEET, book=_book(), now=NOW)
    assert found is not None
    assert found.per_month == 0
    assert found.unpriced == [f"No price set for {H200_PRODUCT}: it counts as zero here."]
    mig = {"name": "s", "flavor": "h200-mig", "kind": "mig", "count": 1, "mig_profile": "2g.35gb"}
    found = estimate("gpu-share", mig, None, FLEET, book=_book(), now=NOW)
    assert found is not None
    assert found.unpriced == [f"No price set for {H200_PRODUCT} 2g.35gb: it counts as zero here."]


def test_an_endpoint_costs_its_replicas_on_its_share() -> None:
    tenant = TenantSpec(slug="alpha", shares=(GpuShare("train", "h200", "whole", 8),))
    spec = {
        "name": "chat",
        "model_uri": "hf://org/chat",
        "share": "train",
        "gpus_per_replica": 2,
        "min_replicas": 1,
        "max_replicas": 3,
    }
    found = estimate("endpoint", spec, tenant, FLEET, book=_book(H200), now=NOW)
    assert found is not None
    assert found.low_per_month == Decimal("3650.0000")  # 1 replica x 2 GPUs
    assert found.per_month == Decimal("10950.0000")  # 3 replicas x 2 GPUs
    assert "share train" in found.basis
    # An endpoint on a share the tenant does not have has nothing to price.
    assert (
        estimate("endpoint", {**spec, "share": "nope"}, tenant, FLEET, book=_book(H200), now=NOW)
        is None
    )


def test_a_cluster_costs_its_gpu_quota_on_its_node_pools() -> None:
    spec = {"name": "dev", "node_pools": ["h200", "h200-dra"], "gpu_quota": 4}
    found = estimate("cluster", spec, None, FLEET, book=_book(H200), now=NOW)
    assert found is not None
    assert found.per_month == Decimal("7300.0000") and found.low_per_month is None
    assert len(found.lines) == 2
    assert (
        estimate("cluster", {**spec, "gpu_quota": 0}, None, FLEET, book=_book(H200), now=NOW)
        is None
    )


def test_a_spec_that_does_not_read_has_no_estimate() -> None:
    assert estimate("gpu-share", {"name": "x"}, None, FLEET, book=_book(H200), now=NOW) is None
    assert (
        estimate("gpu-share", {**SHARE, "count": "many"}, None, FLEET, book=_book(H200), now=NOW)
        is None
    )
