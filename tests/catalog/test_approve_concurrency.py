"""Two processes approving at once (two admins, or the approval bench's ``--approvers``): each
request is approved once and gets one change, one branch and one merge-queue entry, and the
queue then merges every one of them exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from catalog import services
from catalog.models import RequestEvent, ResourceRequest
from gitops import merge_queue
from gitops import services as gitops
from gitops.models import ChangeRequest, MergeQueueEntry
from tenants.models import Membership, PlatformRole, Role, Tenant
from tenants.specs import tenant_spec
from tests.support.processes import ROOT, database_url, portal_env

# Two processes locking the same rows (select_for_update; SQLite locks the whole database).
pytestmark = pytest.mark.db_engine

APPROVER = """
import sys
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from catalog import services
from catalog.models import ResourceRequest
admin = get_user_model().objects.get(username=sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
for pk in sys.argv[2:]:
    try:
        done = services.do_approve(
            ResourceRequest.objects.get(pk=int(pk)), acting_user=admin, merge=True
        )
        print("approved", pk, done.change_id, repr(done.error), flush=True)
    except ValidationError:
        print("refused", pk, flush=True)
"""


def _approver(admin: str, pks: list[int], settings: Any, var: Path) -> subprocess.Popen[str]:
    env = portal_env(
        DATABASE_URL=database_url(),
        PORTAL_VAR_DIR=str(var),
        GITOPS_REPO_PATH=str(settings.GITOPS_REPO_PATH),
        PORTAL_TASK_RUNNER="eager",
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
    )
    return subprocess.Popen(
        [sys.executable, "-c", APPROVER, admin, *map(str, pks)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.django_db(transaction=True)
def test_two_processes_approving_the_same_requests_approve_each_once(
    world: dict[str, Any],
    merged_change: Any,
    make_user: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    quinn = make_user("quinn")
    PlatformRole.objects.create(user=quinn, role=PlatformRole.Name.PLATFORM_ADMIN)
    # One request per tenant, as in the bench: two of one tenant would conflict in the queue
    # (each rendered without the other), which is the siblings' refresh's business.
    tenants = [world["alpha"]]
    for n in range(5):
        tenant = Tenant.objects.create(slug=f"team{n}", display_name=f"Team {n}")
        Membership.objects.create(user=world["alice"], tenant=tenant, role=Role.ADMIN)
        tenants.append(tenant)
    for tenant in tenants:
        merged_change(tenant_spec(tenant))
    requests = [
        services.do_create_request(
            tenant,
            acting_user=world["alice"],
            kind="gpu-share",
            spec={"name": "burst", "flavor": "h200", "kind": "whole", "count": 1},
        )
        for tenant in tenants
    ]
    pks = [r.pk for r in requests]
    # The queue waits (its jobs find the lease taken) until every approval is in.
    assert merge_queue.acquire_lease("test: approvals first")
    # Both get every request, in opposite orders: they meet, and race, in the middle.
    procs = [
        _approver("pam", pks, settings, tmp_path / "a"),
        _approver("quinn", pks[::-1], settings, tmp_path / "b"),
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.communicate()[1][-3000:]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        lines += out.splitlines()

    approved = [line.split() for line in lines if line.startswith("approved")]
    assert sorted(int(words[1]) for words in approved) == sorted(pks)  # each once
    assert all(words[3] == "''" for words in approved)  # no error recorded
    assert sum(line.startswith("refused") for line in lines) == len(pks)
    changes = {}
    for request in ResourceRequest.objects.filter(pk__in=pks):
        assert request.state == ResourceRequest.State.PR_OPEN and request.error == ""
        assert RequestEvent.objects.filter(request=request, to_state="approved").count() == 1
        assert request.change is not None
        changes[request.change.pk] = request.change
    assert len(changes) == len(pks)
    opened = ChangeRequest.objects.filter(kind=ChangeRequest.Kind.GPU_SHARE)
    assert sorted(opened.values_list("pk", flat=True)) == sorted(changes)
    entries = MergeQueueEntry.objects.filter(change__in=changes.values())
    assert sorted(entries.values_list("change_id", flat=True)) == sorted(changes)
    assert set(entries.values_list("state", flat=True)) == {"queued"}
    repo = gitops.repository()
    branches = subprocess.run(
        ["git", f"--git-dir={repo.path}", "for-each-ref", "--format=%(refname:short)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # No orphan branch: exactly the changes' branches besides main and earlier changes.
    earlier = set(ChangeRequest.objects.exclude(pk__in=changes).values_list("branch", flat=True))
    assert set(branches) - earlier - {"main"} == {c.branch for c in changes.values()}
    for change in changes.values():
        assert repo.head(change.branch) == change.head_sha

    merge_queue.release_lease("test: approvals first")
    merge_queue.run_queue("test", lambda line: None)
    merged = ChangeRequest.objects.filter(pk__in=changes)
    states = list(entries.values_list("state", "reason"))
    assert set(merged.values_list("status", flat=True)) == {"merged"}, states
    main = repo.head("main")
    assert main is not None
    shas = set(merged.values_list("merge_sha", flat=True))
    assert all(repo.is_ancestor(sha, main) for sha in shas)
    for change in merged:  # main holds what each change wrote
        for path in change.files_changed:
            assert repo.read_file(main, path) == repo.read_file(change.head_sha, path)
