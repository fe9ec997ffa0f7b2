"""The forge webhook endpoint: a verified merge or close of a pull request reaches here."""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from gitops import services
from gitops.forges import WebhookPayloadError, WebhookSignatureError, get_forge

logger = logging.getLogger(__name__)


@csrf_exempt
@require_POST
def forge_webhook(request: HttpRequest) -> HttpResponse:
    forge = get_forge(settings)
    if forge is None:
        return JsonResponse({"error": "no forge is configured"}, status=404)
    try:
        event = forge.parse_webhook(request.headers, request.body)
    except WebhookSignatureError as exc:
        logger.warning("forge webhook rejected: %s", exc)
        return JsonResponse({"error": "signature verification failed"}, status=403)
    except WebhookPayloadError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    if event is None:
        return JsonResponse({"status": "ignored"})
    change = services.do_record_forge_event(
        number=event.number, kind=event.kind, merge_sha=event.merge_sha
    )
    if change is None:
        return JsonResponse({"status": "unknown pull request"}, status=202)
    return JsonResponse({"status": change.status, "change": change.pk})
