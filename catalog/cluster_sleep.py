"""What follows a tenant cluster's sleep on main: the GPUs its workloads held are freed.

``catalog.idle_actions`` puts a cluster to sleep by a change that scales its control plane to
zero; the pods its syncer made in the tenant's namespace outlive it (``fleet.sleep`` says why
and what ``vcluster pause`` does about it). ``free_sleeping_clusters`` runs with the idle merge
(``catalog.tasks.idle_merge``, every ``FLEET_SYNC_SECONDS``): for every active cluster that
main holds asleep, once its control plane pod is gone, it deletes those pods, and records one
audit row per cluster with how many went. A cluster main holds awake is never touched; the
next pass after all are gone deletes nothing and records nothing.

It runs here rather than in the fleet sync because it acts on what the catalog knows: which
clusters are the tenants' and which main holds asleep, and the resource the audit row is about
(a tenant's audit page shows it). The control plane's absence is read live from the API, not
from the sync's read model, so a stale sync cannot make it act early.

A wake that merges between main's read and the deletion is harmless: Flux has not started the
control plane yet (else its pod would be seen), and the woken syncer replaces what went
(``fleet.sleep``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog.models import Kind, Resource
from fleet.kube import Kube, KubeError
from fleet.sleep import free_host_pods
from gitops import services as gitops
from portal.audit import record_audit

AUDIT_ACTION = "cluster.host_pods_freed"


@dataclass
class FreeReport:
    """One pass: host pods deleted per cluster (``tenant/cluster``), clusters whose control
    plane is still running, and the clusters the API would not answer for."""

    freed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def free_sleeping_clusters(kube: Kube | None = None) -> FreeReport:
    """One pass over the active tenant clusters (see the module docstring). No client is
    opened when main holds none asleep."""
    report = FreeReport()
    clusters = (
        Resource.objects.filter(kind=Kind.CLUSTER, state=Resource.State.ACTIVE)
        .select_related("tenant")
        .order_by("tenant__slug", "name")
    )
    asleep: dict[str, set[str]] = {}
    own: Kube | None = None
    try:
        for resource in clusters:
            slug = resource.tenant.slug
            if slug not in asleep:
                spec = gitops.tenant_spec_on_main(slug)
                asleep[slug] = {c.name for c in spec.clusters if c.asleep} if spec else set()
            if resource.name not in asleep[slug]:
                continue
            if kube is None:
                kube = own = Kube()
            where = f"{slug}/{resource.name}"
            try:
                # The release is installed into the tenant's namespace under the cluster's name
                # (gitops.render.vcluster ``helm_release``).
                freed = free_host_pods(kube, slug, resource.name)
            except (KubeError, ValueError) as exc:
                report.errors[where] = str(exc)
                continue
            if freed.waiting:
                report.waiting.append(where)
            elif freed.deleted:
                report.freed[where] = freed.deleted
                record_audit(
                    actor=None,
                    action=AUDIT_ACTION,
                    target=resource,
                    tenant_slug=slug,
                    diff={"host_pods_deleted": [None, len(freed.deleted)]},
                )
    finally:
        if own is not None:
            own.close()
    return report
