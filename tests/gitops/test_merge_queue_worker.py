"""The merge queue on a real Celery worker, consuming from the real Redis (DB 12): changes
queued by the portal are checked and merged in one batch by the worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitops import services
from gitops.fleet import demo_fleet
from gitops.models import ChangeRequest, MergeQueueBatch
from gitops.specs import GpuShare, TenantSpec
from portal.celery import app as celery_app
from tests.conftest import database_url, require_service, use_celery_broker

ROOT = Path(__file__).resolve().parents[2]
BROKER = "redis://127.0.0.1:6379/12"
FLEET = demo_fleet()

pytestmark = pytest.mark.services


@pytest.fixture
def worker(transactional_db: None, settings: Any) -> Iterator[subprocess.Popen[str]]:
    require_service("Redis", "127.0.0.1", 6379)
    queue = f"portal-test-{uuid.uuid4().hex[:8]}"
    old = use_celery_broker(celery_app, broker_url=BROKER, task_default_queue=queue)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": BROKER,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "GITOPS_REPO_PATH": str(settings.GITOPS_REPO_PATH),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--loglevel=INFO",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        use_celery_broker(celery_app, **old)


def test_a_real_worker_merges_the_queued_changes_in_one_batch(
    world: dict[str, Any], worker: subprocess.Popen[str], settings: Any
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
    deadline = time.monotonic() + 120
    while ChangeRequest.objects.filter(pk__in=[c.pk for c in changes], status="merged").count() < 2:
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.terminate()
            pytest.fail("not merged; worker said:\n" + worker.communicate()[0][-5000:])
        time.sleep(0.3)
    batch = MergeQueueBatch.objects.get(merged=2)
    assert batch.check_runs == 1
    tip = services.repository().head("main")
    assert tip == batch.tip_sha == ChangeRequest.objects.get(pk=changes[1].pk).merge_sha
