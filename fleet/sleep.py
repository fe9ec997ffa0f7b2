"""A sleeping tenant cluster's GPUs freed: the pods its syncer left in the host namespace.

A tenant cluster sleeps by a Git change that scales its control plane StatefulSet to zero
(``gitops.render.vcluster``; vCluster v0.35.3's own sleep mode is a Platform feature,
config/config.go ``IsProFeatureEnabled``). That stops the syncer, not what it made: the pods it
created in the host namespace keep running, and keep their GPUs. ``vcluster pause`` removes
them itself, and ``free_host_pods`` does what it does (loft-sh/vcluster v0.35.3):

- pkg/cli/pause_helm.go ``PauseVCluster``: ``lifecycle.PauseVCluster`` (scale the StatefulSet
  ``app=vcluster,release=<release>`` down and wait for its ``status.replicas`` to reach 0),
  then ``lifecycle.DeletePods`` with ``vcluster.loft.sh/managed-by=<release>`` in the
  release's namespace;
- pkg/lifecycle/lifecycle.go ``DeletePods``: list that namespace's pods by the label selector
  and delete each with default options (its own grace period), a NotFound skipped.

Here the scale-down is the Git change, so the wait is on its outcome: nothing is deleted while
pod ``<release>-0`` exists. The third step of ``PauseVCluster``
(``DeleteMultiNamespaceVClusterWorkloads``) is for multi-namespace mode, which the portal's
clusters do not use: their syncer writes into the tenant's namespace only.

Waking needs nothing from here. The virtual cluster keeps its objects while it sleeps; when the
control plane is back, its pod syncer (pkg/controllers/resources/pods/syncer.go ``SyncToHost``)
deletes every virtual pod that had started and has no host pod ("to avoid conflicts with
nodes"), so the virtual cluster's own controllers (Deployments, StatefulSets, Jobs) make new
pods, which are synced and scheduled again; a bare pod that had started does not come back.
The simulator models both (``simulator/syncer.py`` ``Syncer._reconcile_one``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleet.kube import Kube
from gitops.render.validate import DNS1123_LABEL

# The label the syncer puts on every host object it makes, its value the release
# (pkg/util/translate ``MarkerLabel``; the syncer renames a virtual object's own copy of it). A
# pod the tenant runs in its namespace directly could carry it too: it is the tenant's, in the
# tenant's namespace, and goes with the cluster's, as under ``vcluster pause``.
MANAGED_BY = "vcluster.loft.sh/managed-by"


@dataclass(frozen=True)
class Freed:
    """What one pass did for one cluster: ``waiting`` while its control plane pod is there
    (nothing deleted), else the host pods it deleted (none: already freed)."""

    waiting: bool
    deleted: tuple[str, ...] = ()


def control_plane_pod(release: str) -> str:
    """The control plane's pod: the StatefulSet ``<release>``'s only replica."""
    return f"{release}-0"


def free_host_pods(kube: Kube, namespace: str, release: str) -> Freed:
    """Delete the pods the syncer of vCluster ``release`` made in ``namespace``, once its control
    plane pod is gone; the caller has checked that main holds the cluster asleep."""
    for value, what in ((namespace, "namespace"), (release, "release")):
        if not DNS1123_LABEL.fullmatch(value) or len(value) > 63:
            raise ValueError(f"{what} {value!r} is not a DNS-1123 label")
    if kube.pod_exists(namespace, control_plane_pod(release)):
        return Freed(waiting=True)
    deleted = []
    for pod in kube.list_namespace_pods(namespace, label_selector=f"{MANAGED_BY}={release}"):
        meta: dict[str, Any] = (pod.get("metadata") or {}) if isinstance(pod, dict) else {}
        # The API server filtered already; an answer that did not is not trusted to.
        if (
            meta.get("namespace") != namespace
            or (meta.get("labels") or {}).get(MANAGED_BY) != release
        ):
            continue
        name = str(meta.get("name") or "")
        if name and kube.delete_pod(namespace, name):
            deleted.append(name)
    return Freed(waiting=False, deleted=tuple(sorted(deleted)))
