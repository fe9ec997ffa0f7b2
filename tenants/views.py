"""Tenant pages: list, detail, onboarding, settings, members and the audit log."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django_htmx.http import HttpResponseLocation

from gitops.models import ChangeRequest
from portal.models import AuditEvent
from tenants import mig, services
from tenants.access import (
    Action,
    TenantAccess,
    active_memberships,
    get_tenant_for_user,
    may,
    memberships_of,
    require,
    visible_tenants,
    with_member_counts,
)
from tenants.forms import (
    AddMemberForm,
    GpuQuotaForm,
    RoleForm,
    TenantCreateForm,
    TenantSettingsForm,
)
from tenants.models import INVITATION_DAYS, Invitation, Membership, Tenant
from tenants.quota import do_set_gpu_quota, require_quota_setter


@login_required
def tenant_list(request: HttpRequest) -> HttpResponse:
    tenants = with_member_counts(visible_tenants(request.user))
    mine = dict(memberships_of(request.user).values_list("tenant__slug", "role"))
    return render(
        request,
        "tenants/list.html",
        {"tenants": tenants, "my_roles": mine, "can_onboard": may(request.user, Action.ONBOARD)},
    )


@login_required
def tenant_create(request: HttpRequest) -> HttpResponse:
    require(request.user, Action.ONBOARD)
    form = TenantCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            tenant = services.do_create_tenant(
                acting_user=request.user,
                slug=data["slug"],
                display_name=data["display_name"],
                trust_level=data["trust_level"],
                cost_centre=data["cost_centre"],
                contacts=data["contacts"],
                admins=data["admins"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Tenant {tenant.slug} onboarded.")
            return redirect("tenants:detail", tenant=tenant.slug)
    return render(request, "tenants/create.html", {"form": form})


@login_required
def tenant_detail(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    members = active_memberships().filter(tenant=access.tenant).select_related("user")
    recent = access.tenant.jobs.all()[:5] if access.may(Action.VIEW_AUDIT) else []
    changes = ChangeRequest.objects.filter(tenant_slug=access.tenant.slug)[:10]
    return render(
        request,
        "tenants/detail.html",
        {
            "access": access,
            "tenant": access.tenant,
            "members": members,
            "jobs": recent,
            "changes": changes,
        },
    )


@login_required
def tenant_settings(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    access.require(Action.CHANGE_SETTINGS)
    form = TenantSettingsForm(
        request.POST or None,
        instance=access.tenant,
        platform_admin=access.may(Action.CHANGE_TRUST),
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.do_update_tenant(
                access.tenant,
                acting_user=request.user,
                **{f: form.cleaned_data[f] for f in TenantSettingsForm.Meta.fields},
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, "Settings saved.")
            return redirect("tenants:detail", tenant=access.tenant.slug)
    return _settings_page(request, access, form)


def _settings_page(
    request: HttpRequest,
    access: TenantAccess,
    form: TenantSettingsForm,
    quota_form: GpuQuotaForm | None = None,
    status: int = 200,
    fragment: bool = False,
) -> HttpResponse:
    """The settings page, or only its GPU quota form (``fragment``); platform admins get that
    form."""
    if quota_form is None and access.may(Action.CHANGE_TRUST):
        quota_form = GpuQuotaForm(initial={"gpu_quota": access.tenant.gpu_quota})
    template = "tenants/settings.html" + ("#gpu-quota" if fragment else "")
    context = {"access": access, "tenant": access.tenant, "form": form, "quota_form": quota_form}
    if access.tenant.trust_level == Tenant.TrustLevel.DEDICATED and not fragment:
        context["mig"] = {
            "on_main": mig.mig_on_main(access.tenant),
            "pending": mig.pending_change(access.tenant),
            "caveat": mig.CAVEAT,
            "may_set": access.may(Action.CHANGE_TRUST),
        }
    return render(request, template, context, status=status)


@login_required
def tenant_mig(request: HttpRequest, tenant: str) -> HttpResponse:
    """Enable or disable MIG slices for a dedicated tenant (platform admins), from the settings
    page: opens the change (``tenants.mig``)."""
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":  # after the tenant check, so outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    mig.require_mig_setter(request.user, access.tenant)
    try:
        change = mig.do_set_mig_allowed(
            access.tenant, allowed=request.POST.get("allowed") == "on", acting_user=request.user
        )
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
        return redirect(reverse("tenants:settings", kwargs={"tenant": access.tenant.slug}))
    messages.success(request, f"Opened change #{change.pk} for review.")
    return redirect(reverse("gitops:detail", args=[change.pk]))


@login_required
def tenant_gpu_quota(request: HttpRequest, tenant: str) -> HttpResponse:
    """Set the tenant's GPU quota (platform admins), from the settings page."""
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":  # after the tenant check, so outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    require_quota_setter(request.user, access.tenant)
    quota_form = GpuQuotaForm(request.POST)
    if quota_form.is_valid():
        try:
            quota = quota_form.cleaned_data["gpu_quota"]
            do_set_gpu_quota(access.tenant, acting_user=request.user, quota=quota)
        except ValidationError as exc:
            quota_form.add_error(None, exc)
        else:
            messages.success(request, f"The GPU quota of {access.tenant.slug} is {quota}.")
            url = reverse("tenants:settings", kwargs={"tenant": access.tenant.slug})
            return HttpResponseLocation(url) if request.htmx else redirect(url)  # type: ignore[attr-defined]
    settings_form = TenantSettingsForm(instance=access.tenant, platform_admin=True)
    htmx = bool(request.htmx)  # type: ignore[attr-defined]
    return _settings_page(request, access, settings_form, quota_form, 422, fragment=htmx)


def _members_page(
    request: HttpRequest, access: TenantAccess, form: AddMemberForm, status: int = 200
) -> HttpResponse:
    tenant = access.tenant
    template = "tenants/members.html#members" if request.htmx else "tenants/members.html"  # type: ignore[attr-defined]
    return render(
        request,
        template,
        {
            "access": access,
            "tenant": tenant,
            "members": tenant.memberships.select_related("user"),
            "active_ids": set(
                active_memberships().filter(tenant=tenant).values_list("pk", flat=True)
            ),
            "invitations": (
                tenant.invitations.filter(
                    accepted_at=None, revoked_at=None, expires_at__gt=timezone.now()
                ).select_related("invited_by")
                if access.can_admin
                else []
            ),
            "invitation_days": INVITATION_DAYS,
            "form": form,
            "role_choices": RoleForm.base_fields["role"].choices,  # type: ignore[attr-defined]
        },
        status=status,
    )


def _added_message(identifier: str, role: str) -> str:
    if "@" in identifier.strip():
        return (
            f"{identifier.strip().lower()} is invited as {role}: whoever signs in holding this "
            f"address confirmed joins within {INVITATION_DAYS} days."
        )
    return (
        f"If an account matches '{identifier}', it now has the {role} role here. Someone who "
        "has never signed in to the portal must do so once before they can be added, or invite "
        "their e-mail address."
    )


@login_required
def tenant_members(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    form = AddMemberForm(request.POST or None)
    if request.method != "POST":
        return _members_page(request, access, form)
    access.require_admin()
    if form.is_valid():
        identifier, role = form.cleaned_data["user"], form.cleaned_data["role"]
        try:
            services.do_add_member_by_identifier(
                access.tenant, acting_user=request.user, identifier=identifier, role=role
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            # The same answer whether or not an account matched (see the service).
            messages.success(request, _added_message(identifier, role))
            return _members_page(request, access, AddMemberForm())
    return _members_page(request, access, form, status=422 if request.htmx else 200)  # type: ignore[attr-defined]


def _membership(access: object, member_id: int) -> Membership:
    return get_object_or_404(Membership, pk=member_id, tenant=access.tenant)  # type: ignore[attr-defined]


@login_required
def member_role(request: HttpRequest, tenant: str, member_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":  # after the tenant check, so outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    membership = _membership(access, member_id)
    access.require_admin()
    form = RoleForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError(list(form.errors["role"]))
        services.do_change_member_role(
            membership, acting_user=request.user, role=form.cleaned_data["role"]
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{membership.user.username} is now {form.cleaned_data['role']}.")
    return _members_page(request, access, AddMemberForm())


@login_required
def invitation_revoke(request: HttpRequest, tenant: str, invitation_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":  # after the tenant check, so outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    invitation = get_object_or_404(Invitation, pk=invitation_id, tenant=access.tenant)
    access.require_admin()
    try:
        services.do_revoke_invitation(invitation, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"The invitation of {invitation.email} is withdrawn.")
    return _members_page(request, access, AddMemberForm())


@login_required
def member_remove(request: HttpRequest, tenant: str, member_id: int) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":  # after the tenant check, so outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    membership = _membership(access, member_id)
    access.require_admin()
    try:
        services.do_remove_member(membership, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{membership.user.username} removed.")
    return _members_page(request, access, AddMemberForm())


def _audit_page(request: HttpRequest, events: QuerySet[AuditEvent], context: dict) -> HttpResponse:
    action = request.GET.get("action", "").strip()
    query = request.GET.get("q", "").strip()
    if action:
        events = events.filter(action__startswith=action)
    if query:
        events = events.filter(
            Q(actor_name__icontains=query) | Q(target_repr__icontains=query) | Q(request_id=query)
        )
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    template = "tenants/audit.html#events" if request.htmx else "tenants/audit.html"  # type: ignore[attr-defined]
    return render(request, template, {**context, "page": page, "action": action, "q": query})


@login_required
def tenant_audit(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    access.require(Action.VIEW_AUDIT)
    return _audit_page(
        request,
        AuditEvent.objects.filter(tenant_slug=access.tenant.slug),
        {"access": access, "tenant": access.tenant},
    )


@login_required
def platform_audit(request: HttpRequest) -> HttpResponse:
    require(request.user, Action.OPERATE_FLEET)
    return _audit_page(request, AuditEvent.objects.all(), {"tenant": None})
