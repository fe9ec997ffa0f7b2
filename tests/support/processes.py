"""Real processes a test starts (gunicorn, a Celery worker, a server binary) and stops.

Each writes to a log file, not a pipe: nobody reads a pipe while the test runs, and a full
one blocks the process mid-test. The log is what a failure message shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.skips import require_service
from tests.support.waiting import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Started:
    """A process a test started, and the file its output goes to."""

    proc: subprocess.Popen[bytes]
    log_file: Path

    def log(self, tail: int = 5000) -> str:
        """The last ``tail`` characters it printed, for failure messages."""
        return self.log_file.read_text(errors="replace")[-tail:]


def stop(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Terminate ``proc`` and wait for it; kill it if it does not go within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def launch(
    args: Sequence[str],
    *,
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
) -> Started:
    """Start ``args``, its output appended to ``log_file``; the caller stops it (``stop``)."""
    with log_file.open("ab") as log:
        proc = subprocess.Popen(list(args), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Started(proc, log_file)


@contextmanager
def started(
    args: Sequence[str],
    *,
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    stop_timeout: float = 10,
) -> Iterator[Started]:
    """``args`` running (see ``launch``) while the block runs; stopped when it ends."""
    server = launch(args, log_file=log_file, env=env, cwd=cwd)
    try:
        yield server
    finally:
        stop(server.proc, stop_timeout)


def portal_env(**settings: str) -> dict[str, str]:
    """The environment of a portal process a test starts: this one's, with ``settings``."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **settings,
    }


@contextmanager
def gunicorn(
    env: Mapping[str, str], *, log_file: Path, options: Sequence[str] = ()
) -> Iterator[str]:
    """The portal under gunicorn, the production server, on a free port, with the
    environment ``env`` (see ``portal_env``) and gunicorn's ``options`` (``--workers=2``);
    yields its URL once it listens."""
    port = free_port()
    args = [sys.executable, "-m", "gunicorn", f"--bind=127.0.0.1:{port}", *options, "portal.wsgi"]
    with started(args, log_file=log_file, env=env) as server:
        wait_for_port(port, "gunicorn", process=server.proc, details=server.log)
        yield f"http://127.0.0.1:{port}"


def database_url() -> str:
    """The test database as a DATABASE_URL, for a process of the portal a test starts."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    host = db.get("HOST") or "127.0.0.1"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


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
def celery_worker(broker: str, *, log_file: Path, **env: str) -> Iterator[Started]:
    """A real Celery worker (``--pool=solo``) on ``broker``, reading a queue of its own that
    the app in this process publishes to while it runs; ``env`` is added to its environment.
    The worker shares the test database (``database_url``). Its queue's name is new each
    time, so workers of tests running side by side never take each other's tasks."""
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
    args = [
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
    ]
    try:
        with started(args, log_file=log_file, env=environment, stop_timeout=15) as worker:
            yield worker
    finally:
        use_celery_broker(celery_app, **old)
