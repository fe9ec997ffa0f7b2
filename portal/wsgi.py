"""WSGI entry point (gunicorn portal.wsgi)."""

from __future__ import annotations

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


def settle() -> None:
    """Import every view now, then move what start-up made (modules, URL patterns,
    templates' code) out of the garbage collector's sight (``gc.freeze``). Otherwise each
    full collection walks those long-lived objects again: on a busy page (the usage dashboard
    folds thousands of priced lines) that cost half the request's time in the benchmark
    (docs/benchmarks.md). With gunicorn's fork model the frozen objects also stay shared
    between workers instead of being copied by the collector's writes."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every URLconf and view module
    gc.collect()
    gc.freeze()


application = get_wsgi_application()
settle()
