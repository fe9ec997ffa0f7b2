"""The simulator's OpenCost allocation API: windows as OpenCost parses them, costs from its
own placements and prices, one map per step, the idle line, errors in OpenCost's shapes, and
the portal's client reading it."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing.opencost import IDLE, OpenCostClient, OpenCostError, costs_by_owner
from fleet.services import platform_namespaces
from simulator import Simulator
from simulator.config import ConfigError, Prices, SimConfig, load_config
from simulator.opencost import (
    BadRequest,
    BadWindow,
    NodeCapacity,
    Placement,
    _rounded,
    allocation_sets,
    parse_step,
    parse_window,
    pod_requests,
    to_json,
)
from tests.support import wait_until

GIB = 2**30
PRICES = Prices()
# Thursday 2026-01-15 10:30:00 UTC.
NOW = datetime(2026, 1, 15, 10, 30, tzinfo=UTC).timestamp()
T0 = datetime(2026, 1, 15, 0, 0, tzinfo=UTC).timestamp()


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# --- windows --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "start", "end"),
    [
        ("today", "2026-01-15T00:00", "2026-01-16T00:00"),
        ("yesterday", "2026-01-14T00:00", "2026-01-15T00:00"),
        ("week", "2026-01-11T00:00", "2026-01-15T10:30"),  # weeks start on Sunday
        ("lastweek", "2026-01-04T00:00", "2026-01-11T00:00"),
        ("month", "2026-01-01T00:00", "2026-01-15T10:30"),
        ("lastmonth", "2025-12-01T00:00", "2026-01-01T00:00"),
        ("30m", "2026-01-15T10:00", "2026-01-15T10:30"),
        ("24h", "2026-01-14T10:30", "2026-01-15T10:30"),
        # Days and weeks are whole days up to the end of today.
        ("7d", "2026-01-09T00:00", "2026-01-16T00:00"),
        ("1w", "2026-01-09T00:00", "2026-01-16T00:00"),
        ("1768435200,1768438800", "2026-01-15T00:00", "2026-01-15T01:00"),
        ("1768435200-1768438800", "2026-01-15T00:00", "2026-01-15T01:00"),
        ("2026-01-15T00:00:00Z,2026-01-15T06:00:00Z", "2026-01-15T00:00", "2026-01-15T06:00"),
    ],
)
def test_it_parses_windows_as_opencost_does(window: str, start: str, end: str) -> None:
    assert parse_window(window, NOW) == (ts(start), ts(end))


@pytest.mark.parametrize(
    "window", ["", "fortnight", "7days", "1y", "2026-01-15,2026-01-16", "-1h", "1h,2h"]
)
def test_it_refuses_an_illegal_window(window: str) -> None:
    with pytest.raises(BadWindow, match="illegal window"):
        parse_window(window, NOW)


def test_it_reads_steps_and_refuses_bad_ones() -> None:
    assert parse_step("1h") == 3600
    assert parse_step("30m") == 1800
    assert parse_step("1d") == 86400
    for bad in ("0h", "h", "1y", "-1h"):
        with pytest.raises(BadRequest, match="Invalid step parameter"):
            parse_step(bad)


# --- costs ----------------------------------------------------------------------------------


def sets(
    placements: list[Placement],
    window: tuple[float, float],
    step: float,
    *,
    nodes: list[NodeCapacity] | None = None,
    now: float = NOW,
    idle: bool = False,
) -> list[dict[str, Any]]:
    return allocation_sets(
        cluster="lab",
        placements=placements,
        nodes=nodes or [],
        prices=PRICES,
        window=window,
        step=step,
        now=now,
        include_idle=idle,
        namespace_labels={"team-a": {"kubernetes.io/metadata.name": "team-a"}},
    )


def test_it_prices_requests_for_the_time_placed() -> None:
    placements = [
        Placement("team-a", "train-1", "n1", 16, 128 * GIB, 8, start=T0 + 3600),
        Placement("team-a", "eval-1", "n2", 2, 32 * GIB, 0, start=T0, end=T0 + 1800),
        Placement("team-b", "web-1", "n2", 0.5, 1 * GIB, 0, start=T0 - 7200),
    ]
    [data] = sets(placements, (T0, T0 + 4 * 3600), math.inf)
    team_a = data["team-a"]
    assert team_a["window"] == {"start": "2026-01-15T00:00:00Z", "end": "2026-01-15T04:00:00Z"}
    assert (team_a["start"], team_a["end"]) == ("2026-01-15T00:00:00Z", "2026-01-15T04:00:00Z")
    assert team_a["minutes"] == 240
    # 16 cores for three hours and 2 for half an hour.
    assert team_a["cpuCoreHours"] == 49
    assert team_a["cpuCores"] == 12.25
    assert team_a["cpuCost"] == round(49 * 0.031611, 5) == 1.54894
    assert team_a["ramByteHours"] == (128 * 3 + 32 * 0.5) * GIB
    assert team_a["ramCost"] == round(400 * 0.004237, 5)
    assert team_a["gpuHours"] == 24
    assert team_a["gpuCost"] == round(24 * 0.95, 5)
    assert team_a["totalCost"] == round(49 * 0.031611 + 400 * 0.004237 + 24 * 0.95, 5)
    assert team_a["properties"] == {
        "cluster": "lab",
        "namespace": "team-a",
        "namespaceLabels": {"kubernetes_io_metadata_name": "team-a"},
    }
    assert data["team-b"]["cpuCoreHours"] == 2
    assert IDLE not in data


def test_it_answers_one_map_per_step() -> None:
    placements = [Placement("team-a", "p", "n1", 4, 0, 0, start=T0 + 1800, end=T0 + 3 * 3600)]
    data = sets(placements, (T0, T0 + 4 * 3600), 3600)
    assert len(data) == 4
    assert [d["team-a"]["cpuCoreHours"] if d else None for d in data] == [2, 4, 4, None]
    assert data[0]["team-a"]["start"] == "2026-01-15T00:30:00Z"
    assert data[0]["team-a"]["window"]["end"] == "2026-01-15T01:00:00Z"
    # A last step shorter than the others ends with the window.
    short = sets(placements, (T0, T0 + 5400), 3600)
    assert [d["team-a"]["window"]["end"] for d in short] == [
        "2026-01-15T01:00:00Z",
        "2026-01-15T01:30:00Z",
    ]


def test_nothing_is_counted_past_now() -> None:
    placements = [Placement("team-a", "p", "n1", 1, 0, 0, start=T0)]
    [data] = sets(placements, (T0, T0 + 86400), math.inf, now=T0 + 1800)
    assert data["team-a"]["cpuCoreHours"] == 0.5
    assert data["team-a"]["end"] == "2026-01-15T00:30:00Z"


def test_idle_is_the_capacity_no_pod_requested() -> None:
    nodes = [NodeCapacity("n1", 64, 512 * GIB, 8, since=T0)]
    placements = [Placement("team-a", "p", "n1", 16, 128 * GIB, 2, start=T0)]
    [data] = sets(placements, (T0, T0 + 3600), math.inf, nodes=nodes, idle=True)
    idle = data[IDLE]
    assert idle["properties"] == {"cluster": "lab"}
    assert idle["cpuCoreHours"] == 48
    assert idle["ramByteHours"] == 384 * GIB
    assert idle["gpuHours"] == 6
    assert idle["totalCost"] == round(48 * 0.031611 + 384 * 0.004237 + 6 * 0.95, 5)


def test_it_rounds_to_five_decimals_and_writes_nan_as_null() -> None:
    placements = [Placement("team-a", "p", "n1", 1 / 3, 0, 0, start=T0)]
    [data] = sets(placements, (T0, T0 + 3600), math.inf)
    assert data["team-a"]["cpuCoreHours"] == 0.33333
    assert data["team-a"]["ramBytes"] == 0
    assert [_rounded(v) for v in (math.nan, math.inf, 2 / 3, 0)] == [None, None, 0.66667, 0]


def test_it_writes_numbers_as_go_does() -> None:
    text = to_json(
        {"a": [0.00004, 16.0, 0, None, 1.5, -0.25, math.nan, 2.5e21, "x"], "b": {"c": True}}
    ).decode()
    assert text == '{"a":[0.00004,16,0,null,1.5,-0.25,null,2.5e+21,"x"],"b":{"c":true}}'
    assert json.loads(text)["a"][0] == 0.00004


def test_it_counts_gpus_as_opencost_does() -> None:
    """Only nvidia.com/gpu: OpenCost reads neither MIG, HAMi nor DRA requests."""
    whole = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "16"}}}]}
    mig = {
        "containers": [
            {
                "resources": {
                    "requests": {"nvidia.com/mig-1g.18gb": "1", "cpu": "500m", "memory": "32Gi"}
                }
            }
        ]
    }
    hami = {"containers": [{"resources": {"limits": {"nvidia.com/vgpu": "1", "memory": "1G"}}}]}
    assert pod_requests(whole) == (16, 0, 8)
    assert pod_requests(mig) == (0.5, 32 * GIB, 0)
    assert pod_requests(hami) == (0, 1e9, 0)


def test_a_window_ending_before_it_starts_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="illegal window"):
        sets([], (T0 + 60, T0), 60)
    with pytest.raises(BadRequest, match="more than"):
        sets([], (T0, T0 + 86400 * 30), 1)


# --- over HTTP ------------------------------------------------------------------------------


def get(simulator: Simulator, query: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"{simulator.url}/allocation/compute?{query}") as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def life(simulator: Simulator) -> str:
    """A unix window from an hour before the simulator started to an hour from now."""
    now = int(time.time())
    return f"{now - 3600},{now + 3600}"


def test_the_portals_client_reads_the_simulators_costs(simulator: Simulator) -> None:
    [step] = wait_until(  # some time run, so that the averages below have hours to divide
        lambda: [
            step
            for step in OpenCostClient(simulator.url).allocation(life(simulator))
            if step.lines["vision"].minutes > Decimal("0.002")
        ],
        10,
        "vision's pods to have run for a moment",
    )
    assert set(step.lines) == {"vision", "llm-platform", IDLE}
    vision = step.lines["vision"]
    hours = vision.minutes / 60
    # Two pods of 16 cores, three of 2 and one of 8, since the simulator started.
    assert vision.cpu_core_hours == pytest.approx(Decimal(46) * hours, abs=Decimal("0.0001"))
    # Only the 2 x 8 whole GPUs: the MIG pods are invisible to OpenCost.
    assert vision.gpu_hours == pytest.approx(Decimal(16) * hours, abs=Decimal("0.0001"))
    llm = step.lines["llm-platform"]
    assert llm.gpu_hours == 0 and llm.gpu_cost == 0
    assert llm.cpu_cost == pytest.approx(
        llm.cpu_core_hours * Decimal("0.031611"), abs=Decimal("0.00002")
    )
    steps = costs_by_owner(
        OpenCostClient(simulator.url).allocation(life(simulator)),
        {"vision", "llm-platform"},
        platform_namespaces(),
    )
    assert set(steps[0].tenants) == {"vision", "llm-platform"}
    assert steps[0].idle.namespaces == [IDLE]


def test_it_answers_a_map_per_step_and_idle_only_when_asked(simulator: Simulator) -> None:
    now = int(time.time())
    # Steps [now-7199, now-3599), [now-3599, now+1), [now+1, ...): the simulator started in
    # the second.
    status, content_type, body = get(
        simulator, f"window={now - 7199},{now + 3601}&aggregate=namespace&step=1h"
    )
    assert (status, content_type) == (200, "application/json")
    assert b"e-0" not in body
    payload = json.loads(body)
    assert payload["code"] == 200 and payload["status"] == "success"
    assert len(payload["data"]) == 3
    assert payload["data"][0] == {}  # before the simulator started
    assert set(payload["data"][1]) == {"vision", "llm-platform"}
    steps = OpenCostClient(simulator.url).allocation(f"{now - 7199},{now + 3601}", step="1h")
    assert [len(step.lines) > 0 for step in steps][:2] == [False, True]
    assert steps[1].start == datetime.fromtimestamp(now - 3599, UTC)
    accumulated = json.loads(get(simulator, "window=1h&aggregate=namespace&accumulate=true")[2])
    assert len(accumulated["data"]) == 1
    with_idle = json.loads(get(simulator, "window=today&aggregate=namespace&includeIdle=true")[2])
    assert IDLE in with_idle["data"][0]


def test_a_label_never_moves_cost_in_the_simulator(simulator: Simulator) -> None:
    """A pod in vision labelled as llm-platform's, and one in kube-system labelled as
    vision's, cost where their namespaces are."""
    for namespace, tenant in (("vision", "llm-platform"), ("kube-system", "vision")):
        pod = {
            "metadata": {"namespace": namespace, "labels": {"ai-factory.io/tenant": tenant}},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100"}}}],
                "nodeSelector": {"ai-factory.io/pool": "system"},
            },
        }
        simulator.cluster.create_pod(pod, "labelled", time.time(), admission=False)
    after = wait_a_second()
    sets_ = OpenCostClient(simulator.url).allocation(f"{after},{after + 3600}", include_idle=False)
    # The 100-core pod is in vision's line (46 cores of its own), not llm-platform's.
    assert sets_[0].lines["vision"].cpu_core_hours > 0
    assert [cores(sets_, ns) for ns in ("vision", "llm-platform", "kube-system")] == [146, 16, 100]
    [step] = costs_by_owner(sets_, {"vision", "llm-platform"}, platform_namespaces())
    assert step.platform.namespaces == ["kube-system"]
    assert step.platform.cpu > 0


def wait_a_second() -> int:
    """A whole unix second from which on nothing changes, and half a second of it passed."""
    after = int(time.time()) + 1
    wait_until(lambda: time.time() >= after + 0.5, 5, f"half of the unix second {after}")
    return after


def cores(sets_: list[Any], namespace: str, field: str = "cpuCores") -> float:
    """An average the client does not keep, read from the raw line (exact to 5 decimals)."""
    line = sets_[0].lines[namespace]
    hours = line.minutes / 60
    value = line.cpu_core_hours if field == "cpuCores" else line.gpu_hours
    return round(float(value / hours))


def test_a_deleted_pod_stops_costing(simulator: Simulator) -> None:
    finetune = sorted(
        p.pod for p in simulator.cluster.placements if p.pod.startswith("finetune-vit-")
    )
    simulator.cluster.delete_pod("vision", finetune[0], time.time(), recreate=False)
    [ended] = [p for p in simulator.cluster.placements if p.pod == finetune[0]]
    assert ended.end is not None
    after = wait_a_second()
    sets_ = OpenCostClient(simulator.url).allocation(f"{after},{after + 3600}")
    # One 16-core, 8-GPU pod less than at the start.
    assert cores(sets_, "vision") == 30
    assert cores(sets_, "vision", "gpus") == 8


@pytest.mark.parametrize(
    ("query", "content_type", "message"),
    [
        ("window=fortnight&aggregate=namespace", "text/plain", "Invalid 'window' parameter"),
        ("aggregate=namespace", "text/plain", "Invalid 'window' parameter"),
        ("window=1h&aggregate=pod", "text/plain", "Invalid 'aggregate' parameter"),
        ("window=1h&aggregate=namespace&step=0h", "application/json", "Invalid step parameter"),
        ("window=1h&aggregate=namespace&accumulate=quarter", "application/json", "accumulateBy"),
    ],
)
def test_it_answers_errors_in_opencosts_shapes(
    simulator: Simulator, query: str, content_type: str, message: str
) -> None:
    status, given_type, body = get(simulator, query)
    assert status == 400
    assert given_type.startswith(content_type)
    if content_type == "application/json":
        payload = json.loads(body)
        assert payload["code"] == 400 and payload["data"] is None and payload["status"] == ""
        assert payload["message"].startswith("Error: ") and message in payload["message"]
    else:
        assert message in body.decode()


def test_the_client_reports_the_simulators_refusals(simulator: Simulator) -> None:
    client = OpenCostClient(simulator.url)
    with pytest.raises(OpenCostError, match="HTTP 400: Invalid 'window' parameter"):
        client.allocation("fortnight")
    with pytest.raises(OpenCostError, match="400: Error: Invalid step parameter"):
        client.allocation("1h", step="0h")


def test_the_price_table_is_configurable(tmp_path: Path) -> None:
    assert SimConfig.demo().prices == Prices(0.031611, 0.004237, 0.95)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "node_groups: [{pool: a, nodes: 1}]\nprices: {cpu_core_hour: 0.05, gpu_hour: 2}\n"
    )
    assert load_config(path).prices == Prices(0.05, 0.004237, 2.0)
    path.write_text("node_groups: [{pool: a, nodes: 1}]\nprices: {gpu_hour: -1}\n")
    with pytest.raises(ConfigError, match="prices: a price cannot be negative"):
        load_config(path)
