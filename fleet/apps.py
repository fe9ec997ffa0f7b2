from __future__ import annotations

from django.apps import AppConfig


class FleetConfig(AppConfig):
    """What the cluster says: nodes, GPUs, topology, health, Flux and KServe status."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        # Registers this app's job tasks with the runner and with Celery.
        from fleet import tasks  # noqa: F401
