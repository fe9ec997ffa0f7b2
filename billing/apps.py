from __future__ import annotations

from django.apps import AppConfig


class BillingConfig(AppConfig):
    """What it cost: the GPU usage ledger and its ingest from DCGM."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        # Registers this app's job tasks with the runner and with Celery.
        from billing import tasks  # noqa: F401
