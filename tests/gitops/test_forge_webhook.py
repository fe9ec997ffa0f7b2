"""The forge webhook endpoint, end to end, for GitHub, Gitea and GitLab.

Each delivery is a recorded real payload (``forge_recordings``) rewritten to be about the
portal's change: its repository, base branch, head branch and pull request number, then
signed the way its forge signs. A signed "merged" delivery marks the change merged and brings
the portal's main level with the forge's (a real bare repository stands in for the forge's
Git side). Copies with another repository, base branch, head branch or delivery id show what
the portal refuses to act on.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, ForgeDelivery
from gitops.repo import GitRepository
from gitops.specs import TenantSpec
from portal.jobs import enqueue
from portal.models import AuditEvent

RECORDINGS = Path(__file__).parent / "forge_recordings"
SECRET = "webhook-secret-for-tests"
REPO = "ai-factory/fleet"
GITLAB_PROJECT_ID = 4242
DELIVERY = "9c1b1e2e-56a3-4f57-9a43-1f0e5f1c0a11"
FORGES = ["github", "gitea", "gitlab"]


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDINGS / f"{name}.json").read_text())
    return data


@pytest.fixture
def forge_remote(settings: Any, tmp_path: Path) -> GitRepository:
    remote = GitRepository.open_or_init(tmp_path / "forge.git")
    settings.GITOPS_REMOTE_URL = str(remote.path)
    settings.GITOPS_FORGE_REPO = REPO
    settings.GITOPS_FORGE_TOKEN = "token"
    settings.GITOPS_FORGE_WEBHOOK_SECRET = SECRET
    return remote


def use_forge(settings: Any, forge: str) -> None:
    settings.GITOPS_FORGE = forge
    settings.GITOPS_FORGE_API_URL = {
        "github": "",
        "gitea": "https://gitea.example/api/v1",
        "gitlab": "https://gitlab.example/api/v4",
    }[forge]


@pytest.fixture
def forge_change(world: dict[str, Any], forge_remote: GitRepository) -> ChangeRequest:
    """An open change whose pull request #1347 the forge's merge button has just merged."""
    fleet = demo_fleet()
    services.ensure_bootstrapped(fleet)
    repo = services.repository()
    repo.push(str(forge_remote.path), ["refs/heads/main:refs/heads/main"])
    change = ChangeRequest.objects.create(
        title="Onboard alpha",
        tenant_slug="alpha",
        base_sha=repo.head("main") or "",
        forge_number=1347,
        forge_url=f"https://github.com/{REPO}/pull/1347",
    )
    ChangeRequest.objects.filter(pk=change.pk).update(branch=services.change_branch(change.pk))
    change.refresh_from_db()
    # What the forge's merge button does: main on the forge moves on by the change's commit.
    forge_remote.commit(
        services.tenant_changes(TenantSpec(slug="alpha"), fleet),
        message="Onboard alpha (#1347)",
        author=services.identity(None),
        branch="main",
        expected_parent=change.base_sha,
    )
    return change


def payload(
    forge: str,
    *,
    number: int,
    head: str,
    merged: bool = True,
    merge_sha: str = "a" * 40,
    base: str = "main",
    repository: str = REPO,
    fork: bool = False,
) -> dict[str, Any]:
    """A recorded delivery of ``forge``, rewritten to be about pull request ``number``."""
    if forge == "gitlab":
        data = recording("gitlab_webhook_mr_merge" if merged else "gitlab_webhook_mr_close")
        attributes = data["object_attributes"]
        attributes.update(iid=number, source_branch=head, target_branch=base)
        attributes["target_project_id"] = GITLAB_PROJECT_ID
        attributes["source_project_id"] = GITLAB_PROJECT_ID + (1 if fork else 0)
        attributes["target"]["path_with_namespace"] = repository
        if merged:
            attributes["merge_commit_sha"] = merge_sha
        return data
    name = {
        ("github", True): "github_webhook_pull_request_closed_merged",
        ("github", False): "github_webhook_pull_request_closed",
        ("gitea", True): "gitea_webhook_pull_request_merged",
        ("gitea", False): "gitea_webhook_pull_request_closed",
    }[(forge, merged)]
    data = recording(name)
    pull = data["pull_request"]
    data["number"] = pull["number"] = number
    pull["base"]["ref"] = base
    pull["head"]["ref"] = head
    pull["base"]["repo"]["full_name"] = repository
    pull["head"]["repo"] = copy.deepcopy(pull["base"]["repo"])
    if fork:
        pull["head"]["repo"]["full_name"] = "mallory/fleet"
    if merged:
        pull["merge_commit_sha"] = merge_sha
    return data


def headers(forge: str, body: bytes, delivery: str | None = DELIVERY) -> dict[str, str]:
    """The headers ``forge`` sends with ``body``, as Django's test client takes them."""
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    if forge == "github":
        sent = {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": "sha256=" + digest}
        if delivery:
            sent["X-GitHub-Delivery"] = delivery
    elif forge == "gitea":
        sent = {"X-Gitea-Event": "pull_request", "X-Gitea-Signature": digest}
        if delivery:
            sent["X-Gitea-Delivery"] = sent["X-GitHub-Delivery"] = delivery
    else:
        sent = {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": SECRET}
        if delivery:
            sent["Idempotency-Key"] = delivery
    return {"HTTP_" + k.upper().replace("-", "_"): v for k, v in sent.items()}


def post(forge: str, data: dict[str, Any], delivery: str | None = DELIVERY) -> Any:
    body = json.dumps(data).encode()
    return Client().post(
        "/gitops/webhook/", body, content_type="application/json", **headers(forge, body, delivery)
    )


def forge_main(remote: GitRepository) -> str:
    sha = remote.head("main")
    assert sha
    return sha


def assert_untouched(change: ChangeRequest) -> None:
    change.refresh_from_db()
    assert (change.status, change.merge_sha) == ("open", "")
    assert not AuditEvent.objects.filter(action__startswith="change.forge").exists()


@pytest.mark.parametrize("forge", FORGES)
def test_it_marks_the_change_merged_from_a_signed_webhook(
    forge: str, settings: Any, forge_change: ChangeRequest, forge_remote: GitRepository
) -> None:
    use_forge(settings, forge)
    if forge == "gitlab":
        settings.GITOPS_FORGE_REPO = str(GITLAB_PROJECT_ID)
    sha = forge_main(forge_remote)

    response = post(forge, payload(forge, number=1347, head=forge_change.branch, merge_sha=sha))

    assert response.status_code == 200, response.content
    assert response.json() == {"status": "merged", "change": forge_change.pk}
    forge_change.refresh_from_db()
    assert (forge_change.status, forge_change.merge_sha) == ("merged", sha)
    assert forge_change.apply_state == "pending"
    assert services.repository().head("main") == sha
    audit = AuditEvent.objects.get(action="change.forge_merge")
    assert audit.diff["delivery"] == [None, DELIVERY]


@pytest.mark.parametrize("forge", FORGES)
def test_it_marks_the_change_closed_when_the_pull_request_is_closed(
    forge: str, settings: Any, forge_change: ChangeRequest
) -> None:
    use_forge(settings, forge)

    response = post(forge, payload(forge, number=1347, head=forge_change.branch, merged=False))

    assert response.status_code == 200, response.content
    forge_change.refresh_from_db()
    assert forge_change.status == "closed"
    assert services.repository().head("main") == forge_change.base_sha


@pytest.mark.parametrize("forge", FORGES)
def test_it_ignores_a_replayed_delivery(
    forge: str, settings: Any, forge_change: ChangeRequest, forge_remote: GitRepository
) -> None:
    use_forge(settings, forge)
    data = payload(forge, number=1347, head=forge_change.branch, merged=False)
    assert post(forge, data).json()["status"] == "closed"

    replay = post(forge, data)

    assert (replay.status_code, replay.json()) == (
        200,
        {"status": "duplicate", "change": forge_change.pk},
    )
    assert ForgeDelivery.objects.count() == 1
    assert AuditEvent.objects.filter(action="change.forge_close").count() == 1
    # Another delivery (a new id) about the same pull request is read, and changes nothing.
    again = post(forge, data, delivery="another-delivery")
    assert again.json() == {"status": "closed", "change": forge_change.pk}
    assert AuditEvent.objects.filter(action="change.forge_close").count() == 1


def test_it_applies_a_resent_delivery_that_was_ignored_the_first_time(
    settings: Any, forge_change: ChangeRequest
) -> None:
    use_forge(settings, "gitea")
    # The forge merged the pull request before the portal stored its number.
    ChangeRequest.objects.filter(pk=forge_change.pk).update(forge_number=None)
    data = payload("gitea", number=1347, head=forge_change.branch, merged=False)
    assert post("gitea", data).status_code == 202
    ChangeRequest.objects.filter(pk=forge_change.pk).update(forge_number=1347)

    resent = post("gitea", data)

    assert resent.json() == {"status": "closed", "change": forge_change.pk}


@pytest.mark.parametrize("forge", FORGES)
def test_it_refuses_a_delivery_without_its_id(
    forge: str, settings: Any, forge_change: ChangeRequest
) -> None:
    use_forge(settings, forge)

    response = post(forge, payload(forge, number=1347, head=forge_change.branch), delivery=None)

    assert response.status_code == 400
    assert "is missing" in response.json()["error"]
    assert_untouched(forge_change)
    assert not ForgeDelivery.objects.exists()


@pytest.mark.parametrize("forge", FORGES)
@pytest.mark.parametrize(
    ("change_", "reason"),
    [
        ({"repository": "ai-factory/other"}, "not in the configured repository"),
        ({"fork": True}, "fork"),
        ({"base": "staging"}, "targets the branch 'staging', not 'main'"),
        ({"head": "feature/faster-gpus"}, "not one of the portal's change branches"),
        ({"number": 7}, "no change request has this pull request"),
    ],
)
def test_it_ignores_pull_requests_that_are_not_the_portals(
    forge: str, settings: Any, forge_change: ChangeRequest, change_: dict[str, Any], reason: str
) -> None:
    use_forge(settings, forge)
    fields: dict[str, Any] = {"number": 1347, "head": forge_change.branch, **change_}

    response = post(forge, payload(forge, **fields))

    # 2xx: the forge must not retry, and GitLab must not disable the hook.
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "ignored"
    assert reason in response.json()["reason"]
    assert_untouched(forge_change)


def test_it_ignores_the_branch_of_another_change_under_this_number(
    settings: Any, forge_change: ChangeRequest
) -> None:
    use_forge(settings, "github")
    other = services.change_branch(forge_change.pk + 1)

    response = post("github", payload("github", number=1347, head=other))

    assert response.status_code == 202
    assert f"is not '{forge_change.branch}'" in response.json()["reason"]
    assert_untouched(forge_change)


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "wrong"])
def test_it_rejects_unsigned_or_forged_deliveries(
    settings: Any, forge_change: ChangeRequest, signature: str | None
) -> None:
    use_forge(settings, "github")
    body = json.dumps(payload("github", number=1347, head=forge_change.branch)).encode()
    sent = headers("github", body)
    del sent["HTTP_X_HUB_SIGNATURE_256"]
    if signature is not None:
        sent["HTTP_X_HUB_SIGNATURE_256"] = signature
    response = Client().post("/gitops/webhook/", body, content_type="application/json", **sent)
    assert response.status_code == 403
    assert_untouched(forge_change)


def test_it_rejects_a_tampered_body_and_bad_json(
    settings: Any, forge_change: ChangeRequest
) -> None:
    use_forge(settings, "github")
    body = json.dumps(payload("github", number=1347, head=forge_change.branch)).encode()
    sent = headers("github", body)
    tampered = body.replace(b"1347", b"1348", 1)
    client = Client()
    assert (
        client.post("/gitops/webhook/", tampered, content_type="application/json", **sent)
    ).status_code == 403
    junk = b"{not json"
    assert (
        client.post(
            "/gitops/webhook/", junk, content_type="application/json", **headers("github", junk)
        )
    ).status_code == 400
    assert_untouched(forge_change)


def test_it_answers_404_without_a_forge(db: None, settings: Any) -> None:
    settings.GITOPS_FORGE = ""
    assert (
        Client().post("/gitops/webhook/", b"{}", content_type="application/json").status_code == 404
    )


def test_it_forgets_old_delivery_ids_on_the_maintenance_schedule(
    settings: Any, forge_change: ChangeRequest, django_capture_on_commit_callbacks: Any
) -> None:
    use_forge(settings, "github")
    now = timezone.now()
    old = ForgeDelivery.objects.create(
        forge="GitHub",
        delivery="old",
        number=1,
        kind="closed",
        received_at=now - timedelta(days=31),
    )
    recent = ForgeDelivery.objects.create(
        forge="GitHub",
        delivery="recent",
        number=2,
        kind="closed",
        received_at=now - timedelta(days=29),
    )

    with django_capture_on_commit_callbacks(execute=True):
        job = enqueue("gitops.maintain")

    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert "1 old forge deliveries forgotten" in job.log
    assert list(ForgeDelivery.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not ForgeDelivery.objects.filter(pk=old.pk).exists()
