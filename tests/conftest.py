"""Shared fixtures: personas, a logged-in client per persona, and real-service helpers.

Personas (as in healthchecks): alice admins tenant "alpha", bob is a member of alpha, vic is
a viewer of alpha, charlie admins tenant "bravo" and belongs nowhere else, pam is a platform
admin, fiona is finance, nora has no tenant at all.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.middleware import LAST_ACTIVITY_KEY
from tenants.models import Membership, PlatformRole, Role, Tenant

PASSWORD = "correct-horse-battery"


def service_available(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a real service is absent on a developer's machine; fail in CI, where it must be."""
    if service_available(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if os.environ.get("PORTAL_TEST_REQUIRE_SERVICES"):
        pytest.fail(message + " (PORTAL_TEST_REQUIRE_SERVICES is set)")
    pytest.skip(message)


def use_celery_broker(app: Any, **conf: Any) -> dict[str, Any]:
    """Point the Celery ``app`` at another broker (``broker_url``, ``task_default_queue``...)
    and drop its pooled connections and producers, as Celery does after a fork: a pool made
    for the previous broker would go on publishing there (a test's worker would never see its
    task). Returns the old values, to give back to this function afterwards."""
    old = {key: app.conf[key] for key in conf}
    app.conf.update(conf)
    # Forgotten, not closed: a producer pool may still hold the old pool's connections.
    app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    return old


@contextmanager
def celery_worker(broker: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    """A real Celery worker (``--pool=solo``) on ``broker``, reading a queue of its own that
    the app in this process publishes to while it runs; ``env`` is added to its environment.
    The worker shares the test database (``database_url``)."""
    from portal.celery import app as celery_app

    require_service("Redis", "127.0.0.1", 6379)
    queue = f"portal-test-{uuid.uuid4().hex[:8]}"
    old = use_celery_broker(celery_app, broker_url=broker, task_default_queue=queue)
    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        **env,
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--loglevel=INFO",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ],
        cwd=Path(__file__).resolve().parents[1],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        use_celery_broker(celery_app, **old)


def database_url() -> str:
    """The test database as a DATABASE_URL, for a process of the portal a test starts."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    host = db.get("HOST") or "127.0.0.1"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture(autouse=True)
def _test_settings(settings: Any) -> None:
    # Jobs run in the test's own thread right after commit, so tests see their effects.
    settings.PORTAL_TASK_RUNNER = "eager"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    # The real hasher costs ~0.3 s a user; personas are made for every test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # What the checks keep by tenant stays in the test process (content-addressed, so tests
    # cannot see each other's values wrongly), not in the developer's var/.
    settings.GITOPS_CHECK_CACHE = "memory"
    # Schemas as a newcomer's clone has them: the built-in kinds the install ships, no CRDs
    # (not the developer's var/schemas, not ../shared); partial checks merge, as in the demo.
    # Tests about CRDs set GITOPS_SCHEMA_DIR themselves (tests/gitops/conftest.py schema_dir).
    settings.GITOPS_SCHEMA_DIR = ""
    settings.GITOPS_ALLOW_PARTIAL_CHECKS = True
    # The capacity what-if's shares kept in the process are kept by a version row that each
    # test's rolled-back database forgets: each test starts with none kept.
    from catalog import services as catalog_services

    catalog_services._SHARE_TOTALS = None


@pytest.fixture(autouse=True)
def _fleet_repository(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Each test writes its change requests into a fresh bare repository of its own.
    from gitops import services

    settings.GITOPS_REPO_PATH = tmp_path_factory.mktemp("git") / "fleet.git"
    services._open_repository.cache_clear()


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    def make(username: str, **extra: Any) -> Any:
        user = get_user_model().objects.create_user(
            username=username, email=f"{username}@example.com", password=PASSWORD, **extra
        )
        return user

    return make


@pytest.fixture
def world(make_user: Callable[..., Any]) -> dict[str, Any]:
    alpha = Tenant.objects.create(slug="alpha", display_name="Alpha Team", cost_centre="CC-1")
    bravo = Tenant.objects.create(
        slug="bravo", display_name="Bravo Team", trust_level=Tenant.TrustLevel.DEDICATED
    )
    people = {
        name: make_user(name) for name in ["alice", "bob", "vic", "charlie", "pam", "fiona", "nora"]
    }
    Membership.objects.create(user=people["alice"], tenant=alpha, role=Role.ADMIN)
    Membership.objects.create(user=people["bob"], tenant=alpha, role=Role.MEMBER)
    Membership.objects.create(user=people["vic"], tenant=alpha, role=Role.VIEWER)
    Membership.objects.create(user=people["charlie"], tenant=bravo, role=Role.ADMIN)
    PlatformRole.objects.create(user=people["pam"], role=PlatformRole.Name.PLATFORM_ADMIN)
    PlatformRole.objects.create(user=people["fiona"], role=PlatformRole.Name.FINANCE)
    return {"alpha": alpha, "bravo": bravo, **people}


@pytest.fixture
def login(world: dict[str, Any]) -> Callable[[str], Client]:
    def as_user(name: str) -> Client:
        client = Client()
        client.force_login(world[name])
        # As a sign-in through the login page does (portal.middleware): the session starts
        # active, so a test's first request is not the one that stamps it.
        session = client.session
        session[LAST_ACTIVITY_KEY] = int(time.time())
        session.save()
        return client

    return as_user


@pytest.fixture
def merged_change(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> Callable[..., Any]:
    """Open a change as bob, pass its checks, have pam approve and merge it; returns it.

    ``spec`` re-renders a tenant; ``remove`` decommissions one; ``changes`` writes raw files
    (for a change Flux cannot build)."""
    from gitops import services
    from gitops.fleet import configured_fleet
    from gitops.models import ChangeRequest

    def run(spec: Any = None, *, remove: str = "", changes: Any = None) -> Any:
        fleet = configured_fleet()
        with django_capture_on_commit_callbacks(execute=True):
            if spec is not None:
                change = services.open_tenant_change(
                    acting_user=world["bob"], tenant=spec, fleet=fleet, title="t", kind="tenant"
                )
            else:
                services.ensure_bootstrapped(fleet)
                change = services.open_change(
                    acting_user=world["bob"],
                    title=f"Decommission {remove}" if remove else "Raw change",
                    changes=changes or services.tenant_removal_changes(remove, fleet),
                    kind=ChangeRequest.Kind.DECOMMISSION if remove else ChangeRequest.Kind.PLATFORM,
                    tenant_slug=remove,
                )
        ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
        change.refresh_from_db()
        services.do_review(change, acting_user=world["pam"], state="approve")
        with django_capture_on_commit_callbacks(execute=True):
            return services.do_merge(change, acting_user=world["pam"])

    return run


@pytest.fixture
def start_fleet(settings: Any) -> Iterator[Callable[..., Any]]:
    """Start the demo fleet's simulator, playing Flux on this test's repository, with no
    delays, and point the portal's Kubernetes client at it; stopped after the test.

    ``tick_seconds=None`` (the default): nothing moves until the test calls ``tick()``, so
    what it sees never depends on timing. Browser tests pass a period instead.
    """
    import dataclasses

    from fleet.simulator import Simulator
    from fleet.simulator.config import SimConfig
    from gitops.sources import simulator_git_options

    started: list[Any] = []

    def start(
        *, tick_seconds: float | None = None, flux_events_secret: bytes = b"", **config_changes: Any
    ) -> Any:
        config = dataclasses.replace(
            SimConfig.demo(),
            flux_delay=0,
            ready_delay=0,
            recreate_delay=0,
            fleet_name=settings.GITOPS_FLEET_NAME,
            **config_changes,
        )
        settings.GITOPS_HTTP_TOKENS = ["platform-test-token"]
        simulator = Simulator(
            config,
            repo_path=settings.GITOPS_REPO_PATH,
            branch="main",
            flux_events_secret=flux_events_secret,
            **simulator_git_options(),
        )
        started.append(simulator)
        settings.FLEET_API_URL = simulator.start("127.0.0.1", 0, tick_seconds=tick_seconds)
        settings.BILLING_OPENCOST_URL = settings.FLEET_API_URL  # its OpenCost allocation API
        settings.FLEET_API_TOKEN = ""
        settings.FLEET_KUBECONFIG = ""
        settings.FLEET_IN_CLUSTER = False
        settings.FLEET_API_TIMEOUT = 5
        settings.FLEET_EVICTION_RETRY_SECONDS = 0
        return simulator

    yield start
    for simulator in started:
        simulator.stop()
