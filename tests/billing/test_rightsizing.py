"""Right-sizing: whole GPUs that idle, the slice that fits them, and the one-click request."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import GpuPrice, Source, UsageHour
from billing.rightsizing import allowed_kinds, measure, options, tenant_recommendations
from catalog.models import Resource, ResourceRequest
from gitops.fleet import configured_fleet
from gitops.specs import TenantSpec
from tenants.models import Tenant

pytestmark = pytest.mark.django_db

H200 = "NVIDIA-H200"


@pytest.fixture(autouse=True)
def bravo_has_mig(merged_change: Callable[..., Any]) -> None:
    """bravo (dedicated) on main with MIG enabled by a platform admin (``tenants.mig``): the
    advice offers it MIG slices. Without the opt-in: test_without_the_mig_opt_in_a_dedicated_
    tenant_is_advised_no_slice."""
    merged_change(TenantSpec(slug="bravo", trust_level="dedicated", mig_allowed=True))


def _share(
    tenant: Tenant, name: str = "train", *, count: int = 1, flavor: str = "h200"
) -> Resource:
    spec = {"name": name, "flavor": flavor, "kind": "whole", "count": count}
    return Resource.objects.create(
        tenant=tenant, kind="gpu-share", name=name, state="active", spec=spec
    )


def _ledger(
    tenant: Tenant,
    *,
    hours: int = 48,
    busy: str = "0.08",
    peak_mib: int = 10240,
    gpus: int = 1,
    flavor: str = "h200",
    workload: str = "Deployment/trainer",
) -> None:
    """``hours`` full hours before the current one, each with a workload on ``gpus`` GPUs."""
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    allocated = Decimal(3600 * gpus)
    UsageHour.objects.bulk_create(
        UsageHour(
            hour=end - timedelta(hours=k),
            tenant_slug=tenant.slug,
            namespace=tenant.slug,
            flavor=flavor,
            gpu_model=H200,
            workload=workload,
            source=Source.EXPORTER,
            allocated_gpu_seconds=allocated,
            used_gpu_seconds=allocated * Decimal(busy),
            observed_seconds=3600,
            memory_peak_mib=peak_mib * gpus,
        )
        for k in range(1, hours + 1)
    )


def _price(amount: str = "4.00") -> None:
    GpuPrice.objects.create(gpu_model=H200, amount=Decimal(amount), effective_from=date(2026, 1, 1))


def _one(tenant: Tenant) -> Any:
    (rec,) = tenant_recommendations(tenant)
    return rec


def test_an_idle_h200_of_a_dedicated_tenant_becomes_the_smallest_mig_slice(
    world: dict[str, Any],
) -> None:
    _price()
    _share(world["bravo"], count=2)
    _ledger(world["bravo"])
    rec = _one(world["bravo"])
    assert rec.option is not None
    assert (rec.option.kind, rec.option.flavor, rec.option.mig_profile) == (
        "mig",
        "h200-mig",
        "1g.18gb",
    )
    assert rec.usage.peak_memory_mib == 10240
    assert rec.usage.p95_compute == Decimal("0.08")
    # 4.00 a GPU-hour against 1/7 of it, 730 hours, two GPUs.
    assert rec.monthly_saving == Decimal("5005.71")
    assert rec.spec == {
        "name": "train",
        "flavor": "h200-mig",
        "kind": "mig",
        "count": 2,
        "mig_profile": "1g.18gb",
        "gpumem_mib": 0,
        "gpucores_percent": 0,
        "borrowing_limit": None,
        "lending_limit": None,
        "until": "",
    }


def test_a_shared_tenant_gets_the_smaller_hami_share(world: dict[str, Any]) -> None:
    _price()
    _share(world["alpha"])
    _ledger(world["alpha"])
    rec = _one(world["alpha"])
    # 10 GiB peak + 20% = 12 GiB; 8% busy + 20% = 9.6%, rounded up to 10% of the cores:
    # a tenth of the card, smaller than a 1g slice (1/7).
    assert (rec.option.kind, rec.option.flavor) == ("hami", "h200-hami")
    assert (rec.option.gpumem_mib, rec.option.gpucores_percent) == (12288, 10)
    assert rec.monthly_saving == Decimal("2628.00")


def test_a_dedicated_tenant_is_never_offered_hami(world: dict[str, Any]) -> None:
    _share(world["bravo"])
    _ledger(world["bravo"], busy="0.01", peak_mib=1024)
    rec = _one(world["bravo"])
    assert rec.option.kind == "mig"
    found = options(rec.usage, H200, configured_fleet(), kinds=allowed_kinds(world["bravo"]))
    assert found and all(o.kind != "hami" for o in found)
    shared = options(rec.usage, H200, configured_fleet(), kinds=allowed_kinds(world["alpha"]))
    assert any(o.kind == "hami" for o in shared)


def test_dra_whole_devices_are_right_sized_too(world: dict[str, Any]) -> None:
    spec = {"name": "claims", "flavor": "h200-dra", "kind": "dra", "count": 1}
    Resource.objects.create(
        tenant=world["bravo"], kind="gpu-share", name="claims", state="active", spec=spec
    )
    _ledger(world["bravo"], flavor="h200-dra")
    rec = _one(world["bravo"])
    assert (rec.option.flavor, rec.option.mig_profile) == ("h200-mig", "1g.18gb")
    assert rec.spec["kind"] == "mig"


def test_a_busy_peak_hour_is_noted(world: dict[str, Any]) -> None:
    _share(world["bravo"])
    _ledger(world["bravo"])
    # One hour at 60%: the p95 over 48 hours stays at 8%, the note tells of the slow hour.
    UsageHour.objects.filter(pk=UsageHour.objects.first().pk).update(used_gpu_seconds=Decimal(2160))
    rec = _one(world["bravo"])
    assert rec.option.mig_profile == "1g.18gb"
    assert rec.notes == [
        "The busiest hour (60.0%) is above the slice's 14.3% of compute: such hours would "
        "run slower."
    ]


def test_busy_gpus_get_no_recommendation(world: dict[str, Any]) -> None:
    _share(world["alpha"])
    _ledger(world["alpha"], busy="0.80", peak_mib=60000)
    rec = _one(world["alpha"])
    assert rec.option is None
    assert "used too much" in rec.reason


def test_too_little_data_gets_no_recommendation_and_says_why(world: dict[str, Any]) -> None:
    _share(world["alpha"])
    _ledger(world["alpha"], hours=10)
    rec = _one(world["alpha"])
    assert rec.option is None
    assert rec.reason.startswith("Too little data: 10 hour(s)")


def test_without_memory_readings_nothing_is_sized(world: dict[str, Any]) -> None:
    _share(world["alpha"])
    _ledger(world["alpha"], peak_mib=0)
    rec = _one(world["alpha"])
    assert rec.option is None
    assert rec.reason.startswith("The ledger has no memory readings")


def test_old_usage_outside_the_window_does_not_count(world: dict[str, Any]) -> None:
    _share(world["alpha"])
    _ledger(world["alpha"], hours=24 * 20)
    assert _one(world["alpha"]).usage.hours == 24 * 14


def test_multi_gpu_work_cannot_move_to_slices(world: dict[str, Any]) -> None:
    _share(world["alpha"], count=2)
    _ledger(world["alpha"], gpus=2)
    rec = _one(world["alpha"])
    assert rec.option is None
    assert "2.0 GPUs at once" in rec.reason


def test_two_shares_on_one_flavor_cannot_be_told_apart(world: dict[str, Any]) -> None:
    _share(world["alpha"], "a")
    _share(world["alpha"], "b")
    _ledger(world["alpha"])
    recs = tenant_recommendations(world["alpha"])
    assert [r.option for r in recs] == [None, None]
    assert all("cannot be told apart" in r.reason for r in recs)


def test_without_a_price_the_option_is_shown_without_a_saving(world: dict[str, Any]) -> None:
    _share(world["bravo"])
    _ledger(world["bravo"])
    rec = _one(world["bravo"])
    assert rec.option is not None
    assert rec.monthly_saving is None
    assert "No price" in rec.price_note


def test_memory_per_gpu_divides_by_the_gpus_held() -> None:
    hour = datetime(2026, 11, 1, tzinfo=timezone.get_current_timezone())
    usage = measure(
        [
            # Half an hour on two GPUs, 30 GiB at peak over both: 15 GiB per GPU.
            {
                "hour": hour,
                "allocated_gpu_seconds": Decimal(3600),
                "used_gpu_seconds": Decimal(360),
                "observed_seconds": 1800,
                "memory_peak_mib": 30720,
            }
        ]
    )
    assert usage is not None
    assert (usage.peak_memory_mib, usage.max_gpus_held) == (15360, 2)
    assert usage.p95_compute == Decimal("0.1")


# --- pages ------------------------------------------------------------------------------------


def _post(client: Client, resource: Resource, option: str | None = None) -> Any:
    if option is None:
        option = _one(resource.tenant).option.key
    url = f"/t/{resource.tenant.slug}/rightsizing/{resource.pk}/request/"
    return client.post(url, {"option": option})


def test_the_page_and_its_fragment_show_the_recommendation(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _price()
    _share(world["alpha"])
    _ledger(world["alpha"])
    page = login("bob").get("/t/alpha/rightsizing/")
    assert page.status_code == 200
    assert b"HAMi share of 12 GiB and 10% cores on h200-hami" in page.content
    assert b"2,628.00 EUR" in page.content
    assert b"Request this change" in page.content
    fragment = login("fiona").get("/t/alpha/rightsizing/", headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert fragment.content.lstrip().startswith(b'<div id="recommendations">')
    # A viewer sees the recommendation but no button.
    viewer = login("vic").get("/t/alpha/rightsizing/")
    assert b"HAMi share" in viewer.content
    assert b"Request this change" not in viewer.content


def test_one_click_asks_for_the_change_through_the_normal_approval(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _price()
    resource = _share(world["alpha"])
    _ledger(world["alpha"])
    response = _post(login("bob"), resource)
    made = ResourceRequest.objects.get(resource=resource)
    assert response.status_code == 302
    assert response["Location"] == f"/t/alpha/requests/{made.pk}/"
    assert (made.action, made.state, made.requested_by) == ("modify", "submitted", world["bob"])
    assert made.spec["kind"] == "hami"
    assert (made.spec["gpumem_mib"], made.spec["gpucores_percent"]) == (12288, 10)
    assert made.reason.startswith("From a right-sizing recommendation")
    assert "10240 MiB" in made.reason and "2628.00 EUR a month" in made.reason
    # What runs does not change until an admin approves and the pull request merges.
    resource.refresh_from_db()
    assert resource.spec["kind"] == "whole"

    # A second click while the first waits makes no second request.
    bob = login("bob")
    again = _post(bob, resource)
    assert again.status_code == 302
    assert ResourceRequest.objects.filter(resource=resource).count() == 1
    page = bob.get("/t/alpha/rightsizing/")
    assert b"still submitted; wait for it or cancel it first" in page.content
    assert b"Request this change" not in page.content


def test_a_viewer_cannot_and_an_outsider_does_not_see_it(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    resource = _share(world["alpha"])
    _ledger(world["alpha"])
    assert _post(login("vic"), resource).status_code == 403
    assert _post(login("charlie"), resource).status_code == 404
    assert login("charlie").get("/t/alpha/rightsizing/").status_code == 404
    assert not ResourceRequest.objects.exists()


def test_a_stale_or_gone_recommendation_creates_nothing(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    resource = _share(world["alpha"])
    _ledger(world["alpha"])
    shown = _one(world["alpha"]).option.key
    # The tenant's work grew since the page was shown: a bigger slice now.
    UsageHour.objects.update(memory_peak_mib=30000)
    bob = login("bob")
    response = _post(bob, resource, shown)
    assert response.status_code == 302
    assert not ResourceRequest.objects.exists()
    followed = bob.get(response["Location"])
    assert b"changed since the page was shown" in followed.content
    # And when nothing fits any more, nothing is asked for either.
    UsageHour.objects.update(used_gpu_seconds=Decimal(3500))
    _post(bob, resource, shown)
    assert not ResourceRequest.objects.exists()
    assert b"No right-sizing for train any more" in bob.get("/t/alpha/rightsizing/").content


@pytest.mark.db_engine
def test_it_reads_the_ledger_once_whatever_the_shares(
    world: dict[str, Any], django_assert_num_queries: Any
) -> None:
    _share(world["bravo"])
    spec = {"name": "claims", "flavor": "h200-dra", "kind": "dra", "count": 1}
    Resource.objects.create(
        tenant=world["bravo"], kind="gpu-share", name="claims", state="active", spec=spec
    )
    _ledger(world["bravo"])
    _ledger(world["bravo"], flavor="h200-dra")
    # Shares, the fleet's inventory, prices, the ledger.
    with django_assert_num_queries(4):
        recs = tenant_recommendations(world["bravo"])
    assert [r.option.mig_profile for r in recs] == ["1g.18gb", "1g.18gb"]


def test_the_catalog_links_to_right_sizing(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("vic").get("/t/alpha/catalog/")
    assert b'href="/t/alpha/rightsizing/"' in page.content


def test_a_dedicated_tenant_asks_for_its_mig_slice(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    resource = _share(world["bravo"], count=2)
    _ledger(world["bravo"])
    response = _post(login("charlie"), resource)
    made = ResourceRequest.objects.get(resource=resource)
    assert response["Location"] == f"/t/bravo/requests/{made.pk}/"
    assert (made.action, made.state) == ("modify", "submitted")
    wanted = (made.spec["kind"], made.spec["mig_profile"], made.spec["count"])
    assert wanted == ("mig", "1g.18gb", 2)
    assert "No price" not in made.reason and "Saves" not in made.reason


def test_without_the_mig_opt_in_a_dedicated_tenant_is_advised_no_slice(
    world: dict[str, Any], merged_change: Callable[..., Any]
) -> None:
    merged_change(TenantSpec(slug="bravo", trust_level="dedicated"))
    assert allowed_kinds(world["bravo"]) == ("whole",)
    _share(world["bravo"], count=2)
    _ledger(world["bravo"])
    _price()
    rec = _one(world["bravo"])
    assert rec.option is None
    assert rec.reason.startswith("A dedicated tenant gets whole GPUs only: MIG slices are off")
    # A shared tenant is advised slices whatever the dedicated tenants' opt-in.
    assert "mig" in allowed_kinds(world["alpha"])
