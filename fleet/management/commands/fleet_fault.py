"""Inject a fault into the running simulator, to see the portal show it.

    python manage.py fleet_fault xid h200-03 --gpu 5 --xid 79   # GPU 5 falls off the bus
    python manage.py fleet_fault not-ready h200-07              # the kubelet stops reporting
    python manage.py fleet_fault health-watch h200-04 --watch Mem  # a DCGM health watch fails
    python manage.py fleet_fault condition h200-04 --type GPUMissing  # an NPD condition
    python manage.py fleet_fault thermal h200-04                # warning: thermal watch
    python manage.py fleet_fault ecc h200-04 --gpu 1            # warning: XID 92, single-bit ECC
    python manage.py fleet_fault diag-fail h200-09 --test memory   # dcgmi diag fails a test
    python manage.py fleet_fault nccl-slow h200-09 --fraction 0.5  # NCCL at half its bandwidth
    python manage.py fleet_fault idle h200-05 --gpu 2          # its workload idles (GR ~0)
    python manage.py fleet_fault busy h200-05                  # its workloads work again
    python manage.py fleet_fault clear                          # everything healthy again

Talks to the simulator at FLEET_API_URL (its ``/sim/faults`` control endpoint); a real cluster
has no such endpoint, so this only works against the simulator.
"""

from __future__ import annotations

from typing import Any

import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

KINDS = [
    "xid",
    "not-ready",
    "health-watch",
    "condition",
    "thermal",
    "ecc",
    "diag-fail",
    "nccl-slow",
    "idle",
    "busy",
    "clear",
]


class Command(BaseCommand):
    help = (
        "Inject a GPU XID, a NotReady node, a failed health watch or node condition, a failing "
        "diag, slow NCCL or an idle workload into the simulator, or clear all faults."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("kind", choices=KINDS)
        parser.add_argument("node", nargs="?", default="")
        parser.add_argument(
            "--gpu",
            type=int,
            default=None,
            help="GPU index on the node (xid, ecc: default 0; idle, busy: all)",
        )
        parser.add_argument("--xid", type=int, default=79, help="the XID (default 79)")
        parser.add_argument(
            "--watch", default="Mem", help="health-watch: the DCGM system (Gpu<watch>Watch)"
        )
        parser.add_argument("--type", default="GPUMissing", help="condition: its type")
        parser.add_argument("--test", default="memory", help="the diag test to fail (diag-fail)")
        parser.add_argument(
            "--fraction", type=float, default=0.5, help="share of nominal bandwidth (nccl-slow)"
        )

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
                body = self._body(kind, node, gpu, xid, options)
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

    @staticmethod
    def _body(
        kind: str, node: str, gpu: int | None, xid: int, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The simulator's fault for ``kind``: warnings are a thermal health watch (DCGM rates
        thermal WARN) and XID 92 (a high single-bit ECC rate, NVIDIA's XID catalogue)."""
        if kind == "xid":
            return {"kind": "xid", "node": node, "gpu": gpu or 0, "xid": xid}
        if kind == "ecc":
            return {"kind": "xid", "node": node, "gpu": gpu or 0, "xid": 92}
        if kind in ("health-watch", "thermal"):
            watch = "Thermal" if kind == "thermal" else str(options["watch"]).capitalize()
            return {
                "kind": "condition",
                "node": node,
                "type": f"Gpu{watch}Watch",
                "reason": f"Gpu{watch}WatchFailed",
                "message": f"DCGM health watch {watch.lower()} failed on GPU {gpu or 0}",
            }
        if kind == "condition":
            return {"kind": "condition", "node": node, "type": str(options["type"])}
        if kind == "diag-fail":
            return {"kind": kind, "node": node, "test": str(options["test"])}
        if kind == "nccl-slow":
            return {"kind": kind, "node": node, "fraction": float(options["fraction"])}
        if kind in ("idle", "busy") and gpu is not None:
            return {"kind": kind, "node": node, "gpu": gpu}
        return {"kind": kind, "node": node}
