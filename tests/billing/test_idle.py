"""Idle reclaim without a cluster: detection thresholds and windows, per-tenant overrides,
exemptions and their expiry, notices (inbox, mail, webhook), reclaimed hours, bad policy
input, and who may do what. The Kueue path against the simulator is in test_idle_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from billing import idle
from billing.models import IdleCase, IdleExemption, IdleKind, IdlePolicy, ReclaimedHour, UsageHour
from catalog.models import Notification, OutgoingMail, WebhookDelivery, WebhookEndpoint
from portal.models import AuditEvent

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 20, tzinfo=UTC)
HOUR = timedelta(hours=1)
THIS_HOUR = NOW.replace(minute=0)


def usage(
    namespace: str,
    workload: str,
    busy: list[float],
    *,
    flavor: str = "h200",
    gpus: int = 2,
    end: datetime = THIS_HOUR,
) -> None:
    """Ledger rows for the hours before ``end``, the oldest first in ``busy``: the fraction of
    the held GPU-seconds that was used in each."""
    for back, fraction in enumerate(reversed(busy), start=1):
        allocated = Decimal(gpus * 3600)
        UsageHour.objects.create(
            hour=end - back * HOUR,
            tenant_slug=namespace,
            namespace=namespace,
            flavor=flavor,
            workload=workload,
            source="exporter",
            allocated_gpu_seconds=allocated,
            used_gpu_seconds=(allocated * Decimal(str(fraction))).quantize(Decimal("0.001")),
            observed_seconds=3600,
        )


def policy(**changes: Any) -> IdlePolicy:
    values = {"flavor": "h200", "threshold_percent": Decimal(5), "window_hours": 2}
    values.update(changes)
    return IdlePolicy.objects.create(**values)


def test_it_finds_work_under_the_threshold_for_the_whole_window(world: dict[str, Any]) -> None:
    policy(threshold_percent=Decimal(5), window_hours=2)
    usage("alpha", "Job/idle", [0.01, 0.02])
    usage("alpha", "Job/busy", [0.01, 0.50])  # busy in one hour: the mean is over 5%
    usage("alpha", "Job/edge", [0.05, 0.05])  # exactly the threshold is not under it
    usage("alpha", "Job/short", [0.01])  # one hour of a two-hour window: too little to judge
    usage("alpha", "Job/other", [0.0, 0.0], flavor="a100")  # no policy for that flavor
    found = idle.detect(NOW)
    assert [(i.workload, i.gpus, i.utilisation_percent) for i in found] == [
        ("Job/idle", Decimal("2.000"), Decimal("1.50"))
    ]


def test_a_longer_window_needs_every_hour(world: dict[str, Any]) -> None:
    policy(window_hours=3)
    usage("alpha", "Job/idle", [0.0, 0.0])
    assert idle.detect(NOW) == []
    UsageHour.objects.all().delete()
    usage("alpha", "Job/idle", [0.0, 0.0, 0.0])
    assert [i.workload for i in idle.detect(NOW)] == ["Job/idle"]


def test_the_window_ends_at_the_ledgers_last_hour(world: dict[str, Any]) -> None:
    # The hour before NOW is not ingested yet: the window is the two hours before it.
    policy(window_hours=2)
    usage("alpha", "Job/idle", [0.0, 0.0], end=NOW.replace(minute=0) - HOUR)
    assert [i.workload for i in idle.detect(NOW)] == ["Job/idle"]


def test_a_tenants_override_replaces_the_flavors_policy(world: dict[str, Any]) -> None:
    policy(threshold_percent=Decimal(5))
    policy(tenant=world["bravo"], threshold_percent=Decimal(20))
    usage("alpha", "Job/a", [0.10, 0.10])
    usage("bravo", "Job/b", [0.10, 0.10])
    assert [(i.tenant_slug, i.workload) for i in idle.detect(NOW)] == [("bravo", "Job/b")]
    policy(tenant=world["alpha"], flavor="h200", threshold_percent=Decimal(1), enabled=False)
    # A disabled override switches reclaim off for that tenant, flavor policy or not.
    assert [i.tenant_slug for i in idle.detect(NOW)] == ["bravo"]


def test_a_notice_goes_to_the_tenant_by_inbox_mail_and_webhook(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    policy(grace_minutes=30)
    WebhookEndpoint.objects.create(
        tenant=world["alpha"],
        url="https://hooks.example.com/x",
        secret="s",
        created_by=world["alice"],
    )
    usage("alpha", "Job/idle", [0.0, 0.0])
    with django_capture_on_commit_callbacks(execute=False):
        result = idle.evaluate(now=NOW)
    assert (result.detected, result.acted) == (1, 0)
    case = IdleCase.objects.get()
    assert (case.state, case.kind, case.act_after) == (
        IdleCase.State.NOTIFIED,
        IdleKind.JOB,
        NOW + timedelta(minutes=30),
    )
    told = set(
        Notification.objects.filter(tenant_slug="alpha").values_list("user__username", flat=True)
    )
    assert told == {"alice", "bob"}  # the writers; viewers and other tenants are not told
    assert "0.00% busy" in Notification.objects.first().body
    assert OutgoingMail.objects.filter(tenant_slug="alpha").count() == 1
    delivery = WebhookDelivery.objects.get()
    body = json.loads(delivery.body)
    assert (delivery.event_type, body["type"]) == ("idle.detected", "idle.detected")
    assert body["data"]["case"]["workload"] == "Job/idle"
    # A second evaluation opens no second case and tells nobody twice.
    idle.evaluate(now=NOW + timedelta(minutes=5))
    assert IdleCase.objects.count() == 1
    assert Notification.objects.filter(tenant_slug="alpha").count() == 2


def test_a_case_busy_again_before_the_grace_closes(world: dict[str, Any]) -> None:
    policy(grace_minutes=90)
    usage("alpha", "Job/idle", [0.0, 0.0])
    idle.evaluate(now=NOW)
    UsageHour.objects.create(
        hour=NOW.replace(minute=0),
        tenant_slug="alpha",
        namespace="alpha",
        flavor="h200",
        workload="Job/idle",
        source="exporter",
        allocated_gpu_seconds=Decimal(7200),
        used_gpu_seconds=Decimal(7000),
        observed_seconds=3600,
    )
    result = idle.evaluate(now=NOW + timedelta(hours=1))
    assert result.closed == 1
    assert IdleCase.objects.get().state == IdleCase.State.CLOSED


def test_an_exemption_is_honoured_until_it_expires(world: dict[str, Any]) -> None:
    policy(grace_minutes=60, max_exemption_days=3)
    usage("alpha", "Job/idle", [0.0, 0.0])
    idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    with pytest.raises(ValidationError) as refused:
        idle.do_exempt(
            case, datetime.now(UTC) + timedelta(days=30), "keep warm", acting_user=world["bob"]
        )
    assert "at most 3 days" in str(refused.value)
    assert not IdleExemption.objects.exists()
    until = datetime.now(UTC) + timedelta(days=2)
    idle.do_exempt(case, until, "demo on Thursday", acting_user=world["bob"])
    case.refresh_from_db()
    assert case.state == IdleCase.State.EXEMPTED
    assert AuditEvent.objects.filter(action="billing.idle_exempted").exists()
    # While exempt, nothing new is opened; once it has expired, the next evaluation does.
    assert idle.evaluate(now=until - timedelta(minutes=1)).detected == 0
    assert idle.evaluate(now=until + timedelta(minutes=1)).detected == 1


def test_a_woken_workload_gets_a_whole_window_after_the_wake(world: dict[str, Any]) -> None:
    p = policy(grace_minutes=10, window_hours=2)
    # Idle from 10:00 to 15:00 in the ledger; put to sleep and woken by bob at 11:30.
    usage("alpha", "Job/idle", [0.0] * 5, end=THIS_HOUR + 3 * HOUR)
    woken_at = THIS_HOUR - timedelta(minutes=30)
    IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="alpha",
        flavor="h200",
        workload="Job/idle",
        kind=IdleKind.JOB,
        policy=p,
        state=IdleCase.State.WOKEN,
        utilisation_percent=Decimal(1),
        gpus=Decimal(2),
        act_after=woken_at - HOUR,
        acted_at=woken_at - HOUR,
        ended_at=woken_at,
        ended_by=world["bob"],
    )
    # 12:20, 13:20: the window (10-12, 11-13) starts before the wake, so no case opens.
    assert idle.evaluate(now=NOW).detected == 0
    assert idle.evaluate(now=NOW + HOUR).detected == 0
    # 14:20: the window 12-14 is all after the wake; the case opens with a grace of its own.
    assert idle.evaluate(now=NOW + 2 * HOUR).detected == 1
    case = IdleCase.objects.get(state=IdleCase.State.NOTIFIED)
    assert case.act_after == NOW + 2 * HOUR + timedelta(minutes=10)
    # Another workload of the tenant, never woken, is judged on the usual window.
    usage("alpha", "Job/other", [0.0, 0.0])
    assert idle.evaluate(now=NOW).detected == 1


def test_a_viewer_and_another_tenant_cannot_wake_or_exempt(world: dict[str, Any]) -> None:
    policy()
    usage("alpha", "Job/idle", [0.0, 0.0])
    idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    until = datetime.now(UTC) + timedelta(days=1)
    for who in ("vic", "charlie"):
        with pytest.raises(PermissionDenied):
            idle.do_exempt(case, until, "mine", acting_user=world[who])
        with pytest.raises(PermissionDenied):
            idle.do_wake(case, acting_user=world[who])
    assert not IdleExemption.objects.exists()


def test_an_other_workload_is_told_but_not_acted_on(world: dict[str, Any]) -> None:
    policy(grace_minutes=0)
    usage("alpha", "Pod/notebook", [0.0, 0.0])
    result = idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    assert (result.acted, case.kind, case.state) == (0, IdleKind.OTHER, IdleCase.State.NO_ACTION)
    assert not ReclaimedHour.objects.exists()


def test_reclaimed_hours_cover_the_time_from_action_to_wake(world: dict[str, Any]) -> None:
    p = policy()
    case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="alpha",
        flavor="h200",
        workload="Job/idle",
        kind=IdleKind.JOB,
        policy=p,
        state=IdleCase.State.ACTED,
        utilisation_percent=Decimal(1),
        gpus=Decimal(2),
        act_after=NOW,
        acted_at=NOW,  # 12:20
    )
    idle.record_reclaimed(NOW + timedelta(hours=2))  # to 14:20
    rows = {r.hour.hour: r.gpu_hours for r in ReclaimedHour.objects.filter(case=case)}
    assert rows == {12: Decimal("1.333"), 13: Decimal("2.000"), 14: Decimal("0.667")}
    # Recomputed, never added twice.
    idle.record_reclaimed(NOW + timedelta(hours=2))
    assert idle.reclaimed_total(tenant_slug="alpha") == Decimal("4.000")
    assert idle.reclaimed_total(tenant_slug="bravo") == Decimal(0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold_percent", "0"),
        ("threshold_percent", "101"),
        ("threshold_percent", "five"),
        ("threshold_percent", "5.001"),
        ("window_hours", "0"),
        ("window_hours", "2.5"),
        ("grace_minutes", "-1"),
        ("max_exemption_days", "1000"),
        ("act_on_jobs", "maybe"),
    ],
)
def test_bad_policy_input_is_refused_and_changes_nothing(
    world: dict[str, Any], field: str, value: str
) -> None:
    before = policy(threshold_percent=Decimal(5))
    data = {
        "threshold_percent": "7",
        "window_hours": "2",
        "grace_minutes": "10",
        "max_exemption_days": "7",
        "act_on_jobs": "on",
        field: value,
    }
    with pytest.raises(ValidationError) as refused:
        idle.do_set_policy("h200", data, acting_user=world["pam"])
    assert field in refused.value.message_dict
    after = IdlePolicy.objects.get()
    assert (after.threshold_percent, after.updated_at) == (
        before.threshold_percent,
        before.updated_at,
    )
    assert not AuditEvent.objects.filter(action="billing.idle_policy_set").exists()


def test_only_platform_admins_set_policies_and_a_flavor_must_exist(world: dict[str, Any]) -> None:
    data = {
        "threshold_percent": "5",
        "window_hours": "2",
        "grace_minutes": "60",
        "max_exemption_days": "7",
    }
    for who in ("alice", "fiona"):
        with pytest.raises(PermissionDenied):
            idle.do_set_policy("h200", data, acting_user=world[who])
    with pytest.raises(ValidationError):
        idle.do_set_policy("no-such-flavor", data, acting_user=world["pam"])
    made = idle.do_set_policy("h200", data, tenant=world["alpha"], acting_user=world["pam"])
    assert (made.tenant, made.threshold_percent, made.act_on_jobs) == (world["alpha"], 5, False)
    assert AuditEvent.objects.filter(action="billing.idle_policy_set").count() == 1


def test_the_pages_404_for_outsiders_and_show_cases_to_members(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    policy()
    usage("alpha", "Job/idle", [0.0, 0.0])
    idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    assert login("charlie").get("/t/alpha/idle/").status_code == 404
    assert login("charlie").post(f"/t/alpha/idle/{case.pk}/wake/").status_code == 404
    assert login("charlie").post(f"/t/alpha/idle/{case.pk}/exempt/").status_code == 404
    for who in ("alice", "charlie", "fiona"):
        assert login(who).get("/billing/idle/").status_code == 404
    page = login("vic").get("/t/alpha/idle/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "alpha/Job/idle" in text and "0.00 GPU-h" in text
    assert "Exempt</button>" not in text  # a viewer gets no buttons
    assert "Exempt</button>" in login("bob").get("/t/alpha/idle/").content.decode()
    admin = login("pam").get("/billing/idle/")
    assert admin.status_code == 200 and "alpha/Job/idle" in admin.content.decode()


def test_the_admin_form_saves_a_policy_and_refuses_bad_input(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    bad = pam.post(
        "/billing/idle/",
        {
            "flavor": "h200",
            "threshold_percent": "200",
            "window_hours": "2",
            "grace_minutes": "5",
            "max_exemption_days": "1",
        },
    )
    assert bad.status_code == 400 and "threshold_percent" in bad.content.decode()
    assert not IdlePolicy.objects.exists()
    good = pam.post(
        "/billing/idle/",
        {
            "flavor": "h200",
            "tenant": "bravo",
            "threshold_percent": "3.5",
            "window_hours": "4",
            "grace_minutes": "15",
            "max_exemption_days": "2",
            "act_on_jobs": "on",
            "enabled": "on",
        },
    )
    assert good.status_code == 302
    saved = IdlePolicy.objects.get()
    assert (saved.tenant, saved.threshold_percent, saved.window_hours) == (
        world["bravo"],
        Decimal("3.50"),
        4,
    )


def test_the_usage_dashboards_show_reclaimed_gpu_hours(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="alpha",
        flavor="h200",
        workload="Job/idle",
        kind=IdleKind.JOB,
        policy=policy(),
        state=IdleCase.State.WOKEN,
        utilisation_percent=Decimal(1),
        gpus=Decimal("1.5"),
        act_after=now - 5 * HOUR,
        acted_at=now - 5 * HOUR,
        ended_at=now - 2 * HOUR,  # woken: the hours after it are not reclaimed
    )
    idle.record_reclaimed(now)
    assert idle.reclaimed_total(tenant_slug="alpha") == Decimal("4.500")
    tenant_page = login("vic").get("/t/alpha/usage/").content.decode()
    assert "4.50 GPU-hours" in tenant_page
    assert "4.50 GPU-hours" in login("pam").get("/billing/").content.decode()
    # Another tenant's dashboard shows none of it: bravo has run nothing, so it gets the
    # "start here" state.
    bravo_page = login("charlie").get("/t/bravo/usage/").content.decode()
    assert "4.50" not in bravo_page and 'id="start-here"' in bravo_page
    assert case.reclaimed.count() in (3, 4)


def test_kinds_come_from_owner_kueue_kserve_and_vcluster_names(world: dict[str, Any]) -> None:
    from catalog.models import Resource

    alpha = world["alpha"]
    for kind, name in (("endpoint", "chat"), ("cluster", "dev")):
        Resource.objects.create(tenant=alpha, kind=kind, name=name, state="active")
    assert idle.kind_of(alpha, "Job/train") == (IdleKind.JOB, "train")
    assert idle.kind_of(alpha, "PyTorchJob/ft") == (IdleKind.JOB, "ft")
    assert idle.kind_of(alpha, "ReplicaSet/chat-predictor-6d5f8c7b9c") == (
        IdleKind.ENDPOINT,
        "chat",
    )
    assert idle.kind_of(alpha, "Pod/nb-0-x-default-x-dev") == (IdleKind.CLUSTER, "dev")
    assert idle.kind_of(alpha, "Pod/nb-0-x-default-x-other") == (IdleKind.OTHER, "")
    assert idle.kind_of(alpha, "Deployment/web") == (IdleKind.OTHER, "")
    # Another tenant's endpoint of the same name is not alpha's.
    assert idle.kind_of(world["bravo"], "ReplicaSet/chat-predictor-6d5f8c7b9c") == (
        IdleKind.OTHER,
        "",
    )


def test_an_endpoint_gone_from_the_catalog_before_its_grace_is_told_not_acted_on(
    world: dict[str, Any],
) -> None:
    from catalog.models import Resource, ResourceRequest

    chat = Resource.objects.create(
        tenant=world["alpha"], kind="endpoint", name="chat", state="active"
    )
    policy(grace_minutes=30, act_on_endpoints=True)
    usage("alpha", "ReplicaSet/chat-predictor-6d5f8c7b9c", [0.0, 0.0])
    idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    assert (case.kind, case.target, case.state) == (IdleKind.ENDPOINT, "chat", "notified")
    # Decommissioned within the grace: nothing is left to put to sleep, and no change opens.
    Resource.objects.filter(pk=chat.pk).update(state=Resource.State.DECOMMISSIONED)
    result = idle.evaluate(now=NOW + timedelta(minutes=31))
    case.refresh_from_db()
    assert case.state == IdleCase.State.NO_ACTION and result.errors == []
    assert case.note == "chat is no longer in the catalog: nothing to put to sleep."
    assert not ResourceRequest.objects.exists()


def test_the_beat_task_evaluates(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    from portal.jobs import enqueue
    from portal.models import Job

    policy(grace_minutes=60)
    this_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    usage("alpha", "Job/idle", [0.0, 0.0], end=this_hour)
    with django_capture_on_commit_callbacks(execute=True):
        enqueue("billing.idle", trigger=Job.Trigger.SCHEDULE)
    job = Job.objects.get(task="billing.idle")
    assert job.status == Job.Status.SUCCEEDED and "1 detected" in job.log, job.log
    assert IdleCase.objects.get().state == IdleCase.State.NOTIFIED


def test_a_cluster_that_cannot_be_reached_leaves_the_case_to_the_next_pass(
    world: dict[str, Any], settings: Any
) -> None:
    settings.FLEET_API_URL = "http://127.0.0.1:1"  # nothing listens there
    settings.FLEET_KUBECONFIG = ""
    settings.FLEET_IN_CLUSTER = False
    settings.FLEET_API_TOKEN = ""
    settings.FLEET_API_TIMEOUT = 1
    policy(grace_minutes=0)
    usage("alpha", "Job/idle", [0.0, 0.0])
    result = idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    assert (result.detected, result.acted) == (1, 0)
    assert len(result.errors) == 1 and "Job/idle" in result.errors[0]
    assert case.state == IdleCase.State.NOTIFIED  # acted on by a later pass, from the table
    assert not ReclaimedHour.objects.exists()


def test_a_viewer_clicking_exempt_changes_nothing_and_a_member_exempts(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    policy(max_exemption_days=2)
    usage("alpha", "Job/idle", [0.0, 0.0])
    idle.evaluate(now=NOW)
    case = IdleCase.objects.get()
    url = f"/t/alpha/idle/{case.pk}/exempt/"
    until = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    form = {"until": until, "reason": "demo on Thursday"}
    # The view lets the service refuse; its PermissionDenied is a 403 page.
    answer = login("vic").post(url, form)
    assert answer.status_code == 403
    assert IdleCase.objects.get().state == IdleCase.State.NOTIFIED
    assert login("bob").post(url, {"until": "tomorrow", "reason": "x"}).status_code == 302
    assert not IdleExemption.objects.exists()
    assert login("bob").post(url, form).status_code == 302
    assert IdleCase.objects.get().state == IdleCase.State.EXEMPTED
