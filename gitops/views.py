"""Change request pages: the list, a change with its diff, checks and reviews, and actions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render

from gitops import services
from gitops.diffview import render_file_diff
from gitops.merge_queue import queue_position
from gitops.models import ChangeRequest, MergeQueueBatch, MergeQueueEntry, Review
from portal.live import POLL, admin_poll, unchanged, version_of
from tenants.access import Action, may, sees_all_tenants, tenants_where, visible_tenants


@dataclass(frozen=True)
class ChangeAccess:
    change: ChangeRequest
    can_review: bool
    can_merge: bool
    can_close: bool


def visible_changes(user: Any) -> QuerySet[ChangeRequest]:
    """Changes the user may see: all for platform roles, else those of their tenants."""
    if sees_all_tenants(user):
        return ChangeRequest.objects.all()
    slugs = visible_tenants(user).values_list("slug", flat=True)
    return ChangeRequest.objects.filter(tenant_slug__in=list(slugs))


def changes_to_act_on(user: Any) -> QuerySet[ChangeRequest]:
    """The open changes ``user`` can move on: every one for those who review and merge; for
    others their own (to update or close) and those of tenants they may close changes in."""
    changes = visible_changes(user).filter(status=ChangeRequest.Status.OPEN)
    if may(user, Action.REVIEW) or may(user, Action.MERGE):
        return changes
    closable = tenants_where(user, Action.CLOSE).values("slug")
    return changes.filter(Q(author=user) | Q(requested_by=user) | Q(tenant_slug__in=closable))


# The Changes page's tabs: what the person can act on first, then by status.
CHANGE_TABS = {
    "act": "To act on",
    "open": "Open",
    "merged": "Merged",
    "closed": "Closed",
    "all": "All",
}


def get_change_for_user(request: HttpRequest, number: int) -> ChangeAccess:
    """Resolve a change for the signed-in user; 404 when it is not theirs to see."""
    change = visible_changes(request.user).filter(pk=number).first()
    if change is None:
        raise Http404("No such change.")
    user = request.user
    return ChangeAccess(
        change,
        can_review=services.may(user, "review", change),
        can_merge=services.may(user, "merge", change),
        can_close=services.may(user, "close", change),
    )


@login_required
def change_list(request: HttpRequest) -> HttpResponse:
    filters = {
        "status": request.GET.get("status", "act"),
        "tenant": request.GET.get("tenant", ""),
        "kind": request.GET.get("kind", ""),
        "checks": request.GET.get("checks", ""),
    }
    if filters["status"] not in CHANGE_TABS:
        filters["status"] = "act"
    if filters["status"] == "act":
        changes = changes_to_act_on(request.user)
    else:
        changes = visible_changes(request.user)
    if filters["status"] in ChangeRequest.Status.values:
        changes = changes.filter(status=filters["status"])
    changes = changes.select_related("author", "requested_by")
    if filters["tenant"]:
        changes = changes.filter(tenant_slug=filters["tenant"])
    if filters["kind"] in ChangeRequest.Kind.values:
        changes = changes.filter(kind=filters["kind"])
    if filters["checks"] in ChangeRequest.Checks.values:
        changes = changes.filter(checks_state=filters["checks"])
    page = Paginator(changes, 30).get_page(request.GET.get("page"))
    template = "gitops/list.html#changes" if request.htmx else "gitops/list.html"  # type: ignore[attr-defined]
    return render(
        request,
        template,
        {
            "page": page,
            "filters": filters,
            "tabs": CHANGE_TABS,
            "kinds": ChangeRequest.Kind.choices,
            "check_states": ChangeRequest.Checks.choices,
            "queue_visible": may(request.user, Action.MERGE),
            "tenant_slugs": sorted(
                set(visible_changes(request.user).values_list("tenant_slug", flat=True)) - {""}
            ),
        },
    )


def _detail_context(access: ChangeAccess) -> dict[str, Any]:
    change = access.change
    repo = services.repository()
    diffs = [
        render_file_diff(d.path, d.status, d.patch)
        for d in repo.diff(change.base_sha, change.head_sha)
    ]
    approvers, blockers = services.review_summary(change)
    return {
        "access": access,
        "change": change,
        "files": diffs,
        "checks": change.checks.filter(sha=change.head_sha),
        "reviews": change.reviews.select_related("reviewer"),
        "approvers": approvers,
        "blockers": blockers,
        "merge_blockers": services.merge_blockers(change),
        "queue_blockers": services.queue_blockers(change),
        "queue_entry": services.queued_entry(change),
        "review_states": Review.State.choices,
        "partial_may_merge": settings.GITOPS_ALLOW_PARTIAL_CHECKS,
    }


@login_required
def change_detail(request: HttpRequest, number: int) -> HttpResponse:
    access = get_change_for_user(request, number)
    if request.htmx and request.GET.get("part") == "checks":  # type: ignore[attr-defined]
        return render(request, "gitops/detail.html#checks", _detail_context(access))
    change = access.change
    if request.GET.get("part") == "queue":
        return _queue_part(request, change)
    version = version_of(change.updated_at, change.status, change.apply_state)
    if request.GET.get("part") == "apply":
        if same := unchanged(request, version):
            return same
        context = {"change": change, "apply_version": version, "live_poll": POLL}
        return render(request, "gitops/detail.html#apply", context)
    context = {
        **_detail_context(access),
        **queue_status(change),
        "apply_version": version,
        "live_poll": POLL,
    }
    return render(request, "gitops/detail.html", context)


def queue_status(change: ChangeRequest) -> dict[str, Any]:
    """The change's place in the merge queue for its live region: its newest entry, the
    entry's position among the queued ones (1 = next) and how many are queued, and the
    region's version. It polls while the entry is queued or being checked; merged, failed or
    taken out is final for that entry."""
    entry = change.queue_entries.order_by("-enqueued_at", "-id").first()
    active = list(
        MergeQueueEntry.objects.filter(state__in=MergeQueueEntry.ACTIVE).only(
            "state", "enqueued_at"
        )
    )
    positions = queue_position(active)
    position = positions.get(entry.pk) if entry else None
    waiting = entry is not None and entry.state in MergeQueueEntry.ACTIVE
    return {
        "entry": entry,
        "position": position,
        "queued": len(positions),
        "queue_poll": admin_poll() if waiting else "",
        "queue_version": version_of(
            change.updated_at,
            change.status,
            change.checks_state,
            change.apply_state,
            (entry.pk, entry.state, entry.batch_id, entry.reason) if entry else None,
            position,
            len(positions),
        ),
    }


def _queue_part(request: HttpRequest, change: ChangeRequest) -> HttpResponse:
    status = queue_status(change)
    if same := unchanged(request, status["queue_version"]):
        return same
    return render(request, "gitops/detail.html#queue", {"change": change, **status})


def _action(request: HttpRequest, number: int) -> ChangeAccess | HttpResponse:
    """The change for a POST action. Who may act is the service's to refuse (PermissionDenied,
    a 403), as it is for every caller; the view only hides a change from outsiders."""
    access = get_change_for_user(request, number)
    if request.method != "POST":  # after the access check: outsiders get 404, not 405
        return HttpResponseNotAllowed(["POST"])
    return access


def _done(request: HttpRequest, change: ChangeRequest) -> HttpResponse:
    return redirect("gitops:detail", number=change.pk)


@login_required
def change_review(request: HttpRequest, number: int) -> HttpResponse:
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    try:
        services.do_review(
            access.change,
            acting_user=request.user,
            state=request.POST.get("state", ""),
            body=request.POST.get("body", ""),
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Review recorded.")
    return _done(request, access.change)


@login_required
def change_merge(request: HttpRequest, number: int) -> HttpResponse:
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    try:
        change = services.do_merge(access.change, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Merged as {change.merge_sha[:12]}.")
    return _done(request, access.change)


@login_required
def change_close(request: HttpRequest, number: int) -> HttpResponse:
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    try:
        services.do_close(
            access.change, acting_user=request.user, reason=request.POST.get("reason", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Change closed.")
    return _done(request, access.change)


@login_required
def change_update_branch(request: HttpRequest, number: int) -> HttpResponse:
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    if not access.can_merge:
        raise PermissionDenied("Only platform admins update a change's branch.")
    try:
        services.do_update_branch(access.change, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Branch updated onto main; checks are running again.")
    return _done(request, access.change)


@login_required
def change_enqueue(request: HttpRequest, number: int) -> HttpResponse:
    """ "Merge when ready": put the change into the merge queue."""
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    try:
        services.do_enqueue_merge(access.change, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Added to the merge queue; it merges with the next batch.")
    return _done(request, access.change)


@login_required
def change_dequeue(request: HttpRequest, number: int) -> HttpResponse:
    access = _action(request, number)
    if isinstance(access, HttpResponse):
        return access
    try:
        services.do_dequeue(access.change, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Taken out of the merge queue.")
    return _done(request, access.change)


@login_required
def merge_queue(request: HttpRequest) -> HttpResponse:
    """The merge queue for platform admins: what waits (with its place), what is being
    checked, and how the last batches went, with each change's reason. The whole page is a
    live region; an unchanged poll is a 204 after three small reads (``queue_version``)."""
    if not may(request.user, Action.MERGE):
        raise PermissionDenied("Only platform admins see the merge queue.")
    version = queue_version()
    if same := unchanged(request, version):
        return same
    active = list(
        MergeQueueEntry.objects.filter(state__in=MergeQueueEntry.ACTIVE)
        .select_related("change", "enqueued_by", "batch")
        .order_by("enqueued_at", "id")
    )
    finished = (
        MergeQueueEntry.objects.exclude(state__in=MergeQueueEntry.ACTIVE)
        .select_related("change", "enqueued_by", "batch")
        .order_by("-finished_at", "-id")[:50]
    )
    positions = queue_position(active)
    template = "gitops/queue.html#live" if request.htmx else "gitops/queue.html"  # type: ignore[attr-defined]
    return render(
        request,
        template,
        {
            "active": [(positions.get(e.pk), e) for e in active],
            "finished": finished,
            "batches": MergeQueueBatch.objects.all()[:10],
            "batch_size": settings.GITOPS_MERGE_QUEUE_BATCH,
            "live_version": version,
            "live_poll": admin_poll(),
        },
    )


def queue_version() -> str:
    """What the queue page shows moves with the active entries, the newest finished one and
    the last batches (an entry's change title is fixed while it is queued)."""
    return version_of(
        list(
            MergeQueueEntry.objects.filter(state__in=MergeQueueEntry.ACTIVE).values_list(
                "pk", "state", "batch_id"
            )
        ),
        MergeQueueEntry.objects.exclude(state__in=MergeQueueEntry.ACTIVE)
        .order_by("-finished_at", "-id")
        .values_list("pk", "state", "finished_at")
        .first(),
        list(
            MergeQueueBatch.objects.values_list(
                "pk", "state", "merged", "size", "check_runs", "rebuilds", "tip_sha"
            )[:10]
        ),
    )
