"""The catalog's what-if knows reserved nodes: their GPUs leave the shared pool, and a request
that would need them is refused with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from catalog import services
from fleet.models import NodeReservation

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
