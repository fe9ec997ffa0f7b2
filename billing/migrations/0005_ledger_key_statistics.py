"""Tell PostgreSQL's planner that the ledger's six key columns go together.

The dashboards group a range's rows by tenant, namespace, workload, flavor, GPU model and
MIG profile. Without multivariate statistics the planner multiplies each column's distinct
count (36,600 groups estimated for 1,000 real ones in the benchmark), expects a hash table
too large for work_mem and sorts instead: an external merge sort, twice as slow
(docs/benchmarks.md). ``CREATE STATISTICS ... (ndistinct)`` gives it the real count
(PostgreSQL docs, "Multivariate Statistics": n-distinct counts for GROUP BY estimates).
Other databases have nothing to do.
"""

from django.db import migrations

KEY = "tenant_slug, namespace, workload, flavor, gpu_model, mig_profile"
TABLES = {
    "billing_usagehour": "usage_hour_line",
    "billing_usageday": "usage_day_line",
    "billing_usagemonth": "usage_month_line",
}


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, name in TABLES.items():
        schema_editor.execute(
            f"CREATE STATISTICS IF NOT EXISTS {name} (ndistinct) ON {KEY} FROM {table}"
        )
        schema_editor.execute(f"ANALYZE {table}")


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in TABLES.values():
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_usage_month_fleet_day")]

    operations = [migrations.RunPython(create, drop)]
