"""Who may do what: the one home of the portal's access rules.

Every rule is a row of ``RULES``: which tenant roles and which platform roles may take an
action, and which tenant roles may take it on something of their own (a request they asked
for, a change they opened). Plain functions answer from a user and a tenant, with no
HttpRequest, so views, services, jobs and the API ask the same question the same way; every
``do_*`` service calls ``require`` itself, so a view that forgets to check cannot open a hole
(NetBox's ``restrict(user, action)`` is the model). Object rules that are not about roles
(four eyes: nobody decides their own request) stay with the service that owns the object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse

from tenants.models import Membership, PlatformRole, Role, Tenant


class Action(StrEnum):
    """What a user may be allowed to do, per tenant or platform-wide."""

    VIEW = "view"  # see a tenant, its resources, requests and changes
    REQUEST = "request"  # ask for resources, edit and submit requests
    CANCEL_REQUEST = "cancel_request"  # withdraw a request (owner: the requester)
    DECIDE = "decide"  # approve, reject or send back a request
    REVIEW = "review"  # review a change (pull request)
    MERGE = "merge"  # merge a change, update its branch
    CLOSE = "close"  # close a change (owner: its author or requester)
    CHANGE_SETTINGS = "change_settings"  # display name, contacts
    CHANGE_TRUST = "change_trust"  # trust level and cost centre
    MANAGE_MEMBERS = "manage_members"  # add, remove, change roles
    KUBECONFIG = "kubeconfig"  # download one's own kubeconfig of a tenant cluster
    MANAGE_GATEWAY_KEY = "manage_gateway_key"  # make, rotate, revoke the gateway key
    VIEW_AUDIT = "view_audit"  # the tenant's audit log and jobs
    VIEW_COST = "view_cost"  # usage and cost of a tenant
    ONBOARD = "onboard"  # create tenants
    OPERATE_FLEET = "operate_fleet"  # nodes, inventory, source tokens, every job
    GRANT_PLATFORM_ROLE = "grant_platform_role"
    VIEW_BILLING = "view_billing"  # invoices and cost of every tenant
    MANAGE_PRICES = "manage_prices"  # add a GPU price from a future date, withdraw one
    MANAGE_INVOICES = "manage_invoices"  # draft, issue and correct invoices
    SET_BUDGET = "set_budget"  # a tenant's monthly budget and its alert thresholds
    MANAGE_WEBHOOKS = "manage_webhooks"  # add, disable, remove webhooks; rotate, redeliver
    RUN_JOB = "run_job"  # submit a batch job (fine-tuning, evaluation, batch inference)
    CANCEL_JOB = "cancel_job"  # cancel a batch job (owner: who submitted it)
    READ_JOB_LOGS = "read_job_logs"  # the last lines of a batch job's pods
    MANAGE_JOB_TEMPLATES = "manage_job_templates"  # the platform's batch job templates
    REMEDIATE = "remediate"  # return a remediated node, resume a paused pool, set the policy
    MANAGE_IDLE_POLICIES = "manage_idle_policies"  # idle thresholds, windows, grace, actions
    EXEMPT_IDLE = "exempt_idle"  # exempt a workload from idle reclaim, within the policy
    # wake what idle reclaim stopped; wake (or put to sleep) an endpoint or tenant cluster
    WAKE = "wake"


@dataclass(frozen=True)
class Rule:
    """Who may take an action: holders of these tenant roles in the tenant, of these platform
    roles anywhere, and of these tenant roles on what they own."""

    tenant: frozenset[str] = frozenset()
    platform: frozenset[str] = frozenset()
    owner: frozenset[str] = frozenset()


_ADMIN, _MEMBER, _VIEWER = Role.ADMIN.value, Role.MEMBER.value, Role.VIEWER.value
_PA, _FIN = PlatformRole.Name.PLATFORM_ADMIN.value, PlatformRole.Name.FINANCE.value
_ALL_TENANT_ROLES = frozenset({_ADMIN, _MEMBER, _VIEWER})
_WRITERS = frozenset({_ADMIN, _MEMBER})
_ADMINS = frozenset({_ADMIN})
_PLATFORM_ADMIN = frozenset({_PA})

RULES: dict[Action, Rule] = {
    Action.VIEW: Rule(_ALL_TENANT_ROLES, frozenset({_PA, _FIN})),
    Action.REQUEST: Rule(_WRITERS, _PLATFORM_ADMIN),
    # A requester demoted to viewer has lost the write role, and with it this.
    Action.CANCEL_REQUEST: Rule(_ADMINS, _PLATFORM_ADMIN, owner=_WRITERS),
    Action.DECIDE: Rule(platform=_PLATFORM_ADMIN),
    Action.REVIEW: Rule(platform=_PLATFORM_ADMIN),
    Action.MERGE: Rule(platform=_PLATFORM_ADMIN),
    # Closing the pull request of an approved request fails the request: the write role.
    Action.CLOSE: Rule(_ADMINS, _PLATFORM_ADMIN, owner=_WRITERS),
    Action.CHANGE_SETTINGS: Rule(_ADMINS, _PLATFORM_ADMIN),
    # Trust decides whether a tenant may share GPUs with others (HAMi); the cost centre
    # whom it is billed to. Neither is the tenant's own call.
    Action.CHANGE_TRUST: Rule(platform=_PLATFORM_ADMIN),
    Action.MANAGE_MEMBERS: Rule(_ADMINS, _PLATFORM_ADMIN),
    # A member's kubeconfig holds no credential (kubelogin signs the person in) and the
    # cluster grants each the rights of their role; platform admins use the admin one.
    Action.KUBECONFIG: Rule(_ALL_TENANT_ROLES),
    Action.MANAGE_GATEWAY_KEY: Rule(_ADMINS, _PLATFORM_ADMIN),
    Action.VIEW_AUDIT: Rule(_ADMINS, _PLATFORM_ADMIN),
    Action.VIEW_COST: Rule(_ALL_TENANT_ROLES, frozenset({_PA, _FIN})),
    Action.ONBOARD: Rule(platform=_PLATFORM_ADMIN),
    Action.OPERATE_FLEET: Rule(platform=_PLATFORM_ADMIN),
    Action.GRANT_PLATFORM_ROLE: Rule(platform=_PLATFORM_ADMIN),
    Action.VIEW_BILLING: Rule(platform=frozenset({_PA, _FIN})),
    Action.MANAGE_PRICES: Rule(platform=frozenset({_PA, _FIN})),
    Action.MANAGE_INVOICES: Rule(platform=frozenset({_PA, _FIN})),
    # A budget only raises alerts, it stops nothing: a tenant's admins may set their own
    # alarm, and finance may set one for them.
    Action.SET_BUDGET: Rule(_ADMINS, frozenset({_PA, _FIN})),
    # A webhook sends the tenant's request events to a URL of its choice, signed with a secret
    # only the admins see; every reader of the tenant may read the delivery log.
    Action.MANAGE_WEBHOOKS: Rule(_ADMINS, _PLATFORM_ADMIN),
    # A job is submitted to the cluster as the member (gitops.render.rbac), whose tenant role
    # there is the one held here: platform admins are nobody in the tenant's namespace, and
    # what they run themselves they run with kubectl.
    Action.RUN_JOB: Rule(_WRITERS),
    Action.CANCEL_JOB: Rule(_ADMINS, owner=_WRITERS),
    # Logs may hold the tenant's data: its members read them (viewers too), nobody else.
    Action.READ_JOB_LOGS: Rule(_ALL_TENANT_ROLES),
    Action.MANAGE_JOB_TEMPLATES: Rule(platform=_PLATFORM_ADMIN),
    # The remediation loop cordons and drains by itself; handing a node back to the tenants,
    # lifting the blast-radius guard and changing its policy are the platform's call.
    Action.REMEDIATE: Rule(platform=_PLATFORM_ADMIN),
    # Idle reclaim: the platform sets the policies; the tenant's writers may wake or exempt
    # what they own (within the policy's limits), as may a platform admin.
    Action.MANAGE_IDLE_POLICIES: Rule(platform=_PLATFORM_ADMIN),
    Action.EXEMPT_IDLE: Rule(_WRITERS, _PLATFORM_ADMIN),
    # Waking puts back what the tenant already had (its share holds room for it): the write
    # role, as for a request, without an approval (catalog.idle_actions).
    Action.WAKE: Rule(_WRITERS, _PLATFORM_ADMIN),
}

DENIED: dict[Action, str] = {
    Action.VIEW: "You are not a member of this tenant.",
    Action.REQUEST: "Viewers cannot ask for resources; ask a member or an admin.",
    Action.CANCEL_REQUEST: "Only who asked (still a member), a tenant admin or a platform admin "
    "can cancel a request.",
    Action.DECIDE: "Only a platform admin can decide on requests.",
    Action.REVIEW: "Only platform admins review changes.",
    Action.MERGE: "Only platform admins merge changes.",
    Action.CLOSE: "Only its author or requester (still a member), a tenant admin or a platform "
    "admin can close this change.",
    Action.CHANGE_SETTINGS: "Only an admin of this tenant can change its settings.",
    Action.CHANGE_TRUST: "Only platform admins can change the trust level or cost centre.",
    Action.MANAGE_MEMBERS: "Only an admin of this tenant can manage its members.",
    Action.KUBECONFIG: "Only members of the tenant get a kubeconfig: it signs them in as "
    "themselves (platform admins read the cluster's admin kubeconfig with kubectl).",
    Action.MANAGE_GATEWAY_KEY: "Only an admin of this tenant can manage its gateway key.",
    Action.VIEW_AUDIT: "Only an admin of this tenant can read its audit log.",
    Action.VIEW_COST: "You are not a member of this tenant.",
    Action.ONBOARD: "Only platform admins onboard tenants.",
    Action.OPERATE_FLEET: "Only platform admins operate the fleet.",
    Action.GRANT_PLATFORM_ROLE: "Only platform admins grant platform roles.",
    Action.VIEW_BILLING: "Only finance and platform admins see every tenant's cost.",
    Action.MANAGE_PRICES: "Only finance and platform admins set GPU prices.",
    Action.MANAGE_INVOICES: "Only finance and platform admins draft, issue and correct invoices.",
    Action.SET_BUDGET: "Only an admin of this tenant, finance or a platform admin can set its "
    "budget.",
    Action.MANAGE_WEBHOOKS: "Only an admin of this tenant can manage its webhooks.",
    Action.RUN_JOB: "Only the tenant's members and admins run jobs; viewers cannot.",
    Action.CANCEL_JOB: "Only who submitted the job (still a member) or a tenant admin can "
    "cancel it.",
    Action.READ_JOB_LOGS: "Only the tenant's members read its jobs' logs.",
    Action.MANAGE_JOB_TEMPLATES: "Only platform admins manage job templates.",
    Action.REMEDIATE: "Only platform admins return remediated nodes, resume the remediation "
    "loop or change its policy.",
    Action.MANAGE_IDLE_POLICIES: "Only platform admins set idle policies.",
    Action.EXEMPT_IDLE: "Only the tenant's members and admins exempt a workload from idle "
    "reclaim; viewers cannot.",
    Action.WAKE: "Viewers cannot wake or put to sleep (what idle reclaim stopped included); "
    "ask a member or an admin.",
}


def allowed(
    action: Action, *, platform: Collection[str], role: str | None, owner: bool = False
) -> bool:
    """The rule itself, from roles already known: no query."""
    rule = RULES[action]
    if any(p in rule.platform for p in platform):
        return True
    if role is None:
        return False
    return role in rule.tenant or (owner and role in rule.owner)


def _authenticated(user: Any) -> bool:
    return user is not None and bool(getattr(user, "is_authenticated", False))


def platform_roles(user: Any) -> frozenset[str]:
    """The user's platform-wide roles, read once per user object."""
    if not _authenticated(user):
        return frozenset()
    cached = getattr(user, "_platform_roles", None)
    if cached is None:
        cached = frozenset(PlatformRole.objects.filter(user=user).values_list("role", flat=True))
        user._platform_roles = cached
    return cached


def forget_roles(user: Any) -> None:
    """Drop the cached platform roles after they changed."""
    if user is not None:
        user.__dict__.pop("_platform_roles", None)


# A robot acts in its own tenant only: a membership of it anywhere else, however it came about
# (added before that was refused, or written into the database by hand), grants nothing.
COUNTED = Q(user__robot__isnull=True) | Q(user__robot__tenant=F("tenant"))


def counted_memberships() -> QuerySet[Membership]:
    """Memberships that grant their role: a person's, and a robot's in its own tenant."""
    return Membership.objects.filter(COUNTED)


def active_memberships() -> QuerySet[Membership]:
    """Who is a tenant's member today: a counted membership of an active account. Every page
    that counts or lists a tenant's members reads these, so the counts agree."""
    return counted_memberships().filter(user__is_active=True)


def with_member_counts(tenants: QuerySet[Tenant]) -> QuerySet[Tenant]:
    """``tenants``, each with ``member_count``: its active memberships."""
    counted = (
        active_memberships()
        .filter(tenant=OuterRef("pk"))
        .order_by()
        .values("tenant")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return tenants.annotate(member_count=Coalesce(Subquery(counted), 0))


def role_in(user: Any, tenant: Tenant | str) -> str | None:
    """The user's role in ``tenant`` (a Tenant or its slug), or None. Read every time: a
    demotion counts at once."""
    if not _authenticated(user):
        return None
    memberships = counted_memberships().filter(user=user)
    if isinstance(tenant, Tenant):
        memberships = memberships.filter(tenant=tenant)
    else:
        memberships = memberships.filter(tenant__slug=tenant)
    return memberships.values_list("role", flat=True).first()


def may(
    user: Any,
    action: Action,
    tenant: Tenant | str | None = None,
    *,
    owners: Collection[int | None] = (),
) -> bool:
    """May ``user`` take ``action`` (in ``tenant``; on something owned by ``owners``)?"""
    if not _authenticated(user):
        return False
    held = platform_roles(user)
    if allowed(action, platform=held, role=None):
        return True
    if tenant is None or tenant == "":
        return False
    role = role_in(user, tenant)
    return allowed(action, platform=held, role=role, owner=user.pk in owners)


def require(
    user: Any,
    action: Action,
    tenant: Tenant | str | None = None,
    *,
    owners: Collection[int | None] = (),
) -> None:
    """Raise PermissionDenied, with a sentence saying who may, unless ``may``.

    ``user`` None is the portal itself or an operator at a management command (shell access
    to the portal is platform access); a view always passes the signed-in user, an anonymous
    one included, and that is refused.
    """
    if user is None:
        return
    if not may(user, action, tenant, owners=owners):
        raise PermissionDenied(DENIED[action])


def tenants_where(user: Any, action: Action) -> QuerySet[Tenant]:
    """The tenants in which ``user`` may take ``action``: a queryset to build on."""
    if not _authenticated(user):
        return Tenant.objects.none()
    if allowed(action, platform=platform_roles(user), role=None):
        return Tenant.objects.all()
    roles = RULES[action].tenant
    held = counted_memberships().filter(user=user, role__in=roles).values("tenant_id")
    return Tenant.objects.filter(pk__in=held)


def users_who_may(tenant: Tenant, action: Action) -> QuerySet[Any]:
    """Members of ``tenant`` whose tenant role allows ``action`` (who to tell, say)."""
    from django.contrib.auth import get_user_model

    roles = RULES[action].tenant
    held = counted_memberships().filter(tenant=tenant, role__in=roles).values("user_id")
    return get_user_model().objects.filter(pk__in=held, is_active=True)


def change_refusal(user: Any, action: str, change: Any) -> str:
    """The gitops policy (settings.GITOPS_CHANGE_POLICY): "" when ``user`` may review, merge,
    close or update ``change``, else the sentence that says who may. Platform changes (no
    tenant) are the platform admins' alone.

    Closing also asks for what opened the change (``close_action``: a platform admin's trust
    level or cost centre is not the tenant's to veto) and refuses those the change takes
    access from (``close_barred``: nobody closes their own revocation)."""
    act = Action(action)
    owners = (change.author_id, change.requested_by_id)
    if not may(user, act, change.tenant_slug or None, owners=owners):
        return DENIED[act]
    if act is Action.CLOSE:
        if getattr(user, "pk", None) in (change.close_barred or ()):
            return "This change takes access away from you; someone else decides on it."
        needed = change.close_action
        if needed and not may(user, Action(needed), change.tenant_slug or None):
            return f"This change carries a decision only they may take: {DENIED[Action(needed)]}"
    return ""


def may_act_on_change(user: Any, action: str, change: Any) -> bool:
    return not change_refusal(user, action, change)


def platform_admins() -> list[Any]:
    """Everyone with the platform admin role (who hears about new requests)."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model().objects.filter(
            platform_roles__role=PlatformRole.Name.PLATFORM_ADMIN, is_active=True
        )
    )


def finance_users() -> list[Any]:
    """Everyone with the finance role (who hears about budgets crossed)."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model().objects.filter(
            platform_roles__role=PlatformRole.Name.FINANCE, is_active=True
        )
    )


def is_finance(user: Any) -> bool:
    return PlatformRole.Name.FINANCE in platform_roles(user)


def sees_all_tenants(user: Any) -> bool:
    return allowed(Action.VIEW, platform=platform_roles(user), role=None)


def memberships_of(user: Any) -> QuerySet[Membership]:
    """The user's own memberships that count, with their tenants."""
    return counted_memberships().filter(user=user).select_related("tenant")


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    """Tenants the user may look at: their own, or all of them for platform roles."""
    return tenants_where(user, Action.VIEW)


@dataclass(frozen=True)
class TenantAccess:
    """A resolved tenant and what the signed-in user may do in it (``RULES``, no query)."""

    tenant: Tenant
    role: str | None
    platform: frozenset[str]

    @property
    def platform_admin(self) -> bool:
        return _PA in self.platform

    def may(self, action: Action, *, owner: bool = False) -> bool:
        return allowed(action, platform=self.platform, role=self.role, owner=owner)

    def require(self, action: Action, *, owner: bool = False) -> None:
        if not self.may(action, owner=owner):
            raise PermissionDenied(DENIED[action])

    @property
    def can_write(self) -> bool:
        """May change the tenant's resources (members and admins, or a platform admin)."""
        return self.may(Action.REQUEST)

    @property
    def can_admin(self) -> bool:
        """May manage the tenant itself: members, settings, its audit log."""
        return self.may(Action.MANAGE_MEMBERS)

    def require_admin(self) -> None:
        self.require(Action.MANAGE_MEMBERS)

    def require_write(self) -> None:
        self.require(Action.REQUEST)


def may_admin_tenant(user: Any, tenant: Tenant) -> bool:
    """The rule behind ``TenantAccess.can_admin``, for services that have no request."""
    return may(user, Action.MANAGE_MEMBERS, tenant)


def get_tenant_for_user(request: HttpRequest, slug: str) -> TenantAccess:
    """Resolve ``slug`` for the signed-in user; a non-member gets 404, never a hint it exists."""
    user = request.user
    if not user.is_authenticated:
        raise Http404("No such tenant.")
    held = platform_roles(user)
    membership = (
        counted_memberships().select_related("tenant").filter(user=user, tenant__slug=slug).first()
    )
    if membership is not None:
        return TenantAccess(membership.tenant, membership.role, held)
    if allowed(Action.VIEW, platform=held, role=None):
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is not None:
            # Finance reads every tenant but changes none.
            return TenantAccess(tenant, None, held)
    raise Http404("No such tenant.")


def action_page(
    action: Action,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A platform-wide page for those who may take ``action`` anywhere (``RULES``' platform
    roles); anyone else, signed in, gets the 404 of a page that is not there."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not may(request.user, action):
                raise Http404("No such page.")
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return decorate
