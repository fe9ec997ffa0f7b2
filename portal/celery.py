"""The Celery application.

Workers start with ``celery -A portal worker`` and the schedule with ``celery -A portal beat``
(``make worker`` runs both). Without CELERY_BROKER_URL nothing here connects anywhere: the
in-process runner in portal/jobs.py executes the same tasks.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
