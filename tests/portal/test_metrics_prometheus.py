"""Debian's ``prometheus`` scrapes a live portal with the bearer token from a file, as the
ServiceMonitor's ``authorization.credentials`` Secret makes the Prometheus Operator do; a job
with the wrong token is refused (``up`` 0) and stores nothing of the portal's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gitops.models import ChangeRequest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-for-prometheus-0123456789"
START_TIMEOUT = 60


@dataclass
class RunningPrometheus:
    url: str
    log_file: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def prometheus(live_server: Any, settings: Any, tmp_path: Path) -> Iterator[RunningPrometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        message = "Debian's prometheus is not installed (make system-deps)"
        if os.environ.get("PORTAL_TEST_REQUIRE_SERVICES"):
            pytest.fail(message + " (PORTAL_TEST_REQUIRE_SERVICES is set)")
        pytest.skip(message)
    settings.METRICS_TOKEN = TOKEN
    right, wrong = tmp_path / "token", tmp_path / "wrong-token"
    right.write_text(TOKEN + "\n")
    wrong.write_text("not-the-token\n")
    target = live_server.url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(file)},
                "static_configs": [{"targets": [target]}],
            }
            for job, file in (("portal", right), ("portal-wrong-token", wrong))
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = _free_port()
    log_file = tmp_path / "prometheus.log"
    with log_file.open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    running = RunningPrometheus(f"http://127.0.0.1:{port}", log_file)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited ({proc.returncode}):\n{log_file.read_text()}")
            try:
                up = running.query('up{job=~"portal.*"}')
            except requests.RequestException:
                up = []
            if len(up) == 2:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"prometheus did not scrape in {START_TIMEOUT}s:\n{log_file.read_text()}"
                )
            time.sleep(0.2)
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(running: RunningPrometheus, promql: str, expected: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        result = running.query(promql)
        if result and float(result[0]["value"][1]) == expected:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{promql} is {result}, not {expected}:\n{running.log_file.read_text()}")
        time.sleep(0.3)


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
    from tests.conftest import database_url

    port = _free_port()
    multiproc = tmp_path / "prometheus-multiproc"
    multiproc.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": database_url(),
        "METRICS_TOKEN": TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        "FLEET_SIMULATOR": "false",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers=2",
            f"--bind=127.0.0.1:{port}",
            "portal.wsgi",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{url}/healthz", timeout=2).raise_for_status()
                break
            except requests.RequestException:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.terminate()
                    _, errors = server.communicate(timeout=10)
                    pytest.fail(f"gunicorn did not start: {errors.decode()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


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

    crds = ROOT.parent / "shared" / "crds"
    if not crds.is_dir():
        if os.environ.get("PORTAL_TEST_REQUIRE_SERVICES"):
            pytest.fail(f"{crds} is missing (PORTAL_TEST_REQUIRE_SERVICES is set)")
        pytest.skip("../shared/crds is not beside the checkout")
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
