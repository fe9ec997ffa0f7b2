"""Liveness and readiness: what a kubelet (or a load balancer) asks the portal.

``/healthz`` says the process answers HTTP, and touches nothing else: a liveness probe that
also checked the database would restart every pod whenever PostgreSQL blinked.

``/readyz`` runs one check per component and reports each, with a short reason and how long
it took. The portal owns the database and broker checks; the Git store and the cluster API
belong to their apps, which register theirs through PORTAL_READINESS_CHECKS (dotted paths,
as GITOPS_CHANGE_POLICY is), so the portal imports no app. Only the components named in
PORTAL_READINESS_REQUIRED make the answer 503 when they fail; the others are reported for the
operator to see (docs/architecture.md, "Health, readiness and metrics", says which and why).

Anyone may ask (a kubelet sends no credentials), so an anonymous answer is the verdict only,
``{"status": "ok"}`` or ``{"status": "fail"}`` with 200 or 503. The per-component report names
the broker, remote and cluster and says which is down: it is for the operator, who sends the
metrics bearer token (METRICS_TOKEN, checked as /metrics checks it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.module_loading import import_string

from portal.metrics import authorized

Status = Literal["ok", "failed", "not-configured"]


@dataclass(frozen=True)
class CheckResult:
    """One component's answer. A check returns it; the runner adds the latency."""

    status: Status
    reason: str


Check = Callable[[], CheckResult]


def ok(reason: str) -> CheckResult:
    return CheckResult("ok", reason)


def failed(reason: str) -> CheckResult:
    return CheckResult("failed", reason)


def not_configured(reason: str) -> CheckResult:
    return CheckResult("not-configured", reason)


def database() -> CheckResult:
    """A real query on the default database (a connection alone may be a pooled, dead one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return ok(f"{connection.vendor} answered")


def broker() -> CheckResult:
    """The Celery broker answers, through Celery's own connection (the one jobs are sent on)."""
    if not settings.CELERY_BROKER_URL:
        return not_configured("no broker: jobs run on the embedded runner in this process")
    from portal.celery import app

    timeout = settings.PORTAL_READINESS_TIMEOUT_SECONDS
    # The URL from settings, not the app's copy of it: they are the same in a deployment, and
    # the probe reports what this process is configured with.
    url = settings.CELERY_BROKER_URL
    with app.connection_for_write(url=url, connect_timeout=timeout) as conn:
        # max_retries=0: one attempt. Celery's own default retries for ever, and a probe
        # that waits is a probe that times out without saying why.
        conn.ensure_connection(max_retries=0)
        # Creating a channel is what makes the Redis transport send PING.
        conn.default_channel  # noqa: B018
        where = conn.as_uri()  # without the password
    return ok(f"{where} answered")


BUILT_IN: dict[str, Check] = {"database": database, "broker": broker}


def registered_checks() -> dict[str, Check]:
    """The portal's own checks, then the apps' (PORTAL_READINESS_CHECKS), by component name."""
    checks = dict(BUILT_IN)
    for name, path in settings.PORTAL_READINESS_CHECKS.items():
        checks[name] = import_string(path)
    return checks


def _timed(check: Check, *, in_thread: bool) -> dict[str, object]:
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:
        # The probe's job is to say what is wrong, not to fail with it. The exception's
        # class and first line are enough; secrets are not in them (URLs are redacted by the
        # checks that use them).
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        result = failed(f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__)
    finally:
        if in_thread:
            # A check run on a pool thread may have opened a connection there.
            connection.close()
    latency = (time.perf_counter() - started) * 1000
    return {"status": result.status, "reason": result.reason, "latency_ms": round(latency, 1)}


def readiness() -> tuple[bool, dict[str, dict[str, object]]]:
    """Run every check (the network ones side by side); ready when no required one failed.

    The database check runs in the calling thread, on the request's own connection; the
    others wait on sockets with their own short timeouts, so they run on threads and the probe
    takes as long as the slowest, not their sum.
    """
    checks = registered_checks()
    required = set(settings.PORTAL_READINESS_REQUIRED)
    others = {name: check for name, check in checks.items() if name != "database"}
    with ThreadPoolExecutor(max_workers=max(1, len(others)), thread_name_prefix="readyz") as pool:
        futures = {
            name: pool.submit(_timed, check, in_thread=True) for name, check in others.items()
        }
        report = {"database": _timed(checks["database"], in_thread=False)}
        report.update({name: future.result() for name, future in futures.items()})
    for name, entry in report.items():
        entry["required"] = name in required
    # "not-configured" is no failure: a broker the deployment does not use is not missing.
    ready = all(report[name]["status"] != "failed" for name in required if name in report)
    return ready, report


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain; charset=utf-8")


def readyz(request: HttpRequest) -> HttpResponse:
    ready, report = readiness()
    body: dict[str, object] = {"status": "ok" if ready else "fail"}
    token = settings.METRICS_TOKEN
    # A wrong or missing token is no error here: the probe still gets its verdict.
    if token and authorized(request, token):
        body["checks"] = report
    return JsonResponse(body, status=200 if ready else 503)
