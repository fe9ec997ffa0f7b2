"""A burst of approvals through the portal's path: 1,000 requests approved at once, to main.

Run by hand from the project root, with PostgreSQL and Redis up (about 15 minutes):

    .venv/bin/python bench/approval_burst.py --tenants 1000 10000

For each fleet size, in a process of its own (fresh settings, database and repository):

1. a fleet of N tenants: rows in PostgreSQL (``--database-url``, dropped and created again),
   a member who asks and a platform admin who approves, and the fleet repository with every
   tenant rendered by the portal's own renderers (``catalog.specs.desired_tenant`` ->
   ``render_tenant_tree``), written in one commit and packed;
2. ``--workers`` Celery worker processes (``celery -A portal worker``) on Redis
   (``--broker``), each with one process, on a queue of their own;
3. ``--requests`` GPU-share requests, one per tenant (``--per-tenant K``: K per tenant, on
   requests/K tenants, so siblings of one tenant are in flight together), submitted (not
   timed);
4. **the burst**: every request approved with "approve and merge" (``do_approve(...,
   merge=True)``: check, render, commit the branch, review, into the merge queue) by
   ``--approvers`` processes side by side (each its own Django, every Nth request, one after
   the other as fast as it can; set up before the clock starts), while the workers run the
   queue's batches (one check run per batch over the combined tree, one compare-and-swap of
   main). Timed from the first approval until every change is on main. Per request: its
   approval started -> its change merged. Lost: a request whose change is not merged, or
   whose commit main does not contain, at the end; missing: merged, but its GPUs are not in
   its tenant's quota on main at the end (a later change of the tenant took them away again:
   issue 24's lost update).
   ``--approvers 0``: the admin's "approve selected" instead, one ``catalog.approve_many``
   job on the workers approving every request in turn (per request from the moment its
   approval was decided).
5. **the baseline** in the same run, on other tenants: one request at a time approved
   without the queue, its own check run on a worker, waited for, then merged (``do_merge``):
   what approving a burst costs without the queue. It runs ``--baseline`` requests (fewer:
   each one is a full check run) and the table extrapolates to ``--requests`` linearly,
   which flatters the baseline (no queueing of checks behind each other is counted).

Prints a markdown table; ``--profile`` also runs one more batch in this process under cProfile
and prints where its time went.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.django_setup import p95  # noqa: E402

SHARE = {"flavor": "h200", "kind": "whole", "count": 1}


def _database(url: str, action: str) -> None:
    name = url.rsplit("/", 1)[1]
    host = url.split("@", 1)[1].split("/", 1)[0]
    hostname, _, port = host.partition(":")
    user = url.split("//", 1)[1].split("@", 1)[0].split(":", 1)[0]
    base = ["-h", hostname, "-p", port or "5432", "-U", user]
    if action == "reset":
        subprocess.run(["dropdb", *base, "--if-exists", "--force", name], check=True)
        subprocess.run(["createdb", *base, name], check=True)


def _environment(args: argparse.Namespace, tmp: Path, queue: str) -> dict[str, str]:
    return {
        "DATABASE_URL": args.database_url,
        "CELERY_BROKER_URL": args.broker,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "PORTAL_TASK_RUNNER": "celery",
        "PORTAL_VAR_DIR": str(tmp),
        "GITOPS_REPO_PATH": str(tmp / "fleet.git"),
        "GITOPS_MERGE_QUEUE_BATCH": str(args.batch),
        "FLEET_SIMULATOR": "0",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        # bench.django_setup made one when none was given: every process shares it.
        "PORTAL_ENCRYPTION_KEYS": os.environ["PORTAL_ENCRYPTION_KEYS"],
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }


# --- one fleet size, in its own process --------------------------------------------------------


def one_size(args: argparse.Namespace) -> dict[str, Any]:
    count = args.one_size
    tmp = Path(tempfile.mkdtemp(prefix=f"approval-burst-{count}-"))
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    env = _environment(args, tmp, queue)
    os.environ.update(env)
    _database(args.database_url, "reset")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    facts: dict[str, Any] = {"tenants": count}
    started = time.perf_counter()
    admin, member, tenants = _fleet(count, args.requests + args.baseline + args.batch)
    facts["fleet_s"] = round(time.perf_counter() - started, 1)
    # The fleet was committed straight to main, never checked: one check of main keeps every
    # tenant's values (as `manage.py check_main` after an upgrade), so the first batch does not
    # pay for the whole tree. Timed and reported, not part of the burst.
    started = time.perf_counter()
    call_command("check_main", stdout=open(os.devnull, "w"))  # noqa: SIM115
    facts["check_main_s"] = round(time.perf_counter() - started, 1)
    workers = _start_workers(args.workers, env)
    try:
        per = args.per_tenant
        if args.requests > count * per:
            raise SystemExit("--requests must not exceed the tenants times --per-tenant")
        started = time.perf_counter()
        asking = tenants[: -(-args.requests // per)]
        burst = [_request(t, member, f"burst{j}") for t in asking for j in range(per)]
        burst = burst[: args.requests]
        facts["per_tenant"] = per
        facts["submit_s"] = round(time.perf_counter() - started, 1)
        _drain(timeout=600)  # the submissions' notification jobs
        facts.update(_burst(burst, admin, args.timeout, args.approvers))
        _advance()
        if args.profile:
            facts["profile"] = _profile_batch(tenants, admin, member, args)
            _advance()
        # A second share on some of the same tenants, asked and merged one at a time.
        baseline = [_request(t, member, "single") for t in tenants[: args.baseline]]
        _drain(timeout=600)
        facts.update(_baseline(baseline, admin, args.timeout))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
    facts["load"] = round(os.getloadavg()[0], 2)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return facts


def _fleet(count: int, asked: int) -> tuple[Any, Any, list[Any]]:
    """N tenants in the database and on main, rendered as the portal renders them."""
    import dataclasses

    from django.contrib.auth import get_user_model

    from catalog.specs import desired_tenant
    from gitops import services
    from gitops.fleet import base_fleet, configured_fleet, flavor_mapping
    from gitops.models import FleetInventory
    from gitops.render import render_tenant_tree, render_tenants_index
    from gitops.repo import format_message
    from tenants.models import Membership, PlatformRole, Role, Tenant

    users = get_user_model()
    admin = users.objects.create_user("pam", "pam@example.com", "x")
    PlatformRole.objects.create(user=admin, role=PlatformRole.Name.PLATFORM_ADMIN)
    member = users.objects.create_user("dev", "dev@example.com", "x")
    # A pool big enough for every request: the burst is about throughput, not capacity.
    fleet = base_fleet()
    flavors = [
        dataclasses.replace(f, gpus=max(f.gpus, 4 * asked)) if f.name == "h200" else f
        for f in fleet.flavors
    ]
    FleetInventory.objects.create(
        flavors=[flavor_mapping(f) for f in flavors],
        topology_levels=list(fleet.topology_levels),
    )
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"t{i:05d}", display_name=f"Tenant {i}") for i in range(count)],
        batch_size=2000,
    )
    Membership.objects.bulk_create(
        [Membership(user=member, tenant=t, role=Role.MEMBER) for t in tenants], batch_size=2000
    )
    fleet = configured_fleet()
    base = services.ensure_bootstrapped(fleet)
    files: dict[str, bytes | None] = {}
    for tenant in Tenant.objects.all():
        files.update(render_tenant_tree(desired_tenant(tenant), fleet))
    files.update(render_tenants_index([t.slug for t in tenants]))
    repo = services.repository()
    repo.commit(
        files,
        message=format_message("Bench fleet", f"{count} tenants"),
        author=services.identity(None),
        branch="main",
        expected_parent=base,
    )
    subprocess.run(["git", f"--git-dir={repo.path}", "repack", "-a", "-d", "-q"], check=True)
    return admin, member, list(Tenant.objects.order_by("slug"))


def _start_workers(count: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    workers = []
    log = Path(env["PORTAL_VAR_DIR"]) / "workers.log"
    for n in range(count):
        workers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "--pool=solo",
                    "-n",
                    f"bench{n}@%h",
                    "-Q",
                    env["CELERY_TASK_DEFAULT_QUEUE"],
                    "--loglevel=WARNING",
                    "--without-mingle",
                    "--without-gossip",
                    "--without-heartbeat",
                ],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=log.open("ab"),
                stderr=subprocess.STDOUT,
            )
        )
    return workers


def _request(tenant: Any, member: Any, name: str) -> Any:
    from catalog import services

    return services.do_create_request(
        tenant,
        acting_user=member,
        kind="gpu-share",
        spec={**SHARE, "name": name},
        reason="reorganisation",
    )


def _advance() -> None:
    """What the catalog's schedule does every few seconds: merged requests become MERGED and
    their shares active, so the next change of the tenant is rendered with them."""
    from catalog import services

    services.advance_requests()
    _drain(timeout=600)


def _drain(timeout: float) -> None:
    """Wait until the workers have no job left (queued or running)."""
    from portal.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(status__in=["queued", "running"]).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not drain their jobs")
        time.sleep(0.2)


def _approve_all(pks: list[int], admin_pk: int) -> dict[int, tuple[float, int]]:
    """Approve and merge each request, one after the other: request -> (started, change)."""
    from django.contrib.auth import get_user_model

    from catalog import services
    from catalog.models import ResourceRequest

    admin = get_user_model().objects.get(pk=admin_pk)
    out: dict[int, tuple[float, int]] = {}
    for request in ResourceRequest.objects.filter(pk__in=pks).order_by("pk"):
        started = time.time()
        done = services.do_approve(request, acting_user=admin, merge=True)
        assert done.change_id is not None, done.error
        out[request.pk] = (started, done.change_id)
    return out


def approve_slice(args: argparse.Namespace) -> None:
    """One approver process of the burst: set up Django, say "ready", wait for "go" on stdin,
    approve the requests whose ids come on the command line, print what it did as JSON."""
    import django

    django.setup()
    pks = [int(pk) for pk in args.approve_slice]
    print("ready", flush=True)
    sys.stdin.readline()
    done = _approve_all(pks, args.admin)
    print(json.dumps({str(pk): list(v) for pk, v in done.items()}), flush=True)


def _start_approvers(pks: list[int], admin_pk: int, approvers: int) -> list[Any]:
    """``approvers`` processes, each with every Nth request of the burst, set up and waiting
    for "go" (so that their start-up is not timed)."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for n in range(approvers):
            share = [str(pk) for pk in pks[n::approvers]]
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--admin", str(admin_pk), "--approve-slice", *share],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            while (line := proc.stdout.readline()) and line.strip() != "ready":
                pass
            if not line:
                raise RuntimeError(f"an approver died while starting (exit {proc.wait()})")
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    return procs


def _approve_selected(pks: list[int], admin: Any, timeout: float) -> dict[int, Any]:
    """ "Approve selected" (``--approvers 0``): one ``catalog.approve_many`` job on a worker
    approves every request in turn; request -> (its approval's start, its change). The start
    is the moment its approval was decided (``decided_at``), read back when the job is done."""
    from catalog import services
    from catalog.models import ResourceRequest
    from portal.models import Job

    job = services.do_approve_many(pks, acting_user=admin, note="reorganisation", merge=True)
    deadline = time.monotonic() + timeout
    while Job.objects.get(pk=job.pk).status not in (Job.Status.SUCCEEDED, Job.Status.FAILED):
        if time.monotonic() > deadline:
            raise RuntimeError("the approve-selected job did not finish")
        time.sleep(0.1)
    rows = ResourceRequest.objects.filter(pk__in=pks).values_list("pk", "decided_at", "change_id")
    done = {pk: (at.timestamp(), change) for pk, at, change in rows if change is not None}
    assert len(done) == len(pks), Job.objects.get(pk=job.pk).log[-2000:]
    return done


def _run_approvers(procs: list[Any]) -> dict[int, Any]:
    """Let the approvers go at once; what each approved (request -> (started, change))."""
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    done: dict[int, Any] = {}
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"an approver failed (exit {proc.returncode})")
        done.update({int(pk): v for pk, v in json.loads(out.strip().splitlines()[-1]).items()})
    return done


def _burst(requests: list[Any], admin: Any, timeout: float, approvers: int) -> dict[str, Any]:
    from django.db.models import Count, F, Sum

    from gitops import services as gitops
    from gitops.models import ChangeRequest, MergeQueueBatch
    from portal.models import Job

    base = gitops.main_sha()
    pks = [r.pk for r in requests]
    procs = _start_approvers(pks, admin.pk, approvers) if approvers > 1 else []
    start_wall = time.time()
    started = time.perf_counter()
    if approvers == 0:
        done = _approve_selected(pks, admin, timeout)
    else:
        done = _run_approvers(procs) if procs else _approve_all(pks, admin.pk)
    approvals = time.perf_counter() - started
    approved_at = {pk: at for pk, (at, _) in done.items()}
    changes = {pk: change for pk, (_, change) in done.items()}
    assert len(set(changes.values())) == len(requests), "a change for each request, once"
    deadline = time.monotonic() + timeout
    ids = list(changes.values())
    while ChangeRequest.objects.filter(pk__in=ids, status="merged").count() < len(ids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    wall = time.perf_counter() - started
    merged = {c.pk: c for c in ChangeRequest.objects.filter(pk__in=ids, status="merged")}
    repo = gitops.repository()
    main = repo.head("main")
    assert main is not None and base is not None
    on_main = [c for c in merged.values() if repo.is_ancestor(c.merge_sha, main)]
    missing = _missing(repo, main, requests, {c.pk for c in on_main}, changes)
    latencies = [
        merged[changes[r]].merged_at.timestamp() - approved_at[r]
        for r in approved_at
        if changes[r] in merged
    ]
    batches = list(MergeQueueBatch.objects.all())
    # What the workers ran from the first approval to the end, by task: the burst's own work
    # (batches, mail, publication) and what competes with it for the cores.
    jobs = {
        row["task"]: [row["n"], round(row["s"].total_seconds(), 1) if row["s"] else 0.0]
        for row in Job.objects.filter(started_at__gte=_aware(start_wall))
        .values("task")
        .annotate(n=Count("id"), s=Sum(F("finished_at") - F("started_at")))
        .order_by("task")
    }
    commits = 0
    sha = main
    while sha != base:
        commits += 1
        sha = repo.parents(sha)[0]
    return {
        "burst_requests": len(requests),
        "approvers": approvers,
        "burst_approvals_per_s": round(len(requests) / approvals, 1),
        "burst_wall_s": round(wall, 1),
        "burst_approvals_s": round(approvals, 1),
        "burst_on_main": len(on_main),
        "burst_lost": len(requests) - len(on_main),
        "burst_missing": missing,
        "burst_commits": commits,
        "burst_p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "burst_p95_s": round(p95(latencies), 1) if latencies else None,
        "batches": len(batches),
        "check_runs": sum(b.check_runs for b in batches),
        "rebuilds": sum(b.rebuilds for b in batches),
        "batch_s": [
            round((b.finished_at - b.started_at).total_seconds(), 1)
            for b in batches
            if b.finished_at
        ],
        "start": start_wall,
        "jobs": jobs,
    }


def _missing(
    repo: Any, main: str, requests: list[Any], on_main: set[int], changes: dict[int, int]
) -> int:
    """Requests merged onto main whose GPUs main's quota of their tenant does not hold: what a
    later change of the tenant took away again (each request is one whole H200; the fleet's
    tenants start with none). Read from each tenant's ClusterQueue, so it means the same for
    any release of the portal."""
    from gitops.render.yamlio import load_documents

    merged: dict[str, int] = {}
    for request in requests:
        if changes.get(request.pk) in on_main:
            merged[request.tenant.slug] = merged.get(request.tenant.slug, 0) + 1
    missing = 0
    for slug, count in merged.items():
        nominal = 0
        for doc in load_documents(repo.read_file(main, f"tenants/{slug}/queues.yaml") or b""):
            if doc.get("kind") != "ClusterQueue":
                continue
            for group in doc["spec"].get("resourceGroups", []):
                for flavor in group["flavors"]:
                    for item in flavor["resources"]:
                        if flavor["name"] == "h200" and item["name"] == "nvidia.com/gpu":
                            nominal += int(item["nominalQuota"])
        missing += max(0, count - nominal)
    return missing


def _aware(timestamp: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC)


def _baseline(requests: list[Any], admin: Any, timeout: float) -> dict[str, Any]:
    from catalog import services
    from gitops import services as gitops
    from gitops.models import ChangeRequest

    times = []
    checks = []
    for request in requests:
        started = time.perf_counter()
        done = services.do_approve(request, acting_user=admin)
        assert done.change_id is not None, done.error
        deadline = time.monotonic() + timeout
        while True:
            change = ChangeRequest.objects.get(pk=done.change_id)
            if change.checks_state != "pending":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the checks of change {change.pk} did not finish")
            time.sleep(0.05)
        checks.append(time.perf_counter() - started)
        assert change.checks_state == "passed", list(change.checks.values("name", "summary"))
        gitops.do_merge(change, acting_user=admin)
        times.append(time.perf_counter() - started)
    return {
        "baseline_requests": len(requests),
        "baseline_total_s": round(sum(times), 1),
        "baseline_p50_s": round(statistics.median(times), 2),
        "baseline_p95_s": round(p95(times), 2),
        "baseline_check_p50_s": round(statistics.median(checks), 2),
    }


def _profile_batch(tenants: list[Any], admin: Any, member: Any, args: argparse.Namespace) -> str:
    """One more batch of ``--batch`` changes run in this process under cProfile."""
    import cProfile
    import io
    import pstats

    from catalog import services
    from gitops import merge_queue

    requests = [_request(t, member, "profiled") for t in tenants[: args.batch]]
    _drain(timeout=600)
    # Holding the queue's lease meanwhile, the workers' runs leave these changes queued: the
    # batch runs here, under the profiler.
    assert merge_queue.acquire_lease("bench profiler")
    for request in requests:
        services.do_approve(request, acting_user=admin, merge=True)
    _drain(timeout=600)
    merge_queue.release_lease("bench profiler")
    profiler = cProfile.Profile()
    profiler.enable()
    outcome = merge_queue.run_queue("profile", lambda line: None)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    return outcome + "\n" + out.getvalue()


# --- the parent: run each size, print the table -----------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--baseline", type=int, default=20, help="one-at-a-time requests")
    parser.add_argument(
        "--per-tenant", type=int, default=1, help="requests of one tenant in the burst"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--approvers",
        type=int,
        default=2,
        help='processes approving the burst side by side; 0: one "approve selected" job '
        "(catalog.approve_many) on the workers",
    )
    parser.add_argument("--batch", type=int, default=250, help="GITOPS_MERGE_QUEUE_BATCH")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/portal_mqueue"
    )
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the repository and logs")
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--approve-slice", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--admin", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.approve_slice:
        approve_slice(args)
        return
    if args.one_size:
        print(json.dumps(one_size(args)))
        return
    print(
        f"Machine: {os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}; {args.workers} Celery workers, batch {args.batch}, "
        + (
            f"{args.approvers} approver processes"
            if args.approvers
            else 'approved by one "approve selected" job on a worker'
        )
    )
    rows = []
    for count in args.tenants:
        command = [sys.executable, __file__, "--one-size", str(count)]
        for flag in ("requests", "baseline", "workers", "approvers", "batch", "timeout", "broker"):
            command += [f"--{flag}", str(getattr(args, flag))]
        command += ["--per-tenant", str(args.per_tenant)]
        command += ["--database-url", args.database_url]
        command += [f"--{flag}" for flag in ("profile", "keep") if getattr(args, flag)]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"the run at {count} tenants failed")
        facts = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps({k: v for k, v in facts.items() if k != "profile"}), file=sys.stderr)
        if args.profile:
            print(facts["profile"], file=sys.stderr)
        rows.append(facts)
    print()
    print(
        "| tenants | variant | requests | wall s | on main | lost | missing | p50 s | p95 s "
        "| check runs |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    how = "approve and merge" if args.approvers else "approve selected, one job"
    if args.per_tenant > 1:
        how += f", {args.per_tenant} per tenant"
    for f in rows:
        print(
            f"| {f['tenants']:,} | {how} (queue, batch {args.batch}) | "
            f"{f['burst_requests']:,} | {f['burst_wall_s']} | {f['burst_on_main']:,} | "
            f"{f['burst_lost']} | {f['burst_missing']} | {f['burst_p50_s']} | "
            f"{f['burst_p95_s']} | {f['check_runs']} |"
        )
        per = f["baseline_total_s"] / max(1, f["baseline_requests"])
        print(
            f"| {f['tenants']:,} | one at a time (measured) | {f['baseline_requests']} | "
            f"{f['baseline_total_s']} | {f['baseline_requests']} | 0 | | {f['baseline_p50_s']} | "
            f"{f['baseline_p95_s']} | {f['baseline_requests']} |"
        )
        print(
            f"| {f['tenants']:,} | one at a time (extrapolated) | {args.requests:,} | "
            f"{per * args.requests:.0f} | | | | | | {args.requests:,} |"
        )
    for f in rows:
        print(
            f"\n{f['tenants']:,} tenants: fleet built in {f['fleet_s']} s, main checked once "
            f"in {f['check_main_s']} s (every tenant computed); approvals alone took "
            f"{f['burst_approvals_s']} s ({f['approvers']} processes, "
            f"{f['burst_approvals_per_s']} a second); {f['batches']} batches "
            f"({f['rebuilds']} rebuilt), "
            f"batch times {f['batch_s']} s; {f['burst_commits']} commits on main; one-at-a-time "
            f"check p50 {f['baseline_check_p50_s']} s; load {f['load']}; worker jobs during "
            "the burst (task: count, seconds): "
            + ", ".join(f"{task}: {n}, {secs} s" for task, (n, secs) in f["jobs"].items())
        )


if __name__ == "__main__":
    main()
