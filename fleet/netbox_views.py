"""The NetBox page: each node's device, serial, validation state and GPU items as the last
sync found them, the last run's log, and a button to sync now (platform admins; 404 for
everyone else)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from fleet import netbox
from fleet.models import NetBoxDevice
from fleet.views import _enqueue
from portal.models import Job
from tenants.access import Action, action_page


@action_page(Action.OPERATE_FLEET)
def netbox_page(request: HttpRequest) -> HttpResponse:
    context = {
        "configured": netbox.configured(),
        "netbox_url": settings.NETBOX_URL,
        "field": settings.NETBOX_VALIDATION_FIELD,
        "rows": NetBoxDevice.objects.all(),
        "last_run": Job.objects.filter(task=netbox.TASK, kwargs={}).order_by("-created_at").first(),
        "tab": "nodes",
    }
    return render(request, "fleet/netbox.html", context)


@action_page(Action.OPERATE_FLEET)
@require_POST
def netbox_sync_now(request: HttpRequest) -> HttpResponse:
    return _enqueue(request, netbox.TASK, "Sync the fleet to NetBox")
