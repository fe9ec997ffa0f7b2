"""The portal's client for run-once work (``fleet.kube``: ``impersonating``, ``create``, ``get``,
``list``, ``delete``, ``pod_log``) against the running simulator, which authorises the
impersonated member by RBAC and collects a deleted Job's pods."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import pytest
from kubernetes import client

from fleet.kube import Kube, KubeError
from simulator import Simulator
from simulator.config import SimConfig
from simulator.store import JOBS, PODS, ROLE_BINDINGS, ROLES, JsonObject, timestamp

TOKEN = "portal-token"
NOW = 1_760_000_000.0
MEMBER = "ann@example.com"
MEMBERS = "tenant:alpha:members"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(config, token=TOKEN, clock=lambda: NOW)
    simulator.cluster.ensure_namespace("alpha", NOW)
    simulator.store.apply(
        ROLES,
        {
            "metadata": {"name": "submit", "namespace": "alpha"},
            "rules": [
                {
                    "apiGroups": ["batch"],
                    "resources": ["jobs"],
                    "verbs": ["create", "get", "list", "delete"],
                },
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ],
        },
        NOW,
    )
    simulator.store.apply(
        ROLE_BINDINGS,
        {
            "metadata": {"name": "members", "namespace": "alpha"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "submit"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": MEMBERS}
            ],
        },
        NOW,
    )
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


def portal(url: str, timeout: float = 5) -> Kube:
    """The portal's client as ``fleet.kube.api_client`` configures it for a token."""
    configuration = client.Configuration()
    configuration.host = url
    configuration.api_key = {"authorization": TOKEN}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return Kube(client.ApiClient(configuration), timeout=timeout)


@pytest.fixture
def kube(sim: Simulator) -> Iterator[Kube]:
    with portal(sim.url) as api:
        yield api


def job(name: str = "train", **labels: str) -> JsonObject:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "ghcr.io/acme/train:1"}],
                }
            }
        },
    }


def test_a_member_submits_reads_lists_and_cancels_a_job(sim: Simulator, kube: Kube) -> None:
    # The group that the binding names is the second one sent: every group header counts.
    with kube.impersonating(MEMBER, ["tenant:beta:members", MEMBERS]) as member:
        created = member.create("batch/v1", "Job", "alpha", job(run="r1"))
        assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
        assert member.get("batch/v1", "Job", "alpha", "train") == created
        member.create("batch/v1", "Job", "alpha", job("other", run="r2"))
        listed = member.list("batch/v1", "Job", "alpha", label_selector="run=r1")
        assert [j["metadata"]["name"] for j in listed] == ["train"]

        sim.cluster.create_pod(
            {
                "metadata": {
                    "namespace": "alpha",
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": "train",
                            "uid": created["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "trainer", "image": "x"}]},
            },
            "train",
            NOW,
            admission=False,
        )
        pod = sim.store.list(PODS, "alpha")[0]
        sim.store.mutate(
            PODS,
            "alpha",
            pod["metadata"]["name"],
            lambda p: p["status"]["containerStatuses"][0]["state"].update(
                running={"startedAt": timestamp(NOW - 25)}
            ),
        )
        log = member.pod_log("alpha", pod["metadata"]["name"], tail_lines=1)
        assert log == "[trainer] running: 20 s elapsed\n"

        member.delete("batch/v1", "Job", "alpha", "train")
        with pytest.raises(KubeError) as gone:
            member.get("batch/v1", "Job", "alpha", "train")
        assert gone.value.status == 404
        assert str(gone.value) == 'Could not read Job alpha/train: jobs.batch "train" not found.'
    sim.tick()
    # Job "other" runs on (Kueue admits it and its controller makes its pod): only train's go.
    owners = [
        ref["uid"]
        for pod in sim.store.list(PODS, "alpha")
        for ref in pod["metadata"].get("ownerReferences", [])
    ]
    assert created["metadata"]["uid"] not in owners


def test_refusals_say_what_kubernetes_said(sim: Simulator, kube: Kube) -> None:
    stranger = kube.impersonating(MEMBER, ["tenant:beta:members"])
    with stranger, pytest.raises(KubeError) as refused:
        stranger.create("batch/v1", "Job", "alpha", job())
    assert refused.value.status == 403
    assert str(refused.value) == (
        'Kubernetes refused: jobs.batch is forbidden: User "ann@example.com" cannot create '
        'resource "jobs" in API group "batch" in the namespace "alpha"'
    )
    assert sim.store.list(JOBS) == []

    with kube.impersonating(MEMBER, [MEMBERS]) as member:
        assert member.create("batch/v1", "Job", "alpha", job(), dry_run=True)["metadata"]["uid"]
        assert sim.store.list(JOBS) == []
        member.create("batch/v1", "Job", "alpha", job())
        with pytest.raises(KubeError) as twice:
            member.create("batch/v1", "Job", "alpha", job())
        assert twice.value.status == 409
        assert str(twice.value) == (
            'Kubernetes refused: jobs.batch "train" already exists; choose another name or '
            "delete the old one."
        )
        broken = job("broken")
        broken["spec"]["template"]["spec"]["restartPolicy"] = "Always"
        with pytest.raises(KubeError) as invalid:
            member.create("batch/v1", "Job", "alpha", broken)
        assert invalid.value.status == 422
        assert str(invalid.value) == (
            "Could not create Job in alpha: Kubernetes found it invalid: "
            'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: '
            '"OnFailure", "Never".'
        )
        with pytest.raises(KubeError, match="serves no Widget in batch/v1"):
            member.get("batch/v1", "Widget", "alpha", "w")
        with pytest.raises(ValueError, match="propagation"):
            member.delete("batch/v1", "Job", "alpha", "train", propagation="Later")


def test_an_absent_or_silent_api_server_is_a_sentence() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with portal(f"http://127.0.0.1:{port}") as kube:
        with pytest.raises(KubeError, match="did not answer") as unreachable:
            kube.get("batch/v1", "Job", "alpha", "train")
        assert unreachable.value.status is None
    with socket.socket() as silent:
        # Accepts connections (the kernel's backlog) and never answers.
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with portal(url, timeout=0.5) as kube, pytest.raises(KubeError) as slow:
            kube.list("batch/v1", "Job", "alpha")
    assert "did not answer within 0.5 s" in str(slow.value)


def test_impersonating_needs_a_user(kube: Kube) -> None:
    with pytest.raises(ValueError, match="user"):
        kube.impersonating("", [MEMBERS])
