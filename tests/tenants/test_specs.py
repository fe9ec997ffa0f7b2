"""A tenant's spec: the namespace budget follows its GPU quota."""

from __future__ import annotations

from tenants.models import Tenant
from tenants.specs import tenant_spec


def test_the_namespace_budget_grows_with_the_gpu_quota() -> None:
    # 16 GPUs are two HGX nodes' worth: their cores and memory, not a flat 64 CPUs, which the
    # demo's own training pods (96 cores each) exceeded at the namespace quota.
    spec = tenant_spec(Tenant(slug="big", gpu_quota=16))
    assert (spec.cpu_quota, spec.memory_gib) == (448, 4096)
    small = tenant_spec(Tenant(slug="small", gpu_quota=1))
    assert (small.cpu_quota, small.memory_gib) == (64, 512)
