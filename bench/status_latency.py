"""How long after Flux reports a merged change applied the change page shows it, by polling
alone (the schedule before status events) and with events, side by side in one run.

Demo-like: the simulator with the demo fleet and the demo's controller delays ticking
in this process, the portal served over HTTP by a threaded WSGI server in this process, a
fallback sync on the demo's schedule (FLEET_SYNC_SECONDS, 5 s) in both variants, and a
"browser" that polls the change page's live region as the page does:

- polling: no watcher, no Flux events; the region is polled every 3 s (the request page's
  cadence before events), so the change shows applied after the next sync and the next poll;
- events: the simulator's notification-controller posts each signed Flux event to
  /hooks/flux/, the portal reads the object and moves the change on; the fleet watcher runs
  too (as in the demo) and the region is polled every 1 s with ``?since=`` (204 when nothing
  changed).

Each trial onboards a new tenant (a merge), waits until the simulator's Flux reports the
tenant's Kustomization Ready (t0, taken from the simulator's own store) and measures until
the page fragment says "Applied". The variants alternate trial by trial.

    .venv/bin/python bench/status_latency.py --trials 8
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402

KEY = secrets.token_hex(32)
OLD_POLL_SECONDS = 3.0  # the request page's region before events
LIVE_POLL_SECONDS = 1.0  # portal.live.POLL


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per variant")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="status-latency-"))
    os.environ.update(
        {
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_COOKIES": "false",
            "FLUX_WEBHOOK_SECRET": KEY,
            # The demo's schedule (setup_django turns the in-process simulator off, which
            # would otherwise select the production default of 30 s).
            "FLEET_SYNC_SECONDS": "5",
            "GITOPS_REPO_PATH": str(tmp / "fleet.git"),
        }
    )
    setup_django(tmp)
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)  # BENCH_DATABASE_URL: start empty
    run(args.trials)


def run(trials: int) -> None:
    import dataclasses

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import close_old_connections
    from django.test import Client

    from fleet import services as fleet
    from fleet.watch import Watcher
    from gitops import services as gitops
    from gitops.fleet import configured_fleet
    from gitops.models import ChangeRequest
    from gitops.sources import simulator_git_options
    from gitops.specs import TenantSpec
    from simulator import Simulator
    from simulator.config import SimConfig
    from simulator.notify import Notifier
    from simulator.store import KUSTOMIZATIONS, WatchEvent
    from tenants.models import PlatformRole, Tenant

    server = make_server("127.0.0.1", 0, WSGIHandler(), server_class=_Server, handler_class=_Quiet)
    portal = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()

    sim = Simulator(
        dataclasses.replace(SimConfig.demo(), fleet_name=settings.GITOPS_FLEET_NAME),
        repo_path=settings.GITOPS_REPO_PATH,
        branch=settings.GITOPS_MAIN_BRANCH,
        **simulator_git_options(),
    )
    settings.FLEET_API_URL = sim.start("127.0.0.1", 0)
    settings.FLEET_SIMULATOR = False
    notifier = Notifier(f"{portal}/hooks/flux/", KEY.encode())
    events_on = threading.Event()
    ready_at: dict[str, float] = {}
    was_ready: dict[str, bool] = {}

    def flux_reported(event: WatchEvent) -> None:
        # t0: the store's write of a Kustomization turning Ready (Flux reporting it), the last
        # such turn of the tenant's own Kustomization, which applies after the platform's.
        if event.plural != KUSTOMIZATIONS.plural:
            return
        conditions = (event.object.get("status") or {}).get("conditions") or []
        name = event.object["metadata"]["name"]
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if ready and not was_ready.get(name):
            ready_at[name] = time.monotonic()
        was_ready[name] = ready
        if events_on.is_set():
            notifier.observe(event)

    sim.store.listen(flux_reported)
    notifier.start()

    users = get_user_model().objects
    author = users.create_user("bench-author", password=secrets.token_hex(16))
    admin = users.create_user("bench-admin", password=secrets.token_hex(16))
    PlatformRole.objects.create(user=author, role=PlatformRole.Name.PLATFORM_ADMIN)
    PlatformRole.objects.create(user=admin, role=PlatformRole.Name.PLATFORM_ADMIN)
    browser = Client()
    browser.force_login(admin)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"

    stop = threading.Event()
    sync_seconds: list[float] = []

    def fallback_sync() -> None:
        while not stop.wait(settings.FLEET_SYNC_SECONDS):
            started = time.monotonic()
            try:
                fleet.sync_all()
            finally:
                sync_seconds.append(time.monotonic() - started)
                close_old_connections()

    threading.Thread(target=fallback_sync, daemon=True).start()

    def merge(slug: str) -> ChangeRequest:
        Tenant.objects.create(slug=slug, display_name=slug, cost_centre="CC")
        change = gitops.open_tenant_change(
            acting_user=author,
            tenant=TenantSpec(slug=slug),
            fleet=configured_fleet(),
            title=f"Onboard {slug}",
            kind="onboarding",
        )
        ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
        change.refresh_from_db()
        gitops.do_review(change, acting_user=admin, state="approve")
        return gitops.do_merge(change, acting_user=admin)

    def page_shows_applied(pk: int, since: str, period: float, deadline: float) -> float:
        url = f"{portal}/changes/{pk}/?part=apply&since={since}"
        while time.monotonic() < deadline:
            headers = {"HX-Request": "true", "Cookie": cookie}
            request = urllib.request.Request(url, headers=headers)  # noqa: S310 (our server)
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
                body = answer.read().decode()
            if answer.status == 200 and "Applied" in body:
                return time.monotonic()
            time.sleep(period)
        raise TimeoutError(f"change #{pk} not shown applied")

    results: dict[str, list[float]] = {"polling": [], "events": []}
    watcher = Watcher()
    for trial in range(trials):
        for variant in ("polling", "events"):
            if variant == "events":
                events_on.set()
                watcher.start()
            slug = f"t{trial}-{variant[0]}"
            change = merge(slug)
            period = LIVE_POLL_SECONDS if variant == "events" else OLD_POLL_SECONDS
            # The "browser" opened the page right after the merge, on its own poll phase.
            shown = page_shows_applied(change.pk, "opened", period, time.monotonic() + 120)
            t0 = ready_at[f"{slug}-workloads"]
            results[variant].append(shown - t0)
            print(f"trial {trial} {variant:8} {shown - t0:6.2f} s", flush=True)
            if variant == "events":
                events_on.clear()
                watcher.stop()
    stop.set()
    sim.stop()
    server.shutdown()
    load = os.getloadavg()[0]
    print()
    print("| variant | trials | median s | p95 s | max s |")
    print("| --- | --- | --- | --- | --- |")
    for variant, values in results.items():
        print(
            f"| {variant} | {len(values)} | {statistics.median(values):.2f} | "
            f"{p95(values):.2f} | {max(values):.2f} |"
        )
    print(
        f"\nfallback sync_all(): {len(sync_seconds)} runs, median "
        f"{statistics.median(sync_seconds):.1f} s, max {max(sync_seconds):.1f} s"
    )
    print(f"load average at the end: {load:.2f}")


if __name__ == "__main__":
    main()
