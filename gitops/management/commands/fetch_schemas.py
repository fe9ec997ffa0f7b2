"""Download the pinned upstream CRDs (and the charts' values schemas) the checks use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gitops import upstream


class Command(BaseCommand):
    help = (
        "Download the upstream CRDs of the component versions the renderers target (pinned by "
        "commit and SHA-256 in gitops/upstream.py) into GITOPS_SCHEMA_DIR (var/schemas by "
        "default), so the schema check validates custom resources offline. A file that does "
        "not arrive whole and verified leaves its previous copy in place; no network leaves "
        "everything as it was."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dir", default="", help="where to put them (default: GITOPS_SCHEMA_DIR)"
        )
        parser.add_argument(
            "--base-url",
            default="",
            help="a mirror laid out as <base>/<owner>/<repo>/<commit>/<path> "
            "(default: GITOPS_SCHEMA_BASE_URL, else raw.githubusercontent.com)",
        )
        parser.add_argument(
            "--offline-ok",
            action="store_true",
            help="exit 0 when the machine has no network (the demo's start-up)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        directory = options["dir"] or settings.GITOPS_SCHEMA_DIR
        if not directory:
            raise CommandError("Set GITOPS_SCHEMA_DIR or pass --dir.")
        base_url = (
            options["base_url"] or settings.GITOPS_SCHEMA_BASE_URL or upstream.DEFAULT_BASE_URL
        )
        total = sum(len(c.files) for c in upstream.COMPONENTS)
        self.stdout.write(
            f"Fetching {total} schema files of {len(upstream.COMPONENTS)} components "
            f"into {Path(directory).name}/ from {base_url}"
        )
        report = upstream.fetch(
            directory, base_url=base_url, progress=lambda line: self.stdout.write(f"  {line}")
        )
        installed, problems = len(report.installed), len(report.problems)
        if report.offline:
            message = (
                f"Offline ({report.offline}): nothing downloaded, the schemas there are kept"
                + ("" if installed else f" ({_present(directory)})")
                + ". Built-in kinds are still validated; custom resources are not until the "
                "CRDs are fetched or read from a cluster."
            )
            if options["offline_ok"]:
                self.stdout.write(message)
                return
            raise CommandError(message)
        self.stdout.write(
            f"Installed {installed} of {total} files into {Path(directory).name}/"
            + (f"; {problems} not installed (see above)" if problems else "")
        )
        if problems:
            raise CommandError(
                "Some schema files were not installed: "
                + "; ".join(f"{o.file}: {o.message}" for o in report.problems[:5])
            )


def _present(directory: str) -> str:
    versions = upstream.installed_versions(directory)
    if not versions:
        return "none yet"
    return f"{len(versions)} components from an earlier fetch"
