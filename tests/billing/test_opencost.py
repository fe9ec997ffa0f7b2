"""The OpenCost client: the real response in ``../shared/fixtures/opencost``, error shapes,
attribution by namespace, and bad answers over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from billing.opencost import (
    IDLE,
    UNALLOCATED,
    OpenCostClient,
    OpenCostError,
    Owner,
    attribute,
    configured_client,
    costs_by_owner,
    merge_gpu,
    parse_response,
)
from fleet.services import platform_namespaces
from tests.support import shared_dir

JSON = "application/json"


@pytest.fixture
def example() -> bytes:
    """OpenCost's published ``/allocation?window=7d&aggregate=namespace`` answer."""
    return (shared_dir("fixtures") / "opencost" / "allocation-example-output.json").read_bytes()


def line(name: str, **fields: Any) -> dict[str, Any]:
    """An allocation as OpenCost writes it (current field set), with ``fields`` changed."""
    base: dict[str, Any] = {
        "name": name,
        "properties": {"cluster": "default-cluster", "namespace": name},
        "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        "start": "2026-01-01T00:00:00Z",
        "end": "2026-01-02T00:00:00Z",
        "minutes": 1440,
        "cpuCoreHours": 24,
        "cpuCost": 0.75866,
        "cpuCostAdjustment": 0,
        "cpuEfficiency": 0.5,
        "gpuHours": 24,
        "gpuCost": 22.8,
        "gpuCostAdjustment": 0,
        "networkCost": 0.1,
        "networkCostAdjustment": 0,
        "loadBalancerCost": 0.2,
        "loadBalancerCostAdjustment": 0,
        "pvCost": 0.3,
        "pvCostAdjustment": 0,
        "ramByteHours": 24 * 2**30,
        "ramCost": 0.10169,
        "ramCostAdjustment": 0,
        "ramEfficiency": 0.25,
        "externalCost": 0,
        "sharedCost": 0,
        "totalCost": 24.26035,
        "totalEfficiency": 0.47,
    }
    base.update(fields)
    return base


def envelope(*steps: dict[str, Any]) -> bytes:
    return json.dumps({"code": 200, "status": "success", "data": list(steps)}).encode()


# --- the real response ----------------------------------------------------------------------


def test_it_reads_the_published_example_to_the_cent(example: bytes) -> None:
    [step] = parse_response(200, JSON, example)
    assert sorted(step.lines) == ["kube-system", "opencost", "prometheus"]
    system = step.lines["kube-system"]
    assert system.window_start == datetime(2023, 7, 12, 11, 2, 46, tzinfo=UTC)
    assert system.window_end == datetime(2023, 7, 19, 11, 2, 46, tzinfo=UTC)
    assert system.end == datetime(2023, 7, 19, 11, 2, tzinfo=UTC)
    assert system.minutes == Decimal("10079.22199")
    assert system.cpu_core_hours == Decimal("75.55915")
    # Exactly the digits written, not a float's approximation of them.
    assert system.cpu_cost == Decimal("1.43086")
    assert system.ram_cost == Decimal("0.09657")
    assert system.total_cost == Decimal("1.52743")
    assert system.cost_without_gpu == system.total_cost
    assert system.cpu_efficiency == Decimal("0.02086")
    assert system.total_efficiency == Decimal("0.07855")
    assert (step.start, step.end) == (system.window_start, system.window_end)
    raw = json.loads(example)["data"][0]
    for name, parsed in step.lines.items():
        assert parsed.total_cost == Decimal(str(raw[name]["totalCost"]))
        assert parsed.cost_without_gpu.quantize(Decimal("0.01")) == Decimal(
            str(raw[name]["totalCost"])
        ).quantize(Decimal("0.01"))


def test_it_puts_the_examples_namespaces_on_the_platform_or_nobody(example: bytes) -> None:
    steps = costs_by_owner(parse_response(200, JSON, example), {"vision"}, platform_namespaces())
    [step] = steps
    assert step.tenants == {}
    # kube-system is the platform's; opencost and prometheus are namespaces of no tenant
    # here (this fleet keeps monitoring in "monitoring"), reported, never dropped.
    assert step.platform.namespaces == ["kube-system"]
    assert step.unattributed.namespaces == ["opencost", "prometheus"]
    total = step.platform.total + step.unattributed.total
    raw = json.loads(example)["data"][0]
    # Each figure is rounded to 5 decimals on its own, so parts and totals agree to the cent.
    expected = sum(Decimal(str(a["totalCost"])) for a in raw.values())
    assert total.quantize(Decimal("0.01")) == expected.quantize(Decimal("0.01")) == Decimal("1.78")


# --- error shapes ---------------------------------------------------------------------------


def test_it_reports_the_error_envelope() -> None:
    body = json.dumps(
        {"code": 400, "status": "", "data": None, "message": "Error: unknown aggregation: nodes"}
    ).encode()
    with pytest.raises(OpenCostError, match="400: Error: unknown aggregation: nodes"):
        parse_response(400, JSON, body)


def test_it_reports_a_plain_text_400_for_a_bad_window() -> None:
    with pytest.raises(OpenCostError, match="HTTP 400: Invalid window"):
        parse_response(400, "text/plain; charset=utf-8", b"Invalid window: 'fortnight'\n")


def test_it_reads_null_as_nothing_measured() -> None:
    body = envelope(
        {
            "team-a": line(
                "team-a", cpuEfficiency=None, ramEfficiency=None, totalEfficiency=None, pvCost=None
            )
        }
    )
    [step] = parse_response(200, JSON, body)
    parsed = step.lines["team-a"]
    assert parsed.cpu_efficiency is None and parsed.total_efficiency is None
    assert parsed.pv_cost == 0


def test_it_refuses_a_bare_nan() -> None:
    body = envelope({"team-a": line("team-a")}).replace(b'"cpuCost": 0.75866', b'"cpuCost": NaN')
    with pytest.raises(OpenCostError, match="not JSON: NaN"):
        parse_response(200, JSON, body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>gateway</html>", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"code": 200, "data": {"a": 1}}', "no list of allocation sets"),
        (b'{"code": 200, "data": [["a"]]}', r"data\[0\] is not an object"),
        (
            json.dumps({"code": 200, "data": [{"a": line("a", cpuCost="1.0")}]}).encode(),
            "cpuCost is not a number",
        ),
        (
            json.dumps({"code": 200, "data": [{"a": line("a", start="yesterday")}]}).encode(),
            "start is not an RFC 3339 time",
        ),
    ],
)
def test_it_names_what_is_wrong_with_a_malformed_answer(body: bytes, message: str) -> None:
    with pytest.raises(OpenCostError, match=message):
        parse_response(200, JSON, body)


# --- attribution ----------------------------------------------------------------------------


def test_it_attributes_by_namespace_only() -> None:
    platform = platform_namespaces()
    tenants = {"vision", "llm-platform"}
    assert attribute("vision", tenants, platform) == Owner("tenant", "vision")
    assert attribute("kube-system", tenants, platform) == Owner("platform")
    assert attribute("flux-system", tenants, platform) == Owner("platform")
    assert attribute("kserve", tenants, platform) == Owner("platform")
    assert attribute(IDLE, tenants, platform) == Owner("idle")
    assert attribute(UNALLOCATED, tenants, platform) == Owner("unattributed")
    assert attribute("old-team", tenants, platform) == Owner("unattributed")


def test_a_label_never_moves_cost() -> None:
    """A namespace labelled as another tenant's, or a platform namespace labelled as a
    tenant's, stays where its name puts it."""
    labelled = {
        "ai-factory.io/tenant": "llm-platform",
        "kubernetes_io_metadata_name": "llm-platform",
    }
    vision = line("vision")
    vision["properties"]["namespaceLabels"] = labelled
    vision["properties"]["labels"] = labelled
    system = line("kube-system", totalCost=1)
    system["properties"]["namespaceLabels"] = {"ai-factory.io/tenant": "vision"}
    body = envelope({"vision": vision, "kube-system": system})
    [step] = costs_by_owner(
        parse_response(200, JSON, body), {"vision", "llm-platform"}, platform_namespaces()
    )
    assert list(step.tenants) == ["vision"]
    assert step.platform.namespaces == ["kube-system"]


def test_opencosts_gpu_cost_stays_out_of_tenant_totals() -> None:
    body = envelope({"vision": line("vision"), IDLE: line(IDLE, cpuCost=5)})
    steps = costs_by_owner(parse_response(200, JSON, body), {"vision"}, platform_namespaces())
    vision = steps[0].tenants["vision"]
    assert vision.opencost_gpu == Decimal("22.8")
    assert vision.total == Decimal("0.75866") + Decimal("0.10169") + Decimal("0.6")
    assert steps[0].idle.cpu == 5
    [bill] = merge_gpu({"vision": Decimal("3.40")}, steps)
    # The ledger's fraction-aware GPU cost replaces OpenCost's whole-GPU 22.80.
    assert bill.total == Decimal("4.86")
    assert bill.opencost.opencost_gpu == Decimal("22.8")


def test_merge_adds_steps_and_keeps_gpu_only_tenants() -> None:
    day = {"start": "2026-01-02T00:00:00Z", "end": "2026-01-03T00:00:00Z"}
    body = envelope({"vision": line("vision")}, {"vision": line("vision", window=day)})
    steps = costs_by_owner(parse_response(200, JSON, body), {"vision"}, platform_namespaces())
    assert len(steps) == 2
    bills = {b.tenant: b for b in merge_gpu({"llm-platform": Decimal("1.005")}, steps)}
    assert bills["vision"].opencost.cpu == Decimal("1.51732")
    assert bills["vision"].opencost.namespaces == ["vision"]
    assert bills["llm-platform"].total == Decimal("1.01")


# --- bad answers over HTTP ------------------------------------------------------------------


class _Canned(BaseHTTPRequestHandler):
    answer: tuple[int, str, bytes, float] = (200, JSON, b"", 0.0)
    seen: list[str] = []

    def do_GET(self) -> None:
        status, content_type, body, delay = self.answer
        type(self).seen.append(self.path)
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The timeout test's client hangs up before the answer; that is the point.
        pass


@pytest.fixture
def canned() -> Iterator[tuple[str, type[_Canned]]]:
    handler = type("Handler", (_Canned,), {"seen": []})
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_client_asks_for_namespaces_over_the_window(
    canned: tuple[str, type[_Canned]],
) -> None:
    url, handler = canned
    handler.answer = (200, JSON, envelope({"vision": line("vision")}), 0)
    [step] = OpenCostClient(url + "/").allocation("24h", step="1h")
    assert list(step.lines) == ["vision"]
    path = handler.seen[0]
    assert path.startswith("/allocation/compute?")
    assert "window=24h" in path and "aggregate=namespace" in path and "step=1h" in path
    assert "includeIdle=true" in path


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ((500, "text/plain", b"Internal Server Error", 0), "HTTP 500: Internal Server Error"),
        ((502, JSON, b'{"code": 500, "message": "Error: prometheus down"}', 0), "prometheus"),
        ((200, JSON, b'{"code": 200, "data": [', 0), "not JSON"),
        ((200, JSON, envelope({}), 1.0), "did not answer in time"),
    ],
)
def test_the_client_turns_bad_answers_into_clear_errors(
    canned: tuple[str, type[_Canned]], answer: tuple[int, str, bytes, float], message: str
) -> None:
    url, handler = canned
    handler.answer = answer
    with pytest.raises(OpenCostError, match=message):
        OpenCostClient(url, timeout=0.3).allocation("1h")


def test_the_client_says_when_opencost_is_unreachable() -> None:
    with pytest.raises(OpenCostError, match="cannot be reached"):
        OpenCostClient("http://127.0.0.1:9", timeout=1).allocation("1h")
    with pytest.raises(OpenCostError, match="BILLING_OPENCOST_URL"):
        OpenCostClient("").allocation("1h")


def test_the_configured_client_reads_the_demo_fleets_opencost(
    start_fleet: Any, settings: Any
) -> None:
    start_fleet()
    assert configured_client().base_url == settings.BILLING_OPENCOST_URL != ""
    [step] = configured_client().allocation("today")
    assert {"vision", "llm-platform", IDLE} <= set(step.lines)
    steps = costs_by_owner([step], {"vision", "llm-platform"}, platform_namespaces())
    assert set(steps[0].tenants) == {"vision", "llm-platform"}
    settings.BILLING_OPENCOST_URL = ""
    with pytest.raises(OpenCostError, match="no OpenCost URL is configured"):
        configured_client().allocation("today")
