"""The queue through the API: a tenant's workloads and queue summary (members only: 404 for
anyone else), and every ClusterQueue for platform admins (403 for anyone else)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from fleet import services
from fleet.models import QueueWorkload
from tests.fleet import kueue_samples as k
from tests.fleet.test_queue_views import _live

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(world: dict[str, Any]) -> dict[str, Any]:
    _live()
    services.store_cluster_queues(
        [k.cluster_queue("alpha", nominal=4, used=5, borrowed=1), k.cluster_queue("bravo")]
    )
    services.store_local_queues([k.local_queue("alpha")])
    urgent = k.workload("bravo", "job-urgent", conditions=k.ADMITTED, admitted_to="bravo")
    services.store_queue_workloads(
        [
            urgent,
            k.workload("alpha", "job-run", conditions=k.ADMITTED, admitted_to="alpha", gpus=2),
            k.workload("alpha", "job-wait", conditions=k.WAITING_FOR_QUOTA),
            k.workload(
                "alpha",
                "job-reclaimed",
                conditions=k.preempted("InCohortReclamation", urgent["metadata"]["uid"]),
            ),
        ]
    )
    QueueWorkload.objects.filter(name="job-wait").update(
        position_in_cluster_queue=0, position_in_local_queue=0
    )
    return world


def test_a_member_reads_the_tenants_workloads(
    queued: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    bob = api(token("bob", "read"))
    body = bob.get("/api/v1/tenants/alpha/workloads/").json()
    rows = {r["name"]: r for r in body["results"]}
    assert set(rows) == {"job-run", "job-wait", "job-reclaimed"}
    assert rows["job-run"]["gpus"] == [
        {"resource": "nvidia.com/gpu", "amount": "2.00", "unit": "GPU", "text": "2.00 GPU"}
    ]
    assert rows["job-wait"]["position_in_cluster_queue"] == 0
    assert rows["job-wait"]["reason"] == "WaitingForQuota"
    preemption = rows["job-reclaimed"]["preemption"]
    assert preemption["reason"] == "InCohortReclamation"
    assert "bravo" not in preemption["preemptor"]  # another tenant's workload is not named
    pending = bob.get("/api/v1/tenants/alpha/workloads/?state=pending").json()["results"]
    assert [r["name"] for r in pending] == ["job-wait"]
    bad = bob.get("/api/v1/tenants/alpha/workloads/?state=sleeping")
    assert bad.status_code == 400 and "state" in bad.json()["errors"]


def test_a_member_reads_the_queue_summary(
    queued: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    body = api(token("bob", "read")).get("/api/v1/tenants/alpha/queue/").json()
    assert body["cluster_queue"]["name"] == "alpha"
    (flavor,) = body["flavors"]
    assert flavor["borrowed"]["text"] == "1.00 GPU" and flavor["nominal"]["amount"] == "4.00"
    assert body["counts"]["pending"] == 1 and body["freshness"]["live"] is True


@pytest.mark.parametrize("path", ["workloads", "queue"])
def test_outsiders_get_404(
    queued: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str], path: str
) -> None:
    charlie = api(token("charlie", "admin"))
    assert charlie.get(f"/api/v1/tenants/alpha/{path}/").status_code == 404
    assert charlie.get(f"/api/v1/tenants/nosuch/{path}/").status_code == 404
    assert charlie.get(f"/api/v1/tenants/bravo/{path}/").status_code == 200


def test_the_fleet_queue_list_is_for_platform_admins(
    queued: dict[str, Any], api: Callable[[str], Client], token: Callable[..., str]
) -> None:
    rows = api(token("pam", "read")).get("/api/v1/fleet/queues/").json()
    assert {r["queue"]["name"]: r["tenant"] for r in rows} == {"alpha": "alpha", "bravo": "bravo"}
    assert next(r for r in rows if r["tenant"] == "alpha")["longest_wait_seconds"] > 0
    for who in ("alice", "charlie", "fiona"):
        assert api(token(who, "read")).get("/api/v1/fleet/queues/").status_code == 403


def test_the_queue_reads_are_in_the_openapi_document() -> None:
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path in (
        "/api/v1/tenants/{slug}/workloads/",
        "/api/v1/tenants/{slug}/queue/",
        "/api/v1/fleet/queues/",
    ):
        assert "get" in paths[path], path
