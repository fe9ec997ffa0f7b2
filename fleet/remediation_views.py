"""The remediation pages: the loop's incidents, the guard per pool, the policy (platform
admins; 404 for everyone else), and the actions admins take there."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from fleet import remediation
from fleet.forms import RemediationPolicyForm
from fleet.models import Remediation, RemediationPolicy, RemediationWarning
from fleet.views import _go
from tenants.access import Action, action_page


def _page(request: HttpRequest, form: RemediationPolicyForm, status: int = 200) -> HttpResponse:
    context = {
        "open": Remediation.objects.filter(closed_at__isnull=True).prefetch_related("events"),
        "closed": Remediation.objects.filter(closed_at__isnull=False)[:20],
        "guard": remediation.guard_rows(),
        "warnings": RemediationWarning.objects.filter(cleared_at__isnull=True),
        "form": form,
    }
    return render(request, "fleet/remediation.html", context, status=status)


@action_page(Action.OPERATE_FLEET)
@require_http_methods(["GET", "HEAD", "POST"])
def remediation_page(request: HttpRequest) -> HttpResponse:
    """GET: the page. POST: the policy form (REMEDIATE); bad input changes nothing."""
    policy = RemediationPolicy.current()
    if request.method != "POST":
        return _page(request, RemediationPolicyForm(instance=policy))
    form = RemediationPolicyForm(request.POST, instance=RemediationPolicy.current())
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        remediation.do_set_policy(
            {k: form.cleaned_data[k] for k in form.Meta.fields}, acting_user=request.user
        )
    except ValidationError as exc:
        form.add_error(None, exc)
        return _page(request, form, status=400)
    messages.success(request, "The remediation policy is saved.")
    return _go(request, reverse("fleet:remediation"))


@action_page(Action.REMEDIATE)
@require_POST
def return_node(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(Remediation, pk=pk)
    try:
        remediation.do_return(incident, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{incident.node_name} is schedulable again.")
    return _go(request, reverse("fleet:remediation"))


@action_page(Action.REMEDIATE)
@require_POST
def resume_pool(request: HttpRequest) -> HttpResponse:
    pool = request.POST.get("pool", "")
    try:
        remediation.do_resume(pool, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Remediation runs again in pool {pool or '(none)'}.")
    return _go(request, reverse("fleet:remediation"))
