"""Building the gitops spec of a tenant from the portal's models.

This is the one place that translates what tenants asked for into the plain data the
renderers take; gitops never reads tenant models.
"""

from __future__ import annotations

from gitops.specs import TenantSpec
from tenants.models import Tenant

# A tenant's namespace budget grows with its GPU quota, in the proportions of the GPU nodes it
# runs on (an HGX H200 node: 224 cores and 2 TiB for 8 GPUs). With a flat budget a tenant's
# GPU pods were refused by its own ResourceQuota long before it used its GPUs.
CPUS_PER_GPU = 28
MEMORY_GIB_PER_GPU = 256
MIN_CPUS = 64
MIN_MEMORY_GIB = 512


def tenant_spec(tenant: Tenant) -> TenantSpec:
    """The tenant as the platform should run it now (its approved resources come later)."""
    return TenantSpec(
        slug=tenant.slug,
        display_name=tenant.display_name,
        trust_level=str(tenant.trust_level),  # type: ignore[arg-type]
        cost_centre=tenant.cost_centre,
        cpu_quota=max(MIN_CPUS, CPUS_PER_GPU * tenant.gpu_quota),
        memory_gib=max(MIN_MEMORY_GIB, MEMORY_GIB_PER_GPU * tenant.gpu_quota),
    )
