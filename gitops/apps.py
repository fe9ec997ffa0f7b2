from __future__ import annotations

from django.apps import AppConfig


class GitopsConfig(AppConfig):
    name = "gitops"
    verbose_name = "GitOps"

    def ready(self) -> None:
        # Registers this app's job tasks with the runner and with Celery.
        from gitops import tasks  # noqa: F401
