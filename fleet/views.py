"""Fleet pages: capacity and health for platform admins, node actions, Flux status, and each
tenant's own status page.

The ``/fleet/`` pages answer 404 to anyone but a platform admin, as the rest of the portal does
for what is not yours. Every page reads the cached rows (``fleet.models``), never the cluster,
except the drain confirmation, which must show the pods on the node now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseLocation

from fleet import burnin, lifecycle, netbox, queues, remediation, services
from fleet.capacity import (
    capacity_rows,
    health_counts,
    is_gpu_condition,
    node_uses,
    topology,
    total_requests,
)
from fleet.charts import capacity_figure, figure_html, queue_figure
from fleet.forms import BurnInExpectationForm, PortalDeploymentForm
from fleet.inventory import revision_sha
from fleet.kube import KubeError
from fleet.models import (
    BurnInDomainRun,
    BurnInExpectation,
    BurnInRun,
    FluxObject,
    Health,
    Node,
    NodeLifecycle,
    NodeReservation,
    Remediation,
    SyncState,
    Workload,
)
from fleet.watch import freshness
from gitops.fleet import configured_fleet
from portal.jobs import enqueue
from portal.live import admin_poll, unchanged, version_of
from portal.views import plotly_js_url
from tenants.access import Action, action_page, get_tenant_for_user

View = Callable[..., HttpResponse]
CORDONED = {"yes": True, "no": False}
FLUX_STATES = ("ready", "failed", "progressing", "suspended", "unknown")


def _partial(request: HttpRequest, template: str, name: str) -> str:
    return f"{template}#{name}" if request.htmx else template  # type: ignore[attr-defined]


def _go(request: HttpRequest, url: str) -> HttpResponse:
    """After a POST: htmx follows HX-Location, a plain form a redirect."""
    if request.htmx:  # type: ignore[attr-defined]
        return HttpResponseLocation(url)
    return redirect(url)


def sync_context() -> dict[str, Any]:
    """Every source's last read, the ones whose rows may be out of date (the banner), and
    whether the watches are up (``fleet.watch``)."""
    by_source = services.sync_states()
    states = list(by_source.values())
    return {
        "states": states,
        "stale": [state for state in states if state.stale],
        "freshness": freshness(by_source[SyncState.Source.FLUX]),
    }


def _node(name: str) -> Node:
    return get_object_or_404(Node, name=name)


# --- overview -------------------------------------------------------------------------------------


@action_page(Action.OPERATE_FLEET)
def overview(request: HttpRequest) -> HttpResponse:
    nodes = list(Node.objects.all())
    workloads = list(Workload.objects.exclude(node=""))
    reserved = set(
        NodeReservation.objects.filter(released_at__isnull=True).values_list("node_name", flat=True)
    )
    rows = capacity_rows(configured_fleet(), nodes, workloads, reserved)
    context = {
        **sync_context(),
        "rows": rows,
        "chart": figure_html(capacity_figure(rows)) if rows else "",
        "health": health_counts(nodes),
        "node_count": len(nodes),
        "workload_count": len(workloads),
        "plotly_js_url": plotly_js_url(),
    }
    return render(request, _partial(request, "fleet/overview.html", "overview"), context)


def _enqueue(request: HttpRequest, task: str, title: str) -> HttpResponse:
    with transaction.atomic():
        job = enqueue(task, title=title, created_by=request.user)
    messages.success(request, f"{title}: queued as job {job.pk}.")
    return _go(request, reverse("job_detail", args=[job.pk]))


@action_page(Action.OPERATE_FLEET)
@require_POST
def sync_now(request: HttpRequest) -> HttpResponse:
    return _enqueue(request, "fleet.sync", "Read the cluster")


@action_page(Action.OPERATE_FLEET)
@require_POST
def reconcile_flavors(request: HttpRequest) -> HttpResponse:
    return _enqueue(request, "fleet.reconcile_flavors", "Recount flavors from the inventory")


@action_page(Action.OPERATE_FLEET)
@require_http_methods(["GET", "POST"])
def portal_deployment(request: HttpRequest) -> HttpResponse:
    """Propose the portal's own deployment on this fleet as a change request."""
    form = PortalDeploymentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            change = services.do_propose_portal_deployment(form.spec(), acting_user=request.user)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Opened change #{change.pk} for review.")
            return _go(request, reverse("gitops:detail", args=[change.pk]))
    fleet = configured_fleet()
    context = {"form": form, "fleet": fleet, "tab": "portal"}
    return render(request, "fleet/portal_deployment.html", context)


# --- nodes ----------------------------------------------------------------------------------------


@action_page(Action.OPERATE_FLEET)
def node_list(request: HttpRequest) -> HttpResponse:
    flavors = sorted(
        {f.name for f in configured_fleet().flavors}
        | set(Node.objects.exclude(flavor="").values_list("flavor", flat=True).distinct())
    )
    filters = {key: request.GET.get(key, "") for key in ("health", "flavor", "cordoned")}
    nodes = Node.objects.annotate(
        lifecycle_state=Subquery(
            NodeLifecycle.objects.filter(node_name=OuterRef("name")).values("state")[:1]
        ),
        reserved_for=Subquery(
            NodeReservation.objects.filter(
                node_name=OuterRef("name"), accepted_at__isnull=False, released_at__isnull=True
            ).values("tenant_slug")[:1]
        ),
    )
    if filters["health"] in Health.values:
        nodes = nodes.filter(health=filters["health"])
    if filters["flavor"] in flavors:
        nodes = nodes.filter(flavor=filters["flavor"])
    if filters["cordoned"] in CORDONED:
        nodes = nodes.filter(unschedulable=CORDONED[filters["cordoned"]])
    context = {
        "uses": node_uses(nodes, Workload.objects.exclude(node="")),
        "filters": filters,
        "flavors": flavors,
        "healths": Health.choices,
        **sync_context(),
    }
    return render(request, _partial(request, "fleet/nodes.html", "nodes"), context)


def _conditions(node: Node) -> list[dict[str, Any]]:
    """The stored conditions as rows to show; an entry that is not a mapping is left out."""
    rows = []
    for item in node.conditions if isinstance(node.conditions, list) else []:
        if isinstance(item, Mapping):
            since = str(item.get("last_transition") or "")
            rows.append({**item, "gpu": is_gpu_condition(item.get("type")), "since": _when(since)})
    return rows


def _when(text: str) -> datetime | str:
    """A timestamp as a datetime for ``timesince``; anything else as the API wrote it."""
    try:
        return parse_datetime(text) or text
    except ValueError:  # well formed but not a date, such as month 13
        return text


def _texts(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _taints(node: Node) -> list[tuple[str, str, str]]:
    taints = node.taints if isinstance(node.taints, list) else []
    return [
        (str(t[0]), str(t[1]), str(t[2]))
        for t in taints
        if isinstance(t, list | tuple) and len(t) == 3
    ]


def _resources(node: Node) -> list[tuple[str, Any, Any]]:
    capacity = node.gpu_capacity if isinstance(node.gpu_capacity, Mapping) else {}
    allocatable = node.gpu_allocatable if isinstance(node.gpu_allocatable, Mapping) else {}
    return [
        (r, capacity.get(r, "—"), allocatable.get(r, "—"))
        for r in sorted({*capacity, *allocatable})
    ]


@action_page(Action.OPERATE_FLEET)
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    """The node page; its ``live`` region (health, cordon, burn-in, workloads, staleness)
    polls with ``?since=`` and gets a 204 while nothing it shows has moved."""
    node = _node(name)
    sync = sync_context()
    version = node_version(node, sync)
    if same := unchanged(request, version):
        return same
    context = {
        "node": node,
        "labels": sorted(node.labels.items()) if isinstance(node.labels, Mapping) else [],
        "taints": _taints(node),
        "conditions": _conditions(node),
        "resources": _resources(node),
        "mig_profiles": node.mig_profiles if isinstance(node.mig_profiles, Mapping) else {},
        "reasons": _texts(node.health_reasons),
        "problems": _texts(node.problems),
        "workloads": Workload.objects.filter(node=node.name),
        "incidents": Remediation.objects.filter(node_name=node.name)[:10],
        "reservation": _reservation(node).first(),
        **burn_in_context(node),
        **sync,
        "netbox": netbox.node_context(node.name),
        "node_old": node_is_old(node),
        "stale_after": settings.FLEET_STALE_AFTER_SECONDS,
        "live_version": version,
        "live_poll": admin_poll(),
    }
    return render(request, _partial(request, "fleet/node.html", "live"), context)


def _reservation(node: Node) -> QuerySet[NodeReservation]:
    return NodeReservation.objects.filter(node_name=node.name, released_at__isnull=True)


def node_is_old(node: Node) -> bool:
    """Not read by a sync for longer than ``FLEET_STALE_AFTER_SECONDS``: the page may show a
    node that has changed, or gone, since."""
    limit = timedelta(seconds=settings.FLEET_STALE_AFTER_SECONDS)
    return timezone.now() - node.last_seen > limit


def node_version(node: Node, sync: Mapping[str, Any]) -> str:
    """What the node's live region shows: the node's row (``last_seen`` moves at every sync,
    so the "read ... ago" line stays true), its lifecycle, burn-in runs and its domain's
    runs, GPU pods, open reservation, incidents, and which cluster sources are stale."""
    runs = BurnInRun.objects.filter(node_name=node.name)
    domains = BurnInDomainRun.objects.filter(clique=node.clique) if node.clique else None
    return version_of(
        [getattr(node, field.attname) for field in Node._meta.concrete_fields],
        node_is_old(node),
        [(s.source, s.stale, s.last_success, s.error) for s in sync["states"]],
        sync["freshness"].watching,
        list(NodeLifecycle.objects.filter(node_name=node.name).values()),
        list(runs.values()[:20]),
        list(domains.values()[:20]) if domains is not None else [],
        list(Workload.objects.filter(node=node.name).values()),
        list(_reservation(node).values()),
        list(Remediation.objects.filter(node_name=node.name).values()[:10]),
    )


def burn_in_context(node: Node) -> dict[str, Any]:
    """The node's lifecycle and its burn-in runs, newest first, with the tests across its
    NVLink domain it took part in as a ready peer."""
    runs = list(BurnInRun.objects.filter(node_name=node.name).select_related("domain_run")[:20])
    return {
        "lifecycle": lifecycle.get(node.name),
        "runs": runs,
        "running": any(r.outcome == BurnInRun.Outcome.RUNNING for r in runs),
        "peer_runs": _peer_runs(node),
    }


def _peer_runs(node: Node, limit: int = 10) -> list[BurnInDomainRun]:
    """The newest domain runs of the node's NVLink domain it took part in as a ready peer,
    read from the domain's recent runs (a JSON ``contains`` lookup is PostgreSQL-only, and
    the demo runs on SQLite)."""
    if not node.clique:
        return []
    recent = BurnInDomainRun.objects.filter(clique=node.clique)[:200]
    return [run for run in recent if node.name in (run.peers or [])][:limit]


@action_page(Action.OPERATE_FLEET)
@require_http_methods(["GET", "POST"])
def burn_in_settings(request: HttpRequest) -> HttpResponse:
    """The expected NCCL bus bandwidth per GPU product, which platform admins set."""
    form = BurnInExpectationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            burnin.do_set_expectation(
                form.cleaned_data["product"],
                form.cleaned_data["busbw_gbps"],
                acting_user=request.user,
                scope=form.cleaned_data["scope"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            product = form.cleaned_data["product"]
            messages.success(request, f"Saved the expected bandwidth of {product}.")
            return _go(request, reverse("fleet:burn_in_settings"))
    products = sorted(set(Node.objects.exclude(product="").values_list("product", flat=True)))
    share = burnin.pass_share()
    context = {
        "form": form,
        "expectations": [
            (product, scope.label, gbps, gbps * share)
            for scope in BurnInExpectation.Scope
            for product, gbps in burnin.expectations(scope).items()
        ],
        "products": products,
        "pass_share": share,
        "tab": "nodes",
    }
    return render(request, "fleet/burn_in.html", context)


@action_page(Action.OPERATE_FLEET)
@require_POST
def node_burn_in(request: HttpRequest, name: str) -> HttpResponse:
    node = _node(name)
    try:
        burnin.do_run_burn_in(node.name, acting_user=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{node.name} is cordoned and in burn-in.")
    return _go(request, reverse("fleet:node", args=[node.name]))


@action_page(Action.OPERATE_FLEET)
@require_POST
def node_mark_ready(request: HttpRequest, name: str) -> HttpResponse:
    node = _node(name)
    try:
        burnin.do_mark_ready(
            node.name, acting_user=request.user, reason=request.POST.get("reason", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{node.name} is marked ready.")
    return _go(request, reverse("fleet:node", args=[node.name]))


def _set_cordon(request: HttpRequest, name: str, *, cordon: bool) -> HttpResponse:
    node = _node(name)
    reason = request.POST.get("reason", "").strip()
    try:
        services.do_cordon(node, acting_user=request.user, cordon=cordon, reason=reason)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        done = "cordoned: no new pods are placed on it" if cordon else "schedulable again"
        messages.success(request, f"{node.name} is {done}.")
    return _go(request, reverse("fleet:node", args=[node.name]))


@action_page(Action.OPERATE_FLEET)
@require_POST
def node_cordon(request: HttpRequest, name: str) -> HttpResponse:
    return _set_cordon(request, name, cordon=True)


@action_page(Action.OPERATE_FLEET)
@require_POST
def node_uncordon(request: HttpRequest, name: str) -> HttpResponse:
    return _set_cordon(request, name, cordon=False)


def _drain_context(node: Node, **extra: Any) -> dict[str, Any]:
    """The live drain plan with each pod's tenant, or the API's error (and no plan)."""
    try:
        plan = services.drain_plan(node)
    except KubeError as exc:
        return {"node": node, "plan": None, "error": str(exc), **extra}
    return {
        "node": node,
        "plan": plan,
        "evict": plan.owners(),
        "error": "",
        **extra,
    }


def _confirmed(context: dict[str, Any], refs: list[str]) -> services.DrainPlan:
    """The live plan cut down to the pods the admin saw and confirmed: a pod that arrived
    since the page was shown is not evicted by surprise (the cordon keeps new ones away)."""
    plan: services.DrainPlan = context["plan"]
    chosen = set(refs)
    return dataclasses.replace(
        plan, evict=tuple(p for p in plan.evict if f"{p.namespace}/{p.name}" in chosen)
    )


@action_page(Action.OPERATE_FLEET)
@require_http_methods(["GET", "HEAD", "POST"])
def node_drain(request: HttpRequest, name: str) -> HttpResponse:
    node = _node(name)
    if request.method != "POST":
        return render(request, "fleet/drain.html", _drain_context(node))
    typed = request.POST.get("confirm", "").strip()
    reason = request.POST.get("reason", "").strip()
    if typed != node.name:
        mismatch = f"Type the node name {node.name} to confirm; nothing was changed."
        context = _drain_context(node, mismatch=mismatch, reason=reason)
        return render(request, "fleet/drain.html", context, status=422)
    context = _drain_context(node, reason=reason)
    if context["plan"] is None:
        return render(request, "fleet/drain.html", context, status=422)
    plan = _confirmed(context, request.POST.getlist("pod"))
    try:
        job = services.do_drain(node, acting_user=request.user, plan=plan, reason=reason)
    except ValidationError as exc:
        context["error"] = " ".join(exc.messages)
        return render(request, "fleet/drain.html", context, status=422)
    evicting = len(plan.evict)
    messages.success(
        request, f"{node.name} is cordoned; evicting {evicting} pod{pluralize(evicting)}."
    )
    if arrived := len(context["plan"].evict) - evicting:
        messages.warning(
            request,
            f"{arrived} pod{pluralize(arrived)} arrived after you looked; "
            f"{'it stays' if arrived == 1 else 'they stay'} for now.",
        )
    return _go(request, reverse("job_detail", args=[job.pk]))


# --- topology and Flux ----------------------------------------------------------------------------


@action_page(Action.OPERATE_FLEET)
def topology_page(request: HttpRequest) -> HttpResponse:
    uses = node_uses(Node.objects.all(), Workload.objects.exclude(node=""))
    context = {"domains": topology(uses), "healths": Health.choices, **sync_context()}
    return render(request, "fleet/topology.html", context)


@dataclasses.dataclass(frozen=True)
class FluxRow:
    """A Flux or KServe object with its revisions shortened for a table."""

    obj: FluxObject
    applied: str
    attempted: str

    @property
    def link(self) -> str:
        """The endpoint URL when it is a web address; another scheme is shown, not linked."""
        return self.obj.url if self.obj.url.startswith(("https://", "http://")) else ""


def short_revision(revision: str) -> str:
    """``main@sha1:<40 hex>`` as its first 12 hex digits; a chart version as it is."""
    sha = revision_sha(revision)
    return sha[:12] if sha else revision


def flux_rows(objects: Iterable[FluxObject], state: str = "") -> list[FluxRow]:
    return [
        FluxRow(
            o, short_revision(o.last_applied_revision), short_revision(o.last_attempted_revision)
        )
        for o in objects
        if not state or o.state == state
    ]


@action_page(Action.OPERATE_FLEET)
def flux_status(request: HttpRequest) -> HttpResponse:
    filters = {key: request.GET.get(key, "") for key in ("kind", "state")}
    objects = FluxObject.objects.all()
    if filters["kind"] in FluxObject.Kind.values:
        objects = objects.filter(kind=filters["kind"])
    state = filters["state"] if filters["state"] in FLUX_STATES else ""
    context = {
        "rows": flux_rows(objects, state),
        "filters": filters,
        "kinds": FluxObject.Kind.choices,
        "flux_states": FLUX_STATES,
        **sync_context(),
    }
    return render(request, _partial(request, "fleet/status.html", "objects"), context)


# --- a tenant's own status ------------------------------------------------------------------------


@login_required
def tenant_status(request: HttpRequest, tenant: str) -> HttpResponse:
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):  # after the access check: outsiders get 404
        return HttpResponseNotAllowed(["GET", "HEAD"])
    slug = access.tenant.slug
    workloads = list(Workload.objects.filter(tenant_slug=slug))
    objects = list(FluxObject.objects.filter(tenant_slug=slug))
    clusters = [
        {"name": o.name.removeprefix(f"{slug}-"), "obj": o} for o in objects if o.is_vcluster
    ]
    context = {
        "access": access,
        "tenant": access.tenant,
        "clusters": clusters,
        "rows": flux_rows(objects),
        "workloads": workloads,
        "gpu_use": total_requests(workloads),
        "incidents": remediation.tenant_incidents(slug),
        **sync_context(),
    }
    return render(request, "fleet/tenant_status.html", context)


# --- the queue (Kueue read back: fleet.queues) ----------------------------------------------------


@login_required
def tenant_queue(request: HttpRequest, tenant: str) -> HttpResponse:
    """A tenant's workloads as Kueue queues them, and its quota per flavor; htmx polls the
    ``queue`` fragment."""
    access = get_tenant_for_user(request, tenant)
    if request.method not in ("GET", "HEAD"):  # after the access check: outsiders get 404
        return HttpResponseNotAllowed(["GET", "HEAD"])
    context = {
        "access": access,
        "tenant": access.tenant,
        "board": queues.tenant_queue(access.tenant.pk, access.tenant.slug),
        "poll_seconds": settings.FLEET_SYNC_SECONDS,
        "freshness": freshness(),
    }
    return render(request, _partial(request, "fleet/tenant_queue.html", "queue"), context)


@action_page(Action.OPERATE_FLEET)
def fleet_queues(request: HttpRequest) -> HttpResponse:
    """Every ClusterQueue, the cohort tree, fair shares and the longest waits."""
    board = queues.fleet_queues()
    context = {
        "board": board,
        "chart": figure_html(queue_figure(board.rows)),
        "plotly_js_url": plotly_js_url(),
        "poll_seconds": settings.FLEET_SYNC_SECONDS,
        "freshness": freshness(),
    }
    return render(request, _partial(request, "fleet/queues.html", "queues"), context)
