"""A node's lifecycle: discovered -> burn-in -> ready (or failed), as ``NodeLifecycle`` rows.

This module is the one place that moves a node between those states. Remediation asks for a
burn-in after a fatal fault (``request_burn_in``) and waits for ``passed_since``; the burn-in
engine runs the tests of nodes in ``burn-in`` and records the outcome.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import netbox
from fleet.models import NodeLifecycle
from portal.audit import record_audit

State = NodeLifecycle.State


def get(node_name: str) -> NodeLifecycle | None:
    """The node's lifecycle row, or None when the portal has never placed it."""
    return NodeLifecycle.objects.filter(node_name=node_name).first()


@transaction.atomic
def move(node_name: str, state: str, *, reason: str, actor: Any = None) -> NodeLifecycle:
    """Put the node in ``state`` with ``reason`` (audited). A move to the state it is in
    changes nothing and records nothing."""
    row, created = NodeLifecycle.objects.select_for_update().get_or_create(
        node_name=node_name, defaults={"state": state, "reason": reason}
    )
    before = None if created else row.state
    if not created and row.state == state:
        return row
    if not created:
        row.state = state
        row.reason = reason
        row.since = timezone.now()
        row.save()
    record_audit(
        actor=actor,
        action="node.lifecycle",
        target=row,
        diff={"state": [before, state], "reason": [None, reason]},
    )
    netbox.queue(node_name)
    return row


def request_burn_in(node_name: str, *, reason: str, actor: Any = None) -> NodeLifecycle:
    """Send the node (back) to burn-in: it stays cordoned until its tests pass."""
    return move(node_name, State.BURN_IN, reason=reason, actor=actor)


def passed_since(node_name: str, when: datetime) -> bool:
    """Whether the node became ready (its burn-in passed) at or after ``when``."""
    row = get(node_name)
    return bool(row and row.state == State.READY and row.since >= when)
