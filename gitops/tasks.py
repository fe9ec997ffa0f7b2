"""Background work for change requests: checks, publishing a merge, nudging Flux."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import requests
from celery.signals import worker_process_init
from django.conf import settings
from django.db import connections, transaction

from gitops import merge_queue, sources
from gitops.checks import run_checks
from gitops.fleet import configured_fleet
from gitops.forges import get_forge
from gitops.models import ChangeRequest, CheckRun
from gitops.schemas import schema_source
from gitops.services import (
    change_scopes,
    do_merge_revocation,
    prune_forge_deliveries,
    reconcile_merged,
    refresh_mirror,
    repository,
)
from gitops.usertext import defuse_forge_references, user_text
from portal.jobs import job_task, prune_scheduled
from portal.models import Job

logger = logging.getLogger(__name__)


@job_task("gitops.run_checks")
def run_change_checks(job: Job) -> None:
    """Run every check of ``gitops.checks.run_checks`` on a change's head commit."""
    change = ChangeRequest.objects.get(pk=job.kwargs["change_id"])
    sha = job.kwargs["sha"]
    repo = repository()
    job.set_progress(10, f"reading the tree at {sha[:12]}")
    files = repo.read_tree(sha)
    # The change's base is what the cluster runs before it merges: updates the API server
    # refuses (an immutable spec changed in place) are found against it.
    base = repo.read_tree(change.base_sha) if change.base_sha else None
    job.set_progress(30, f"checking {len(change.files_changed)} changed files")
    results = run_checks(
        files,
        fleet=configured_fleet(),
        changed=set(change.files_changed),
        schema_source=schema_source(),
        allow_overcommit=change.allow_overcommit,
        base=base,
        cache=settings.GITOPS_CHECK_CACHE,
        scopes=change_scopes([change]) if base is not None else None,
    )
    with transaction.atomic():
        CheckRun.objects.filter(change=change, sha=sha).delete()
        CheckRun.objects.bulk_create(
            CheckRun(
                change=change,
                sha=sha,
                name=r.name,
                status=r.status,
                summary=r.summary[:300],
                details=list(r.details)[:500],
            )
            for r in results
        )
        state = ChangeRequest.checks_state_of(r.status for r in results)
        failed = state == ChangeRequest.Checks.FAILED
        # A newer push may have replaced this head meanwhile; only its own checks count.
        ChangeRequest.objects.filter(pk=change.pk, head_sha=sha).update(checks_state=state)
    for r in results:
        job.append_log(f"{r.name}: {r.status} — {r.summary}")
    if not failed:
        merged = do_merge_revocation(change)
        if merged is not None:
            job.append_log(
                f"merged without review as {merged.merge_sha[:12]}: it only takes "
                "cluster access away"
            )
    job.set_progress(100)


@job_task("gitops.after_merge")
def publish_merge(job: Job) -> None:
    """Project main for the changed tenants and ask Flux to reconcile now.

    With a remote the merge is on it already: ``write_main`` pushed it before the change was
    recorded as merged, so the merge commit's id is final.
    """
    ids = job.kwargs.get("change_ids") or [job.kwargs["change_id"]]
    changes = list(ChangeRequest.objects.filter(pk__in=ids).order_by("merged_at", "pk"))
    # A merge queue batch is published once: its changes' tenants together.
    change = changes[-1]
    slugs = {slug for c in changes for slug in sources.slugs_in(c.files_changed)}
    if slugs:
        # Before Flux is nudged, so the tenants' sources find the new revision at once.
        job.set_progress(40, f"projecting main for {', '.join(sorted(slugs))}")
        sources.update_projections(repository(), slugs)
    if settings.FLUX_RECEIVER_URL:
        job.set_progress(60, "notifying the Flux receiver")
        headers = {}
        if settings.FLUX_RECEIVER_TOKEN:
            headers["Authorization"] = f"Bearer {settings.FLUX_RECEIVER_TOKEN}"
        response = requests.post(
            settings.FLUX_RECEIVER_URL,
            json={
                "change": change.pk,
                "changes": [c.pk for c in changes],
                "revision": change.merge_sha,
            },
            headers=headers,
            timeout=10,
        )
        response.raise_for_status()
        job.append_log(f"Flux receiver answered {response.status_code}")
    shown = ", ".join(f"#{c.pk}" for c in changes[:5]) + (" …" if len(changes) > 5 else "")
    job.set_progress(100, f"change {shown} published at {change.merge_sha[:12]}")


@job_task("gitops.open_forge_pull_request")
def open_forge_pull_request(job: Job) -> None:
    """Push a change's branch to the forge and open a pull request there."""
    forge = get_forge(settings)
    if forge is None:
        raise RuntimeError("GITOPS_FORGE is not configured")
    change = ChangeRequest.objects.get(pk=job.kwargs["change_id"])
    job.set_progress(20, f"pushing {change.branch}")
    repository().push(
        settings.GITOPS_REMOTE_URL,
        [f"+refs/heads/{change.branch}:refs/heads/{change.branch}"],
        username=settings.GITOPS_REMOTE_USERNAME,
        password=settings.GITOPS_REMOTE_PASSWORD,
    )
    job.set_progress(60, "opening the pull request")
    # User text in the message is quoted and defused already (gitops.usertext); this pass also
    # covers the portal's own words and messages committed before that rule existed.
    pull = forge.open_pull_request(
        head_branch=change.branch,
        base_branch=settings.GITOPS_MAIN_BRANCH,
        title=user_text(change.title, single_line=True),
        body=defuse_forge_references(repository().commit_message(change.head_sha)),
    )
    ChangeRequest.objects.filter(pk=change.pk).update(forge_number=pull.number, forge_url=pull.url)
    job.set_progress(100, f"opened {pull.url}")


@job_task("gitops.project_tenants")
def project_tenants(job: Job) -> None:
    """Bring tenants' projection repositories level with main (all of them without ``slugs``)."""
    slugs = job.kwargs.get("slugs")
    count = sources.update_projections(repository(), slugs)
    job.set_progress(100, f"{count} tenant projections up to date")


@job_task("gitops.maintain")
def maintain_repository(job: Job) -> None:
    """Bring this replica's mirror level with the Git remote (remote-truth mode) and record
    changes a crashed replica merged there, pack the loose objects every commit leaves
    (``git gc --auto``), on the schedule, catch
    up any tenant projection a failed job left behind (cheap: tree ids are compared), and
    forget forge delivery ids too old to be resent."""
    before, after = refresh_mirror()
    if before != after:
        job.append_log(
            f"mirror of the Git remote: main {(before or '-')[:12]} -> {(after or '-')[:12]}"
        )
    recorded = reconcile_merged()
    if recorded:
        job.append_log(
            "recorded as merged, found on main by their Change-Request trailer: "
            + ", ".join(f"#{pk}" for pk in recorded)
        )
    repository().maintain()
    job.set_progress(50, "repository packed where needed")
    count = sources.update_projections(repository())
    pruned = prune_forge_deliveries()
    job.set_progress(
        100,
        f"repository packed where needed; {count} tenant projections checked;"
        f" {pruned} old forge deliveries forgotten",
    )


@job_task("gitops.merge_queue")
def run_merge_queue(job: Job) -> None:
    """Work through the merge queue in batches (``gitops.merge_queue``); a run that finds
    another runner at work leaves the queue to it."""
    outcome = merge_queue.run_queue(f"job {job.pk}", job.append_log)
    job.set_progress(100, outcome)
    # The schedule runs it every minute: keep an hour of quiet runs.
    prune_scheduled("gitops.merge_queue", timedelta(hours=1))


@worker_process_init.connect
def _warm_when_started(**_: Any) -> None:
    """Each Celery worker process warms the merge queue's caches in the background when it
    starts (``merge_queue.warm``): at 10,000 tenants the first batch of a cold worker spent
    half its time loading schemas and reading kept check values. Off with
    ``GITOPS_WARM_WORKERS=0``; a failure is logged and changes nothing."""
    if settings.GITOPS_WARM_WORKERS:
        threading.Thread(target=_warm, name="portal-warm", daemon=True).start()


def _warm() -> None:
    try:
        merge_queue.warm(logger.info)
    except Exception:
        logger.exception("warming the merge queue's caches failed")
    finally:
        connections.close_all()
