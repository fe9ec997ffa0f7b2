from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from tenants.access import Action, is_finance, may, visible_tenants


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The tenant switcher's choices and the current tenant, for the base layout."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    match = getattr(request, "resolver_match", None)
    current = (match.kwargs.get("tenant") if match else None) or request.session.get(
        "current_tenant", ""
    )
    return {
        "nav_tenants": list(visible_tenants(user).values_list("slug", "display_name")),
        "nav_current_tenant": current,
        "nav_platform_admin": may(user, Action.OPERATE_FLEET),
        "nav_finance": is_finance(user),
    }
