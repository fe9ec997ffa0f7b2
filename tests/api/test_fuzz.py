"""A schemathesis run over every operation of the OpenAPI document, as a platform admin with
an admin-scoped token on seeded data: no 5xx, and no status the document does not list."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import status_code_conformance

from api.models import TokenUse
from catalog.models import ResourceRequest
from gitops.models import ChangeRequest

EXAMPLES = 10


@contextmanager
def kept_connection() -> Iterator[None]:
    """Keep the portal's WSGI app from closing the test's database connection after each
    call, as Django's test client does (which connects the signals again after its calls)."""
    signals = (request_started, request_finished)
    for signal in signals:
        signal.disconnect(close_old_connections)
    try:
        yield
    finally:
        for signal in signals:
            signal.connect(close_old_connections)


@pytest.mark.django_db
def test_it_survives_a_fuzz_run_of_every_operation(
    waiting: ResourceRequest, onboarded: dict[str, Any], token: Callable[..., str]
) -> None:
    text = token("pam", "admin")
    auth = {"Authorization": f"Bearer {text}"}
    document = Client(HTTP_AUTHORIZATION=auth["Authorization"]).get("/api/v1/schema/?format=json")
    assert document.status_code == 200
    schema = schemathesis.openapi.from_dict(document.json())
    schema.app = get_wsgi_application()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    change = ChangeRequest.objects.filter(tenant_slug="alpha").first()
    assert change is not None
    real = {"tenant": "alpha", "slug": "alpha", "username": "vic"}
    failures: list[str] = []
    for operation in operations:
        names = {p.name for p in operation.path_parameters}
        fixed = {k: v for k, v in real.items() if k in names}
        if "id" in names:
            fixed["id"] = change.pk if operation.path.startswith("/api/v1/changes/") else waiting.pk
        strategies = [
            operation.as_strategy(),
            operation.as_strategy(path_parameters=fixed),
            operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed),
        ]
        for strategy in strategies:

            @given(case=strategy)
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def run(case: Any) -> None:
                case.call_and_validate(
                    headers=auth, checks=[not_a_server_error, status_code_conformance]
                )

            try:
                with kept_connection():
                    run()
            except Exception as exc:  # collect every operation's failure, not just the first
                failures.append(f"{operation.method.upper()} {operation.path}: {exc}"[:3000])
    assert not failures, "\n\n".join(failures)
    # The run reached the views: every call with the token is in its use log.
    statuses = set(TokenUse.objects.values_list("status", flat=True))
    assert TokenUse.objects.count() > len(operations) * 2
    assert {200, 400} <= statuses, statuses
