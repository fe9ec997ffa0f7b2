"""Tenant clusters in the simulator: the virtual API server's flags, its RBAC, Flux applying
the member bindings through the exported kubeconfig, and ID tokens from a real identity
provider (tests/oidc/server.mjs over HTTPS; those tests need `make node-deps`)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gitops.render.tree import render_repository
from gitops.render.yamlio import dump_documents, load_documents
from gitops.repo import GitRepository, Identity
from gitops.specs import ClusterMember, GpuShare, TenantClusterSpec, TenantSpec
from simulator import Simulator
from simulator.config import SimConfig
from simulator.store import CLUSTER_ROLE_BINDINGS
from simulator.virtual import (
    ApiServerRefused,
    Attributes,
    Forbidden,
    OidcAuthenticator,
    OidcFlags,
    Unauthenticated,
    UserInfo,
    VirtualCluster,
    WriteRefused,
    parse_api_server_args,
)
from tests.cluster_oidc import ISSUER, fleet_with_oidc
from tests.support.oidc import (
    CLUSTER_CLIENT_ID,
    OidcServer,
    ServerCa,
    kubelogin_id_token,
    make_test_ca,
    run_oidc_server,
)

AUTHOR = Identity("Test Author", "author@example.com")
RBAC = "rbac.authorization.k8s.io"
ACCESS_FILE = "tenants/alpha/clusters/dev.yaml"


def alpha(**roles: str) -> TenantSpec:
    return TenantSpec(
        slug="alpha",
        shares=(GpuShare(name="infer", flavor="h200", kind="whole", count=2),),
        clusters=(TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=2),),
        members=tuple(
            ClusterMember(name, role, ISSUER, f"sub-{name}")  # type: ignore[arg-type]
            for name, role in roles.items()
        ),
    )


@pytest.fixture
def sim(settings: Any) -> Iterator[Simulator]:
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    # The tenant's Git credentials, as the portal writes them (any pass the default check).
    simulator.put_object(
        "secrets",
        {
            "metadata": {"namespace": "alpha", "name": "flux-git-auth"},
            "data": {k: base64.b64encode(b"x").decode() for k in ("username", "password")},
        },
    )
    try:
        yield simulator
    finally:
        simulator.stop()


class Main:
    """The fleet repository's main branch, written as the portal would (or edited by hand)."""

    def __init__(self, settings: Any) -> None:
        self.repo = GitRepository.open_or_init(Path(settings.GITOPS_REPO_PATH))

    def commit(self, files: dict[str, bytes | None]) -> str:
        return self.repo.commit(
            files,
            message="m\n",
            author=AUTHOR,
            branch="main",
            expected_parent=self.repo.head("main"),
        )

    def render(self, tenant: TenantSpec, **edits: Any) -> str:
        files: dict[str, bytes | None] = dict(render_repository(fleet_with_oidc(), [tenant]))
        current = (
            set(self.repo.read_tree(self.repo.head("main"))) if self.repo.head("main") else set()
        )
        files.update(dict.fromkeys(current - set(files)))
        for path, edit in edits.items():
            objs = load_documents(files[path.replace("__", "/")] or b"")
            edit(objs)
            files[path.replace("__", "/")] = dump_documents(objs)
        return self.commit(files)


def kustomization(sim: Simulator) -> dict[str, dict[str, Any]]:
    obj = sim.get_object("kustomizations", "alpha", "dev-access")
    return {c["type"]: c for c in obj["status"]["conditions"]}


def bound(sim: Simulator) -> dict[str, str]:
    cluster = sim.flux.virtual[("alpha", "dev")]
    return {
        s["name"]: b["roleRef"]["name"]
        for b in cluster.listed(RBAC, "ClusterRoleBinding")
        for s in b["subjects"]
        if s.get("name", "").startswith("oidc:")
    }


@pytest.mark.django_db
def test_flux_applies_the_bindings_into_the_virtual_cluster_once_it_runs(
    sim: Simulator, settings: Any
) -> None:
    main = Main(settings)
    revision = main.render(alpha(ann="admin", bob="member"))
    sim.tick()
    # The release became ready after Flux tried: its kubeconfig was not there yet.
    conditions = kustomization(sim)
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["message"] == (
        "failed to build kube client: unable to read KubeConfig secret 'alpha/vc-dev' error: "
        'secrets "vc-dev" not found'
    )
    # kustomize-controller retries, and says so (finalizeStatus): not a failed apply yet.
    assert conditions["Reconciling"]["reason"] == "ProgressingWithRetry"
    sim.tick()  # retried after retryInterval
    conditions = kustomization(sim)
    assert conditions["Ready"]["status"] == "True", conditions
    assert "Reconciling" not in conditions
    status = sim.get_object("kustomizations", "alpha", "dev-access")["status"]
    assert status["lastAppliedRevision"] == f"main@sha1:{revision}"
    assert bound(sim) == {"oidc:sub-ann": "cluster-admin", "oidc:sub-bob": "edit"}
    # Nothing of it reached the host cluster.
    assert sim.get_object("kustomizations", "alpha", "dev-access")["status"]["inventory"]
    host_subjects = {
        subject["name"]
        for binding in sim.store.list(CLUSTER_ROLE_BINDINGS)
        for subject in binding.get("subjects", [])
    }
    assert not host_subjects & {"oidc:sub-ann", "oidc:sub-bob"}

    main.render(alpha(ann="admin"))
    sim.tick()
    assert bound(sim) == {"oidc:sub-ann": "cluster-admin"}  # pruned


@pytest.mark.django_db
def test_without_the_bootstrap_binding_the_reconciler_is_refused_and_nothing_applies(
    sim: Simulator, settings: Any
) -> None:
    def no_bootstrap(objs: list[Any]) -> None:
        del objs[0]["spec"]["values"]["experimental"]

    Main(settings).render(alpha(ann="admin"), **{ACCESS_FILE.replace("/", "__"): no_bootstrap})
    sim.tick()
    sim.tick()
    ready = kustomization(sim)["Ready"]
    assert ready["status"] == "False"
    assert ready["message"].startswith("ClusterRoleBinding/ai-factory:cluster-admin:")
    assert ready["message"].endswith(
        " dry-run failed (Forbidden): clusterrolebindings.rbac.authorization.k8s.io "
        f'"{ready["message"].split("/")[1].split(" ")[0]}" is forbidden: User '
        '"system:serviceaccount:alpha:cluster-access:platform" cannot patch resource '
        '"clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope'
    )
    assert bound(sim) == {}


@pytest.mark.django_db
def test_deleting_the_kustomization_follows_its_deletion_policy(
    sim: Simulator, settings: Any
) -> None:
    main = Main(settings)

    def policy(value: str) -> Any:
        def edit(objs: list[Any]) -> None:
            objs[1]["spec"]["deletionPolicy"] = value

        return edit

    def without_access(objs: list[Any]) -> None:
        del objs[1]

    key = ACCESS_FILE.replace("/", "__")
    main.render(alpha(ann="admin"))
    sim.tick()
    sim.tick()
    main.render(alpha(ann="admin"), **{key: without_access})
    sim.tick()
    assert bound(sim) == {"oidc:sub-ann": "cluster-admin"}  # Orphan: left in the cluster
    main.render(alpha(ann="admin"), **{key: policy("MirrorPrune")})
    sim.tick()
    main.render(alpha(ann="admin"), **{key: without_access})
    sim.tick()
    assert bound(sim) == {}  # MirrorPrune with prune: deleted with it


@pytest.mark.django_db
def test_an_http_issuer_stops_the_api_server(sim: Simulator, settings: Any) -> None:
    def http(objs: list[Any]) -> None:
        args = objs[0]["spec"]["values"]["controlPlane"]["distro"]["k8s"]["apiServer"]
        args["extraArgs"][0] = "--oidc-issuer-url=http://idp.example.com"

    Main(settings).render(alpha(), **{ACCESS_FILE.replace("/", "__"): http})
    sim.tick()
    release = sim.get_object("helmreleases", "flux-system", "alpha-dev")
    ready = next(c for c in release["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert (
        'oidc-issuer-url: Invalid value: "http://idp.example.com": URL scheme must be https'
        in (ready["message"])
    )
    with pytest.raises(LookupError):
        sim.get_object("secrets", "alpha", "vc-dev")


def test_api_server_flags_as_kube_apiserver_reads_them() -> None:
    flags = parse_api_server_args(
        ["--oidc-issuer-url", ISSUER, "--oidc-client-id=k", "--oidc-username-claim=email"]
    )
    assert flags == OidcFlags(ISSUER, "k", "email")
    assert flags is not None and flags.prefix == ""  # no default prefix for email
    assert OidcFlags(ISSUER, "k").prefix == f"{ISSUER}#"  # the default for any other claim
    assert OidcFlags(ISSUER, "k", username_prefix="-").prefix == ""
    assert parse_api_server_args(["--profiling=false"]) is None
    with pytest.raises(ApiServerRefused, match="oidc-client-id: Required value"):
        parse_api_server_args([f"--oidc-issuer-url={ISSUER}"])


def test_rbac_refuses_escalation_and_a_changed_role_ref() -> None:
    cluster = VirtualCluster("alpha", "dev")
    admin = UserInfo("kubernetes-admin", ("system:masters",))
    reconciler = UserInfo("system:serviceaccount:alpha:cluster-access:platform")
    bootstrap = yaml.safe_load_all(
        render_repository(fleet_with_oidc(), [alpha()])[ACCESS_FILE].decode()
    )
    manifests = next(iter(bootstrap))["spec"]["values"]["experimental"]["deploy"]["vcluster"]
    cluster.apply(admin, list(yaml.safe_load_all(manifests["manifests"])), [], 0)

    def binding(role: str) -> dict[str, Any]:
        return {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "oidc:x"}],
        }

    cluster.apply(reconciler, [binding("edit")], [], 0)
    assert cluster.allowed(UserInfo("oidc:x"), Attributes("create", "apps", "deployments"))
    with pytest.raises(WriteRefused, match="cannot change roleRef") as changed:
        cluster.apply(reconciler, [binding("view")], [], 0)
    assert changed.value.reason == "Invalid"
    with pytest.raises(WriteRefused, match="grant RBAC permissions not currently held") as wider:
        cluster.apply(reconciler, [{**binding("admin"), "metadata": {"name": "c"}}], [], 0)
    assert wider.value.reason == "Forbidden"
    assert cluster.allowed(UserInfo("oidc:x"), Attributes("create", "apps", "deployments"))
    # edit lets a member act as any service account, but not as the reconciler, whose name
    # is no service account's: the API server asks for impersonate on users then. The
    # impersonated user is authenticated (impersonation.go adds the group).
    member = UserInfo("oidc:x")
    assert cluster.impersonate(member, "system:serviceaccount:alpha:default").groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:alpha",
        "system:authenticated",
    )
    with pytest.raises(Forbidden, match='User "oidc:x" cannot impersonate resource "users"'):
        cluster.impersonate(member, reconciler.name)
    assert cluster.impersonate(admin, reconciler.name) == UserInfo(
        reconciler.name, ("system:authenticated",)
    )


@pytest.mark.django_db
def test_the_virtual_api_wants_a_token_and_a_running_control_plane(
    sim: Simulator, settings: Any
) -> None:
    Main(settings).render(alpha(ann="admin"))
    sim.tick()
    url = f"{sim.url}/vclusters/alpha/dev/api/v1/namespaces/default/pods"
    anonymous = requests.get(url, timeout=5)
    assert anonymous.status_code == 401
    assert anonymous.json()["reason"] == "Unauthorized"
    unknown = requests.get(f"{sim.url}/vclusters/alpha/prod/api", timeout=5)
    assert unknown.status_code == 404
    sim.cluster.delete_pod("alpha", "dev-0", 0, recreate=False)
    down = requests.get(url, headers={"Authorization": "Bearer x"}, timeout=5)
    assert down.status_code == 503


# --- ID tokens from a real provider -----------------------------------------------------------


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OidcServer, ServerCa]]:
    workdir = tmp_path_factory.mktemp("idp")
    ca = make_test_ca(workdir)
    with run_oidc_server(
        redirect_uri="https://portal.invalid/callback",
        workdir=workdir,
        public_client_id=CLUSTER_CLIENT_ID,
        tls=ca,
    ) as server:
        server.set_accounts(
            {
                "sub-ann": {"email": "ann@example.com", "email_verified": True, "groups": ["/g"]},
                "sub-eve": {"email": "eve@example.com", "email_verified": False},
            }
        )
        yield server, ca


@pytest.mark.services
def test_id_tokens_are_verified_as_kube_apiserver_verifies_them(
    provider: tuple[OidcServer, ServerCa],
) -> None:
    server, ca = provider
    token = kubelogin_id_token(server, "sub-ann", ca_file=ca.ca_file)
    flags = OidcFlags(
        server.issuer,
        CLUSTER_CLIENT_ID,
        username_prefix="oidc:",
        groups_claim="groups",
        groups_prefix="oidc:",
    )
    assert OidcAuthenticator(flags, str(ca.ca_file)).authenticate(token) == UserInfo(
        "oidc:sub-ann", ("oidc:/g",)
    )
    # By e-mail, the token must carry it: kubelogin asks for the scope (the kubeconfig says so).
    by_email = dataclasses.replace(flags, username_claim="email")
    with pytest.raises(Unauthenticated, match="parse username claims 'email'"):
        OidcAuthenticator(by_email, str(ca.ca_file)).authenticate(token)
    with_email = kubelogin_id_token(server, "sub-ann", ca_file=ca.ca_file, extra_scopes=("email",))
    assert OidcAuthenticator(by_email, str(ca.ca_file)).authenticate(with_email).name == (
        "oidc:ann@example.com"
    )
    eve = kubelogin_id_token(server, "sub-eve", ca_file=ca.ca_file, extra_scopes=("email",))
    with pytest.raises(Unauthenticated, match="email not verified"):
        OidcAuthenticator(by_email, str(ca.ca_file)).authenticate(eve)
    with pytest.raises(Unauthenticated, match="Audience doesn't match"):
        OidcAuthenticator(
            dataclasses.replace(flags, client_id="other"), str(ca.ca_file)
        ).authenticate(token)
    # The issuer must be the flag exactly, and the provider's certificate trusted.
    slash = dataclasses.replace(flags, issuer_url=server.issuer + "/")
    with pytest.raises(Unauthenticated, match="issuer did not match"):
        OidcAuthenticator(slash, str(ca.ca_file)).authenticate(token)
    with pytest.raises(Unauthenticated, match="CERTIFICATE_VERIFY_FAILED"):
        OidcAuthenticator(flags).authenticate(token)
    with pytest.raises(Unauthenticated, match="Signature verification failed"):
        head, claims, signature = token.split(".")
        forged = base64.urlsafe_b64encode(
            base64.urlsafe_b64decode(claims + "==").replace(b"sub-ann", b"sub-bob")
        )
        OidcAuthenticator(flags, str(ca.ca_file)).authenticate(
            f"{head}.{forged.decode().rstrip('=')}.{signature}"
        )
