"""The ledger from the portal's own scrapes of the simulator's dcgm-exporter (the embedded
default, no Prometheus): exact GPU-seconds for the demo fleet's placements, idempotent hours,
attribution by namespace, the cursor, the backfill job and bad input."""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from prometheus_client.parser import text_string_to_metric_families

from billing import services
from billing.models import ExporterSample, IngestCursor, IngestRun, UsageDay, UsageHour
from fleet import services as fleet_services
from portal.jobs import enqueue
from portal.models import AuditEvent, Job
from simulator import Simulator
from simulator.config import SeedWorkload, SimConfig
from simulator.dcgm import render_exposition
from tenants.models import Tenant

HOUR = timedelta(hours=1)
STEP = 60
H200_MIB = 143771
SCRATCH = SeedWorkload(
    "scratch", "notebook", resources=(("nvidia.com/gpu", "1"),), pool="h200", queue=""
)
# A pod in vision's namespace that claims, by label, to be llm-platform's.
IMPOSTOR = SeedWorkload("vision", "impostor", resources=(("nvidia.com/gpu", "1"),), pool="h200")


@pytest.fixture
def fleet(start_fleet: Callable[..., Simulator], settings: Any, db: None) -> Simulator:
    """The demo fleet plus two pods, read once by the portal, with its exporter on a clock
    the test sets."""
    seeds = (*SimConfig.demo().seed_workloads, SCRATCH, IMPOSTOR)
    sim = start_fleet(seed_workloads=seeds)
    impostor = next(
        obj for obj in sim.store.list(sim_pods()) if obj["metadata"]["name"].startswith("impostor")
    )
    impostor["metadata"].setdefault("labels", {})["ai-factory.io/tenant"] = "llm-platform"
    sim.put_object("pods", impostor)
    report = fleet_services.sync_all()
    assert report.ok, report.errors
    for slug in ("vision", "llm-platform"):
        Tenant.objects.create(slug=slug, display_name=slug)
    settings.BILLING_EXPORTER_URLS = [f"{sim.url}/metrics"]
    settings.BILLING_EXPORTER_TOKEN = ""
    settings.BILLING_STEP_SECONDS = STEP
    return sim


def sim_pods() -> Any:
    from simulator.store import PODS

    return PODS


def past_hour(hours_back: int = 3) -> datetime:
    return services.last_complete_hour() - (hours_back - 1) * HOUR


def scrape_hour(sim: Simulator, hour: datetime) -> list[float]:
    """Scrape every slot of ``hour`` and the one before it (the energy baseline), at a moment
    inside each slot; returns the moments."""
    moments = []
    for slot in range(-1, 60):
        moment = hour.timestamp() + slot * STEP + 7.5
        sim.clock = lambda moment=moment: moment
        samples, errors = services.scrape_exporters(now=moment)
        assert samples and not errors
        moments.append(moment)
    return moments


def ledger(hour: datetime) -> dict[tuple[str, str, str], UsageHour]:
    return {(r.namespace, r.flavor, r.workload): r for r in UsageHour.objects.filter(hour=hour)}


def energy_mj(sim: Simulator, moment: float) -> dict[str, float]:
    text = render_exposition(sim.gpu_samples(), moment)
    values = {}
    for family in text_string_to_metric_families(text):
        if family.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            for sample in family.samples:
                values[sample.labels["UUID"]] = sample.value
    return values


def gpus_of(sim: Simulator, namespace: str, prefix: str) -> list[str]:
    return sorted(
        {s.uuid for s in sim.gpu_samples() if s.namespace == namespace and s.pod.startswith(prefix)}
    )


@pytest.mark.django_db
def test_it_meters_the_simulators_placements_to_the_gpu_second(fleet: Simulator) -> None:
    hour = past_hour()
    moments = scrape_hour(fleet, hour)
    run = services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="exporter")
    assert run.status == IngestRun.Status.SUCCEEDED, run.error
    rows = ledger(hour)
    seventh = Decimal(3600) / 7
    expected = {
        # Two pods of eight whole GPUs each.
        ("vision", "h200", "Job/finetune-vit"): Decimal(16 * 3600),
        # Three 1g.18gb slices and one 3g.71gb slice: 3/7 of a GPU each way.
        ("vision", "h200-mig", "Job/eval-vit-small"): (3 * seventh).quantize(Decimal("0.001")),
        ("vision", "h200-mig", "Job/eval-vit-large"): (3 * seventh).quantize(Decimal("0.001")),
        # Two HAMi slots of 14000 MiB and 10% of the cores: 0.1 of an H200 each (the cores,
        # above 14000/143771 of the memory).
        ("llm-platform", "h200-hami", "ReplicaSet/chat-small-predictor-6d5f8c7b9c"): Decimal(720),
        ("scratch", "h200", "Job/notebook"): Decimal(3600),
        ("vision", "h200", "Job/impostor"): Decimal(3600),
    }
    assert {key: row.allocated_gpu_seconds for key, row in rows.items()} == expected
    # The day's sums are kept with the hour, for the dashboards' longer ranges.
    daily = {
        (d.namespace, d.flavor, d.workload): d.allocated_gpu_seconds
        for d in UsageDay.objects.filter(day=hour.date())
    }
    assert daily == expected
    profiles = {key[2]: row.mig_profile for key, row in rows.items() if row.mig_profile}
    assert profiles == {"Job/eval-vit-small": "1g.18gb", "Job/eval-vit-large": "3g.71gb"}
    assert {row.gpu_model for row in rows.values()} == {"NVIDIA-H200"}
    for row in rows.values():
        assert row.observed_seconds == 3600
        assert row.source == "exporter"
        # Busy pods run at 55-98% in the simulator.
        assert 0.55 * float(row.allocated_gpu_seconds) <= float(row.used_gpu_seconds)
        assert float(row.used_gpu_seconds) <= 0.98 * float(row.allocated_gpu_seconds)
        assert not row.util_fallback  # H200s report DCGM_FI_PROF_GR_ENGINE_ACTIVE
    # Energy: the counter's increase over the hour on the workload's GPUs, in kWh.
    before, after = energy_mj(fleet, moments[0]), energy_mj(fleet, moments[-1])
    finetune = gpus_of(fleet, "vision", "finetune-vit")
    assert len(finetune) == 16
    joules = sum(after[gpu] - before[gpu] for gpu in finetune)
    assert rows[("vision", "h200", "Job/finetune-vit")].energy_kwh == (
        Decimal(joules) / Decimal(3_600_000_000)
    ).quantize(Decimal("0.000001"))
    # 16 GPUs at 150-450 W for an hour.
    assert Decimal("2.4") <= rows[("vision", "h200", "Job/finetune-vit")].energy_kwh <= 7.2
    finetune_row = rows[("vision", "h200", "Job/finetune-vit")]
    assert 0.35 * H200_MIB * 16 <= float(finetune_row.memory_avg_mib) <= H200_MIB * 16
    assert finetune_row.memory_peak_mib <= H200_MIB * 16


@pytest.mark.django_db
def test_it_attributes_by_namespace_never_by_a_label(fleet: Simulator) -> None:
    hour = past_hour()
    scrape_hour(fleet, hour)
    services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="exporter")
    rows = ledger(hour)
    # The pod's label says llm-platform; the namespace is vision's.
    assert rows[("vision", "h200", "Job/impostor")].tenant_slug == "vision"
    # A namespace no tenant owns is in the ledger, visibly of no tenant.
    assert rows[("scratch", "h200", "Job/notebook")].tenant_slug == ""
    hami = rows[("llm-platform", "h200-hami", "ReplicaSet/chat-small-predictor-6d5f8c7b9c")]
    assert hami.tenant_slug == "llm-platform"


@pytest.mark.django_db
def test_it_replaces_an_hour_ingested_twice(fleet: Simulator) -> None:
    hour = past_hour()
    scrape_hour(fleet, hour)

    def snapshot() -> list[tuple[Any, ...]]:
        return list(
            UsageHour.objects.order_by("namespace", "flavor", "workload").values_list(
                "hour",
                "tenant_slug",
                "namespace",
                "flavor",
                "workload",
                "allocated_gpu_seconds",
                "used_gpu_seconds",
                "energy_kwh",
                "memory_avg_mib",
                "memory_peak_mib",
                "observed_seconds",
            )
        )

    services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="exporter")
    first = snapshot()
    # Scraping a slot again replaces its samples too.
    count = ExporterSample.objects.count()
    again = hour.timestamp() + 30 * STEP + 7.5  # the moment scrape_hour used
    fleet.clock = lambda: again
    services.scrape_exporters(now=again)
    assert ExporterSample.objects.count() == count
    services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="exporter")
    assert len(first) == 6
    assert snapshot() == first
    assert IngestRun.objects.count() == 2
    assert AuditEvent.objects.filter(action="billing.ingest").count() == 2


@pytest.mark.django_db
def test_it_resumes_from_the_cursor(
    fleet: Simulator, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.BILLING_SOURCE = "exporter"
    settings.BILLING_FIRST_HOURS = 3
    first = past_hour(3)
    scrape_hour(fleet, first)
    # No cursor: the last BILLING_FIRST_HOURS hours; the two without samples have no rows.
    assert services.due_range("exporter") == (first, first + 3 * HOUR)
    job = _run_beat("billing.ingest", django_capture_on_commit_callbacks)
    assert job.status == Job.Status.SUCCEEDED, job.error
    cursor = IngestCursor.objects.get(source="exporter")
    assert cursor.last_complete_hour == first + 2 * HOUR
    assert set(UsageHour.objects.values_list("hour", flat=True)) == {first}
    assert services.due_range("exporter") is None
    job = _run_beat("billing.ingest", django_capture_on_commit_callbacks)
    assert "up to date" in job.log
    # An hour later the next one is due, and only that one.
    later = datetime.now(UTC) + HOUR
    assert services.due_range("exporter", later) == (first + 3 * HOUR, first + 4 * HOUR)


def _run_beat(task: str, on_commit: Any) -> Job:
    """What the beat does: a scheduled job, run once its transaction commits."""
    with on_commit(execute=True), transaction.atomic():
        job = enqueue(task, trigger=Job.Trigger.SCHEDULE)
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_it_backfills_a_range_as_a_job_with_progress(
    fleet: Simulator, world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    first = past_hour(2)
    scrape_hour(fleet, first)
    with django_capture_on_commit_callbacks(execute=True):
        job = services.do_backfill(first, first + 2 * HOUR, acting_user=world["pam"])
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.progress == 100
    assert "(1/2)" in job.log and "2 of 2 hours" in job.log
    run = IngestRun.objects.get()
    assert (run.hours, run.rows, run.status) == (2, 6, "succeeded")
    assert AuditEvent.objects.get(action="billing.ingest").actor == world["pam"]


@pytest.mark.django_db
def test_it_refuses_bad_ranges_and_non_operators(fleet: Simulator, world: dict[str, Any]) -> None:
    hour = past_hour()
    with pytest.raises(PermissionDenied):
        services.do_backfill(hour, hour + HOUR, acting_user=world["alice"])
    with pytest.raises(PermissionDenied):
        services.do_ingest_hours(hour, hour + HOUR, acting_user=world["fiona"])
    for start, end, message in (
        (hour + timedelta(minutes=5), hour + HOUR, "not a whole hour"),
        (hour, hour, "after the start"),
        (hour, hour.replace(tzinfo=None) + HOUR, "time zone"),
        (hour, services.last_complete_hour() + 2 * HOUR, "not complete yet"),
    ):
        with pytest.raises(ValidationError, match=message):
            services.do_backfill(start, end, acting_user=world["pam"])  # type: ignore[arg-type]
    assert not Job.objects.exists()
    assert not IngestRun.objects.exists()


@pytest.mark.django_db
def test_it_leaves_a_gap_when_the_exporter_is_down(fleet: Simulator, settings: Any) -> None:
    hour = past_hour()
    working = settings.BILLING_EXPORTER_URLS
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = [f"http://127.0.0.1:{closed.getsockname()[1]}/metrics"]
    for slot in range(-1, 60):
        moment = hour.timestamp() + slot * STEP + 1
        fleet.clock = lambda moment=moment: moment
        settings.BILLING_EXPORTER_URLS = down if 20 <= slot < 30 else working
        samples, errors = services.scrape_exporters(now=moment)
        assert (samples > 0, len(errors)) == ((False, 1) if 20 <= slot < 30 else (True, 0))
    services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="exporter")
    row = ledger(hour)[("scratch", "h200", "Job/notebook")]
    # Ten minutes without samples: counted as missing, not guessed.
    assert (row.allocated_gpu_seconds, row.observed_seconds) == (3000, 3000)


@pytest.mark.django_db
def test_it_scrapes_and_ingests_on_the_beat_schedule(
    fleet: Simulator, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.conf import settings as live

    # The schedule as the settings build it: the embedded default scrapes as well.
    assert live.BILLING_SOURCE == "exporter"
    assert live.CELERY_BEAT_SCHEDULE["billing-ingest"]["task"] == "billing.ingest"
    assert live.CELERY_BEAT_SCHEDULE["billing-scrape"]["task"] == "billing.scrape"
    job = _run_beat("billing.scrape", django_capture_on_commit_callbacks)
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert ExporterSample.objects.count() == len(fleet.gpu_samples())
    assert "GPU samples" in job.log
    settings.BILLING_EXPORTER_URLS = ["http://127.0.0.1:9/metrics"]
    settings.PORTAL_JOB_MAX_ATTEMPTS = 1
    job = _run_beat("billing.scrape", django_capture_on_commit_callbacks)
    assert job.status == Job.Status.FAILED
    assert "no exporter could be read" in job.log
