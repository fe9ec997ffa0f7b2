"""Run every check on main, keeping what the whole-tree rules find in each tenant's directory."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from gitops.checks import partition, run_checks
from gitops.fleet import configured_fleet
from gitops.schemas import schema_source
from gitops.services import main_sha, repository


class Command(BaseCommand):
    help = (
        "Check main as a change is checked, and keep each tenant's results by its content "
        "(GITOPS_CHECK_CACHE). Run after an upgrade of the portal, whose new checks code "
        "starts with nothing kept, so the first change request is not the one that waits."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        sha = main_sha()
        if sha is None:
            raise CommandError("The fleet repository has no main yet.")
        started = time.perf_counter()
        files = repository().read_tree(sha)
        stats = partition.Stats()
        results = run_checks(
            files, fleet=configured_fleet(), schema_source=schema_source(), stats=stats
        )
        for result in results:
            self.stdout.write(f"{result.name}: {result.status} — {result.summary}")
        self.stdout.write(
            f"main {sha[:12]}: {len(files)} files, {len(partition.split(files).tenants)} "
            f"tenants; values kept {stats.kept}, computed {stats.computed}, in "
            f"{time.perf_counter() - started:.1f} s"
        )
