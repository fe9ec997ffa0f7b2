"""Live fragments: a page region that polls cheaply and re-renders only when it changed.

The region carries a version of what it shows (``version_of`` over the rows' update stamps and
states) in its poll URL as ``?since=``. The view computes the version from the same rows,
before any rendering, and answers 204 No Content when it is the same: htmx swaps nothing on a
204, so an idle poll costs one or two indexed reads and no template. Why polling and not
server-sent events: docs/architecture.md ("Status as events").

A region marked ``data-live`` shows when it was last confirmed (templates/portal/_live_stamp.html):
a 204 carries the time in ``X-Live-Checked`` and static/portal/portal.js moves the stamp on; a
poll that fails marks the region stale until one answers again.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

# How often a live region asks; with Flux events landing in the database at once, this bounds
# how long a browser waits for "applied" or "ready".
POLL = "every 1s"
# The stamp's format, in the page and in the 204's header alike.
STAMP = "%H:%M:%S"


def admin_poll() -> str:
    """The trigger of the admin pages' live regions (``LIVE_ADMIN_POLL_MS``), read at each
    render so that a test can make it fast."""
    return f"every {settings.LIVE_ADMIN_POLL_MS}ms"


def version_of(*parts: object) -> str:
    """A short stable token for the state ``parts`` describe."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def stamp() -> str:
    """Now, as a live region's "updated" stamp shows it (the portal's time zone)."""
    return timezone.localtime().strftime(STAMP)


def unchanged(request: HttpRequest, version: str) -> HttpResponse | None:
    """204 for an htmx poll that already shows ``version``; None to render."""
    if request.headers.get("HX-Request") == "true" and request.GET.get("since") == version:
        response = HttpResponse(status=204)
        response["X-Live-Checked"] = stamp()
        return response
    return None
