"""What the benchmarks that need the portal's models share: a throwaway, migrated database."""

from __future__ import annotations

import base64
import os
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The settings refuse to start without a key unless DEBUG is on (portal/settings.py), and DEBUG
# would record every query with its timing, inside the numbers. A throwaway run gets a
# throwaway key instead, inherited by the processes a benchmark starts (the simulator).
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
# Likewise the key that encrypts stored secrets (a Fernet key: 32 random bytes, url-safe base64).
os.environ.setdefault(
    "PORTAL_ENCRYPTION_KEYS", base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
)


def setup_django(tmp: Path) -> None:
    """Django on a migrated SQLite database in ``tmp`` (``BENCH_DATABASE_URL`` to use another),
    with the simulator off: a benchmark starts what it measures itself."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", f"sqlite:///{tmp}/b.db")
    os.environ["PORTAL_VAR_DIR"] = str(tmp)
    os.environ["FLEET_SIMULATOR"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]
