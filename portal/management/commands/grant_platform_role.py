"""Grant a platform role from the shell, e.g. to bootstrap the first platform admin."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.models import PlatformRole
from tenants.services import do_grant_platform_role


class Command(BaseCommand):
    help = "Grant a platform role (platform-admin or finance) to an existing user."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=PlatformRole.Name.values)

    def handle(self, *args: Any, username: str, role: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user '{username}'.")
        try:
            do_grant_platform_role(user, acting_user=None, role=role)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        self.stdout.write(self.style.SUCCESS(f"{username} is {role}."))
