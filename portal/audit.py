"""Recording audit events. Every app's ``do_*`` services call ``record_audit`` inside their
transaction, so the row exists exactly when the change does."""

from __future__ import annotations

from typing import Any

from django.db import models

from portal.middleware import current_client_request_id, current_request_id
from portal.models import AuditEvent


def record_audit(
    *,
    actor: Any,
    action: str,
    target: models.Model,
    tenant_slug: str = "",
    diff: dict[str, list[Any]] | None = None,
) -> AuditEvent:
    """Store one audit row for an action on ``target``, filed under the portal's id of the
    request (and, apart, the X-Request-ID the client sent)."""
    actor_obj = actor if getattr(actor, "pk", None) else None
    return AuditEvent.objects.create(
        actor=actor_obj,
        actor_name=getattr(actor_obj, "username", "") or "system",
        tenant_slug=tenant_slug,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk or ""),
        target_repr=str(target)[:200],
        diff=diff or {},
        request_id=current_request_id(),
        client_request_id=current_client_request_id(),
    )
