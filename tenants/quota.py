"""A tenant's GPU quota: the most GPUs its shares may add up to (MIG slices and HAMi slots
counted as fractions of a GPU). The catalog refuses a request that would take the tenant's
shares past it; only platform admins set it.

The quota also sizes the CPU and memory quota rendered into the tenant's namespace
(``tenants.specs.tenant_spec``): setting it opens the tenant's settings change, reviewed like
any other (``tenants.services.open_settings_change``), so main follows.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.module_loading import import_string

from gitops.fleet import configured_fleet
from gitops.render.resources import gpu_equivalents
from portal.audit import record_audit
from tenants import access
from tenants.access import Action
from tenants.models import Tenant
from tenants.services import open_settings_change

QUOTA_MAX = 10_000


def approved_gpus(tenant: Tenant) -> Decimal:
    """What the tenant's approved GPU shares add up to, in GPUs: those main holds (a tenant
    main holds no spec of yet: its live ones), as the catalog counts them."""
    # The catalog's view of the tenant, named in settings: tenants does not import catalog.
    desired = import_string(settings.TENANT_DESIRED_SPEC)
    spec = desired(tenant)
    fleet = configured_fleet()
    total = Decimal(0)
    for share in spec.shares:
        flavor = fleet.flavor(share.flavor)
        if flavor is not None:
            fraction = gpu_equivalents(share, flavor)
            total += Decimal(fraction.numerator) / Decimal(fraction.denominator)
    return total


def require_quota_setter(user: Any, tenant: Tenant) -> None:
    """PermissionDenied unless ``user`` may set the tenant's GPU quota: platform admins
    (``Action.CHANGE_TRUST``: what a tenant may have is not its own call, as its trust level
    is not), or an operator at the shell (None)."""
    try:
        access.require(user, Action.CHANGE_TRUST, tenant)
    except PermissionDenied:
        raise PermissionDenied("Only platform admins set a tenant's GPU quota.") from None


@transaction.atomic
def do_set_gpu_quota(tenant: Tenant, *, acting_user: Any, quota: int) -> Tenant:
    """Set the tenant's GPU quota: a whole number from 0 to ``QUOTA_MAX``, and never below what
    its approved shares already add up to (shrink or decommission shares first). Platform
    admins only; audited with the old and the new value."""
    require_quota_setter(acting_user, tenant)
    if isinstance(quota, bool) or not isinstance(quota, int) or not 0 <= quota <= QUOTA_MAX:
        raise ValidationError(
            {"gpu_quota": [f"Give a whole number of GPUs from 0 to {QUOTA_MAX}."]}
        )
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = tenant.gpu_quota
    if quota == before:
        return tenant
    held = approved_gpus(tenant)
    if quota < held:
        raise ValidationError(
            {
                "gpu_quota": [
                    f"{tenant.slug}'s approved GPU shares already add up to {held.normalize():f} "
                    "GPUs (MIG slices and HAMi slots counted as fractions): set at least that, "
                    "or shrink or decommission shares first."
                ]
            }
        )
    tenant.gpu_quota = quota
    tenant.save(update_fields=["gpu_quota"])
    record_audit(
        actor=acting_user,
        action="tenant.set_gpu_quota",
        target=tenant,
        tenant_slug=tenant.slug,
        diff={"gpu_quota": [before, quota]},
    )
    desired = import_string(settings.TENANT_DESIRED_SPEC)
    open_settings_change(
        tenant,
        desired(tenant, settings=True),
        acting_user=acting_user,
        diff={"gpu_quota": [before, quota]},
    )
    return tenant
