"""A tenant's outbound webhooks: the list, adding one, one endpoint with its delivery log.

Every reader of the tenant sees the endpoints and their delivery log; only those who may
manage webhooks (``Action.MANAGE_WEBHOOKS``: the tenant's admins, platform admins) get the
forms, and anyone else's POST is refused (403) after the tenant is resolved, so an outsider
gets 404 everywhere. A new or rotated secret is shown on that one response only.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from catalog import outbound
from catalog.models import WebhookDelivery, WebhookEndpoint
from tenants.access import Action, TenantAccess, get_tenant_for_user


def _endpoint(access: TenantAccess, endpoint_id: int) -> WebhookEndpoint:
    return get_object_or_404(
        WebhookEndpoint.objects.select_related("tenant"), pk=endpoint_id, tenant=access.tenant
    )


def _no_store(response: HttpResponse) -> HttpResponse:
    # The page may carry a secret shown once: no cache may keep it.
    response["Cache-Control"] = "no-store"
    return response


@login_required
def webhooks(request: HttpRequest, tenant: str) -> HttpResponse:
    """The tenant's endpoints; admins add one here and see its secret once."""
    access = get_tenant_for_user(request, tenant)
    created: WebhookEndpoint | None = None
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        access.require(Action.MANAGE_WEBHOOKS)
        try:
            created = outbound.do_add_webhook(
                access.tenant,
                acting_user=request.user,
                url=request.POST.get("url", ""),
                description=request.POST.get("description", ""),
            )
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
    elif request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    context = {
        "access": access,
        "tenant": access.tenant,
        "endpoints": access.tenant.webhook_endpoints.all(),
        "may_manage": access.may(Action.MANAGE_WEBHOOKS),
        "created": created,
        "errors": errors,
        "form": request.POST if errors else {},
    }
    response = render(request, "catalog/webhooks.html", context, status=400 if errors else 200)
    return _no_store(response)


@login_required
def webhook(request: HttpRequest, tenant: str, endpoint_id: int) -> HttpResponse:
    """One endpoint and its delivery log (latest first); admins disable, enable, rotate the
    secret or remove it. htmx polls the log fragment."""
    access = get_tenant_for_user(request, tenant)
    endpoint = _endpoint(access, endpoint_id)
    new_secret = ""
    if request.method == "POST":
        access.require(Action.MANAGE_WEBHOOKS)
        action = request.POST.get("action")
        try:
            if action == "disable":
                outbound.do_disable_webhook(endpoint, acting_user=request.user)
            elif action == "enable":
                outbound.do_enable_webhook(endpoint, acting_user=request.user)
            elif action == "rotate":
                new_secret = outbound.do_rotate_secret(endpoint, acting_user=request.user)
            elif action == "remove":
                outbound.do_remove_webhook(endpoint, acting_user=request.user)
                messages.success(request, f"The webhook {endpoint.url} is removed.")
                return redirect("catalog:webhooks", tenant=access.tenant.slug)
            else:
                return HttpResponse("Unknown action.", status=400)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        endpoint.refresh_from_db()
    elif request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    page = Paginator(endpoint.deliveries.select_related("request"), 50).get_page(
        request.GET.get("page")
    )
    context = {
        "access": access,
        "tenant": access.tenant,
        "endpoint": endpoint,
        "page": page,
        "may_manage": access.may(Action.MANAGE_WEBHOOKS),
        "new_secret": new_secret,
        "rotating": outbound.rotating(endpoint, timezone.now()),
    }
    htmx = bool(getattr(request, "htmx", False)) and request.method == "GET"
    template = "catalog/webhook.html#log" if htmx else "catalog/webhook.html"
    return _no_store(render(request, template, context))


@login_required
def webhook_redeliver(
    request: HttpRequest, tenant: str, endpoint_id: int, delivery_id: int
) -> HttpResponse:
    """Queue one more attempt of a delivery, with the same ``webhook-id``."""
    access = get_tenant_for_user(request, tenant)
    endpoint = _endpoint(access, endpoint_id)
    delivery = get_object_or_404(WebhookDelivery, pk=delivery_id, endpoint=endpoint)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    access.require(Action.MANAGE_WEBHOOKS)
    try:
        outbound.do_redeliver(delivery, acting_user=request.user)
        messages.success(request, f"Delivery {delivery.message_id} is queued again.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(reverse("catalog:webhook", args=[access.tenant.slug, endpoint.pk]))
