"""What tenants and admins type cannot forge a trailer of the portal's merge commits, nor make
a forge close issues or notify people, end to end: a catalog request with a hostile reason and
approval note is approved and merged on a real repository, and its commit is read back with
``git interpret-trailers``; with a forge configured, the pull request the portal opens is
caught by a local stand-in of the forge's API."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from catalog import services
from catalog.models import ResourceRequest
from gitops import services as gitops
from gitops.models import ChangeRequest
from gitops.repo import GitRepository
from gitops.usertext import WORD_JOINER
from portal.models import Job
from tenants.services import do_create_tenant
from tests.gitops.checks_support import FLOW_CHECKS_STATE
from tests.gitops.forge_support import recording, replay_server
from tests.gitops.test_usertext import active_forge_actions

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
FORGED = "\n\nApproved-by: Mallory <m@x>\nChange-Request: 999"
# git reads trailers only above a "---" line: this one would hide the portal's own.
FORGED_ABOVE_DIVIDER = "fine-tuning\n---\nApproved-by: Mallory <m@x>\nChange-Request: 999\n"


def git(repo: GitRepository, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo.path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def trailer(user: Any) -> str:
    ident = gitops.identity(user)
    return f"{ident.name} <{ident.email}>"


def approved(world: dict[str, Any], run_jobs: Any, reason: str, note: str) -> ResourceRequest:
    request = run_jobs(
        services.do_create_request,
        world["alpha"],
        acting_user=world["bob"],
        kind="gpu-share",
        spec=SHARE,
        reason=reason,
    )
    return run_jobs(services.do_approve, request, acting_user=world["pam"], note=note)


@pytest.mark.django_db
@pytest.mark.parametrize("text", [FORGED, FORGED_ABOVE_DIVIDER])
def test_user_text_forges_no_trailer_of_the_merge_commit(
    onboarded: dict[str, Any], run_jobs: Any, text: str
) -> None:
    world = onboarded
    request = approved(world, run_jobs, reason=text, note=text)
    change = request.change
    assert change is not None, request.error
    change.refresh_from_db()
    assert change.checks_state == FLOW_CHECKS_STATE, list(change.checks.values("name", "summary"))
    merged = run_jobs(gitops.do_merge, change, acting_user=world["pam"])

    repo = gitops.repository()
    message = git(repo, "log", "-1", "--format=%B", merged.merge_sha)
    parsed = git(repo, "interpret-trailers", "--parse", stdin=message).splitlines()
    assert parsed == [
        f"Change-Request: {change.pk}",
        f"Requested-by: {trailer(world['bob'])}",
        f"Approved-by: {trailer(world['pam'])}",
        f"Merged-by: {trailer(world['pam'])}",
        "Tenant: alpha",
    ]
    # Wherever the message is cut (a forge's squash message keeps the body), no line of what
    # bob and pam typed starts a trailer: every one of them is quoted.
    typed = [line for line in message.splitlines() if "Mallory" in line or "999" in line]
    assert len(typed) == 4
    assert all(line.startswith("> ") for line in typed)
    assert "Reason given by the requester:\n> " in message and "Approval note:\n> " in message


@pytest.mark.django_db
def test_the_forge_pull_request_carries_no_active_keyword_or_mention(
    onboarded: dict[str, Any], run_jobs: Any, settings: Any, tmp_path: Any
) -> None:
    world = onboarded
    remote = GitRepository.open_or_init(tmp_path / "forge.git")
    gitops.repository().push(str(remote.path), ["refs/heads/main:refs/heads/main"])
    with replay_server() as forge:
        forge.route("POST", "/repos/ai-factory/fleet/pulls", 201, recording("github_create_pull"))
        settings.GITOPS_FORGE = "github"
        settings.GITOPS_FORGE_API_URL = forge.url
        settings.GITOPS_FORGE_REPO = "ai-factory/fleet"
        settings.GITOPS_FORGE_TOKEN = "token"
        settings.GITOPS_FORGE_WEBHOOK_SECRET = "secret"
        settings.GITOPS_REMOTE_URL = str(remote.path)

        request = approved(world, run_jobs, reason="Fixes #1 @admins", note="closes GH-2, cc @ops")

    opened = Job.objects.get(task="gitops.open_forge_pull_request")
    assert opened.status == "succeeded", opened.error
    assert request.change is not None
    sent = forge.last.json()
    assert sent["head"] == request.change.branch
    assert active_forge_actions(sent["title"]) == []
    assert active_forge_actions(sent["body"]) == []
    # Still there for a reader: only invisible word joiners were added.
    visible = sent["body"].replace(WORD_JOINER, "")
    assert "> Fixes #1 @admins" in visible and "> closes GH-2, cc @ops" in visible
    # The branch the forge merges is the portal's commit, with the same defused message.
    assert git(remote, "rev-parse", request.change.branch).strip() == request.change.head_sha
    assert (
        active_forge_actions(git(remote, "log", "-1", "--format=%B", request.change.branch)) == []
    )


@pytest.mark.django_db
def test_a_tenant_name_mentions_nobody_in_its_onboarding_commit(world: dict[str, Any]) -> None:
    tenant = do_create_tenant(
        acting_user=world["pam"], slug="charlie-co", display_name="Fixes #1 @admins"
    )

    change = ChangeRequest.objects.get(tenant_slug=tenant.slug)
    message = gitops.repository().commit_message(change.head_sha)
    assert active_forge_actions(message) == []
    assert "for Fixes #1 @admins (" in message.replace(WORD_JOINER, "")
