"""Status as events: Kubernetes watches keep the fleet's rows current between syncs.

For each kind the sync reads (nodes, pods, Flux Kustomizations and HelmReleases, KServe
InferenceServices, Kueue Workloads, ClusterQueues, LocalQueues and Cohorts) one thread lists,
then watches from the list's resourceVersion with
``allowWatchBookmarks``, as client-go's reflector does (the Kubernetes API concepts,
"Efficient detection of changes" and "Watch bookmarks"):

- every event writes the same row the sync writes, through the sync's own per-object code
  (``fleet.services.store_*``), and triggers the sync's follow-ups: merged changes move to
  applied (``gitops.applied``) and catalog requests to ready (``fleet.signals``);
- the resourceVersion of the last event or BOOKMARK is kept in ``WatchState``: a watch the
  server ends (its timeout) or that breaks resumes from there, also after a restart;
- a resourceVersion the server no longer keeps answers 410 Gone, as an ERROR event carrying a
  Status with code 410 (or an HTTP 410): the watcher forgets it and lists again, the reflector's
  relist (kubernetes/kubernetes#83520; ManageIQ/kubeclient#452 on the ERROR-event form).

The scheduled sync stays the fallback: should the watcher be down, pages show how long ago the
cluster was last heard and warn when a watch is stale.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import F
from django.utils import timezone

from fleet import remediation, services
from fleet.kube import (
    CLUSTER_QUEUE,
    COHORT,
    HELM_RELEASE,
    INFERENCE_SERVICE,
    KUSTOMIZATION,
    LOCAL_QUEUE,
    WORKLOAD,
    Kube,
    KubeError,
    Watchable,
)
from fleet.models import SyncState, WatchState
from fleet.signals import status_changed
from gitops.fleet import configured_fleet

logger = logging.getLogger(__name__)

# After a failed list or watch, wait this long before the next try (doubling up to the max).
RETRY_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


@dataclass(frozen=True)
class Watched:
    """One kind the watcher follows, and how its objects become rows."""

    name: str  # the resource's plural, WatchState.kind
    target: Watchable
    source: str  # the SyncState source its list counts as
    store_all: Callable[[list[Any]], tuple[int, int]]
    store_one: Callable[[str, Any], None]
    moves_changes: bool = False  # Kustomizations decide whether merged changes are applied
    moves_requests: bool = False  # what catalog readiness reads


def _store_node(event: str, obj: Any) -> None:
    """Store the node, then nudge the remediation loop: a fatal signal the watch brings is
    acted on at once, not at the next scheduled round."""
    services.store_node(event, obj, configured_fleet())
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
    if event != "DELETED" and isinstance(name, str):
        remediation.nudge(name)


WATCHED: tuple[Watched, ...] = (
    Watched(
        "nodes",
        "nodes",
        SyncState.Source.NODES,
        lambda items: services.store_nodes(items, configured_fleet()),
        lambda event, obj: _store_node(event, obj),
    ),
    Watched(
        "pods", "pods", SyncState.Source.PODS, services.store_workloads, services.store_workload
    ),
    Watched(
        KUSTOMIZATION.plural,
        KUSTOMIZATION,
        SyncState.Source.FLUX,
        lambda items: services.store_custom(KUSTOMIZATION, items),
        lambda event, obj: services.store_custom_object(KUSTOMIZATION, event, obj),
        moves_changes=True,
        moves_requests=True,
    ),
    Watched(
        HELM_RELEASE.plural,
        HELM_RELEASE,
        SyncState.Source.FLUX,
        lambda items: services.store_custom(HELM_RELEASE, items),
        lambda event, obj: services.store_custom_object(HELM_RELEASE, event, obj),
        moves_requests=True,
    ),
    Watched(
        INFERENCE_SERVICE.plural,
        INFERENCE_SERVICE,
        SyncState.Source.KSERVE,
        lambda items: services.store_custom(INFERENCE_SERVICE, items),
        lambda event, obj: services.store_custom_object(INFERENCE_SERVICE, event, obj),
        moves_requests=True,
    ),
    # Kueue: what the queue pages read (fleet.queues). Nothing follows from them in the catalog.
    Watched(
        COHORT.plural,
        COHORT,
        SyncState.Source.KUEUE,
        services.store_cohorts,
        services.store_cohort,
    ),
    Watched(
        CLUSTER_QUEUE.plural,
        CLUSTER_QUEUE,
        SyncState.Source.KUEUE,
        services.store_cluster_queues,
        services.store_cluster_queue,
    ),
    Watched(
        LOCAL_QUEUE.plural,
        LOCAL_QUEUE,
        SyncState.Source.KUEUE,
        services.store_local_queues,
        services.store_local_queue,
    ),
    Watched(
        WORKLOAD.plural,
        WORKLOAD,
        SyncState.Source.KUEUE,
        services.store_queue_workloads,
        services.store_queue_workload,
    ),
)


def follow_up(*, changes: bool, requests: bool) -> None:
    """What the sync does after reading Flux and the catalog's schedule after that: merged
    changes move to applied or failed, requests to ready."""
    if changes:
        services.update_changes()
    if changes or requests:
        status_changed.send(sender=Watched)


FollowUp = Callable[..., None]  # follow_up's signature: (*, changes: bool, requests: bool)


class Coalesced:
    """The follow-ups on a thread of their own, once per burst: the watch threads only mark
    what is due, so a hundred Kustomization events in a second cost a few runs of
    ``follow_up``, not a hundred, and never two at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due = {"changes": False, "requests": False}
        self._wake = threading.Event()

    def __call__(self, *, changes: bool, requests: bool) -> None:
        with self._lock:
            self._due["changes"] |= changes
            self._due["requests"] |= requests
        if changes or requests:
            self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if not self._wake.wait(0.5):
                continue
            self._wake.clear()
            with self._lock:
                due, self._due = self._due, {"changes": False, "requests": False}
            try:
                follow_up(**due)
            except Exception:
                # The next event tries again; the scheduled sync and advance repair meanwhile.
                logger.exception("the watcher's follow-up failed")
            finally:
                close_old_connections()


def _state(watched: Watched) -> WatchState:
    state, _ = WatchState.objects.get_or_create(kind=watched.name)
    return state


def _heard(watched: Watched, version: str, **fields: Any) -> None:
    WatchState.objects.filter(kind=watched.name).update(
        resource_version=version, connected=True, last_heard=timezone.now(), error="", **fields
    )


def relist(watched: Watched, kube: Kube, after: FollowUp = follow_up) -> str:
    """List the kind, replace its rows (the sync's code) and return the list's version."""
    _state(watched)
    listing = kube.list_versioned(watched.target)
    kept, skipped = watched.store_all(listing.items)
    services.record_sync(watched.source, items=kept, skipped=skipped)
    now = timezone.now()
    WatchState.objects.filter(kind=watched.name).update(
        resource_version=listing.resource_version, last_list=now, last_heard=now, error=""
    )
    after(changes=watched.moves_changes, requests=watched.moves_requests)
    return listing.resource_version


def watch_once(
    watched: Watched,
    kube: Kube,
    version: str,
    timeout: int,
    stop: threading.Event | None = None,
    after: FollowUp = follow_up,
) -> str:
    """One watch request from ``version`` until the server ends it; returns the version to
    resume from. Raises ``Gone`` on 410 and ``KubeError`` when the watch fails."""
    _state(watched)
    WatchState.objects.filter(kind=watched.name).update(connected=True, error="")
    for kind, obj in kube.watch(watched.target, version, timeout):
        if stop is not None and stop.is_set():
            break
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(str(obj.get("message") or "resourceVersion expired"))
            raise KubeError(f"The watch of {watched.name} failed: {obj.get('message')}", code)
        metadata = obj.get("metadata")
        if isinstance(metadata, dict) and metadata.get("resourceVersion"):
            version = str(metadata["resourceVersion"])
        if kind == "BOOKMARK":
            _heard(watched, version)
            continue
        watched.store_one(kind, obj)
        _heard(watched, version)
        after(changes=watched.moves_changes, requests=watched.moves_requests)
    return version


def _forget(watched: Watched, why: Exception) -> str:
    """The kept resourceVersion is too old: drop it, so the next round lists again."""
    logger.info("watch of %s: %s; listing again", watched.name, why)
    WatchState.objects.filter(kind=watched.name).update(
        resource_version="", relists=F("relists") + 1
    )
    return ""


def run(
    watched: Watched,
    stop: threading.Event,
    kube: Kube | None = None,
    after: FollowUp = follow_up,
) -> None:
    """Follow one kind until ``stop`` is set: list, watch, resume, relist on 410."""
    own = kube is None
    kube = kube or Kube()
    delay = RETRY_SECONDS
    try:
        version = _state(watched).resource_version
        while not stop.is_set():
            try:
                if not version:
                    version = relist(watched, kube, after)
                version = watch_once(
                    watched, kube, version, settings.FLEET_WATCH_TIMEOUT_SECONDS, stop, after
                )
                delay = RETRY_SECONDS
            except Gone as exc:
                version = _forget(watched, exc)
            except KubeError as exc:
                if exc.status == 410:  # Gone as an HTTP status rather than an ERROR event
                    version = _forget(watched, exc)
                    continue
                logger.warning("watch of %s: %s", watched.name, exc)
                WatchState.objects.filter(kind=watched.name).update(
                    connected=False, error=str(exc)[:2000]
                )
                stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            except Exception as exc:
                # A database hiccup or a bug on one object must not end the watch for good:
                # log it, list again (the rows may have missed the event) after a pause.
                logger.exception("watch of %s failed", watched.name)
                version = ""
                with contextlib.suppress(DatabaseError):  # the database may be what failed
                    WatchState.objects.filter(kind=watched.name).update(
                        connected=False, error=f"{type(exc).__name__}: {exc}"[:2000]
                    )
                stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            finally:
                close_old_connections()
    finally:
        with contextlib.suppress(DatabaseError):
            WatchState.objects.filter(kind=watched.name).update(connected=False)
        close_old_connections()
        if own:
            kube.close()


class Watcher:
    """One thread per watched kind and one for the follow-ups; ``stop`` ends them at their
    next event or timeout."""

    def __init__(self, watched: tuple[Watched, ...] = WATCHED) -> None:
        self.watched = watched
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.stopping.clear()
        after = Coalesced()
        self.threads = [
            threading.Thread(
                target=run,
                args=(w, self.stopping, None, after),
                name=f"fleet-watch-{w.name}",
                daemon=True,
            )
            for w in self.watched
        ]
        self.threads.append(
            threading.Thread(
                target=after.run, args=(self.stopping,), name="fleet-watch-follow-up", daemon=True
            )
        )
        for thread in self.threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=timeout)
        self.threads = []


@dataclass(frozen=True)
class Freshness:
    """How current the status rows are: when the cluster was last heard (by a watch or the
    sync), and whether the watches are up; when they are not, status comes by polling."""

    heard: datetime | None
    watching: bool
    down: tuple[str, ...]  # the watched kinds that are down or silent
    poll_seconds: int


def freshness(flux: SyncState | None = None) -> Freshness:
    """``flux`` is the Flux sync's state when the caller has it (one query less)."""
    states = watch_states()
    down = tuple(name for name, state in states.items() if state.stale)
    stamps = [s.last_heard for s in states.values() if s.last_heard]
    if flux is None:
        flux = SyncState.objects.filter(source=SyncState.Source.FLUX).first()
    if flux is not None and flux.last_success:
        stamps.append(flux.last_success)
    return Freshness(
        heard=max(stamps) if stamps else None,
        watching=not down,
        down=down,
        poll_seconds=settings.FLEET_SYNC_SECONDS,
    )


def watch_states() -> dict[str, WatchState]:
    """Every watched kind's state, with a never-connected placeholder for kinds not started."""
    found = {s.kind: s for s in WatchState.objects.all()}
    return {w.name: found.get(w.name) or WatchState(kind=w.name) for w in WATCHED}
