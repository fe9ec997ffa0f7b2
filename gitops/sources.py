"""What each tenant's Flux source reads, and the token it reads it with.

The fleet repository holds every tenant's files and every open change (``change/*``), and git
serves any object it holds to a client that names its id. So a tenant's source does not read
the fleet repository: it reads a *projection*, a bare repository per tenant that holds only
``tenants/<slug>/workloads`` and ``tenants/<slug>/cluster-access`` of main, at the same paths,
so the Kustomizations in the tenant's namespace (its workloads, and its clusters' member
bindings) keep their paths. A token for it cannot fetch what is not there.

* Projections are derived, never written by hand: after every change of main the portal
  commits the tenant's subtree (``GitRepository.project``), deterministically, with a
  ``Projected-from: <main sha>`` trailer. ``main_commit`` reads it back, so ``gitops.applied``
  can tell which main commit a tenant Kustomization's ``lastAppliedRevision`` contains.
* Tokens are per tenant (``SourceToken``: a digest and a visible prefix). The portal writes
  the token into the Secret the tenant's GitRepository names (``fleet.services``); a tenant
  token opens that tenant's projection and nothing else. The platform tokens
  (``GITOPS_HTTP_TOKENS``) open the fleet repository and every projection.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gitops.models import SourceToken
from gitops.render.cluster_access import ACCESS_DIR
from gitops.render.validate import DNS1123_LABEL
from gitops.repo import GitRepository, GitRepositoryError, format_message
from gitops.services import identity
from portal.audit import record_audit

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "aifsrc_"
# Enough to tell tokens apart in the audit log and the Secret, far too little to guess one.
VISIBLE_CHARS = len(TOKEN_PREFIX) + 6
PROJECTION_TRAILER = "Projected-from"
_TRAILER = re.compile(rf"^{PROJECTION_TRAILER}: ([0-9a-f]{{40}})$", re.MULTILINE)


# --- which repository a request names ---------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A repository the Git endpoint serves: the fleet's (``slug`` empty) or a projection."""

    path: Path
    slug: str = ""


def _valid_slug(slug: str) -> bool:
    return len(slug) <= 63 and DNS1123_LABEL.fullmatch(slug) is not None


def tenant_repos_dir() -> Path:
    """Where the projections live: ``GITOPS_TENANT_REPOS_DIR``, else ``tenants/`` beside the
    fleet repository."""
    configured = settings.GITOPS_TENANT_REPOS_DIR
    return Path(configured) if configured else Path(settings.GITOPS_REPO_PATH).parent / "tenants"


def projection_path(slug: str) -> Path:
    if not _valid_slug(slug):
        raise ValueError(f"{slug!r} is not a tenant slug")
    return tenant_repos_dir() / f"{slug}.git"


def fleet_name() -> str:
    return Path(settings.GITOPS_REPO_PATH).name.removesuffix(".git")


def served(name: str) -> Served | None:
    """The repository at URL path ``<name>.git`` under ``/git/``, if it exists:
    ``fleet`` or ``tenants/<slug>``."""
    if name == fleet_name():
        path = Path(settings.GITOPS_REPO_PATH)
        return Served(path) if (path / "HEAD").is_file() else None
    kind, _, slug = name.partition("/")
    if kind != "tenants" or not _valid_slug(slug):
        return None
    path = projection_path(slug)
    return Served(path, slug) if (path / "HEAD").is_file() else None


def served_for_url(url: str) -> Served | None:
    """The local repository a Flux source URL reads (the host is ignored: in the cluster it is
    the portal's Service name)."""
    _, found, rest = urlsplit(url).path.rpartition("/git/")
    if not found or not rest.endswith(".git"):
        return None
    return served(rest.removesuffix(".git"))


# --- tokens -----------------------------------------------------------------------------------


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def is_platform_token(token: str) -> bool:
    offered = token.encode("utf-8")
    # Compare against every configured token, each in constant time.
    matches = [hmac.compare_digest(offered, t.encode("utf-8")) for t in settings.GITOPS_HTTP_TOKENS]
    return any(matches)


def is_tenant_token(slug: str, token: str) -> bool:
    if not token.startswith(TOKEN_PREFIX):
        return False
    digest = SourceToken.objects.filter(tenant_slug=slug).values_list("digest", flat=True).first()
    return digest is not None and hmac.compare_digest(digest, _digest(token))


def is_known_token(token: str) -> bool:
    """A platform token or some tenant's current token. Looked up by digest: the digest of a
    256-bit random token leaks nothing through the index's timing."""
    if is_platform_token(token):
        return True
    return (
        token.startswith(TOKEN_PREFIX)
        and SourceToken.objects.filter(digest=_digest(token)).exists()
    )


def may_read(repository: Served, token: str) -> bool:
    """A platform token reads everything; a tenant token only its own projection."""
    if is_platform_token(token):
        return True
    return bool(repository.slug) and is_tenant_token(repository.slug, token)


def check_credentials(url: str, username: str, password: str) -> bool:
    """Whether the portal's Git endpoint would serve ``url`` to these credentials (HTTP basic:
    the password is the token, any user name). The simulator's Flux asks this."""
    repository = served_for_url(url)
    return repository is not None and bool(password) and may_read(repository, password)


@transaction.atomic
def issue_token(slug: str, *, acting_user: Any) -> str:
    """A new token for the tenant's source; the one before stops working. Returns it: the
    caller puts it into the tenant's Secret and nowhere else."""
    if not _valid_slug(slug):
        raise ValueError(f"{slug!r} is not a tenant slug")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = SourceToken.objects.select_for_update().filter(tenant_slug=slug).first()
    before = row.prefix if row is not None else None
    row = row or SourceToken(tenant_slug=slug)
    row.prefix = token[:VISIBLE_CHARS]
    row.digest = _digest(token)
    row.created_at = timezone.now()
    row.created_by = acting_user if getattr(acting_user, "pk", None) else None
    row.save()
    record_audit(
        actor=acting_user,
        action="source_token.rotate" if before else "source_token.issue",
        target=row,
        tenant_slug=slug,
        diff={"prefix": [before, row.prefix]},
    )
    return token


# --- projections ------------------------------------------------------------------------------


def workloads_prefix(slug: str) -> str:
    return f"tenants/{slug}/workloads"


def projected_prefixes(slug: str) -> list[str]:
    """What a tenant's projection holds: what the Kustomizations in its namespace read."""
    return [workloads_prefix(slug), f"tenants/{slug}/{ACCESS_DIR}"]


def update_projection(fleet_repo: GitRepository, slug: str, rev: str) -> str | None:
    """Bring the tenant's projection level with ``rev`` of the fleet repository. A tenant whose
    directory is gone (offboarded) loses its projection. Returns the projection's tip."""
    path = projection_path(slug)
    if not fleet_repo.list_dir(rev, f"tenants/{slug}/"):
        if path.exists():
            shutil.rmtree(path)
            logger.info("removed the projection of %s: no tenants/%s/ on main", slug, slug)
        return None
    target = GitRepository.open_or_init(path, main=settings.GITOPS_MAIN_BRANCH)
    prefixes = projected_prefixes(slug)
    message = format_message(
        f"{' and '.join(prefixes)} of {settings.GITOPS_MAIN_BRANCH} at {rev[:12]}",
        "A read-only projection for the tenant's Flux source; the fleet repository is the "
        "source of truth.",
        {PROJECTION_TRAILER: rev},
    )
    return target.project(
        fleet_repo,
        rev,
        prefixes,
        branch=settings.GITOPS_MAIN_BRANCH,
        message=message,
        committer=identity(None),
    )


def tenant_slugs(fleet_repo: GitRepository, rev: str) -> set[str]:
    return {d.rstrip("/") for d in fleet_repo.list_dir(rev, "tenants/") if d.endswith("/")}


def update_projections(fleet_repo: GitRepository, slugs: Iterable[str] | None = None) -> int:
    """Project main for ``slugs`` (None: every tenant on main and every existing projection).
    Returns how many were brought up to date."""
    rev = fleet_repo.head(settings.GITOPS_MAIN_BRANCH)
    if rev is None:
        return 0
    if slugs is None:
        existing = {p.name.removesuffix(".git") for p in tenant_repos_dir().glob("*.git")}
        slugs = tenant_slugs(fleet_repo, rev) | existing
    count = 0
    for slug in sorted(set(slugs)):
        if _valid_slug(slug):
            update_projection(fleet_repo, slug, rev)
            count += 1
    return count


def slugs_in(paths: Iterable[str]) -> set[str]:
    """The tenants whose directories ``paths`` touch."""
    return {p.split("/")[1] for p in paths if p.startswith("tenants/") and p.count("/") >= 2}


def main_commit(slug: str, sha: str) -> str | None:
    """The main commit a projection commit of ``slug`` was made from, if it is one."""
    if not _valid_slug(slug):
        return None
    path = projection_path(slug)
    if not (path / "HEAD").is_file():
        return None
    try:
        message = GitRepository(path).commit_message(sha)
    except GitRepositoryError:
        return None
    found = _TRAILER.findall(message)
    return found[-1] if found else None


def tokenless(slugs: Iterable[str]) -> set[str]:
    """Those of ``slugs`` that have no source token yet."""
    wanted = set(slugs)
    have = set(
        SourceToken.objects.filter(tenant_slug__in=wanted).values_list("tenant_slug", flat=True)
    )
    return wanted - have


def local_repository(url: str) -> Path | None:
    """The local bare repository a source URL reads, for the simulator's Flux."""
    repository = served_for_url(url)
    return repository.path if repository is not None else None


def simulator_git_options() -> dict[str, Any]:
    """How the simulator's Flux reads the portal's Git: through the same token checks
    as the Git endpoint, with a platform token in its ``flux-system`` Secret (as ``flux
    bootstrap`` writes it). Without ``GITOPS_HTTP_TOKENS`` the process makes one up."""
    if not settings.GITOPS_HTTP_TOKENS:
        settings.GITOPS_HTTP_TOKENS = [secrets.token_urlsafe(32)]
    return {
        "git_credentials": ("flux", settings.GITOPS_HTTP_TOKENS[0]),
        "verify_git": check_credentials,
        "resolve_git": local_repository,
    }
