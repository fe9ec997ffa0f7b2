"""A dedicated tenant's MIG opt-in: MIG slices are off for a dedicated tenant unless a platform
admin enables them for it.

The seed draws the line: split a GPU only inside one trust domain; MIG as a barrier between
hostile tenants "is still debated", and a whole GPU is the conservative choice for low trust.
So the opt-in is the platform's call (``Action.CHANGE_TRUST``, as the trust level), made with
that caveat in view, and it is held where Git is the truth of the tenant's settings: its
``tenants/<slug>/spec/tenant.json`` on main (``TenantSpec.mig_allowed``, written there only when
set, so no other tenant's file changes). Turning it on or off opens a platform change of the
tenant, reviewed and checked like any other; the catalog, the render and the rightsizing advice
read it from main once merged (``catalog.specs.mig_opt_in``,
``gitops.render.validate.mig_allowed``). Turning it off while the tenant holds MIG slices is
refused by the render: decommission them first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.specs import SpecError
from portal.audit import record_audit
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

CAVEAT = (
    "MIG splits a GPU into slices with their own memory and compute, but the slices still share "
    "one GPU, its driver and its firmware: MIG as a barrier between hostile tenants is still "
    "debated, and a whole GPU is the conservative choice for low trust. Enable it only for a "
    "dedicated tenant whose own workloads share the slices."
)
TITLE = "{verb} MIG slices for {slug}"


def require_mig_setter(user: Any, tenant: Tenant) -> None:
    """PermissionDenied unless ``user`` may turn the tenant's MIG opt-in on or off."""
    try:
        access.require(user, Action.CHANGE_TRUST, tenant)
    except PermissionDenied:
        raise PermissionDenied("Only platform admins enable MIG for a dedicated tenant.") from None


def mig_on_main(tenant: Tenant) -> bool | None:
    """The tenant's opt-in as main holds it; None when main holds no spec of it yet."""
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    return None if on_main is None else on_main.mig_allowed


def pending_change(tenant: Tenant) -> ChangeRequest | None:
    """The open change that turns the tenant's opt-in on or off, if any."""
    titles = [TITLE.format(verb=verb, slug=tenant.slug) for verb in ("Enable", "Disable")]
    return ChangeRequest.objects.filter(
        status=ChangeRequest.Status.OPEN, tenant_slug=tenant.slug, title__in=titles
    ).first()


def do_set_mig_allowed(tenant: Tenant, *, allowed: bool, acting_user: Any) -> ChangeRequest:
    """Open the change that enables (or disables) MIG slices for the dedicated ``tenant``; a
    ``ValidationError`` with the reason otherwise, and nothing written."""
    require_mig_setter(acting_user, tenant)
    verb = "Enable" if allowed else "Disable"
    with gitops.reading_main(), transaction.atomic():
        on_main = gitops.tenant_spec_on_main(tenant.slug)
        if on_main is None:
            raise ValidationError(
                f"There is no tenant {tenant.slug!r} on main yet; set MIG once it is onboarded."
            )
        if on_main.trust_level != "dedicated":
            raise ValidationError(
                f"{tenant.slug} is a {on_main.trust_level} tenant on main: it may have MIG "
                "slices anyway; the opt-in is for dedicated tenants."
            )
        if on_main.mig_allowed == allowed:
            state = "enabled" if allowed else "off"
            raise ValidationError(f"MIG is {state} for {tenant.slug} on main already.")
        if (pending := pending_change(tenant)) is not None:
            raise ValidationError(
                f"Change #{pending.pk} ({pending.title}) is still open; merge or close it first."
            )
        spec = dataclasses.replace(on_main, mig_allowed=allowed)
        try:
            changes = gitops.tenant_changes(spec, configured_fleet())
        except SpecError as exc:
            problems = [f"{key}: {message}" for key, message in sorted(exc.errors.items())]
            raise ValidationError(
                [f"{tenant.slug} cannot turn MIG off while it holds MIG slices.", *problems]
                if not allowed
                else problems
            ) from exc
        change = gitops.open_change(
            acting_user=acting_user,
            title=TITLE.format(verb=verb, slug=tenant.slug),
            changes=changes,
            kind=ChangeRequest.Kind.PLATFORM,
            tenant_slug=tenant.slug,
            scope=["settings"],
            description=(
                f"{verb} MIG slices for the dedicated tenant {tenant.slug}. {CAVEAT}"
                if allowed
                else f"MIG slices are off again for the dedicated tenant {tenant.slug}."
            ),
        )
        record_audit(
            actor=acting_user,
            action="tenant.mig_allowed",
            target=tenant,
            tenant_slug=tenant.slug,
            diff={"mig_allowed": [not allowed, allowed], "change": [None, change.pk]},
        )
    return change
