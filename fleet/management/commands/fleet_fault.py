"""Inject a fault into the running simulator, to see the portal show it.

    python manage.py fleet_fault xid h200-03 --gpu 5 --xid 79   # GPU 5 falls off the bus
    python manage.py fleet_fault not-ready h200-07              # the kubelet stops reporting
    python manage.py fleet_fault idle h200-05 --gpu 2          # its workload idles (GR ~0)
    python manage.py fleet_fault clear                          # everything healthy again

Talks to the simulator at FLEET_API_URL (its ``/sim/faults`` control endpoint); a real cluster
has no such endpoint, so this only works against the simulator.
"""

from __future__ import annotations

from typing import Any

import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Inject a GPU XID, a NotReady node or an idle workload into the simulator, "
        "or clear all faults."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("kind", choices=["xid", "not-ready", "idle", "busy", "clear"])
        parser.add_argument("node", nargs="?", default="")
        parser.add_argument(
            "--gpu",
            type=int,
            default=None,
            help="GPU index on the node (xid: default 0; idle: all)",
        )
        parser.add_argument("--xid", type=int, default=79, help="the XID (default 79)")

    def handle(
        self, *args: Any, kind: str, node: str, gpu: int | None, xid: int, **options: Any
    ) -> None:
        if not settings.FLEET_SIMULATOR:
            raise CommandError("FLEET_SIMULATOR is off: faults can only be injected there.")
        url = f"{settings.FLEET_API_URL.rstrip('/')}/sim/faults"
        if kind != "clear" and not node:
            raise CommandError(f"Name the node for {kind}.")
        try:
            if kind == "clear":
                response = requests.delete(url, timeout=10)
            else:
                body: dict[str, Any] = {"kind": kind, "node": node}
                if kind == "xid":
                    body.update(gpu=gpu or 0, xid=xid)
                if kind in ("idle", "busy") and gpu is not None:
                    body["gpu"] = gpu
                response = requests.post(url, json=body, timeout=10)
        except requests.RequestException as exc:
            raise CommandError(f"The simulator at {url} did not answer: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise CommandError(f"The simulator refused: {message}")
        self.stdout.write(f"{kind} {node}".strip() + ": done; the next fleet sync shows it.")
