"""Charts of the finance pages: pure functions from computed figures to plotly figures
(``fleet.charts.figure_html`` puts them on a page)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal

import plotly.graph_objects as go

from billing.budgets import Spend
from fleet.charts import FREE_COLOUR, IN_USE_COLOUR, UNAVAILABLE_COLOUR

LAYOUT = {
    # "none" keeps plotly's default template (kilobytes of JSON) out of the page.
    "template": "none",
    "height": 320,
    "margin": {"l": 60, "r": 10, "t": 10, "b": 60},
    "legend": {"orientation": "h", "y": -0.25},
    "yaxis": {"rangemode": "tozero", "gridcolor": "#e3e6ea"},
    "font": {"family": "system-ui, sans-serif", "size": 13},
}
OVER_COLOUR = "#c92a2a"


def from_first_data(
    months: Sequence[date], by_tenant: Mapping[str, Mapping[date, Decimal]]
) -> list[date]:
    """``months`` from the first one any tenant has a cost in: the months before the ledger
    began would be drawn as empty bars. Empty months after it stay: a month without cost is
    worth seeing then."""
    costly = {month for costs in by_tenant.values() for month, amount in costs.items() if amount}
    first = next((index for index, month in enumerate(months) if month in costly), len(months))
    return list(months[first:])


def cost_trend_figure(
    months: Sequence[date], by_tenant: Mapping[str, Mapping[date, Decimal]], currency: str
) -> go.Figure:
    """GPU cost per month, one stacked bar segment per tenant."""
    labels = [f"{m:%Y-%m}" for m in months]
    figure = go.Figure()
    for tenant in sorted(by_tenant):
        figure.add_trace(
            go.Bar(
                name=tenant,
                x=labels,
                y=[float(by_tenant[tenant].get(m, Decimal(0))) for m in months],
                hovertemplate=f"{tenant}: %{{y:.2f}} {currency}<extra></extra>",
            )
        )
    figure.update_layout(**LAYOUT, barmode="stack")
    figure.update_yaxes(title_text=currency)
    return figure


def budget_figure(spends: Sequence[Spend], currency: str) -> go.Figure:
    """Per tenant with a budget: spent this month (red once over) beside the budget."""
    names = [s.tenant.slug for s in spends]
    spent = [float(s.total) for s in spends]
    budgets = [float(s.budget.monthly_amount) if s.budget else 0.0 for s in spends]
    colours = [
        OVER_COLOUR if s.budget and s.total > s.budget.monthly_amount else IN_USE_COLOUR
        for s in spends
    ]
    figure = go.Figure()
    figure.add_trace(
        go.Bar(
            name="Spent this month",
            x=names,
            y=spent,
            marker_color=colours,
            hovertemplate=f"spent %{{y:.2f}} {currency}<extra></extra>",
        )
    )
    figure.add_trace(
        go.Bar(
            name="Monthly budget",
            x=names,
            y=budgets,
            marker_color=UNAVAILABLE_COLOUR,
            marker_line_color=FREE_COLOUR,
            hovertemplate=f"budget %{{y:.2f}} {currency}<extra></extra>",
        )
    )
    figure.update_layout(**LAYOUT, barmode="group")
    figure.update_yaxes(title_text=currency)
    return figure
