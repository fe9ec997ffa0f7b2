"""Serve the portal with its embedded background runner (the `make demo` server).

Without CELERY_BROKER_URL, jobs run on the in-process thread pool and the beat schedule on a
timer thread in this process; with a broker, this only serves HTTP and Celery does the rest.
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from portal.jobs import EmbeddedBeat, runner_mode


class Command(BaseCommand):
    help = "Serve the portal on 127.0.0.1:8000 with the embedded task runner and schedule."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, addrport: str, **options: Any) -> None:
        beat = None
        if runner_mode() == "thread":
            beat = EmbeddedBeat()
            beat.start()
            self.stdout.write("Background jobs and the schedule run in this process.")
        try:
            # No autoreloader: it would fork a second process with a second schedule.
            call_command("runserver", addrport, use_reloader=False, use_threading=True)
        finally:
            if beat is not None:
                beat.stop()
