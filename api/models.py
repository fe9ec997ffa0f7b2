"""API credentials: personal and robot tokens, the robots themselves, and every use of a token."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from api.permissions import RANK, SCOPES


class Robot(models.Model):
    """A tenant's machine account: a user of its own that never signs in to the pages
    (unusable password, no social account) and holds one membership in its tenant, as a
    member or a viewer. Every rule of ``tenants.access`` applies to it unchanged."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="robot"
    )
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="robots")
    name = models.CharField(max_length=40)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="robot_name_unique"),
        ]

    def __str__(self) -> str:
        return f"robot {self.name} of {self.tenant.slug}"


class ApiToken(models.Model):
    """A bearer token ``afp_<prefix>_<secret>``. Only the SHA-256 of the whole text is
    stored: the secret has 256 bits of entropy, so a fast hash cannot be brute-forced and a
    slow one would only cost every call. The scope is the highest one granted (scopes are
    cumulative: ``request`` includes ``read``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=8, choices=[(s, s) for s in SCOPES])
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=list(SCOPES)), name="api_token_scope_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"token {self.prefix} ({self.name})"

    def allows(self, scope: str) -> bool:
        """Whether the token's scope includes ``scope`` (read < request < admin)."""
        return scope in RANK and RANK[self.scope] >= RANK[scope]

    @property
    def scopes(self) -> list[str]:
        return [s for s in SCOPES if self.allows(s)]

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        return not self.revoked and not self.expired


class TokenUse(models.Model):
    """One call made with a token (refused ones included): append-only, never updated."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="uses")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=300)
    status = models.PositiveSmallIntegerField()
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.status}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValidationError("A token's use log is append-only.")
        super().save(*args, **kwargs)
