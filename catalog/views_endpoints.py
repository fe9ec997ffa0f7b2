"""A tenant's model endpoint as a page of its own: its state, how to call it, the tenant's key.

Members (viewers too) see it; an outsider gets 404 from ``get_tenant_for_user`` first. Making
the tenant's gateway key inline needs ``Action.MANAGE_GATEWAY_KEY`` (the tenant's admins),
as on the gateway key page.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render

from catalog import endpoints
from catalog.idle_actions import FIRST_REQUEST_WAIT
from catalog.keys import do_rotate_gateway_key
from catalog.models import GatewayKey
from tenants.access import Action, TenantAccess, get_tenant_for_user


def _page_of(access: TenantAccess, name: str) -> endpoints.EndpointPage:
    page = endpoints.endpoint_page(access.tenant, name)
    if page is None:
        raise Http404("No such endpoint on main.")
    return page


def _context(
    access: TenantAccess, page: endpoints.EndpointPage, new_key: str = "", key_error: str = ""
) -> dict[str, Any]:
    return {
        "access": access,
        "tenant": access.tenant,
        "endpoint": page,
        "new_key": new_key,
        "key_error": key_error,
        "may_make_key": access.may(Action.MANAGE_GATEWAY_KEY),
        "may_wake": access.may(Action.WAKE),
        "first_request_wait": FIRST_REQUEST_WAIT,
    }


def _no_store(response: HttpResponse) -> HttpResponse:
    # The key-making answer holds the new key; the page itself is kept out of caches alike.
    response["Cache-Control"] = "no-store"
    return response


@login_required
def endpoint(request: HttpRequest, tenant: str, endpoint: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):  # after the access check: outsiders get 404
        return HttpResponseNotAllowed(["GET", "HEAD"])
    page = _page_of(access, endpoint)
    return _no_store(render(request, "catalog/endpoint.html", _context(access, page)))


@login_required
def endpoint_key(request: HttpRequest, tenant: str, endpoint: str) -> HttpResponse:
    """Make the tenant's gateway key from the endpoint's page when it has none.

    The answer is the key fragment (the full page without htmx) with the new key in it: it is
    shown on this response only, so no redirect can follow the POST. A tenant that has a key
    already keeps it: rotating is the gateway key page's, where its consequences are spelt out.
    """
    access = get_tenant_for_user(request, tenant)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    access.require(Action.MANAGE_GATEWAY_KEY)
    _page_of(access, endpoint)
    new_key = key_error = ""
    if GatewayKey.objects.filter(tenant=access.tenant).exists():
        key_error = "The tenant has a key already: rotate it on the gateway key page."
    else:
        try:
            new_key = do_rotate_gateway_key(access.tenant, acting_user=request.user)
        except ValidationError as exc:
            key_error = " ".join(exc.messages)
    # Read again after the key is made: the page then says the tenant has one.
    context = _context(access, _page_of(access, endpoint), new_key, key_error)
    htmx = bool(getattr(request, "htmx", False))
    template = "catalog/endpoint.html#key" if htmx else "catalog/endpoint.html"
    return _no_store(render(request, template, context, status=422 if key_error else 200))
