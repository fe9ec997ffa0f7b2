"""Gitea (and Forgejo, which keeps Gitea's API): REST API v1 pull requests and webhooks.

API: ``/api/v1/repos/{owner}/{repo}/pulls`` (see the instance's ``/api/swagger``).
Gitea signs each delivery with the hex HMAC-SHA256 of the raw body and sends it as
``X-Gitea-Signature`` (Forgejo sends the same value under that name too); current versions
also send ``X-Hub-Signature-256: sha256=<hex>``. The Gitea header is checked when present,
otherwise the GitHub-style one. A merge arrives as ``X-Gitea-Event: pull_request`` with
``action: closed`` and ``pull_request.merged: true``. Every delivery carries its hook task's
UUID as ``X-Gitea-Delivery`` (services/webhook/deliver.go). Gitea does not retry on its own;
its "replay" button copies the task under a new UUID (models/webhook/hooktask.go
``ReplayHookTask``), so only a delivery resent as is counts as a duplicate here.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitops.forges.base import (
    Fields,
    ForgeProvider,
    RemotePullRequest,
    WebhookEvent,
    WebhookSignatureError,
    header,
    hmac_sha256_hex,
    path_segment,
    same_secret,
    split_owner_repo,
)
from gitops.forges.github import pull_request_event, pull_request_from


class GiteaProvider(ForgeProvider):
    """Pull requests on one Gitea repository (``repo`` is ``"owner/name"``)."""

    name = "Gitea"
    delivery_headers = ("X-Gitea-Delivery",)

    def _configure(self) -> None:
        owner, name = split_owner_repo(self.name, self.repo)
        self._pulls = f"/repos/{path_segment(owner)}/{path_segment(name)}/pulls"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def open_pull_request(
        self, *, head_branch: str, base_branch: str, title: str, body: str
    ) -> RemotePullRequest:
        data = self.request(
            "POST",
            self._pulls,
            {"head": head_branch, "base": base_branch, "title": title, "body": body},
        )
        return self._pull_request(self.fields(data, "pull request"))

    def get_pull_request(self, number: int) -> RemotePullRequest:
        data = self.request("GET", f"{self._pulls}/{int(number)}")
        return self._pull_request(self.fields(data, "pull request"))

    def close_pull_request(self, number: int) -> None:
        self.request("PATCH", f"{self._pulls}/{int(number)}", {"state": "closed"})

    def verify_signature(self, headers: Mapping[str, str], body: bytes) -> None:
        digest = hmac_sha256_hex(self.webhook_secret, body)
        gitea = header(headers, "X-Gitea-Signature")
        if gitea:
            # A wrong Gitea signature is not rescued by another header.
            if not same_secret(digest, gitea.strip()):
                raise WebhookSignatureError("Gitea webhook: X-Gitea-Signature does not match")
            return
        hub = header(headers, "X-Hub-Signature-256")
        if not hub:
            raise WebhookSignatureError(
                "Gitea webhook: X-Gitea-Signature (or X-Hub-Signature-256) is missing"
            )
        if not same_secret("sha256=" + digest, hub.strip()):
            raise WebhookSignatureError("Gitea webhook: X-Hub-Signature-256 does not match")

    def event_from_payload(
        self, headers: Mapping[str, str], payload: object
    ) -> WebhookEvent | None:
        fields = self.webhook_fields(payload)
        if header(headers, "X-Gitea-Event") != "pull_request":
            return None
        if fields.text("action") != "closed":
            return None
        return pull_request_event(fields)

    def _pull_request(self, fields: Fields) -> RemotePullRequest:
        return pull_request_from(fields)
