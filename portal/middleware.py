"""Request ids (one per request, carried into logs, audit rows and the response header) and
the session idle timeout."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect

REQUEST_ID_HEADER = "X-Request-ID"
_request_id: ContextVar[str] = ContextVar("request_id", default="")
_client_request_id: ContextVar[str] = ContextVar("client_request_id", default="")
# The X-Request-ID a client or proxy sends is its claim, not ours: it is kept beside the
# portal's own id (AuditEvent.client_request_id), never instead of it, and only when it is
# short and plain, so that nothing a client sends ends up unescaped in a log or the audit log.
_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def current_request_id() -> str:
    """The portal's id of the request being served, or '' outside a request."""
    return _request_id.get()


def current_client_request_id() -> str:
    """The X-Request-ID the client sent with the request being served, if plain; else ''."""
    return _client_request_id.get()


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Give every request an id of the portal's own making (answered in X-Request-ID), and
    keep the client's X-Request-ID apart: a client must not choose the id its audit rows and
    jobs are filed under, nor make them look like another request's."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        client_request_id = incoming if _SAFE_ID.fullmatch(incoming) else ""
        request_id = new_request_id()
        request.request_id = request_id  # type: ignore[attr-defined]
        token = _request_id.set(request_id)
        client_token = _client_request_id.set(client_request_id)
        try:
            response = self.get_response(request)
        finally:
            _client_request_id.reset(client_token)
            _request_id.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True


# Set by static/portal/portal.js on requests htmx makes by itself (hx-trigger="every ..."), so
# that a tab left open on a polling page does not keep its session alive for ever.
BACKGROUND_HEADER = "X-Portal-Background"
LAST_ACTIVITY_KEY = "portal_last_activity"
# The last-activity stamp is rewritten at most this often, not on every request: a write per
# minute keeps the timeout accurate to a minute without a session save per click.
ACTIVITY_RESOLUTION_SECONDS = 60


class SessionIdleTimeoutMiddleware:
    """Sign a person out after SESSION_IDLE_TIMEOUT_SECONDS without a request of their own.

    Django's SESSION_COOKIE_AGE alone is no idle timeout: it renews only when the session is
    written, and SESSION_SAVE_EVERY_REQUEST would also renew it on every poll of an open tab.
    Here only requests a person made count. A timed-out htmx request gets HX-Redirect to the
    sign-in page, so the whole page goes there instead of the form being swapped into a table.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        signed_in = request.user.is_authenticated
        now = int(time.time())
        if signed_in:
            last = request.session.get(LAST_ACTIVITY_KEY)
            if isinstance(last, int) and now - last > settings.SESSION_IDLE_TIMEOUT_SECONDS:
                logout(request)
                minutes = max(1, settings.SESSION_IDLE_TIMEOUT_SECONDS // 60)
                messages.info(request, f"You were signed out after {minutes} minutes idle.")
            elif not request.headers.get(BACKGROUND_HEADER) and (
                not isinstance(last, int) or now - last >= ACTIVITY_RESOLUTION_SECONDS
            ):
                request.session[LAST_ACTIVITY_KEY] = now
        response = self.get_response(request)
        if not signed_in and request.user.is_authenticated:
            # Signed in by this request: stamp it now, while login() writes the session anyway.
            request.session[LAST_ACTIVITY_KEY] = now
        if getattr(request, "htmx", False) and response.status_code == 302:
            location = response.get("Location", "")
            if location.startswith(resolve_url(settings.LOGIN_URL)):
                return HttpResponseClientRedirect(location)
        return response


class ProbeMiddleware:
    """Answer /healthz, /readyz and /metrics before any other middleware sees the request.

    Placed first, so that these paths skip the HTTPS redirect (a kubelet probes plain HTTP),
    the ALLOWED_HOSTS check (it sends the pod's IP as Host), sessions, CSRF and sign-in: they
    are for machines, and /metrics has its own token. Only GET and HEAD are answered. They are
    also left out of django-prometheus's request counts, which would otherwise be mostly
    probes.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        from portal import health, metrics

        self.get_response = get_response
        self.probes: dict[str, Callable[[HttpRequest], HttpResponse]] = {
            "/healthz": health.healthz,
            "/readyz": health.readyz,
            "/metrics": metrics.metrics,
        }

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = self.probes.get(request.path_info)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse(status=405)
            response["Allow"] = "GET, HEAD"
            return response
        return probe(request)
