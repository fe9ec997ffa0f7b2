"""Errors of the API as RFC 9457 problem details (``application/problem+json``).

Every error the API answers has the same shape: ``type`` (a URI naming the kind of problem,
relative to the API root), ``title`` (the kind, in words), ``status``, ``detail`` (this
occurrence, in a sentence a person can act on) and, for bad input, ``errors``: a mapping of
field path to messages, e.g. ``{"spec.gpus": ["Ensure this value is at least 1."]}``.
Django's own ``ValidationError``, ``PermissionDenied`` and ``Http404`` raised by the services
become the same documents as DRF's exceptions, so a service that refuses is never a 500.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "/api/v1/problems/"

TITLES = {
    400: "Bad request",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    412: "Precondition failed",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid input",
    428: "Precondition required",
    429: "Too many requests",
}


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail (dicts, lists, strings) as {dotted path: [messages]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = str(key)
            path = (
                name if not prefix else (prefix if name in ("", "__all__") else f"{prefix}.{name}")
            )
            if not prefix and name in ("__all__", "non_field_errors"):
                path = ""
            for sub, messages in flatten(value, path).items():
                out.setdefault(sub, []).extend(messages)
    elif isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            out.setdefault(prefix, []).extend(str(item) for item in detail)
        else:
            for index, item in enumerate(detail):
                for sub, messages in flatten(item, f"{prefix}[{index}]").items():
                    out.setdefault(sub, []).extend(messages)
    else:
        out.setdefault(prefix, []).append(str(detail))
    return out


def problem(
    status_code: int,
    detail: str,
    *,
    kind: str = "",
    errors: dict[str, list[str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem details response, for views that answer an error themselves."""
    title = TITLES.get(status_code, "Error")
    body: dict[str, Any] = {
        "type": TYPE_BASE + (kind or title.lower().replace(" ", "-")),
        "title": title,
        "status": status_code,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    response = Response(body, status=status_code, headers=headers, content_type=MEDIA_TYPE)
    return response


def _from_django(exc: Exception) -> Exception:
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return exceptions.ValidationError(
                {
                    key: [str(m) for e in errors for m in e.messages]
                    for key, errors in exc.error_dict.items()
                }
            )
        return exceptions.ValidationError({"": exc.messages})
    if isinstance(exc, PermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every API error as problem details; None (a 500) only for
    an exception nobody expected."""
    exc = _from_django(exc)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    code = response.status_code
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten(exc.detail)
        first = next(iter(errors.items()), ("", ["Invalid input."]))
        where = f"{first[0]}: " if first[0] else ""
        detail = f"{where}{first[1][0]}"
        if len(errors) > 1 or len(first[1]) > 1:
            detail += f" (and {sum(len(m) for m in errors.values()) - 1} more)"
        out = problem(code, detail, kind="invalid-input", errors=errors)
    else:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        out = problem(code, detail)
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            out[header] = response[header]
    return out


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The resource changed since you read it (If-Match does not match its ETag)."
    default_code = "precondition_failed"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the resource's current state."
    default_code = "conflict"
