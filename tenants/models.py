"""Tenants, who belongs to them, platform roles and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import validate_email
from django.db import models
from django.utils import timezone

from tenants.names import TENANT_SLUG_MAX, validate_single_line, validate_tenant_slug


class Tenant(models.Model):
    """A team that uses the fleet: the unit of isolation, quota and billing."""

    class TrustLevel(models.TextChoices):
        # Shared: trusted teams; may get fractional GPUs (HAMi) on shared nodes.
        SHARED = "shared", "Shared"
        # Dedicated: low trust; whole GPUs or MIG slices only, never a shared GPU.
        DEDICATED = "dedicated", "Dedicated"

    slug = models.CharField(
        max_length=TENANT_SLUG_MAX,
        unique=True,
        validators=[validate_tenant_slug],
        error_messages={"unique": "A tenant with this slug already exists."},
        help_text="DNS-1123 label; becomes the tenant's namespace. Cannot be changed later.",
    )
    display_name = models.CharField(max_length=120, validators=[validate_single_line])
    trust_level = models.CharField(
        max_length=16, choices=TrustLevel.choices, default=TrustLevel.SHARED
    )
    cost_centre = models.CharField(max_length=64, blank=True, validators=[validate_single_line])
    gpu_quota = models.PositiveIntegerField(
        default=16,
        help_text="The most GPUs the tenant's shares may add up to (MIG slices and HAMi slots "
        "counted as fractions of a GPU).",
    )
    contacts = models.JSONField(
        default=list, blank=True, help_text="E-mail addresses that hear about this tenant."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(trust_level__in=["shared", "dedicated"]),
                name="tenant_trust_level_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.display_name or self.slug

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        bad = []
        for address in self.contacts or []:
            try:
                validate_email(address)
            except ValidationError:
                bad.append(str(address))
        if bad:
            raise ValidationError({"contacts": f"Not e-mail addresses: {', '.join(bad)}"})


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# What a robot (api.models.Robot) may be in its tenant: never an admin.
ROBOT_ROLES = (Role.MEMBER.value, Role.VIEWER.value)


class Source(models.TextChoices):
    # Granted in the portal by an admin.
    LOCAL = "local", "Portal"
    # Derived from the identity provider's group claim; re-synced at every sign-in.
    OIDC = "oidc", "Identity provider"


class Membership(models.Model):
    """A user's role in one tenant."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.LOCAL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member", "viewer"]),
                name="membership_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant.slug} as {self.role}"


class PlatformRole(models.Model):
    """A platform-wide role: platform admins run the fleet, finance reads every bill."""

    class Name(models.TextChoices):
        PLATFORM_ADMIN = "platform-admin", "Platform admin"
        FINANCE = "finance", "Finance"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="platform_roles"
    )
    role = models.CharField(max_length=32, choices=Name.choices)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.LOCAL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "role"], name="platform_role_unique"),
            models.CheckConstraint(
                condition=models.Q(role__in=["platform-admin", "finance"]),
                name="platform_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role}"


# How long an invitation waits for its person to sign in.
INVITATION_DAYS = 14


class Invitation(models.Model):
    """A role in a tenant offered to an e-mail address: taken up when someone signs in holding
    that address verified (``tenants.services.accept_invitations``), never by an address an
    account merely claims. Adding a person by e-mail is always an invitation, so the members
    page tells a tenant admin nothing about who has an account."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)  # lower-cased
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant__slug", "email"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "email"],
                condition=models.Q(accepted_at=None, revoked_at=None),
                name="invitation_one_open",
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member", "viewer"]),
                name="invitation_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.email} invited to {self.tenant.slug} as {self.role}"

    @property
    def pending(self) -> bool:
        return (
            self.accepted_at is None
            and self.revoked_at is None
            and self.expires_at > timezone.now()
        )
