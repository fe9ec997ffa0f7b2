"""The fleet watcher against the simulator over HTTP: list then watch, events written through
the sync's own code, bookmarks and resumption from the kept resourceVersion, a relist on
410 Gone, and a Kustomization event that moves a merged change to applied."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from fleet import services, watch
from fleet.kube import Kube
from fleet.models import FluxObject, Node, WatchState
from gitops.models import ChangeRequest
from gitops.specs import TenantSpec
from simulator import Simulator
from simulator.store import KUSTOMIZATIONS
from tests.support import wait_until

NODES = next(w for w in watch.WATCHED if w.name == "nodes")
KUSTOMIZATIONS_WATCH = next(w for w in watch.WATCHED if w.name == "kustomizations")


@pytest.fixture
def still(start_fleet: Callable[..., Simulator]) -> Simulator:
    """The fleet moving only when the test ticks it; idle watches get a bookmark quickly."""
    return start_fleet(watch_bookmark_seconds=0.2)


def _state(name: str) -> WatchState:
    return WatchState.objects.get(kind=name)


@pytest.mark.django_db
def test_a_node_event_updates_the_row_the_sync_wrote(still: Simulator) -> None:
    with Kube() as kube:
        version = watch.relist(NODES, kube)
        assert Node.objects.count() == 18
        assert _state("nodes").resource_version == version
        node = Node.objects.filter(ready=True).first()
        assert node is not None
        still.set_node_ready(node.name, False)
        after = watch.watch_once(NODES, kube, version, timeout=1)
    node.refresh_from_db()
    assert node.ready is None and node.health != "healthy"  # kubelet silent: Ready Unknown
    assert int(after) > int(version)
    assert _state("nodes").resource_version == after
    assert _state("nodes").connected


@pytest.mark.django_db
def test_a_bookmark_advances_the_resource_version(still: Simulator) -> None:
    with Kube() as kube:
        version = watch.relist(NODES, kube)
        # A write of another kind moves the cluster's version; the node watch hears a bookmark.
        still.store.apply(KUSTOMIZATIONS, {"metadata": {"name": "x", "namespace": "a"}}, 0)
        after = watch.watch_once(NODES, kube, version, timeout=1)
    assert after == still.store.resource_version
    assert int(after) > int(version)
    state = _state("nodes")
    assert state.resource_version == after and state.last_heard is not None


@pytest.mark.django_db
def test_it_resumes_from_the_kept_version_without_listing_again(still: Simulator) -> None:
    with Kube() as kube:
        watch.relist(NODES, kube)
        first, second = Node.objects.filter(ready=True)[:2]
        # A row the watch will not touch: a relist would bring it back.
        Node.objects.filter(name=second.name).delete()
        still.set_node_ready(first.name, False)
        # As after a restart: the version comes from WatchState.
        watch.watch_once(NODES, kube, _state("nodes").resource_version, timeout=1)
    assert Node.objects.get(name=first.name).ready is None
    assert not Node.objects.filter(name=second.name).exists()
    assert _state("nodes").relists == 0


@pytest.mark.django_db
def test_a_compacted_version_is_gone(still: Simulator) -> None:
    with Kube() as kube:
        version = watch.relist(NODES, kube)
        still.set_node_ready(Node.objects.first().name, False)  # type: ignore[union-attr]
        still.store.compact()
        with pytest.raises(watch.Gone, match="too old resource version"):
            watch.watch_once(NODES, kube, version, timeout=5)


@pytest.mark.django_db(transaction=True)
def test_the_watcher_lists_again_after_410_and_goes_on(still: Simulator) -> None:
    with Kube() as kube:
        watch.relist(NODES, kube)
    node = Node.objects.filter(ready=True).first()
    assert node is not None
    still.set_node_ready(node.name, False)
    still.store.compact()  # the kept version is gone now
    Node.objects.filter(name=node.name).delete()
    stop = threading.Event()
    runner = threading.Thread(target=watch.run, args=(NODES, stop))
    runner.start()
    try:
        wait_until(lambda: _state("nodes").relists >= 1, 10, "the watcher to list again")
        wait_until(
            lambda: Node.objects.filter(name=node.name).exists(),
            10,
            "the relist to write the node back",
        )
        # The relist wrote the node back, with the state it has now.
        assert Node.objects.get(name=node.name).ready is None
        assert _state("nodes").relists == 1
        # And the watch goes on from the relist's version: a later change arrives.
        still.set_node_ready(node.name, True)
        wait_until(
            lambda: Node.objects.get(name=node.name).ready,
            10,
            "the watch to bring the node's readiness",
        )
        assert Node.objects.get(name=node.name).ready is True
    finally:
        stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()
    assert not _state("nodes").connected


def _reconcile(sim: Simulator) -> None:
    sim.flux.request_reconcile(time.time())
    sim.tick()
    sim.tick()


@pytest.mark.django_db
def test_a_kustomization_event_moves_a_merged_change_to_applied(
    still: Simulator,
    merged_change: Callable[..., ChangeRequest],
    login: Callable[[str], Client],
) -> None:
    onboarding = merged_change(TenantSpec(slug="alpha"))
    _reconcile(still)
    services.sync_all()  # writes the tenant's Git Secret; alpha-workloads has not applied yet
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "pending"
    with Kube() as kube:
        version = watch.relist(KUSTOMIZATIONS_WATCH, kube)
        _reconcile(still)
        watch.watch_once(KUSTOMIZATIONS_WATCH, kube, version, timeout=1)
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "applied", onboarding.apply_message
    workloads = FluxObject.objects.get(kind="Kustomization", namespace="alpha")
    assert workloads.ready == "True"
    fragment = login("bob").get(
        reverse("gitops:detail", args=[onboarding.pk]),
        {"part": "apply", "since": "an older version"},
        HTTP_HX_REQUEST="true",
    )
    assert fragment.status_code == 200
    assert "Applied" in fragment.content.decode() and "<html" not in fragment.content.decode()


@pytest.mark.django_db
def test_pages_say_when_status_was_heard_and_warn_when_a_watch_is_down(
    login: Callable[[str], Client], settings: Any
) -> None:
    settings.FLEET_WATCH_STALE_SECONDS = 60
    now = timezone.now()
    for watched in watch.WATCHED:
        WatchState.objects.create(kind=watched.name, connected=True, last_heard=now)
    bob = login("bob")
    page = bob.get("/t/alpha/status/").content.decode()
    assert "(watching the cluster)" in page and "watch is down" not in page
    WatchState.objects.filter(kind="pods").update(last_heard=now - timedelta(minutes=5))
    WatchState.objects.filter(kind="nodes").update(connected=False)
    page = bob.get("/t/alpha/status/").content.decode()
    assert "The cluster watch is down or silent (nodes, pods)" in page
    assert f"from the sync every {settings.FLEET_SYNC_SECONDS} s" in page


@pytest.mark.django_db(transaction=True)
def test_the_running_watcher_moves_a_merged_change_to_applied(
    still: Simulator, merged_change: Callable[..., ChangeRequest]
) -> None:
    onboarding = merged_change(TenantSpec(slug="alpha"))
    _reconcile(still)
    services.sync_all()  # the tenant's Git Secret; its own Kustomization has not applied yet
    watcher = watch.Watcher()
    watcher.start()
    try:
        wait_until(
            lambda: WatchState.objects.filter(connected=True).count() >= 5,
            20,
            "the five watches to connect",
        )
        onboarding.refresh_from_db()
        assert onboarding.apply_state == "pending"
        _reconcile(still)  # no sync from here on: only the watches can tell the portal
        wait_until(
            lambda: ChangeRequest.objects.get(pk=onboarding.pk).apply_state == "applied",
            20,
            "the watches to mark the change applied",
            details=lambda: ChangeRequest.objects.get(pk=onboarding.pk).apply_message,
        )
        onboarding.refresh_from_db()
    finally:
        watcher.stop()
    assert onboarding.apply_state == "applied", onboarding.apply_message
