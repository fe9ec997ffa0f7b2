"""GitHub (github.com or GitHub Enterprise Server): REST API v3 and ``pull_request`` webhooks.

API: https://docs.github.com/en/rest/pulls/pulls. Webhooks are signed with
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`` and name the event in
``X-GitHub-Event``; a merge arrives as ``pull_request`` with ``action: closed`` and
``pull_request.merged: true``. Every delivery carries ``X-GitHub-Delivery``, a GUID of the
event that a redelivery keeps (docs.github.com, "Webhook events and payloads", delivery
headers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class GitHubProvider(ForgeProvider):
    """Pull requests on one GitHub repository (``repo`` is ``"owner/name"``)."""

    name = "GitHub"
    default_api_url = "https://api.github.com"
    delivery_headers = ("X-GitHub-Delivery",)

    def _configure(self) -> None:
        owner, name = split_owner_repo(self.name, self.repo)
        self._pulls = f"/repos/{path_segment(owner)}/{path_segment(name)}/pulls"

    def auth_headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def open_pull_request(
        self, *, head_branch: str, base_branch: str, title: str, body: str
    ) -> RemotePullRequest:
        data = self.request(
            "POST",
            self._pulls,
            {"title": title, "head": head_branch, "base": base_branch, "body": body},
        )
        return self._pull_request(self.fields(data, "pull request"))

    def get_pull_request(self, number: int) -> RemotePullRequest:
        data = self.request("GET", f"{self._pulls}/{int(number)}")
        return self._pull_request(self.fields(data, "pull request"))

    def close_pull_request(self, number: int) -> None:
        self.request("PATCH", f"{self._pulls}/{int(number)}", {"state": "closed"})

    def verify_signature(self, headers: Mapping[str, str], body: bytes) -> None:
        given = header(headers, "X-Hub-Signature-256")
        if not given:
            raise WebhookSignatureError("GitHub webhook: X-Hub-Signature-256 is missing")
        expected = "sha256=" + hmac_sha256_hex(self.webhook_secret, body)
        if not same_secret(expected, given.strip()):
            raise WebhookSignatureError("GitHub webhook: X-Hub-Signature-256 does not match")

    def event_from_payload(
        self, headers: Mapping[str, str], payload: object
    ) -> WebhookEvent | None:
        fields = self.webhook_fields(payload)
        # Pings and every other event are acknowledged and ignored.
        if header(headers, "X-GitHub-Event") != "pull_request":
            return None
        if fields.text("action") != "closed":
            return None
        return pull_request_event(fields)

    def _pull_request(self, fields: Fields) -> RemotePullRequest:
        return pull_request_from(fields)


# Gitea's pull request API and webhook follow GitHub's shapes; both providers use these.
def pull_request_event(fields: Fields) -> WebhookEvent:
    """A "closed" pull_request delivery: merged, or closed without merging."""
    merged = fields.flag("pull_request.merged")
    repository = fields.text("pull_request.base.repo.full_name")
    # A fork's head repo is its own; it is null once the fork is deleted.
    head_repository = fields.optional_text("pull_request.head.repo.full_name")
    return WebhookEvent(
        kind="merged" if merged else "closed",
        number=fields.integer("pull_request.number"),
        # Before a merge, merge_commit_sha is a throw-away test merge: ignore it.
        merge_sha=fields.text("pull_request.merge_commit_sha") if merged else None,
        head_branch=fields.text("pull_request.head.ref"),
        url=fields.text("pull_request.html_url"),
        base_branch=fields.text("pull_request.base.ref"),
        repository=repository,
        repository_id=fields.integer("pull_request.base.repo.id"),
        from_fork=(head_repository or "").lower() != repository.lower(),
    )


def pull_request_from(fields: Fields) -> RemotePullRequest:
    merged = fields.flag("merged")
    state: Any = "merged" if merged else fields.text("state")
    if state not in ("open", "closed", "merged"):
        state = "closed"
    return RemotePullRequest(
        number=fields.integer("number"),
        url=fields.text("html_url"),
        state=state,
        merged=merged,
        merge_sha=fields.optional_text("merge_commit_sha") if merged else None,
    )
