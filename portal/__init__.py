"""Project package: settings, URLs, the Celery app, jobs, the base layout and home page."""

from __future__ import annotations

from portal.celery import app as celery_app

__all__ = ["celery_app"]
