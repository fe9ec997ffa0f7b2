"""Burn-in end to end against the simulator over HTTP: a node the lifecycle never saw is
discovered, cordoned and burnt in (the DCGM diagnostic, then NCCL) and becomes ready, or fails
and stays cordoned; the first sync adopts the fleet; remediation's cordon is not lifted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleet import burnin, lifecycle, services
from fleet.kube import Kube, KubeError
from fleet.models import BurnInRun, Node, NodeLifecycle
from gitops.fleet import configured_fleet
from gitops.render import portal
from portal.management.commands.seed_demo import Command as SeedDemo
from portal.management.demo_jobs import DEMO_BURN_IN_NODE, finish_burn_in_jobs
from portal.models import AuditEvent
from simulator import Simulator
from simulator.store import JOBS, PODS, resource_of

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]
State = NodeLifecycle.State
NAMESPACE = "gpu-burn-in"
STEPS = 12  # each step: the simulator ticks, the engine advances; a run needs about six


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator], settings: Any) -> Simulator:
    settings.FLEET_BURN_IN_NAMESPACE = NAMESPACE
    simulator = start_fleet(job_seconds=0)
    simulator.cluster.ensure_namespace(NAMESPACE, 0)
    return simulator


def _free_node(sim: Simulator) -> str:
    """A whole-GPU node no seeded workload uses, so the burn-in gets all its GPUs."""
    return next(
        n.name for n in sim.cluster.nodes.values() if n.group.mode == "whole" and n.busy_gpus() == 0
    )


def _fleet_known_but(node: str) -> None:
    """Every node has its lifecycle row but ``node``: as if it joined after the others."""
    services.sync_all()  # the first sync adopts them all
    assert NodeLifecycle.objects.filter(state=State.READY).count() == Node.objects.count()
    NodeLifecycle.objects.filter(node_name=node).delete()


def _burn_in(sim: Simulator, node: str) -> NodeLifecycle:
    """Step the simulator and the engine until the node leaves burn-in."""
    with Kube() as kube:
        for _ in range(STEPS):
            sim.tick()
            burnin.run_all(kube)
            row = lifecycle.get(node)
            assert row is not None
            if row.state != State.BURN_IN:
                return row
    raise AssertionError(f"{node} is still in burn-in after {STEPS} steps")


def _unschedulable(sim: Simulator, node: str) -> bool:
    return sim.get_object("nodes", "", node)["spec"].get("unschedulable") is True


def test_first_sync_adopts_the_fleet_as_ready_and_cordons_nothing(sim: Simulator) -> None:
    services.sync_all()
    assert set(NodeLifecycle.objects.values_list("state", flat=True)) == {State.READY}
    assert NodeLifecycle.objects.count() == Node.objects.count() == len(sim.cluster.nodes)
    assert not any(_unschedulable(sim, name) for name in sim.cluster.nodes)
    assert not BurnInRun.objects.exists()


def test_a_new_node_is_cordoned_burnt_in_and_becomes_ready(sim: Simulator) -> None:
    node = _free_node(sim)
    _fleet_known_but(node)
    services.sync_all()
    row = lifecycle.get(node)
    assert row is not None and row.state == State.BURN_IN and row.lifecycle_cordoned
    assert _unschedulable(sim, node)
    states = [
        e.diff["state"]
        for e in AuditEvent.objects.filter(action="node.lifecycle").order_by("pk")
        if e.diff["state"][1] != State.READY
    ]
    assert states == [[None, "discovered"], ["discovered", "burn-in"]]

    row = _burn_in(sim, node)
    assert row.state == State.READY and not row.lifecycle_cordoned
    assert not _unschedulable(sim, node)
    run = BurnInRun.objects.get(node_name=node)
    assert (run.outcome, run.diag_passed, run.nccl_passed) == ("passed", True, True)
    assert run.diag_failures == [] and run.gpus == 8
    assert run.busbw_gbps == pytest.approx(480.0) and run.expected_gbps == 450.0
    # The engine read the logs, then deleted its Jobs (and the collector their pods).
    sim.tick()
    assert sim.store.list(JOBS, NAMESPACE) == []
    assert sim.store.list(PODS, NAMESPACE) == []


def test_a_failing_diagnostic_fails_the_node_and_it_stays_cordoned(sim: Simulator) -> None:
    node = _free_node(sim)
    _fleet_known_but(node)
    sim.fail_diag(node, "memory")
    services.sync_all()
    row = _burn_in(sim, node)
    assert row.state == State.FAILED and "memory: GPU 0" in row.reason
    assert _unschedulable(sim, node)
    run = BurnInRun.objects.get(node_name=node)
    assert run.diag_passed is False and run.nccl_job == ""
    assert run.diag_failures == ["memory: GPU 0: GPU 0 failed the memory test (injected fault)"]


def test_slow_nccl_fails_the_node(sim: Simulator) -> None:
    node = _free_node(sim)
    _fleet_known_but(node)
    sim.slow_nccl(node, 0.5)
    services.sync_all()
    row = _burn_in(sim, node)
    assert row.state == State.FAILED
    assert "240.00 GB/s, expected at least 405.00 GB/s" in row.reason
    run = BurnInRun.objects.get(node_name=node)
    assert (run.diag_passed, run.nccl_passed, run.busbw_gbps) == (True, False, 240.0)
    assert _unschedulable(sim, node)


def test_a_node_remediation_cordoned_is_not_uncordoned_by_the_engine(sim: Simulator) -> None:
    node = _free_node(sim)
    services.sync_all()
    # Remediation's contract: it cordons, asks for a burn-in, waits for passed_since.
    with Kube() as kube:
        kube.set_unschedulable(node, True)
    services.sync_all()
    asked = lifecycle.request_burn_in(node, reason="XID 79").since
    row = _burn_in(sim, node)
    assert row.state == State.READY and lifecycle.passed_since(node, asked)
    assert not row.lifecycle_cordoned
    assert _unschedulable(sim, node)  # remediation lifts its own cordon


def test_no_burn_in_when_it_is_switched_off(sim: Simulator, settings: Any) -> None:
    settings.FLEET_BURN_IN_AUTO = False
    node = _free_node(sim)
    _fleet_known_but(node)
    services.sync_all()
    row = lifecycle.get(node)
    assert row is not None and row.state == State.READY
    assert not _unschedulable(sim, node)


def test_the_rendered_rbac_is_all_the_engine_needs(
    start_fleet: Callable[..., Simulator], settings: Any
) -> None:
    """The portal as its own service account, with only the ClusterRole and the burn-in
    namespace's Role its deployment renders, burns a new node in."""
    fleet = configured_fleet()
    account = f"system:serviceaccount:{fleet.portal_namespace}:{fleet.portal_service_account}"
    simulator = start_fleet(job_seconds=0, as_account=account)
    settings.FLEET_BURN_IN_NAMESPACE = portal.BURN_IN_NAMESPACE
    for obj in [*portal.rbac_objects(fleet), *portal.burn_in_objects(fleet)]:
        resource = resource_of(obj["apiVersion"], obj["kind"])
        if resource is not None and obj["kind"] != "ServiceAccount":
            simulator.store.apply(resource, obj, 0)
    node = _free_node(simulator)
    _fleet_known_but(node)
    services.sync_all()
    assert _unschedulable(simulator, node)
    row = _burn_in(simulator, node)
    assert row.state == State.READY and not _unschedulable(simulator, node)
    # Its test across the NVLink domain ran too (a Service and an indexed Job).
    run = BurnInRun.objects.get(node_name=node)
    assert run.domain_run is not None and run.domain_run.outcome == BurnInRun.Outcome.PASSED
    # Anywhere else the same Job is refused.
    job = burnin.diag_job(run, node)
    with Kube() as kube, pytest.raises(KubeError) as refused:
        kube.create("batch/v1", "Job", "default", job)
    assert refused.value.status == 403


def test_the_demo_node_joins_new_and_becomes_ready(
    start_fleet: Callable[..., Simulator], settings: Any
) -> None:
    """``make demo``: seed_demo leaves h200-08 out of the lifecycle; the first sync burns it
    in, and the demo's driver ends its Jobs' pods as if their time had passed."""
    settings.FLEET_BURN_IN_NAMESPACE = NAMESPACE
    simulator = start_fleet()  # the demo's own run time: the driver has to end the pods
    simulator.cluster.ensure_namespace(NAMESPACE, 0)
    SeedDemo()._seed_lifecycle()
    services.sync_all()
    assert lifecycle.get(DEMO_BURN_IN_NODE).state == State.BURN_IN  # type: ignore[union-attr]
    assert NodeLifecycle.objects.filter(state=State.READY).count() == Node.objects.count() - 1
    with Kube() as kube:
        for _ in range(STEPS):
            simulator.tick()
            burnin.run_all(kube)
            finish_burn_in_jobs(simulator.finish_job, run_seconds=0)
            if lifecycle.get(DEMO_BURN_IN_NODE).state != State.BURN_IN:  # type: ignore[union-attr]
                break
    assert lifecycle.get(DEMO_BURN_IN_NODE).state == State.READY  # type: ignore[union-attr]
    assert not _unschedulable(simulator, DEMO_BURN_IN_NODE)
    domain_run = BurnInRun.objects.get(node_name=DEMO_BURN_IN_NODE).domain_run
    assert domain_run is not None and domain_run.outcome == BurnInRun.Outcome.PASSED
