"""Putting an endpoint or a tenant cluster to sleep and waking it, through a change in Git.

What the idle policies (and a tenant's wake button) call:

    sleep(resource, reason=..., actor=None)  opens the change that sets ``asleep`` on it
    wake(resource, reason=..., actor=None)   opens the change that clears it
    is_asleep(resource)                      what main holds, not the database

Asleep is part of the resource's spec in Git (``EndpointSpec.asleep``,
``TenantClusterSpec.asleep``): an endpoint renders ``minReplicas: 0`` with no autoscaler, a
cluster its control plane StatefulSet at 0 replicas (``gitops.render.kserve``,
``gitops.render.vcluster``). The change is rendered from main's spec of the resource with
only ``asleep`` flipped, never from the database, and goes the way of every change: a
catalog request (made by the portal, approved by the standing policy or by the waking member's
role), its pull request, the checks. It then merges without a person's review
(``gitops.policy_merge``) because nothing in it asks for more than the tenant had; the
request's spec is compared with main's at merge time, so only a pure sleep or wake merges
that way. ``merge_ready`` does it, from its own beat entry.

``actor`` None is the portal acting on a policy; a person must hold ``Action.WAKE`` on the
tenant (a non-member sees a 404 before that, in the view).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from catalog import services
from catalog.models import Kind, Resource, ResourceRequest
from catalog.specs import COLLECTION, to_json
from fleet import services as fleet
from gitops import services as gitops
from gitops.policy_merge import do_merge_by_policy
from tenants.access import Action, require
from tenants.models import Tenant

SLEEPERS = (Kind.ENDPOINT, Kind.CLUSTER)
# The policy a merge without review names (the squash commit's Approved-by, the audit row).
POLICY = "a standing idle policy: it only scales what the tenant has to zero or back"
S = ResourceRequest.State


def _on_main(resource: Resource) -> Any:
    """The resource's spec as main holds it; a ValidationError if it cannot sleep."""
    if resource.kind not in SLEEPERS:
        raise ValidationError("Only endpoints and tenant clusters can sleep.")
    tenant = gitops.tenant_spec_on_main(resource.tenant.slug)
    items = getattr(tenant, COLLECTION[resource.kind]) if tenant is not None else ()
    item = next((i for i in items if i.name == resource.name), None)
    if item is None or resource.state != Resource.State.ACTIVE:
        raise ValidationError(f"{resource.name} is not running from main.")
    return item


def is_asleep(resource: Resource) -> bool:
    """Whether main holds the resource asleep (False for what cannot sleep or is not there)."""
    try:
        return bool(_on_main(resource).asleep)
    except ValidationError:
        return False


def sleep(resource: Resource, *, reason: str, actor: Any = None) -> ResourceRequest:
    """Open the change that puts ``resource`` to sleep; its request (with the change)."""
    return _flip(resource, asleep=True, reason=reason, actor=actor)


def wake(resource: Resource, *, reason: str, actor: Any = None) -> ResourceRequest:
    """Open the change that wakes ``resource``; its request (with the change)."""
    return _flip(resource, asleep=False, reason=reason, actor=actor)


def _flip(resource: Resource, *, asleep: bool, reason: str, actor: Any) -> ResourceRequest:
    require(actor, Action.WAKE, resource.tenant)
    if not reason.strip():
        raise ValidationError("Say why (the change and the tenant's inbox carry it).")
    with transaction.atomic():
        resource = Resource.objects.select_for_update().get(pk=resource.pk)
        item = _on_main(resource)
        if item.asleep == asleep:
            raise ValidationError(
                f"{resource.name} is already {'asleep' if asleep else 'awake'} on main."
            )
        blocker = services.change_blocker(resource)
        if blocker:
            raise ValidationError(blocker)
        spec = to_json(dataclasses.replace(item, asleep=asleep))
        request = ResourceRequest.objects.create(
            tenant=resource.tenant,
            resource=resource,
            action=ResourceRequest.Action.MODIFY,
            spec=spec,
            reason=reason,
            # A person's wake is theirs (they are told as its requester); a policy's the
            # platform's, as a reservation's end is.
            requested_by=actor if getattr(actor, "pk", None) else None,
        )
        verb = "sleep" if asleep else "wake"
        services._move(request, S.SUBMITTED, actor=actor, note=f"{verb}: {reason}")
        services._move(request, S.APPROVED, actor=None, note=f"approved by {POLICY}")
    return services.open_pull_request(request, acting_user=None)


def _pure_flip(request: ResourceRequest) -> bool:
    """Whether the request only flips ``asleep`` of what main holds now (read at merge time:
    a request whose resource changed on main since is reviewed like any other)."""
    try:
        on_main = to_json(_on_main(request.resource))
    except ValidationError:
        return False
    others = {k: v for k, v in request.spec.items() if k != "asleep"}
    return others == {k: v for k, v in on_main.items() if k != "asleep"} and (
        request.spec.get("asleep") != on_main.get("asleep")
    )


def merge_ready() -> int:
    """Merge the open sleep and wake changes whose checks passed; how many merged. The
    requests then follow their merge as every request does (``services.advance_requests``)."""
    merged = 0
    waiting = ResourceRequest.objects.filter(
        state=S.PR_OPEN,
        action=ResourceRequest.Action.MODIFY,
        resource__kind__in=SLEEPERS,
        change__status="open",
    ).select_related("resource", "tenant", "change")
    for request in waiting:
        if request.change is None or not _pure_flip(request):
            continue
        with transaction.atomic():
            if do_merge_by_policy(request.change, policy=POLICY) is not None:
                merged += 1
    if merged:
        services.advance_requests()
    return merged


# What the first request to a woken endpoint waits for, as the tenant guide explains: the wake
# change's merge and Flux's apply, the pod's scheduling (Kueue admission), the image pull if
# the node does not have the runtime image cached, the model download by the storage
# initializer, and vLLM loading the weights onto the GPUs.
FIRST_REQUEST_WAIT = (
    "Waking goes through a change: once it merges and Flux applies it, the predictor pod is "
    "scheduled, pulls the runtime image (unless the node has it cached), downloads the model "
    "and loads it onto its GPUs. Expect minutes, not seconds, for a large model."
)


@dataclasses.dataclass(frozen=True)
class SleepState:
    """What the catalog shows of a resource that can sleep."""

    asleep: bool
    since: Any  # when main took it asleep (the merge), or None
    pods: int  # predictor pods, or a cluster's synced GPU pods, the read model saw running
    blocked: bool  # another request holds it (its pull request is not merged yet)


def sleep_states(tenant: Tenant, resources: Iterable[Resource]) -> dict[int, SleepState]:
    """{resource pk: its SleepState} for those of ``resources`` that can sleep and run: asleep
    or awake as main holds it (read once), since when main holds it asleep (the merge of the
    change that put it to sleep), and the pods the fleet read model last saw running."""
    sleepers = [r for r in resources if r.kind in SLEEPERS and r.state == Resource.State.ACTIVE]
    if not sleepers:
        return {}
    on_main = gitops.tenant_spec_on_main(tenant.slug)
    states = {}
    for resource in sleepers:
        items = getattr(on_main, COLLECTION[resource.kind]) if on_main is not None else ()
        item = next((i for i in items if i.name == resource.name), None)
        asleep = bool(item is not None and item.asleep)
        since = None
        if asleep:
            since = (
                resource.requests.filter(state__in=[S.MERGED, S.READY], spec__asleep=True)
                .exclude(change__merged_at=None)
                .order_by("-change__merged_at")
                .values_list("change__merged_at", flat=True)
                .first()
            )
        pods = _running_pods(tenant, resource)
        blocked = services.blocking_request(resource) is not None
        states[resource.pk] = SleepState(asleep=asleep, since=since, pods=pods, blocked=blocked)
    return states


def _running_pods(tenant: Tenant, resource: Resource) -> int:
    if resource.kind == Kind.ENDPOINT:
        # KServe's predictor Deployment is <name>-predictor.
        return fleet.running_pods(tenant.slug, f"{resource.name}-predictor-")
    # The GPU pods the cluster's syncer made in the tenant's namespace (the release is the
    # cluster's name): they outlive its control plane until fleet.sleep frees them.
    return fleet.cluster_pods_running(tenant.slug, resource.name)
