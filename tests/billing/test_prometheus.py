"""The production path with real parts: Debian's ``prometheus`` scrapes the simulator's
dcgm-exporter, and the ingest reads it back through the HTTP API into ledger lines that
match the simulator's placements to the GPU-second.

Two scrape jobs read the same exporter: one with ``honor_labels: true`` (the exporter's
``namespace``/``pod`` kept) and one as the dcgm-exporter chart's ServiceMonitor does it,
``honor_labels: false`` with the target's own namespace and pod, which renames the
exporter's to ``exported_namespace``/``exported_pod``. The ledger must be the same from both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from billing import services
from billing.ingest import workload_labels
from billing.models import IngestRun, UsageHour
from billing.prometheus import MAX_POINTS, Prometheus, PrometheusError
from fleet import services as fleet_services
from simulator import Simulator
from tenants.models import Tenant
from tests.support import free_port, wait_until
from tests.support.prometheus import RunningPrometheus, run_prometheus

HOUR = timedelta(hours=1)
JOBS = ("dcgm-honor", "dcgm-target")
SAMPLES = 'DCGM_FI_DEV_GPU_TEMP{job="dcgm-honor"}'


def _scrape_configs(target: str) -> list[dict[str, Any]]:
    return [
        {
            "job_name": "dcgm-honor",
            "honor_labels": True,
            "static_configs": [{"targets": [target]}],
        },
        {
            # The chart's ServiceMonitor: the target's namespace and pod are the
            # exporter's own, so the exporter's labels come out as exported_*.
            "job_name": "dcgm-target",
            "honor_labels": False,
            "static_configs": [
                {
                    "targets": [target],
                    "labels": {
                        "namespace": "gpu-operator",
                        "pod": "nvidia-dcgm-exporter-7xk2p",
                        "container": "nvidia-dcgm-exporter",
                    },
                }
            ],
        },
    ]


def _value(prometheus: RunningPrometheus, promql: str) -> float | None:
    """The value of a query that gives one series, or None while it gives none."""
    series = prometheus.query(promql)
    return float(series[0]["value"][1]) if series else None


def _both_jobs_up(prometheus: RunningPrometheus) -> bool:
    return _value(prometheus, 'count(up{job=~"dcgm-.*"} == 1)') == len(JOBS)


@pytest.fixture
def fleet(start_fleet: Callable[..., Simulator], db: None) -> Simulator:
    sim = start_fleet()
    report = fleet_services.sync_all()
    assert report.ok, report.errors
    for slug in ("vision", "llm-platform"):
        Tenant.objects.create(slug=slug, display_name=slug)
    return sim


@pytest.fixture
def prometheus(fleet: Simulator, tmp_path: Path, settings: Any) -> Iterator[RunningPrometheus]:
    target = fleet.url.removeprefix("http://")
    with run_prometheus(tmp_path, _scrape_configs(target), ready=_both_jobs_up) as running:
        settings.BILLING_PROMETHEUS_URL = running.url
        settings.BILLING_PROMETHEUS_TIMEOUT = 10
        yield running


def _wait_for_window(prometheus: RunningPrometheus, seconds: int) -> tuple[int, int]:
    """A window of ``seconds`` whose every step both jobs have samples for: it starts two
    seconds after the first sample (the baseline step before it must be covered too) and
    ends before both jobs' latest sample (a range query repeats the last sample into the
    future)."""
    first = _value(prometheus, 'min(timestamp(DCGM_FI_DEV_GPU_TEMP{job=~"dcgm-.*"}))')
    assert first is not None
    start = int(first) + 3
    end = start + seconds
    latest = 'min(max by (job) (timestamp(DCGM_FI_DEV_GPU_TEMP{job=~"dcgm-.*"})))'
    wait_until(
        lambda: (_value(prometheus, latest) or 0) >= end + 1,
        seconds + 30,
        f"both jobs to have samples past {end}",
        details=prometheus.log,
        interval=0.5,
    )
    return start, end


@pytest.mark.django_db
@pytest.mark.parametrize("job", JOBS)
def test_it_ingests_prometheus_to_the_gpu_second(
    prometheus: RunningPrometheus, fleet: Simulator, settings: Any, job: str
) -> None:
    settings.BILLING_PROMETHEUS_SELECTOR = f'{{job="{job}"}}'
    client = services.prometheus()
    start, end = _wait_for_window(prometheus, 8)
    if job == "dcgm-target":
        # The chart's shape: the exporter's pod labels renamed, the plain ones the target's.
        result = client.query(f'DCGM_FI_DEV_GPU_UTIL{{job="{job}",exported_pod!=""}}', end)
        assert result.series
        assert {s.labels["namespace"] for s in result.series} == {"gpu-operator"}
        assert {workload_labels(s.labels)[0] for s in result.series} == {"vision", "llm-platform"}
    rollup = services.window_rollup("prometheus", start, end, 1)
    seconds = end - start
    lines = {(x.namespace, x.flavor, x.workload): x for x in rollup.lines}
    finetune = ("vision", "h200", "Job/finetune-vit")
    assert {key: line.allocated for key, line in lines.items()} == {
        finetune: 16 * seconds,
        ("vision", "h200-mig", "Job/eval-vit-small"): Fraction(3 * seconds, 7),
        ("vision", "h200-mig", "Job/eval-vit-large"): Fraction(3 * seconds, 7),
        # Two HAMi slots of 10% of the cores (above 14000 MiB of the memory): 0.1 each.
        ("llm-platform", "h200-hami", "ReplicaSet/chat-small-predictor-6d5f8c7b9c"): Fraction(
            2 * seconds, 10
        ),
    }
    for line in lines.values():
        assert line.observed_seconds == seconds
        assert 0.55 * line.allocated <= line.used <= 0.98 * line.allocated
    # Energy: the counter's increase on the pod's sixteen GPUs, as Prometheus itself says.
    gpus = {s.uuid for s in fleet.gpu_samples() if s.pod.startswith("finetune-vit")}
    energy = f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{job="{job}"}}'

    def counters(at: int) -> dict[str, float]:
        series = client.query(energy, at).series
        return {s.labels["UUID"]: s.points[0][1] for s in series if s.labels["UUID"] in gpus}

    before, after = counters(start - 1), counters(end - 1)
    assert len(before) == 16
    expected = sum(after[gpu] - before[gpu] for gpu in gpus)
    assert float(lines[finetune].energy_mj) == pytest.approx(expected, rel=1e-9)
    assert expected > 0


@pytest.mark.django_db
def test_it_ingests_whole_hours_from_prometheus(
    prometheus: RunningPrometheus, fleet: Simulator, settings: Any
) -> None:
    settings.BILLING_PROMETHEUS_SELECTOR = '{job="dcgm-honor"}'
    hour = services.last_complete_hour()
    # The fleet started minutes ago: the last complete hour has no samples, and says so by
    # having no rows rather than failing.
    run = services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="prometheus")
    assert (run.status, run.hours, run.rows) == ("succeeded", 1, 0)


@pytest.mark.django_db
def test_it_chunks_a_range_past_the_point_limit(prometheus: RunningPrometheus) -> None:
    client = Prometheus(prometheus.url)
    wait_until(  # a few samples in, so the last seconds have points
        lambda: (_value(prometheus, f"min(count_over_time({SAMPLES}[1m]))") or 0) >= 3,
        30,
        "three samples of each series",
        details=prometheus.log,
        interval=0.2,
    )
    now = int(time.time())
    query = f"count({SAMPLES})"
    # Prometheus itself refuses more than 11,000 points in one request...
    with pytest.raises(PrometheusError, match="exceeded maximum resolution") as refused:
        client._get(
            "/api/v1/query_range",
            {"query": query, "start": str(now - 2 * MAX_POINTS), "end": str(now), "step": "1"},
        )
    assert refused.value.error_type == "bad_data"
    # ...so the client asks in chunks and joins them: the same points as one short query.
    [long] = client.query_range(query, now - 3 * MAX_POINTS, now, 1).series
    [short] = client.query_range(query, now - 60, now, 1).series
    assert long.points[-len(short.points) :] == short.points
    assert len(long.points) == len(short.points)


@pytest.mark.django_db
def test_it_surfaces_prometheus_errors_and_changes_nothing(
    prometheus: RunningPrometheus, fleet: Simulator, settings: Any
) -> None:
    client = Prometheus(prometheus.url)
    with pytest.raises(PrometheusError) as bad:
        client.query("sum(")
    assert bad.value.error_type == "bad_data"
    assert "parse error" in bad.value.message
    hour = services.last_complete_hour()
    UsageHour.objects.create(
        hour=hour,
        namespace="vision",
        flavor="h200",
        workload="Job/old",
        source="prometheus",
        allocated_gpu_seconds=1,
        used_gpu_seconds=1,
    )
    # Prometheus down: the run fails visibly and the hour keeps its rows.
    settings.BILLING_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    run = services.do_ingest_hours(hour, hour + HOUR, acting_user=None, source="prometheus")
    assert run.status == IngestRun.Status.FAILED
    assert "could not be reached" in run.error
    assert list(UsageHour.objects.values_list("workload", flat=True)) == ["Job/old"]
