"""Rotate a tenant's Git source token: a new token in the tenant's Secret, the old one revoked."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.services import do_rotate_source_token


class Command(BaseCommand):
    help = "Issue a tenant's Flux source a new Git token and write it into its Secret."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument(
            "--as", dest="username", required=True, help="the platform admin doing it (audited)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user '{options['username']}'.")
        try:
            prefix = do_rotate_source_token(options["tenant"], acting_user=user)
        except (PermissionDenied, ValidationError) as exc:
            message = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
            raise CommandError(message) from exc
        self.stdout.write(
            f"Rotated the Git token of {options['tenant']}: now {prefix}…, the old one is revoked."
        )
