"""Whether a merged change is running: the Flux Kustomizations that own its files, and their state.

A change is *applied* when every Flux Kustomization that reads one of its files reports Ready at
a revision that contains the merge commit (the commit itself or a descendant: Flux may have
skipped straight to a later main). It has *failed* when one of them attempted such a revision
and stalled, with the reconciler's message. Until then it is *pending*.

gitops knows the repository layout but not the cluster: the fleet app reads the Kustomizations
from the Kubernetes API and hands their state in as ``FluxReport`` (plain data), keyed by
``namespace/name``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from django.db import transaction
from django.utils import timezone

from gitops import sources
from gitops.checks.kustomize import flux_kustomizations
from gitops.checks.manifests import build_inputs
from gitops.models import ChangeRequest
from gitops.repo import GitRepository, GitRepositoryError
from portal.audit import record_audit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FluxReport:
    """What one Flux Kustomization says (from its status), as the fleet sync read it."""

    namespace: str
    name: str
    ready: str  # "True" | "False" | "Unknown"
    stalled: bool = False
    reconciling: bool = False
    reason: str = ""
    message: str = ""
    applied_sha: str | None = None  # of lastAppliedRevision
    attempted_sha: str | None = None  # of lastAttemptedRevision

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Verdict:
    state: str  # a ChangeRequest.Apply value
    message: str


def owners(repo: GitRepository, merge_sha: str, changed: Iterable[str]) -> tuple[str, ...]:
    """``namespace/name`` of every Flux Kustomization that reads a changed file.

    Added and modified files are looked up in the merged tree; deleted files in the tree before
    the merge, counting only Kustomizations that still exist after it (a removed tenant's own
    Kustomization is pruned, so only the one that applied its directory can report the removal).
    """
    return _owners(repo, merge_sha, tuple(sorted(set(changed))))


@lru_cache(maxsize=256)
def _owners(repo: GitRepository, merge_sha: str, changed: tuple[str, ...]) -> tuple[str, ...]:
    after = repo.read_tree(merge_sha)
    found = _readers(after, {p for p in changed if p in after})
    gone = {p for p in changed if p not in after}
    parents = repo.parents(merge_sha)
    if gone and parents:
        still_there = {k.kustomization for k in flux_kustomizations(after)}
        found |= _readers(repo.read_tree(parents[0]), gone) & still_there
    return tuple(sorted(found))


def _readers(files: Mapping[str, bytes], paths: set[str]) -> set[str]:
    if not paths:
        return set()
    readers: set[str] = set()
    for flux in flux_kustomizations(files):
        if paths & build_inputs(files, flux.path).files:
            readers.add(flux.kustomization)
    return readers


def _contains(repo: GitRepository, merge_sha: str, sha: str | None) -> bool:
    if not sha:
        return False
    try:
        return repo.is_ancestor(merge_sha, sha)
    except GitRepositoryError:
        # A revision this repository has not seen (not fetched yet): not known to contain it.
        return False


def verdict(
    repo: GitRepository,
    change: ChangeRequest,
    reports: Mapping[str, FluxReport],
) -> Verdict:
    """The apply state of one merged change, given the Kustomizations' reports."""
    names = owners(repo, change.merge_sha, change.files_changed)
    if not names:
        return Verdict(ChangeRequest.Apply.APPLIED, "No Flux Kustomization reads these files.")
    waiting: list[str] = []
    for name in names:
        report = reports.get(name)
        if report is None:
            waiting.append(f"{name} does not exist in the cluster yet")
            continue
        if report.ready == "True" and _contains(repo, change.merge_sha, report.applied_sha):
            continue
        tried = _contains(repo, change.merge_sha, report.attempted_sha)
        if tried and (report.stalled or (report.ready == "False" and not report.reconciling)):
            reason = f" ({report.reason})" if report.reason else ""
            return Verdict(
                ChangeRequest.Apply.FAILED,
                f"{name} failed to apply this change{reason}: {report.message or 'no message'}",
            )
        waiting.append(f"{name} has not applied it yet")
    if waiting:
        return Verdict(ChangeRequest.Apply.PENDING, "Waiting for Flux: " + "; ".join(waiting) + ".")
    short = change.merge_sha[:12]
    return Verdict(ChangeRequest.Apply.APPLIED, f"Applied at {short} by {', '.join(names)}.")


def on_main(report: FluxReport) -> FluxReport:
    """The report with revisions of main: a tenant's Kustomization reads the tenant's
    projection repository, whose commits name the main commit they were made from."""

    def translate(sha: str | None) -> str | None:
        return (sources.main_commit(report.namespace, sha) or sha) if sha else sha

    applied, attempted = translate(report.applied_sha), translate(report.attempted_sha)
    if (applied, attempted) == (report.applied_sha, report.attempted_sha):
        return report
    return replace(report, applied_sha=applied, attempted_sha=attempted)


def update_apply_states(repo: GitRepository, reports: Iterable[FluxReport]) -> list[ChangeRequest]:
    """Move merged changes on from pending (or failed: a later fix may apply them) and audit
    every transition. Returns the changes whose state changed."""
    by_key = {report.key: on_main(report) for report in reports}
    moved: list[ChangeRequest] = []
    candidates = ChangeRequest.objects.filter(
        status=ChangeRequest.Status.MERGED,
        apply_state__in=[ChangeRequest.Apply.PENDING, ChangeRequest.Apply.FAILED],
    ).exclude(merge_sha="")
    for change in candidates:
        try:
            result = verdict(repo, change, by_key)
        except GitRepositoryError as exc:
            # The merge commit is not in this repository (yet): leave the change as it is.
            logger.warning("change #%s: cannot read merge %s: %s", change.pk, change.merge_sha, exc)
            continue
        if (result.state, result.message) == (change.apply_state, change.apply_message):
            continue
        with transaction.atomic():
            locked = ChangeRequest.objects.select_for_update().get(pk=change.pk)
            before = locked.apply_state
            locked.apply_state = result.state
            locked.apply_message = result.message
            fields = ["apply_state", "apply_message", "updated_at"]
            if result.state == ChangeRequest.Apply.APPLIED and locked.applied_at is None:
                locked.applied_at = timezone.now()
                fields.append("applied_at")
            locked.save(update_fields=fields)
            if before != result.state:
                record_audit(
                    actor=None,
                    action=f"change.apply_{result.state}",
                    target=locked,
                    tenant_slug=locked.tenant_slug,
                    diff={"apply_state": [before, result.state], "message": [None, result.message]},
                )
                moved.append(locked)
    return moved
