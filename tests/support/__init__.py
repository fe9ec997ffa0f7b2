"""The tests' toolbox: one place for what many test modules need.

- ``skips``: the skip-or-fail rule for what lives outside the project (a service, a tool, a
  folder of ``../shared``), and the short allow-list of skips a CI run may show.
- ``waiting``: waiting on a condition (never a fixed sleep), free ports.
- ``processes``: starting and stopping the real parts a test runs (gunicorn, a Celery worker).
- ``prometheus``: Debian's ``prometheus`` with a scrape configuration of the test's.
- ``oidc``: a real OpenID Connect provider (npm ``oidc-provider``) and a form-filling client.

The names most tests need are importable from ``tests.support`` itself.
"""

from __future__ import annotations

from tests.support.skips import (
    require_service,
    require_tool,
    services_required,
    shared_dir,
    skip_or_fail,
)
from tests.support.waiting import free_port, port_open, wait_for_port, wait_until

__all__ = [
    "free_port",
    "port_open",
    "require_service",
    "require_tool",
    "services_required",
    "shared_dir",
    "skip_or_fail",
    "wait_for_port",
    "wait_until",
]
