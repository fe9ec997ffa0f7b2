"""Webhook signing secrets encrypted at rest (portal.encryption): the columns widen to hold
Fernet tokens, and the secrets already stored in the clear are encrypted with the first of
PORTAL_ENCRYPTION_KEYS. Reversed, they are decrypted back into the clear."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from portal import encryption

# Every secret the portal made starts so (catalog.outbound.SECRET_PREFIX); a Fernet token never
# does ("gAAAAA..."), so a row already encrypted is left alone.
PLAIN = "whsec_"
FIELDS = ("secret", "previous_secret")


def encrypt_secrets(apps: Any, schema_editor: Any) -> None:
    endpoints = apps.get_model("catalog", "WebhookEndpoint")
    for endpoint in endpoints.objects.all().only("pk", *FIELDS):
        changed = [f for f in FIELDS if getattr(endpoint, f).startswith(PLAIN)]
        for field in changed:
            setattr(endpoint, field, encryption.encrypt(getattr(endpoint, field)))
        if changed:
            endpoint.save(update_fields=changed)


def decrypt_secrets(apps: Any, schema_editor: Any) -> None:
    endpoints = apps.get_model("catalog", "WebhookEndpoint")
    for endpoint in endpoints.objects.all().only("pk", *FIELDS):
        changed = [
            f for f in FIELDS if getattr(endpoint, f) and not getattr(endpoint, f).startswith(PLAIN)
        ]
        for field in changed:
            setattr(endpoint, field, encryption.decrypt(getattr(endpoint, field)))
        if changed:
            endpoint.save(update_fields=changed)


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0005_share_version"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhookendpoint",
            name="secret",
            field=models.CharField(max_length=500),
        ),
        migrations.AlterField(
            model_name="webhookendpoint",
            name="previous_secret",
            field=models.CharField(blank=True, max_length=500),
        ),
        # Reversed, this runs first: the secrets are back in the clear before the columns narrow.
        migrations.RunPython(encrypt_secrets, decrypt_secrets),
    ]
