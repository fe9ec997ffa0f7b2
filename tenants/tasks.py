"""Background work for tenants."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string

from portal.jobs import job_task
from portal.models import Job
from tenants.access import Action, users_who_may
from tenants.models import Tenant


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
