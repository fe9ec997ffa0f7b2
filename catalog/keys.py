"""Tenants' gateway keys: made, rotated and revoked here, kept only in the tenant's namespace.

The gateway checks every request to a tenant's model endpoints against the Secret
``gateway-api-key`` of the tenant's namespace (one entry, ``<slug>: <key>``; see
``gitops.render.gateway``). The portal writes that Secret through the Kubernetes API, never
into Git, shows the key once and keeps only its digest and prefix. Tenant admins and platform
admins may rotate or revoke it; both are audited.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from catalog.models import GatewayKey
from fleet.kube import Kube, KubeError
from gitops.render.gateway import API_KEY_SECRET
from gitops.render.meta import MANAGED_BY, PORTAL, TENANT_LABEL
from portal.audit import record_audit
from tenants import access
from tenants.access import Action
from tenants.models import Tenant

KEY_PREFIX = "aif_"
VISIBLE_CHARS = 12


def _digest(key: str) -> str:
    # 256 random bits: a plain digest is enough, no password stretching.
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _require(tenant: Tenant, acting_user: Any) -> None:
    access.require(acting_user, Action.MANAGE_GATEWAY_KEY, tenant)


def do_rotate_gateway_key(tenant: Tenant, *, acting_user: Any, kube: Kube | None = None) -> str:
    """Make a new key, write it into the tenant's Secret and return it (shown once).

    One transaction: when the API server refuses the Secret (the namespace is not there yet,
    say) nothing is stored and the previous key keeps working.
    """
    _require(tenant, acting_user)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    own = kube is None
    kube = kube or Kube()
    try:
        with transaction.atomic():
            before = GatewayKey.objects.filter(tenant=tenant).first()
            GatewayKey.objects.update_or_create(
                tenant=tenant,
                defaults={
                    "prefix": key[:VISIBLE_CHARS],
                    "digest": _digest(key),
                    "created_by": acting_user,
                },
            )
            record_audit(
                actor=acting_user,
                action="gateway_key.rotate" if before else "gateway_key.create",
                target=tenant,
                tenant_slug=tenant.slug,
                diff={"prefix": [before.prefix if before else "", key[:VISIBLE_CHARS]]},
            )
            kube.write_secret(
                tenant.slug,
                API_KEY_SECRET,
                {tenant.slug: key.encode("utf-8")},
                labels={MANAGED_BY: PORTAL, TENANT_LABEL: tenant.slug},
            )
    except KubeError as exc:
        raise ValidationError(f"The key was not changed (the old one still works): {exc}") from exc
    finally:
        if own:
            kube.close()
    return key


def do_revoke_gateway_key(tenant: Tenant, *, acting_user: Any, kube: Kube | None = None) -> None:
    """Remove the key and its Secret: the gateway refuses every request until a new key."""
    _require(tenant, acting_user)
    own = kube is None
    kube = kube or Kube()
    try:
        with transaction.atomic():
            current = GatewayKey.objects.filter(tenant=tenant).first()
            if current is None:
                raise ValidationError("The tenant has no gateway key.")
            record_audit(
                actor=acting_user,
                action="gateway_key.revoke",
                target=tenant,
                tenant_slug=tenant.slug,
                diff={"prefix": [current.prefix, ""]},
            )
            current.delete()
            kube.delete_secret(tenant.slug, API_KEY_SECRET)
    except KubeError as exc:
        raise ValidationError(f"The key was not revoked (it still works): {exc}") from exc
    finally:
        if own:
            kube.close()
