"""Optional remote forges that host the portal's pull requests (GitHub, GitLab, Gitea).

By default change requests are reviewed and merged inside the portal. With ``GITOPS_FORGE``
set, the portal pushes the change branch and opens a pull request on the forge instead, and
learns of the merge from the forge's signed webhook. ``get_forge(settings)`` builds the
configured provider, or returns None when no forge is configured.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from gitops.forges.base import (
    ForgeError,
    ForgeProvider,
    RemotePullRequest,
    WebhookError,
    WebhookEvent,
    WebhookForeignError,
    WebhookPayloadError,
    WebhookSignatureError,
)
from gitops.forges.gitea import GiteaProvider
from gitops.forges.github import GitHubProvider
from gitops.forges.gitlab import GitLabProvider

PROVIDERS: dict[str, type[ForgeProvider]] = {
    "github": GitHubProvider,
    "gitlab": GitLabProvider,
    "gitea": GiteaProvider,
}

__all__ = [
    "PROVIDERS",
    "ForgeError",
    "ForgeProvider",
    "GitHubProvider",
    "GitLabProvider",
    "GiteaProvider",
    "RemotePullRequest",
    "WebhookError",
    "WebhookEvent",
    "WebhookForeignError",
    "WebhookPayloadError",
    "WebhookSignatureError",
    "get_forge",
]


def get_forge(settings: Any) -> ForgeProvider | None:
    """The provider ``settings.GITOPS_FORGE`` names, or None when it is empty.

    Raises ``ImproperlyConfigured`` for an unknown forge or a missing repository, token or
    webhook secret: without the secret no merge could ever be learnt, so it fails loudly here
    rather than on the first webhook.
    """
    kind = (getattr(settings, "GITOPS_FORGE", "") or "").strip().lower()
    if not kind:
        return None
    provider = PROVIDERS.get(kind)
    if provider is None:
        allowed = ", ".join(sorted(PROVIDERS))
        raise ImproperlyConfigured(
            f"GITOPS_FORGE={kind!r} is not a known forge; use one of: {allowed}"
            " (or leave it empty)."
        )
    values = {
        name: (getattr(settings, name, "") or "").strip()
        for name in (
            "GITOPS_FORGE_API_URL",
            "GITOPS_FORGE_REPO",
            "GITOPS_FORGE_TOKEN",
            "GITOPS_FORGE_WEBHOOK_SECRET",
        )
    }
    missing = [
        name
        for name in ("GITOPS_FORGE_REPO", "GITOPS_FORGE_TOKEN", "GITOPS_FORGE_WEBHOOK_SECRET")
        if not values[name]
    ]
    if missing:
        raise ImproperlyConfigured(f"GITOPS_FORGE={kind} needs {', '.join(missing)}.")
    return provider(
        api_url=values["GITOPS_FORGE_API_URL"],
        repo=values["GITOPS_FORGE_REPO"],
        token=values["GITOPS_FORGE_TOKEN"],
        webhook_secret=values["GITOPS_FORGE_WEBHOOK_SECRET"],
    )
