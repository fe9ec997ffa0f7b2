"""GitLab (gitlab.com or self-managed): REST API v4 merge requests and Merge Request Hooks.

API: https://docs.gitlab.com/api/merge_requests/ with ``api_url`` ending in ``/api/v4``.
GitLab does not sign webhooks: it sends the configured secret token as ``X-Gitlab-Token``,
which is compared in constant time. A merge arrives as ``X-Gitlab-Event: Merge Request Hook``
with ``object_attributes.action: merge``. The delivery id is ``Idempotency-Key``, which
GitLab keeps when it retries a delivery (gitlab-org/gitlab!160952, app/services/
web_hook_service.rb); versions before it send only ``X-Gitlab-Event-UUID`` (the recursion
detection id, new for each delivery), which still catches a delivery that is replayed as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from gitops.forges.base import (
    Fields,
    ForgeProvider,
    RemotePullRequest,
    WebhookEvent,
    WebhookSignatureError,
    header,
    path_segment,
    same_secret,
)

# GitLab's merge request states, folded into ours ("locked" is a merge in progress).
_STATES: dict[str, Any] = {
    "opened": "open",
    "locked": "open",
    "closed": "closed",
    "merged": "merged",
}
_ACTIONS: dict[str, Any] = {"merge": "merged", "close": "closed"}


class GitLabProvider(ForgeProvider):
    """Merge requests on one GitLab project (``repo`` is its numeric id or its path)."""

    name = "GitLab"
    delivery_headers = ("Idempotency-Key", "X-Gitlab-Event-UUID")

    def _configure(self) -> None:
        # "group/project" must travel as one segment, "group%2Fproject"; an already encoded
        # value is decoded first so it is not encoded twice.
        project = path_segment(unquote(self.repo.strip().strip("/")))
        self._merge_requests = f"/projects/{project}/merge_requests"

    def auth_headers(self) -> dict[str, str]:
        return {"PRIVATE-TOKEN": self.token}

    def open_pull_request(
        self, *, head_branch: str, base_branch: str, title: str, body: str
    ) -> RemotePullRequest:
        data = self.request(
            "POST",
            self._merge_requests,
            {
                "source_branch": head_branch,
                "target_branch": base_branch,
                "title": title,
                "description": body,
            },
        )
        return self._merge_request(self.fields(data, "merge request"))

    def get_pull_request(self, number: int) -> RemotePullRequest:
        data = self.request("GET", f"{self._merge_requests}/{int(number)}")
        return self._merge_request(self.fields(data, "merge request"))

    def close_pull_request(self, number: int) -> None:
        self.request("PUT", f"{self._merge_requests}/{int(number)}", {"state_event": "close"})

    def verify_signature(self, headers: Mapping[str, str], body: bytes) -> None:
        given = header(headers, "X-Gitlab-Token")
        if not given:
            raise WebhookSignatureError("GitLab webhook: X-Gitlab-Token is missing")
        if not same_secret(self.webhook_secret, given):
            raise WebhookSignatureError("GitLab webhook: X-Gitlab-Token does not match")

    def event_from_payload(
        self, headers: Mapping[str, str], payload: object
    ) -> WebhookEvent | None:
        fields = self.webhook_fields(payload)
        if header(headers, "X-Gitlab-Event") != "Merge Request Hook":
            return None
        kind = _ACTIONS.get(fields.optional_text("object_attributes.action") or "")
        if kind is None:
            # open, update, approved, ...: nothing the portal acts on.
            return None
        return WebhookEvent(
            kind=kind,
            number=fields.integer("object_attributes.iid"),
            merge_sha=(
                fields.optional_text("object_attributes.merge_commit_sha")
                if kind == "merged"
                else None
            ),
            head_branch=fields.text("object_attributes.source_branch"),
            url=fields.text("object_attributes.url"),
            base_branch=fields.text("object_attributes.target_branch"),
            repository=fields.text("object_attributes.target.path_with_namespace"),
            repository_id=fields.integer("object_attributes.target_project_id"),
            from_fork=(
                fields.integer("object_attributes.source_project_id")
                != fields.integer("object_attributes.target_project_id")
            ),
        )

    def is_configured_repository(self, event: WebhookEvent) -> bool:
        # GITOPS_FORGE_REPO is the project's numeric id or its path (encoded or not); GitLab
        # resolves paths case-insensitively.
        configured = unquote(self.repo.strip().strip("/"))
        if configured.isdigit():
            return event.repository_id == int(configured)
        return event.repository.lower() == configured.lower()

    def _merge_request(self, fields: Fields) -> RemotePullRequest:
        state = _STATES.get(fields.text("state"), "closed")
        merged = state == "merged"
        merge_sha = None
        if merged:
            # A squash merge leaves its commit in squash_commit_sha, not merge_commit_sha.
            merge_sha = fields.optional_text("merge_commit_sha") or fields.optional_text(
                "squash_commit_sha"
            )
        return RemotePullRequest(
            number=fields.integer("iid"),
            url=fields.text("web_url"),
            state=state,
            merged=merged,
            merge_sha=merge_sha,
        )
