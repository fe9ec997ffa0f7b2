"""What the fleet's remediation loop tells people (``fleet.signals.remediation_notice``): the
platform admins in their inbox and by mail, and each tenant whose workloads ran on the node
(attributed by namespace in fleet.remediation) through ``catalog.services.notify`` and a
``node.remediation`` event to the tenant's outbound webhooks."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from catalog import outbound
from catalog.models import Notification, OutgoingMail
from catalog.services import notify, send_outbox_soon
from tenants import access
from tenants.access import Action
from tenants.models import Tenant


def tell(
    sender: object,
    *,
    title: str,
    body: str,
    admin_url: str,
    tenants: list[str],
    node: str,
    **kwargs: Any,
) -> None:
    admins = access.platform_admins()
    for person in admins:
        Notification.objects.create(user=person, title=title[:200], body=body, url=admin_url)
    if mails := sorted(p.email for p in admins if p.email):
        OutgoingMail.objects.create(
            to=mails,
            subject=f"[fleet] {title}"[:200],
            body=f"{body}\n\n{settings.PORTAL_BASE_URL.rstrip('/')}{admin_url}\n",
        )
        transaction.on_commit(send_outbox_soon)
    admin_ids = {p.pk for p in admins}
    for tenant in Tenant.objects.filter(slug__in=tenants):
        people = [u for u in access.users_who_may(tenant, Action.VIEW) if u.pk not in admin_ids]
        url = reverse("fleet:tenant_status", args=[tenant.slug])
        notify(people, tenant=tenant, title=title, body=body, url=url)
        outbound.queue_node_event(tenant, node=node, title=title, message=body, url=url)
