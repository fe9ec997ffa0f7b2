"""Run the simulator in the foreground: a Kubernetes API for the demo fleet (or the
fleet in ``--config``) that plays Flux against the portal's repository."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gitops.schemas import directory_with_crds
from gitops.sources import simulator_git_options
from simulator import SimConfig, Simulator, load_config
from simulator.config import ConfigError


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port`` (or just ``port``) to a bind address."""
    host, _, port = addr.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise CommandError(f"--addr must be host:port, not {addr!r}")
    return host.strip("[]") or "127.0.0.1", number


class Command(BaseCommand):
    help = "Serve a simulated GPU fleet's Kubernetes API until interrupted (Ctrl-C)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addr", default="", help="host:port to listen on (default: FLEET_SIMULATOR_ADDR)"
        )
        parser.add_argument(
            "--config", default="", help="fleet YAML (default: FLEET_SIMULATOR_CONFIG or the demo)"
        )
        parser.add_argument(
            "--repo", default="", help="bare Git repository Flux reads (default: the portal's)"
        )
        parser.add_argument("--branch", default="", help="branch Flux follows (default: main)")
        parser.add_argument("--token", default="", help="bearer token the API requires")

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = parse_addr(
            options["addr"] or getattr(settings, "FLEET_SIMULATOR_ADDR", "127.0.0.1:8001")
        )
        config_path = options["config"] or getattr(settings, "FLEET_SIMULATOR_CONFIG", "")
        try:
            config = load_config(config_path) if config_path else SimConfig.demo()
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        # The simulated Flux reconciles clusters/<fleet>, the fleet the portal renders.
        config = dataclasses.replace(config, fleet_name=settings.GITOPS_FLEET_NAME)
        # Its API server serves the CRDs the portal has (what fetch_schemas downloaded), unless
        # the fleet YAML names another directory (crd_dir); none yet: it serves no CRDs.
        if not config.crd_dir and (crds := directory_with_crds()):
            config = dataclasses.replace(config, crd_dir=crds)
        simulator = Simulator(
            config,
            repo_path=options["repo"] or settings.GITOPS_REPO_PATH,
            branch=options["branch"] or settings.GITOPS_MAIN_BRANCH,
            # The portal's own token for the fleet API, so `make demo` needs no flags.
            token=options["token"] or getattr(settings, "FLEET_API_TOKEN", ""),
            # Flux reads sources with the credentials the portal's Git endpoint would accept.
            **simulator_git_options(),
        )
        try:
            url = simulator.start(host, port)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from exc
        self.stdout.write(f"Simulator: Kubernetes API at {url} (Ctrl-C to stop)")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            self.stdout.write("Stopping the simulator.")
        finally:
            simulator.stop()
