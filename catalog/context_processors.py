"""The base layout's counts: unread notifications for everyone signed in, requests waiting
for a decision for platform admins.

Both come from one query, run only when the layout shows them: an htmx fragment that does not
render the layout does not pay for it, and a busy page pays one query, not two.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import F, Func, OuterRef, QuerySet, Subquery

from catalog import states
from catalog.models import Notification, ResourceRequest
from tenants.access import Action, may


def _count(rows: QuerySet[Any]) -> Subquery:
    # COUNT as a plain function, not an aggregate, so the subquery has no GROUP BY.
    return Subquery(rows.order_by().annotate(n=Func(F("pk"), function="COUNT")).values("n"))


def inbox(request: Any) -> dict[str, Callable[[], int]]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    admin = may(user, Action.DECIDE)

    @cache
    def counts() -> dict[str, int]:
        fields = {
            "unread": _count(Notification.objects.filter(user=OuterRef("pk"), read_at__isnull=True))
        }
        if admin:
            fields["waiting"] = _count(
                ResourceRequest.objects.filter(state__in=states.AWAITING_DECISION)
            )
        row = get_user_model().objects.filter(pk=user.pk).annotate(**fields).values(*fields)
        return {key: value or 0 for key, value in row.get().items()}

    context = {"nav_unread": lambda: counts()["unread"]}
    if admin:
        context["nav_approvals_waiting"] = lambda: counts()["waiting"]
    return context
