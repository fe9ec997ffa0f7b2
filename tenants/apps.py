from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self) -> None:
        # Registers this app's job tasks with the runner and with Celery.
        from tenants import tasks  # noqa: F401
