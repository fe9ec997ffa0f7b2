"""Debian's ``prometheus`` scrapes a live portal with the bearer token from a file, as the
ServiceMonitor's ``authorization.credentials`` Secret makes the Prometheus Operator do; a job
with the wrong token is refused (``up`` 0) and stores nothing of the portal's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gitops.models import ChangeRequest
from tests.support import shared_dir, wait_until
from tests.support.processes import database_url, gunicorn, portal_env
from tests.support.prometheus import RunningPrometheus, run_prometheus

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-for-prometheus-0123456789"


@pytest.fixture
def prometheus(live_server: Any, settings: Any, tmp_path: Path) -> Iterator[RunningPrometheus]:
    settings.METRICS_TOKEN = TOKEN
    right, wrong = tmp_path / "token", tmp_path / "wrong-token"
    right.write_text(TOKEN + "\n")
    wrong.write_text("not-the-token\n")
    target = live_server.url.removeprefix("http://")
    scrape_configs = [
        {
            "job_name": job,
            "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": str(file)},
            "static_configs": [{"targets": [target]}],
        }
        for job, file in (("portal", right), ("portal-wrong-token", wrong))
    ]
    with run_prometheus(tmp_path, scrape_configs) as running:
        yield running


def _wait_for(running: RunningPrometheus, promql: str, expected: float) -> list[dict[str, Any]]:
    return wait_until(
        lambda: [s for s in running.query(promql) if float(s["value"][1]) == expected],
        30,
        f"{promql} to be {expected}",
        details=running.log,
        interval=0.3,
    )


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_portal_with_its_token(prometheus: RunningPrometheus) -> None:
    _wait_for(prometheus, 'up{job="portal"}', 1)
    _wait_for(prometheus, 'up{job="portal-wrong-token"}', 0)
    _wait_for(prometheus, 'portal_changes_opened_total{job="portal",kind="tenant"}', 0)

    ChangeRequest.objects.create(title="Onboard alpha", kind=ChangeRequest.Kind.ONBOARDING)
    series = _wait_for(prometheus, 'portal_changes_opened_total{job="portal",kind="onboarding"}', 1)
    assert series[0]["metric"]["__name__"] == "portal_changes_opened_total"
    # Nothing of the portal's comes from the refused job.
    assert prometheus.query('portal_changes_opened_total{job="portal-wrong-token"}') == []


# --- several workers: PROMETHEUS_MULTIPROC_DIR ----------------------------------------------------


@pytest.fixture
def gunicorn_workers(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """The portal under gunicorn with two workers sharing PROMETHEUS_MULTIPROC_DIR."""
    multiproc = tmp_path / "prometheus-multiproc"
    multiproc.mkdir()
    env = portal_env(
        DATABASE_URL=database_url(),
        METRICS_TOKEN=TOKEN,
        PROMETHEUS_MULTIPROC_DIR=str(multiproc),
        FLEET_SIMULATOR="false",
    )
    with gunicorn(env, log_file=tmp_path / "gunicorn.log", options=["--workers=2"]) as url:
        yield url


def test_every_worker_answers_with_the_sum_over_all_workers(gunicorn_workers: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    requests_made = 24
    for _ in range(requests_made):
        # A new connection each time, so that either worker may take it.
        assert requests.get(f"{gunicorn_workers}/accounts/login/", timeout=10).status_code == 200

    def served() -> float:
        response = requests.get(
            f"{gunicorn_workers}/metrics",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        response.raise_for_status()
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == "django_http_requests_total_by_method_total" and (
                    sample.labels == {"method": "GET"}
                ):
                    return float(sample.value)
        raise AssertionError("no django_http_requests_total_by_method_total{method=GET}")

    # Whichever worker answers the scrape, it reports every worker's requests (the probes
    # themselves are not counted: they are answered before django-prometheus sees them).
    assert {served() for _ in range(6)} == {requests_made}


# --- the operator guide's ServiceMonitor ----------------------------------------------------------


def test_the_guides_servicemonitor_is_valid_and_matches_the_endpoint() -> None:
    from gitops.checks.schema import validate_object

    crds = shared_dir("crds")
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    section = guide.split("## Health, readiness and metrics", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:]]
    documents = [d for b in blocks for d in yaml.safe_load_all(b) if isinstance(d, dict)]
    monitors = [d for d in documents if d.get("kind") == "ServiceMonitor"]
    assert len(monitors) == 1
    monitor = monitors[0]
    monitor["metadata"]["namespace"] = "ai-factory-portal"  # the guide's placeholder
    assert validate_object(monitor, crds) == []
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["type"] == "Bearer"
    # The Secret the guide tells the operator to create, and the file the web pod reads.
    secret = endpoint["authorization"]["credentials"]
    assert f"create secret generic {secret['name']}" in section
    assert f"--from-literal={secret['key']}=" in section
    assert "METRICS_TOKEN_FILE" in section
