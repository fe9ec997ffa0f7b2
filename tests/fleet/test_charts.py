"""Capacity, node use, topology and the capacity chart, computed from unsaved rows: no HTTP,
no database."""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any

from fleet.capacity import (
    NO_DOMAIN,
    NO_RACK,
    CapacityRow,
    capacity_rows,
    health_counts,
    node_uses,
    topology,
    total_requests,
)
from fleet.charts import capacity_figure, figure_html
from fleet.models import Node, Workload
from gitops.specs import Flavor, FleetSpec

WHOLE = Flavor(name="h200", product="NVIDIA-H200", mode="whole", gpus=32, gpu_memory_mib=1)
MIG = Flavor(
    name="h200-mig",
    product="NVIDIA-H200",
    mode="mig",
    gpus=8,
    gpu_memory_mib=1,
    mig_profiles=(("1g.18gb", 16), ("2g.35gb", 8), ("3g.71gb", 8)),
)
HAMI = Flavor(
    name="h200-hami",
    product="NVIDIA-H200",
    mode="hami",
    gpus=8,
    gpu_memory_mib=1,
    node_labels=(("nvidia.com/gpu.deploy.device-plugin", "false"),),
)
FLEET = FleetSpec(flavors=(WHOLE, MIG, HAMI))


def node(name: str, **fields: Any) -> Node:
    defaults: dict[str, Any] = {"flavor": "h200", "sharing": "whole", "health": "healthy"}
    return Node(name=name, **{**defaults, **fields})


def gpus(n: int, resource: str = "nvidia.com/gpu") -> dict[str, int]:
    return {resource: n}


def pod(name: str, on: str, requests: Any, tenant: str = "alpha") -> Workload:
    return Workload(namespace=tenant, name=name, node=on, gpu_requests=requests, tenant_slug=tenant)


def row(rows: list[CapacityRow], label: str) -> CapacityRow:
    return next(r for r in rows if r.label == label)


def test_it_counts_whole_gpus_in_use_free_and_unavailable() -> None:
    nodes = [
        node("a", gpu_capacity=gpus(8), gpu_allocatable=gpus(8)),
        node("b", gpu_capacity=gpus(8), gpu_allocatable=gpus(8), unschedulable=True),
        node("c", gpu_capacity=gpus(8), gpu_allocatable=gpus(8), health="unhealthy"),
        # The device plugin withdrew one GPU: allocatable is below capacity.
        node("d", gpu_capacity=gpus(8), gpu_allocatable=gpus(7)),
        node("other", flavor="", gpu_capacity=gpus(8), gpu_allocatable=gpus(8)),
    ]
    workloads = [
        pod("p1", "a", gpus(3)),
        pod("p2", "b", gpus(2)),
        pod("pending", "", gpus(4)),
        pod("p3", "other", gpus(8)),
    ]
    h200 = row(capacity_rows(FLEET, nodes, workloads), "h200")
    assert (h200.in_use, h200.free, h200.unavailable) == (5, 12, 15)
    assert h200.total == 32
    assert (h200.unit, h200.resource) == ("GPUs", "nvidia.com/gpu")


def test_it_counts_mig_slices_per_profile() -> None:
    layout = {
        "nvidia.com/mig-1g.18gb": 16,
        "nvidia.com/mig-2g.35gb": 8,
        "nvidia.com/mig-3g.71gb": 8,
    }
    nodes = [
        node("m1", flavor="h200-mig", sharing="mig", gpu_capacity=layout, gpu_allocatable=layout)
    ]
    workloads = [
        pod("small", "m1", {"nvidia.com/mig-1g.18gb": 3}),
        pod("large", "m1", {"nvidia.com/mig-3g.71gb": 1}),
    ]
    rows = [r for r in capacity_rows(FLEET, nodes, workloads) if r.flavor == "h200-mig"]
    assert [(r.label, r.in_use, r.free, r.unavailable) for r in rows] == [
        ("h200-mig 1g.18gb", 3, 13, 0),
        ("h200-mig 2g.35gb", 0, 8, 0),
        ("h200-mig 3g.71gb", 1, 7, 0),
    ]
    assert {r.unit for r in rows} == {"MIG slices"}


def test_it_counts_hami_vgpu_slots() -> None:
    # HAMi's slots as the fleet names them; memory and cores are not allocatable.
    advertised = {"nvidia.com/vgpu": 80}
    nodes = [
        node(
            "h1",
            flavor="h200-hami",
            sharing="hami",
            gpu_capacity=advertised,
            gpu_allocatable=advertised,
        )
    ]
    workloads = [
        pod("w1", "h1", {"nvidia.com/vgpu": 1, "nvidia.com/gpumem": 24000}),
        pod("w2", "h1", {"nvidia.com/vgpu": 2, "nvidia.com/gpucores": 30}),
    ]
    rows = [r for r in capacity_rows(FLEET, nodes, workloads) if r.flavor == "h200-hami"]
    assert [(r.unit, r.in_use, r.free, r.unavailable) for r in rows] == [("vGPU slots", 3, 77, 0)]
    [use] = node_uses(nodes, workloads)
    assert (use.unit, use.used, use.allocatable, use.whole_free) == ("vGPU slots", 3, 80, 0)


def test_it_counts_dra_gpus_from_the_gpu_count() -> None:
    # A DRA node advertises nothing: GFD's count is its GPUs, all free to a claim.
    dra = Flavor(name="h200-dra", product="NVIDIA-H200", mode="dra", gpus=8, gpu_memory_mib=1)
    nodes = [
        node(
            "d1",
            flavor="h200-dra",
            sharing="dra",
            gpu_count=8,
            gpu_capacity={},
            gpu_allocatable={},
        )
    ]
    rows = capacity_rows(FleetSpec(flavors=(dra,)), nodes, [])
    assert [(r.unit, r.in_use, r.free, r.unavailable) for r in rows] == [("GPUs (DRA)", 0, 8, 0)]
    [use] = node_uses(nodes, [])
    assert (use.unit, use.allocatable, use.whole_free) == ("GPUs (DRA)", 8, 8)


def test_it_reports_every_configured_flavor_even_without_nodes() -> None:
    rows = capacity_rows(FLEET, [], [])
    assert [r.label for r in rows] == [
        "h200",
        "h200-mig 1g.18gb",
        "h200-mig 2g.35gb",
        "h200-mig 3g.71gb",
        "h200-hami",
    ]
    assert all(r.total == 0 for r in rows)


def test_it_counts_malformed_rows_as_nothing() -> None:
    nodes = [
        node("bad", gpu_capacity="eight", gpu_allocatable={"nvidia.com/gpu": "8"}),
        node("neg", gpu_capacity=gpus(-4), gpu_allocatable={"nvidia.com/gpu": True}),
    ]
    workloads = [pod("x", "bad", ["nvidia.com/gpu"]), pod("y", "neg", {"nvidia.com/gpu": None})]
    h200 = row(capacity_rows(FLEET, nodes, workloads), "h200")
    assert h200.total == 0
    assert [u.used for u in node_uses(nodes, workloads)] == [0, 0]


def test_it_lists_each_nodes_use_and_tenants() -> None:
    nodes = [
        node("a", gpu_allocatable=gpus(8)),
        node("cordoned", gpu_allocatable=gpus(8), unschedulable=True),
        node("m", sharing="mig", gpu_allocatable={"nvidia.com/mig-1g.18gb": 16}),
    ]
    workloads = [
        pod("p1", "a", gpus(2), tenant="alpha"),
        pod("p2", "a", gpus(1), tenant="bravo"),
        pod("p3", "m", {"nvidia.com/mig-1g.18gb": 4}, tenant="alpha"),
    ]
    uses = {u.node.name: u for u in node_uses(nodes, workloads)}
    assert (uses["a"].used, uses["a"].allocatable, uses["a"].whole_free) == (3, 8, 5)
    assert uses["a"].tenants == ("alpha", "bravo")
    assert uses["cordoned"].whole_free == 0
    assert (uses["m"].used, uses["m"].allocatable, uses["m"].unit) == (4, 16, "MIG slices")
    assert uses["m"].whole_free == 0  # slices are no use to a job that wants whole GPUs


def test_it_groups_nodes_by_nvlink_domain_then_rack() -> None:
    nodes = [
        node(
            "n1", clique="fabric-1.0", block="b1", rack="r1", gpu_count=8, gpu_allocatable=gpus(8)
        ),
        node("n2", clique="fabric-1.0", rack="r2", gpu_count=8, gpu_allocatable=gpus(8)),
        node("n3", block="b2", rack="r1", gpu_count=8, gpu_allocatable=gpus(8)),
        node("n4", gpu_count=4, gpu_allocatable=gpus(4)),
    ]
    workloads = [pod("p", "n1", gpus(6))]
    domains = topology(node_uses(nodes, workloads))
    assert [d.name for d in domains] == ["b2", "fabric-1.0", NO_DOMAIN]
    fabric = domains[1]
    assert [r.name for r in fabric.racks] == ["r1", "r2"]
    assert (fabric.total_gpus, fabric.free_gpus, fabric.largest_free) == (16, 10, 8)
    assert [r.name for r in domains[2].racks] == [NO_RACK]


def test_it_counts_health_with_odd_values_as_unknown() -> None:
    nodes = [
        node("a"),
        node("b", health="degraded", unschedulable=True),
        node("c", health="unknown"),
        node("d", health="on fire"),
    ]
    assert health_counts(nodes) == {
        "healthy": 1,
        "degraded": 1,
        "unhealthy": 0,
        "unknown": 2,
        "cordoned": 1,
    }


def test_it_totals_a_tenants_requests() -> None:
    workloads = [pod("a", "n", gpus(2)), pod("b", "", gpus(1)), pod("c", "n", {"x": "junk"})]
    assert total_requests(workloads) == {"nvidia.com/gpu": 3}


def test_it_draws_stacked_bars_per_flavor() -> None:
    rows = [
        CapacityRow("h200", "whole", "nvidia.com/gpu", "GPUs", 5, 12, 15, 16),
        CapacityRow("h200-mig", "mig", "nvidia.com/mig-1g.18gb", "MIG slices", 3, 13, 0),
    ]
    figure = capacity_figure(rows)
    assert [trace.name for trace in figure.data] == ["In use", "Free", "Reserved", "Unavailable"]
    assert [list(trace.y) for trace in figure.data] == [[5, 3], [12, 13], [16, 0], [15, 0]]
    assert all(trace.type == "bar" for trace in figure.data)
    assert figure.layout.barmode == "stack"
    assert list(figure.data[0].x) == ["h200<br>(GPUs)", "h200-mig 1g.18gb<br>(MIG slices)"]


def test_it_embeds_the_chart_as_data_without_plotly_js() -> None:
    figure = capacity_figure([CapacityRow("h200", "whole", "g", "GPUs", 1, 2, 3)])
    html = figure_html(figure)
    assert html.startswith('<div class="plotly-chart" data-plotly-figure="{')
    # Nothing the Content-Security-Policy would refuse: no script, no style attribute.
    assert "<script" not in html and "style=" not in html
    assert len(html) < 20_000  # the bundle is served once, not inlined per chart
    attributes = dict(re.findall(r'(data-plotly-[a-z]+)="([^"]*)"', html))
    shipped = json.loads(unescape(attributes["data-plotly-figure"]))
    assert shipped["data"][0]["y"] == [1] and shipped["layout"]["barmode"] == "stack"
    assert json.loads(unescape(attributes["data-plotly-config"])) == {
        "displayModeBar": False,
        "responsive": True,
    }
