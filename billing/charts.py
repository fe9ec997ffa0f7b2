"""Charts of the usage dashboards: pure functions from ``billing.dashboards`` rows to plotly
figures, drawn on the page with ``fleet.charts.figure_html``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal

import plotly.graph_objects as go

from billing.dashboards import Bucket, FlavorQuota, TenantCost
from fleet.charts import FREE_COLOUR, IN_USE_COLOUR, UNAVAILABLE_COLOUR, figure_html

WASTE_COLOUR = "#e8590c"
ENERGY_COLOUR = "#f08c00"
UNPRICED_COLOUR = "#c92a2a"
# Colours for stacked flavors, after the palette's own.
SERIES_COLOURS = [IN_USE_COLOUR, FREE_COLOUR, ENERGY_COLOUR, "#7048e8", "#1098ad", "#d6336c"]
# Bars beyond this many tenants would be unreadable; the table lists them all.
MAX_BARS = 20


def _layout(figure: go.Figure, *, yaxis: Mapping[str, object], **extra: object) -> go.Figure:
    # Assigned whole: ``update_layout`` merges key by key and takes several times as long,
    # which adds up over a page of charts.
    figure.layout = {
        # "none" keeps plotly's default template (kilobytes of JSON) out of every fragment.
        "template": "none",
        "height": 300,
        "margin": {"l": 50, "r": 10, "t": 10, "b": 60},
        "legend": {"orientation": "h", "y": -0.25},
        "yaxis": {"rangemode": "tozero", "gridcolor": "#e3e6ea", **yaxis},
        "font": {"family": "system-ui, sans-serif", "size": 13},
        **extra,
    }
    return figure


def has_data(figure: go.Figure) -> bool:
    """Whether any trace of the figure has a value other than zero. A figure without points
    draws blank axes over plotly's default range (-1 to 6), which reads as broken; the pages
    say there is nothing to show instead."""
    return any(
        any(value for value in (trace.y if trace.y is not None else ())) for trace in figure.data
    )


def drawn(figure: go.Figure) -> str:
    """The figure as a page fragment (``fleet.charts.figure_html``), or "" when it has no data."""
    return figure_html(figure) if has_data(figure) else ""


# Buckets long enough for a range to reach back before the ledger began (a year by week, two
# by month): their charts start at the first bucket with data rather than with empty bars.
TRIMMED_BUCKETS = ("week", "month")


def from_first_data(buckets: Sequence[Bucket], bucket: str) -> list[Bucket]:
    """The buckets of a weekly or monthly series from the first one with GPU-hours or energy;
    shorter buckets are kept whole (an hour or a day without usage is worth seeing)."""
    if bucket not in TRIMMED_BUCKETS:
        return list(buckets)
    first = next((i for i, b in enumerate(buckets) if b.gpu_hours or b.energy_kwh), len(buckets))
    return list(buckets[first:])


def _floats(values: Sequence[Decimal]) -> list[float]:
    return [float(v) for v in values]


def allocation_figure(buckets: Sequence[Bucket]) -> go.Figure:
    """Allocation % and utilisation % of the fleet's GPUs per bucket."""
    x = [b.start for b in buckets]
    figure = go.Figure()
    for name, colour, values in (
        ("Allocated", IN_USE_COLOUR, [b.allocation * 100 for b in buckets]),
        ("Used", FREE_COLOUR, [b.utilisation * 100 for b in buckets]),
    ):
        figure.add_trace(
            go.Scatter(
                name=name,
                x=x,
                y=_floats(values),
                mode="lines",
                line={"color": colour},
                hovertemplate=f"{name}: %{{y:.1f}}%<extra></extra>",
            )
        )
    return _layout(figure, yaxis={"ticksuffix": "%"})


def gpu_hours_figure(buckets: Sequence[Bucket]) -> go.Figure:
    """GPU-hours held and used per bucket (a tenant's own)."""
    x = [b.start for b in buckets]
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            name="Allocated",
            x=x,
            y=_floats([b.gpu_hours for b in buckets]),
            marker_color=IN_USE_COLOUR,
            hovertemplate="Allocated: %{y:.2f} GPU-h<extra></extra>",
        )
    )
    figure.add_trace(
        go.Scatter(
            name="Used",
            x=x,
            y=_floats([b.used_gpu_hours for b in buckets]),
            mode="lines",
            line={"color": FREE_COLOUR},
            hovertemplate="Used: %{y:.2f} GPU-h<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": "GPU-hours"}})


def waste_figure(costs: Sequence[TenantCost]) -> go.Figure:
    """Idle-but-allocated GPU-hours per tenant, most wasteful first."""
    rows = sorted(
        (c for c in costs if c.idle_gpu_hours > 0), key=lambda c: (-c.idle_gpu_hours, c.tenant)
    )[:MAX_BARS]
    figure = go.Figure(
        go.Bar(
            name="Idle GPU-hours",
            x=[c.tenant or "(no tenant)" for c in rows],
            y=_floats([c.idle_gpu_hours for c in rows]),
            marker_color=WASTE_COLOUR,
            hovertemplate="%{x}: %{y:.2f} GPU-h idle<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": "GPU-hours"}})


def cost_figure(costs: Sequence[TenantCost], flavors: Sequence[str], currency: str) -> go.Figure:
    """Cost per tenant stacked by flavor (the dearest tenants), with a marker over each tenant
    that has unpriced GPU-hours: those count as zero in the bars."""
    rows = list(costs[:MAX_BARS])
    x = [c.tenant or "(no tenant)" for c in rows]
    figure = go.Figure()
    for index, flavor in enumerate(flavors):
        figure.add_trace(
            go.Bar(
                name=flavor or "(no flavor)",
                x=x,
                y=_floats([c.by_flavor.get(flavor, Decimal(0)) for c in rows]),
                marker_color=SERIES_COLOURS[index % len(SERIES_COLOURS)],
                hovertemplate=f"{flavor}: %{{y:.2f}} {currency}<extra></extra>",
            )
        )
    unpriced = [c for c in rows if c.total.unpriced_gpu_hours]
    if unpriced:
        figure.add_trace(
            go.Scatter(
                name="Has unpriced GPU-hours",
                x=[c.tenant or "(no tenant)" for c in unpriced],
                y=_floats([c.total.amount for c in unpriced]),
                customdata=_floats([c.total.unpriced_gpu_hours for c in unpriced]),
                mode="markers",
                marker={"color": UNPRICED_COLOUR, "symbol": "triangle-down", "size": 12},
                hovertemplate="%{customdata:.2f} GPU-h without a price<extra></extra>",
            )
        )
    return _layout(figure, yaxis={"title": {"text": currency}}, barmode="stack")


def cost_over_time_figure(costs: Mapping[datetime, Decimal], currency: str) -> go.Figure:
    x = sorted(costs)
    figure = go.Figure(
        go.Bar(
            name="Cost",
            x=x,
            y=_floats([costs[moment] for moment in x]),
            marker_color=IN_USE_COLOUR,
            hovertemplate=f"%{{y:.2f}} {currency}<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": currency}})


def energy_figure(buckets: Sequence[Bucket]) -> go.Figure:
    figure = go.Figure(
        go.Bar(
            name="Energy",
            x=[b.start for b in buckets],
            y=_floats([b.energy_kwh for b in buckets]),
            marker_color=ENERGY_COLOUR,
            hovertemplate="%{y:.2f} kWh<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": "kWh"}})


def energy_by_tenant_figure(costs: Sequence[TenantCost]) -> go.Figure:
    rows = sorted(costs, key=lambda c: (-c.total.energy_kwh, c.tenant))[:MAX_BARS]
    figure = go.Figure(
        go.Bar(
            name="Energy",
            x=[c.tenant or "(no tenant)" for c in rows],
            y=_floats([c.total.energy_kwh for c in rows]),
            marker_color=ENERGY_COLOUR,
            hovertemplate="%{x}: %{y:.2f} kWh<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": "kWh"}})


def quota_figure(quotas: Sequence[FlavorQuota]) -> go.Figure:
    """Quota, allocated and pending GPU-equivalents per flavor, side by side."""
    x = [q.flavor for q in quotas]
    figure = go.Figure()
    for name, colour, values in (
        ("Quota", UNAVAILABLE_COLOUR, [q.quota for q in quotas]),
        ("Allocated", IN_USE_COLOUR, [q.allocated for q in quotas]),
        ("Pending", ENERGY_COLOUR, [q.pending for q in quotas]),
    ):
        figure.add_trace(
            go.Bar(
                name=name,
                x=x,
                y=_floats(values),
                marker_color=colour,
                hovertemplate=f"{name}: %{{y:.2f}} GPUs<extra></extra>",
            )
        )
    return _layout(figure, yaxis={"title": {"text": "GPU-equivalents"}}, barmode="group")


def reclaimed_figure(days: Sequence[tuple[object, Decimal]]) -> go.Figure:
    """GPU-hours reclaimed from idle work per day (``billing.idle.reclaimed_by_day``)."""
    figure = go.Figure(
        go.Bar(
            name="Reclaimed",
            x=[day for day, _ in days],
            y=_floats([hours for _, hours in days]),
            marker={"color": FREE_COLOUR},
            hovertemplate="%{x}: %{y:.2f} GPU-h<extra></extra>",
        )
    )
    return _layout(figure, yaxis={"title": {"text": "GPU-hours"}})
