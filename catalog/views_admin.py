"""The platform admin's side of the catalog: the approval queue, the approval page with its
what-if (quota, fleet capacity, the manifests the pull request would change) and the decision
forms, and everyone's notification inbox.

The approval pages answer 404 to anyone but a platform admin, as the fleet pages do. The
decisions are ``catalog.services`` verbs; a view only parses the form and shows what the
service refused, with nothing changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from catalog import jobs, services, states
from catalog.job_forms import JobTemplateForm
from catalog.models import JobTemplate, Notification, ResourceRequest
from catalog.preview import file_patches, preview_of
from catalog.services import CapacityRow
from catalog.specs import CLASSES
from fleet.capacity import total_requests
from fleet.charts import figure_html
from fleet.models import Workload
from gitops import services as gitops
from gitops.diffview import RenderedFile, render_file_diff
from gitops.models import ChangeRequest
from portal.live import admin_poll, unchanged, version_of
from portal.views import plotly_js_url
from tenants.access import Action, action_page

S = ResourceRequest.State
A = ResourceRequest.Action
# The portal's palette (static/portal/portal.css): muted, accent, bad.
NOW_COLOUR = "#adb5bd"
AFTER_COLOUR = "#3b5bdb"
OVER_COLOUR = "#c92a2a"


# --- forms ----------------------------------------------------------------------------------


class ApproveForm(forms.Form):
    note = forms.CharField(
        required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )
    # Only shown when the request overcommits a flavor; the service ignores it otherwise.
    allow_overcommit = forms.BooleanField(
        required=False, label="Allow overcommit: promise more than the flavor has"
    )
    seen = forms.CharField(
        widget=forms.HiddenInput,
        error_messages={"required": "The page was out of date: look at the diff and try again."},
    )
    # The "approve and merge" button: the pull request goes into the merge queue.
    merge = forms.BooleanField(required=False)


class RejectForm(forms.Form):
    note = forms.CharField(
        label="Why (sent to the team)",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "Say why, so the team can act on it."},
    )


class ChangesForm(forms.Form):
    note = forms.CharField(
        label="What needs to change (sent to the team)",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "Say what needs to change."},
    )


class _RequestIds(forms.TypedMultipleChoiceField):
    """Request numbers: any made of digits is taken here; the service says which are not
    waiting, yours or unknown."""

    def valid_value(self, value: Any) -> bool:
        return str(value).isdigit()


class ApproveManyForm(forms.Form):
    requests = _RequestIds(
        coerce=int, error_messages={"required": "Select at least one request to approve."}
    )
    note = forms.CharField(required=False, max_length=2000)
    merge = forms.BooleanField(required=False, initial=True)


def _add_errors(form: forms.BaseForm, error: ValidationError) -> None:
    """A service's refusal on the form: on its field when the form has one, else above it."""
    if not hasattr(error, "error_dict"):
        form.add_error(None, error)
        return
    for field, errors in error.error_dict.items():
        form.add_error(field if field in form.fields else None, errors)


# --- what the approval page shows -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SpecRow:
    field: str
    now: str
    wanted: str

    @property
    def changed(self) -> bool:
        return self.now != self.wanted


def _shown(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def spec_rows(request: ResourceRequest) -> list[SpecRow]:
    """The request's spec field by field, next to what runs now (modify, decommission)."""
    now = request.resource.spec if request.action != A.CREATE else {}
    wanted = request.spec if request.action != A.DECOMMISSION else {}
    names = [f.name for f in dataclasses.fields(CLASSES[request.kind])]
    names += sorted((set(now) | set(wanted)) - set(names))
    return [SpecRow(name, _shown(now.get(name)), _shown(wanted.get(name))) for name in names]


def preview_diff(changes: dict[str, bytes | None]) -> list[RenderedFile]:
    """The files the pull request would change, as highlighted diffs against main."""
    return [render_file_diff(f.path, f.status, f.patch) for f in file_patches(changes)]


def capacity_figure(rows: Sequence[CapacityRow]) -> go.Figure:
    """Each flavor pool as a share of its capacity, now and after the request (grouped bars).
    Pools count in different units (GPUs, MIG devices, MiB), so the bars are percentages and
    the hover gives the amounts; the dashed line is 100%."""
    labels = [f"{row.flavor}<br>({row.unit})" for row in rows]
    figure = go.Figure()
    for name, amounts, colours in (
        ("Promised now", [row.before for row in rows], [NOW_COLOUR] * len(rows)),
        (
            "After approval",
            [row.after for row in rows],
            [OVER_COLOUR if row.over else AFTER_COLOUR for row in rows],
        ),
    ):
        figure.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=[
                    _percent(amount, row.capacity)
                    for amount, row in zip(amounts, rows, strict=True)
                ],
                customdata=[
                    [f"{amount:f}", f"{row.capacity:f}", row.unit]
                    for amount, row in zip(amounts, rows, strict=True)
                ],
                marker_color=colours,
                hovertemplate=(
                    f"{name}: %{{customdata[0]}} of %{{customdata[1]}} %{{customdata[2]}}"
                    " (%{y:.0f}%)<extra></extra>"
                ),
            )
        )
    figure.add_hline(y=100, line_dash="dash", line_color=OVER_COLOUR, line_width=1)
    figure.update_layout(
        template="none",
        barmode="group",
        height=300,
        margin={"l": 50, "r": 10, "t": 10, "b": 70},
        legend={"orientation": "h", "y": -0.3},
        yaxis={"rangemode": "tozero", "gridcolor": "#e3e6ea", "ticksuffix": "%"},
        font={"family": "system-ui, sans-serif", "size": 13},
    )
    return figure


def _percent(amount: Any, capacity: Any) -> float:
    return float(amount / capacity * 100) if capacity else 0.0


def can_retry(request: ResourceRequest) -> bool:
    """Approved with an error, or failed with a pull request that can be opened again."""
    if request.state == S.APPROVED:
        return bool(request.error)
    merged = request.change is not None and request.change.status == ChangeRequest.Status.MERGED
    return request.state == S.FAILED and not merged


def _page(
    http: HttpRequest, request: ResourceRequest, *, status: int = 200, **extra: Any
) -> HttpResponse:
    """The approval page; ``extra`` carries a bound form with its errors (status 422)."""
    preview = preview_of(request)
    check = preview.check
    own = services.had_a_hand(request, http.user)
    can_decide = request.state == S.SUBMITTED and not own
    # Refusals of a form the page does not show (the request is no longer waiting, or yours).
    hidden = [] if can_decide else [v for v in extra.values() if isinstance(v, forms.Form)]
    refused = [e for form in hidden for errors in form.errors.values() for e in errors]
    context = {
        "req": request,
        "spec_rows": spec_rows(request),
        "check": check,
        "gpus_in_use": total_requests(Workload.objects.filter(tenant_slug=request.tenant.slug)),
        "chart": figure_html(capacity_figure(check.capacity)) if check and check.capacity else "",
        "files": preview_diff(preview.changes),
        "seen": preview.digest,
        "events": request.events.select_related("actor"),
        "own": own,
        "can_decide": can_decide,
        "refused": refused,
        "can_retry": can_retry(request),
        "approve_form": ApproveForm(prefix="approve"),
        "reject_form": RejectForm(prefix="reject"),
        "changes_form": ChangesForm(prefix="changes"),
        "plotly_js_url": plotly_js_url(),
        "live_version": approval_version(request),
        "live_poll": "" if request.state in states.TERMINAL else admin_poll(),
        **extra,
    }
    template = "catalog/admin_detail.html"
    if http.htmx:  # type: ignore[attr-defined]
        template += "#live"
    return render(http, template, context, status=status)


def approval_version(request: ResourceRequest) -> str:
    """What the approval page's live region shows moves with the request's and its pull
    request's rows, with main (the capacity and the quota are read against it) and with the
    tenant's GPU pods (its use now)."""
    change = request.change
    return version_of(
        request.updated_at,
        request.state,
        (change.updated_at, change.status, change.checks_state) if change else None,
        gitops.main_sha(),
        list(
            Workload.objects.filter(tenant_slug=request.tenant.slug).values_list(
                "pk", "gpu_requests"
            )
        ),
    )


def _get(request_id: int) -> ResourceRequest:
    related = ("tenant", "resource", "requested_by", "decided_by", "change")
    return get_object_or_404(ResourceRequest.objects.select_related(*related), pk=request_id)


def _back(request: ResourceRequest) -> HttpResponse:
    return redirect("approvals:detail", request_id=request.pk)


# --- views ----------------------------------------------------------------------------------


@action_page(Action.DECIDE)
def queue(request: HttpRequest) -> HttpResponse:
    return _queue_page(request)


def _queue_page(request: HttpRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    requests = ResourceRequest.objects.select_related(
        "tenant", "resource", "requested_by", "change"
    )
    context = {
        "waiting": requests.filter(state__in=states.AWAITING_DECISION).order_by("submitted_at"),
        "in_flight": requests.filter(state__in=states.IN_FLIGHT).order_by("-updated_at"),
        "bulk_form": ApproveManyForm(),
        "bulk_max": services.APPROVE_MANY_MAX,
        **extra,
    }
    return render(request, "catalog/admin_queue.html", context, status=status)


@action_page(Action.DECIDE)
@require_POST
def approve_many(request: HttpRequest) -> HttpResponse:
    """ "Approve selected" on the queue: one background job approves them in turn; its page
    shows the progress and a line per request."""
    form = ApproveManyForm(request.POST)
    if form.is_valid():
        try:
            job = services.do_approve_many(
                form.cleaned_data["requests"],
                acting_user=request.user,
                note=form.cleaned_data["note"],
                merge=form.cleaned_data["merge"],
            )
        except ValidationError as exc:
            _add_errors(form, exc)
        else:
            messages.success(request, f"{job.title}: each request is approved in turn.")
            return redirect("job_detail", job_id=job.pk)
    return _queue_page(request, status=422, bulk_form=form)


@action_page(Action.DECIDE)
def detail(request: HttpRequest, request_id: int) -> HttpResponse:
    """The approval page; its ``live`` region polls with ``?since=`` and gets a 204 while
    nothing it shows has moved (the decision forms sit outside it, so a reason being typed is
    never swapped away)."""
    req = _get(request_id)
    if same := unchanged(request, approval_version(req)):
        return same
    return _page(request, req)


@action_page(Action.DECIDE)
@require_POST
def approve(request: HttpRequest, request_id: int) -> HttpResponse:
    req = _get(request_id)
    form = ApproveForm(request.POST, prefix="approve")
    if form.is_valid():
        try:
            req = services.do_approve(req, acting_user=request.user, **form.cleaned_data)
        except ValidationError as exc:
            _add_errors(form, exc)
        else:
            if req.error:
                messages.warning(request, f"Approved. {req.error} Retry below.")
            elif form.cleaned_data["merge"]:
                messages.success(
                    request,
                    f"Approved: pull request #{req.change_id} is in the merge queue and merges "
                    "with its batch.",
                )
            else:
                messages.success(request, f"Approved: pull request #{req.change_id} is open.")
            return _back(req)
    return _page(request, req, status=422, approve_form=form)


def _note_decision(
    request: HttpRequest,
    request_id: int,
    form_class: type[RejectForm] | type[ChangesForm],
    prefix: str,
    decide: Callable[..., ResourceRequest],
    done: str,
) -> HttpResponse:
    req = _get(request_id)
    form = form_class(request.POST, prefix=prefix)
    if form.is_valid():
        try:
            decide(req, acting_user=request.user, note=form.cleaned_data["note"])
        except ValidationError as exc:
            _add_errors(form, exc)
        else:
            messages.success(request, done)
            return _back(req)
    return _page(request, req, status=422, **{f"{prefix}_form": form})


@action_page(Action.DECIDE)
@require_POST
def reject(request: HttpRequest, request_id: int) -> HttpResponse:
    return _note_decision(
        request,
        request_id,
        RejectForm,
        "reject",
        services.do_reject,
        "Rejected; the team is told why.",
    )


@action_page(Action.DECIDE)
@require_POST
def request_changes(request: HttpRequest, request_id: int) -> HttpResponse:
    return _note_decision(
        request,
        request_id,
        ChangesForm,
        "changes",
        services.do_request_changes,
        "Changes requested; the team is told what to change.",
    )


@action_page(Action.DECIDE)
@require_POST
def retry(request: HttpRequest, request_id: int) -> HttpResponse:
    req = _get(request_id)
    if not can_retry(req):
        refused = (
            f"The request is {req.get_state_display().lower()}: there is no pull request to "
            "open again. Nothing was changed."
        )
        return _page(request, req, status=422, refused=[refused])
    try:
        req = services.open_pull_request(req, acting_user=request.user)
    except ValidationError as exc:  # the request moved on since the page was drawn
        return _page(request, req, status=422, refused=[*exc.messages, "Nothing was changed."])
    if req.error:
        messages.error(request, req.error)
    else:
        messages.success(request, f"Pull request #{req.change_id} is open.")
    return _back(req)


# --- notifications --------------------------------------------------------------------------


def _inbox(request: HttpRequest) -> QuerySet[Notification]:
    """The signed-in user's own notifications: nobody reaches another's."""
    user: Any = request.user
    return Notification.objects.filter(user=user)


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    mine = _inbox(request).select_related("request")
    page = Paginator(mine, 50).get_page(request.GET.get("page"))
    return render(request, "catalog/notifications.html", {"page": page})


@login_required
@require_POST
def notifications_read(request: HttpRequest) -> HttpResponse:
    """Mark every unread notification read, or one (``?id=``); with ``open``, go to it."""
    unread = _inbox(request).filter(read_at__isnull=True)
    number = request.GET.get("id") or request.POST.get("id")
    if not number:
        count = unread.update(read_at=timezone.now())
        messages.success(request, f"{count} notification{'s' if count != 1 else ''} marked read.")
        return redirect("approvals:notifications")
    if not number.isdigit():
        raise Http404("No such notification.")
    notice = get_object_or_404(_inbox(request), pk=int(number))
    unread.filter(pk=notice.pk).update(read_at=timezone.now())
    safe = url_has_allowed_host_and_scheme(notice.url, allowed_hosts=None)
    if "open" in request.POST and notice.url and safe:
        return redirect(notice.url)
    return redirect("approvals:notifications")


# --- batch job templates --------------------------------------------------------------------


@action_page(Action.MANAGE_JOB_TEMPLATES)
def job_templates(request: HttpRequest) -> HttpResponse:
    """The platform's job templates, and the form for a new one."""
    return _template_page(request, None)


@action_page(Action.MANAGE_JOB_TEMPLATES)
def job_template(request: HttpRequest, name: str) -> HttpResponse:
    return _template_page(request, get_object_or_404(JobTemplate, name=name))


def _template_page(request: HttpRequest, template: JobTemplate | None) -> HttpResponse:
    posted = request.method == "POST"
    form = JobTemplateForm(request.POST if posted else None, instance=template)
    if posted and form.is_valid():
        try:
            saved = jobs.do_save_job_template(
                acting_user=request.user,
                name=template.name if template else form.cleaned_data["name"],
                values=form.values(),
            )
        except ValidationError as exc:
            _add_errors(form, exc)
        else:
            messages.success(request, f"Template {saved.name} saved.")
            return redirect("approvals:job_templates")
    context = {"templates": JobTemplate.objects.all(), "form": form, "editing": template}
    return render(request, "catalog/job_templates.html", context, status=400 if posted else 200)


@action_page(Action.MANAGE_JOB_TEMPLATES)
@require_POST
def job_template_delete(request: HttpRequest, name: str) -> HttpResponse:
    template = get_object_or_404(JobTemplate, name=name)
    jobs.do_delete_job_template(template, acting_user=request.user)
    messages.success(request, f"Template {name} removed.")
    return redirect("approvals:job_templates")
