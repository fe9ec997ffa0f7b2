"""Encrypt every stored secret again with the first of PORTAL_ENCRYPTION_KEYS.

Rotating the key: put the new key first in PORTAL_ENCRYPTION_KEYS (the old one after it, so
both decrypt), restart the portal, run this, then drop the old key.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from catalog.outbound import do_reencrypt_secrets
from portal.encryption import UndecryptableSecret


class Command(BaseCommand):
    help = "Re-encrypt the webhook signing secrets with the first of PORTAL_ENCRYPTION_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            count = do_reencrypt_secrets(acting_user=None)
        except UndecryptableSecret as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"{count} webhook endpoint{'' if count == 1 else 's'} re-encrypted with the "
                "first key; the others may now be removed from PORTAL_ENCRYPTION_KEYS."
            )
        )
