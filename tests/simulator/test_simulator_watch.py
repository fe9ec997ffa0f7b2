"""The simulator's watch API, as an API server serves it: events after a resourceVersion,
synthetic ADDED without one, bookmarks, 410 Gone as an ERROR event once history is compacted,
and the Flux notifications it posts, signed as a generic-hmac Provider signs them."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3

from simulator import Simulator
from simulator.config import SimConfig
from simulator.store import KUSTOMIZATIONS, NODES


@pytest.fixture
def sim() -> Iterator[Simulator]:
    config = dataclasses.replace(
        SimConfig.demo(), flux_delay=0, ready_delay=0, watch_bookmark_seconds=0.2
    )
    simulator = Simulator(config)
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


def watch(sim: Simulator, path: str, **query: str) -> list[dict[str, Any]]:
    """Every event of one watch request (it ends after its timeoutSeconds)."""
    http = urllib3.PoolManager()
    response = http.request(
        "GET", f"{sim.url}{path}", fields={"watch": "1", **query}, preload_content=False
    )
    assert response.status == 200
    assert response.headers.get("Transfer-Encoding") == "chunked"
    lines = b"".join(response.stream(amt=None)).splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def list_version(sim: Simulator, path: str) -> int:
    body = json.loads(urllib3.PoolManager().request("GET", f"{sim.url}{path}").data)
    return int(body["metadata"]["resourceVersion"])


def test_a_watch_from_a_version_gets_the_changes_after_it(sim: Simulator) -> None:
    start = list_version(sim, "/api/v1/nodes")
    node = sim.store.list(NODES)[0]["metadata"]["name"]
    sim.set_node_ready(node, False)
    events = watch(sim, "/api/v1/nodes", resourceVersion=str(start), timeoutSeconds="1")
    changes = [e for e in events if e["type"] != "BOOKMARK"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in changes] == [("MODIFIED", node)]
    assert int(changes[0]["object"]["metadata"]["resourceVersion"]) > start
    # No bookmarks unless asked for.
    assert all(e["type"] != "BOOKMARK" for e in events)


def test_a_watch_without_a_version_starts_with_every_object_added(sim: Simulator) -> None:
    events = watch(sim, "/api/v1/nodes", timeoutSeconds="0.3")
    assert {e["type"] for e in events} == {"ADDED"}
    assert len(events) == len(sim.store.list(NODES))


def test_an_idle_watch_gets_bookmarks_with_the_current_version(sim: Simulator) -> None:
    start = list_version(sim, "/api/v1/nodes")
    # A write to another kind moves the version; the node watch sees only a bookmark of it.
    sim.store.apply(KUSTOMIZATIONS, {"metadata": {"name": "x", "namespace": "flux-system"}}, 0)
    events = watch(
        sim,
        "/api/v1/nodes",
        resourceVersion=str(start),
        allowWatchBookmarks="true",
        timeoutSeconds="1",
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks and len(bookmarks) == len(events)
    assert bookmarks[-1]["object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": sim.store.resource_version},
    }


def test_a_version_older_than_the_kept_history_is_gone(sim: Simulator) -> None:
    start = list_version(sim, "/api/v1/nodes")
    node = sim.store.list(NODES)[0]["metadata"]["name"]
    sim.set_node_ready(node, False)
    sim.store.compact()
    events = watch(sim, "/api/v1/nodes", resourceVersion=str(start), timeoutSeconds="5")
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {start}")
    # From the current version the watch works again.
    now = list_version(sim, "/api/v1/nodes")
    assert watch(sim, "/api/v1/nodes", resourceVersion=str(now), timeoutSeconds="0.3") == []


def test_the_window_keeps_only_the_newest_events() -> None:
    config = dataclasses.replace(SimConfig.demo(), watch_window=3)
    sim = Simulator(config)
    start = int(sim.store.resource_version)
    for index in range(5):
        sim.store.apply(KUSTOMIZATIONS, {"metadata": {"name": f"k{index}", "namespace": "a"}}, 0)
    with pytest.raises(Exception, match="too old resource version"):
        sim.store.events_since(start)
    found, version = sim.store.events_since(start + 2)
    assert [e.object["metadata"]["name"] for e in found] == ["k2", "k3", "k4"]
    assert version == start + 5


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.got.append(({k.lower(): v for k, v in self.headers.items()}, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_flux_ready_changes_are_posted_signed_like_a_generic_hmac_provider() -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    receiver.got = []  # type: ignore[attr-defined]
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{receiver.server_address[1]}/hooks/flux/"
    config = dataclasses.replace(SimConfig.demo(), flux_events_address=address)
    sim = Simulator(config, flux_events_secret=b"s3cret")
    sim.start("127.0.0.1", 0, tick_seconds=None)
    try:
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "ReconciliationSucceeded",
            "message": "Applied revision: main@sha1:abc",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        obj = {
            "metadata": {"name": "tenants", "namespace": "flux-system"},
            "status": {"conditions": [ready], "lastAppliedRevision": "main@sha1:abc"},
        }
        sim.store.apply(KUSTOMIZATIONS, obj, 0)
        sim.store.apply(KUSTOMIZATIONS, obj, 0)  # no change of Ready: no second event
        sim.stop()  # drains the queue
    finally:
        receiver.shutdown()
    got = receiver.got  # type: ignore[attr-defined]
    assert len(got) == 1
    headers, body = got[0]
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["x-signature"] == f"sha256={expected}"
    assert headers["gotk-component"] == "kustomize-controller"
    event = json.loads(body)
    assert event["involvedObject"]["kind"] == "Kustomization"
    assert event["involvedObject"]["name"] == "tenants"
    assert (event["severity"], event["reason"]) == ("info", "ReconciliationSucceeded")
    assert event["metadata"] == {"revision": "main@sha1:abc"}
    assert event["timestamp"] == "2026-01-01T00:00:00Z"
