"""Change requests end to end on a real bare repository: open, check, review, merge, close."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.test import Client

from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, CheckRun
from gitops.repo import GitRepository
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec, TenantSpec
from portal.models import AuditEvent, Job
from tenants.models import PlatformRole
from tests.gitops.checks_support import FLOW_CHECKS, FLOW_CHECKS_STATE

FLEET = demo_fleet()


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    return django_capture_on_commit_callbacks


def _open(user: Any, on_commit: Any, spec: TenantSpec, **extra: Any) -> ChangeRequest:
    with on_commit(execute=True):
        change = services.open_tenant_change(
            acting_user=user,
            tenant=spec,
            fleet=FLEET,
            title=f"Change {spec.slug}",
            kind=ChangeRequest.Kind.TENANT,
            **extra,
        )
    change.refresh_from_db()
    return change


RICH = TenantSpec(
    slug="alpha",
    display_name="Alpha Team",
    shares=(GpuShare(name="train", flavor="h200", kind="whole", count=8),),
    endpoints=(
        EndpointSpec(name="chat", model_uri="hf://meta-llama/Llama-3.1-8B-Instruct", share="train"),
    ),
)


def test_it_opens_a_change_with_checks_on_its_own_branch(
    world: dict[str, Any], on_commit: Any
) -> None:
    change = _open(world["bob"], on_commit, RICH)
    repo = services.repository()
    assert change.branch == f"change/{change.pk}"
    assert repo.head(change.branch) == change.head_sha
    assert repo.head("main") == change.base_sha  # main untouched until merged
    assert "tenants/alpha/queues.yaml" in change.files_changed
    assert any(p.startswith("tenants/alpha/workloads/endpoints/") for p in change.files_changed)
    message = repo.commit_message(change.head_sha)
    assert f"Change-Request: {change.pk}" in message
    assert "Requested-by: bob <bob@example.com>" in message
    checks = {c.name: c.status for c in CheckRun.objects.filter(change=change)}
    assert checks == FLOW_CHECKS, CheckRun.objects.filter(change=change).values(
        "name", "summary", "details"
    )
    assert change.checks_state == FLOW_CHECKS_STATE
    assert AuditEvent.objects.filter(action="change.open", tenant_slug="alpha").exists()


def test_it_rejects_an_empty_change_and_writes_nothing(
    world: dict[str, Any], on_commit: Any
) -> None:
    _merge_ready(world, on_commit, TenantSpec(slug="alpha"))
    count = ChangeRequest.objects.count()
    with pytest.raises(ValidationError, match="Nothing would change"):
        services.open_tenant_change(
            acting_user=world["bob"],
            tenant=TenantSpec(slug="alpha"),
            fleet=FLEET,
            title="again",
            kind="tenant",
        )
    assert ChangeRequest.objects.count() == count


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/abs/file.yaml", "tenants/a/../../x", ".git/config"]
)
def test_it_rolls_back_a_failed_git_write(world: dict[str, Any], path: str) -> None:
    services.ensure_bootstrapped(FLEET)
    main = services.main_sha()
    with pytest.raises(Exception):  # noqa: B017 - the repository's own path error
        services.open_change(acting_user=world["pam"], title="bad", changes={path: b"x"})
    assert not ChangeRequest.objects.exists()
    assert services.main_sha() == main
    assert not [b for b in _branches() if b.startswith("change/")]


def _branches() -> list[str]:
    out = subprocess.run(
        [
            "git",
            "--git-dir",
            str(services.repository().path),
            "branch",
            "--format=%(refname:short)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def _merge_ready(world: dict[str, Any], on_commit: Any, spec: TenantSpec) -> ChangeRequest:
    change = _open(world["bob"], on_commit, spec)
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    change.refresh_from_db()
    services.do_review(change, acting_user=world["pam"], state="approve")
    with on_commit(execute=True):
        return services.do_merge(change, acting_user=world["pam"])


def test_a_change_that_writes_another_tenants_object_fails_its_checks(
    world: dict[str, Any], on_commit: Any
) -> None:
    # Rendered one tenant at a time, as every change is: llm + platform-x is on main, and
    # llm-platform + x would write the same HelmRelease into flux-system.
    _merge_ready(
        world, on_commit, TenantSpec(slug="llm", clusters=(TenantClusterSpec("platform-x"),))
    )
    change = _open(
        world["bob"], on_commit, TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec("x"),))
    )
    assert change.checks_state == "failed"
    run = CheckRun.objects.get(change=change, name="duplicates")
    assert run.status == "failed"
    [detail] = run.details
    assert "HelmRelease.helm.toolkit.fluxcd.io/flux-system/llm-platform-x" in detail
    assert "tenants/llm-platform/clusters/x.yaml; tenants/llm/clusters/platform-x.yaml" in detail
    services.do_review(change, acting_user=world["pam"], state="approve")
    with pytest.raises(ValidationError, match="Checks failed"):
        services.do_merge(change, acting_user=world["pam"])


def test_it_enforces_reviews_before_merge(
    world: dict[str, Any], on_commit: Any, make_user: Any
) -> None:
    olga, otto = make_user("olga"), make_user("otto")
    for admin in (olga, otto):
        PlatformRole.objects.create(user=admin, role=PlatformRole.Name.PLATFORM_ADMIN)
    change = _open(world["pam"], on_commit, TenantSpec(slug="alpha"))
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    change.refresh_from_db()
    with pytest.raises(ValidationError, match="0 of 1 required approvals"):
        services.do_merge(change, acting_user=world["pam"])
    with pytest.raises(ValidationError, match="cannot approve a change you opened"):
        services.do_review(change, acting_user=world["pam"], state="approve")
    with pytest.raises(ValidationError):
        services.do_review(change, acting_user=olga, state="request_changes")
    services.do_review(change, acting_user=olga, state="request_changes", body="No.")
    services.do_review(change, acting_user=otto, state="approve")
    with pytest.raises(ValidationError, match="Changes requested by olga"):
        services.do_merge(change, acting_user=world["pam"])
    services.do_review(change, acting_user=olga, state="approve")
    with on_commit(execute=True):
        merged = services.do_merge(change, acting_user=world["pam"])
    assert merged.status == "merged"


def test_only_platform_admins_review_or_merge_even_calling_the_service(
    world: dict[str, Any], on_commit: Any
) -> None:
    """The service decides, not the view: a tenant admin of the change's own tenant, an admin
    of another tenant and finance can neither review nor merge."""
    change = _open(world["bob"], on_commit, TenantSpec(slug="alpha"))
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    for name in ("alice", "charlie", "fiona", "vic"):
        with pytest.raises(PermissionDenied):
            services.do_review(change, acting_user=world[name], state="approve")
        with pytest.raises(PermissionDenied):
            services.do_merge(change, acting_user=world[name])
    assert not change.reviews.exists()
    change.refresh_from_db()
    assert change.status == "open"


def test_it_refuses_to_merge_with_failed_or_pending_checks(
    world: dict[str, Any], on_commit: Any
) -> None:
    change = _open(world["bob"], on_commit, TenantSpec(slug="alpha"))
    services.do_review(change, acting_user=world["pam"], state="approve")
    for state, message in [("pending", "still running"), ("failed", "Checks failed")]:
        ChangeRequest.objects.filter(pk=change.pk).update(checks_state=state)
        change.refresh_from_db()
        with pytest.raises(ValidationError, match=message):
            services.do_merge(change, acting_user=world["pam"])
    assert services.repository().head("main") == change.base_sha


def test_it_merges_one_commit_with_trailers_and_publishes(
    world: dict[str, Any], on_commit: Any, settings: Any, tmp_path: Path
) -> None:
    remote = GitRepository.open_or_init(tmp_path / "remote.git")
    settings.GITOPS_REMOTE_URL = str(remote.path)
    received: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.FLUX_RECEIVER_URL = f"http://127.0.0.1:{server.server_port}/hook/abc"
    try:
        change = _merge_ready(world, on_commit, RICH)
    finally:
        server.shutdown()
    repo = services.repository()
    change.refresh_from_db()
    assert repo.head("main") == change.merge_sha
    message = repo.commit_message(change.merge_sha)
    assert f"Change-Request: {change.pk}" in message
    assert "Approved-by: pam <pam@example.com>" in message
    assert "Merged-by: pam <pam@example.com>" in message
    assert repo.read_file("main", "tenants/alpha/namespace.yaml")
    # One commit on top of the old main, not the branch's history.
    assert repo.merge_base(change.merge_sha, change.base_sha) == change.base_sha
    assert change.apply_state == "pending"
    assert remote.head("main") == change.merge_sha
    assert len(received) == 1 and change.merge_sha.encode() in received[0]
    publish = Job.objects.get(task="gitops.after_merge")
    assert publish.status == "succeeded", publish.error


def test_it_deletes_files_to_decommission(world: dict[str, Any], on_commit: Any) -> None:
    _merge_ready(world, on_commit, RICH)
    without = TenantSpec(slug="alpha", display_name="Alpha Team", shares=RICH.shares)
    change = _open(world["bob"], on_commit, without)
    repo = services.repository()
    deleted = [d.path for d in repo.diff(change.base_sha, change.head_sha) if d.status == "deleted"]
    assert sorted(deleted) == [
        "tenants/alpha/litellm/chat.yaml",
        # The PodMonitor goes with the tenant's last endpoint.
        "tenants/alpha/monitoring.yaml",
        # ... and its spec: main no longer holds the endpoint.
        "tenants/alpha/spec/endpoints/chat.json",
        "tenants/alpha/workloads/endpoints/chat.yaml",
    ]
    removal = services.tenant_removal_changes("alpha", FLEET)
    assert (
        "tenants/alpha/namespace.yaml" in removal
        and removal["tenants/alpha/namespace.yaml"] is None
    )
    assert removal["tenants/kustomization.yaml"] is not None


def test_it_reports_a_conflict_and_updates_the_branch(
    world: dict[str, Any], on_commit: Any
) -> None:
    first = _open(world["bob"], on_commit, TenantSpec(slug="alpha", cpu_quota=10))
    _merge_ready(world, on_commit, TenantSpec(slug="alpha", cpu_quota=20))
    ChangeRequest.objects.filter(pk=first.pk).update(checks_state="passed")
    first.refresh_from_db()
    services.do_review(first, acting_user=world["pam"], state="approve")
    with pytest.raises(ValidationError, match="conflicts with main"):
        services.do_merge(first, acting_user=world["pam"])
    first.refresh_from_db()
    assert first.status == "open"
    with on_commit(execute=True):
        services.do_update_branch(first, acting_user=world["pam"])
    first.refresh_from_db()
    assert first.base_sha == services.main_sha()
    # The old approval was for the old head: it must be given again.
    assert "0 of 1 required approvals." in services.merge_blockers(first)


def test_it_closes_a_change(world: dict[str, Any], on_commit: Any) -> None:
    change = _open(world["bob"], on_commit, TenantSpec(slug="alpha"))
    services.do_close(change, acting_user=world["bob"], reason="not needed")
    change.refresh_from_db()
    assert change.status == "closed"
    with pytest.raises(ValidationError, match="closed"):
        services.do_review(change, acting_user=world["pam"], state="approve")


def test_it_opens_the_onboarding_change_with_the_tenant(
    world: dict[str, Any], on_commit: Any
) -> None:
    from tenants.services import do_create_tenant

    with on_commit(execute=True):
        do_create_tenant(acting_user=world["pam"], slug="delta", display_name="Delta")
    change = ChangeRequest.objects.get(tenant_slug="delta")
    assert change.kind == "onboarding"
    assert "tenants/delta/namespace.yaml" in change.files_changed
    assert "tenants/kustomization.yaml" in change.files_changed


# --- pages -----------------------------------------------------------------------------------


@pytest.fixture
def alpha_change(world: dict[str, Any], on_commit: Any) -> ChangeRequest:
    return _open(world["bob"], on_commit, RICH)


ACTIONS = ["review", "merge", "close", "update-branch"]


@pytest.mark.parametrize("who", ["charlie", "nora"])
def test_it_hides_changes_from_outsiders(
    alpha_change: ChangeRequest, login: Callable[[str], Client], who: str
) -> None:
    client = login(who)
    base = f"/changes/{alpha_change.pk}/"
    assert client.get(base).status_code == 404
    for action in ACTIONS:
        assert client.post(f"{base}{action}/", {"state": "approve"}).status_code == 404
        assert client.get(f"{base}{action}/").status_code == 404
    assert f"#{alpha_change.pk}" not in client.get("/changes/?status=all").content.decode()
    alpha_change.refresh_from_db()
    assert alpha_change.status == "open" and not alpha_change.reviews.exists()


def test_it_shows_the_diff_checks_and_review_controls(
    alpha_change: ChangeRequest, login: Callable[[str], Client]
) -> None:
    body = login("pam").get(f"/changes/{alpha_change.pk}/").content.decode()
    assert "tenants/alpha/queues.yaml" in body
    assert 'class="diff-src"' in body
    assert "Approve" in body and "Merge into main" in body
    member = login("vic").get(f"/changes/{alpha_change.pk}/").content.decode()
    assert "tenants/alpha/queues.yaml" in member
    assert "Merge into main" not in member and 'value="approve"' not in member


def test_it_refuses_review_and_merge_to_tenant_members(
    alpha_change: ChangeRequest, login: Callable[[str], Client]
) -> None:
    for action in ["review", "merge", "update-branch"]:
        response = login("alice").post(
            f"/changes/{alpha_change.pk}/{action}/", {"state": "approve"}
        )
        assert response.status_code == 403
    assert not alpha_change.reviews.exists()


def test_it_reviews_and_merges_through_the_pages(
    alpha_change: ChangeRequest,
    login: Callable[[str], Client],
    world: dict[str, Any],
    on_commit: Any,
) -> None:
    ChangeRequest.objects.filter(pk=alpha_change.pk).update(checks_state="passed")
    pam = login("pam")
    pam.post(f"/changes/{alpha_change.pk}/review/", {"state": "approve"})
    with on_commit(execute=True):
        response = pam.post(f"/changes/{alpha_change.pk}/merge/", follow=True)
    assert "Merged as" in response.content.decode()
    alpha_change.refresh_from_db()
    assert alpha_change.status == "merged"


def test_it_filters_the_change_list(
    alpha_change: ChangeRequest, login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    assert alpha_change.title in pam.get("/changes/").content.decode()
    assert alpha_change.title not in pam.get("/changes/?status=merged").content.decode()
    assert alpha_change.title not in pam.get("/changes/?tenant=bravo").content.decode()
    fragment = pam.get("/changes/?kind=tenant", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="changes">') and alpha_change.title in fragment


@pytest.mark.parametrize(
    ("who", "to_act_on"),
    [
        ("pam", {"alpha", "bravo"}),  # reviews and merges every change
        ("bob", {"alpha"}),  # opened the alpha change: may update or close it
        ("alice", {"alpha"}),  # admin of alpha: may close its changes
        ("charlie", {"bravo"}),  # admin of bravo, not a member of alpha
        ("vic", set()),  # viewer of alpha: can only look
        ("fiona", set()),  # finance sees every change and acts on none
    ],
)
def test_it_lists_first_the_changes_the_person_can_act_on(
    world: dict[str, Any],
    on_commit: Any,
    login: Callable[[str], Client],
    who: str,
    to_act_on: set[str],
) -> None:
    changes = {
        "alpha": _open(world["bob"], on_commit, RICH),
        "bravo": _open(world["pam"], on_commit, TenantSpec(slug="bravo")),
    }
    client = login(who)

    def listed(query: str = "") -> set[str]:
        page = client.get(f"/changes/{query}").content.decode()
        return {slug for slug, c in changes.items() if f'href="/changes/{c.pk}/"' in page}

    assert listed() == to_act_on
    page = client.get("/changes/").content.decode()
    assert '<a href="?status=act" class="active" aria-current="page">To act on</a>' in page
    if not to_act_on:
        assert "Nothing waits for you." in page
    visible = (
        {"alpha", "bravo"}
        if who in {"pam", "fiona"}
        else {"bravo" if who == "charlie" else "alpha"}
    )
    assert listed("?status=open") == visible
    assert listed("?status=merged") == set()

    ChangeRequest.objects.filter(pk=changes["alpha"].pk).update(
        status=ChangeRequest.Status.MERGED, merge_sha="0" * 40
    )
    assert "alpha" not in listed()
    assert listed("?status=merged") == visible & {"alpha"}
    assert listed("?status=all") == visible


def test_it_merges_side_by_side_onboardings_despite_the_shared_index(
    world: dict[str, Any], on_commit: Any
) -> None:
    first = _open(world["bob"], on_commit, TenantSpec(slug="alpha"))
    second = _open(world["bob"], on_commit, TenantSpec(slug="bravo"))
    assert first.base_sha == second.base_sha
    for change in (first, second):
        ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
        change.refresh_from_db()
        services.do_review(change, acting_user=world["pam"], state="approve")
        with on_commit(execute=True):
            services.do_merge(change, acting_user=world["pam"])
    repo = services.repository()
    index = repo.read_file("main", "tenants/kustomization.yaml") or b""
    assert b"- alpha" in index and b"- bravo" in index
    assert repo.read_file("main", "tenants/alpha/namespace.yaml")
    assert repo.read_file("main", "tenants/bravo/namespace.yaml")
    second.refresh_from_db()
    assert second.merge_sha == repo.head("main")


def test_it_writes_nothing_for_a_spec_it_cannot_render(world: dict[str, Any]) -> None:
    from gitops.specs import SpecError

    services.ensure_bootstrapped(FLEET)
    main = services.main_sha()
    bad = TenantSpec(
        slug="alpha",
        shares=(
            GpuShare(name="slice", flavor="h200-mig", kind="mig", count=2, mig_profile="9g.999gb"),
        ),
    )
    with pytest.raises(SpecError) as info:
        services.open_tenant_change(
            acting_user=world["bob"], tenant=bad, fleet=FLEET, title="bad", kind="gpu-share"
        )
    assert "9g.999gb" in str(info.value)
    assert not ChangeRequest.objects.exists()
    assert services.main_sha() == main
    assert not [b for b in _branches() if b.startswith("change/")]


def test_it_packs_the_repository_on_schedule(world: dict[str, Any], on_commit: Any) -> None:
    from portal.jobs import enqueue

    _merge_ready(world, on_commit, RICH)
    with on_commit(execute=True):
        job = enqueue("gitops.maintain")
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    fsck = subprocess.run(
        ["git", "--git-dir", str(services.repository().path), "fsck", "--strict"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stderr


def test_it_opens_the_flux_components_change_whose_lockdown_builds(
    world: dict[str, Any], on_commit: Any, tmp_path: Path
) -> None:
    services.ensure_bootstrapped(FLEET)
    components = Path(__file__).parent / "fixtures" / "gotk-components.yaml"
    with on_commit(execute=True):
        call_command("add_flux_components", str(components), "--as", world["bob"].username)
    change = ChangeRequest.objects.get(title__startswith="Commit the Flux controllers")
    base = f"clusters/{FLEET.name}/flux-system"
    assert change.files_changed == [f"{base}/gotk-components.yaml", f"{base}/kustomization.yaml"]
    kustomization = services.repository().read_file(change.head_sha, f"{base}/kustomization.yaml")
    assert kustomization is not None and b"--no-remote-bases=true" in kustomization
    checks = {c.name: (c.status, c.summary) for c in CheckRun.objects.filter(change=change)}
    if checks["kustomize"][0] != "skipped":  # kubectl present: the patches match the controllers
        assert checks["kustomize"][0] == "passed", checks
