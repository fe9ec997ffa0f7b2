"""CSV exports: an invoice's lines, and ledger rows of a range.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` (and some read a tab
or carriage return first) as a formula, so a workload or description a tenant named
``=HYPERLINK(...)`` would run in finance's spreadsheet. Such cells get a leading apostrophe
(OWASP, "CSV Injection"); numbers are written by the portal and left as they are.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from billing.models import Invoice, UsageHour

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def cell(value: object) -> str:
    """``value`` as a CSV cell a spreadsheet shows rather than runs."""
    text = "" if value is None else str(value)
    if isinstance(value, str) and text.startswith(FORMULA_START):
        return "'" + text
    return text


def write_csv(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow([cell(value) for value in row])
    return out.getvalue()


def safe_filename(name: str) -> str:
    """A file name with nothing but letters, digits, dots, dashes and underscores."""
    return SAFE_NAME.sub("_", name).strip("._") or "export"


INVOICE_HEADER = (
    "invoice",
    "tenant",
    "cost_centre",
    "month",
    "version",
    "status",
    "position",
    "kind",
    "description",
    "flavor",
    "gpu_model",
    "mig_profile",
    "period_start",
    "period_end",
    "quantity",
    "unit",
    "unit_price",
    "amount",
    "currency",
    "used_gpu_hours",
    "energy_kwh",
)


def invoice_csv(invoice: Invoice) -> str:
    return write_csv(
        INVOICE_HEADER,
        (
            (
                invoice.number,
                invoice.tenant_slug,
                invoice.cost_centre,
                f"{invoice.month:%Y-%m}",
                invoice.version,
                invoice.status,
                line.position,
                line.kind,
                line.description,
                line.flavor,
                line.gpu_model,
                line.mig_profile,
                line.period_start.isoformat(),
                line.period_end.isoformat(),
                line.quantity,
                line.unit,
                "" if line.unit_price is None else line.unit_price,
                line.amount,
                invoice.currency,
                line.used_gpu_hours,
                line.energy_kwh,
            )
            for line in invoice.lines.all()
        ),
    )


USAGE_HEADER = (
    "hour",
    "tenant",
    "namespace",
    "flavor",
    "gpu_model",
    "mig_profile",
    "workload",
    "source",
    "allocated_gpu_seconds",
    "used_gpu_seconds",
    "observed_seconds",
    "memory_avg_mib",
    "memory_peak_mib",
    "energy_kwh",
)


def usage_csv(slugs: Sequence[str] | None, start: datetime, end: datetime) -> str:
    """Ledger rows with ``start <= hour < end`` of the tenants ``slugs`` (None: every row)."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if slugs is not None:
        rows = rows.filter(tenant_slug__in=slugs)
    return write_csv(
        USAGE_HEADER,
        (
            (
                row.hour.isoformat(),
                row.tenant_slug,
                row.namespace,
                row.flavor,
                row.gpu_model,
                row.mig_profile,
                row.workload,
                row.source,
                row.allocated_gpu_seconds,
                row.used_gpu_seconds,
                row.observed_seconds,
                row.memory_avg_mib,
                row.memory_peak_mib,
                row.energy_kwh,
            )
            for row in rows.iterator()
        ),
    )
