"""Charts of the fleet pages: pure functions from computed rows to plotly figures."""

from __future__ import annotations

import json
from collections.abc import Sequence

import plotly.graph_objects as go
from django.utils.html import format_html

from fleet.capacity import CapacityRow
from fleet.queues import QueueRow

# The portal's palette (static/portal/portal.css): accent, ok, and a grey for what cannot be used.
IN_USE_COLOUR = "#3b5bdb"
FREE_COLOUR = "#2b8a3e"
UNAVAILABLE_COLOUR = "#adb5bd"
RESERVED_COLOUR = "#e67700"
# No toolbar; the chart follows its container's width.
CHART_CONFIG = {"displayModeBar": False, "responsive": True}


def capacity_figure(rows: Sequence[CapacityRow]) -> go.Figure:
    """A stacked bar per flavor (per MIG profile): in use, free, reserved (free on nodes of a
    dedicated tenant's own), unavailable. Units differ
    between bars (GPUs, MIG slices, vGPU slots), so each bar's label and hover say its unit."""
    labels = [f"{row.label}<br>({row.unit})" for row in rows]
    units = [row.unit for row in rows]
    figure = go.Figure()
    for name, colour, values in (
        ("In use", IN_USE_COLOUR, [row.in_use for row in rows]),
        ("Free", FREE_COLOUR, [row.free for row in rows]),
        ("Reserved", RESERVED_COLOUR, [row.reserved for row in rows]),
        ("Unavailable", UNAVAILABLE_COLOUR, [row.unavailable for row in rows]),
    ):
        figure.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=values,
                customdata=units,
                marker_color=colour,
                hovertemplate=f"{name}: %{{y}} %{{customdata}}<extra></extra>",
            )
        )
    return _bar_layout(figure, barmode="stack", height=320, bottom=60, legend_y=-0.25)


def _bar_layout(
    figure: go.Figure, *, barmode: str, height: int, bottom: int, legend_y: float
) -> go.Figure:
    """The fleet pages' bar charts: legend below, y from zero, the portal's font."""
    figure.update_layout(
        # "none" keeps plotly's default template (kilobytes of JSON) out of every refresh.
        template="none",
        barmode=barmode,
        height=height,
        margin={"l": 40, "r": 10, "t": 10, "b": bottom},
        legend={"orientation": "h", "y": legend_y},
        yaxis={"rangemode": "tozero", "gridcolor": "#e3e6ea"},
        font={"family": "system-ui, sans-serif", "size": 13},
    )
    return figure


BORROWED_COLOUR = "#e8590c"


def queue_figure(rows: Sequence[QueueRow]) -> go.Figure:
    """Per ClusterQueue and GPU resource of a flavor: its nominal quota, what it uses of its
    own, and what it borrows from the cohort (grouped bars, one group per queue and flavor).
    Units differ between resources, so each bar's label and hover say its unit."""
    labels: list[str] = []
    units: list[str] = []
    nominal: list[float] = []
    own: list[float] = []
    borrowed: list[float] = []
    for row in rows:
        for flavor in row.flavors:
            labels.append(f"{row.queue.name}<br>{flavor.flavor} ({flavor.nominal.unit})")
            units.append(flavor.nominal.unit)
            nominal.append(float(flavor.nominal.number))
            own.append(float(flavor.in_use.number - flavor.borrowed.number))
            borrowed.append(float(flavor.borrowed.number))
    figure = go.Figure()
    for name, colour, values, group in (
        ("Nominal quota", UNAVAILABLE_COLOUR, nominal, "quota"),
        ("In use (own quota)", IN_USE_COLOUR, own, "use"),
        ("Borrowed", BORROWED_COLOUR, borrowed, "use"),
    ):
        figure.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=values,
                offsetgroup=group,
                customdata=units,
                marker_color=colour,
                hovertemplate=f"{name}: %{{y:.2f}} %{{customdata}}<extra></extra>",
            )
        )
    return _bar_layout(figure, barmode="relative", height=340, bottom=80, legend_y=-0.3)


def figure_html(figure: go.Figure) -> str:
    """The figure as an HTML fragment: an empty element whose data attributes carry the figure
    and its config as JSON, plotted by static/portal/portal.js (with plotly.js, which the page
    loads itself: see portal.views). Plotly's own ``to_html`` writes an inline script and a
    style attribute, which the Content-Security-Policy refuses, and an inline script in an
    htmx fragment could not carry the page's nonce anyway."""
    return format_html(
        '<div class="plotly-chart" data-plotly-figure="{}" data-plotly-config="{}"></div>',
        figure.to_json(),
        json.dumps(CHART_CONFIG),
    )
