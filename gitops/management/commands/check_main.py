"""Run the checks on main, keeping what the whole-tree rules find in each tenant's directory."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gitops.checks import partition, run_checks
from gitops.fleet import configured_fleet
from gitops.schemas import schema_source
from gitops.services import main_sha, repository


class Command(BaseCommand):
    help = (
        "Run the whole-tree checks (isolation, capacity, controllers, duplicates, Flux's "
        "Kustomizations) on main and keep each tenant's results by its content "
        "(GITOPS_CHECK_CACHE). Run after an upgrade of the portal, whose new checks code "
        "starts with nothing kept, so the first change request is not the one that waits. "
        "--all also validates every file's schema and builds every Flux path."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all",
            action="store_true",
            help="every check on every file (schemas of the whole tree, every kustomize build)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sha = main_sha()
        if sha is None:
            raise CommandError("The fleet repository has no main yet.")
        started = time.perf_counter()
        files = repository().read_tree(sha)
        stats = partition.Stats()
        results = run_checks(
            files,
            fleet=configured_fleet(),
            # Without --all, as a change that touches nothing: no file's schema, no build.
            changed=None if options["all"] else set(),
            schema_source=schema_source(),
            stats=stats,
            cache=settings.GITOPS_CHECK_CACHE,
        )
        for result in results:
            self.stdout.write(f"{result.name}: {result.status} — {result.summary}")
        self.stdout.write(
            f"main {sha[:12]}: {len(files)} files, {len(partition.split(files).tenants)} "
            f"tenants; values kept {stats.kept}, computed {stats.computed}, in "
            f"{time.perf_counter() - started:.1f} s"
        )
