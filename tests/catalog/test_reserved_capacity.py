"""The catalog's what-if knows reserved nodes: their GPUs leave the shared pool, and a request
that would need them is refused with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from catalog import services
from fleet.models import Node, NodeReservation

pytestmark = pytest.mark.django_db
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}


def _reserve(slug: str, nodes: int) -> None:
    """Rows as ``fleet.reservations.follow`` leaves them once main holds the nodes."""
    for number in range(1, nodes + 1):
        NodeReservation.objects.create(
            node_name=f"h200-{number:02d}",
            tenant_slug=slug,
            flavor="h200",
            gpu_product="NVIDIA-H200",
            gpus=8,
            accepted_at=timezone.now(),
        )


def test_reserved_gpus_leave_the_shared_pool(onboarded: dict[str, Any]) -> None:
    alpha = onboarded["alpha"]
    alpha.gpu_quota = 64
    alpha.save()
    _reserve("bravo", 6)
    check = services.check_request(alpha, "gpu-share", "train", {**SHARE, "count": 16})
    assert check.ok, check.errors
    (row,) = [r for r in check.capacity if r.flavor == "h200"]
    assert (row.reserved, row.reserved_for, row.after) == (48, ("bravo",), 64)
    refused = services.check_request(alpha, "gpu-share", "train", {**SHARE, "count": 17})
    assert refused.errors == {
        "count": "The shared h200 pool has 16 GPUs left: 48 of its 64 are on nodes reserved "
        "for bravo, which no other tenant may use."
    }


def test_the_catalog_says_what_each_trust_level_allows_and_where_the_work_runs(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _reserve("bravo", 2)
    Node.objects.create(name="h200-01", flavor="h200", gpu_count=8, health="healthy", clique="c1")
    dedicated = login("charlie").get(reverse("catalog:home", kwargs={"tenant": "bravo"}))
    text = dedicated.content.decode()
    assert "MIG as a barrier between hostile tenants is still debated" in text
    assert "Where your work runs: your own nodes" in text
    times = "\N{MULTIPLICATION SIGN}"
    assert f"<td>h200-01</td><td>8 {times} NVIDIA-H200</td><td>Healthy</td><td>c1</td>" in text
    assert f'<td>h200-02</td><td>8 {times} NVIDIA-H200</td><td><span class="muted">not seen' in text
    shared = login("alice").get(reverse("catalog:home", kwargs={"tenant": "alpha"}))
    assert "is a shared tenant: it may also get fractions of a GPU" in shared.content.decode()
    assert "your own nodes" not in shared.content.decode()
    # Another tenant's nodes are not shown to a non-member: the page is a 404.
    assert login("alice").get(reverse("catalog:home", kwargs={"tenant": "bravo"})).status_code == (
        404
    )
