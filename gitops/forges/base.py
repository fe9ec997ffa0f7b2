"""What every forge client does: open, read and close a pull request, and read its webhooks.

A provider speaks one forge's REST API with ``requests`` and turns the forge's answers and
webhook deliveries into the two plain values below, so ``gitops.services`` never sees a
forge-specific shape. Everything the forge sends is checked here: an HTTP error becomes a
``ForgeError`` naming the forge, the status and the forge's own message; a webhook whose
signature does not verify is a ``WebhookSignatureError``; a verified webhook that is not the
JSON we expect, or lacks the delivery id its forge always sends, is a ``WebhookPayloadError``;
a verified pull request event of another repository (an organisation-wide hook, a secret
shared between repositories) or from a fork is a ``WebhookForeignError``. None of them is
ever a ``KeyError``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal
from urllib.parse import quote

import requests
from django.core.exceptions import ImproperlyConfigured

PullRequestState = Literal["open", "closed", "merged"]
WebhookKind = Literal["merged", "closed"]

DEFAULT_TIMEOUT = 10.0
# A forge's error text is shown to a reviewer; a proxy's HTML error page is not worth more.
_MAX_MESSAGE = 500
# Delivery ids are UUIDs (GitHub's GUID, Gitea's and GitLab's UUIDs); anything much longer or
# outside printable ASCII is not one, and is not worth storing.
_DELIVERY_ID = re.compile(r"[\x21-\x7e]{1,100}")


class ForgeError(Exception):
    """The forge's API refused a request or could not be reached."""

    def __init__(self, forge: str, status: int | None, message: str) -> None:
        self.forge = forge
        self.status = status
        self.message = message
        where = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{forge} API error{where}: {message}")


class WebhookError(Exception):
    """A webhook delivery the portal must refuse."""


class WebhookSignatureError(WebhookError):
    """The delivery is unsigned or its signature does not match: it did not come from the forge."""


class WebhookPayloadError(WebhookError):
    """The delivery is signed but its body is not the JSON the forge documents."""


class WebhookForeignError(WebhookError):
    """A verified pull request event that is not about the configured repository's own
    branches: another repository, or a pull request from a fork. Not the portal's business."""


@dataclass(frozen=True)
class RemotePullRequest:
    """A pull request (GitLab: merge request) as the forge reports it.

    ``state`` folds the forge's vocabulary into three words; ``merge_sha`` is the commit the
    merge left on the base branch, when the forge says so.
    """

    number: int
    url: str
    state: PullRequestState
    merged: bool = False
    merge_sha: str | None = None


@dataclass(frozen=True)
class WebhookEvent:
    """A pull request was merged or closed without merging, per a verified webhook.

    ``repository`` and ``repository_id`` name the repository the pull request targets, as the
    forge does ("owner/name", GitLab's "group/project" and numeric project id);
    ``from_fork`` says the head branch lives in another repository. ``delivery`` is the
    forge's id of this delivery, the same when the forge sends it again.
    """

    kind: WebhookKind
    number: int
    merge_sha: str | None
    head_branch: str
    url: str
    base_branch: str
    repository: str
    repository_id: int | None = None
    from_fork: bool = False
    delivery: str = ""


def header(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]`` compared case-insensitively, as HTTP header names are."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def hmac_sha256_hex(secret: str, body: bytes) -> str:
    """The lowercase hex HMAC-SHA256 of ``body``: what GitHub and Gitea sign with."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def same_secret(expected: str, given: str) -> bool:
    """Constant-time comparison that also copes with non-ASCII junk in a header."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def path_segment(value: str) -> str:
    """One URL path segment: a ``/``, ``?`` or ``#`` in a name cannot change the endpoint."""
    return quote(value, safe="")


def split_owner_repo(forge: str, repo: str) -> tuple[str, str]:
    """``"owner/name"`` as two segments; anything else is a configuration mistake."""
    parts = repo.strip().strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise ImproperlyConfigured(
            f"GITOPS_FORGE_REPO for {forge} must be 'owner/name', not {repo!r}."
        )
    return parts[0], parts[1]


class Fields:
    """Typed reads from a decoded JSON object; a missing or mistyped field raises ``error``.

    ``what`` names the document in the message ("GitHub webhook"), and each field is named by
    its dotted path, so the message says exactly what was wrong with which delivery.
    """

    def __init__(self, data: object, what: str, error: Callable[[str], Exception]) -> None:
        if not isinstance(data, dict):
            raise error(f"{what}: expected a JSON object, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.what = what
        self.error = error

    def _get(self, path: str, *, required: bool) -> object:
        node: object = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or node.get(part) is None:
                if required:
                    raise self.error(f"{self.what}: {path} is missing")
                return None
            node = node[part]
        return node

    def text(self, path: str) -> str:
        value = self._get(path, required=True)
        if not isinstance(value, str):
            raise self.error(f"{self.what}: {path} must be a string")
        return value

    def optional_text(self, path: str) -> str | None:
        value = self._get(path, required=False)
        if value is not None and not isinstance(value, str):
            raise self.error(f"{self.what}: {path} must be a string")
        return value or None

    def integer(self, path: str) -> int:
        value = self._get(path, required=True)
        # bool is an int to Python, never a pull request number to a forge.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(f"{self.what}: {path} must be an integer")
        return value

    def flag(self, path: str) -> bool:
        value = self._get(path, required=False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(f"{self.what}: {path} must be true or false")
        return value


def error_message(response: requests.Response) -> str:
    """The forge's own explanation of an error response, in one line.

    GitHub says ``{"message": "Validation Failed", "errors": [{"message": ...}]}``, GitLab
    ``{"message": "..."}`` or ``{"message": ["..."]}`` or ``{"error": "..."}``, Gitea
    ``{"message": "...", "url": ...}``; anything else falls back to the body text.
    """
    try:
        data = response.json()
    except ValueError:
        data = None
    parts: list[str] = []
    if isinstance(data, dict):
        for key in ("message", "error"):
            parts.extend(_flatten(data.get(key)))
        errors = data.get("errors")
        for item in errors if isinstance(errors, list) else []:
            if isinstance(item, dict) and "message" not in item:
                # GitHub's structured form: {"resource": ..., "field": ..., "code": ...}.
                item = " ".join(str(item[k]) for k in ("resource", "field", "code") if k in item)
            parts.extend(_flatten(item.get("message") if isinstance(item, dict) else item))
    text = ": ".join(dict.fromkeys(p for p in parts if p))
    if not text:
        text = response.text.strip() or response.reason or "no message"
    return text[:_MAX_MESSAGE]


def _flatten(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for item in value for v in _flatten(item)]
    if isinstance(value, dict):
        # GitLab reports field errors as {"field": ["is invalid"]}.
        return [f"{k} {'; '.join(_flatten(v))}" for k, v in value.items()]
    return []


class ForgeProvider(ABC):
    """One forge's pull request API and webhooks, for one repository.

    Subclasses give the forge's paths, headers and JSON shapes; this class does the HTTP,
    the error handling and the order of webhook checks (signature first, then JSON).
    """

    name: ClassVar[str]
    default_api_url: ClassVar[str] = ""

    def __init__(
        self,
        *,
        api_url: str = "",
        repo: str,
        token: str,
        webhook_secret: str,
        session: requests.Session | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        api_url = (api_url or self.default_api_url).rstrip("/")
        if not api_url:
            raise ImproperlyConfigured(f"GITOPS_FORGE_API_URL is required for {self.name}.")
        self.api_url = api_url
        self.repo = repo
        self.token = token
        self.webhook_secret = webhook_secret
        self.session = session or requests.Session()
        self.timeout = timeout
        self._configure()

    @abstractmethod
    def _configure(self) -> None:
        """Derive what the provider needs from ``repo`` (API paths); runs at the end of init."""

    @abstractmethod
    def auth_headers(self) -> dict[str, str]:
        """Headers that authenticate a request (never logged, never in an error)."""

    @abstractmethod
    def open_pull_request(
        self, *, head_branch: str, base_branch: str, title: str, body: str
    ) -> RemotePullRequest:
        """Open a pull request from ``head_branch`` into ``base_branch``."""

    @abstractmethod
    def get_pull_request(self, number: int) -> RemotePullRequest:
        """The pull request's current state, merge commit included once merged."""

    @abstractmethod
    def close_pull_request(self, number: int) -> None:
        """Close the pull request without merging it."""

    @abstractmethod
    def verify_signature(self, headers: Mapping[str, str], body: bytes) -> None:
        """Raise ``WebhookSignatureError`` unless the forge signed exactly these bytes."""

    @abstractmethod
    def event_from_payload(
        self, headers: Mapping[str, str], payload: object
    ) -> WebhookEvent | None:
        """The merge or close a verified delivery reports, or None for anything else."""

    # The headers that carry the delivery id, most stable first (kept across the forge's own
    # retries); the forge always sends at least one of them.
    delivery_headers: ClassVar[tuple[str, ...]]

    def delivery_id(self, headers: Mapping[str, str]) -> str:
        """The forge's id of this delivery; a delivery without one is refused."""
        for name in self.delivery_headers:
            value = (header(headers, name) or "").strip()
            if value:
                if not _DELIVERY_ID.fullmatch(value):
                    raise WebhookPayloadError(f"{self.name} webhook: {name} is not a delivery id")
                return value
        raise WebhookPayloadError(
            f"{self.name} webhook: {' or '.join(self.delivery_headers)} is missing"
        )

    def is_configured_repository(self, event: WebhookEvent) -> bool:
        """Whether ``event`` is about ``repo``. "owner/name" on GitHub and Gitea, where names
        are case-insensitive; GitLab overrides this for numeric project ids."""
        return event.repository.lower() == self.repo.strip().strip("/").lower()

    def parse_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent | None:
        """Verify a webhook delivery, then read it.

        Returns the merge or close it reports, or None for deliveries the portal does not act
        on (pings, other events, other actions). A merge or close of a pull request in another
        repository, or from a fork, raises ``WebhookForeignError``.
        """
        if not self.webhook_secret:
            # An empty secret would make every forged delivery "verify": refuse instead.
            raise WebhookSignatureError(
                "no webhook secret is configured (GITOPS_FORGE_WEBHOOK_SECRET)"
            )
        self.verify_signature(headers, body)
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise WebhookPayloadError(f"{self.name} webhook: body is not JSON ({exc})") from exc
        delivery = self.delivery_id(headers)
        event = self.event_from_payload(headers, payload)
        if event is None:
            return None
        if not self.is_configured_repository(event):
            raise WebhookForeignError(
                f"{self.name} webhook: pull request #{event.number} is in {event.repository},"
                f" not in the configured repository {self.repo}"
            )
        if event.from_fork:
            raise WebhookForeignError(
                f"{self.name} webhook: pull request #{event.number} comes from a fork,"
                " not from a branch of the configured repository"
            )
        return replace(event, delivery=delivery)

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> object:
        """Call the API and return the decoded JSON body (None when there is none)."""
        url = self.api_url + path
        headers = {"Accept": "application/json", **self.auth_headers()}
        try:
            response = self.session.request(
                method, url, json=payload, headers=headers, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise ForgeError(self.name, None, f"{method} {path}: {exc}") from exc
        if not 200 <= response.status_code < 300:
            raise ForgeError(self.name, response.status_code, error_message(response))
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ForgeError(
                self.name, response.status_code, f"{method} {path}: response is not JSON"
            ) from exc

    def fields(self, data: object, what: str) -> Fields:
        """Read an API response; a surprising shape is the forge's error, not ours."""

        def error(message: str) -> ForgeError:
            return ForgeError(self.name, None, message)

        return Fields(data, f"{self.name} {what}", error)

    def webhook_fields(self, payload: object) -> Fields:
        """Read a verified webhook body; a surprising shape is a ``WebhookPayloadError``."""
        return Fields(payload, f"{self.name} webhook", WebhookPayloadError)
