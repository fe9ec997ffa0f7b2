"""Optional NetBox sync: NetBox stays the source of truth for hardware, and learns from the
portal whether each GPU node passed its validation.

Off unless ``NETBOX_URL`` is set. For each fleet node the sync finds the NetBox device of the
same name (in ``NETBOX_SITE`` when set), writes the node's validation state (its lifecycle
state and last burn-in: outcome, date, NCCL bus bandwidth) into the device's text custom field
``NETBOX_VALIDATION_FIELD``, reads NetBox's serial back for the node page, and keeps one
inventory item per GPU ("GPU 0", "GPU 1", ...; part id = the node's GPU product), creating the
missing ones. It never creates devices: a node without one is reported. What it found is kept
per node in ``NetBoxDevice``; a failure is recorded there and in the job's log, never raised
into the fleet sync. A second run with nothing changed writes nothing.

How pynetbox talks to NetBox (pynetbox v7.8.0, pynetbox/core/): ``Endpoint.get(**filters)``
lists with the filters and raises ValueError on more than one match (endpoint.py); a non-2xx
answer raises ``RequestError`` carrying the response (query.py ``Request._make_call``), with no
timeout of its own, so the session below adds one; ``Record.update`` PATCHes only the keys that
changed, and for ``custom_fields`` only the keys given, as NetBox merges them (response.py
``Record._diff``, ``Record.save``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pynetbox
import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.models import BurnInRun, NetBoxDevice, Node, NodeLifecycle
from portal.jobs import enqueue
from portal.models import Job

TASK = "fleet.netbox_sync"
GPU_ITEM = re.compile(r"^GPU (\d+)$")
# A node job waits this long before it runs, so that the moves of a burst join it.
GATHER_SECONDS = 5


def configured() -> bool:
    return bool(settings.NETBOX_URL)


class _Session(requests.Session):
    """A requests session with a timeout on every call: pynetbox passes none."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.setdefault("timeout", self.timeout)
        return super().request(method, url, *args, **kwargs)


def client() -> Any:
    api = pynetbox.api(settings.NETBOX_URL, token=settings.NETBOX_TOKEN or None)
    api.http_session = _Session(settings.NETBOX_TIMEOUT_SECONDS)
    return api


class _Stop(Exception):
    """A failure every further node would meet too (a refused token, NetBox unreachable, the
    custom field missing): the run stops there."""


# What a node's sync may meet; anything else is a bug and fails the job.
FAILURES = (
    _Stop,
    pynetbox.RequestError,
    pynetbox.ContentError,
    requests.RequestException,
    ValueError,  # pynetbox's get(): more than one device of the name
)


def validation_state(node_name: str) -> str:
    """The custom field's value: the lifecycle state, then the last finished burn-in, e.g.
    ``ready; burn-in passed 2026-12-06, NCCL 432.10 GB/s``."""
    row = NodeLifecycle.objects.filter(node_name=node_name).first()
    state = row.state if row else "not placed"
    run = (
        BurnInRun.objects.filter(node_name=node_name)
        .exclude(outcome=BurnInRun.Outcome.RUNNING)
        .first()
    )
    if run is None:
        return f"{state}; no burn-in"
    day = (run.finished_at or run.started_at).date().isoformat()
    bandwidth = f", NCCL {run.busbw_gbps:.2f} GB/s" if run.busbw_gbps is not None else ""
    return f"{state}; burn-in {run.outcome} {day}{bandwidth}"


@dataclass
class Report:
    """What one run did, for the job's log."""

    checked: int = 0
    written: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped: str = ""

    def summary(self) -> str:
        return (
            f"checked {self.checked} node{'' if self.checked == 1 else 's'}, "
            f"wrote {len(self.written)}, {len(self.missing)} missing in NetBox, "
            f"{len(self.errors)} error{'' if len(self.errors) == 1 else 's'}"
        )

    def lines(self) -> list[str]:
        return (
            [f"wrote {name}" for name in self.written]
            + [f"no NetBox device named {name}" for name in self.missing]
            + [f"mismatch: {line}" for line in self.mismatches]
            + [f"error: {line}" for line in self.errors]
            + ([f"stopped: {self.stopped}"] if self.stopped else [])
        )


def _describe(exc: Exception) -> tuple[str, bool]:
    """A failure as a sentence for people, and whether every further call would meet it."""
    if isinstance(exc, _Stop):
        return str(exc), True
    if isinstance(exc, pynetbox.RequestError):
        status = exc.req.status_code
        where = f"{exc.req.request.method} {urlsplit(exc.req.url).path}"
        detail = (exc.error or "").strip()[:200]
        if status in (401, 403):
            return f"NetBox refused the token ({status}) on {where}: {detail}", True
        return f"NetBox answered {status} to {where}: {detail}", False
    if isinstance(exc, pynetbox.ContentError):
        return f"NetBox answered something that is not JSON: {exc}", True
    if isinstance(exc, requests.RequestException):
        return f"NetBox cannot be reached: {exc.__class__.__name__}: {exc}", True
    return str(exc), False  # ValueError: more than one device of the name


def node_context(node_name: str) -> dict[str, Any] | None:
    """The node page's NetBox section: None when NetBox is off, else the last sync's row
    (None until the first) and the custom field's name."""
    if not configured():
        return None
    return {
        "row": NetBoxDevice.objects.filter(node_name=node_name).first(),
        "field": settings.NETBOX_VALIDATION_FIELD,
    }


def queue(node_name: str) -> None:
    """Sync the node once the current transaction commits, when NetBox is configured (a
    lifecycle move calls this). Moves gather: a node job still waiting takes the node on (the
    runner reads a job's kwargs when it claims it, and the claim waits for this row lock), and
    a waiting full sync covers it already, so the first sync of a large fleet, which places
    every node, makes one job, not one per node."""
    if not configured():
        return
    with transaction.atomic():
        waiting = (
            Job.objects.select_for_update()
            .filter(task=TASK, status=Job.Status.QUEUED)
            .order_by("pk")
            .first()
        )
        if waiting is None:
            enqueue(
                TASK, title="Sync moved nodes to NetBox", delay=GATHER_SECONDS, nodes=[node_name]
            )
            return
        nodes = waiting.kwargs.get("nodes")
        if nodes is not None and node_name not in nodes:
            waiting.kwargs = {**waiting.kwargs, "nodes": [*nodes, node_name]}
            waiting.save(update_fields=["kwargs"])


def sync(node_names: list[str] | None = None, *, api: Any = None) -> Report:
    """Sync the fleet's nodes (or those named) to NetBox; see the module's docstring."""
    report = Report()
    if not configured():
        report.stopped = "NetBox is not configured (NETBOX_URL is unset)"
        return report
    nodes = Node.objects.order_by("name")
    if node_names is not None:
        nodes = nodes.filter(name__in=node_names)
    api = api if api is not None else client()
    manufacturers: dict[str, int | None] = {}
    for node in nodes:
        row, _ = NetBoxDevice.objects.get_or_create(node_name=node.name)
        report.checked += 1
        try:
            _sync_node(api, node, row, report, manufacturers)
        except FAILURES as exc:
            message, stop = _describe(exc)
            row.error = message
            row.checked_at = timezone.now()
            row.save(update_fields=["error", "checked_at"])
            report.errors.append(f"{node.name}: {message}")
            if stop:
                report.stopped = message
                break
    return report


def _label(node: Node, key: str) -> str:
    value = node.labels.get(key) if key and isinstance(node.labels, dict) else None
    return value if isinstance(value, str) else ""


def device_name(node: Node) -> str:
    """The NetBox device's name: the node label ``NETBOX_NAME_LABEL`` when set and present,
    else the node's name."""
    return _label(node, settings.NETBOX_NAME_LABEL) or node.name


def _sync_node(
    api: Any, node: Node, row: NetBoxDevice, report: Report, manufacturers: dict[str, int | None]
) -> None:
    filters = {"name": device_name(node)}
    if settings.NETBOX_SITE:
        filters["site"] = settings.NETBOX_SITE
    device = api.dcim.devices.get(**filters)
    now = timezone.now()
    row.checked_at = now
    row.error = ""
    if device is None:
        row.missing = True
        row.device_id = None
        row.device_url = ""
        row.gpu_items = None
        row.mismatch = ""
        row.save()
        report.missing.append(node.name)
        return
    row.missing = False
    row.device_id = device.id
    url = getattr(device, "display_url", None) or ""
    shown = url.startswith(("https://", "http://")) and len(url) <= 500  # a link on the pages
    row.device_url = url if shown else ""
    row.serial = device.serial or ""
    wrote = _write_validation(device, row)
    created, count, mismatches = _gpu_items(api, node, device.id, manufacturers)
    labelled = _label(node, settings.NETBOX_SERIAL_LABEL)
    if labelled and labelled != row.serial:
        mismatches.insert(
            0, f"NetBox holds serial {row.serial or '(none)'}, the node says {labelled}"
        )
    row.gpu_items = count
    row.mismatch = "; ".join(mismatches)
    if wrote or created:
        row.written_at = now
        report.written.append(node.name)
    report.mismatches.extend(f"{node.name}: {line}" for line in mismatches)
    row.save()


def _write_validation(device: Any, row: NetBoxDevice) -> bool:
    name = settings.NETBOX_VALIDATION_FIELD
    custom_fields = device.custom_fields if isinstance(device.custom_fields, dict) else {}
    if name not in custom_fields:
        # NetBox lists every custom field of the object type, null when unset
        # (extras/api/customfields.py CustomFieldsDataField.to_representation); absent means
        # it does not exist, and a PATCH would be refused with a 400.
        raise _Stop(
            f"NetBox devices have no custom field {name!r}: create it (type Text, object type "
            "DCIM > Device) or set NETBOX_VALIDATION_FIELD"
        )
    value = validation_state(row.node_name)
    row.validation = value
    if custom_fields[name] == value:
        return False
    device.update({"custom_fields": {name: value}})
    return True


def _gpu_items(
    api: Any, node: Node, device_id: int, manufacturers: dict[str, int | None]
) -> tuple[int, int, list[str]]:
    """Create the node's missing GPU items; return how many were created, how many NetBox
    now lists, and where NetBox and the node disagree."""
    items = {}
    for item in api.dcim.inventory_items.filter(device_id=device_id):
        match = GPU_ITEM.match(item.name or "")
        if match:
            items[int(match.group(1))] = item
    mismatches = []
    beyond = sorted(index for index in items if index >= node.gpu_count)
    if beyond:
        names = ", ".join(f"GPU {index}" for index in beyond)
        mismatches.append(f"NetBox lists {names} beyond the node's {node.gpu_count} GPUs")
    if node.product:
        other = sorted(
            index for index, item in items.items() if (item.part_id or "") not in ("", node.product)
        )
        if other:
            names = ", ".join(f"GPU {index}" for index in other)
            mismatches.append(f"NetBox records {names} as another part than {node.product}")
    absent = [index for index in range(node.gpu_count) if index not in items]
    if absent and not settings.NETBOX_GPU_ITEMS:
        mismatches.append(f"NetBox lists {len(items)} GPU items, the node has {node.gpu_count}")
        return 0, len(items), mismatches
    for index in absent:
        data: dict[str, Any] = {
            "device": device_id,
            "name": f"GPU {index}",
            "part_id": node.product,
            "discovered": True,
        }
        manufacturer = _manufacturer(api, manufacturers)
        if manufacturer is not None:
            data["manufacturer"] = manufacturer
        api.dcim.inventory_items.create(data)
    return len(absent), len(items) + len(absent), mismatches


def _manufacturer(api: Any, cache: dict[str, int | None]) -> int | None:
    """The id of NETBOX_GPU_MANUFACTURER, looked up once a run; None when NetBox has none."""
    slug = settings.NETBOX_GPU_MANUFACTURER
    if not slug:
        return None
    if slug not in cache:
        found = api.dcim.manufacturers.get(slug=slug)
        cache[slug] = found.id if found is not None else None
    return cache[slug]
