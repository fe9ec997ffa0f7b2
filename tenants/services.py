"""Actions on tenants, memberships and roles: atomic, audited, the only writers of these models.

Each ``do_*`` takes the acting user as a keyword, validates (raising ValidationError with a
message a person can act on, changing nothing), writes, and records an AuditEvent in the same
transaction. Side effects (mail) are jobs enqueued on commit.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, models, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from gitops import services as gitops
from gitops.fleet import base_fleet, configured_fleet
from gitops.models import ChangeRequest
from gitops.render.validate import validate_tenant
from gitops.specs import FleetSpec, SpecError
from gitops.usertext import user_text
from portal.audit import record_audit
from portal.jobs import enqueue
from tenants import access
from tenants.access import Action
from tenants.groups import parse_groups
from tenants.models import (
    INVITATION_DAYS,
    ROBOT_ROLES,
    Invitation,
    Membership,
    PlatformRole,
    Role,
    Source,
    Tenant,
)
from tenants.specs import tenant_spec

logger = logging.getLogger(__name__)
User = get_user_model()

TENANT_FIELDS = ("display_name", "trust_level", "cost_centre", "contacts")


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [before.get(k), after[k]] for k in after if before.get(k) != after[k]}


def _snapshot(obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    return {f: getattr(obj, f) for f in fields}


@transaction.atomic
def do_create_tenant(
    *,
    acting_user: Any,
    slug: str,
    display_name: str,
    trust_level: str = Tenant.TrustLevel.SHARED,
    cost_centre: str = "",
    contacts: list[str] | None = None,
    admins: Iterable[Any] = (),
) -> Tenant:
    """Onboard a tenant (platform admins only) with its first admins."""
    access.require(acting_user, Action.ONBOARD)
    tenant = Tenant(
        slug=slug,
        display_name=display_name,
        trust_level=trust_level,
        cost_centre=cost_centre,
        contacts=list(contacts or []),
    )
    tenant.full_clean()  # includes the unique check on slug: a clear "already exists" error
    try:
        with transaction.atomic():
            tenant.save()
    except IntegrityError as exc:  # a concurrent onboarding of the same slug
        raise ValidationError({"slug": "A tenant with this slug already exists."}) from exc
    record_audit(
        actor=acting_user,
        action="tenant.create",
        target=tenant,
        tenant_slug=tenant.slug,
        diff={f: [None, v] for f, v in _snapshot(tenant, ("slug", *TENANT_FIELDS)).items()},
    )
    for user in admins:
        _add_member(tenant, user=user, role=Role.ADMIN, source=Source.LOCAL, actor=acting_user)
    _open_onboarding_change(tenant, acting_user)
    if tenant.contacts:
        enqueue(
            "tenants.notify_onboarded",
            title=f"Welcome mail for {tenant.slug}",
            tenant=tenant,
            created_by=acting_user,
            tenant_id=tenant.pk,
        )
    return tenant


def _open_onboarding_change(tenant: Tenant, acting_user: Any) -> None:
    """Open the pull request that creates the tenant's namespace, quotas, policies and queues.

    Inside the onboarding transaction: if the Git write fails, the tenant is not created either.
    """
    gitops.open_tenant_change(
        acting_user=acting_user,
        tenant=tenant_spec(tenant),
        fleet=configured_fleet(),
        title=f"Onboard tenant {tenant.slug}",
        kind=ChangeRequest.Kind.ONBOARDING,
        scope=["*"],
        close_action=Action.ONBOARD,
        description=(
            f"Namespace, quotas, network and admission policies, Kueue queues and Flux sync "
            f"for {user_text(tenant.display_name, single_line=True)} "
            f"({tenant.get_trust_level_display().lower()} trust)."
        ),
    )


# What tenant admins may not change (Action.CHANGE_TRUST).
PLATFORM_ONLY_FIELDS = frozenset({"trust_level", "cost_centre"})


def _spec_errors(spec: Any, fleet: FleetSpec) -> dict[str, str]:
    try:
        validate_tenant(spec, fleet)
    except SpecError as exc:
        return {k or "": str(v) for k, v in exc.errors.items()}
    return {}


# Settings that are rendered into the tenant's namespace: changing one is a change in Git.
RENDERED_FIELDS = frozenset({"display_name", "trust_level", "cost_centre"})


def do_update_tenant(tenant: Tenant, *, acting_user: Any, **changes: Any) -> Tenant:
    """Change a tenant's settings: its admins the display name and contacts, platform admins
    also the trust level and cost centre.

    What is rendered (display name, trust level, cost centre) goes through review like any
    other change: the tenant as it should then run, live resources included, is validated
    first (a tenant with HAMi shares cannot become dedicated; nothing changes), then a change
    request is opened with the saved settings.
    """
    # Main read once: the spec it renders from, the diff and the branch's start agree.
    with gitops.reading_main(), transaction.atomic():
        return _update_tenant(tenant, acting_user=acting_user, **changes)


def _update_tenant(tenant: Tenant, *, acting_user: Any, **changes: Any) -> Tenant:
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise ValidationError(f"These fields cannot be changed: {', '.join(sorted(unknown))}.")
    access.require(acting_user, Action.CHANGE_SETTINGS, tenant)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    touched = {field for field, value in changes.items() if getattr(tenant, field) != value}
    if touched & PLATFORM_ONLY_FIELDS:
        access.require(acting_user, Action.CHANGE_TRUST, tenant)
    before = _snapshot(tenant, TENANT_FIELDS)
    for field, value in changes.items():
        setattr(tenant, field, value)
    # The slug cannot change here; a tenant whose name became reserved after it was made
    # still gets its settings edited.
    tenant.full_clean(exclude=["slug"])
    diff = _diff(before, _snapshot(tenant, TENANT_FIELDS))
    if not diff:
        return tenant
    spec = None
    if set(diff) & RENDERED_FIELDS:
        desired = import_string(settings.TENANT_DESIRED_SPEC)
        fleet = configured_fleet()
        spec = desired(tenant, settings=True)
        errors = _spec_errors(spec, fleet)
        # Only what this change breaks is refused: a tenant whose name became reserved after
        # it was made keeps its settings (the renderer refuses its changes either way).
        before_errors = _spec_errors(
            desired(Tenant.objects.get(pk=tenant.pk), settings=True), fleet
        )
        introduced = {k: v for k, v in errors.items() if before_errors.get(k) != v}
        if introduced:
            problems = "; ".join(f"{k}: {v}" if k else v for k, v in introduced.items())
            raise ValidationError(
                f"{tenant.slug} cannot take these settings with what it runs now: {problems}"
            )
        if errors:
            spec = None
    tenant.save(update_fields=list(diff))
    record_audit(
        actor=acting_user,
        action="tenant.update",
        target=tenant,
        tenant_slug=tenant.slug,
        diff=diff,
    )
    if spec is not None:
        open_settings_change(tenant, spec, acting_user=acting_user, diff=diff)
    return tenant


SETTINGS_TITLE = "Update tenant {slug}: {fields}"


def open_settings_change(
    tenant: Tenant, spec: Any, *, acting_user: Any, diff: dict[str, list[Any]]
) -> ChangeRequest | None:
    """Open the change that gives main ``spec`` (the tenant with the settings it has now) after
    ``diff`` changed them, superseding an earlier settings change still open (this one holds
    its settings too); None when main already holds them or the tenant is not on main yet
    (its onboarding change carries them)."""
    if not gitops.tenant_on_main(tenant.slug):
        return None
    fleet = configured_fleet()
    fields = ", ".join(f.replace("_", " ") for f in sorted(set(diff) - {"contacts"}))
    changes_in_git = gitops.tenant_changes(spec, fleet)
    earlier = list(
        ChangeRequest.objects.filter(
            status=ChangeRequest.Status.OPEN,
            kind=ChangeRequest.Kind.TENANT,
            tenant_slug=tenant.slug,
            scope=["settings"],
        )
    )
    newer: ChangeRequest | None = None
    if changes_in_git:
        newer = gitops.open_change(
            acting_user=acting_user,
            title=SETTINGS_TITLE.format(slug=tenant.slug, fields=fields),
            scope=["settings"],
            # Closing it undoes its settings (on_change_closed): whoever may not set what
            # it carries may not close it either.
            close_action=_settings_close_action(tenant),
            changes=changes_in_git,
            kind=ChangeRequest.Kind.TENANT,
            tenant_slug=tenant.slug,
            description="Settings changed in the portal: "
            + "; ".join(f"{k.replace('_', ' ')} {v[0]!r} -> {v[1]!r}" for k, v in diff.items()),
        )
    for change in earlier:
        reason = (
            f"Superseded by #{newer.pk}, which holds these settings too."
            if newer is not None
            else "Superseded: main already holds the settings the tenant has now."
        )
        gitops.do_close(change, acting_user=None, reason=reason)
    return newer


def _settings_close_action(tenant: Tenant) -> str:
    """What one must be allowed to do to close a change that gives main ``tenant``'s settings:
    a platform admin's when it changes against main what only they set (the trust level, the
    cost centre, the namespace's size from the GPU quota; a later rename by the tenant that
    supersedes such a change carries it on), else the tenant's settings."""
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    now = tenant_spec(tenant)
    platform_only = on_main is None or any(
        getattr(on_main, field) != getattr(now, field)
        for field in ("trust_level", "cost_centre", "cpu_quota", "memory_gib")
    )
    return Action.CHANGE_TRUST if platform_only else Action.CHANGE_SETTINGS


def on_change_closed(change: ChangeRequest, acting_user: Any) -> None:
    """settings.GITOPS_ON_CLOSED: a settings change closed unmerged takes its settings back, to
    what main holds, unless another settings change of the tenant still carries them (one that
    superseded it). So the database never keeps a trust level or cost centre that main (and the
    cluster, and the bill) does not have."""
    if change.kind != ChangeRequest.Kind.TENANT or change.scope != ["settings"]:
        return
    tenant = Tenant.objects.select_for_update().filter(slug=change.tenant_slug).first()
    if tenant is None:
        return
    still_open = ChangeRequest.objects.filter(
        status=ChangeRequest.Status.OPEN,
        kind=ChangeRequest.Kind.TENANT,
        tenant_slug=tenant.slug,
        scope=["settings"],
    ).exclude(pk=change.pk)
    if still_open.exists():
        return
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    if on_main is None:
        return
    before = _snapshot(tenant, RENDERED_FIELDS)
    tenant.display_name = on_main.display_name
    tenant.trust_level = on_main.trust_level
    tenant.cost_centre = on_main.cost_centre
    diff = _diff(before, _snapshot(tenant, RENDERED_FIELDS))
    if not diff:
        return
    tenant.save(update_fields=list(diff))
    record_audit(
        actor=acting_user,
        action="tenant.revert",
        target=tenant,
        tenant_slug=tenant.slug,
        diff={**diff, "reason": [None, f"change #{change.pk} was closed unmerged"]},
    )


# --- who may use the tenant's clusters -------------------------------------------------------

ACCESS_TITLE = "Update who may use the clusters of {slug}"


def queue_cluster_access_sync(tenants: Tenant | Iterable[Tenant], acting_user: Any) -> None:
    """After the current transaction commits (one that changed the tenants' members, or merged
    a change rendered from an older membership), bring their clusters' bindings in line
    (``do_sync_cluster_access``), as a job per tenant: a membership change, a sign-in among
    them, never waits for or fails on the Git write. Nothing to do when the fleet's clusters
    trust no identity provider."""
    if base_fleet().cluster_oidc is None:
        return
    for tenant in [tenants] if isinstance(tenants, Tenant) else tenants:
        enqueue(
            "tenants.sync_cluster_access",
            title=f"Cluster access of {tenant.slug}",
            tenant=tenant,
            created_by=acting_user,
            tenant_id=tenant.pk,
        )


def do_sync_cluster_access(tenant: Tenant, *, acting_user: Any) -> ChangeRequest | None:
    """Open the change that makes the bindings in the tenant's clusters match its members now,
    closing an older one still open (this one holds everything it did); None when main matches.

    A change that only takes access away merges once its checks pass, without a review
    (``gitops.services.do_merge_revocation``); one that gives access waits for an approval.
    """
    with gitops.reading_main(), transaction.atomic():
        return _sync_cluster_access(tenant, acting_user=acting_user)


def _sync_cluster_access(tenant: Tenant, *, acting_user: Any) -> ChangeRequest | None:
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    fleet = configured_fleet()
    changes = gitops.cluster_access_changes(tenant_spec(tenant), fleet)
    title = ACCESS_TITLE.format(slug=tenant.slug)
    repo, main = gitops.repository(), gitops.main_sha()
    for existing in ChangeRequest.objects.select_for_update().filter(
        status=ChangeRequest.Status.OPEN,
        kind=ChangeRequest.Kind.TENANT,
        tenant_slug=tenant.slug,
        title=title,
    ):
        theirs = {p: repo.read_file(existing.head_sha, p) for p in existing.files_changed}
        if changes and theirs == changes and existing.base_sha == main:
            return existing  # already asks for exactly this
        # The portal closes it (this one holds everything it did): the user whose sign-in
        # started this may be the one it takes access from, who may not close it.
        gitops.do_close(existing, acting_user=None, reason="Superseded by a newer one.")
    if not changes:
        return None
    return gitops.open_change(
        acting_user=None,
        title=title,
        changes=changes,
        kind=ChangeRequest.Kind.TENANT,
        tenant_slug=tenant.slug,
        requested_by=acting_user,
        scope=["members"],
        close_action=Action.MANAGE_MEMBERS,
        close_barred=_narrowed_users(tenant),
        description=(
            f"The members of {tenant.display_name} and their roles, as bindings in each of its "
            "clusters (admin: cluster-admin, member: edit, viewer: view)."
        ),
    )


_RANK = {Role.VIEWER.value: 0, Role.MEMBER.value: 1, Role.ADMIN.value: 2}


def _narrowed_users(tenant: Tenant) -> list[int]:
    """The users whose access to the tenant's clusters main grants more of than they have now
    (gone, or a narrower role): a change that takes it away is not theirs to close."""
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    if on_main is None:
        return []
    now = {m.name: _RANK[m.role] for m in tenant_spec(tenant).members}
    names = [m.name for m in on_main.members if _RANK[m.role] > now.get(m.name, -1)]
    return sorted(User.objects.filter(username__in=names).values_list("pk", flat=True))


def robot_tenant_id(user: Any) -> int | None:
    """The tenant whose robot ``user`` is (api.models.Robot), or None for a person."""
    found = User.objects.filter(pk=user.pk).values_list("robot__tenant_id", flat=True).first()
    return int(found) if found is not None else None


def _check_robot_role(user: Any, tenant: Tenant, role: str) -> None:
    """A robot is a member or viewer of its own tenant, nothing else (its tokens act as it:
    an admin robot, or one of another tenant, would let whoever holds a token manage a tenant
    whose admins cannot see that token)."""
    home = robot_tenant_id(user)
    if home is None:
        return
    if home != tenant.pk:
        raise ValidationError(
            f"{user.username} is a robot of another tenant; a robot belongs to its own tenant only."
        )
    if role not in ROBOT_ROLES:
        raise ValidationError({"role": "A robot is a member or a viewer, never an admin."})


def _add_member(tenant: Tenant, *, user: Any, role: str, source: str, actor: Any) -> Membership:
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role '{role}'. Use admin, member or viewer."})
    _check_robot_role(user, tenant, role)
    if Membership.objects.filter(tenant=tenant, user=user).exists():
        raise ValidationError(f"{user.username} is already a member of {tenant.slug}.")
    membership = Membership.objects.create(tenant=tenant, user=user, role=role, source=source)
    record_audit(
        actor=actor,
        action="membership.create",
        target=membership,
        tenant_slug=tenant.slug,
        diff={"user": [None, user.username], "role": [None, role], "source": [None, source]},
    )
    return membership


@transaction.atomic
def do_add_member(tenant: Tenant, *, acting_user: Any, user: Any, role: str) -> Membership:
    access.require(acting_user, Action.MANAGE_MEMBERS, tenant)
    membership = _add_member(tenant, user=user, role=role, source=Source.LOCAL, actor=acting_user)
    queue_cluster_access_sync(tenant, acting_user)
    return membership


@transaction.atomic
def do_add_member_by_identifier(
    tenant: Tenant, *, acting_user: Any, identifier: str, role: str
) -> Membership | Invitation | None:
    """Add a person by username, or invite an e-mail address.

    An e-mail address is always an invitation (``do_invite``), taken up when its holder signs
    in with it verified, whether or not an account holds it now. A username adds that account
    if there is one, else returns None. Either way a tenant admin learns nothing from the
    answer about which people have accounts: the caller answers alike, and every error raised
    here is decided without looking at whether an account matches (but one: an address that
    verifies more than one account identifies nobody)."""
    access.require(acting_user, Action.MANAGE_MEMBERS, tenant)
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role '{role}'. Use admin, member or viewer."})
    identifier = identifier.strip()
    if "@" in identifier:
        return do_invite(tenant, acting_user=acting_user, email=identifier, role=role)
    user = User.objects.filter(username=identifier).first()
    if user is None:
        return None
    membership = _add_member(tenant, user=user, role=role, source=Source.LOCAL, actor=acting_user)
    queue_cluster_access_sync(tenant, acting_user)
    return membership


def verified_holders(email: str) -> list[Any]:
    """The active accounts that hold ``email`` verified: confirmed through allauth's mail, or
    vouched for by the identity provider (its ``email_verified`` claim, which allauth records
    the same way). ``User.email`` alone proves nothing: anyone can type any address there."""
    from allauth.account.models import EmailAddress

    ids = EmailAddress.objects.filter(email__iexact=email.strip(), verified=True).values("user_id")
    return list(User.objects.filter(pk__in=ids, is_active=True).order_by("pk"))


def _one_holder(email: str) -> Any | None:
    holders = verified_holders(email)
    if len(holders) > 1:
        raise ValidationError(
            f"More than one account holds {email} verified, so it identifies nobody; add the "
            "person by username."
        )
    return holders[0] if holders else None


@transaction.atomic
def do_invite(tenant: Tenant, *, acting_user: Any, email: str, role: str) -> Invitation:
    """Offer ``role`` in ``tenant`` to whoever signs in holding ``email`` verified, for
    INVITATION_DAYS. An open invitation of the same address is renewed with this role."""
    access.require(acting_user, Action.MANAGE_MEMBERS, tenant)
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role '{role}'. Use admin, member or viewer."})
    email = email.strip().lower()
    try:
        validate_email(email)
    except ValidationError as exc:
        raise ValidationError({"user": [f"{email!r} is not an e-mail address."]}) from exc
    _one_holder(email)
    now = timezone.now()
    invitation = (
        Invitation.objects.select_for_update()
        .filter(tenant=tenant, email=email, accepted_at=None, revoked_at=None)
        .first()
    )
    before = None if invitation is None else invitation.role
    if invitation is None:
        invitation = Invitation(tenant=tenant, email=email)
    invitation.role = role
    invitation.invited_by = acting_user if getattr(acting_user, "pk", None) else None
    invitation.created_at = now
    invitation.expires_at = now + timedelta(days=INVITATION_DAYS)
    invitation.save()
    record_audit(
        actor=acting_user,
        action="invitation.create" if before is None else "invitation.renew",
        target=invitation,
        tenant_slug=tenant.slug,
        diff={"email": [None, email], "role": [before, role]},
    )
    enqueue(
        "tenants.send_invitation",
        title=f"Invitation to {tenant.slug}",
        tenant=tenant,
        created_by=acting_user,
        invitation_id=invitation.pk,
    )
    return invitation


@transaction.atomic
def do_revoke_invitation(invitation: Invitation, *, acting_user: Any) -> Invitation:
    invitation = (
        Invitation.objects.select_for_update().select_related("tenant").get(pk=invitation.pk)
    )
    access.require(acting_user, Action.MANAGE_MEMBERS, invitation.tenant)
    if invitation.accepted_at is not None or invitation.revoked_at is not None:
        raise ValidationError("This invitation is no longer open.")
    invitation.revoked_at = timezone.now()
    invitation.save(update_fields=["revoked_at"])
    record_audit(
        actor=acting_user,
        action="invitation.revoke",
        target=invitation,
        tenant_slug=invitation.tenant.slug,
        diff={"email": [invitation.email, None]},
    )
    return invitation


def pending_invitations(user: Any) -> list[Invitation]:
    """Open, unexpired invitations to an address ``user`` holds verified (and holds alone)."""
    from allauth.account.models import EmailAddress

    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return []
    addresses = {
        e.lower()
        for e in EmailAddress.objects.filter(user=user, verified=True).values_list(
            "email", flat=True
        )
    }
    if not addresses or robot_tenant_id(user) is not None:
        return []
    found = Invitation.objects.filter(
        email__in=addresses, accepted_at=None, revoked_at=None, expires_at__gt=timezone.now()
    ).select_related("tenant")
    return [i for i in found if len(verified_holders(i.email)) == 1]


@transaction.atomic
def accept_invitations(user: Any) -> list[Membership]:
    """Take up every invitation ``user`` may (``pending_invitations``): at each sign-in and when
    an address is confirmed (tenants.auth). Someone already in the tenant keeps their role."""
    made: list[Membership] = []
    for invitation in pending_invitations(user):
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.accepted_at is not None or invitation.revoked_at is not None:
            continue
        invitation.accepted_at, invitation.accepted_by = timezone.now(), user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        record_audit(
            actor=user,
            action="invitation.accept",
            target=invitation,
            tenant_slug=invitation.tenant.slug,
            diff={"accepted_by": [None, user.username]},
        )
        if Membership.objects.filter(tenant=invitation.tenant, user=user).exists():
            continue
        made.append(
            _add_member(
                invitation.tenant,
                user=user,
                role=invitation.role,
                source=Source.LOCAL,
                actor=user,
            )
        )
    if made:
        queue_cluster_access_sync([m.tenant for m in made], user)
    return made


def _ensure_an_admin_remains(membership: Membership) -> None:
    # A robot is never an admin that counts: a tenant whose last admin left would be run by
    # tokens nobody in it can revoke.
    others = (
        Membership.objects.filter(tenant=membership.tenant, role=Role.ADMIN, user__robot=None)
        .exclude(pk=membership.pk)
        .exists()
    )
    if membership.role == Role.ADMIN and not others:
        raise ValidationError(
            f"{membership.user.username} is the last admin of {membership.tenant.slug}; "
            "make someone else admin first."
        )


@transaction.atomic
def do_change_member_role(membership: Membership, *, acting_user: Any, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role '{role}'. Use admin, member or viewer."})
    membership = (
        Membership.objects.select_for_update()
        .select_related("tenant", "user")
        .get(pk=membership.pk)
    )
    access.require(acting_user, Action.MANAGE_MEMBERS, membership.tenant)
    if membership.role == role:
        return membership
    _check_robot_role(membership.user, membership.tenant, role)
    if role != Role.ADMIN:
        _ensure_an_admin_remains(membership)
        if membership.role == Role.ADMIN:
            # No longer an admin: the robot tokens they made here stop working.
            _revoke_robot_tokens(membership, actor=acting_user)
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    record_audit(
        actor=acting_user,
        action="membership.update",
        target=membership,
        tenant_slug=membership.tenant.slug,
        diff={"role": [before, role]},
    )
    queue_cluster_access_sync(membership.tenant, acting_user)
    return membership


@transaction.atomic
def do_remove_member(membership: Membership, *, acting_user: Any) -> None:
    membership = (
        Membership.objects.select_for_update()
        .select_related("tenant", "user")
        .get(pk=membership.pk)
    )
    access.require(acting_user, Action.MANAGE_MEMBERS, membership.tenant)
    _ensure_an_admin_remains(membership)
    record_audit(
        actor=acting_user,
        action="membership.delete",
        target=membership,
        tenant_slug=membership.tenant.slug,
        diff={"user": [membership.user.username, None], "role": [membership.role, None]},
    )
    _revoke_robot_tokens(membership, actor=acting_user)
    membership.delete()
    queue_cluster_access_sync(membership.tenant, acting_user)


def _revoke_robot_tokens(membership: Membership, *, actor: Any) -> None:
    """The member leaves, or stops being an admin: the robot tokens they made in the tenant
    (and a robot's own, when the membership is a robot's) stop working. The tokens are the
    API's (settings.TENANT_MEMBER_LEFT names its hook: tenants may not import it)."""
    import_string(settings.TENANT_MEMBER_LEFT)(membership, actor=actor)


@transaction.atomic
def do_grant_platform_role(user: Any, *, acting_user: Any, role: str) -> PlatformRole:
    access.require(acting_user, Action.GRANT_PLATFORM_ROLE)
    if role not in PlatformRole.Name.values:
        raise ValidationError(f"Unknown platform role '{role}'.")
    if robot_tenant_id(user) is not None:
        raise ValidationError(f"{user.username} is a robot; robots hold no platform role.")
    grant, created = PlatformRole.objects.get_or_create(user=user, role=role)
    access.forget_roles(user)
    if created:
        record_audit(
            actor=acting_user,
            action="platform_role.create",
            target=grant,
            diff={"user": [None, user.username], "role": [None, role]},
        )
    return grant


@transaction.atomic
def do_sync_identity_groups(user: Any, groups: list[str], *, prefix: str = "/") -> None:
    """Make the user's identity-provider memberships and roles match ``groups`` exactly.

    Memberships granted in the portal (source=local) are left alone; those that came from the
    identity provider and are no longer in the claim are removed, so revoking a group there
    revokes access here at the next sign-in (and, through ``do_sync_cluster_access``, in the
    tenant's clusters).
    """
    grants = parse_groups(groups, prefix)
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=grants.tenant_roles)}
    for slug in set(grants.tenant_roles) - set(tenants):
        logger.info("group for unknown tenant %r ignored for %s", slug, user.username)

    current = {
        m.tenant.slug: m for m in Membership.objects.filter(user=user).select_related("tenant")
    }
    touched: list[Tenant] = []
    for slug, role in grants.tenant_roles.items():
        if slug not in tenants:
            continue
        existing = current.get(slug)
        if existing is None:
            _add_member(tenants[slug], user=user, role=role, source=Source.OIDC, actor=user)
            touched.append(tenants[slug])
        elif existing.source == Source.OIDC and existing.role != role:
            touched.append(existing.tenant)
            before = existing.role
            if before == Role.ADMIN:
                _revoke_robot_tokens(existing, actor=user)
            existing.role = role
            existing.save(update_fields=["role"])
            record_audit(
                actor=user,
                action="membership.sync",
                target=existing,
                tenant_slug=existing.tenant.slug,
                diff={"role": [before, role]},
            )
    for slug, membership in current.items():
        if membership.source == Source.OIDC and slug not in tenants:
            record_audit(
                actor=user,
                action="membership.sync_remove",
                target=membership,
                tenant_slug=membership.tenant.slug,
                diff={"user": [user.username, None], "role": [membership.role, None]},
            )
            _revoke_robot_tokens(membership, actor=user)
            membership.delete()
            touched.append(membership.tenant)
    # Every sign-in, not only a changed group: the link to the provider may be new, or the
    # e-mail address it vouches for may have changed, and the clusters must know the user as
    # the provider does now. A tenant whose bindings already match gets no change.
    kept = Tenant.objects.filter(memberships__user=user).exclude(pk__in=[t.pk for t in touched])
    queue_cluster_access_sync(itertools.chain(touched, kept), user)  # kept read if needed

    held = {r.role: r for r in PlatformRole.objects.filter(user=user)}
    for role in grants.platform_roles - set(held):
        grant = PlatformRole.objects.create(user=user, role=role, source=Source.OIDC)
        record_audit(
            actor=user, action="platform_role.sync", target=grant, diff={"role": [None, role]}
        )
    for role, grant in held.items():
        if grant.source == Source.OIDC and role not in grants.platform_roles:
            record_audit(
                actor=user,
                action="platform_role.sync_remove",
                target=grant,
                diff={"role": [role, None]},
            )
            grant.delete()
    access.forget_roles(user)


def find_user(identifier: str) -> Any:
    """A user by username, or by an e-mail address exactly one account holds verified
    (``verified_holders``); else a ValidationError naming what was not found."""
    identifier = identifier.strip()
    user = User.objects.filter(username=identifier).first()
    if user is None and "@" in identifier:
        user = _one_holder(identifier)
    if user is None:
        raise ValidationError(
            f"No user '{identifier}' exists (by username, or by an e-mail address they "
            "confirmed); they must sign in once first."
        )
    return user
