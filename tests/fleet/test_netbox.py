"""The NetBox sync (fleet.netbox) against a fake NetBox: a local HTTP server serving the
response shapes NetBox v4.6.8 returns (tests/fleet/netbox_fixtures/README.md), so pynetbox's
own HTTP client runs. The tests read what pynetbox sent: the PATCH bodies, the inventory
items it created, no write on a second run; and the failures recorded, never raised."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import transaction
from django.test import Client

from fleet import lifecycle, netbox
from fleet.models import BurnInRun, NetBoxDevice, Node, NodeLifecycle
from portal.jobs import enqueue
from portal.models import Job
from tests.support.waiting import free_port

pytestmark = [pytest.mark.django_db]
FIXTURES = Path(__file__).parent / "netbox_fixtures"
TOKEN = "0123456789abcdef0123456789abcdef01234567"
H100 = "NVIDIA-H100-80GB-HBM3"
FIELD = "gpu_validation"
PASSED = "ready; burn-in passed 2026-12-06, NCCL 432.10 GB/s"


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


class FakeNetBox:
    """The few REST endpoints the sync uses, with NetBox's filters, custom-field merge and
    error bodies; every request is kept in ``calls``."""

    def __init__(self) -> None:
        self.devices: dict[int, dict[str, Any]] = {}
        self.items: dict[int, dict[str, Any]] = {}
        self.manufacturers = [_fixture("manufacturer.json")]
        self.calls: list[dict[str, Any]] = []
        self.fail: dict[tuple[str, str], int] = {}  # (method, path) -> status
        self.hang = threading.Event()  # set: requests get no answer until the fake stops
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.handle(self, "GET")

            def do_PATCH(self) -> None:
                fake.handle(self, "PATCH")

            def do_POST(self) -> None:
                fake.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add_device(self, name: str, *, site: str = "dc-west", **changes: Any) -> dict[str, Any]:
        device = _fixture("device.json")
        device_id = max(self.devices, default=16) + 1
        device.update(id=device_id, name=name, display=name, **changes)
        device["url"] = f"http://netbox.example.test/api/dcim/devices/{device_id}/"
        device["display_url"] = f"http://netbox.example.test/dcim/devices/{device_id}/"
        device["site"]["slug"] = site
        self.devices[device_id] = device
        return device

    def add_item(self, device: dict[str, Any], name: str, part_id: str = H100) -> None:
        item = _fixture("inventory_item.json")
        item_id = max(self.items, default=300) + 1
        item.update(id=item_id, name=name, display=name, part_id=part_id)
        item["device"] = {k: device[k] for k in ("id", "url", "display", "name", "description")}
        self.items[item_id] = item

    def writes(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["method"] != "GET"]

    def _send(self, handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _page(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        return {"count": len(results), "next": None, "previous": None, "results": results}

    def handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        if self.hang.is_set():
            self.stopping.wait()
            return
        with self.lock:
            self.calls.append(
                {
                    "method": method,
                    "path": parts.path,
                    "query": query,
                    "body": json.loads(raw) if raw else None,  # as sent, apart from ``body``
                    "authorization": handler.headers.get("Authorization"),
                }
            )
            if handler.headers.get("Authorization") != f"Token {TOKEN}":
                return self._send(handler, 403, _fixture("error_403.json"))
            status = self.fail.get((method, parts.path))
            if status:
                return self._send(handler, status, {"detail": "Internal server error"})
            status, answer = self._answer(method, parts.path, query, body)
        self._send(handler, status, answer)

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if method == "GET" and path == "/api/dcim/devices/":
            found = [
                d
                for d in self.devices.values()
                if d["name"] == query.get("name", d["name"])
                and d["site"]["slug"] == query.get("site", d["site"]["slug"])
            ]
            return 200, self._page(found)
        if method == "PATCH" and path.startswith("/api/dcim/devices/"):
            device = self.devices[int(path.rstrip("/").rsplit("/", 1)[1])]
            fields = body.pop("custom_fields", {})
            # NetBox v4.6.8 extras/api/customfields.py CustomFieldsDataField.to_internal_value:
            # unknown names are refused; known ones merge into the device's existing data.
            unknown = sorted(set(fields) - set(device["custom_fields"]))
            if unknown:
                message = "Custom field '{}' does not exist for this object type."
                return 400, {"custom_fields": {n: [message.format(n)] for n in unknown}}
            device["custom_fields"].update(fields)
            device.update(body)
            return 200, device
        if method == "GET" and path == "/api/dcim/inventory-items/":
            device_id = int(query["device_id"])
            return 200, self._page(
                [i for i in self.items.values() if i["device"]["id"] == device_id]
            )
        if method == "POST" and path == "/api/dcim/inventory-items/":
            device = self.devices[body["device"]]
            self.add_item(device, body["name"], body.get("part_id", ""))
            item = self.items[max(self.items)]
            item["discovered"] = body.get("discovered", False)
            maker = next(
                (m for m in self.manufacturers if m["id"] == body.get("manufacturer")), None
            )
            item["manufacturer"] = (
                {k: maker[k] for k in ("id", "url", "display", "name", "slug", "description")}
                if maker
                else None
            )
            return 201, item
        if method == "GET" and path == "/api/dcim/manufacturers/":
            return 200, self._page(
                [m for m in self.manufacturers if m["slug"] == query.get("slug")]
            )
        return 404, {"detail": "Not found."}

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeNetBox]:
    server = FakeNetBox()
    settings.NETBOX_URL = server.url
    settings.NETBOX_TOKEN = TOKEN
    settings.NETBOX_VALIDATION_FIELD = FIELD
    settings.NETBOX_SITE = ""
    settings.NETBOX_NAME_LABEL = ""
    settings.NETBOX_SERIAL_LABEL = ""
    settings.NETBOX_GPU_ITEMS = True
    settings.NETBOX_GPU_MANUFACTURER = "nvidia"
    yield server
    server.stop()


def _node(name: str, gpus: int = 8, *, burn_in: bool = True) -> Node:
    node = Node.objects.create(name=name, product=H100, gpu_count=gpus)
    NodeLifecycle.objects.create(node_name=name, state=NodeLifecycle.State.READY)
    if burn_in:
        BurnInRun.objects.create(
            node_name=name,
            step=BurnInRun.Step.DONE,
            outcome=BurnInRun.Outcome.PASSED,
            product=H100,
            gpus=gpus,
            busbw_gbps=432.1,
            started_at=datetime(2026, 12, 6, 8, 0, tzinfo=UTC),
            finished_at=datetime(2026, 12, 6, 8, 40, tzinfo=UTC),
        )
    return node


def _row(name: str) -> NetBoxDevice:
    return NetBoxDevice.objects.get(node_name=name)


def test_it_writes_the_validation_state_and_creates_the_missing_gpu_items(
    fake: FakeNetBox,
) -> None:
    device = fake.add_device("gpu-node-1")
    fake.add_item(device, "GPU 0")
    fake.add_item(device, "PSU 1", part_id="PWS-3K")  # not a GPU: left alone
    _node("gpu-node-1")

    report = netbox.sync()

    assert report.written == ["gpu-node-1"] and not report.errors, report.lines()
    patches = [c for c in fake.writes() if c["method"] == "PATCH"]
    assert [(c["path"], c["body"]) for c in patches] == [
        (f"/api/dcim/devices/{device['id']}/", {"custom_fields": {FIELD: PASSED}})
    ]
    posts = [c["body"] for c in fake.writes() if c["method"] == "POST"]
    assert posts == [
        {
            "device": device["id"],
            "name": f"GPU {i}",
            "part_id": H100,
            "discovered": True,
            "manufacturer": 5,
        }
        for i in range(1, 8)
    ]
    assert {c["authorization"] for c in fake.calls} == {f"Token {TOKEN}"}
    assert device["custom_fields"][FIELD] == PASSED
    row = _row("gpu-node-1")
    assert (row.device_id, row.serial, row.validation, row.gpu_items) == (
        device["id"],
        "S121337X4B01234",
        PASSED,
        8,
    )
    assert row.device_url == device["display_url"]
    assert row.written_at is not None and not row.error and not row.missing and not row.mismatch


def test_a_second_sync_with_nothing_changed_writes_nothing(fake: FakeNetBox) -> None:
    fake.add_device("gpu-node-1")
    _node("gpu-node-1")
    netbox.sync()
    first_written = _row("gpu-node-1").written_at
    writes = len(fake.writes())
    assert writes == 1 + 8  # the custom field, eight GPU items

    report = netbox.sync()

    assert len(fake.writes()) == writes and report.written == []
    assert _row("gpu-node-1").written_at == first_written


def test_a_new_burn_in_result_is_written_on_the_next_sync(fake: FakeNetBox) -> None:
    device = fake.add_device("gpu-node-1")
    _node("gpu-node-1", burn_in=False)
    netbox.sync()
    assert device["custom_fields"][FIELD] == "ready; no burn-in"
    BurnInRun.objects.create(
        node_name="gpu-node-1",
        step=BurnInRun.Step.DONE,
        outcome=BurnInRun.Outcome.FAILED,
        busbw_gbps=120.456,
        finished_at=datetime(2026, 12, 7, 9, 0, tzinfo=UTC),
    )
    NodeLifecycle.objects.filter(node_name="gpu-node-1").update(state=NodeLifecycle.State.FAILED)

    netbox.sync()

    assert device["custom_fields"][FIELD] == "failed; burn-in failed 2026-12-07, NCCL 120.46 GB/s"


def test_a_node_without_a_device_is_reported_not_created(fake: FakeNetBox) -> None:
    fake.add_device("gpu-node-1")
    _node("gpu-node-1")
    _node("gpu-node-2")

    report = netbox.sync()

    assert report.missing == ["gpu-node-2"]
    assert _row("gpu-node-2").missing and _row("gpu-node-2").device_id is None
    assert not any(c["path"] == "/api/dcim/devices/" for c in fake.writes())
    assert report.written == ["gpu-node-1"]


def test_the_site_narrows_the_lookup(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_SITE = "dc-east"
    fake.add_device("gpu-node-1", site="dc-west")
    _node("gpu-node-1")

    report = netbox.sync()

    assert report.missing == ["gpu-node-1"]
    assert fake.calls[0]["query"] == {"name": "gpu-node-1", "site": "dc-east", "limit": "0"}


def test_labels_name_the_device_and_give_a_serial_to_check(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_NAME_LABEL = "example.com/asset-name"
    settings.NETBOX_SERIAL_LABEL = "example.com/serial"
    device = fake.add_device("rack7-u12")
    node = _node("gpu-node-1")
    node.labels = {"example.com/asset-name": "rack7-u12", "example.com/serial": "S999"}
    node.save()

    report = netbox.sync()

    assert report.written == ["gpu-node-1"] and device["custom_fields"][FIELD] == PASSED
    assert _row("gpu-node-1").mismatch == (
        "NetBox holds serial S121337X4B01234, the node says S999"
    )
    assert device["serial"] == "S121337X4B01234"  # NetBox's word on hardware stands


def test_a_server_error_is_recorded_and_the_next_node_is_still_synced(fake: FakeNetBox) -> None:
    broken = fake.add_device("gpu-node-1")
    fake.add_device("gpu-node-2")
    _node("gpu-node-1")
    _node("gpu-node-2")
    fake.fail[("PATCH", f"/api/dcim/devices/{broken['id']}/")] = 500

    report = netbox.sync()

    error = _row("gpu-node-1").error
    assert error.startswith(f"NetBox answered 500 to PATCH /api/dcim/devices/{broken['id']}/")
    assert report.written == ["gpu-node-2"] and not report.stopped
    assert report.errors == [f"gpu-node-1: {error}"]
    assert not _row("gpu-node-2").error

    fake.fail.clear()
    netbox.sync()
    assert _row("gpu-node-1").error == "" and broken["custom_fields"][FIELD] == PASSED


def test_a_refused_token_stops_the_run_and_is_recorded(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_TOKEN = "wrong"
    fake.add_device("gpu-node-1")
    _node("gpu-node-1")
    _node("gpu-node-2")

    report = netbox.sync()

    assert len(fake.calls) == 1  # stopped after the first refusal
    assert report.stopped.startswith("NetBox refused the token (403) on GET /api/dcim/devices/")
    assert "Invalid v1 token" in _row("gpu-node-1").error
    assert not NetBoxDevice.objects.filter(node_name="gpu-node-2").exclude(error="").exists()


def test_a_proxy_refusing_with_401_stops_the_run(fake: FakeNetBox) -> None:
    fake.add_device("gpu-node-1")
    _node("gpu-node-1")
    fake.fail[("GET", "/api/dcim/devices/")] = 401

    report = netbox.sync()

    assert report.stopped.startswith("NetBox refused the token (401) on GET /api/dcim/devices/")


def test_a_wrong_base_url_answers_404_and_is_recorded(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_URL = f"{fake.url}/netbox"  # NetBox is served at the root
    _node("gpu-node-1")

    report = netbox.sync()

    assert report.errors == [
        'gpu-node-1: NetBox answered 404 to GET /netbox/api/dcim/devices/: {"detail": "Not found."}'
    ]
    assert _row("gpu-node-1").error.startswith("NetBox answered 404")


def test_a_netbox_that_does_not_answer_times_out(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_TIMEOUT_SECONDS = 0.2
    fake.hang.set()
    _node("gpu-node-1")

    report = netbox.sync()

    assert report.stopped.startswith("NetBox cannot be reached: ReadTimeout")
    assert _row("gpu-node-1").error == report.stopped


def test_an_unreachable_netbox_is_recorded(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_URL = f"http://127.0.0.1:{free_port()}"
    _node("gpu-node-1")

    report = netbox.sync()

    assert report.stopped.startswith("NetBox cannot be reached: ConnectionError")
    assert _row("gpu-node-1").error == report.stopped


def test_a_missing_custom_field_is_named_and_nothing_is_written(
    fake: FakeNetBox, settings: Any
) -> None:
    settings.NETBOX_VALIDATION_FIELD = "burn_in_state"
    fake.add_device("gpu-node-1")
    _node("gpu-node-1")

    report = netbox.sync()

    assert fake.writes() == []
    assert "no custom field 'burn_in_state'" in report.stopped
    assert "object type DCIM > Device" in _row("gpu-node-1").error


def test_gpu_items_beyond_the_nodes_gpus_are_reported(fake: FakeNetBox) -> None:
    device = fake.add_device("gpu-node-1")
    for i in range(8):
        fake.add_item(device, f"GPU {i}", part_id="NVIDIA-A100-SXM4-80GB" if i == 3 else H100)
    _node("gpu-node-1", gpus=6)  # two GPUs fell off the bus

    netbox.sync()

    mismatch = _row("gpu-node-1").mismatch
    assert "NetBox lists GPU 6, GPU 7 beyond the node's 6 GPUs" in mismatch
    assert f"NetBox records GPU 3 as another part than {H100}" in mismatch
    assert not [c for c in fake.writes() if c["method"] == "POST"]


def test_without_gpu_items_a_count_mismatch_is_reported(fake: FakeNetBox, settings: Any) -> None:
    settings.NETBOX_GPU_ITEMS = False
    device = fake.add_device("gpu-node-1")
    fake.add_item(device, "GPU 0")
    _node("gpu-node-1")

    netbox.sync()

    assert _row("gpu-node-1").mismatch == "NetBox lists 1 GPU items, the node has 8"
    assert [c["method"] for c in fake.writes()] == ["PATCH"]


def test_a_lifecycle_move_syncs_that_node(
    fake: FakeNetBox, django_capture_on_commit_callbacks: Any
) -> None:
    device = fake.add_device("gpu-node-1")
    fake.add_device("gpu-node-2")
    _node("gpu-node-1")
    _node("gpu-node-2")

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        lifecycle.request_burn_in("gpu-node-1", reason="fatal Xid 79")

    job = Job.objects.get(task=netbox.TASK)
    assert job.status == Job.Status.SUCCEEDED and job.kwargs == {"nodes": ["gpu-node-1"]}
    assert device["custom_fields"][FIELD] == "burn-in; burn-in passed 2026-12-06, NCCL 432.10 GB/s"
    assert {c["query"].get("name") for c in fake.calls if c["path"] == "/api/dcim/devices/"} == {
        "gpu-node-1"
    }


def test_moves_in_a_burst_make_one_job(
    fake: FakeNetBox, django_capture_on_commit_callbacks: Any
) -> None:
    devices = [fake.add_device(f"gpu-node-{i}") for i in (1, 2)]
    for i in (1, 2, 3):
        _node(f"gpu-node-{i}")

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        lifecycle.request_burn_in("gpu-node-1", reason="fatal Xid 79")
        lifecycle.request_burn_in("gpu-node-2", reason="fatal Xid 79")
        lifecycle.move("gpu-node-1", NodeLifecycle.State.READY, reason="an admin's word")

    (job,) = Job.objects.filter(task=netbox.TASK)
    assert job.kwargs == {"nodes": ["gpu-node-1", "gpu-node-2"]}
    assert [d["custom_fields"][FIELD].split(";")[0] for d in devices] == ["ready", "burn-in"]
    assert not NetBoxDevice.objects.filter(node_name="gpu-node-3").exists()


def test_a_waiting_full_sync_covers_a_moved_node(
    fake: FakeNetBox, django_capture_on_commit_callbacks: Any
) -> None:
    _node("gpu-node-1")
    with transaction.atomic():
        full = enqueue(netbox.TASK, title="Sync the fleet to NetBox")
        lifecycle.request_burn_in("gpu-node-1", reason="fatal Xid 79")
        assert list(Job.objects.filter(task=netbox.TASK)) == [full]
    assert Job.objects.get(pk=full.pk).kwargs == {}


def test_without_netbox_a_lifecycle_move_queues_nothing(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.NETBOX_URL = ""
    _node("gpu-node-1")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        lifecycle.request_burn_in("gpu-node-1", reason="fatal Xid 79")
    assert not Job.objects.filter(task=netbox.TASK).exists()
    assert netbox.sync().stopped == "NetBox is not configured (NETBOX_URL is unset)"


def test_the_beat_runs_the_sync_only_when_netbox_is_configured() -> None:
    code = (
        "from django.conf import settings; import django; django.setup(); "
        "print(settings.CELERY_BEAT_SCHEDULE.get('fleet-netbox', {}).get('task'))"
    )

    def beat(url: str) -> str:
        env = {"DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "true", "NETBOX_URL": url}
        done = subprocess.run(
            [sys.executable, "-c", code], env={**_base_env(), **env}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert beat("https://netbox.example.test") == netbox.TASK
    assert beat("") == "None"


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("NETBOX_")}


# --- pages ----------------------------------------------------------------------------------


def test_the_netbox_pages_are_for_platform_admins_only(
    fake: FakeNetBox, login: Callable[[str], Client]
) -> None:
    _node("gpu-node-1")
    for person in ("alice", "bob", "charlie", "fiona"):
        client = login(person)
        assert client.get("/fleet/netbox/").status_code == 404, person
        assert client.post("/fleet/netbox/sync/").status_code == 404, person
    assert not Job.objects.filter(task=netbox.TASK).exists()


def test_sync_now_runs_and_the_pages_show_the_result(
    fake: FakeNetBox, login: Callable[[str], Client], django_capture_on_commit_callbacks: Any
) -> None:
    device = fake.add_device("gpu-node-1")
    _node("gpu-node-1")
    _node("gpu-node-2")
    pam = login("pam")

    with django_capture_on_commit_callbacks(execute=True):
        assert pam.post("/fleet/netbox/sync/").status_code == 302

    page = pam.get("/fleet/netbox/").content.decode()
    assert "checked 2 nodes, wrote 1, 1 missing in NetBox, 0 errors" in page
    assert "no NetBox device named gpu-node-2" in page
    assert PASSED in page and device["display_url"] in page
    node_page = pam.get("/fleet/nodes/gpu-node-1/").content.decode()
    assert 'id="netbox"' in node_page and "S121337X4B01234" in node_page and PASSED in node_page
    assert "missing" in pam.get("/fleet/nodes/gpu-node-2/").content.decode()


def test_a_recorded_error_shows_on_the_node_page(
    fake: FakeNetBox, settings: Any, login: Callable[[str], Client]
) -> None:
    settings.NETBOX_TOKEN = "wrong"
    _node("gpu-node-1")
    netbox.sync()
    page = login("pam").get("/fleet/nodes/gpu-node-1/").content.decode()
    assert "netbox-error" in page and "NetBox refused the token (403)" in page


def test_without_netbox_the_node_page_has_no_netbox_section(
    settings: Any, login: Callable[[str], Client]
) -> None:
    settings.NETBOX_URL = ""
    _node("gpu-node-1")
    pam = login("pam")
    assert 'id="netbox"' not in pam.get("/fleet/nodes/gpu-node-1/").content.decode()
    assert "NetBox is not configured" in pam.get("/fleet/netbox/").content.decode()
