"""The request workflow as an explicit state machine.

Every move goes through ``catalog.services._move``, which checks it against ``TRANSITIONS``,
records a ``RequestEvent`` and an audit row, and notifies. A move not in the table is a bug
or a stale form, and is refused with a message.

::

    draft -> submitted -> approved -> pr_open ---------> merged -> ready
               |  ^           |        (decommission:      |
               |  |           |         decommissioning)   +----> decommissioned
               v  |           v                            |
     changes_requested      failed <-----------------------+  (a closed PR, a failed apply;
               |              |                                retry opens a new PR)
               v              v
           cancelled      rejected (terminal), cancelled (terminal)
"""

from __future__ import annotations

from catalog.models import ResourceRequest

S = ResourceRequest.State

TRANSITIONS: dict[str, frozenset[str]] = {
    S.DRAFT: frozenset({S.SUBMITTED, S.CANCELLED}),
    S.SUBMITTED: frozenset({S.APPROVED, S.REJECTED, S.CHANGES_REQUESTED, S.CANCELLED}),
    S.CHANGES_REQUESTED: frozenset({S.SUBMITTED, S.CANCELLED}),
    S.APPROVED: frozenset({S.PR_OPEN, S.DECOMMISSIONING, S.CANCELLED}),
    S.PR_OPEN: frozenset({S.MERGED, S.FAILED, S.CANCELLED}),
    S.DECOMMISSIONING: frozenset({S.MERGED, S.FAILED, S.CANCELLED}),
    S.MERGED: frozenset({S.READY, S.DECOMMISSIONED, S.FAILED}),
    # A failed request can be retried (a new pull request), or a later fix applies it.
    S.FAILED: frozenset({S.PR_OPEN, S.DECOMMISSIONING, S.READY, S.DECOMMISSIONED, S.CANCELLED}),
    S.READY: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.DECOMMISSIONED: frozenset(),
}

# The tenant may still edit the request in these states.
EDITABLE = frozenset({S.DRAFT, S.CHANGES_REQUESTED})
# Waiting on an admin's decision.
AWAITING_DECISION = frozenset({S.SUBMITTED})
# A pull request is (or should be) open: Git and the cluster move the request on.
IN_FLIGHT = frozenset({S.APPROVED, S.PR_OPEN, S.DECOMMISSIONING, S.MERGED, S.FAILED})
TERMINAL = frozenset(state for state, nexts in TRANSITIONS.items() if not nexts)
# Holding the resource's name: another request for it must wait.
OPEN = frozenset(TRANSITIONS) - TERMINAL


def allowed(current: str, wanted: str) -> bool:
    return wanted in TRANSITIONS.get(current, frozenset())
