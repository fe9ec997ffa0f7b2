"""Membership is the key to a tenant's clusters, end to end, with nothing mocked.

A real identity provider (tests/oidc/server.mjs over HTTPS, with kubectl's public client)
issues a member an ID token the way kubelogin gets one; the simulator runs the tenant's
vCluster from the portal's Git repository, with the API server flags the portal rendered, and
Flux applies the member bindings into it through the exported kubeconfig. The token works
while the person is a member; once they are removed, the access change merges by itself
(it only takes access away), Flux prunes the binding and the same token is refused.
Needs `make node-deps`; skipped without it unless PORTAL_TEST_REQUIRE_SERVICES is set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from django.test import Client

from catalog.models import Kind, Resource
from catalog.specs import to_json
from fleet import services as fleet_services
from fleet.kube import Kube
from gitops.models import ChangeRequest
from gitops.specs import GpuShare, TenantClusterSpec
from portal.models import AuditEvent
from simulator import Simulator
from tenants.models import Membership, Role
from tenants.services import ACCESS_TITLE, do_change_member_role, do_remove_member
from tenants.specs import tenant_spec
from tests import cluster_oidc
from tests.support.oidc import (
    CLUSTER_CLIENT_ID,
    OidcServer,
    ServerCa,
    kubelogin_id_token,
    make_test_ca,
    run_oidc_server,
)

pytestmark = pytest.mark.services

SHARE = GpuShare(name="infer", flavor="h200", kind="whole", count=2)
CLUSTER = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2)
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OidcServer, ServerCa]]:
    workdir = tmp_path_factory.mktemp("idp")
    ca = make_test_ca(workdir)
    with run_oidc_server(
        redirect_uri="https://portal.invalid/accounts/oidc/keycloak/login/callback/",
        workdir=workdir,
        public_client_id=CLUSTER_CLIENT_ID,
        tls=ca,
    ) as server:
        yield server, ca


@pytest.fixture
def cluster_running(
    provider: tuple[OidcServer, ServerCa],
    world: dict[str, Any],
    settings: Any,
    tmp_path: Path,
    start_fleet: Callable[..., Simulator],
    merged_change: Callable[..., ChangeRequest],
) -> Simulator:
    """alpha's cluster ``dev`` running, its members linked to the provider and bound in it."""
    server, ca = provider
    server.set_accounts({f"sub-{name}": {"email": f"{name}@example.com"} for name in world})
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc(server.issuer))
    for name in ("alice", "bob", "vic"):
        cluster_oidc.link(world[name], f"sub-{name}")
    sim = start_fleet(oidc_ca_file=str(ca.ca_file))
    spec = dataclasses.replace(tenant_spec(world["alpha"]), shares=(SHARE,), clusters=(CLUSTER,))
    merged_change(spec)
    for kind, item in ((Kind.GPU_SHARE, SHARE), (Kind.CLUSTER, CLUSTER)):
        Resource.objects.create(
            tenant=world["alpha"],
            kind=kind,
            name=item.name,
            state=Resource.State.ACTIVE,
            spec=to_json(item),
        )
    sim.tick()  # the tenant's namespace, the release, and its control plane
    with Kube() as kube:
        fleet_services.ensure_source_credentials(kube)  # the tenant's source token
    sim.tick()  # the release is ready: kubeconfigs exported, the API answers
    sim.tick()  # the access Kustomization, retried, applies the bindings
    return sim


def api(sim: Simulator, token: str, method: str = "GET", path: str = PODS, **body: Any) -> Any:
    return requests.request(
        method,
        f"{sim.url}/vclusters/alpha/dev{path}",
        headers={"Authorization": f"Bearer {token}"},
        json=body or None,
        timeout=10,
    )


def can_i(sim: Simulator, token: str, verb: str, resource: str, group: str = "apps") -> bool:
    review = api(
        sim,
        token,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        spec={
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "namespace": "x",
            }
        },
    )
    assert review.status_code == 201, review.text
    return bool(review.json()["status"]["allowed"])


@pytest.mark.django_db(transaction=True)
def test_a_member_s_token_works_until_they_are_removed(
    provider: tuple[OidcServer, ServerCa],
    cluster_running: Simulator,
    world: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
    login: Callable[[str], Client],
) -> None:
    server, ca = provider
    sim = cluster_running
    access = sim.get_object("kustomizations", "alpha", "dev-access")
    ready = next(c for c in access["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready

    # The kubeconfig the portal gives bob names this cluster and signs him in with kubelogin.
    download = login("bob").get(
        f"/t/alpha/resources/{Resource.objects.get(kind='cluster').pk}/kubeconfig/"
    )
    assert download.status_code == 200, download.content
    user = yaml.safe_load(download.content)["users"][0]["user"]
    assert f"--oidc-issuer-url={server.issuer}" in user["exec"]["args"]

    bob = kubelogin_id_token(server, "sub-bob", ca_file=ca.ca_file)
    whoami = api(sim, bob, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews")
    assert whoami.json()["status"]["userInfo"]["username"] == "oidc:sub-bob"
    assert api(sim, bob).status_code == 200
    assert can_i(sim, bob, "create", "deployments")  # member: edit
    vic = kubelogin_id_token(server, "sub-vic", ca_file=ca.ca_file)
    assert api(sim, vic).status_code == 200
    assert not can_i(sim, vic, "create", "deployments")  # viewer: view
    # Someone the provider knows but the tenant does not: authenticated, and refused.
    nora = kubelogin_id_token(server, "sub-nora", ca_file=ca.ca_file)
    refused = api(sim, nora)
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'pods is forbidden: User "oidc:sub-nora" cannot list resource "pods" in API group "" '
        'in the namespace "default"'
    )
    # A token the provider did not sign for this cluster's client is no token at all.
    assert api(sim, bob[:-4] + "AAAA").status_code == 401

    # Removing bob: the access change opens, passes its checks and merges without a review.
    membership = Membership.objects.get(user=world["bob"], tenant=world["alpha"])
    with django_capture_on_commit_callbacks(execute=True):
        do_remove_member(membership, acting_user=world["alice"])
    change = ChangeRequest.objects.get(title=ACCESS_TITLE.format(slug="alpha"))
    assert change.status == ChangeRequest.Status.MERGED, change.checks.all()
    assert change.merged_by is None
    assert AuditEvent.objects.filter(
        action="change.merge", target_id=str(change.pk), diff__without_review__isnull=False
    ).exists()

    sim.tick()  # Flux reads the tenant's source again and prunes bob's binding
    assert api(sim, bob).status_code == 403  # the same token, refused
    assert api(sim, vic).status_code == 200  # others keep theirs
    with Kube() as kube:
        fleet_services.sync_all(kube)
    change.refresh_from_db()
    assert change.apply_state == ChangeRequest.Apply.APPLIED, change.apply_message


@pytest.mark.django_db(transaction=True)
def test_a_narrower_role_merges_by_itself_and_a_wider_one_waits_for_review(
    provider: tuple[OidcServer, ServerCa],
    cluster_running: Simulator,
    world: dict[str, Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    server, ca = provider
    sim = cluster_running
    bob = kubelogin_id_token(server, "sub-bob", ca_file=ca.ca_file)
    membership = Membership.objects.get(user=world["bob"], tenant=world["alpha"])

    with django_capture_on_commit_callbacks(execute=True):
        do_change_member_role(membership, acting_user=world["alice"], role=Role.VIEWER)
    narrowed = ChangeRequest.objects.get(title=ACCESS_TITLE.format(slug="alpha"))
    assert narrowed.status == ChangeRequest.Status.MERGED
    sim.tick()
    assert api(sim, bob).status_code == 200
    assert not can_i(sim, bob, "create", "deployments")

    with django_capture_on_commit_callbacks(execute=True):
        do_change_member_role(membership, acting_user=world["alice"], role=Role.ADMIN)
    widened = ChangeRequest.objects.exclude(pk=narrowed.pk).get(
        title=ACCESS_TITLE.format(slug="alpha")
    )
    assert widened.checks_state == ChangeRequest.Checks.PASSED
    assert widened.status == ChangeRequest.Status.OPEN  # a grant: a platform admin decides
    sim.tick()
    assert not can_i(sim, bob, "create", "deployments")
