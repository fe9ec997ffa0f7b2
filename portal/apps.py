from __future__ import annotations

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        # Registers this app's job tasks with the runner and with Celery.
        from portal import tasks  # noqa: F401
