"""The portal's own deployment, opted into by a platform admin: a reviewed change request whose
checks pass, or files for the first install; a bad spec or a non-admin changes nothing."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from fleet import services
from gitops import services as gitops_services
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest, CheckRun
from gitops.render import load_documents, render_portal_deployment
from gitops.render.portal import config_data
from gitops.repo import Identity
from gitops.specs import PortalDeploySpec, PortalEgress
from portal.env import env_list
from portal.models import AuditEvent
from tests.gitops.checks_support import FLOW_CHECKS, FLOW_CHECKS_STATE

SPEC = PortalDeploySpec(
    image="registry.example.com/ai-factory/portal:1.4.0",
    base_url="https://portal.example.com",
    hostnames=("portal.example.com",),
)
CLUSTER = "clusters/ai-factory/kustomization.yaml"
ARGS = ["--image", SPEC.image, "--hostname", "portal.example.com"]


@pytest.mark.django_db
def test_an_admin_opens_it_as_a_checked_change(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    main = gitops_services.ensure_bootstrapped(configured_fleet())
    with django_capture_on_commit_callbacks(execute=True):
        change = services.do_propose_portal_deployment(SPEC, acting_user=world["pam"])
    change.refresh_from_db()
    assert change.kind == "platform"
    assert "clusters/ai-factory/portal.yaml" in change.files_changed
    assert CLUSTER in change.files_changed
    assert {p.split("/")[1] for p in change.files_changed if p.startswith("infrastructure/")} == {
        "portal"
    }
    checks = {c.name: (c.status, c.summary) for c in CheckRun.objects.filter(change=change)}
    # The ServiceMonitor and ExternalSecret have no CRD in the tests' settings (partial); the
    # schema tests check them against the upstream CRDs (tests/gitops/test_render_portal.py).
    assert {name: status for name, (status, _) in checks.items()} == FLOW_CHECKS, checks
    assert change.checks_state == FLOW_CHECKS_STATE
    repo = gitops_services.repository()
    assert repo.head("main") == main  # nothing applies until it is reviewed and merged
    cluster = load_documents(repo.read_file(change.head_sha, CLUSTER) or b"")[0]
    assert cluster["resources"][-1] == "portal.yaml"
    assert AuditEvent.objects.filter(action="fleet.portal_deployment").count() == 1


@pytest.mark.django_db
def test_entries_already_in_the_cluster_kustomization_stay(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    main = gitops_services.ensure_bootstrapped(configured_fleet())
    repo = gitops_services.repository()
    text = (repo.read_file(main, CLUSTER) or b"") + b"- observability.yaml\n"
    repo.commit(
        {CLUSTER: text},
        message="Add the observability stack",
        author=Identity("Ops", "ops@example.com"),
        branch="main",
        expected_parent=main,
    )
    with django_capture_on_commit_callbacks(execute=True):
        change = services.do_propose_portal_deployment(SPEC, acting_user=world["pam"])
    cluster = load_documents(repo.read_file(change.head_sha, CLUSTER) or b"")[0]
    assert cluster["resources"] == [
        "flux-system",
        "infrastructure.yaml",
        "tenants.yaml",
        "observability.yaml",
        "portal.yaml",
    ]


@pytest.mark.django_db
def _branches(settings: Any) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(settings.GITOPS_REPO_PATH), "for-each-ref", "--format=%(refname:short)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def test_nobody_but_a_platform_admin_may_and_a_bad_spec_writes_nothing(
    world: dict[str, Any], settings: Any
) -> None:
    main = gitops_services.ensure_bootstrapped(configured_fleet())
    with pytest.raises(PermissionDenied):
        services.do_propose_portal_deployment(SPEC, acting_user=world["alice"])
    with pytest.raises(ValidationError) as excinfo:
        services.do_propose_portal_deployment(
            PortalDeploySpec(
                image="registry.example.com/portal:1.0 latest",
                base_url="https://portal.example.com",
                hostnames=("portal.example.com",),
                web_replicas=0,
            ),
            acting_user=world["pam"],
        )
    assert any(m.startswith("image:") for m in excinfo.value.messages)
    assert any(m.startswith("web_replicas:") for m in excinfo.value.messages)
    assert not ChangeRequest.objects.exists()
    assert _branches(settings) == ["main"]
    assert gitops_services.repository().head("main") == main
    assert not AuditEvent.objects.filter(action="fleet.portal_deployment").exists()


@pytest.mark.django_db
def test_the_command_writes_the_first_install_files(tmp_path: Path) -> None:
    out = tmp_path / "portal"
    stdout = StringIO()
    call_command("render_portal_deployment", *ARGS, "--out", str(out), stdout=stdout)
    expected = render_portal_deployment(SPEC, configured_fleet())
    written = {
        str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }
    assert written == expected
    assert f"Wrote {len(expected)} files" in stdout.getvalue()

    flags = ["--egress", "databases:5432", "--egress", "10.9.0.0/16:6443", "--public-https"]
    call_command("render_portal_deployment", *ARGS, *flags, "--out", str(out), stdout=stdout)
    spec = replace(
        SPEC,
        egress=(PortalEgress("", 5432, "databases"), PortalEgress("10.9.0.0/16", 6443)),
        public_https=True,
    )
    policies = "infrastructure/portal/setup/network-policy.yaml"
    assert (out / policies).read_bytes() == render_portal_deployment(spec, configured_fleet())[
        policies
    ]


@pytest.mark.django_db
def test_the_command_refuses_a_bad_spec_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "portal"
    with pytest.raises(CommandError, match=r"hostnames\[0\]"):
        call_command(
            "render_portal_deployment",
            "--image",
            SPEC.image,
            "--hostname",
            "not a host",
            "--base-url",
            "https://portal.example.com",
            "--out",
            str(out),
        )
    with pytest.raises(CommandError, match="CIDR:PORT"):
        call_command("render_portal_deployment", *ARGS, "--egress", "10.0.0.0/8", "--out", str(out))
    assert not out.exists()


@pytest.mark.django_db
def test_the_command_opens_the_change(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    gitops_services.ensure_bootstrapped(configured_fleet())
    stdout = StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("render_portal_deployment", *ARGS, "--commit", "--as", "pam", stdout=stdout)
    change = ChangeRequest.objects.get()
    assert f"Opened change {change.pk}" in stdout.getvalue()
    with pytest.raises(CommandError, match="Only"):
        call_command("render_portal_deployment", *ARGS, "--commit", "--as", "alice")


@pytest.mark.django_db
def test_flux_clones_over_the_in_cluster_service_despite_the_https_redirect(
    client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rendered configuration, read as portal/settings.py reads its environment.
    config = config_data(SPEC, configured_fleet())
    for name in ("ALLOWED_HOSTS", "SECURE_REDIRECT_EXEMPT"):
        monkeypatch.setenv(name, config[name])
    settings.ALLOWED_HOSTS = env_list("ALLOWED_HOSTS")
    settings.SECURE_REDIRECT_EXEMPT = env_list("SECURE_REDIRECT_EXEMPT")
    settings.SECURE_SSL_REDIRECT = True
    host = "portal.portal-system.svc"  # the fleet's default git_url
    clone = client.get("/git/fleet.git/info/refs?service=git-upload-pack", HTTP_HOST=host)
    assert clone.status_code == 401  # asks Flux for its token instead of redirecting
    assert client.get("/", HTTP_HOST=host).status_code == 301
    assert client.get("/", HTTP_HOST="portal.example.com").status_code == 301


# --- the page -------------------------------------------------------------------------------------

FORM = {
    "image": SPEC.image,
    "hostnames": "portal.example.com, portal.internal.example.com",
    "web_replicas": "3",
    "worker_replicas": "2",
    "env_secret": "portal-env",
    "state_claim": "",
    "egress": "10.20.0.0/24:5432\r\ndatabases:6379\r\n",
    "public_https": "on",
}


@pytest.mark.django_db
def test_an_admin_proposes_it_from_the_fleet_pages(
    login: Any, django_capture_on_commit_callbacks: Any
) -> None:
    gitops_services.ensure_bootstrapped(configured_fleet())
    with django_capture_on_commit_callbacks(execute=True):
        response = login("pam").post("/fleet/portal-deployment/", FORM)
    change = ChangeRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/changes/{change.pk}/"
    expected = replace(
        SPEC,
        hostnames=("portal.example.com", "portal.internal.example.com"),
        web_replicas=3,
        egress=(PortalEgress("10.20.0.0/24", 5432), PortalEgress("", 6379, "databases")),
        public_https=True,
    )
    repo = gitops_services.repository()
    for path, data in render_portal_deployment(expected, configured_fleet()).items():
        assert repo.read_file(change.head_sha, path) == data, path


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"image": "registry.example.com/portal:1.0 --privileged"}, "image:"),
        ({"web_replicas": "0"}, "web_replicas:"),
        ({"hostnames": "not_a_host"}, "hostnames[0]:"),
        ({"egress": "somewhere"}, "CIDR:PORT or NAMESPACE:PORT"),
    ],
)
def test_the_page_refuses_a_bad_spec_and_opens_nothing(
    login: Any, changes: dict[str, str], error: str
) -> None:
    gitops_services.ensure_bootstrapped(configured_fleet())
    response = login("pam").post("/fleet/portal-deployment/", {**FORM, **changes})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ChangeRequest.objects.exists()


@pytest.mark.django_db
def test_the_deployed_portal_counts_sign_ins_by_the_client_behind_the_ingress() -> None:
    """Issue 25: without a trusted proxy count, allauth takes the ingress's address for every
    client, and five failed sign-ins from anyone would lock everyone out."""
    assert config_data(SPEC, configured_fleet())["ALLAUTH_TRUSTED_PROXY_COUNT"] == "1"
