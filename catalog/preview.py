"""What approving a request would write, as its approver sees it: the request's check, the files
its pull request would change against main, and their digest.

The approval page and the API's preview both come from ``preview_of``, so the digest either
shows is the one ``services.do_approve(seen=...)`` compares with what it is about to write:
an approval only goes through for the diff that was looked at.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from catalog import services, states
from catalog.models import ResourceRequest
from catalog.services import Check
from gitops import services as gitops

S = ResourceRequest.State
# States in which approving (or retrying) would open a pull request: the diff is shown.
PREVIEWED = frozenset({S.SUBMITTED, S.APPROVED, S.FAILED})


@dataclass(frozen=True)
class FilePatch:
    """One file the pull request would change, as a unified diff against main."""

    path: str
    status: str  # added, modified or deleted
    patch: str


@dataclass(frozen=True)
class Preview:
    """The check of an open request (None once it is closed), the files approving it would
    change (none when the check fails or nothing would be written) and their digest."""

    check: Check | None
    changes: dict[str, bytes | None]
    digest: str


def check_of(request: ResourceRequest) -> Check:
    remove = request.action == ResourceRequest.Action.DECOMMISSION
    return services.check_request(
        request.tenant,
        request.kind,
        request.resource.name,
        None if remove else request.spec,
        action=request.action,
    )


def preview_of(request: ResourceRequest) -> Preview:
    check = check_of(request) if request.state in states.OPEN else None
    changes = (
        services.preview_changes(check) if check and check.ok and request.state in PREVIEWED else {}
    )
    return Preview(check, changes, services.digest(changes))


def file_patches(changes: dict[str, bytes | None]) -> list[FilePatch]:
    """The files of ``changes`` as unified diffs against main, by path."""
    repo = gitops.repository()
    base = gitops.main_sha()
    patches = []
    for path in sorted(changes):
        old = repo.read_file(base, path) if base else None
        new = changes[path]
        status = "added" if old is None else "deleted" if new is None else "modified"
        patch = difflib.unified_diff(
            (old or b"").decode("utf-8", "replace").splitlines(keepends=True),
            (new or b"").decode("utf-8", "replace").splitlines(keepends=True),
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
        )
        patches.append(FilePatch(path, status, "".join(patch)))
    return patches
