"""The node lifecycle's moves: audited once per change, and ``passed_since`` by time."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet import lifecycle
from fleet.models import NodeLifecycle
from portal.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_move_records_each_change_once():
    lifecycle.move("h200-01", NodeLifecycle.State.READY, reason="adopted")
    lifecycle.move("h200-01", NodeLifecycle.State.READY, reason="again")
    row = lifecycle.request_burn_in("h200-01", reason="XID 79")
    assert row.state == NodeLifecycle.State.BURN_IN and row.reason == "XID 79"
    events = AuditEvent.objects.filter(action="node.lifecycle").order_by("pk")
    assert [e.diff["state"] for e in events] == [[None, "ready"], ["ready", "burn-in"]]


def test_passed_since_needs_ready_after_the_time():
    asked = timezone.now()
    lifecycle.request_burn_in("h200-02", reason="new node")
    assert not lifecycle.passed_since("h200-02", asked)
    lifecycle.move("h200-02", NodeLifecycle.State.READY, reason="burn-in passed")
    assert lifecycle.passed_since("h200-02", asked)
    assert not lifecycle.passed_since("h200-02", timezone.now() + timedelta(seconds=1))
    assert not lifecycle.passed_since("never-seen", asked)
