"""Deletion as the API server and the garbage collector carry it out: propagation policies,
the ``orphan`` and ``foregroundDeletion`` finalizers, and dependents that go with their owner.

- **The API's DELETE** (k8s.io/apiserver ``pkg/registry/generic/registry/store.go``
  ``Store.Delete``, ``deletionFinalizersForGarbageCollection``): ``Background`` deletes the
  object at once and leaves its dependents to the collector; ``Foreground`` and ``Orphan`` set
  ``metadata.deletionTimestamp`` and the ``foregroundDeletion`` or ``orphan`` finalizer and keep
  the object until the collector removed the finalizer. Without a policy the resource's
  default applies: ``Background``, except batch/v1 Jobs, which orphan their pods for
  backward compatibility (kubernetes ``pkg/registry/batch/job/strategy.go``
  ``DefaultGarbageCollectionPolicy``) and warn about it (``pkg/registry/batch/job/storage/
  storage.go`` ``deleteOptionWarnings``).
- **The collector** (kube-controller-manager ``pkg/controller/garbagecollector``) sees every
  deletion, as its informers do, whoever deleted (the API, Flux's prune, a controller): an
  object whose ``ownerReferences`` all name owners that are gone is deleted (in the
  background, so its own dependents follow); one that still has a live owner loses the
  dangling reference only. An owner waiting in ``foregroundDeletion`` has its dependents
  deleted first, their own dependents before them, then goes; one waiting in ``orphan`` has
  the references to it removed from its dependents, then goes. A foreground deletion
  finishes within one pass here (the real collector takes several).

Owners are matched by uid, checked against the live object of the reference's kind and name,
as ``attemptToDeleteItem`` does. Pods are deleted through the cluster (their devices freed,
no replacement: their owner is gone).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from simulator.cluster import Cluster
from simulator.store import (
    JOBS,
    PODS,
    RESOURCES,
    JsonObject,
    Resource,
    Store,
    WatchEvent,
    as_dict,
    as_list,
    key_of,
    resource_of,
    timestamp,
)

logger = logging.getLogger(__name__)

FOREGROUND = "Foreground"
BACKGROUND = "Background"
ORPHAN = "Orphan"
POLICIES = (FOREGROUND, BACKGROUND, ORPHAN)
# metav1.FinalizerOrphanDependents and metav1.FinalizerDeleteDependents.
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
JOB_DELETE_WARNING = (
    "child pods are preserved by default when jobs are deleted; set "
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress "
    "this warning"
)


def default_policy(resource: Resource) -> str:
    """The propagation a DELETE without one gets."""
    return ORPHAN if resource is JOBS else BACKGROUND


@dataclass(frozen=True)
class Deletion:
    """What a DELETE did: ``gone`` when the object was removed at once; ``obj`` is the object
    as removed, or as it now waits for the collector (deletionTimestamp and finalizer)."""

    gone: bool
    obj: JsonObject


class GarbageCollector:
    """Propagates deletions to dependents on every ``tick``."""

    def __init__(self, store: Store, cluster: Cluster) -> None:
        self.store = store
        self.cluster = cluster
        # (namespace, uid) of objects deleted since the last pass: their dependents are due.
        self._gone: list[tuple[str, str]] = []
        # (plural, namespace, name) of objects waiting in the orphan or foreground finalizer.
        self._waiting: set[tuple[str, str, str]] = set()
        store.listen(self._observe)

    def _observe(self, event: WatchEvent) -> None:
        if event.type != "DELETED":
            return
        metadata = as_dict(event.object.get("metadata"))
        uid = metadata.get("uid")
        if isinstance(uid, str) and uid:
            self._gone.append((str(metadata.get("namespace") or ""), uid))

    # --- the API -----------------------------------------------------------------------------

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        policy: str,
        now: float,
        *,
        dry_run: bool = False,
    ) -> Deletion | None:
        """DELETE ``resource`` ``namespace``/``name`` with propagation ``policy`` (one of
        ``POLICIES``); None when there is no such object. ``dry_run`` answers as the deletion
        would and changes nothing."""
        with self.store.lock:
            current = self.store.get(resource, namespace, name)
            if current is None:
                return None
            if policy == BACKGROUND:
                if not dry_run:
                    self._remove(resource, namespace, name, now)
                return Deletion(True, current)
            finalizer = FOREGROUND_FINALIZER if policy == FOREGROUND else ORPHAN_FINALIZER

            def mark(obj: JsonObject) -> None:
                metadata = obj.setdefault("metadata", {})
                kept = [
                    f
                    for f in as_list(metadata.get("finalizers"))
                    if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)
                ]
                metadata["finalizers"] = [*kept, finalizer]
                metadata.setdefault("deletionTimestamp", timestamp(now))
                metadata.setdefault("deletionGracePeriodSeconds", 0)

            if dry_run:
                mark(current)
                return Deletion(False, current)
            marked = self.store.mutate(resource, namespace, name, mark)
            self._waiting.add((resource.plural, namespace, name))
            return Deletion(False, marked or current)

    # --- the collector -----------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Finish the deletions waiting in a finalizer, then delete the dependents of what was
        deleted, until nothing more is due."""
        with self.store.lock:
            for plural, namespace, name in sorted(self._waiting):
                self._finish(RESOURCES[plural], namespace, name, now)
            self._waiting.clear()
            while self._gone:
                gone, self._gone = self._gone, []
                self._collect(gone, now)

    def _finish(self, resource: Resource, namespace: str, name: str, now: float) -> None:
        obj = self.store.get(resource, namespace, name)
        if obj is None:
            return
        metadata = as_dict(obj.get("metadata"))
        finalizers = [str(f) for f in as_list(metadata.get("finalizers"))]
        uid = str(metadata.get("uid") or "")
        if FOREGROUND_FINALIZER in finalizers:
            for dependent_resource, dependent in self._dependents(namespace or None, {uid}):
                self._delete_tree(dependent_resource, dependent, now)
        if ORPHAN_FINALIZER in finalizers:
            for dependent_resource, dependent in self._dependents(namespace or None, {uid}):
                self._drop_references(dependent_resource, dependent, {uid})
        left = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
        if left:
            self.store.mutate(
                resource, namespace, name, lambda o: o["metadata"].update(finalizers=left)
            )
            return
        self._remove(resource, namespace, name, now)

    def _delete_tree(self, resource: Resource, obj: JsonObject, now: float) -> None:
        """Delete ``obj`` after its dependents, depth first (a foreground deletion)."""
        namespace, name = key_of(obj)
        uid = str(as_dict(obj.get("metadata")).get("uid") or "")
        for dependent_resource, dependent in self._dependents(namespace or None, {uid}):
            self._delete_tree(dependent_resource, dependent, now)
        self._remove(resource, namespace, name, now)

    def _collect(self, gone: Iterable[tuple[str, str]], now: float) -> None:
        by_namespace: dict[str, set[str]] = {}
        for namespace, uid in gone:
            by_namespace.setdefault(namespace, set()).add(uid)
        self.cluster.forget_recreations({uid for uids in by_namespace.values() for uid in uids})
        for namespace, uids in sorted(by_namespace.items()):
            # A cluster-scoped owner may have dependents in every namespace.
            for resource, dependent in self._dependents(namespace or None, uids):
                if self._live_owners(dependent):
                    self._drop_references(resource, dependent, uids)
                else:
                    self._remove(resource, *key_of(dependent), now)

    def _dependents(
        self, namespace: str | None, uids: set[str]
    ) -> list[tuple[Resource, JsonObject]]:
        return [(RESOURCES[plural], obj) for plural, obj in self.store.owned_by(uids, namespace)]

    def _live_owners(self, obj: JsonObject) -> bool:
        """Whether a reference of ``obj`` still names a live owner (same kind, name, uid)."""
        namespace = key_of(obj)[0]
        for reference in as_list(as_dict(obj.get("metadata")).get("ownerReferences")):
            reference = as_dict(reference)
            resource = resource_of(str(reference.get("apiVersion")), str(reference.get("kind")))
            if resource is None:
                continue
            owner = self.store.get(
                resource, namespace if resource.namespaced else "", str(reference.get("name"))
            )
            if owner is not None and as_dict(owner.get("metadata")).get("uid") == reference.get(
                "uid"
            ):
                return True
        return False

    def _drop_references(self, resource: Resource, obj: JsonObject, uids: set[str]) -> None:
        def drop(current: JsonObject) -> None:
            metadata = current.setdefault("metadata", {})
            kept = [
                r
                for r in as_list(metadata.get("ownerReferences"))
                if as_dict(r).get("uid") not in uids
            ]
            if kept:
                metadata["ownerReferences"] = kept
            else:
                metadata.pop("ownerReferences", None)

        self.store.mutate(resource, *key_of(obj), drop)

    def _remove(self, resource: Resource, namespace: str, name: str, now: float) -> None:
        logger.info("deleting %s %s/%s", resource.plural, namespace, name)
        if resource is PODS:
            with contextlib.suppress(LookupError):
                self.cluster.delete_pod(namespace, name, now, recreate=False)
            return
        self.store.delete(resource, namespace, name)
