"""Kueue's visibility API (``visibility.kueue.x-k8s.io/v1beta2``): a queue's pending workloads
in the order Kueue will try them, with their positions.

Read from kubernetes-sigs/kueue v0.19.2: ``apis/visibility/v1beta2/types.go``
(``PendingWorkloadsSummary``, ``PendingWorkload``), ``pkg/visibility/storage/
pending_workloads_cq.go`` and ``pending_workloads_lq.go`` (``Get``: ``offset`` and ``limit``
bounded by ``boundedLimitOffset``, limit 1000 by default, at most 100,000; a missing queue is
``NotFound`` for the resource ``clusterqueue`` or ``localqueue`` of the group), ``utils.go``
``newPendingWorkload`` (name, namespace, owners and creation time; priority; LocalQueue;
position in the ClusterQueue and in the LocalQueue, from 0). The order is the ClusterQueue's
queue order (``kueue.Kueue.pending``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simulator.store import CLUSTER_QUEUES, LOCAL_QUEUES, JsonObject, as_dict, as_list

if TYPE_CHECKING:
    from simulator.kueue import Kueue

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


class QueueNotFound(LookupError):
    """``errors.NewNotFound(visibility.Resource(kind), name)``."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f'{kind}.{GROUP} "{name}" not found')
        self.kind = kind
        self.name = name


def _bounded(limit: int, offset: int) -> tuple[int, int]:
    """``boundedLimitOffset``."""
    return min(max(limit, 0), MAX_LIMIT), max(offset, 0)


def _item(wl: Mapping[str, Any], in_local_queue: int, in_cluster_queue: int) -> JsonObject:
    metadata = as_dict(wl.get("metadata"))
    owners = [
        {k: as_dict(ref).get(k) for k in ("apiVersion", "kind", "name", "uid")}
        for ref in as_list(metadata.get("ownerReferences"))
    ]
    item_meta: JsonObject = {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "creationTimestamp": metadata.get("creationTimestamp"),
    }
    if owners:
        item_meta["ownerReferences"] = owners
    spec = as_dict(wl.get("spec"))
    return {
        "metadata": item_meta,
        "priority": int(spec.get("priority") or 0),
        "localQueueName": str(spec.get("queueName", "")),
        "positionInClusterQueue": in_cluster_queue,
        "positionInLocalQueue": in_local_queue,
    }


def _summary(items: list[JsonObject]) -> JsonObject:
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": API_VERSION,
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def cluster_queue_pending(
    kueue: Kueue, name: str, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> JsonObject:
    """``pendingWorkloadsInCqREST.Get``."""
    if kueue.store.get(CLUSTER_QUEUES, "", name) is None:
        raise QueueNotFound("clusterqueue", name)
    limit, offset = _bounded(limit, offset)
    pending = kueue.pending(name)
    items = []
    positions: dict[tuple[str, str], int] = {}
    for index, wl in enumerate(pending[: offset + limit]):
        key = (
            str(as_dict(wl.get("metadata")).get("namespace", "")),
            str(as_dict(wl.get("spec")).get("queueName", "")),
        )
        in_local = positions.get(key, 0)
        positions[key] = in_local + 1
        if index >= offset:
            items.append(_item(wl, in_local, index))
    return _summary(items)


def local_queue_pending(
    kueue: Kueue, namespace: str, name: str, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> JsonObject:
    """``pendingWorkloadsInLqREST.Get``."""
    local = kueue.store.get(LOCAL_QUEUES, namespace, name)
    if local is None:
        raise QueueNotFound("localqueue", name)
    limit, offset = _bounded(limit, offset)
    cq_name = str(as_dict(local.get("spec")).get("clusterQueue", ""))
    items: list[JsonObject] = []
    skipped = 0
    for index, wl in enumerate(kueue.pending(cq_name)):
        if len(items) >= limit:
            break
        metadata, spec = as_dict(wl.get("metadata")), as_dict(wl.get("spec"))
        if metadata.get("namespace") != namespace or spec.get("queueName") != name:
            continue
        if skipped < offset:
            skipped += 1
        else:
            items.append(_item(wl, len(items) + offset, index))
    return _summary(items)
