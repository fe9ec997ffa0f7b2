"""Burn-in across an NVLink domain, against the simulator over HTTP: a node joining a domain
of ready nodes is tested with an idle ready peer; a rack's new nodes are tested together, and
a slow member fails them all (cordoned); a node with no peer passes on its own tests; the
Job and Service are valid against the upstream schemas; the node page and the admins'
expected bandwidth per scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from fleet import burnin, lifecycle, services
from fleet.kube import Kube
from fleet.models import BurnInDomainRun, BurnInExpectation, BurnInRun, Node, NodeLifecycle
from gitops.checks.schema import SchemaRegistry
from simulator import Simulator
from simulator.store import JOBS, PODS, SERVICES

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]
State = NodeLifecycle.State
NAMESPACE = "gpu-burn-in"
STEPS = 16
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator], settings: Any) -> Simulator:
    settings.FLEET_BURN_IN_NAMESPACE = NAMESPACE
    simulator = start_fleet(job_seconds=0)
    simulator.cluster.ensure_namespace(NAMESPACE, 0)
    return simulator


def _idle_domain(sim: Simulator) -> list[str]:
    """The idle whole-GPU nodes of the NVLink domain that has the most of them."""
    by_clique: dict[str, list[str]] = {}
    for node in sim.cluster.nodes.values():
        if node.group.mode == "whole" and node.clique and node.busy_gpus() == 0:
            by_clique.setdefault(node.clique, []).append(node.name)
    return sorted(max(by_clique.values(), key=len))


def _join(*names: str) -> None:
    """The fleet adopted, then ``names`` join as new nodes: cordoned and in burn-in."""
    services.sync_all()
    NodeLifecycle.objects.filter(node_name__in=names).delete()
    services.sync_all()
    assert {lifecycle.get(n).state for n in names} == {State.BURN_IN}  # type: ignore[union-attr]


def _step(sim: Simulator, until: Callable[[], bool], seen: dict[str, str] | None = None) -> None:
    """Tick the simulator and the engine until ``until()``; ``seen`` collects the domain
    Job's pods' nodes by completion index while they exist."""
    with Kube() as kube:
        for _ in range(STEPS):
            sim.tick()
            if seen is not None:
                for pod in sim.store.list(PODS, NAMESPACE):
                    labels = pod["metadata"]["labels"]
                    if INDEX in labels and pod["spec"].get("nodeName"):
                        seen[labels[INDEX]] = pod["spec"]["nodeName"]
            burnin.run_all(kube)
            if until():
                return
    raise AssertionError(f"not reached in {STEPS} steps")


def _state(name: str) -> str:
    row = lifecycle.get(name)
    assert row is not None
    return row.state


def _unschedulable(sim: Simulator, node: str) -> bool:
    return sim.get_object("nodes", "", node)["spec"].get("unschedulable") is True


def test_the_domain_objects_are_valid_and_put_one_pod_on_each_member() -> None:
    domain_run = BurnInDomainRun(pk=3, clique="c.1", gpus=8, nodes=["a", "b", "c"])
    service, job = burnin.domain_objects(domain_run, ["a", "b", "c"])
    registry = SchemaRegistry()
    assert registry.validate(service) == [] and registry.validate(job) == []
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": "burn-in-domain-3"}
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "burn-in-domain-3"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a", "b", "c"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "BURN_IN_HOSTS": ",".join(f"burn-in-domain-3-{i}.burn-in-domain-3:8" for i in range(3)),
        "BURN_IN_RANKS": "24",
        "OMPI_MCA_plm_rsh_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    }
    # Nothing in the script comes from a node or a person: the hosts arrive by env.
    assert container["command"] == ["/bin/sh", "-c", burnin.DOMAIN_SCRIPT]


def test_a_node_joining_a_ready_domain_is_tested_with_an_idle_peer(
    sim: Simulator, login: Callable[[str], Client], world: dict[str, Any]
) -> None:
    node, *others = _idle_domain(sim)
    _join(node)
    seen: dict[str, str] = {}
    _step(sim, lambda: _state(node) != State.BURN_IN, seen)
    assert _state(node) == State.READY and not _unschedulable(sim, node)
    run = BurnInRun.objects.get(node_name=node)
    domain_run = run.domain_run
    assert domain_run is not None and domain_run.outcome == BurnInDomainRun.Outcome.PASSED
    assert domain_run.nodes == [node, others[0]] and domain_run.peers == [others[0]]
    assert domain_run.clique == Node.objects.get(name=node).clique
    assert (domain_run.busbw_gbps, domain_run.expected_gbps) == (370.0, 350.0)
    assert seen == {"0": node, "1": others[0]}  # a pod on each member, pinned
    assert _state(others[0]) == State.READY
    # The Job and its Service are gone once judged.
    assert sim.store.get(JOBS, NAMESPACE, domain_run.job) is None
    assert sim.store.get(SERVICES, NAMESPACE, domain_run.job) is None
    page = login("pam").get(f"/fleet/nodes/{node}/").content.decode()
    assert "370.00 GB/s of 350.00 GB/s expected" in page and f"ready peer {others[0]}" in page
    peer_page = login("pam").get(f"/fleet/nodes/{others[0]}/").content.decode()
    assert "As a ready peer" in peer_page and "370.00 GB/s" in peer_page


def test_a_racks_new_nodes_are_tested_together_and_a_slow_one_fails_them_all(
    sim: Simulator,
) -> None:
    first, second = _idle_domain(sim)[:2]
    _join(first, second)
    waiting = BurnInRun.objects.filter(step=BurnInRun.Step.DOMAIN)
    # A link that is slow only across nodes: the single-node tests pass first.
    _step(sim, lambda: waiting.count() == 2 or BurnInDomainRun.objects.exists())
    assert sorted(waiting.values_list("node_name", flat=True)) == [first, second]
    sim.slow_nccl(second, 0.5)
    _step(sim, lambda: _state(first) != State.BURN_IN)
    (domain_run,) = BurnInDomainRun.objects.all()
    assert domain_run.nodes == [first, second] and domain_run.peers == []
    assert domain_run.outcome == BurnInDomainRun.Outcome.FAILED
    assert domain_run.busbw_gbps == 185.0
    for name in (first, second):
        row = lifecycle.get(name)
        assert row is not None and row.state == State.FAILED
        assert "across NVLink domain" in row.reason and "185.00 GB/s" in row.reason
        assert "expected at least 315.00 GB/s" in row.reason
        assert _unschedulable(sim, name)


def test_a_node_without_a_peer_passes_on_its_own_tests(sim: Simulator) -> None:
    node = _idle_domain(sim)[0]
    services.sync_all()
    clique = Node.objects.filter(clique=Node.objects.get(name=node).clique).exclude(name=node)
    NodeLifecycle.objects.filter(node_name__in=clique.values_list("name", flat=True)).update(
        state=State.FAILED
    )
    NodeLifecycle.objects.filter(node_name=node).delete()
    services.sync_all()
    _step(sim, lambda: _state(node) != State.BURN_IN)
    assert _state(node) == State.READY
    assert not BurnInDomainRun.objects.exists()
    assert BurnInRun.objects.get(node_name=node).outcome == BurnInRun.Outcome.PASSED


def test_no_domain_test_when_it_is_switched_off(sim: Simulator, settings: Any) -> None:
    settings.FLEET_BURN_IN_DOMAIN = False
    node = _idle_domain(sim)[0]
    _join(node)
    _step(sim, lambda: _state(node) != State.BURN_IN)
    assert _state(node) == State.READY and not BurnInDomainRun.objects.exists()


def test_an_admin_sets_the_domain_expectation_and_a_bad_scope_changes_nothing(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    admin = login("pam")
    response = admin.post(
        "/fleet/burn-in/", {"product": "NVIDIA-H200", "scope": "domain", "busbw_gbps": "360"}
    )
    assert response.status_code in (200, 302)
    assert burnin.expected_busbw("NVIDIA-H200", "domain") == 360.0
    assert burnin.expected_busbw("NVIDIA-H200") == 450.0  # the single-node value stays
    page = admin.get("/fleet/burn-in/").content.decode()
    assert "Across an NVLink domain" in page and "360.00 GB/s" in page and "324.00 GB/s" in page
    bad = admin.post(
        "/fleet/burn-in/", {"product": "NVIDIA-H200", "scope": "rack", "busbw_gbps": "1"}
    )
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()
    with pytest.raises(ValidationError):
        burnin.do_set_expectation("NVIDIA-H200", 1, acting_user=world["pam"], scope="rack")
    assert list(BurnInExpectation.objects.values_list("product", "scope", "busbw_gbps")) == [
        ("NVIDIA-H200", "domain", 360.0)
    ]
    for person in ("alice", "fiona"):
        assert login(person).get("/fleet/burn-in/").status_code == 404


def test_a_domain_job_that_never_ran_fails_its_nodes_and_says_why(sim: Simulator) -> None:
    node = _idle_domain(sim)[0]
    _join(node)
    _step(sim, BurnInDomainRun.objects.exists)
    domain_run = BurnInDomainRun.objects.get()
    assert domain_run.job and sim.store.get(SERVICES, NAMESPACE, domain_run.job) is not None

    def expire(job: dict[str, Any]) -> None:  # as if the peer's GPUs stayed busy all along
        job["spec"]["activeDeadlineSeconds"] = 0

    sim.store.mutate(JOBS, NAMESPACE, domain_run.job, expire)
    _step(sim, lambda: _state(node) != State.BURN_IN)
    domain_run.refresh_from_db()
    assert domain_run.outcome == BurnInDomainRun.Outcome.FAILED
    assert "pod 0 printed nothing" in domain_run.error
    row = lifecycle.get(node)
    assert row is not None and row.state == State.FAILED and "pod 0 printed nothing" in row.reason
    assert _state(domain_run.peers[0]) == State.READY  # the peer is not failed


def test_the_burn_in_part_reads_runs_and_domain_runs_in_a_fixed_number_of_queries(
    world: dict[str, Any], login: Callable[[str], Client], django_assert_max_num_queries: Any
) -> None:
    pam = login("pam")
    Node.objects.create(name="gb-01", product="NVIDIA-GB200", gpu_count=4, clique="u.1")
    for i in range(12):
        domain_run = BurnInDomainRun.objects.create(
            clique="u.1", gpus=4, nodes=["gb-01", f"gb-{i + 2:02}"], busbw_gbps=700.0
        )
        BurnInRun.objects.create(node_name="gb-01", gpus=4, domain_run=domain_run)
        BurnInDomainRun.objects.create(clique="u.1", gpus=4, nodes=["x", "gb-01"], peers=["gb-01"])
    # The node page's live region: session, user, role, node, sync and watch states, the
    # version's reads (fleet.views.node_version), then runs with their domain runs (joined),
    # lifecycle, workloads, reservation, incidents, NetBox, the runs it joined as a peer: none
    # per run.
    with django_assert_max_num_queries(19):
        page = pam.get("/fleet/nodes/gb-01/", HTTP_HX_REQUEST="true").content.decode()
    assert page.count("700.00 GB/s") == 12 and "As a ready peer" in page
