"""Live fragments: a page region that polls cheaply and re-renders only when it changed.

The region carries a version of what it shows (``version_of`` over the rows' update stamps and
states) in its poll URL as ``?since=``. The view computes the version from the same rows,
before any rendering, and answers 204 No Content when it is the same: htmx swaps nothing on a
204, so an idle poll costs one or two indexed reads and no template. Why polling and not
server-sent events: docs/architecture.md ("Status as events").
"""

from __future__ import annotations

import hashlib

from django.http import HttpRequest, HttpResponse

# How often a live region asks; with Flux events landing in the database at once, this bounds
# how long a browser waits for "applied" or "ready".
POLL = "every 1s"


def version_of(*parts: object) -> str:
    """A short stable token for the state ``parts`` describe."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def unchanged(request: HttpRequest, version: str) -> HttpResponse | None:
    """204 for an htmx poll that already shows ``version``; None to render."""
    if request.headers.get("HX-Request") == "true" and request.GET.get("since") == version:
        return HttpResponse(status=204)
    return None
