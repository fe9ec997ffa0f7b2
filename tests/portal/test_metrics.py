"""/metrics: the token, and the portal's own series moving with the rows they count.

The values are read back with prometheus_client's own text parser, so what is asserted is
what Prometheus would store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import prometheus_client
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from fleet.models import SyncState
from gitops import applied, services
from gitops.models import ChangeRequest
from gitops.specs import TenantSpec
from portal.jobs import enqueue, run_job
from portal.models import Job

TOKEN = "metrics-token-0123456789abcdef"
POD_IP = "10.244.1.17:8000"

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(autouse=True)
def _token(settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["portal.example.com"]


def scrape(token: str | None = TOKEN) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return Client().get("/metrics", HTTP_HOST=POD_IP, **headers)


def series() -> Series:
    response = scrape()
    assert response.status_code == 200, response.content
    found: Series = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Series, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def buckets(found: Series, name: str) -> dict[str, float]:
    return {dict(labels)["le"]: v for (n, labels), v in found.items() if n == f"{name}_bucket"}


# --- protection -----------------------------------------------------------------------------


def test_it_is_off_without_a_token(db: None, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert scrape().status_code == 404
    assert scrape(None).status_code == 404
    assert scrape("").status_code == 404


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer wrong-token",
        f"Bearer {TOKEN[:-1]}",
        f"Basic {TOKEN}",
        f"{TOKEN}",
        "Bearer ",
    ],
)
def test_it_refuses_a_missing_or_wrong_token(db: None, header: str | None) -> None:
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = Client().get("/metrics", HTTP_HOST=POD_IP, **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"portal_" not in response.content
    assert TOKEN.encode() not in response.content


def test_it_serves_prometheus_text_with_the_token(db: None) -> None:
    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"] == prometheus_client.CONTENT_TYPE_LATEST
    text = response.content.decode()
    assert "# TYPE portal_changes_opened_total counter" in text
    assert "# TYPE portal_check_duration_seconds histogram" in text
    # django-prometheus's own series come along.
    assert "django_http_requests_before_middlewares_total" in text


# --- the portal's numbers ---------------------------------------------------------------------


def test_changes_opened_merged_and_check_durations_follow_the_rows(
    merged_change: Callable[..., ChangeRequest],
) -> None:
    before = series()
    for kind in ChangeRequest.Kind.values:
        assert value(before, "portal_changes_opened_total", kind=kind) == 0
    assert buckets(before, "portal_check_duration_seconds")["+Inf"] == 0

    merged_change(TenantSpec(slug="alpha"), run_checks=True)
    after = series()
    assert value(after, "portal_changes_opened_total", kind="tenant") == 1
    assert value(after, "portal_changes_merged_total", kind="tenant") == 1
    assert value(after, "portal_changes_open", kind="tenant") == 0
    assert value(after, "portal_changes_opened_total", kind="gpu-share") == 0
    # The checks ran (eagerly, as a job) when the change was opened.
    ran = Job.objects.get(task="gitops.run_checks")
    took = (ran.finished_at - ran.started_at).total_seconds()
    histogram = buckets(after, "portal_check_duration_seconds")
    assert histogram["+Inf"] == 1
    assert value(after, "portal_check_duration_seconds_gcount") == 1
    assert value(after, "portal_check_duration_seconds_gsum") == pytest.approx(took, abs=1e-3)
    for bound, count in histogram.items():
        assert count == (1 if bound == "+Inf" or took <= float(bound) else 0)

    # Outside the window, a run no longer counts.
    Job.objects.filter(pk=ran.pk).update(finished_at=timezone.now() - timedelta(hours=2))
    assert buckets(series(), "portal_check_duration_seconds")["+Inf"] == 0


def test_flux_apply_lag_is_merge_to_applied(merged_change: Callable[..., ChangeRequest]) -> None:
    # Files no Flux Kustomization reads: the status sync finds it applied at once.
    change = merged_change(changes={"notes/runbook.txt": b"hello\n"})
    assert change.apply_state == ChangeRequest.Apply.PENDING
    assert buckets(series(), "portal_change_apply_lag_seconds")["+Inf"] == 0
    ChangeRequest.objects.filter(pk=change.pk).update(
        merged_at=timezone.now() - timedelta(seconds=42)
    )
    applied.update_apply_states(services.repository(), [])
    change.refresh_from_db()
    assert change.apply_state == ChangeRequest.Apply.APPLIED
    assert change.applied_at is not None
    lag = (change.applied_at - change.merged_at).total_seconds()
    assert 42 <= lag < 60
    found = series()
    histogram = buckets(found, "portal_change_apply_lag_seconds")
    assert histogram["30.0"] == 0
    assert histogram["60.0"] == 1
    assert histogram["+Inf"] == 1
    assert value(found, "portal_change_apply_lag_seconds_gsum") == pytest.approx(lag, abs=1e-3)


def test_the_job_queue_depth_and_age(db: None, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        first = enqueue("portal.housekeeping", title="housekeeping")
        enqueue("portal.housekeeping", title="housekeeping")
    Job.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(seconds=120))
    found = series()
    assert value(found, "portal_jobs", task="portal.housekeeping", status="queued") == 2
    age = value(found, "portal_job_oldest_queued_age_seconds", task="portal.housekeeping")
    assert 120 <= age < 180

    run_job(first.pk)
    found = series()
    assert value(found, "portal_jobs", task="portal.housekeeping", status="queued") == 1
    assert value(found, "portal_job_oldest_queued_age_seconds", task="portal.housekeeping") < 60

    Job.objects.filter(status=Job.Status.QUEUED).update(status=Job.Status.RUNNING)
    found = series()
    assert value(found, "portal_jobs", task="portal.housekeeping", status="running") == 1
    assert not [key for key in found if key[0] == "portal_job_oldest_queued_age_seconds"]


def test_sync_staleness_per_source(db: None) -> None:
    now = timezone.now()
    SyncState.objects.create(source="nodes", last_success=now - timedelta(seconds=30))
    SyncState.objects.create(
        source="flux",
        last_success=now - timedelta(seconds=600),
        error="Could not list kustomizations: HTTP 503",
    )
    SyncState.objects.create(source="kserve", error="never read")
    found = series()
    assert 30 <= value(found, "portal_fleet_sync_age_seconds", source="nodes") < 60
    assert 600 <= value(found, "portal_fleet_sync_age_seconds", source="flux") < 630
    assert ("portal_fleet_sync_age_seconds", (("source", "kserve"),)) not in found
    assert value(found, "portal_fleet_sync_failing", source="nodes") == 0
    assert value(found, "portal_fleet_sync_failing", source="flux") == 1
    assert value(found, "portal_fleet_sync_failing", source="kserve") == 1


def broken_collector() -> Iterable[prometheus_client.Metric]:
    raise RuntimeError("this collector is broken on purpose")


def test_a_failing_collector_does_not_hide_the_others(db: None, settings: Any) -> None:
    broken = "tests.portal.test_metrics.broken_collector"
    settings.PORTAL_METRICS_COLLECTORS = [*settings.PORTAL_METRICS_COLLECTORS, broken]
    found = series()
    assert value(found, "portal_metrics_collector_failed", collector=broken) == 1
    assert (
        value(found, "portal_metrics_collector_failed", collector="gitops.metrics.change_metrics")
        == 0
    )
    assert value(found, "portal_changes_opened_total", kind="tenant") == 0


# --- the cost of a scrape -----------------------------------------------------------------------


def _fill(n: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            task=f"task.{i % 7}",
            status=[Job.Status.QUEUED, Job.Status.RUNNING, Job.Status.SUCCEEDED][i % 3],
            started_at=now - timedelta(seconds=5),
            finished_at=now,
        )
        for i in range(n)
    )
    Job.objects.bulk_create(
        Job(task="gitops.run_checks", status=Job.Status.SUCCEEDED, started_at=now, finished_at=now)
        for _ in range(n)
    )
    ChangeRequest.objects.bulk_create(
        ChangeRequest(
            title=f"c{i}",
            kind=ChangeRequest.Kind.values[i % 7],
            status="merged",
            merge_sha="a" * 40,
            merged_at=now - timedelta(seconds=3),
            applied_at=now,
        )
        for i in range(n)
    )


@pytest.mark.db_engine
def test_a_scrape_costs_a_fixed_number_of_queries(db: None) -> None:
    for source in SyncState.Source.values:
        SyncState.objects.create(source=source, last_success=timezone.now())
    counts = []
    for n in (10, 200):
        _fill(n)
        with CaptureQueriesContext(connection) as queries:
            assert scrape().status_code == 200
        counts.append(len(queries))
    # Jobs: depth and age (1); changes: counts (1), apply lag (1), check durations (1);
    # sync states (1).
    assert counts == [5, 5]
