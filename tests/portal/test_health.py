"""/healthz and /readyz against real parts: Redis, bare repositories, the portal's own Git
HTTP endpoint as a remote, the simulator, and closed ports for each one down.

A kubelet probes plain HTTP with the pod's IP as Host and no session, so every probe here is
also made that way, with the HTTPS redirect on and the IP not in ALLOWED_HOSTS.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client

from gitops import health as git_health
from gitops.repo import GitRepository, Identity
from tests.support import free_port, require_service
from tests.support.processes import gunicorn, portal_env

REDIS = "redis://127.0.0.1:6379/11"
POD_IP = "10.244.1.17:8000"
TOKEN = "platform-token-for-the-remote"
METRICS_TOKEN = "metrics-token-for-prometheus"
OPERATOR = {"Authorization": f"Bearer {METRICS_TOKEN}"}
ALICE = Identity("Alice Admin", "alice@example.com")


def probe(path: str, headers: dict[str, str] | None = None) -> Any:
    """GET as a kubelet does: plain HTTP, the pod's IP as Host, no cookies."""
    return Client().get(path, HTTP_HOST=POD_IP, headers=headers)


@pytest.fixture(autouse=True)
def _as_deployed(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["portal.example.com"]
    settings.CELERY_BROKER_URL = ""
    settings.GITOPS_REMOTE_URL = ""
    settings.FLEET_API_URL = f"http://127.0.0.1:{free_port()}"
    settings.FLEET_KUBECONFIG = ""
    settings.FLEET_IN_CLUSTER = False
    settings.PORTAL_READINESS_TIMEOUT_SECONDS = 2
    settings.METRICS_TOKEN = METRICS_TOKEN
    git_health._remote_cache.clear()


@pytest.fixture
def main(settings: Any) -> str:
    repo = GitRepository.open_or_init(settings.GITOPS_REPO_PATH)
    return repo.commit(
        {"clusters/ai-factory/tenants.yaml": b"kind: Kustomization\n"},
        message="Bootstrap\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )


def ready(path: str = "/readyz") -> tuple[int, dict[str, Any]]:
    """The status and the whole report, as an operator with the metrics token sees it."""
    response = probe(path, OPERATOR)
    assert response["Content-Type"] == "application/json"
    return response.status_code, json.loads(response.content)


# --- /healthz ---------------------------------------------------------------------------------


def test_it_answers_healthz_without_the_database() -> None:
    # No db fixture: pytest-django refuses any query, so a probe that touched the database
    # would fail here.
    response = probe("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


def test_it_probes_past_the_https_redirect_and_the_host_check(db: None) -> None:
    # What the probe paths skip: any other page with this Host is refused, and over HTTP it
    # would be redirected.
    assert Client().get("/", HTTP_HOST=POD_IP).status_code == 400
    assert Client().get("/", HTTP_HOST="portal.example.com").status_code == 301
    assert probe("/healthz").status_code == 200
    assert probe("/readyz").status_code == 200


def test_it_answers_only_get_and_head(db: None) -> None:
    response = Client().post("/healthz", HTTP_HOST=POD_IP)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert Client().head("/healthz", HTTP_HOST=POD_IP).status_code == 200


# --- /readyz ----------------------------------------------------------------------------------


def test_it_is_ready_on_the_embedded_defaults(db: None, main: str) -> None:
    status, body = ready()
    assert status == 200
    assert body["status"] == "ok"
    checks = body["checks"]
    assert set(checks) == {"database", "broker", "git", "git_remote", "cluster"}
    assert checks["database"]["status"] == "ok"
    assert checks["database"]["required"] is True
    assert checks["broker"]["status"] == "not-configured"
    assert "embedded runner" in checks["broker"]["reason"]
    assert checks["git"] == {
        "status": "ok",
        "reason": f"main at {main[:12]}",
        "latency_ms": checks["git"]["latency_ms"],
        "required": True,
    }
    assert checks["git_remote"]["status"] == "not-configured"
    for entry in checks.values():
        assert isinstance(entry["latency_ms"], float)
        assert entry["latency_ms"] >= 0


def test_an_anonymous_probe_gets_the_status_only(db: None, settings: Any, tmp_path: Path) -> None:
    # The components' names, reasons and timings say which broker, remote and cluster the
    # portal uses and which is down: for the operator (the metrics token), not for anyone.
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        response = probe("/readyz", headers)
        assert (response.status_code, json.loads(response.content)) == (200, {"status": "ok"})
    broken = tmp_path / "not-a-repo.git"
    broken.write_text("oops")
    settings.GITOPS_REPO_PATH = broken
    from gitops import services

    services._open_repository.cache_clear()
    response = probe("/readyz")
    assert (response.status_code, json.loads(response.content)) == (503, {"status": "fail"})
    assert probe("/readyz", OPERATOR).json()["checks"]["git"]["status"] == "failed"


def test_without_a_metrics_token_nobody_gets_the_details(db: None, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    for headers in (None, OPERATOR, {"Authorization": "Bearer "}):
        response = probe("/readyz", headers)
        assert json.loads(response.content) == {"status": "ok"}


def test_it_is_ready_before_the_first_change(db: None, settings: Any) -> None:
    # A fresh install has no repository yet: it must become ready, or nobody could open the
    # change that creates main.
    assert not Path(settings.GITOPS_REPO_PATH).exists()
    status, body = ready()
    assert status == 200
    assert body["checks"]["git"]["status"] == "ok"
    assert "made by the first change" in body["checks"]["git"]["reason"]


def test_it_is_not_ready_when_the_git_store_is_broken(
    db: None, settings: Any, tmp_path: Path
) -> None:
    from gitops import services

    # A file where the repository should be: it cannot be opened or created.
    broken = tmp_path / "not-a-repo.git"
    broken.write_text("oops")
    settings.GITOPS_REPO_PATH = broken
    services._open_repository.cache_clear()
    status, body = ready()
    assert status == 503
    assert body["status"] == "fail"
    assert body["checks"]["git"]["status"] == "failed"
    assert body["checks"]["git"]["reason"]
    assert body["checks"]["database"]["status"] == "ok"


def test_it_is_not_ready_when_main_points_at_a_missing_commit(
    db: None, settings: Any, main: str
) -> None:
    ref = Path(settings.GITOPS_REPO_PATH) / "refs" / "heads" / "main"
    missing = "0123456789abcdef0123456789abcdef01234567"
    if ref.exists():
        ref.write_text(missing + "\n")
    else:
        packed = Path(settings.GITOPS_REPO_PATH) / "packed-refs"
        packed.write_text(packed.read_text().replace(main, missing))
    status, body = ready()
    assert status == 503
    assert body["checks"]["git"]["status"] == "failed"
    assert missing[:12] in body["checks"]["git"]["reason"]


def test_it_reports_a_live_broker(db: None, main: str, settings: Any) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    settings.CELERY_BROKER_URL = REDIS
    status, body = ready()
    assert status == 200
    assert body["checks"]["broker"]["status"] == "ok"
    assert "127.0.0.1:6379/11" in body["checks"]["broker"]["reason"]


def test_a_broker_down_is_reported_and_optional_by_default(
    db: None, main: str, settings: Any
) -> None:
    settings.CELERY_BROKER_URL = f"redis://:hunter2@127.0.0.1:{free_port()}/11"
    status, body = ready()
    assert status == 200
    broker = body["checks"]["broker"]
    assert broker["status"] == "failed"
    assert broker["required"] is False
    assert "refused" in broker["reason"].lower()
    assert "hunter2" not in json.dumps(body)


def test_a_required_broker_down_makes_it_unready(db: None, main: str, settings: Any) -> None:
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/11"
    settings.PORTAL_READINESS_REQUIRED = ["database", "git", "broker"]
    status, body = ready()
    assert status == 503
    assert body["checks"]["broker"]["required"] is True


def test_it_reports_the_cluster_api(
    db: None, main: str, start_fleet: Callable[..., Any], settings: Any
) -> None:
    start_fleet()
    status, body = ready()
    assert status == 200
    cluster = body["checks"]["cluster"]
    assert cluster["status"] == "ok", cluster
    assert settings.FLEET_API_URL in cluster["reason"]
    assert "Kubernetes v" in cluster["reason"]


def test_a_cluster_api_outage_does_not_take_the_pod_out(db: None, main: str) -> None:
    status, body = ready()
    assert status == 200
    cluster = body["checks"]["cluster"]
    assert cluster["status"] == "failed"
    assert cluster["required"] is False
    assert "did not answer" in cluster["reason"]


# --- the Git remote ---------------------------------------------------------------------------


def test_it_reaches_a_local_remote_and_caches_the_answer(
    db: None, main: str, settings: Any, tmp_path: Path
) -> None:
    remote = GitRepository.open_or_init(tmp_path / "remote.git")
    remote_main = remote.commit(
        {"README": b"remote\n"}, message="Init\n", author=ALICE, branch="main", expected_parent=None
    )
    settings.GITOPS_REMOTE_URL = str(remote.path)
    _, body = ready()
    assert body["checks"]["git_remote"]["status"] == "ok"
    assert remote_main[:12] in body["checks"]["git_remote"]["reason"]
    # Gone, but the answer is remembered for a while: probes do not each call the forge.
    os.rename(remote.path, tmp_path / "moved.git")
    assert ready()[1]["checks"]["git_remote"]["status"] == "ok"
    settings.PORTAL_READINESS_REMOTE_CACHE_SECONDS = 0
    status, body = ready()
    assert body["checks"]["git_remote"]["status"] == "failed"
    # The remote is reported, not required: merges wait for it, pages do not.
    assert status == 200


@pytest.mark.django_db(transaction=True)
def test_it_authenticates_to_an_http_remote(live_server: Any, main: str, settings: Any) -> None:
    # The portal's own Git HTTP endpoint as the remote: it wants a token as the password.
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
    settings.GITOPS_HTTP_TOKENS = [TOKEN]
    settings.GITOPS_REMOTE_URL = f"{live_server.url}/git/fleet.git"
    settings.GITOPS_REMOTE_USERNAME = "flux"
    settings.GITOPS_REMOTE_PASSWORD = TOKEN
    settings.PORTAL_READINESS_TIMEOUT_SECONDS = 10
    _, body = ready()
    assert body["checks"]["git_remote"]["status"] == "ok", body["checks"]["git_remote"]
    assert main[:12] in body["checks"]["git_remote"]["reason"]

    git_health._remote_cache.clear()
    settings.GITOPS_REMOTE_PASSWORD = "wrong-password-not-to-be-shown"
    _, body = ready()
    assert body["checks"]["git_remote"]["status"] == "failed"
    assert "wrong-password" not in json.dumps(body)


def test_an_unreachable_remote_fails_within_the_timeout(db: None, main: str, settings: Any) -> None:
    # Accepts the connection and never answers: only the timeout ends the call.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        settings.GITOPS_REMOTE_URL = f"http://user:s3cret@127.0.0.1:{port}/fleet.git"
        settings.PORTAL_READINESS_TIMEOUT_SECONDS = 1
        started = time.monotonic()
        _, body = ready()
        took = time.monotonic() - started
    remote = body["checks"]["git_remote"]
    assert remote["status"] == "failed"
    assert "did not answer within 1s" in remote["reason"]
    assert "s3cret" not in json.dumps(body)
    # Bounded by the timeout (generously: this is a correctness check, not a benchmark).
    assert took < 10


# --- the database down, in a real portal process ------------------------------------------------


@contextmanager
def _portal_with_database_at(
    port: int, settings: Any, log_file: Path, **env_extra: str
) -> Iterator[str]:
    """The portal under gunicorn with its database at ``127.0.0.1:port``; yields its URL."""
    env = portal_env(
        DATABASE_URL=f"postgres://portal@127.0.0.1:{port}/portal",
        GITOPS_REPO_PATH=str(settings.GITOPS_REPO_PATH),
        FLEET_SIMULATOR="false",
        FLEET_API_URL=f"http://127.0.0.1:{free_port()}",
        PORTAL_READINESS_TIMEOUT_SECONDS="1",
        METRICS_TOKEN=METRICS_TOKEN,
        **env_extra,
    )
    env.pop("CELERY_BROKER_URL", None)
    with gunicorn(env, log_file=log_file) as url:
        yield url


@pytest.fixture
def portal_without_database(settings: Any, tmp_path: Path) -> Iterator[str]:
    """The portal under gunicorn with its database on a closed port; yields its URL."""
    with _portal_with_database_at(free_port(), settings, tmp_path / "gunicorn.log") as url:
        yield url


@pytest.fixture
def portal_with_a_silent_database(settings: Any, tmp_path: Path) -> Iterator[str]:
    """The portal with its database at a port that takes connections and never answers (a
    host that drops packets, or another program on the port), DATABASE_CONNECT_TIMEOUT 2."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = int(silent.getsockname()[1])
        with _portal_with_database_at(
            port, settings, tmp_path / "gunicorn.log", DATABASE_CONNECT_TIMEOUT="2"
        ) as url:
            yield url


def test_a_database_that_never_answers_fails_readiness_within_the_connect_timeout(
    portal_with_a_silent_database: str, main: str
) -> None:
    """Without a connect timeout libpq waits for ever: the probe (and every request) hung
    until gunicorn killed its worker, and the kubelet saw a timeout instead of the reason."""
    started = time.monotonic()
    readiness = requests.get(
        f"{portal_with_a_silent_database}/readyz", headers={"Host": POD_IP, **OPERATOR}, timeout=25
    )
    assert readiness.status_code == 503
    assert time.monotonic() - started < 20
    database = readiness.json()["checks"]["database"]
    assert database["status"] == "failed"
    assert "OperationalError" in database["reason"] and "timeout" in database["reason"].lower()


def test_the_database_down_fails_readiness_but_not_liveness(
    portal_without_database: str, main: str
) -> None:
    url = portal_without_database
    headers = {"Host": POD_IP}
    health = requests.get(f"{url}/healthz", headers=headers, timeout=10)
    assert (health.status_code, health.text) == (200, "ok\n")
    readiness = requests.get(f"{url}/readyz", headers={**headers, **OPERATOR}, timeout=30)
    assert readiness.status_code == 503
    body = readiness.json()
    assert body["status"] == "fail"
    assert body["checks"]["database"]["status"] == "failed"
    assert "OperationalError" in body["checks"]["database"]["reason"]
    assert body["checks"]["git"]["status"] == "ok"
