"""POST /hooks/flux/: Flux's notification-controller tells the portal a Kustomization or
HelmRelease changed, so status shows at once instead of at the next sync.

The sender is a Provider of type ``generic-hmac`` (docs/operator-guide.md, "Status as
events"): it POSTs the event as JSON and signs the body with HMAC, ``X-Signature: <hashfunc>=<hex>``
(sha256 in notification-controller's ``internal/notifier/forwarder.go``), keyed by the
Secret's ``token``, here FLUX_WEBHOOK_SECRET. The portal does not take the payload's word for
the object's state: it reads the involved object from the cluster API and writes its row with
the sync's code, then moves changes and requests on as the sync would.

Answers: 404 when no key is configured; 401 for a missing or wrong signature; 400 for a body
that is not an event or an event older than FLUX_EVENT_MAX_AGE_SECONDS (or as far in the
future), nothing changed; 200 "duplicate" for a delivery already accepted within that window
(a replay or a retry), nothing changed; 202 "ignored" for a kind the portal does not follow;
200 "refreshed" otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from fleet import services
from fleet.kube import HELM_RELEASE, KUSTOMIZATION, CustomKind, Kube, KubeError
from fleet.models import FluxEventReceipt
from fleet.watch import follow_up

logger = logging.getLogger(__name__)

HASHES = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}
FOLLOWED: dict[str, CustomKind] = {
    KUSTOMIZATION.kind: KUSTOMIZATION,
    HELM_RELEASE.kind: HELM_RELEASE,
}


class SignatureError(Exception):
    pass


class EventError(Exception):
    pass


@dataclass(frozen=True)
class FluxEvent:
    kind: str
    namespace: str
    name: str
    reason: str
    timestamp: datetime


def verify(body: bytes, header: str, secret: bytes) -> None:
    """Raise ``SignatureError`` unless ``header`` is ``<hashfunc>=<hex HMAC of body>``."""
    func, _, given = header.partition("=")
    digest = HASHES.get(func.strip().lower())
    if digest is None or not given:
        raise SignatureError("X-Signature must be sha256=<hex> (or sha384, sha512)")
    expected = hmac.new(secret, body, digest).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.strip().lower().encode()):
        raise SignatureError("the signature does not match")


def parse_event(body: bytes) -> FluxEvent:
    """The parts of notification-controller's event JSON the portal uses."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise EventError("the body is not JSON") from exc
    if not isinstance(data, dict) or not isinstance(data.get("involvedObject"), dict):
        raise EventError("the body is not a Flux event (no involvedObject)")
    involved: dict[str, Any] = data["involvedObject"]
    fields = [involved.get("kind"), involved.get("namespace"), involved.get("name")]
    if not all(isinstance(f, str) and f for f in fields):
        raise EventError("involvedObject needs kind, namespace and name")
    stamp = data.get("timestamp")
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError as exc:
        raise EventError("timestamp is not an RFC 3339 time") from exc
    if when.tzinfo is None:
        raise EventError("timestamp has no time zone")
    reason = data.get("reason")
    return FluxEvent(
        kind=str(fields[0]),
        namespace=str(fields[1]),
        name=str(fields[2]),
        reason=str(reason)[:120] if isinstance(reason, str) else "",
        timestamp=when,
    )


def accept(body: bytes, event: FluxEvent) -> bool:
    """Remember the delivery; False when it was accepted before (a replay). Receipts older
    than the window are pruned: an event that old is refused by its timestamp anyway."""
    now = timezone.now()
    window = timedelta(seconds=settings.FLUX_EVENT_MAX_AGE_SECONDS)
    FluxEventReceipt.objects.filter(received__lt=now - 2 * window).delete()
    try:
        with transaction.atomic():
            FluxEventReceipt.objects.create(
                digest=hashlib.sha256(body).hexdigest(),
                received=now,
                kind=event.kind,
                namespace=event.namespace,
                name=event.name,
                reason=event.reason,
            )
    except IntegrityError:
        return False
    return True


@csrf_exempt
@require_POST
def flux_events(request: HttpRequest) -> HttpResponse:
    secret = settings.FLUX_WEBHOOK_SECRET
    if not secret:
        return JsonResponse({"error": "Flux events are not configured"}, status=404)
    body = request.body
    try:
        verify(body, request.headers.get("X-Signature", ""), secret.encode())
    except SignatureError as exc:
        logger.warning("flux event rejected: %s", exc)
        return JsonResponse({"error": "signature verification failed"}, status=401)
    try:
        event = parse_event(body)
    except EventError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    age = abs((timezone.now() - event.timestamp).total_seconds())
    if age > settings.FLUX_EVENT_MAX_AGE_SECONDS:
        return JsonResponse(
            {"error": f"the event's timestamp is {int(age)} s away from now; not accepted"},
            status=400,
        )
    kind = FOLLOWED.get(event.kind)
    if kind is None:
        return JsonResponse(
            {"status": "ignored", "reason": f"{event.kind} is not followed"}, status=202
        )
    if not accept(body, event):
        return JsonResponse({"status": "duplicate"})
    try:
        with Kube() as kube:
            services.refresh_custom_object(kube, kind, event.namespace, event.name)
    except KubeError as exc:
        # Accepted all the same: the watch or the next sync brings the state.
        logger.warning("flux event: could not read %s: %s", event.name, exc)
        return JsonResponse({"status": "accepted", "refresh": str(exc)}, status=202)
    follow_up(changes=kind is KUSTOMIZATION, requests=True)
    return JsonResponse({"status": "refreshed"})
