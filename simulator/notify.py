"""Flux's notification-controller, as far as the portal sees it: a Provider of type
``generic-hmac`` posting each Kustomization and HelmRelease event to one address.

Flux's controllers send an event whenever a reconciliation's outcome changes; an Alert
(event sources Kustomization and HelmRelease, severity info) routes them to the Provider, which
POSTs the event as JSON with ``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` keyed by the
Secret's ``token`` and a ``gotk-component`` header naming the reporting controller
(fluxcd/notification-controller ``internal/notifier/forwarder.go``). Here the trigger is a
change of the object's Ready condition (status, reason or applied revision) seen in the
store's event log; posting happens on a thread of its own, never under the store's lock, and a
failed post is logged and dropped, as a Provider drops an event its receiver refused after
its retries.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from typing import Any

from simulator.store import HELM_RELEASES, KUSTOMIZATIONS, WatchEvent, as_dict, as_list

logger = logging.getLogger(__name__)

CONTROLLERS = {
    KUSTOMIZATIONS.plural: "kustomize-controller",
    HELM_RELEASES.plural: "helm-controller",
}
POST_TIMEOUT = 5.0


def signature(body: bytes, secret: bytes) -> str:
    """The ``X-Signature`` value notification-controller's generic-hmac Provider sends."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def _ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    for condition in as_list(as_dict(obj.get("status")).get("conditions")):
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition
    return None


def event_for(plural: str, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The event a controller reports for the object's current Ready condition."""
    ready = _ready(obj)
    if ready is None:
        return None
    meta = as_dict(obj.get("metadata"))
    status = as_dict(obj.get("status"))
    controller = CONTROLLERS[plural]
    revision = str(
        status.get("lastAppliedRevision")
        or status.get("lastAttemptedRevision")
        or as_dict(as_list(status.get("history"))[0] if as_list(status.get("history")) else {}).get(
            "chartVersion", ""
        )
    )
    failed = ready.get("status") == "False"
    return {
        "involvedObject": {
            "kind": obj.get("kind"),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "apiVersion": obj.get("apiVersion"),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "severity": "error" if failed else "info",
        "timestamp": ready.get("lastTransitionTime", ""),
        "message": str(ready.get("message") or ""),
        "reason": str(ready.get("reason") or ""),
        "metadata": {"revision": revision} if revision else {},
        "reportingController": controller,
        "reportingInstance": f"{controller}-0",
    }


class Notifier:
    """Watches the store for Ready changes and posts them, signed, to ``address``."""

    def __init__(self, address: str, secret: bytes) -> None:
        self.address = address
        self.secret = secret
        self._seen: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def observe(self, event: WatchEvent) -> None:
        """A store listener: runs under the store's lock, so it only compares and queues."""
        if event.plural not in CONTROLLERS:
            return
        meta = as_dict(event.object.get("metadata"))
        key = (event.plural, str(meta.get("namespace", "")), str(meta.get("name", "")))
        if event.type == "DELETED":
            self._seen.pop(key, None)
            return
        ready = _ready(event.object)
        status = as_dict(event.object.get("status"))
        state = (
            (ready or {}).get("status"),
            (ready or {}).get("reason"),
            status.get("lastAppliedRevision"),
            status.get("lastAttemptedRevision"),
        )
        if ready is None or self._seen.get(key) == state:
            return
        self._seen[key] = state
        payload = event_for(event.plural, event.object)
        if payload is not None:
            self._queue.put(payload)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="simulator-notify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=POST_TIMEOUT + 1)
            self._thread = None

    def _run(self) -> None:
        while (payload := self._queue.get()) is not None:
            self.post(payload)

    def post(self, payload: dict[str, Any]) -> int:
        """POST one event; returns the HTTP status (0 when the receiver did not answer)."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        request = urllib.request.Request(  # noqa: S310 (the configured Provider address)
            self.address,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "gotk-component": str(payload.get("reportingController", "")),
                "X-Signature": signature(body, self.secret),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=POST_TIMEOUT) as answer:  # noqa: S310
                self.sent += 1
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            logger.warning("flux event to %s refused: HTTP %s", self.address, exc.code)
            return int(exc.code)
        except (urllib.error.URLError, OSError) as exc:
            logger.warning("flux event to %s not delivered: %s", self.address, exc)
            return 0
