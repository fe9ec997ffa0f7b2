"""The forge webhook endpoint: a verified merge or close of a pull request reaches here.

Answers: 403 for a delivery that does not verify, 400 for a verified one that is malformed or
lacks its delivery id, 200 for one applied (or already handled: "duplicate") and for events
the portal does not act on, 202 "ignored" with the reason for a pull request that is not one
of the portal's own (another repository or base branch, a fork, a foreign branch). Never 5xx
for those: forges resend on 5xx, and GitLab disables a hook that keeps failing.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from gitops import services
from gitops.forges import (
    WebhookForeignError,
    WebhookPayloadError,
    WebhookSignatureError,
    get_forge,
)

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
        logger.warning("forge webhook refused: %s", exc)
        return JsonResponse({"error": str(exc)}, status=400)
    except WebhookForeignError as exc:
        logger.warning("forge webhook ignored: %s", exc)
        return JsonResponse({"status": "ignored", "reason": str(exc)}, status=202)
    if event is None:
        return JsonResponse({"status": "ignored"})
    outcome = services.do_record_forge_event(event, forge=forge.name)
    if outcome.change is None:
        return JsonResponse({"status": "ignored", "reason": outcome.reason}, status=202)
    status = "duplicate" if outcome.status == "duplicate" else outcome.change.status
    return JsonResponse({"status": status, "change": outcome.change.pk})
