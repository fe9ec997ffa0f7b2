"""/api/v1/tenants/<slug>/idle/: a tenant's idle cases, exempt and wake; outsiders 404,
viewers and read tokens may read but not act, bad input is a 400 and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import IdleCase, IdleExemption, IdleKind, IdlePolicy

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/alpha/idle/"


@pytest.fixture
def case(world: dict[str, Any]) -> IdleCase:
    policy = IdlePolicy.objects.create(
        flavor="h200", threshold_percent=Decimal(5), window_hours=2, max_exemption_days=2
    )
    return IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="alpha",
        flavor="h200",
        workload="Pod/notebook",
        kind=IdleKind.OTHER,
        policy=policy,
        state=IdleCase.State.NO_ACTION,
        utilisation_percent=Decimal("0.50"),
        gpus=Decimal(1),
        act_after=datetime.now(UTC),
    )


def test_members_read_and_exempt_outsiders_get_404(
    case: IdleCase, api: Callable[[str], Any], token: Callable[..., str]
) -> None:
    listed = api(token("vic", "read")).get(URL)
    assert listed.status_code == 200
    assert [(c["workload"], c["state"]) for c in listed.json()["results"]] == [
        ("Pod/notebook", "no_action")
    ]
    outsider = api(token("charlie"))
    for method, path in (
        ("get", URL),
        ("get", f"{URL}{case.pk}/"),
        ("post", f"{URL}{case.pk}/wake/"),
        ("post", f"{URL}{case.pk}/exempt/"),
    ):
        assert getattr(outsider, method)(path).status_code == 404
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    body = {"until": until, "reason": "kept warm for a demo"}
    viewer = api(token("vic", "request")).post(
        f"{URL}{case.pk}/exempt/", body, content_type="application/json"
    )
    assert viewer.status_code == 403
    too_long = {"until": (datetime.now(UTC) + timedelta(days=9)).isoformat(), "reason": "x"}
    refused = api(token("bob", "request")).post(
        f"{URL}{case.pk}/exempt/", too_long, content_type="application/json"
    )
    assert refused.status_code == 400 and "until" in refused.json()["errors"]
    assert not IdleExemption.objects.exists()
    done = api(token("bob", "request")).post(
        f"{URL}{case.pk}/exempt/", body, content_type="application/json"
    )
    assert done.status_code == 200, done.json()
    assert done.json()["state"] == "exempted"
    assert IdleExemption.objects.get().reason == "kept warm for a demo"
    # Nothing to wake: a case that was not acted on.
    woken = api(token("bob", "request")).post(f"{URL}{case.pk}/wake/")
    assert woken.status_code == 400
