"""Tenants' Git credentials: the simulator's Flux refuses a source without valid ones, and the
portal writes them into the tenant's namespace through the Kubernetes API (and rotates them).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import CommandError, call_command
from kubernetes import client

from fleet import services
from fleet.kube import Kube, KubeError
from gitops import sources
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, SourceToken
from gitops.render.tree import render_repository
from gitops.repo import GitRepository, Identity
from gitops.specs import EndpointSpec, GpuShare, TenantSpec
from portal.models import AuditEvent
from simulator import Simulator
from simulator.config import SimConfig
from simulator.flux import SOURCE_RETRY_SECONDS
from simulator.store import SECRETS
from tenants.models import PlatformRole

ALICE = Identity("Alice Admin", "alice@example.com")
ALPHA = TenantSpec(
    slug="alpha",
    shares=(GpuShare(name="s", flavor="h200", kind="whole", count=1),),
    endpoints=(
        EndpointSpec(
            name="chat", model_uri="hf://org/model", share="s", gpus_per_replica=1, max_replicas=1
        ),
    ),
)
SOURCE_API = ("source.toolkit.fluxcd.io", "v1", "alpha", "gitrepositories", "alpha")
KSERVE = ("serving.kserve.io", "v1beta1", "alpha", "inferenceservices")


def _sim(settings: Any, **options: Any) -> Simulator:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    return Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main", **options)


def _commit(settings: Any, tenants: list[TenantSpec], parent: str | None = None) -> str:
    repo = GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))
    files: dict[str, bytes | None] = dict(render_repository(demo_fleet(), tenants))
    return repo.commit(files, message="m\n", author=ALICE, branch="main", expected_parent=parent)


def _secret(sim: Simulator, username: str = "flux", password: str = "t") -> None:
    data = {"username": username, "password": password}
    sim.put_object(
        "secrets",
        {
            "metadata": {"namespace": "alpha", "name": "flux-git-auth"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_a_source_whose_secret_is_missing_is_not_synced(settings: Any) -> None:
    sim = _sim(settings)
    sha = _commit(settings, [ALPHA])
    sim.tick()
    source = _conditions(sim.get_object("gitrepositories", "alpha", "alpha"))
    assert (source["Ready"]["status"], source["Ready"]["reason"]) == (
        "False",
        "AuthenticationFailed",
    )
    assert source["Ready"]["message"] == (
        "failed to get secret 'alpha/flux-git-auth': secrets \"flux-git-auth\" not found"
    )
    assert source["FetchFailed"]["status"] == "True"
    workloads = sim.get_object("kustomizations", "alpha", "alpha-workloads")
    ready = _conditions(workloads)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ArtifactFailed")
    assert "lastAppliedRevision" not in workloads["status"]
    with pytest.raises(LookupError):
        sim.get_object("inferenceservices", "alpha", "chat")
    # The platform's own Kustomizations, read with the flux-system Secret, applied it.
    tenants = sim.get_object("kustomizations", "flux-system", "tenants")
    assert tenants["status"]["lastAppliedRevision"] == f"main@sha1:{sha}"

    # The portal writes the Secret: the next tick fetches the source and applies the tenant.
    _secret(sim)
    sim.tick()
    workloads = sim.get_object("kustomizations", "alpha", "alpha-workloads")
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{sha}"
    assert sim.get_object("inferenceservices", "alpha", "chat")


def test_refused_credentials_keep_the_tenant_on_its_last_artifact(settings: Any) -> None:
    accepted = {"good"}
    sim = _sim(
        settings, verify_git=lambda url, user, password: password in accepted | {"flux-bootstrap"}
    )
    _secret(sim, password="good")
    first = _commit(settings, [ALPHA])
    sim.tick()
    assert (
        sim.get_object("kustomizations", "alpha", "alpha-workloads")["status"][
            "lastAppliedRevision"
        ]
        == f"main@sha1:{first}"
    )

    accepted.clear()  # the token was revoked
    second = _commit(settings, [dataclasses.replace(ALPHA, endpoints=())], first)
    sim.flux.request_reconcile(0)
    sim.tick()
    source = sim.get_object("gitrepositories", "alpha", "alpha")
    ready = _conditions(source)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "GitOperationFailed")
    assert ready["message"].endswith("authentication required")
    assert (
        "unable to clone 'http://portal.portal-system.svc/git/tenants/alpha.git'"
        in (ready["message"])
    )
    assert source["status"]["artifact"]["revision"] == f"main@sha1:{first}"
    workloads = sim.get_object("kustomizations", "alpha", "alpha-workloads")
    # Still the old artifact: the endpoint the new revision removes keeps running.
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
    assert sim.get_object("inferenceservices", "alpha", "chat")
    platform = sim.get_object("kustomizations", "flux-system", "tenants")
    assert platform["status"]["lastAppliedRevision"] == f"main@sha1:{second}"


def test_a_failed_source_is_fetched_again_later(settings: Any) -> None:
    # The portal writes the Secret inside the transaction that stores the token, so Flux can
    # read it before the token is valid; source-controller retries a failed source, and then
    # it applies with no other change.
    accepted: set[str] = set()
    sim = _sim(
        settings, verify_git=lambda url, user, password: password in accepted | {"flux-bootstrap"}
    )
    _secret(sim, password="good")
    sha = _commit(settings, [ALPHA])
    sim.tick(1000.0)
    ready = _conditions(sim.get_object("gitrepositories", "alpha", "alpha"))["Ready"]
    assert ready["reason"] == "GitOperationFailed"
    accepted.add("good")  # the portal's transaction commits
    sim.tick(1000.5)  # too early for a retry
    assert (
        "lastAppliedRevision"
        not in (sim.get_object("kustomizations", "alpha", "alpha-workloads")["status"])
    )
    sim.tick(1000.0 + SOURCE_RETRY_SECONDS)
    workloads = sim.get_object("kustomizations", "alpha", "alpha-workloads")
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{sha}"


def test_a_source_without_a_secret_ref_is_refused(settings: Any) -> None:
    sim = _sim(settings)
    files = render_repository(demo_fleet(), [ALPHA])
    # What tenants/<t>/sync.yaml said before: no secretRef.
    files["tenants/alpha/sync.yaml"] = files["tenants/alpha/sync.yaml"].replace(
        b"  secretRef:\n    name: flux-git-auth\n", b""
    )
    assert b"secretRef" not in files["tenants/alpha/sync.yaml"]
    GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH)).commit(
        dict(files), message="m\n", author=ALICE, branch="main", expected_parent=None
    )
    _secret(sim)
    sim.tick()
    ready = _conditions(sim.get_object("gitrepositories", "alpha", "alpha"))["Ready"]
    assert (ready["status"], ready["message"][-23:]) == ("False", "authentication required")


# --- the portal's side ------------------------------------------------------------------------


@pytest.fixture
def fleet_sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    return start_fleet()


@pytest.fixture
def kube(fleet_sim: Simulator) -> Iterator[Kube]:
    with Kube() as api:
        yield api


@pytest.mark.django_db
def test_the_simulator_applies_the_tenant_only_with_the_token_the_portal_wrote(
    fleet_sim: Simulator, merged_change: Callable[..., ChangeRequest], kube: Kube
) -> None:
    change = merged_change(ALPHA)
    fleet_sim.tick()
    assert services.ensure_source_credentials(kube) == (1, 0)
    secret = kube.read_secret("alpha", "flux-git-auth")
    assert secret["username"] == b"flux"
    assert sources.is_tenant_token("alpha", secret["password"].decode())
    fleet_sim.tick()
    workloads = fleet_sim.get_object("kustomizations", "alpha", "alpha-workloads")
    projected = GitRepository(sources.projection_path("alpha")).head("main")
    assert workloads["status"]["lastAppliedRevision"] == f"main@sha1:{projected}"
    assert sources.main_commit("alpha", projected or "") == change.merge_sha

    # Another tenant's token, or a made-up one, is refused by the portal's check.
    other = sources.issue_token("bravo", acting_user=None)
    _secret(fleet_sim, password=other)
    fleet_sim.flux.request_reconcile(0)
    fleet_sim.tick()
    ready = _conditions(fleet_sim.get_object("gitrepositories", "alpha", "alpha"))["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "GitOperationFailed")


@pytest.mark.django_db
def test_credentials_wait_for_the_namespace(
    fleet_sim: Simulator, merged_change: Callable[..., ChangeRequest], kube: Kube
) -> None:
    merged_change(ALPHA)
    # Flux has not applied the onboarding: no namespace, so no Secret yet, and no token.
    assert services.ensure_source_credentials(kube) == (0, 1)
    assert not SourceToken.objects.exists()
    with pytest.raises(KubeError) as raised:
        kube.write_secret("alpha", "x", {"a": b"b"}, labels={})
    assert raised.value.status == 404
    fleet_sim.tick()
    assert services.ensure_source_credentials(kube) == (1, 0)
    assert services.ensure_source_credentials(kube) == (0, 0)  # one query, nothing to do


@pytest.mark.django_db
def test_a_secret_gone_from_the_cluster_is_written_again(
    fleet_sim: Simulator, merged_change: Callable[..., ChangeRequest], kube: Kube
) -> None:
    # A restarted simulator (a second `make demo`) or a rebuilt cluster has lost the Secret
    # while the portal still has the token's digest.
    merged_change(ALPHA)
    fleet_sim.tick()
    assert services.ensure_source_credentials(kube) == (1, 0)
    first = SourceToken.objects.get(tenant_slug="alpha").digest
    fleet_sim.store.delete(SECRETS, "alpha", "flux-git-auth")
    fleet_sim.flux.request_reconcile(0)
    fleet_sim.tick()
    services.sync_all()  # reads the workloads Kustomization: not Ready without its source
    assert SourceToken.objects.get(tenant_slug="alpha").digest != first
    assert sources.is_tenant_token(
        "alpha", kube.read_secret("alpha", "flux-git-auth")["password"].decode()
    )
    fleet_sim.tick()
    services.sync_all()
    workloads = fleet_sim.get_object("kustomizations", "alpha", "alpha-workloads")
    assert _conditions(workloads)["Ready"]["status"] == "True"


@pytest.mark.django_db
def test_only_a_platform_admin_rotates_a_token(
    fleet_sim: Simulator,
    merged_change: Callable[..., ChangeRequest],
    kube: Kube,
    world: dict[str, Any],
) -> None:
    merged_change(ALPHA)
    fleet_sim.tick()
    services.ensure_source_credentials(kube)
    before = kube.read_secret("alpha", "flux-git-auth")["password"].decode()
    for name in ("alice", "fiona"):  # the tenant's admin, finance
        with pytest.raises(PermissionDenied):
            services.do_rotate_source_token("alpha", acting_user=world[name])
    assert kube.read_secret("alpha", "flux-git-auth")["password"].decode() == before

    pam = world["pam"]
    assert PlatformRole.objects.filter(user=pam, role="platform-admin").exists()
    prefix = services.do_rotate_source_token("alpha", acting_user=pam)
    after = kube.read_secret("alpha", "flux-git-auth")["password"].decode()
    assert after.startswith(prefix) and after != before
    assert not sources.is_tenant_token("alpha", before)
    assert sources.is_tenant_token("alpha", after)
    event = AuditEvent.objects.filter(action="source_token.rotate").get()
    assert (event.actor, event.tenant_slug) == (pam, "alpha")
    assert after not in str(event.diff) and prefix in str(event.diff)

    with pytest.raises(ValidationError, match="not on main"):
        services.do_rotate_source_token("nobody", acting_user=pam)


@pytest.mark.django_db
def test_a_rotation_the_api_refuses_keeps_the_old_token(
    merged_change: Callable[..., ChangeRequest], world: dict[str, Any], settings: Any
) -> None:
    merged_change(ALPHA)
    old = sources.issue_token("alpha", acting_user=None)
    settings.FLEET_API_URL = "http://127.0.0.1:9"  # nothing listens there
    settings.FLEET_API_TIMEOUT = 2
    with pytest.raises(ValidationError, match="the old one still works"):
        services.do_rotate_source_token("alpha", acting_user=world["pam"])
    assert sources.is_tenant_token("alpha", old)


@pytest.mark.django_db
def test_the_rotate_command(
    fleet_sim: Simulator,
    merged_change: Callable[..., ChangeRequest],
    kube: Kube,
    world: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    merged_change(ALPHA)
    fleet_sim.tick()
    call_command("rotate_source_token", "alpha", "--as", "pam")
    assert "Rotated the Git token of alpha" in capsys.readouterr().out
    with pytest.raises(CommandError, match="Only platform admins"):
        call_command("rotate_source_token", "alpha", "--as", "alice")
    with pytest.raises(CommandError, match="No user"):
        call_command("rotate_source_token", "alpha", "--as", "ghost")


def test_the_simulator_creates_and_replaces_secrets_like_the_api_server(
    settings: Any,
) -> None:
    sim = _sim(settings)
    url = sim.start("127.0.0.1", 0, tick_seconds=None)
    try:
        configuration = client.Configuration()
        configuration.host = url
        with Kube(client.ApiClient(configuration), timeout=5) as api:
            sim.cluster.ensure_namespace("alpha", 0)
            api.write_secret("alpha", "s", {"password": b"one"}, labels={"a": "b"})
            api.write_secret("alpha", "s", {"password": b"two"}, labels={"c": "d"})
            assert api.read_secret("alpha", "s") == {"password": b"two"}
            stored = sim.get_object("secrets", "alpha", "s")
            assert stored["metadata"]["labels"] == {"c": "d"}
            assert stored["type"] == "Opaque"
    finally:
        sim.stop()
