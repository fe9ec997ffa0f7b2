from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API (``/api/v1/``): the same services as the pages, over JSON."""

    name = "api"
    default_auto_field = "django.db.models.BigAutoField"
