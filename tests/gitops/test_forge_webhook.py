"""The forge webhook endpoint, end to end: a signed GitHub "merged" delivery for a change's pull
request marks the change merged and brings the portal's main level with the forge's."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest
from gitops.repo import GitRepository
from gitops.specs import TenantSpec
from portal.models import AuditEvent

RECORDINGS = Path(__file__).parent / "forge_recordings"
SECRET = "webhook-secret-for-tests"


@pytest.fixture
def forge_change(world: dict[str, Any], settings: Any, tmp_path: Path) -> ChangeRequest:
    remote = GitRepository.open_or_init(tmp_path / "forge.git")
    settings.GITOPS_REMOTE_URL = str(remote.path)
    settings.GITOPS_FORGE = "github"
    settings.GITOPS_FORGE_REPO = "ai-factory/fleet"
    settings.GITOPS_FORGE_TOKEN = "token"
    settings.GITOPS_FORGE_WEBHOOK_SECRET = SECRET
    settings.PORTAL_TASK_RUNNER = "eager"
    fleet = demo_fleet()
    services.ensure_bootstrapped(fleet)
    repo = services.repository()
    repo.push(str(remote.path), ["refs/heads/main:refs/heads/main"])
    change = ChangeRequest.objects.create(
        title="Onboard alpha",
        tenant_slug="alpha",
        base_sha=repo.head("main") or "",
        forge_number=1347,
        forge_url="https://github.com/ai-factory/fleet/pull/1347",
    )
    # What the forge's merge button does: main on the forge moves on by the change's commit.
    changes = services.tenant_changes(TenantSpec(slug="alpha"), fleet)
    remote.commit(
        changes,
        message="Onboard alpha (#1347)",
        author=services.identity(None),
        branch="main",
        expected_parent=change.base_sha,
    )
    return change


def _delivery(number: int, merge_sha: str) -> bytes:
    payload = json.loads(
        (RECORDINGS / "github_webhook_pull_request_closed_merged.json").read_text()
    )
    payload["number"] = number
    payload["pull_request"]["number"] = number
    payload["pull_request"]["merge_commit_sha"] = merge_sha
    return json.dumps(payload).encode()


def _post(body: bytes, signature: str | None) -> Any:
    headers = {"HTTP_X_GITHUB_EVENT": "pull_request"}
    if signature is not None:
        headers["HTTP_X_HUB_SIGNATURE_256"] = signature
    return Client().post("/gitops/webhook/", body, content_type="application/json", **headers)


def _sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_it_marks_the_change_merged_from_a_signed_webhook(
    forge_change: ChangeRequest, tmp_path: Path
) -> None:
    forge_main = GitRepository.open_or_init(tmp_path / "forge.git").head("main")
    assert forge_main
    body = _delivery(1347, forge_main)
    response = _post(body, _sign(body))
    assert response.status_code == 200, response.content
    forge_change.refresh_from_db()
    assert (forge_change.status, forge_change.merge_sha) == ("merged", forge_main)
    assert forge_change.apply_state == "pending"
    assert services.repository().head("main") == forge_main
    assert AuditEvent.objects.filter(action="change.forge_merge").exists()


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "wrong"])
def test_it_rejects_unsigned_or_forged_deliveries(
    forge_change: ChangeRequest, signature: str | None
) -> None:
    body = _delivery(1347, "a" * 40)
    response = _post(body, signature)
    assert response.status_code == 403
    forge_change.refresh_from_db()
    assert forge_change.status == "open"


def test_it_rejects_a_tampered_body_and_bad_json(forge_change: ChangeRequest) -> None:
    body = _delivery(1347, "a" * 40)
    assert _post(body.replace(b"1347", b"1348", 1), _sign(body)).status_code == 403
    assert _post(b"{not json", _sign(b"{not json")).status_code == 400
    forge_change.refresh_from_db()
    assert forge_change.status == "open"


def test_it_answers_404_without_a_forge(db: None, settings: Any) -> None:
    settings.GITOPS_FORGE = ""
    assert (
        Client().post("/gitops/webhook/", b"{}", content_type="application/json").status_code == 404
    )
