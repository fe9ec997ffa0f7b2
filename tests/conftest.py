"""Shared fixtures: personas, a logged-in client per persona, and real-service helpers.

Personas (as in healthchecks): alice admins tenant "alpha", bob is a member of alpha, vic is
a viewer of alpha, charlie admins tenant "bravo" and belongs nowhere else, pam is a platform
admin, fiona is finance, nora has no tenant at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.middleware import LAST_ACTIVITY_KEY
from tenants.models import Membership, PlatformRole, Role, Tenant
from tests.support.skips import REQUIRE_SERVICES, services_required, skip_reason, unexpected_skips

PASSWORD = "correct-horse-battery"

# --- a CI run shows no skip it did not agree to (tests/support/skips.py) ---------------------

_skipped: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under pytest-xdist the controller sees every worker's reports here too.
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, skip_reason(report.longrepr)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append((report.nodeid, skip_reason(report.longrepr)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller decides
    if services_required() and unexpected_skips(_skipped) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    unexpected = unexpected_skips(_skipped) if services_required() else []
    if unexpected:
        terminalreporter.section(f"skips not allowed with {REQUIRE_SERVICES} set", red=True)
        for test_id, reason in unexpected:
            terminalreporter.line(f"{test_id}: {reason}")
        terminalreporter.line("Make them run, or allow them in tests/support/skips.py.")


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
    (for a change Flux cannot build). It sets a scene: the checks are marked passed without
    running, as they cost about half a second a change (tests/gitops tests them);
    ``run_checks=True`` runs them too, as a job, for a test about that job."""
    from gitops import services
    from gitops.fleet import configured_fleet
    from gitops.models import ChangeRequest

    def run(
        spec: Any = None, *, remove: str = "", changes: Any = None, run_checks: bool = False
    ) -> Any:
        fleet = configured_fleet()
        with django_capture_on_commit_callbacks(execute=True):
            if spec is not None:
                change = services.open_tenant_change(
                    acting_user=world["bob"],
                    tenant=spec,
                    fleet=fleet,
                    title="t",
                    kind="tenant",
                    run_checks=run_checks,
                )
            else:
                services.ensure_bootstrapped(fleet)
                change = services.open_change(
                    acting_user=world["bob"],
                    title=f"Decommission {remove}" if remove else "Raw change",
                    changes=changes or services.tenant_removal_changes(remove, fleet),
                    kind=ChangeRequest.Kind.DECOMMISSION if remove else ChangeRequest.Kind.PLATFORM,
                    tenant_slug=remove,
                    run_checks=run_checks,
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
    ``as_account="system:serviceaccount:<ns>:<name>"`` gives the portal a token of that
    service account instead of the administrator's rights, so RBAC decides its requests.
    """
    import dataclasses

    from gitops.sources import simulator_git_options
    from simulator import Simulator
    from simulator.config import SimConfig

    started: list[Any] = []

    def start(
        *,
        tick_seconds: float | None = None,
        flux_events_secret: bytes = b"",
        as_account: str = "",
        **config_changes: Any,
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
            service_account_tokens={"account-token": as_account} if as_account else None,
            **simulator_git_options(),
        )
        started.append(simulator)
        settings.FLEET_API_URL = simulator.start("127.0.0.1", 0, tick_seconds=tick_seconds)
        settings.BILLING_OPENCOST_URL = settings.FLEET_API_URL  # its OpenCost allocation API
        settings.FLEET_API_TOKEN = "account-token" if as_account else ""
        settings.FLEET_KUBECONFIG = ""
        settings.FLEET_IN_CLUSTER = False
        settings.FLEET_API_TIMEOUT = 5
        settings.FLEET_EVICTION_RETRY_SECONDS = 0
        return simulator

    yield start
    for simulator in started:
        simulator.stop()


@pytest.fixture
def odd_amounts(world: dict[str, Any]) -> dict[str, int]:
    """Amounts that do not round to two places, for the walks that check numbers: MIG slices
    used at a four-decimal price, a drafted invoice, a request waiting for approval
    (tests/support/numbers.py). Returns the invoice's and the request's ids."""
    from tests.support.numbers import seed_odd_amounts

    return seed_odd_amounts(world)
