"""The merge queue on a real Celery worker, consuming from the real Redis (DB 12): changes
queued by the portal are checked and merged in one batch by the worker process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, MergeQueueBatch
from gitops.specs import GpuShare, TenantSpec
from tests.support import wait_until
from tests.support.processes import Started, celery_worker

BROKER = "redis://127.0.0.1:6379/12"
FLEET = demo_fleet()

pytestmark = pytest.mark.services


@pytest.fixture
def worker(transactional_db: None, settings: Any, tmp_path: Path) -> Iterator[Started]:
    with celery_worker(
        BROKER, log_file=tmp_path / "worker.log", GITOPS_REPO_PATH=str(settings.GITOPS_REPO_PATH)
    ) as started:
        yield started


def test_a_real_worker_merges_the_queued_changes_in_one_batch(
    world: dict[str, Any], worker: Started, settings: Any
) -> None:
    changes = []
    for slug in ("t1", "t2"):
        services.ensure_bootstrapped(FLEET)
        first = services.open_tenant_change(
            acting_user=world["bob"],
            tenant=TenantSpec(slug=slug),
            fleet=FLEET,
            title=slug,
            kind="tenant",
            run_checks=False,
        )
        ChangeRequest.objects.filter(pk=first.pk).update(checks_state="passed")
        first.refresh_from_db()
        services.do_review(first, acting_user=world["pam"], state="approve")
        services.do_merge(first, acting_user=world["pam"])
    for slug in ("t1", "t2"):
        share = GpuShare(name="train", flavor="h200", kind="whole", count=1)
        change = services.open_tenant_change(
            acting_user=world["bob"],
            tenant=TenantSpec(slug=slug, shares=(share,)),
            fleet=FLEET,
            title=f"share {slug}",
            kind="gpu-share",
            run_checks=False,
        )
        services.do_review(change, acting_user=world["pam"], state="approve")
        changes.append(change)
    # From here the jobs go to the worker through Redis; the lease keeps the two changes
    # together until both are queued.
    settings.PORTAL_TASK_RUNNER = "celery"
    settings.CELERY_BROKER_URL = BROKER
    from gitops import merge_queue

    assert merge_queue.acquire_lease("test holding the queue")
    for change in changes:
        services.do_enqueue_merge(change, acting_user=world["pam"])
    merge_queue.release_lease("test holding the queue")
    from django.db import transaction

    from portal.jobs import enqueue

    with transaction.atomic():
        enqueue("gitops.merge_queue", title="after the test let go")
    wait_until(
        lambda: (
            ChangeRequest.objects.filter(pk__in=[c.pk for c in changes], status="merged").count()
            == 2
        ),
        120,
        "the worker to merge both changes",
        process=worker.proc,
        details=worker.log,
    )
    batch = MergeQueueBatch.objects.get(merged=2)
    assert batch.check_runs == 1
    tip = services.repository().head("main")
    assert tip == batch.tip_sha == ChangeRequest.objects.get(pk=changes[1].pk).merge_sha
