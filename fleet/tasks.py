"""Background work of the fleet app: the sync, queue positions, drains, burn-in, and flavors
from the inventory."""

from __future__ import annotations

from datetime import timedelta

from fleet import burnin, netbox, remediation, reservations, services
from fleet.kube import Kube, KubeError
from fleet.models import Node, SyncState
from portal.audit import record_audit
from portal.jobs import job_task, prune_scheduled
from portal.models import Job

# Scheduled syncs run every few seconds; keep an hour of them, not the job retention's worth.
SCHEDULED_SYNC_KEEP = timedelta(hours=1)


@job_task("fleet.sync")
def sync(job: Job) -> None:
    """Read the cluster once. A source that cannot be read is recorded as stale, not retried:
    the next scheduled sync is the retry."""
    report = services.sync_all(progress=job.set_progress)
    if report.errors:
        job.append_log("; ".join(f"{source}: {error}" for source, error in report.errors.items()))
    if report.moved_changes:
        job.append_log(f"changes moved on: {', '.join(f'#{pk}' for pk in report.moved_changes)}")
    if not report.errors.get(SyncState.Source.NODES):
        _mark_reserved(job)
        _remediate(job)
    prune_scheduled("fleet.sync", SCHEDULED_SYNC_KEEP)


def _mark_reserved(job: Job) -> None:
    """Reserved nodes as main holds them: the rows follow, the nodes get (or lose) their mark
    (``fleet.reservations``)."""
    reservations.follow()
    try:
        with Kube() as kube:
            for line in reservations.apply_marks(kube):
                job.append_log(f"reservations: {line}")
    except KubeError as exc:
        job.append_log(f"reservations: {exc}")


@job_task("fleet.remediate")
def remediate(job: Job) -> None:
    """One round of the remediation loop on the nodes as last read (fleet.remediation)."""
    _remediate(job)
    prune_scheduled("fleet.remediate", SCHEDULED_SYNC_KEEP)


def _remediate(job: Job) -> None:
    try:
        report = remediation.step()
    except KubeError as exc:
        job.append_log(f"remediation: {exc}")
        return
    for line in (
        [f"cordoned {name}" for name in report.cordoned]
        + [f"moved on: {name}" for name in report.moved]
        + [f"held: {why}" for why in report.held]
        + [f"warning: {why}" for why in report.warned]
        + [f"remediation: {error}" for error in report.errors]
    ):
        job.append_log(line)


@job_task("fleet.queue_positions")
def queue_positions(job: Job) -> None:
    """Read the waiting workloads' queue positions from Kueue's visibility API. A failure is
    recorded as stale positions, not retried: the next scheduled run is the retry."""
    try:
        with Kube() as kube:
            read = services.sync_positions(kube)
    except KubeError as exc:
        services.record_sync(SyncState.Source.POSITIONS, error=str(exc))
        job.append_log(str(exc))
    else:
        services.record_sync(SyncState.Source.POSITIONS, items=read)
        job.set_progress(100, f"read {read} queue position{'' if read == 1 else 's'}")
    prune_scheduled("fleet.queue_positions", SCHEDULED_SYNC_KEEP)


@job_task("fleet.drain")
def drain(job: Job) -> None:
    """Evict the pods an admin confirmed, one by one, with progress; report what stayed."""
    node_name = job.kwargs["node"]
    pods = list(job.kwargs.get("pods", []))
    job.set_progress(1, f"evicting {len(pods)} pods from {node_name}")
    evicted, failed = services.evict_pods(node_name, pods, progress=job.set_progress)
    node = Node.objects.filter(name=node_name).first()
    if node is not None:
        record_audit(
            actor=job.created_by,
            action="node.drain_finished",
            target=node,
            diff={"evicted": [None, evicted], "not_evicted": [None, failed]},
        )
    if failed:
        for pod, why in failed.items():
            job.append_log(f"{pod}: {why}")
        raise RuntimeError(
            f"{len(failed)} of {len(pods)} pods could not be evicted from {node_name}; "
            "they are listed in the log. The node stays cordoned."
        )
    job.set_progress(100, f"evicted {len(evicted)} pods; {node_name} stays cordoned")
    if node is not None:
        try:
            left = [
                f"{p.namespace}/{p.name}"
                for p in services.drain_plan(node).evict
                if f"{p.namespace}/{p.name}" not in evicted
            ]
        except KubeError as exc:
            job.append_log(f"could not list what is left on {node_name}: {exc}")
        else:
            job.append_log(
                f"{len(left)} pod{'' if len(left) == 1 else 's'} arrived after the plan, "
                f"still on {node_name}: "
                f"{', '.join(left)}; drain again to evict them"
                if left
                else f"{node_name} runs no workload pods any more"
            )


@job_task("fleet.reconcile_flavors")
def reconcile_flavors(job: Job) -> None:
    change, notes = services.do_reconcile_flavors(acting_user=job.created_by)
    for note in notes:
        job.append_log(note)
    job.set_progress(
        100, f"pull request #{change.pk} is open" if change else "flavors match the inventory"
    )


@job_task("fleet.burn_in")
def burn_in(job: Job) -> None:
    """Move every node in burn-in one step on (``fleet.burnin``). A cluster that cannot be
    reached is logged, not retried: the next scheduled run is the retry."""
    try:
        with Kube() as kube:
            runs = burnin.run_all(kube)
    except KubeError as exc:
        job.append_log(str(exc))
    else:
        job.set_progress(100, f"{len(runs)} node{'' if len(runs) == 1 else 's'} in burn-in")
    prune_scheduled("fleet.burn_in", SCHEDULED_SYNC_KEEP)


@job_task(netbox.TASK)
def netbox_sync(job: Job) -> None:
    """Sync the fleet's nodes (or those in ``kwargs["nodes"]``) to NetBox (``fleet.netbox``).
    What failed is recorded and logged, not retried: the next lifecycle move or scheduled run
    is the retry."""
    report = netbox.sync(job.kwargs.get("nodes"))
    for line in report.lines():
        job.append_log(line)
    job.set_progress(100, report.summary())
    prune_scheduled(netbox.TASK, SCHEDULED_SYNC_KEEP)
