"""The planner's statistics on the ledger's key (billing/migrations/0005): on PostgreSQL
the six key columns carry an n-distinct statistic, so GROUP BY estimates are right."""

from __future__ import annotations

import pytest
from django.db import connection

# PostgreSQL statistics made by a migration, read with raw SQL (skipped on SQLite).
pytestmark = [pytest.mark.django_db, pytest.mark.db_engine]


def test_the_ledger_tables_carry_their_key_statistics() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("multivariate statistics are PostgreSQL's (the PostgreSQL run covers it)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.stxname, c.relname, s.stxkind::text FROM pg_statistic_ext s "
            "JOIN pg_class c ON c.oid = s.stxrelid ORDER BY s.stxname"
        )
        found = set(cursor.fetchall())
    assert {
        ("usage_day_line", "billing_usageday", "{d}"),
        ("usage_hour_line", "billing_usagehour", "{d}"),
        ("usage_month_line", "billing_usagemonth", "{d}"),
    } <= found
