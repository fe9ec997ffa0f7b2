"""The portal's narrowed impersonation against the simulator, with the token of the portal's
own service account (not the administrator's) and the RBAC the renderers write: it acts as a
tenant's job accounts, naming the member in a user extra, and as nobody else."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes import client

from fleet.kube import Kube, KubeError, extra_header, header_value
from gitops.fleet import demo_fleet
from gitops.render import portal, rbac
from gitops.specs import TenantSpec
from simulator import Simulator
from simulator.config import SimConfig
from simulator.store import JOBS, resource_of

FLEET = demo_fleet()
PORTAL_TOKEN = "portal-account-token"
PORTAL_USER = f"system:serviceaccount:{FLEET.portal_namespace}:{FLEET.portal_service_account}"
NOW = 1_760_000_000.0
RUNNER = "system:serviceaccount:alpha:ai-factory-job-runner"
READER = "system:serviceaccount:alpha:ai-factory-job-reader"
MEMBER = {rbac.MEMBER_EXTRA: ["bob"]}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(
        config,
        token="admin-token",
        service_account_tokens={PORTAL_TOKEN: PORTAL_USER},
        clock=lambda: NOW,
    )
    rendered = [
        *portal.rbac_objects(FLEET),
        *rbac.job_roles(),
        *[o for slug in ("alpha", "bravo") for o in rbac.tenant_objects(TenantSpec(slug), FLEET)],
    ]
    for slug in ("alpha", "bravo"):
        simulator.cluster.ensure_namespace(slug, NOW)
    for obj in rendered:
        resource = resource_of(obj["apiVersion"], obj["kind"])
        if resource is not None:  # the simulator keeps no ServiceAccounts or admission policies
            simulator.store.apply(resource, obj, NOW)
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture
def kube(sim: Simulator) -> Iterator[Kube]:
    configuration = client.Configuration()
    configuration.host = sim.url
    configuration.api_key = {"authorization": PORTAL_TOKEN}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    with Kube(client.ApiClient(configuration), timeout=5) as api:
        yield api


def job(name: str = "train") -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "ghcr.io/acme/train:1"}],
                }
            }
        },
    }


def test_the_portal_acts_as_the_job_accounts_with_the_member_named(
    sim: Simulator, kube: Kube
) -> None:
    with kube.impersonating(RUNNER, extra=MEMBER) as runner:
        created = runner.create("batch/v1", "Job", "alpha", job())
        assert created["metadata"]["name"] == "train"
        # The runner's rights are its tenant's: not another namespace's.
        with pytest.raises(KubeError) as elsewhere:
            runner.create("batch/v1", "Job", "bravo", job())
        assert elsewhere.value.status == 403
        assert f'User "{RUNNER}" cannot create resource "jobs"' in str(elsewhere.value)
    with kube.impersonating(READER, extra=MEMBER) as reader:
        assert [j["metadata"]["name"] for j in reader.list("batch/v1", "Job", "alpha")] == ["train"]
        with pytest.raises(KubeError) as refused:
            reader.delete("batch/v1", "Job", "alpha", "train")
        assert refused.value.status == 403
        assert f'User "{READER}" cannot delete resource "jobs"' in str(refused.value)
    assert [j["metadata"]["name"] for j in sim.store.list(JOBS, "alpha")] == ["train"]


@pytest.mark.parametrize(
    ("user", "groups", "extra", "message"),
    [
        # The tenant's Flux account: a service account of the namespace, but not listed.
        (
            "system:serviceaccount:alpha:alpha",
            [],
            {},
            'serviceaccounts "alpha" is forbidden: User "{portal}" cannot impersonate resource '
            '"serviceaccounts" in API group "" in the namespace "alpha"',
        ),
        # A person, as the portal used to impersonate them.
        (
            "ai-factory:member:bob",
            [],
            {},
            'users "ai-factory:member:bob" is forbidden: User "{portal}" cannot impersonate '
            'resource "users" in API group "" at the cluster scope',
        ),
        # A listed account, but with a group: system:masters is out of reach.
        (
            RUNNER,
            ["system:masters"],
            {},
            'groups "system:masters" is forbidden: User "{portal}" cannot impersonate resource '
            '"groups" in API group "" at the cluster scope',
        ),
        # A listed account with an extra the portal was not granted.
        (
            RUNNER,
            [],
            {"scopes": ["admin"]},
            'userextras.authentication.k8s.io "admin" is forbidden: User "{portal}" cannot '
            'impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at '
            "the cluster scope",
        ),
    ],
)
def test_anyone_else_is_refused_in_the_api_servers_words(
    sim: Simulator,
    kube: Kube,
    user: str,
    groups: list[str],
    extra: dict[str, list[str]],
    message: str,
) -> None:
    with (
        kube.impersonating(user, groups, extra=extra) as acting,
        pytest.raises(KubeError) as refused,
    ):
        acting.create("batch/v1", "Job", "alpha", job())
    assert refused.value.status == 403
    assert str(refused.value) == "Kubernetes refused: " + message.format(portal=PORTAL_USER)
    assert sim.store.list(JOBS) == []


def test_the_portal_account_reads_only_what_its_cluster_role_grants(kube: Kube) -> None:
    # Without impersonation its own rights apply: it reads Jobs nowhere.
    with pytest.raises(KubeError) as refused:
        kube.list("batch/v1", "Job", "alpha")
    assert refused.value.status == 403


def test_extra_headers_are_escaped_as_client_go_does() -> None:
    assert extra_header("ai-factory.io/member") == "Impersonate-Extra-ai-factory.io%2Fmember"
    assert extra_header("100%") == "Impersonate-Extra-100%25"
    assert header_value("bob@example.com") == "bob@example.com"
    assert header_value("zoë") == "zo%C3%AB"
