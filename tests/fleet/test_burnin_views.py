"""The node page's burn-in: its history with GB/s against expected, the live part, and the
admins' buttons (run burn-in, mark ready with a reason), refused to everyone else with 404."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from fleet import burnin, lifecycle, services
from fleet.kube import Kube
from fleet.models import BurnInExpectation, BurnInRun, NodeLifecycle
from portal.models import AuditEvent
from simulator import Simulator

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]
State = NodeLifecycle.State
NAMESPACE = "gpu-burn-in"


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator], settings: Any) -> Simulator:
    settings.FLEET_BURN_IN_NAMESPACE = NAMESPACE
    simulator = start_fleet(job_seconds=0)
    simulator.cluster.ensure_namespace(NAMESPACE, 0)
    services.sync_all()  # adopts the fleet
    return simulator


def _free_node(sim: Simulator) -> str:
    return next(
        n.name for n in sim.cluster.nodes.values() if n.group.mode == "whole" and n.busy_gpus() == 0
    )


def _unschedulable(sim: Simulator, node: str) -> bool:
    return sim.get_object("nodes", "", node)["spec"].get("unschedulable") is True


def _state(node: str) -> str:
    row = lifecycle.get(node)
    assert row is not None
    return row.state


def test_only_platform_admins_press_the_buttons(
    sim: Simulator, world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    node = _free_node(sim)
    for person in ("alice", "bob", "charlie", "fiona"):
        client = login(person)
        for action in ("burn-in", "mark-ready"):
            url = f"/fleet/nodes/{node}/{action}/"
            assert client.post(url, {"reason": "looks fine"}).status_code == 404, (person, url)
        assert client.get(f"/fleet/nodes/{node}/").status_code == 404
    assert _state(node) == State.READY and not _unschedulable(sim, node)
    assert not BurnInRun.objects.exists()
    assert login("pam").post("/fleet/nodes/no-such-node/burn-in/").status_code == 404


def test_an_admin_reruns_burn_in_and_the_page_shows_the_result(
    sim: Simulator, login: Callable[[str], Client]
) -> None:
    node = _free_node(sim)
    pam = login("pam")
    response = pam.post(f"/fleet/nodes/{node}/burn-in/")
    assert response.status_code == 302
    assert _state(node) == State.BURN_IN and _unschedulable(sim, node)
    audit = AuditEvent.objects.filter(action="node.lifecycle").latest("pk")
    assert audit.actor is not None and audit.actor.username == "pam"
    # Pressed twice: refused, nothing moves.
    pam.post(f"/fleet/nodes/{node}/burn-in/")
    assert AuditEvent.objects.filter(action="node.cordon").count() == 1

    with Kube() as kube:
        burnin.run_all(kube)  # the diagnostic's Job starts
        part = pam.get(f"/fleet/nodes/{node}/", HTTP_HX_REQUEST="true").content.decode()
        assert 'id="live"' in part and ">burn-in</span>" in part  # the live region alone
        assert "<h1>" not in part
        for _ in range(12):
            sim.tick()
            burnin.run_all(kube)
            if _state(node) != State.BURN_IN:
                break
    assert _state(node) == State.READY and not _unschedulable(sim, node)
    page = pam.get(f"/fleet/nodes/{node}/").content.decode()
    assert "480.00 GB/s of 450.00 GB/s expected (pass at 90.00 %)" in page
    listing = pam.get("/fleet/nodes/").content.decode()
    assert "<th>Lifecycle</th>" in listing and ">ready</span>" in listing


def test_mark_ready_needs_a_reason_and_lifts_only_the_lifecycles_cordon(
    sim: Simulator, login: Callable[[str], Client]
) -> None:
    node = _free_node(sim)
    sim.fail_diag(node, "pcie")
    pam = login("pam")
    pam.post(f"/fleet/nodes/{node}/burn-in/")
    with Kube() as kube:
        for _ in range(12):
            sim.tick()
            burnin.run_all(kube)
            if _state(node) != State.BURN_IN:
                break
    assert _state(node) == State.FAILED and _unschedulable(sim, node)
    page = pam.get(f"/fleet/nodes/{node}/").content.decode()
    assert "failed burn-in" in page and "pcie: GPU 0" in page

    response = pam.post(f"/fleet/nodes/{node}/mark-ready/", {"reason": "  "}, follow=True)
    assert "Say why the node is ready" in response.content.decode()
    assert _state(node) == State.FAILED and _unschedulable(sim, node)

    pam.post(f"/fleet/nodes/{node}/mark-ready/", {"reason": "vendor replaced the HBM"})
    row = lifecycle.get(node)
    assert row is not None and row.state == State.READY
    assert row.reason == "marked ready: vendor replaced the HBM"
    assert not _unschedulable(sim, node)


def test_an_admin_sets_the_expected_bandwidth_and_bad_values_change_nothing(
    sim: Simulator, world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    page = pam.get("/fleet/burn-in/").content.decode()
    assert "NVIDIA-H200" in page and "450.00 GB/s" in page and "405.00 GB/s" in page
    for bad in ("0", "-3", "fast", ""):
        response = pam.post("/fleet/burn-in/", {"product": "NVIDIA-H200", "busbw_gbps": bad})
        assert response.status_code == 200, bad
        assert not BurnInExpectation.objects.exists()
    with pytest.raises(ValidationError):
        burnin.do_set_expectation("NVIDIA-H200", 0, acting_user=world["pam"])
    assert (
        login("alice")
        .post("/fleet/burn-in/", {"product": "NVIDIA-H200", "busbw_gbps": "500"})
        .status_code
        == 404
    )
    assert not BurnInExpectation.objects.exists()

    pam.post("/fleet/burn-in/", {"product": "NVIDIA-H200", "busbw_gbps": "500"})
    assert burnin.expected_busbw("NVIDIA-H200") == 500.0
    assert AuditEvent.objects.get(action="fleet.burn_in_expectation").diff == {
        "busbw_gbps": [450.0, 500.0],
        "scope": [None, "node"],
    }
    # The simulator's healthy H200 node reaches 480 GB/s: at 540 expected (0.9 of it is
    # 486) it fails.
    pam.post("/fleet/burn-in/", {"product": "NVIDIA-H200", "busbw_gbps": "540"})
    node = _free_node(sim)
    pam.post(f"/fleet/nodes/{node}/burn-in/")
    with Kube() as kube:
        for _ in range(12):
            sim.tick()
            burnin.run_all(kube)
            if _state(node) != State.BURN_IN:
                break
    assert _state(node) == State.FAILED
    run = BurnInRun.objects.get(node_name=node)
    assert (run.expected_gbps, run.busbw_gbps) == (540.0, 480.0)
