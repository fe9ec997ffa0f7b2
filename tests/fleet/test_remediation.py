"""The remediation loop against the simulator over HTTP: each signal, the blast-radius guard,
a drain a disruption budget holds, hysteresis, a restart mid-way, and the return of a node
(by itself or by an admin) after its burn-in; the pages and who may see them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from catalog.models import Notification, OutgoingMail
from fleet import lifecycle, remediation, services
from fleet.models import (
    Node,
    NodeLifecycle,
    Remediation,
    RemediationEvent,
    RemediationPause,
    RemediationPolicy,
    RemediationWarning,
    Workload,
)
from portal.models import AuditEvent
from simulator import Simulator
from tenants.models import Membership, Role, Tenant

# Row locks (select_for_update) and the partial unique index.
pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]

State = Remediation.State


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator], world: dict[str, Any]) -> Simulator:
    """The demo fleet, moving only when the test ticks it; the personas (pam is told)."""
    simulator = start_fleet()
    services.sync_all()
    return simulator


@pytest.fixture
def vision(world: dict[str, Any], make_user: Callable[..., Any]) -> Any:
    """The demo's tenant whose jobs run on the h200 pool, with a member to tell."""
    tenant = Tenant.objects.create(slug="vision", display_name="Vision")
    victor = make_user("victor")
    Membership.objects.create(user=victor, tenant=tenant, role=Role.MEMBER)
    return victor


def _busy_node() -> Node:
    """An h200 node running vision's job pods."""
    pod = (
        Workload.objects.filter(tenant_slug="vision", owner_kind="Job")
        .exclude(node="")
        .order_by("node")
        .first()
    )
    assert pod is not None
    return Node.objects.get(name=pod.node)


def _cordoned(sim: Simulator, name: str) -> bool:
    return sim.get_object("nodes", "", name).get("spec", {}).get("unschedulable") is True


def _round(at: Any = None) -> remediation.StepReport:
    """A sync, then a round of the loop (as the fleet.sync task does)."""
    services.sync_all()
    return remediation.step(now=at)


def _policy(**values: Any) -> RemediationPolicy:
    policy = RemediationPolicy.current()
    for key, value in values.items():
        setattr(policy, key, value)
    policy.save()
    return policy


def test_a_fatal_xid_cordons_and_tells_admins_and_tenants(sim: Simulator, vision: Any) -> None:
    node = _busy_node()
    sim.inject_xid(node.name, 2, 79)
    report = _round()
    assert report.cordoned == [node.name]
    assert _cordoned(sim, node.name)
    incident = Remediation.objects.get(node_name=node.name)
    assert (incident.state, incident.signal, incident.needs_burn_in) == (
        State.CORDONED,
        remediation.FATAL_XID,
        True,
    )
    # The condition's message names the XID already: the reason names it once.
    assert incident.reason.count("XID 79") == 1 and incident.tenants == ["vision"]
    told = set(Notification.objects.values_list("user__username", flat=True))
    assert {"pam", "victor"} <= told and "alice" not in told
    mails = [sorted(m.to) for m in OutgoingMail.objects.all()]
    assert ["pam@example.com"] in mails and ["victor@example.com"] in mails
    assert AuditEvent.objects.filter(action="remediation.cordon", tenant_slug="vision").exists()
    # A second round changes nothing: one incident, one cordon event.
    assert _round().cordoned == []
    assert RemediationEvent.objects.filter(action="cordon").count() == 1


def test_the_tenant_a_node_is_reserved_for_is_told_though_nothing_of_it_runs_there(
    sim: Simulator,
) -> None:
    from fleet.models import NodeReservation

    services.sync_all()
    node = Node.objects.get(name="h200-04")
    NodeReservation.objects.create(
        node_name=node.name,
        tenant_slug="bravo",
        flavor="h200",
        gpus=node.gpu_count,
        accepted_at=timezone.now(),
    )
    # An earlier, released reservation of the node tells its tenant nothing.
    NodeReservation.objects.create(
        node_name=node.name,
        tenant_slug="charlie",
        flavor="h200",
        gpus=8,
        accepted_at=timezone.now() - timedelta(days=2),
        released_at=timezone.now() - timedelta(days=1),
    )
    sim.inject_xid(node.name, 1, 79)
    _round()
    incident = Remediation.objects.get(node_name=node.name)
    assert "bravo" in incident.tenants and "charlie" not in incident.tenants


@pytest.mark.parametrize("xid", sorted(remediation.FATAL_XIDS))
def test_every_fatal_xid_is_fatal(sim: Simulator, xid: int) -> None:
    sim.inject_xid("h200-04", 1, xid)
    services.sync_all()
    found = remediation.findings(Node.objects.get(name="h200-04"))
    assert [f.fatal for f in found] == [True], found
    assert found[0].needs_burn_in and found[0].reason.count(f"XID {xid}") == 1, found


def test_a_failed_health_watch_and_an_npd_condition_cordon(sim: Simulator) -> None:
    sim.set_condition("h200-04", "GpuMemWatch", reason="GpuMemWatchFailed", message="DBE")
    sim.set_condition("h200-hami-01", "GPUMissing", message="GPU 3 is missing")
    report = _round()
    assert sorted(report.cordoned) == ["h200-04", "h200-hami-01"]
    signals = dict(Remediation.objects.values_list("node_name", "signal"))
    assert signals == {
        "h200-04": remediation.HEALTH_WATCH,
        "h200-hami-01": remediation.NODE_CONDITION,
    }
    assert not Remediation.objects.get(node_name="h200-04").needs_burn_in


def test_non_fatal_signals_warn_and_never_cordon(sim: Simulator) -> None:
    sim.inject_xid("h200-04", 1, 92)  # a high single-bit ECC rate
    sim.set_condition("h200-05", "GpuThermalWatch", message="clocks held back: thermal")
    report = _round()
    assert report.cordoned == [] and len(report.warned) == 2
    assert not _cordoned(sim, "h200-04") and not _cordoned(sim, "h200-05")
    assert not Remediation.objects.exists()
    assert RemediationWarning.objects.filter(cleared_at__isnull=True).count() == 2
    assert Notification.objects.filter(user__username="pam").count() == 2
    _round()  # told once
    assert Notification.objects.filter(user__username="pam").count() == 2
    sim.clear_faults()
    _round()
    assert not RemediationWarning.objects.filter(cleared_at__isnull=True).exists()


def test_the_guard_pauses_the_pool_instead_of_cordoning(sim: Simulator) -> None:
    # h200 has 8 nodes: 10% rounds down to 0, so the guard allows its minimum of 1.
    sim.inject_xid("h200-01", 0, 79)
    assert _round().cordoned == ["h200-01"]
    sim.inject_xid("h200-02", 0, 48)
    report = _round()
    assert report.cordoned == [] and not _cordoned(sim, "h200-02")
    pause = RemediationPause.objects.get(pool="h200")
    assert "1 of at most 1" in pause.reason
    assert Notification.objects.filter(title__startswith="Remediation paused").exists()
    assert AuditEvent.objects.filter(action="remediation.pause").count() == 1
    # Other pools go on.
    sim.inject_xid("h200-hami-01", 0, 79)
    assert _round().cordoned == ["h200-hami-01"]
    # An admin raises the share and resumes: the held node is cordoned.
    _policy(guard_min_nodes=2)
    remediation.do_resume("h200", acting_user=_pam())
    assert _round().cordoned == ["h200-02"]


def _pam() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="pam")


def test_a_drain_a_disruption_budget_holds_says_so_and_waits(sim: Simulator, vision: Any) -> None:
    _policy(grace_seconds=0)
    node = _busy_node()
    blocked = services.drain_plan(node).evict[0]
    budget = _budget(sim, blocked.namespace, blocked.name, min_available="100%")
    sim.inject_xid(node.name, 2, 79)
    _round()
    _round()  # grace over: draining
    assert Remediation.objects.get().state == State.DRAINING
    report = _round()  # evicts what it may; the budget refuses one
    incident = Remediation.objects.get()
    assert incident.state == State.DRAINING
    assert blocked.name in incident.blocked and "disruption budget" in incident.blocked
    assert any(blocked.name in line for line in report.held)
    _round()  # still held: said once
    assert RemediationEvent.objects.filter(action="drain-held").count() == 1
    # The budget allows it again: the next round finishes the drain.
    budget["spec"]["minAvailable"] = 0
    budget["metadata"]["generation"] = 2
    sim.put_object("poddisruptionbudgets", budget)
    sim.tick()  # the disruption controller
    _round()
    incident.refresh_from_db()
    assert incident.state == State.BURN_IN and incident.blocked == ""
    assert lifecycle.get(node.name).state == NodeLifecycle.State.BURN_IN


def _budget(sim: Simulator, namespace: str, pod: str, min_available: Any) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget over the pod's labels, its status written by the
    simulator's disruption controller (a tick)."""
    labels = sim.get_object("pods", namespace, pod)["metadata"]["labels"]
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": namespace, "generation": 1},
        "spec": {"selector": {"matchLabels": labels}, "minAvailable": min_available},
    }
    sim.put_object("poddisruptionbudgets", budget)
    sim.tick()
    return budget


def _to_recheck(sim: Simulator, name: str, xid: int = 79) -> Remediation:
    _policy(grace_seconds=0, healthy_seconds=600)
    sim.inject_xid(name, 0, xid)
    _round()
    _round()  # draining
    _round()  # drained: burn-in
    incident = Remediation.objects.get(node_name=name)
    assert incident.state == State.BURN_IN
    sim.clear_faults()
    lifecycle.move(name, NodeLifecycle.State.READY, reason="burn-in passed")
    _round()
    incident.refresh_from_db()
    assert incident.state == State.RECHECK
    return incident


def test_a_flapping_signal_does_not_make_the_node_flap(sim: Simulator) -> None:
    incident = _to_recheck(sim, "h200-06")
    start = timezone.now()
    _round(start)  # healthy from now
    _round(start + timedelta(seconds=500))
    sim.inject_xid("h200-06", 0, 79)  # back within the window
    _round(start + timedelta(seconds=550))
    sim.clear_faults()
    _round(start + timedelta(seconds=560))  # healthy again: the window starts over
    _round(start + timedelta(seconds=1100))  # 540 s healthy: not yet
    incident.refresh_from_db()
    assert incident.state == State.RECHECK and _cordoned(sim, "h200-06")
    assert RemediationEvent.objects.filter(action="fault-again").count() == 1
    _round(start + timedelta(seconds=1200))
    incident.refresh_from_db()
    assert incident.state == State.WAITING_ADMIN and _cordoned(sim, "h200-06")


def test_an_admin_returns_the_node_or_the_policy_does(sim: Simulator, vision: Any) -> None:
    incident = _to_recheck(sim, "h200-06")
    start = timezone.now()
    _round(start)
    _round(start + timedelta(seconds=601))
    incident.refresh_from_db()
    assert incident.state == State.WAITING_ADMIN
    remediation.do_return(incident, acting_user=_pam())
    incident.refresh_from_db()
    assert incident.state == State.RETURNED and incident.closed_at is not None
    assert not _cordoned(sim, "h200-06")
    # With auto_return, the next incident comes back by itself.
    _policy(auto_return=True)
    other = _to_recheck(sim, "h200-07")
    _round(start)
    _round(start + timedelta(seconds=601))
    other.refresh_from_db()
    assert other.state == State.RETURNED and not _cordoned(sim, "h200-07")


def test_a_node_cordoned_before_stays_cordoned_on_return(sim: Simulator) -> None:
    Node.objects.filter(name="h200-06").update(unschedulable=True)
    sim.get_object("nodes", "", "h200-06")
    node = sim.get_object("nodes", "", "h200-06")
    node["spec"]["unschedulable"] = True
    sim.put_object("nodes", node)
    _policy(auto_return=True)
    incident = _to_recheck(sim, "h200-06")
    assert incident.was_cordoned
    start = timezone.now()
    _round(start)
    _round(start + timedelta(seconds=601))
    incident.refresh_from_db()
    assert incident.state == State.RETURNED and _cordoned(sim, "h200-06")


def test_a_restart_resumes_from_the_database(sim: Simulator) -> None:
    """One round, then everything but the database is thrown away: a new round (new client,
    nothing kept in memory) goes on from the recorded state."""
    _policy(grace_seconds=60)
    sim.inject_xid("h200-06", 0, 79)
    start = timezone.now()
    services.sync_all()
    remediation.step(now=start)
    saved = Remediation.objects.get()
    assert saved.state == State.CORDONED
    from fleet.kube import Kube

    with Kube() as fresh:
        remediation.step(kube=fresh, now=start + timedelta(seconds=30))
        assert Remediation.objects.get().state == State.CORDONED  # grace not over
        remediation.step(kube=fresh, now=start + timedelta(seconds=61))
    assert Remediation.objects.get().state == State.DRAINING
    assert Remediation.objects.count() == 1


# --- pages --------------------------------------------------------------------------------


def test_the_remediation_page_is_for_platform_admins(
    sim: Simulator, login: Callable[[str], Client]
) -> None:
    sim.inject_xid("h200-06", 0, 79)
    _round()
    page = login("pam").get("/fleet/remediation/")
    assert page.status_code == 200
    assert b"h200-06" in page.content and b"Guard per pool" in page.content
    assert b"h200-06" in login("pam").get("/fleet/nodes/h200-06/").content
    for name in ("alice", "fiona"):
        assert login(name).get("/fleet/remediation/").status_code == 404
        assert login(name).post("/fleet/remediation/resume/", {"pool": "h200"}).status_code == 404
        incident = Remediation.objects.get()
        url = f"/fleet/remediation/{incident.pk}/return/"
        assert login(name).post(url).status_code == 404


@pytest.mark.parametrize(
    "values",
    [
        {"guard_percent": "0"},
        {"guard_percent": "101"},
        {"guard_min_nodes": "0"},
        {"grace_seconds": "-1"},
        {"guard_percent": "ten"},
    ],
)
def test_bad_policy_input_is_refused_and_changes_nothing(
    login: Callable[[str], Client], values: dict[str, str]
) -> None:
    before = RemediationPolicy.current()
    form = {
        "guard_percent": "10",
        "guard_min_nodes": "1",
        "grace_seconds": "300",
        "healthy_seconds": "600",
        **values,
    }
    response = login("pam").post("/fleet/remediation/", form)
    assert response.status_code == 400
    after = RemediationPolicy.current()
    assert (after.guard_percent, after.guard_min_nodes, after.grace_seconds) == (
        before.guard_percent,
        before.guard_min_nodes,
        before.grace_seconds,
    )
    assert not AuditEvent.objects.filter(action="remediation.policy").exists()


def test_a_good_policy_is_saved_and_audited(login: Callable[[str], Client]) -> None:
    form = {
        "guard_percent": "25",
        "guard_min_nodes": "2",
        "grace_seconds": "60",
        "healthy_seconds": "120",
        "auto_return": "on",
    }
    assert login("pam").post("/fleet/remediation/", form).status_code == 302
    policy = RemediationPolicy.current()
    assert (policy.guard_percent, policy.allowed(8), policy.auto_return) == (25, 2, True)
    assert AuditEvent.objects.filter(action="remediation.policy").exists()


def test_the_tenant_notice_is_for_its_members(
    sim: Simulator, vision: Any, login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    node = _busy_node()
    sim.inject_xid(node.name, 2, 79)
    _round()
    victor = Client()
    victor.force_login(vision)
    page = victor.get("/t/vision/status/")
    assert page.status_code == 200 and b"remediation-notice" in page.content
    assert node.name.encode() in page.content
    assert login("alice").get("/t/vision/status/").status_code == 404
    assert b"remediation-notice" not in login("alice").get("/t/alpha/status/").content


def test_a_node_event_from_the_watch_runs_a_round_at_once(
    sim: Simulator, django_capture_on_commit_callbacks: Any
) -> None:
    from fleet.watch import WATCHED

    nodes = next(w for w in WATCHED if w.name == "nodes")
    sim.inject_xid("h200-06", 0, 79)
    with django_capture_on_commit_callbacks(execute=True):
        nodes.store_one("MODIFIED", sim.get_object("nodes", "", "h200-06"))
    assert _cordoned(sim, "h200-06")
    assert Remediation.objects.get().state == State.CORDONED
    # A further event of the same node queues nothing: the incident is open.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        nodes.store_one("MODIFIED", sim.get_object("nodes", "", "h200-06"))
    assert callbacks == []


@pytest.mark.parametrize(
    ("args", "condition", "fatal"),
    [
        (["health-watch", "h200-04", "--watch", "pcie"], "GpuPcieWatch", True),
        (["condition", "h200-04", "--type", "NVSwitchFatalError"], "NVSwitchFatalError", True),
        (["thermal", "h200-04"], "GpuThermalWatch", False),
        (["ecc", "h200-04", "--gpu", "1"], "SysLogsXIDError", False),
    ],
)
def test_fleet_fault_injects_each_signal(
    sim: Simulator, settings: Any, args: list[str], condition: str, fatal: bool
) -> None:
    from django.core.management import call_command

    settings.FLEET_SIMULATOR = True
    call_command("fleet_fault", *args)
    services.sync_all()
    node = Node.objects.get(name="h200-04")
    assert any(c["type"] == condition and c["status"] == "True" for c in node.conditions)
    assert [f.fatal for f in remediation.findings(node)] == [fatal]


def test_the_simulator_refuses_a_bad_condition_fault(sim: Simulator, settings: Any) -> None:
    import requests

    url = f"{settings.FLEET_API_URL}/sim/faults"
    answer = requests.post(url, json={"kind": "condition", "node": "h200-04"}, timeout=5)
    assert answer.status_code == 400
    bad = {"kind": "condition", "node": "h200-04", "type": "GpuMemWatch", "status": "Maybe"}
    assert requests.post(url, json=bad, timeout=5).status_code == 400
    services.sync_all()
    assert remediation.findings(Node.objects.get(name="h200-04")) == []


def test_the_tenants_webhooks_get_a_node_event(sim: Simulator, vision: Any, world: Any) -> None:
    import json

    from catalog import outbound
    from catalog.models import WebhookDelivery, WebhookEndpoint
    from portal import encryption

    secret = encryption.encrypt(outbound.new_secret())
    mine = WebhookEndpoint.objects.create(
        tenant=Tenant.objects.get(slug="vision"), url="https://1.1.1.1/hook", secret=secret
    )
    WebhookEndpoint.objects.create(tenant=world["alpha"], url="https://1.1.1.1/a", secret=secret)
    node = _busy_node()
    sim.inject_xid(node.name, 2, 79)
    _round()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.endpoint, delivery.event_type) == (mine, outbound.EVENT_NODE_REMEDIATION)
    data = json.loads(delivery.body)["data"]
    assert (data["tenant"], data["node"]) == ("vision", node.name)
    assert data["url"].endswith("/t/vision/status/")
