"""Tenants for the renderer tests: one with every kind of resource, one dedicated tenant.

``rich_tenant`` has a share of each kind on the demo fleet, a vCluster, and endpoints on
whole, HAMi, MIG and DRA shares, with every scaling mode. Tests change one field with
``dataclasses.replace`` to break it.
"""

from __future__ import annotations

from gitops.render import (
    render_cluster_bootstrap,
    render_infrastructure,
    render_tenant_tree,
    render_tenants_index,
)
from gitops.specs import (
    EndpointSpec,
    FleetSpec,
    GpuShare,
    NodeReservation,
    TenantClusterSpec,
    TenantSpec,
)

TRAIN = GpuShare(
    name="train",
    flavor="h200",
    kind="whole",
    count=16,
    borrowing_limit=8,
    lending_limit=4,
    until="2026-12-31",
)
SLICES = GpuShare(name="slices", flavor="h200-mig", kind="mig", count=8, mig_profile="1g.18gb")
FRACTIONS = GpuShare(
    name="fractions",
    flavor="h200-hami",
    kind="hami",
    count=10,
    gpumem_mib=20_000,
    gpucores_percent=30,
)
CLAIMS = GpuShare(name="claims", flavor="h200-dra", kind="dra", count=8)

LLAMA = EndpointSpec(
    name="llama",
    model_uri="hf://meta-llama/Llama-3.1-8B-Instruct",
    share="train",
    served_model_name="llama-3.1-8b",
    gpus_per_replica=2,
    args=("--max-model-len=8192",),
    min_replicas=1,
    max_replicas=4,
    scale_metric="concurrency",
    scale_target=8,
)
SMALL = EndpointSpec(
    name="small",
    model_uri="s3://models/qwen2.5-7b",
    share="fractions",
    min_replicas=1,
    max_replicas=3,
    scale_metric="cpu",
    scale_target=70,
)
PRIVATE = EndpointSpec(
    name="private", model_uri="pvc://models/mistral-7b", share="slices", expose=False
)
CLAIMED = EndpointSpec(
    name="claimed", model_uri="hf://org/model", share="claims", gpus_per_replica=2
)
DEV = TenantClusterSpec(name="dev", node_pools=("h200",), gpu_quota=8, size="medium")


def rich_tenant() -> TenantSpec:
    return TenantSpec(
        slug="alpha",
        display_name="Alpha research: yes",
        cost_centre="CC-4711",
        shares=(TRAIN, SLICES, FRACTIONS, CLAIMS),
        clusters=(DEV,),
        endpoints=(LLAMA, SMALL, PRIVATE, CLAIMED),
    )


def dedicated_tenant() -> TenantSpec:
    return TenantSpec(
        slug="bravo",
        display_name="Bravo production",
        trust_level="dedicated",
        shares=(
            GpuShare(name="serving", flavor="h200", kind="whole", count=8),
            GpuShare(name="mig", flavor="h200-mig", kind="mig", count=4, mig_profile="3g.71gb"),
        ),
        # A platform admin enabled MIG for it (tenants.mig).
        mig_allowed=True,
        endpoints=(EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="serving"),),
    )


def reserved_tenant() -> TenantSpec:
    """A dedicated tenant with two whole H200 nodes of its own, a share of the shared pool, a
    cluster on the h200 pool and an endpoint."""
    return TenantSpec(
        slug="vault",
        display_name="Vault risk",
        trust_level="dedicated",
        shares=(GpuShare(name="serving", flavor="h200", kind="whole", count=4),),
        reservations=(
            NodeReservation(name="h200-07", flavor="h200", gpus=8),
            NodeReservation(name="h200-08", flavor="h200", gpus=8),
        ),
        clusters=(TenantClusterSpec(name="risk", node_pools=("h200",), gpu_quota=16),),
        endpoints=(EndpointSpec(name="chat", model_uri="hf://org/chat-model", share="serving"),),
    )


def rendered_fleet(fleet: FleetSpec, *tenants: TenantSpec) -> dict[str, bytes]:
    """The repository as the portal writes it, one tenant directory at a time (as every
    change request renders it), so nothing checks the tenants against each other first."""
    files = render_cluster_bootstrap(fleet)
    files.update(render_infrastructure(fleet))
    files.update(render_tenants_index(tenant.slug for tenant in tenants))
    for tenant in tenants:
        files.update(render_tenant_tree(tenant, fleet))
    return files
