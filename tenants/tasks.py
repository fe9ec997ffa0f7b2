"""Background work for tenants."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string

from portal.jobs import job_task
from portal.models import Job
from tenants.access import Action, users_who_may
from tenants.models import Invitation, Tenant
from tenants.services import do_sync_cluster_access


@job_task("tenants.notify_onboarded")
def notify_onboarded(job: Job) -> None:
    """Tell a new tenant's contacts that it exists and who its admins are."""
    tenant = Tenant.objects.get(pk=job.kwargs["tenant_id"])
    admins = list(
        users_who_may(tenant, Action.MANAGE_MEMBERS)
        .order_by("username")
        .values_list("username", flat=True)
    )
    body = render_to_string("tenants/mail/onboarded.txt", {"tenant": tenant, "admins": admins})
    job.set_progress(30, f"sending to {len(tenant.contacts)} contacts")
    send_mail(
        subject=f"[AI factory] Tenant {tenant.slug} is ready",
        message=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=list(tenant.contacts),
    )
    job.set_progress(100, "sent")


@job_task("tenants.sync_cluster_access")
def sync_cluster_access(job: Job) -> None:
    """Open the change that gives the tenant's clusters its members as they are now."""
    tenant = Tenant.objects.filter(pk=job.kwargs["tenant_id"]).first()
    if tenant is None:
        job.set_progress(100, "the tenant is gone")
        return
    change = do_sync_cluster_access(tenant, acting_user=job.created_by)
    job.set_progress(
        100, f"opened change #{change.pk}" if change else "the clusters' bindings already match"
    )


@job_task("tenants.send_invitation")
def send_invitation(job: Job) -> None:
    """Mail an invitation to its address (it is taken up by signing in, not by this mail)."""
    invitation = (
        Invitation.objects.select_related("tenant", "invited_by")
        .filter(pk=job.kwargs["invitation_id"])
        .first()
    )
    if invitation is None or not invitation.pending:
        job.set_progress(100, "the invitation is no longer open")
        return
    body = render_to_string(
        "tenants/mail/invitation.txt",
        {
            "invitation": invitation,
            "inviter": invitation.invited_by.get_username()
            if invitation.invited_by
            else "A platform admin",
            "url": settings.PORTAL_BASE_URL,
        },
    )
    send_mail(
        subject=f"[AI factory] Invitation to {invitation.tenant.slug}",
        message=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[invitation.email],
    )
    job.set_progress(100, "sent")
