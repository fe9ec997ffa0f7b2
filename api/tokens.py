"""Writes of API credentials: tokens (one's own, or a robot's) and robots.

Each ``do_*`` is atomic, checks who may with ``tenants.access`` before writing and records an
audit row. A personal token acts as its owner; a robot token as its robot, whose tenant role
(member or viewer) bounds it like any member's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from api.models import ApiToken, Robot, TokenUse
from api.permissions import SCOPES
from gitops.render.validate import text_problem
from portal.audit import record_audit
from tenants import services as tenant_services
from tenants.access import Action, require
from tenants.models import ROBOT_ROLES, Membership, Tenant
from tenants.names import validate_dns1123_label

TOKEN_START = "afp_"
PREFIX_LENGTH = 8
MAX_DAYS = 365
USES_SHOWN = 50


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split(text: str) -> tuple[str, str] | None:
    """``afp_<prefix>_<secret>`` as (prefix, secret), or None when it is not that shape."""
    if not text.startswith(TOKEN_START):
        return None
    prefix, sep, secret = text[len(TOKEN_START) :].partition("_")
    if not sep or len(prefix) != PREFIX_LENGTH or not secret:
        return None
    return prefix, secret


def find_token(text: str) -> ApiToken | None:
    """The token whose text this is (revoked and expired ones too), or None."""
    parts = split(text)
    if parts is None:
        return None
    token = ApiToken.objects.select_related("user").filter(prefix=parts[0]).first()
    if token is None or not hmac.compare_digest(token.digest, digest_of(text)):
        return None
    return token


def _new_prefix() -> str:
    while True:
        # Lower-case letters and digits: no "_" (the separator) and no look-alike case.
        prefix = secrets.token_hex(PREFIX_LENGTH // 2)
        if not ApiToken.objects.filter(prefix=prefix).exists():
            return prefix


def _may_manage_tokens_of(acting_user: Any, owner: Any) -> Robot | None:
    """The robot ``owner`` is (None for a person). One's own tokens are one's own; a robot's
    are its tenant admins' to manage."""
    robot = Robot.objects.select_related("tenant").filter(user=owner).first()
    if robot is not None:
        require(acting_user, Action.MANAGE_MEMBERS, robot.tenant)
        return robot
    if acting_user is None or acting_user.pk != owner.pk:
        raise PermissionDenied("You can manage only your own tokens.")
    return None


def _is_robot(user: Any) -> bool:
    return user is not None and Robot.objects.filter(user=user).exists()


@transaction.atomic
def do_create_token(
    *, acting_user: Any, owner: Any, name: str, scope: str, expires_in_days: int
) -> tuple[ApiToken, str]:
    """A new token of ``owner`` (the acting user, or a robot the acting user administers);
    returns it and its text, which is shown once and never stored."""
    if _is_robot(acting_user):
        raise PermissionDenied("A robot cannot make tokens.")
    robot = _may_manage_tokens_of(acting_user, owner)
    errors: dict[str, list[str]] = {}
    name = name.strip()
    if not name or len(name) > 80 or text_problem(name):
        errors["name"] = [
            "Give the token a name of one line, at most 80 characters, without control or "
            "invisible formatting characters."
        ]
    if scope not in SCOPES:
        errors["scope"] = [f"Unknown scope {scope!r}: choose one of {', '.join(SCOPES)}."]
    if not isinstance(expires_in_days, int) or not 1 <= expires_in_days <= MAX_DAYS:
        errors["expires_in_days"] = [f"A token lives 1 to {MAX_DAYS} days."]
    if errors:
        raise ValidationError(errors)
    prefix = _new_prefix()
    text = f"{TOKEN_START}{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=owner,
        name=name,
        prefix=prefix,
        digest=digest_of(text),
        scope=scope,
        expires_at=timezone.now() + timedelta(days=expires_in_days),
        created_by=acting_user,
    )
    record_audit(
        actor=acting_user,
        action="api_token.create",
        target=token,
        tenant_slug=robot.tenant.slug if robot else "",
        diff={"owner": [None, owner.username], "scope": [None, scope], "name": [None, name]},
    )
    return token, text


@transaction.atomic
def do_revoke_token(token: ApiToken, *, acting_user: Any) -> ApiToken:
    token = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
    robot = _may_manage_tokens_of(acting_user, token.user)
    if token.revoked:
        return token
    token.revoked_at, token.revoked_by = timezone.now(), acting_user
    token.save(update_fields=["revoked_at", "revoked_by"])
    record_audit(
        actor=acting_user,
        action="api_token.revoke",
        target=token,
        tenant_slug=robot.tenant.slug if robot else "",
        diff={"revoked": [False, True]},
    )
    return token


@transaction.atomic
def do_create_robot(tenant: Tenant, *, acting_user: Any, name: str, role: str) -> Robot:
    """A robot of ``tenant`` holding ``role`` (member or viewer) there."""
    require(acting_user, Action.MANAGE_MEMBERS, tenant)
    errors: dict[str, list[str]] = {}
    try:
        # A robot's name joins its username: a plain label splits one way only.
        validate_dns1123_label(name, max_length=40)
    except ValidationError as exc:
        errors["name"] = list(exc.messages)
    if role not in ROBOT_ROLES:
        errors["role"] = ["A robot is a member or a viewer, never an admin."]
    if not errors and Robot.objects.filter(tenant=tenant, name=name).exists():
        errors["name"] = [f"{tenant.slug} already has a robot called {name!r}."]
    username = f"robot.{tenant.slug}.{name}"
    if not errors and get_user_model().objects.filter(username=username).exists():
        errors["name"] = [f"The account name {username!r} is taken."]
    if errors:
        raise ValidationError(errors)
    user = get_user_model().objects.create_user(username=username, email="")
    user.set_unusable_password()
    user.save(update_fields=["password"])
    robot = Robot.objects.create(user=user, tenant=tenant, name=name, created_by=acting_user)
    tenant_services.do_add_member(tenant, acting_user=acting_user, user=user, role=role)
    record_audit(
        actor=acting_user,
        action="robot.create",
        target=robot,
        tenant_slug=tenant.slug,
        diff={"name": [None, name], "role": [None, role]},
    )
    return robot


@transaction.atomic
def do_remove_robot(robot: Robot, *, acting_user: Any) -> None:
    """Revoke the robot's tokens, drop its membership and switch its account off."""
    robot = Robot.objects.select_related("tenant", "user").get(pk=robot.pk)
    require(acting_user, Action.MANAGE_MEMBERS, robot.tenant)
    now = timezone.now()
    robot.user.api_tokens.filter(revoked_at=None).update(revoked_at=now, revoked_by=acting_user)
    membership = Membership.objects.filter(user=robot.user, tenant=robot.tenant).first()
    if membership is not None:
        tenant_services.do_remove_member(membership, acting_user=acting_user)
    robot.user.is_active = False
    robot.user.save(update_fields=["is_active"])
    record_audit(
        actor=acting_user,
        action="robot.delete",
        target=robot,
        tenant_slug=robot.tenant.slug,
        diff={"name": [robot.name, None]},
    )
    robot.delete()


def revoke_with_member(membership: Membership, *, actor: Any) -> int:
    """settings.TENANT_MEMBER_LEFT: ``membership``'s user leaves its tenant or stops being an
    admin there. Revoke the tokens of the tenant's robots that they made, and a robot's own
    tokens when the membership is the robot's: a token never outlives the standing of whoever
    made it (a former admin would keep acting as the robot). Returns how many, with an audit
    row when any."""
    tokens = ApiToken.objects.filter(revoked_at=None).filter(
        Q(user__robot__tenant=membership.tenant, created_by=membership.user)
        | Q(user=membership.user, user__robot__tenant=membership.tenant)
    )
    pks = list(tokens.values_list("pk", flat=True))
    if not pks:
        return 0
    ApiToken.objects.filter(pk__in=pks).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None
    )
    record_audit(
        actor=actor,
        action="api_token.revoke_with_member",
        target=membership,
        tenant_slug=membership.tenant.slug,
        diff={"tokens": [len(pks), 0], "user": [membership.user.username, None]},
    )
    return len(pks)


def record_use(token: ApiToken, *, method: str, path: str, status: int, ip: str | None) -> None:
    """Log one call with ``token`` and stamp its last use (the rows are never updated)."""
    now = timezone.now()
    TokenUse.objects.create(
        token=token, at=now, method=method[:8], path=path[:300], status=status, ip=ip
    )
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_ip=ip)


def recent_uses(token: ApiToken) -> list[TokenUse]:
    return list(token.uses.all()[:USES_SHOWN])
