"""Serve the portal with its embedded background runner (the `make demo` server).

Without CELERY_BROKER_URL, jobs run on the in-process thread pool and the beat schedule on a
timer thread in this process; with a broker, this only serves HTTP and Celery does the rest.
With FLEET_SIMULATOR (the default when no cluster is configured) the simulator serves
its Kubernetes API at FLEET_SIMULATOR_ADDR from this process too, playing Flux on the portal's
own repository, and posting Flux events, signed, to the portal's /hooks/flux/. With
FLEET_WATCH the fleet watcher (``fleet.watch``) runs as threads here too, so status arrives as
events; the scheduled sync stays as the fallback.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from gitops.schemas import directory_with_crds
from portal.jobs import EmbeddedBeat, runner_mode


class Command(BaseCommand):
    help = "Serve the portal on 127.0.0.1:8000 with the embedded task runner and schedule."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument(
            "--demo-jobs",
            action="store_true",
            help="Submit the demo's batch jobs once the simulator runs (management/demo_jobs.py).",
        )

    def handle(self, *args: Any, addrport: str, demo_jobs: bool = False, **options: Any) -> None:
        simulator = self._start_simulator(addrport) if settings.FLEET_SIMULATOR else None
        demo_stop = threading.Event()
        if demo_jobs and simulator is not None:
            self._start_demo_jobs(simulator, demo_stop)
        watcher = None
        if settings.FLEET_WATCH:
            from fleet.watch import Watcher

            watcher = Watcher()
            watcher.start()
            self.stdout.write("The fleet watcher follows the cluster from this process.")
        beat = None
        if runner_mode() == "thread":
            beat = EmbeddedBeat()
            beat.start()
            self.stdout.write("Background jobs and the schedule run in this process.")
        try:
            # No autoreloader: it would fork a second process with a second schedule.
            call_command("runserver", addrport, use_reloader=False, use_threading=True)
        finally:
            demo_stop.set()
            if watcher is not None:
                watcher.stop()
            if beat is not None:
                beat.stop()
            if simulator is not None:
                simulator.stop()

    def _start_simulator(self, addrport: str) -> Any:
        from simulator import Simulator
        from simulator.config import SimConfig, load_config

        host, _, port = settings.FLEET_SIMULATOR_ADDR.rpartition(":")
        config = (
            load_config(settings.FLEET_SIMULATOR_CONFIG)
            if settings.FLEET_SIMULATOR_CONFIG
            else SimConfig.demo()
        )
        # The simulated Flux reconciles clusters/<fleet>, the portal's own fleet.
        config = dataclasses.replace(config, fleet_name=settings.GITOPS_FLEET_NAME)
        # Its API server serves the CRDs the portal has (what fetch_schemas downloaded), unless
        # the fleet YAML names another directory (crd_dir); none yet: it serves no CRDs.
        if not config.crd_dir and (crds := directory_with_crds()):
            config = dataclasses.replace(config, crd_dir=crds)
        if settings.FLUX_WEBHOOK_SECRET and not config.flux_events_address:
            # Its notification-controller posts to this portal, as the rendered Provider would.
            portal = addrport if ":" in addrport else f"127.0.0.1:{addrport}"
            config = dataclasses.replace(config, flux_events_address=f"http://{portal}/hooks/flux/")
        from gitops.sources import simulator_git_options

        simulator = Simulator(
            config,
            repo_path=settings.GITOPS_REPO_PATH,
            branch=settings.GITOPS_MAIN_BRANCH,
            # Its Flux reads tenants' sources with their own tokens, checked as the portal's
            # Git endpoint checks them.
            flux_events_secret=settings.FLUX_WEBHOOK_SECRET.encode(),
            **simulator_git_options(),
        )
        url = simulator.start(host or "127.0.0.1", int(port))
        # What the portal's deployment renders on a real fleet (gitops.render.portal,
        # burn_in_objects): the namespace the burn-in Jobs run in.
        simulator.cluster.ensure_namespace(settings.FLEET_BURN_IN_NAMESPACE, time.time())
        self.stdout.write(f"Simulator (Kubernetes API, DCGM /metrics) on {url}")
        return simulator

    def _start_demo_jobs(self, simulator: Any, stop: threading.Event) -> None:
        from portal.management.demo_jobs import run_demo_jobs

        threading.Thread(
            target=run_demo_jobs,
            args=(simulator.finish_job, simulator.job_state, stop),
            name="demo-jobs",
            daemon=True,
        ).start()
        self.stdout.write("The demo's batch jobs are submitted once the simulator has the tenants.")
        from portal.management.demo_jobs import run_demo_burn_in

        threading.Thread(
            target=run_demo_burn_in,
            args=(simulator.finish_job, stop),
            name="demo-burn-in",
            daemon=True,
        ).start()
