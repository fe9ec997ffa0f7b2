"""The demo's idle loop at the database's level (``seed_demo``, ``billing.demo.seed_idle``):
vision's endpoint ``caption`` is nearly idle in the seeded month, so the seed opens its idle
case under a policy that acts on endpoints; after the grace the evaluation opens the change
that puts it to sleep, the standing policy merges it, its member wakes it from the case, and
the ledger's idle hours before the wake do not put it back to sleep. ``make demo`` plays the
same with the simulator (whose DCGM reads caption's pods as idle: ``idle_pods``)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command

from billing import demo, idle
from billing.models import IdleCase, IdleKind, IngestCursor, UsageHour
from catalog import idle_actions
from catalog.models import Resource, ResourceRequest


def test_the_demo_endpoint_sleeps_after_its_grace_and_its_member_wakes_it(
    transactional_db: None,
) -> None:
    # transactional: the seed's and the sleep change's commits run their checks, as in the demo
    call_command("seed_demo", stdout=StringIO())
    case = IdleCase.objects.get(kind=IdleKind.ENDPOINT)
    assert (case.tenant.slug, case.target, case.state) == ("vision", "caption", "notified")
    # Under the name the ingest gives the simulator's predictor pods.
    assert case.workload.startswith("ReplicaSet/caption-predictor-")
    assert case.utilisation_percent < demo.DEMO_IDLE_THRESHOLD
    assert case.policy is not None and case.policy.act_on_endpoints
    assert case.act_after - case.detected_at == timedelta(minutes=demo.DEMO_GRACE_MINUTES)
    # llm-platform's workload stays idle too, with nothing in the catalog behind it.
    assert IdleCase.objects.get(kind=IdleKind.OTHER).tenant.slug == "llm-platform"
    # The ingest takes up after the history, not over it.
    last = UsageHour.objects.latest("hour").hour
    assert IngestCursor.objects.get().last_complete_hour == last

    assert idle.evaluate(now=case.act_after - timedelta(seconds=1)).acted == 0
    result = idle.evaluate(now=case.act_after + timedelta(seconds=1))
    assert (result.acted, result.errors) == (1, [])
    case.refresh_from_db()
    assert case.state == IdleCase.State.ACTED
    caption = Resource.objects.get(tenant__slug="vision", name="caption")
    sleep = ResourceRequest.objects.filter(resource=caption).latest("pk")
    assert sleep.spec["asleep"] is True and sleep.change is not None
    assert idle_actions.merge_ready() == 1
    assert idle_actions.is_asleep(caption)

    idle.do_wake(case, acting_user=get_user_model().objects.get(username="bob"))
    case.refresh_from_db()
    assert case.state == IdleCase.State.WOKEN
    assert idle_actions.merge_ready() == 1
    assert not idle_actions.is_asleep(caption)
    # The ledger still has it idle over the window, but those hours are before the wake.
    assert idle.evaluate().detected == 0
    assert not IdleCase.objects.filter(target="caption", state__in=IdleCase.OPEN).exists()
