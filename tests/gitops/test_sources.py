"""Tenants' Flux sources: per-tenant projection repositories and per-tenant tokens.

Driven by the real git client over a live server: a tenant's token clones its own projection
and nothing else, not the fleet repository, not another tenant's, and no object of either,
even when asked for by id.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from gitops import sources
from gitops.applied import FluxReport, on_main
from gitops.repo import GitRepository, Identity, InvalidPath
from portal.models import AuditEvent
from tests.gitops.test_githttp import git

PLATFORM = "platform-token-0123456789"
ALICE = Identity("Alice Admin", "alice@example.com")


@pytest.fixture
def fleet(settings: Any) -> GitRepository:
    """main with two tenants (each with a platform-owned file and workloads) and an open
    change branch holding a file nobody outside the platform may read."""
    settings.GITOPS_HTTP_TOKENS = [PLATFORM]
    repo = GitRepository.open_or_init(settings.GITOPS_REPO_PATH)
    main = repo.commit(
        {
            "clusters/ai-factory/tenants.yaml": b"kind: Kustomization\n",
            "tenants/alpha/quota.yaml": b"gpu: 4\n",
            "tenants/alpha/workloads/kustomization.yaml": b"resources: [chat.yaml]\n",
            "tenants/alpha/workloads/chat.yaml": b"kind: InferenceService\n",
            "tenants/bravo/quota.yaml": b"gpu: 2\n",
            "tenants/bravo/workloads/kustomization.yaml": b"resources: [risk.yaml]\n",
            "tenants/bravo/workloads/risk.yaml": b"kind: InferenceService # bravo's secret\n",
        },
        message="Bootstrap\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )
    repo.create_branch("change/7", at=main)
    repo.commit(
        {"tenants/alpha/workloads/next.yaml": b"kind: Unreviewed\n"},
        message="Open change\n",
        author=ALICE,
        branch="change/7",
        expected_parent=main,
    )
    sources.update_projections(repo)
    return repo


def url(live_server: Any, name: str, token: str | None) -> str:
    host = live_server.url.removeprefix("http://")
    userinfo = f"flux:{token}@" if token is not None else ""
    return f"http://{userinfo}{host}/git/{name}.git"


def files_of(clone: Path) -> set[str]:
    return {
        str(p.relative_to(clone)) for p in clone.rglob("*") if p.is_file() and ".git" not in p.parts
    }


def object_id(repo: GitRepository, rev: str, path: str = "") -> str:
    """The id of a commit (no path) or a blob, read with git itself."""
    spec = f"{rev}:{path}" if path else rev
    result = git(f"--git-dir={repo.path}", "rev-parse", spec)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.django_db(transaction=True)
def test_a_tenant_token_clones_only_its_own_workloads(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    token = sources.issue_token("alpha", acting_user=None)
    clone = tmp_path / "alpha"
    result = git("clone", "-q", url(live_server, "tenants/alpha", token), str(clone))
    assert result.returncode == 0, result.stderr
    assert files_of(clone) == {
        "tenants/alpha/workloads/kustomization.yaml",
        "tenants/alpha/workloads/chat.yaml",
    }
    # The projection names the main commit it was made from, for gitops.applied.
    log = git("log", "-1", "--format=%B", cwd=clone).stdout
    assert f"Projected-from: {fleet.head('main')}" in log
    refs = git("ls-remote", url(live_server, "tenants/alpha", token)).stdout.split()
    assert [r for r in refs if r.startswith("refs/")] == ["refs/heads/main"]


@pytest.mark.django_db(transaction=True)
def test_a_tenant_token_reads_no_other_repository(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    alpha = sources.issue_token("alpha", acting_user=None)
    sources.issue_token("bravo", acting_user=None)
    for name in ("tenants/bravo", "fleet", "tenants/nobody"):
        result = git("clone", "-q", url(live_server, name, alpha), str(tmp_path / name))
        assert result.returncode != 0, name
        assert "not found" in result.stderr, result.stderr
    unknown = git(
        "clone", "-q", url(live_server, "tenants/alpha", "aifsrc_guess"), str(tmp_path / "x")
    )
    assert unknown.returncode != 0
    assert "Authentication failed" in unknown.stderr or "401" in unknown.stderr


@pytest.mark.django_db(transaction=True)
def test_a_tenant_token_cannot_fetch_a_foreign_object_by_id(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    token = sources.issue_token("alpha", acting_user=None)
    clone = tmp_path / "alpha"
    assert git("clone", "-q", url(live_server, "tenants/alpha", token), str(clone)).returncode == 0
    foreign = {
        "bravo's workload": object_id(fleet, "main", "tenants/bravo/workloads/risk.yaml"),
        "alpha's platform-owned file": object_id(fleet, "main", "tenants/alpha/quota.yaml"),
        "the main commit": object_id(fleet, "main"),
        "an open change": object_id(fleet, "change/7"),
        "a file of an open change": object_id(
            fleet, "change/7", "tenants/alpha/workloads/next.yaml"
        ),
    }
    for what, sha in foreign.items():
        for version in ("2", "0"):
            result = git(
                "-c", f"protocol.version={version}", "fetch", "-q", "origin", sha, cwd=clone
            )
            assert result.returncode != 0, f"{what} was served over protocol v{version}"
        assert git("cat-file", "-e", sha, cwd=clone).returncode != 0, what

    # The same request against the fleet repository is served: git hands out any object it
    # holds by id, which is why tenants read a repository that holds only their own files.
    platform = tmp_path / "platform"
    assert git("clone", "-q", url(live_server, "fleet", PLATFORM), str(platform)).returncode == 0
    served = git("fetch", "-q", "origin", foreign["an open change"], cwd=platform)
    assert served.returncode == 0, served.stderr


@pytest.mark.django_db(transaction=True)
def test_the_platform_token_reads_every_projection(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    clone = tmp_path / "bravo"
    result = git("clone", "-q", url(live_server, "tenants/bravo", PLATFORM), str(clone))
    assert result.returncode == 0, result.stderr
    assert "tenants/bravo/workloads/risk.yaml" in files_of(clone)


@pytest.mark.django_db(transaction=True)
def test_a_rotated_token_stops_working(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    old = sources.issue_token("alpha", acting_user=None)
    new = sources.issue_token("alpha", acting_user=None)
    refused = git("ls-remote", url(live_server, "tenants/alpha", old))
    assert refused.returncode != 0
    assert git("ls-remote", url(live_server, "tenants/alpha", new)).returncode == 0
    actions = list(
        AuditEvent.objects.filter(tenant_slug="alpha")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["source_token.issue", "source_token.rotate"]


@pytest.mark.django_db
def test_a_projection_refuses_push_and_answers_401_without_a_token(
    fleet: GitRepository, client: Client
) -> None:
    token = sources.issue_token("alpha", acting_user=None)
    anonymous = client.get("/git/tenants/alpha.git/info/refs", {"service": "git-upload-pack"})
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Basic realm="fleet"'
    auth = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"x:{token}".encode()).decode()}
    push = client.get("/git/tenants/alpha.git/info/refs", {"service": "git-receive-pack"}, **auth)
    assert push.status_code == 403
    assert client.post("/git/tenants/alpha.git/git-receive-pack", **auth).status_code == 403


@pytest.mark.django_db
def test_projections_are_deterministic_and_follow_main(fleet: GitRepository, settings: Any) -> None:
    first = GitRepository(sources.projection_path("alpha")).head("main")
    assert first is not None
    # Made again from scratch, the projection is the same commit.
    elsewhere = settings.GITOPS_REPO_PATH.parent / "again"
    settings.GITOPS_TENANT_REPOS_DIR = str(elsewhere)
    assert sources.update_projection(fleet, "alpha", fleet.head("main") or "") == first
    # A change outside the tenant's workloads makes no new projection commit.
    main = fleet.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 8\n"},
        message="More quota\n",
        author=ALICE,
        branch="main",
        expected_parent=fleet.head("main"),
    )
    assert sources.update_projection(fleet, "alpha", main) == first
    # One inside it does, naming the main commit.
    main = fleet.commit(
        {"tenants/alpha/workloads/chat.yaml": b"kind: InferenceService # v2\n"},
        message="New model\n",
        author=ALICE,
        branch="main",
        expected_parent=main,
    )
    second = sources.update_projection(fleet, "alpha", main)
    assert second not in (None, first)
    assert sources.main_commit("alpha", second or "") == main
    assert sources.main_commit("alpha", main) is None  # not a projection commit
    # Offboarded: the projection goes with the tenant's directory.
    gone = fleet.commit(
        dict.fromkeys(fleet.read_tree(main, "tenants/alpha/")),
        message="Offboard alpha\n",
        author=ALICE,
        branch="main",
        expected_parent=main,
    )
    assert sources.update_projection(fleet, "alpha", gone) is None
    assert not sources.projection_path("alpha").exists()


@pytest.mark.django_db
def test_applied_reads_a_projection_revision_as_the_main_commit_it_projects(
    fleet: GitRepository,
) -> None:
    projected = GitRepository(sources.projection_path("alpha")).head("main")
    report = FluxReport("alpha", "alpha-workloads", "True", applied_sha=projected)
    assert on_main(report).applied_sha == fleet.head("main")
    platform = FluxReport("flux-system", "tenants", "True", applied_sha=fleet.head("main"))
    assert on_main(platform) == platform


def test_bad_slugs_name_no_repository(settings: Any) -> None:
    for name in ("tenants/../fleet", "tenants/Alpha", "tenants/", "other/alpha", "tenants/a/b"):
        assert sources.served(name) is None, name
    with pytest.raises(ValueError, match="not a tenant slug"):
        sources.projection_path("../x")


def test_a_projection_holds_the_clusters_bindings_and_still_nothing_else(
    fleet: GitRepository, settings: Any
) -> None:
    main = fleet.commit(
        {"tenants/alpha/cluster-access/dev/bindings.yaml": b"kind: ClusterRoleBinding\n"},
        message="Bob may use dev\n",
        author=ALICE,
        branch="main",
        expected_parent=fleet.head("main"),
    )
    tip = sources.update_projection(fleet, "alpha", main)
    assert tip is not None
    projected = GitRepository(sources.projection_path("alpha")).read_tree(tip)
    # The access Kustomization in the tenant's namespace reads its directory from here.
    assert sorted(projected) == [
        "tenants/alpha/cluster-access/dev/bindings.yaml",
        "tenants/alpha/workloads/chat.yaml",
        "tenants/alpha/workloads/kustomization.yaml",
    ]
    assert sources.main_commit("alpha", tip) == main
    with pytest.raises(InvalidPath, match="is inside"):
        GitRepository(sources.projection_path("alpha")).project(
            fleet,
            main,
            ["tenants/alpha", "tenants/alpha/workloads"],
            branch="main",
            message="m",
            committer=ALICE,
        )
