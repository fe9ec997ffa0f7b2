"""The platform's usage dashboard (``billing:admin_dashboard``) over a year of a busy ledger,
against bare pages of the same portal.

Data: N tenants (default 500), each with two workloads that ran every hour of the last D days
(default 365): one on whole H200s, one on a MIG 1g.18gb slice or a HAMi share, so a year is
tenants x 2 x 8,760 rows (8.76 million at 500). Two prices per model (a price change inside
the year), an active GPU share per tenant (the quota panel), a platform admin signed in.

Timing: ``django.test.Client`` requests, the server side only (no network, no browser):
the dashboard page, then every URL the page asks htmx for (its ``hx-get`` attributes; for a
form, once per option of its selects, e.g. each time range), sent as htmx requests; the
baseline is the tenant list (every tenant on one page) and the jobs page. The URLs are read
from the page, so the harness follows the dashboard as it changes.

    .venv/bin/python bench/billing_dashboard.py --tenants 500 --days 365
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_billing \\
        .venv/bin/python bench/billing_dashboard.py

The PostgreSQL database must exist and is emptied by the migration of a fresh run
(``--keep`` keeps its rows for a second run and skips the load).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import p95, setup_django  # noqa: E402

WHOLE = ("h200", "NVIDIA-H200", "", 3600 * 2)  # flavor, model, profile, GPU-seconds
SECOND = (
    ("h200-mig", "NVIDIA-H200", "1g.18gb", Decimal(3600) / 7),
    ("h200-hami", "NVIDIA-H200", "", Decimal(3600) * Decimal("0.3")),
)
COLUMNS = (
    "hour",
    "tenant_slug",
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
    "util_fallback",
    "ingested_at",
)


class HxLinks(HTMLParser):
    """The ``hx-get`` URLs of a page; for a form, its selects' names and options."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.forms: list[tuple[str, dict[str, list[str]]]] = []
        self._form: tuple[str, dict[str, list[str]]] | None = None
        self._select = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form" and found.get("hx-get"):
            self._form = (found["hx-get"] or "", {})
            self.forms.append(self._form)
        elif found.get("hx-get"):
            self.urls.append(found["hx-get"] or "")
        if self._form is not None and tag == "select":
            self._select = found.get("name") or ""
            self._form[1].setdefault(self._select, [])
        if self._form is not None and tag == "option" and self._select:
            self._form[1][self._select].append(found.get("value") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = ""
        elif tag == "form":
            self._form = None

    def targets(self, page: str) -> list[str]:
        """Each URL to request: plain hx-get URLs, and a form's URL once per option."""
        out = [urljoin(page, url) for url in self.urls]
        for action, selects in self.forms:
            base = urljoin(page, action)
            for name, options in selects.items():
                out += [f"{base}?{urlencode({name: value})}" for value in options]
            if not selects:
                out.append(base)
        return list(dict.fromkeys(out))


def usage_rows(
    tenants: list[str], end: datetime, days: int, moment: Callable[[datetime], Any]
) -> Iterator[tuple[Any, ...]]:
    """Every tenant's two workloads, every hour of the ``days`` before ``end``; ``moment``
    turns a datetime into what the database driver takes."""
    now = moment(datetime.now(UTC))
    hours = [moment(end - timedelta(hours=days * 24 - n)) for n in range(days * 24)]
    for index, slug in enumerate(tenants):
        second = SECOND[index % 2]
        for flavor, model, profile, held in (WHOLE, second):
            workload = f"Job/{flavor}-{index}"
            busy = Decimal((index * 37 + len(flavor)) % 90 + 5) / 100
            # A daily cycle: the same 24 values every day.
            daily = [(held * busy * (h + 1) / 24).quantize(Decimal("0.001")) for h in range(24)]
            allocated = Decimal(held).quantize(Decimal("0.001"))
            for n, hour in enumerate(hours):
                yield (
                    hour,
                    slug,
                    slug,
                    flavor,
                    model,
                    profile,
                    workload,
                    "prometheus",
                    allocated,
                    daily[n % 24],
                    3600,
                    Decimal(30000),
                    40000,
                    Decimal("0.5"),
                    False,
                    now,
                )


def load(tenant_count: int, days: int) -> int:
    """Tenants, shares, prices, a platform admin and the ledger; returns the ledger rows."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from billing.models import GpuPrice, UsageHour
    from billing.services import rollup_days
    from catalog.models import Resource
    from tenants.models import PlatformRole, Tenant

    user = get_user_model().objects.create_user("pam", password="x")
    PlatformRole.objects.create(user=user, role=PlatformRole.Name.PLATFORM_ADMIN)
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"t{i:04d}", display_name=f"Tenant {i}") for i in range(tenant_count)]
    )
    Resource.objects.bulk_create(
        [
            Resource(
                tenant=t,
                kind="gpu-share",
                name="train",
                state="active",
                spec={"name": "train", "flavor": "h200", "kind": "whole", "count": 2},
            )
            for t in Tenant.objects.all()
        ]
    )
    today = date.today()
    GpuPrice.objects.bulk_create(
        [
            GpuPrice(
                gpu_model="NVIDIA-H200",
                amount=Decimal("3.40"),
                effective_from=today - timedelta(days=days + 30),
            ),
            GpuPrice(
                gpu_model="NVIDIA-H200",
                amount=Decimal("2.95"),
                effective_from=today - timedelta(days=days // 2),
            ),
            GpuPrice(
                gpu_model="NVIDIA-H200",
                mig_profile="1g.18gb",
                amount=Decimal("0.45"),
                effective_from=today - timedelta(days=days + 30),
            ),
        ]
    )
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    if connection.vendor == "sqlite":
        # What Django itself stores: naive UTC text.
        moment: Callable[[datetime], Any] = connection.ops.adapt_datetimefield_value
    else:
        moment = lambda value: value  # noqa: E731
    rows = usage_rows([t.slug for t in tenants], end, days, moment)
    table = UsageHour._meta.db_table
    columns = ", ".join(COLUMNS)
    written = 0
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            raw = cursor.cursor  # psycopg's own cursor, for COPY
            with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    written += 1
                    if written % 1_000_000 == 0:
                        _progress(written, started)
        else:
            marks = ", ".join(["%s"] * len(COLUMNS))
            sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"  # noqa: S608 (model names)
            batch: list[tuple[Any, ...]] = []
            for row in rows:
                batch.append(row)
                if len(batch) == 100_000:
                    cursor.executemany(sql, batch)
                    written += len(batch)
                    batch = []
                    if written % 1_000_000 == 0:
                        _progress(written, started)
            cursor.executemany(sql, batch)
            written += len(batch)
    # The daily sums the dashboards read for ranges of days, through the ingest's own rollup.
    first = (end - timedelta(days=days)).date()
    rolled = rollup_days(first + timedelta(days=i) for i in range(days + 1))
    print(
        f"# {rolled:,} daily rows ({time.perf_counter() - started:,.0f} s in all)", file=sys.stderr
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return written


def _progress(written: int, started: float) -> None:
    rate = written / (time.perf_counter() - started)
    print(f"# {written:,} rows ({rate:,.0f}/s)", file=sys.stderr, flush=True)


def measure(client: Any, url: str, runs: int, htmx: bool) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    headers = {"HX-Request": "true"} if htmx else {}
    first = client.get(url, headers=headers)
    times = []
    for _ in range(runs):
        gc.collect()
        clock = time.perf_counter()
        client.get(url, headers=headers)
        times.append((time.perf_counter() - clock) * 1000)
    with CaptureQueriesContext(connection) as queries:
        tracemalloc.start()
        client.get(url, headers=headers)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "status": first.status_code,
        "bytes": len(first.content),
        "median": statistics.median(times),
        "p95": p95(times),
        "queries": len(queries),
        "peak": peak,
        "body": first.content.decode(errors="replace"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--keep", action="store_true", help="PostgreSQL: reuse the rows of a previous run"
    )
    args = parser.parse_args()
    # Production settings but for what needs a deployment: collected static files behind a
    # manifest, and HTTPS in front.
    os.environ.setdefault("STATIC_MANIFEST", "false")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    with tempfile.TemporaryDirectory() as tmp:
        setup_django(Path(tmp))
        import logging

        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client
        from django.urls import NoReverseMatch, reverse

        from billing.models import UsageHour

        logging.disable(logging.WARNING)
        if args.keep and UsageHour.objects.exists():
            rows = UsageHour.objects.count()
            print(f"# reusing {rows:,} rows", file=sys.stderr)
            with connection.cursor() as cursor:
                # A migration may have added tables (the daily sums) since the last ANALYZE;
                # in production autovacuum would have analysed them long since.
                cursor.execute("ANALYZE")
        else:
            if connection.vendor == "postgresql":
                from django.core.management import call_command

                call_command("flush", interactive=False, verbosity=0)
            clock = time.perf_counter()
            rows = load(args.tenants, args.days)
            print(f"# {rows:,} rows loaded in {time.perf_counter() - clock:.0f} s", file=sys.stderr)
        client = Client()
        client.force_login(get_user_model().objects.get(username="pam"))
        pages = [
            ("baseline: tenant list", reverse("tenants:list"), False),
            ("baseline: jobs", reverse("job_list"), False),
        ]
        try:
            dashboard = reverse("billing:admin_dashboard")
        except NoReverseMatch:
            dashboard = ""
            print(
                "# billing:admin_dashboard is not in this branch: only the baselines are "
                "timed; run this again after the dashboard is merged.",
                file=sys.stderr,
            )
        results = []
        for name, url, htmx in pages:
            results.append((name, url, measure(client, url, args.runs, htmx)))
        if dashboard:
            page = measure(client, dashboard, args.runs, False)
            results.append(("dashboard: page", dashboard, page))
            links = HxLinks()
            links.feed(page["body"])
            for url in links.targets(dashboard):
                results.append(
                    (f"dashboard: htmx {url}", url, measure(client, url, args.runs, True))
                )
        base = next(r for n, _, r in results if n == "baseline: tenant list")["median"]
        print(
            f"\n{args.tenants} tenants, {rows:,} ledger rows ({args.days} days), "
            f"{connection.vendor}, {args.runs} timed runs each\n"
        )
        print(
            "| request | status | median ms | p95 ms | vs tenant list | queries | peak MiB | KiB |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, _, r in results:
            print(
                f"| {name} | {r['status']} | {r['median']:.0f} | {r['p95']:.0f} | "
                f"{r['median'] / base:.1f}x | {r['queries']} | {r['peak'] / 2**20:.1f} | "
                f"{r['bytes'] / 1024:.0f} |"
            )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\nmax RSS {rss:.0f} MiB; load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
