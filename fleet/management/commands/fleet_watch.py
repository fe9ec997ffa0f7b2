"""Keep the fleet's status rows current from Kubernetes watches (``fleet.watch``).

A long-running process: in production its own Deployment with one replica (two watchers would
only do the same writes twice); ``manage.py serve`` runs it as threads in the demo.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from fleet.watch import Watcher


class Command(BaseCommand):
    help = "Watch the cluster (nodes, pods, Flux, KServe) and keep the portal's status current."

    def handle(self, *args: Any, **options: Any) -> None:
        watcher = Watcher()
        done = threading.Event()

        def finish(_signum: int, _frame: Any) -> None:
            done.set()

        signal.signal(signal.SIGTERM, finish)
        signal.signal(signal.SIGINT, finish)
        watcher.start()
        self.stdout.write(f"Watching {', '.join(w.name for w in watcher.watched)}.")
        done.wait()
        watcher.stop()
        self.stdout.write("Stopped.")
