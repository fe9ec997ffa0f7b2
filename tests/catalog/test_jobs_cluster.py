"""Batch jobs against the simulator: the tenant's RBAC, quota, queues and policies applied by its
Flux from the test's repository, the job submitted as the member, queued and run by its Kueue,
read back, logged and cancelled; and the refusals, each leaving nothing behind."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from catalog import jobs
from catalog.models import BatchJob
from fleet import services as fleet
from fleet.kube import Kube
from fleet.schemas import sync_crds
from gitops.fleet import configured_fleet
from gitops.render import portal, rbac
from gitops.specs import GpuShare
from portal.models import AuditEvent
from simulator import Simulator
from simulator.store import JOBS, JOBSETS, PODS, ROLE_BINDINGS, WORKLOADS, resource_of
from tenants.specs import tenant_spec
from tests.support.crds import jobset_crd

REQUEST = {
    "name": "ft-1",
    "image": "ghcr.io/ai-factory/trainer:1.0",
    "command": ["python", "train.py"],
    "share": "train",
    "gpus": 2,
    "priority": "training",
    "cpu": 4,
    "memory_gib": 16,
}


def _alpha_fleet(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Any],
    **config: Any,
) -> Simulator:
    spec = dataclasses.replace(
        tenant_spec(world["alpha"]), shares=(GpuShare("train", "h200", "whole", 4),)
    )
    merged_change(spec)
    simulator: Simulator = start_fleet(**config)
    for _ in range(3):
        simulator.tick()
    assert simulator.store.get(ROLE_BINDINGS, "alpha", "ai-factory:job-runners") is not None
    return simulator


@pytest.fixture
def sim(
    world: dict[str, Any], merged_change: Callable[..., Any], start_fleet: Callable[..., Any]
) -> Simulator:
    """alpha on main with a share of 4 whole H200, applied by the simulator's Flux."""
    return _alpha_fleet(world, merged_change, start_fleet)


def _pods(sim: Simulator, uid: str) -> list[dict[str, Any]]:
    return [
        pod
        for pod in sim.store.list(PODS, "alpha")
        if pod["metadata"].get("labels", {}).get("batch.kubernetes.io/controller-uid") == uid
    ]


def test_a_member_runs_reads_and_cancels_a_job(
    world: dict[str, Any], sim: Simulator, login: Callable[[str], Client]
) -> None:
    job = jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    stored = sim.store.get(JOBS, "alpha", "ft-1")
    assert stored is not None
    assert stored["metadata"]["uid"] == job.uid
    assert (job.kind, job.namespace, job.submitted_by) == ("Job", "alpha", world["bob"])
    event = AuditEvent.objects.get(action="job.submit")
    assert (event.actor, event.tenant_slug) == (world["bob"], "alpha")
    # Kueue queued it (a Workload owned by the Job), admitted it, and its pod runs.
    for _ in range(3):
        sim.tick()
    (workload,) = [
        w
        for w in sim.store.list(WORKLOADS, "alpha")
        if any(r["uid"] == job.uid for r in w["metadata"].get("ownerReferences", []))
    ]
    assert workload["spec"]["queueName"] == "gpu"
    (pod,) = _pods(sim, job.uid)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    fleet.sync_all()
    page = login("bob").get("/t/alpha/jobs/ft-1/")
    assert page.status_code == 200
    assert page.context["state"].state in ("admitted", "running"), page.context["state"]
    # A viewer reads the logs (as a reader of the tenant), an outsider gets nothing.
    logs = jobs.job_logs(job, acting_user=world["vic"])
    assert [log.pod for log in logs] == [pod["metadata"]["name"]]
    assert not logs[0].error
    shown = login("vic").get("/t/alpha/jobs/ft-1/logs/").content.decode()
    assert pod["metadata"]["name"] in shown
    assert logs[0].text and logs[0].text.splitlines()[-1] in shown
    assert login("charlie").get("/t/alpha/jobs/ft-1/logs/").status_code == 404
    # A viewer may not cancel; bob, who submitted it, may.
    with pytest.raises(PermissionDenied):
        jobs.do_cancel_job(job, acting_user=world["vic"])
    # Cancelling loses the work: a confirm step that wants the name typed, 404 for outsiders.
    assert login("charlie").get("/t/alpha/jobs/ft-1/cancel/").status_code == 404
    assert "/t/alpha/jobs/ft-1/cancel/" in page.content.decode()
    confirm = login("bob").get("/t/alpha/jobs/ft-1/cancel/")
    assert "Type the name, <code>ft-1</code>, to confirm" in confirm.content.decode()
    for typed in ({}, {"confirm": "ft-2"}):
        response = login("bob").post("/t/alpha/jobs/ft-1/cancel/", typed)
        assert response.status_code == 422
        assert "nothing was cancelled" in response.content.decode()
        assert sim.store.get(JOBS, "alpha", "ft-1") is not None
    response = login("bob").post("/t/alpha/jobs/ft-1/cancel/", {"confirm": "ft-1"})
    assert response.status_code == 302
    assert sim.store.get(JOBS, "alpha", "ft-1") is None
    sim.tick()
    assert _pods(sim, job.uid) == []
    job.refresh_from_db()
    assert job.cancelled_by == world["bob"]
    assert AuditEvent.objects.filter(action="job.cancel", actor=world["bob"]).exists()


def test_a_jobset_without_its_schema_is_refused(world: dict[str, Any], sim: Simulator) -> None:
    # No schema directory and no CRDs read from the cluster: nothing to validate it against.
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(
            world["alpha"], acting_user=world["alice"], data={**REQUEST, "nodes": 2, "gpus": 1}
        )
    assert "no schema for jobset.x-k8s.io/v1alpha2 JobSet" in caught.value.messages[0]
    assert sim.store.list(JOBSETS, "alpha") == []
    assert not BatchJob.objects.exists()


def test_several_nodes_run_as_a_jobset(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Any],
    settings: Any,
    tmp_path: Path,
) -> None:
    """Validated against the CRD the cluster serves, as the fleet sync read it."""
    crd = jobset_crd()
    (tmp_path / crd.name).symlink_to(crd)
    sim = _alpha_fleet(world, merged_change, start_fleet, crd_dir=str(tmp_path))
    with Kube() as kube:
        sync_crds(kube)
    settings.GITOPS_SCHEMA_SOURCE = "cluster"
    job = jobs.do_submit_job(
        world["alpha"], acting_user=world["alice"], data={**REQUEST, "nodes": 2, "gpus": 1}
    )
    assert job.kind == "JobSet"
    stored = sim.store.get(JOBSETS, "alpha", "ft-1")
    assert stored is not None and stored["metadata"]["uid"] == job.uid
    assert jobs.pod_selector(job) == f"jobset.sigs.k8s.io/jobset-uid={job.uid}"


def test_the_api_server_down_leaves_nothing(
    world: dict[str, Any], sim: Simulator, settings: Any
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        settings.FLEET_API_URL = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    assert "could not run Job ft-1" in caught.value.messages[0]
    assert "Nothing was changed" in caught.value.messages[0]
    assert not BatchJob.objects.exists()
    assert not AuditEvent.objects.filter(action="job.submit").exists()


def test_kueue_down_is_said_and_leaves_nothing_until_it_is_back(
    world: dict[str, Any], sim: Simulator
) -> None:
    sim.set_kueue_webhook_reachable(False)
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    message = caught.value.messages[0]
    assert message.startswith(
        """Kueue's admission webhook is not answering: the API server failed calling webhook """
        '"mjob.kb.io": failed to call webhook: Post "https://kueue-webhook-service.'
    ), message
    assert message.endswith(
        "connect: connection refused. Nothing was submitted; try again when Kueue is back."
    ), message
    assert sim.store.get(JOBS, "alpha", "ft-1") is None
    assert not BatchJob.objects.exists()
    assert not AuditEvent.objects.filter(action="job.submit").exists()
    sim.clear_faults()
    job = jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    stored = sim.store.get(JOBS, "alpha", "ft-1")
    assert stored is not None and stored["metadata"]["uid"] == job.uid
    assert AuditEvent.objects.filter(action="job.submit", actor=world["bob"]).count() == 1


def test_rbac_refusals_are_shown_in_their_words(world: dict[str, Any], sim: Simulator) -> None:
    sim.store.delete(ROLE_BINDINGS, "alpha", "ai-factory:job-runners")
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    message = caught.value.messages[0]
    assert message.startswith("The cluster refused to run Job ft-1:"), message
    assert "system:serviceaccount:alpha:ai-factory-job-runner" in message
    assert "forbidden" in message
    assert sim.store.get(JOBS, "alpha", "ft-1") is None
    assert not BatchJob.objects.exists()


def test_a_name_in_use_is_refused_by_the_api_server(world: dict[str, Any], sim: Simulator) -> None:
    jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(world["alpha"], acting_user=world["alice"], data=REQUEST)
    assert "already exists" in caught.value.messages[0]
    assert BatchJob.objects.count() == 1


def test_with_the_portals_own_account_only_its_tenants_job_accounts_are_reachable(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Any],
    settings: Any,
) -> None:
    """The portal's token is its service account's, not an administrator's: the tenant's
    RBAC as Flux applied it (the job accounts, their bindings, the portal's Role) and the
    portal's ClusterRole (its deployment's, applied here by hand) are all it has."""
    fleet_spec = configured_fleet()
    account = (
        f"system:serviceaccount:{fleet_spec.portal_namespace}:{fleet_spec.portal_service_account}"
    )
    sim = _alpha_fleet(world, merged_change, start_fleet, as_account=account)
    for obj in portal.rbac_objects(fleet_spec):
        resource = resource_of(obj["apiVersion"], obj["kind"])
        if resource is not None:
            sim.store.apply(resource, obj, time.time())
    job = jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    assert sim.store.get(JOBS, "alpha", "ft-1") is not None
    for _ in range(3):
        sim.tick()
    # A viewer reads the pods' logs as the reader account; bob cancels as the runner.
    logs = jobs.job_logs(job, acting_user=world["vic"])
    assert [log.pod for log in logs] == [p["metadata"]["name"] for p in _pods(sim, job.uid)]
    assert logs and not any(log.error for log in logs)
    jobs.do_cancel_job(job, acting_user=world["bob"])
    assert sim.store.get(JOBS, "alpha", "ft-1") is None
    # Without the tenant's grant the portal cannot act as its runner, and says why.
    sim.store.delete(ROLE_BINDINGS, "alpha", rbac.PORTAL_IMPERSONATION_ROLE)
    with pytest.raises(ValidationError) as caught:
        jobs.do_submit_job(world["alpha"], acting_user=world["bob"], data=REQUEST)
    assert caught.value.messages[0] == (
        "The cluster refused to run Job ft-1: Kubernetes refused: serviceaccounts "
        f'"ai-factory-job-runner" is forbidden: User "{account}" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "alpha"'
    )
    assert BatchJob.objects.filter(cancelled_at__isnull=True).count() == 0
