"""Who may see and change what. Every tenant-scoped view resolves its tenant here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from tenants.models import Membership, PlatformRole, Role, Tenant


def platform_roles(user: Any) -> frozenset[str]:
    """The user's platform-wide roles, read once per request object."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    cached = getattr(user, "_platform_roles", None)
    if cached is None:
        cached = frozenset(PlatformRole.objects.filter(user=user).values_list("role", flat=True))
        user._platform_roles = cached
    return cached


def is_platform_admin(user: Any) -> bool:
    return PlatformRole.Name.PLATFORM_ADMIN in platform_roles(user)


def platform_admins() -> list[Any]:
    """Everyone with the platform admin role (who hears about new requests)."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model().objects.filter(
            platform_roles__role=PlatformRole.Name.PLATFORM_ADMIN, is_active=True
        )
    )


def is_finance(user: Any) -> bool:
    return PlatformRole.Name.FINANCE in platform_roles(user)


def sees_all_tenants(user: Any) -> bool:
    return bool(platform_roles(user))


def memberships_of(user: Any) -> QuerySet[Membership]:
    """The user's own memberships, with their tenants."""
    return Membership.objects.filter(user=user).select_related("tenant")


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    """Tenants the user may look at: their own, or all of them for platform roles."""
    if not getattr(user, "is_authenticated", False):
        return Tenant.objects.none()
    if sees_all_tenants(user):
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user).distinct()


@dataclass(frozen=True)
class TenantAccess:
    """A resolved tenant and what the signed-in user may do in it."""

    tenant: Tenant
    role: str | None
    platform_admin: bool

    @property
    def can_write(self) -> bool:
        """May change the tenant's resources (members and admins, or a platform admin)."""
        return self.platform_admin or self.role in {Role.ADMIN, Role.MEMBER}

    @property
    def can_admin(self) -> bool:
        """May manage the tenant itself: members, settings, its audit log."""
        return self.platform_admin or self.role == Role.ADMIN

    def require_admin(self) -> None:
        if not self.can_admin:
            raise PermissionDenied("Only an admin of this tenant can do that.")

    def require_write(self) -> None:
        if not self.can_write:
            raise PermissionDenied("Viewers cannot change this tenant's resources.")


def may_admin_tenant(user: Any, tenant: Tenant) -> bool:
    """The rule behind ``TenantAccess.can_admin``, for services that have no request: a
    platform admin, or an admin member of the tenant."""
    if not getattr(user, "is_authenticated", False):
        return False
    if is_platform_admin(user):
        return True
    return Membership.objects.filter(user=user, tenant=tenant, role=Role.ADMIN).exists()


def get_tenant_for_user(request: HttpRequest, slug: str) -> TenantAccess:
    """Resolve ``slug`` for the signed-in user; a non-member gets 404, never a hint it exists."""
    user = request.user
    if not user.is_authenticated:
        raise Http404("No such tenant.")
    membership = (
        Membership.objects.select_related("tenant").filter(user=user, tenant__slug=slug).first()
    )
    if membership is not None:
        return TenantAccess(membership.tenant, membership.role, is_platform_admin(user))
    if sees_all_tenants(user):
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is not None:
            # Finance reads every tenant but changes none.
            return TenantAccess(tenant, None, is_platform_admin(user))
    raise Http404("No such tenant.")


def require_platform_admin(request: HttpRequest) -> None:
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins can do that.")


def platform_admin_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in, and a platform admin; anyone else gets the 404 of a page that is not there."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_platform_admin(request.user):
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return login_required(wrapped)
