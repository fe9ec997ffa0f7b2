"""Building the gitops spec of a tenant from the portal's models.

This is the one place that translates what tenants asked for into the plain data the
renderers take; gitops never reads tenant models.
"""

from __future__ import annotations

from typing import Any

from allauth.socialaccount.models import SocialAccount
from django.conf import settings

from gitops.specs import ClusterMember, TenantSpec
from tenants.models import Membership, Tenant

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
        members=cluster_members(tenant),
    )


def cluster_members(tenant: Tenant) -> tuple[ClusterMember, ...]:
    """The tenant's members with the identity the portal's sign-in provider gave them: the
    subject (``SocialAccount.uid`` is the ``sub`` claim) and the e-mail address the provider
    called verified. Members who never signed in through it are left out: the provider would
    give a cluster nothing to recognise them by. Two queries, however many members."""
    if not settings.OIDC_SERVER_URL:
        return ()
    memberships = list(
        Membership.objects.filter(tenant=tenant, user__is_active=True).select_related("user")
    )
    accounts = {
        account.user_id: account
        for account in SocialAccount.objects.filter(
            provider=settings.OIDC_PROVIDER_ID, user_id__in=[m.user_id for m in memberships]
        )
    }
    members = []
    for membership in memberships:
        account = accounts.get(membership.user_id)
        if account is None:
            continue
        members.append(
            ClusterMember(
                name=membership.user.get_username(),
                role=membership.role,  # type: ignore[arg-type]
                issuer=settings.OIDC_SERVER_URL,
                subject=account.uid,
                email=_verified_email(account.extra_data),
            )
        )
    return tuple(sorted(members, key=lambda m: (m.subject, m.name)))


def _verified_email(extra_data: Any) -> str:
    """The ``email`` claim of the ID token or userinfo the account was made from, when the
    provider also said ``email_verified``; "" otherwise. kube-apiserver refuses an e-mail user
    name whose token says it is not verified, so the portal binds none either."""
    if not isinstance(extra_data, dict):
        return ""
    for key in ("id_token", "userinfo"):
        claims = extra_data.get(key)
        if isinstance(claims, dict) and claims.get("email_verified") is True:
            email = claims.get("email")
            if isinstance(email, str):
                return email
    return ""
