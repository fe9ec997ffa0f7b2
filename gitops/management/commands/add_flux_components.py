"""Open a change that commits the Flux controllers, so the lockdown patches apply to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gitops.fleet import configured_fleet
from gitops.services import open_flux_components_change


class Command(BaseCommand):
    help = (
        "Open a change request adding `flux install --export` output as "
        "clusters/<fleet>/flux-system/gotk-components.yaml, with the lockdown patches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the output of `flux install --export`")
        parser.add_argument(
            "--as", dest="username", required=True, help="the platform admin opening it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user '{options['username']}'.")
        try:
            components = Path(options["file"]).read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {options['file']}: {exc.strerror}.") from exc
        try:
            change = open_flux_components_change(configured_fleet(), components, acting_user=user)
        except ValidationError as exc:
            raise CommandError(exc.messages[0]) from exc
        self.stdout.write(f"Opened change {change.pk} on {change.branch}.")
