"""Background work for change requests: checks, publishing a merge, nudging Flux."""

from __future__ import annotations

from datetime import timedelta

import requests
from django.conf import settings
from django.db import transaction

from gitops import merge_queue, sources
from gitops.checks import run_checks
from gitops.fleet import configured_fleet
from gitops.forges import get_forge
from gitops.models import ChangeRequest, CheckRun
from gitops.services import do_merge_revocation, prune_forge_deliveries, repository
from gitops.usertext import defuse_forge_references, user_text
from portal.jobs import job_task, prune_scheduled
from portal.models import Job


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
        schema_dir=settings.GITOPS_SCHEMA_DIR or None,
        allow_overcommit=change.allow_overcommit,
        base=base,
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
        failed = any(r.status == CheckRun.Status.FAILED for r in results)
        # A newer push may have replaced this head meanwhile; only its own checks count.
        ChangeRequest.objects.filter(pk=change.pk, head_sha=sha).update(
            checks_state=ChangeRequest.Checks.FAILED if failed else ChangeRequest.Checks.PASSED
        )
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
    """Push main to the configured remote and ask Flux to reconcile now."""
    change = ChangeRequest.objects.get(pk=job.kwargs["change_id"])
    if settings.GITOPS_REMOTE_URL:
        job.set_progress(20, "pushing main to the remote")
        result = repository().sync_with_remote(
            settings.GITOPS_REMOTE_URL,
            branch=settings.GITOPS_MAIN_BRANCH,
            username=settings.GITOPS_REMOTE_USERNAME,
            password=settings.GITOPS_REMOTE_PASSWORD,
        )
        # The remote had moved: our merge commit was replayed on top and has a new id now.
        new_sha = result.rewritten.get(change.merge_sha)
        if new_sha:
            ChangeRequest.objects.filter(pk=change.pk).update(merge_sha=new_sha)
            change.merge_sha = new_sha
            job.append_log(f"rebased onto the remote; merge commit is now {new_sha[:12]}")
        job.append_log(f"pushed; remote main at {(result.tip or '')[:12]}")
    slugs = sources.slugs_in(change.files_changed)
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
            json={"change": change.pk, "revision": change.merge_sha},
            headers=headers,
            timeout=10,
        )
        response.raise_for_status()
        job.append_log(f"Flux receiver answered {response.status_code}")
    job.set_progress(100, f"change #{change.pk} published at {change.merge_sha[:12]}")


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
    """Pack the loose objects every commit leaves (``git gc --auto``), on the schedule, catch
    up any tenant projection a failed job left behind (cheap: tree ids are compared), and
    forget forge delivery ids too old to be resent."""
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
