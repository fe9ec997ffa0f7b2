"""Token scopes, checked for every API call before the view runs.

A session (the browser, the docs page) acts with the user's whole role, like the pages. A
token carries scopes: ``read`` (safe methods), ``request`` (ask for, change and withdraw
resources), ``admin`` (approve, review, merge; still only where the user's role allows).
Scopes only narrow what the role allows: the role is asked by the services
(``tenants.access``) on every call, whatever the token says.

A view says which scope its writes need with ``write_scope`` (default ``request``); its
safe methods need ``read``.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

READ = "read"
REQUEST = "request"
ADMIN = "admin"
SCOPES = (READ, REQUEST, ADMIN)
# Each scope includes the ones before it: a token that may approve may also read.
RANK = {scope: index for index, scope in enumerate(SCOPES)}


def scope_needed(method: str, view: Any) -> str:
    if method in SAFE_METHODS:
        return READ
    return str(getattr(view, "write_scope", REQUEST))


def token_allows(token: Any, scope: str) -> bool:
    """Whether ``token`` (request.auth: None for a session) carries ``scope``."""
    if token is None:
        return True
    return bool(token.allows(scope))


class ScopedAccess(BasePermission):
    """Signed in (a session or a token), and the token's scopes cover the method."""

    message = "This token's scopes do not allow this call."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        needed = scope_needed(request.method, view)
        if not token_allows(request.auth, needed):
            self.message = f"This call needs a token with the '{needed}' scope."
            return False
        return True
