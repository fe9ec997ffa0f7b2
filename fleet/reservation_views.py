"""The reserved-nodes page: which nodes dedicated tenants hold, and the form that asks for more
or gives some back (``fleet.reservations``). Platform admins only (404 for everyone else)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from fleet import remediation, reservations
from fleet.forms import ReservationForm
from fleet.models import Node, NodeReservation
from gitops.fleet import configured_fleet
from tenants.access import Action, action_page

_DRAINING = "Draining {nodes}; the change opens for review once the work has left."


def _free_nodes() -> list[str]:
    """Whole-GPU nodes no reservation holds or asks for."""
    whole = {f.name for f in configured_fleet().flavors if f.mode == "whole"}
    held = set(
        NodeReservation.objects.filter(released_at__isnull=True).values_list("node_name", flat=True)
    )
    names = Node.objects.filter(flavor__in=whole, gpu_count__gt=0).values_list("name", flat=True)
    return [name for name in names if name not in held]


@action_page(Action.OPERATE_FLEET)
@require_http_methods(["GET", "POST"])
def reservations_page(request: HttpRequest) -> HttpResponse:
    form = ReservationForm(request.POST or None, nodes=_free_nodes())
    if request.method == "POST" and form.is_valid():
        slug, nodes = form.cleaned_data["tenant"], form.cleaned_data["nodes"]
        try:
            if form.cleaned_data["drain"]:
                remediation.do_drain_then(slug, nodes, release=False, acting_user=request.user)
            else:
                change = reservations.do_reserve_nodes(slug, nodes, acting_user=request.user)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            if form.cleaned_data["drain"]:
                messages.success(request, _DRAINING.format(nodes=", ".join(sorted(nodes))))
                return redirect(reverse("fleet:remediation"))
            messages.success(request, f"Opened change #{change.pk} for review.")
            return redirect(reverse("gitops:detail", args=[change.pk]))
    rows = NodeReservation.objects.filter(released_at__isnull=True).select_related("change")
    context = {"form": form, "rows": rows, "tab": "reservations"}
    return render(request, "fleet/reservations.html", context)


@action_page(Action.OPERATE_FLEET)
@require_POST
def release_node(request: HttpRequest, name: str) -> HttpResponse:
    row = NodeReservation.objects.filter(
        node_name=name, released_at__isnull=True, accepted_at__isnull=False
    ).first()
    if row is None:
        messages.error(request, f"{name} is not reserved.")
        return redirect(reverse("fleet:reservations"))
    try:
        if request.POST.get("drain"):
            remediation.do_drain_then(
                row.tenant_slug, [name], release=True, acting_user=request.user
            )
        else:
            change = reservations.do_release_nodes(
                row.tenant_slug, [name], acting_user=request.user
            )
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
        return redirect(reverse("fleet:reservations"))
    if request.POST.get("drain"):
        messages.success(request, _DRAINING.format(nodes=name))
        return redirect(reverse("fleet:remediation"))
    messages.success(request, f"Opened change #{change.pk} for review.")
    return redirect(reverse("gitops:detail", args=[change.pk]))
