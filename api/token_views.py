"""Pages for API credentials: one's own tokens, and a tenant's robots (for its admins).

A new token's text is on the response that made it and nowhere else (``no-store``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from api.models import ApiToken, Robot
from api.permissions import SCOPES
from api.tokens import (
    MAX_DAYS,
    ROBOT_ROLES,
    do_create_robot,
    do_create_token,
    do_remove_robot,
    do_revoke_token,
    recent_uses,
)
from tenants.access import Action, get_tenant_for_user, may, tenants_where
from tenants.models import Tenant


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80)
    scope = forms.ChoiceField(
        choices=[(s, s) for s in SCOPES],
        help_text="read: look only; request: also ask for and withdraw resources; admin: also "
        "approve, review and merge (where your role allows).",
    )
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_DAYS, initial=90)


class RobotForm(forms.Form):
    name = forms.CharField(max_length=40, help_text="Lower-case letters, digits and dashes.")
    role = forms.ChoiceField(choices=[(r, r) for r in ROBOT_ROLES])


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


def _apply(form: forms.Form, call: Callable[[dict[str, Any]], Any]) -> Any:
    """Call the service with a bound form's data; its refusal lands on the form (None)."""
    if not form.is_valid():
        return None
    try:
        return call(form.cleaned_data)
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return None


def _create(request: HttpRequest, owner: Any, form: TokenForm) -> str:
    """Make a token from a bound form; its text, or "" (errors are on the form)."""
    made = _apply(form, lambda data: do_create_token(acting_user=request.user, owner=owner, **data))
    return made[1] if made else ""


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """One's own tokens; the form that makes one."""
    user: Any = request.user  # signed in (login_required)
    if Robot.objects.filter(user=user).exists():
        raise Http404("Robots have no pages.")
    form = TokenForm(request.POST if request.method == "POST" else None)
    new_token = _create(request, request.user, form) if request.method == "POST" else ""
    if new_token:
        form = TokenForm()
    tokens = ApiToken.objects.filter(user=user)
    administered = tenants_where(request.user, Action.MANAGE_MEMBERS).order_by("slug")
    context = {
        "form": form,
        "tokens": tokens,
        "new_token": new_token,
        # A platform admin manages every tenant's robots from the tenant's own page.
        "administered": administered if not may(request.user, Action.MANAGE_MEMBERS) else [],
    }
    return _no_store(render(request, "api/tokens.html", context))


def _token_for(request: HttpRequest, prefix: str) -> tuple[ApiToken, Robot | None]:
    """A token the user may manage (theirs, or a robot's of a tenant they administer)."""
    token = get_object_or_404(ApiToken.objects.select_related("user"), prefix=prefix)
    robot = Robot.objects.select_related("tenant").filter(user=token.user).first()
    if robot is not None and may(request.user, Action.MANAGE_MEMBERS, robot.tenant):
        return token, robot
    if robot is None and token.user_id == request.user.pk:
        return token, None
    raise Http404("No such token.")


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def token_detail(request: HttpRequest, prefix: str) -> HttpResponse:
    """A token and its last uses; POST revokes it."""
    token, robot = _token_for(request, prefix)
    if request.method == "POST":
        do_revoke_token(token, acting_user=request.user)
        messages.success(request, f"Token {token.prefix} is revoked.")
        return redirect("api:token_detail", prefix=token.prefix)
    context = {"token": token, "robot": robot, "uses": recent_uses(token)}
    return render(request, "api/token_detail.html", context)


@login_required
def robots(request: HttpRequest, tenant: str) -> HttpResponse:
    """A tenant's robots, for its admins: make one, remove one, make and revoke tokens."""
    access = get_tenant_for_user(request, tenant)
    access.require(Action.MANAGE_MEMBERS)
    if request.method not in ("GET", "HEAD", "POST"):  # after the access check
        return HttpResponse(status=405)
    page: dict[str, Any] = {
        "robot_form": RobotForm(),
        "token_form": TokenForm(),
        "new_token": "",
        "token_robot": None,
    }
    if request.method == "POST":
        done = _robots_post(request, access.tenant, page)
        if done is not None:
            return done
    rows = [
        (
            robot,
            robot.user.memberships.filter(tenant=access.tenant).first(),
            robot.user.api_tokens.all(),
        )
        for robot in Robot.objects.filter(tenant=access.tenant).select_related("user")
    ]
    context = {"access": access, "tenant": access.tenant, "rows": rows, **page}
    context["fresh_token_form"] = TokenForm()
    return _no_store(render(request, "api/robots.html", context))


def _robots_post(request: HttpRequest, tenant: Tenant, page: dict[str, Any]) -> HttpResponse | None:
    """Add a robot, remove one or make one a token; a redirect when done, else None (the
    page shows the forms in ``page``, errors or the new token included)."""
    what = request.POST.get("action")
    back = redirect("api:robots", tenant=tenant.slug)
    if what == "robot":
        robot_form = page["robot_form"] = RobotForm(request.POST)
        made = _apply(
            robot_form, lambda data: do_create_robot(tenant, acting_user=request.user, **data)
        )
        return back if made else None
    if what not in ("token", "remove"):
        raise PermissionDenied("Unknown action.")
    robot = get_object_or_404(Robot, tenant=tenant, name=request.POST.get("robot", ""))
    if what == "remove":
        do_remove_robot(robot, acting_user=request.user)
        messages.success(request, f"Robot {robot.name} is removed.")
        return back
    page["token_robot"] = robot
    token_form = page["token_form"] = TokenForm(request.POST)
    page["new_token"] = _create(request, robot.user, token_form)
    if page["new_token"]:
        page["token_form"] = TokenForm()
    return None
