"""Building the gitops spec of a tenant from the portal's models.

This is the one place that translates what tenants asked for into the plain data the
renderers take; gitops never reads tenant models.
"""

from __future__ import annotations

from gitops.specs import TenantSpec
from tenants.models import Tenant


def tenant_spec(tenant: Tenant) -> TenantSpec:
    """The tenant as the platform should run it now (its approved resources come later)."""
    return TenantSpec(
        slug=tenant.slug,
        display_name=tenant.display_name,
        trust_level=tenant.trust_level,  # type: ignore[arg-type]
        cost_centre=tenant.cost_centre,
    )
