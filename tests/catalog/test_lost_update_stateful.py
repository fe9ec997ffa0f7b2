"""A stateful property test of issue 24: random interleavings of what people and the portal do
with the requests of two tenants (ask, approve, approve and merge, approve selected, merge by
hand, merge queue runs while its runner is busy or free, Flux applying, the catalog's
advance, cancel, decommission). After every step:

- main holds exactly the spec files of every resource whose last merged request is not a
  decommission (and the base share each tenant was onboarded with), with their manifests;
- every merged change's commit is on main's history (nothing merged was rewritten away);
- no request is reported in a state its pull request contradicts.

Real parts throughout: the bare Git repository, the merge queue, the database, the checks.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from catalog import services
from catalog.models import Resource, ResourceRequest
from gitops import merge_queue
from gitops import services as gitops
from gitops.models import ChangeRequest, MergeQueueEntry
from gitops.specs import GpuShare
from tenants.models import Membership, Role, Tenant
from tenants.specs import tenant_spec

S = ResourceRequest.State
BASE = GpuShare(name="base", flavor="h200", kind="whole", count=4)
NAMES = ("a", "b", "c")
HOLDER = "a runner busy with another batch"
_EXAMPLES = itertools.count()
REACHED: list[int] = []

# A request's state, and what its pull request must then be.
CHANGE_OF = {
    S.PR_OPEN: {"open", "merged"},  # merged and not yet followed: a lag, not a contradiction
    S.DECOMMISSIONING: {"open", "merged"},
    S.MERGED: {"merged"},
    S.READY: {"merged"},
    S.DECOMMISSIONED: {"merged"},
}


def _spec(kind: str, name: str) -> dict[str, Any]:
    if kind == "gpu-share":
        return {"name": f"s{name}", "flavor": "h200", "kind": "whole", "count": 1}
    return {"name": f"e{name}", "model_uri": f"hf://org/{name}", "share": "base"}


class Requests(RuleBasedStateMachine):
    world: dict[str, Any]
    merged_change: Callable[..., Any]
    capture: Any
    django_settings: Any
    tmp: Path

    def __init__(self) -> None:
        super().__init__()
        self.slugs: list[str] = []

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` and the jobs it enqueues, as the in-process runner does."""
        try:
            with self.capture(execute=True):
                result = fn(*args, **kwargs)
        except (ValidationError, PermissionDenied):
            return None  # refused, and nothing changed: part of what may happen
        return result

    @initialize()
    def tenants(self) -> None:
        example = next(_EXAMPLES)
        # A fleet repository of its own: the examples' tenants do not add up on one main.
        self.django_settings.GITOPS_REPO_PATH = str(self.tmp / f"fleet-{example}.git")
        for letter in "xy":
            tenant = Tenant.objects.create(
                slug=f"p{example}{letter}", display_name=f"P {example}{letter}", gpu_quota=64
            )
            Membership.objects.create(user=self.world["bob"], tenant=tenant, role=Role.MEMBER)
            spec = dataclasses.replace(tenant_spec(tenant), shares=(BASE,))
            self.merged_change(spec)
            self.slugs.append(tenant.slug)
            # Requests already waiting, so the first steps have siblings to decide on.
            for kind, name in (("gpu-share", "a"), ("gpu-share", "b"), ("endpoint", "a")):
                self._run(
                    services.do_create_request,
                    tenant,
                    acting_user=self.world["bob"],
                    kind=kind,
                    spec=_spec(kind, name),
                )

    def _requests(self, *states: str) -> list[ResourceRequest]:
        return list(
            ResourceRequest.objects.filter(tenant__slug__in=self.slugs, state__in=states).order_by(
                "pk"
            )
        )

    @rule(
        tenant=st.integers(0, 1),
        kind=st.sampled_from(["gpu-share", "endpoint"]),
        name=st.sampled_from(NAMES),
    )
    def ask(self, tenant: int, kind: str, name: str) -> None:
        self._run(
            services.do_create_request,
            Tenant.objects.get(slug=self.slugs[tenant]),
            acting_user=self.world["bob"],
            kind=kind,
            spec=_spec(kind, name),
        )

    @rule(pick=st.integers(0, 20), merge=st.booleans())
    def approve(self, pick: int, merge: bool) -> None:
        waiting = self._requests(S.SUBMITTED)
        if waiting:
            request = waiting[pick % len(waiting)]
            self._run(services.do_approve, request, acting_user=self.world["pam"], merge=merge)

    @rule(count=st.integers(2, 4))
    def approve_selected(self, count: int) -> None:
        waiting = self._requests(S.SUBMITTED)[:count]
        if waiting:
            self._run(
                services.do_approve_many,
                [r.pk for r in waiting],
                acting_user=self.world["pam"],
                merge=True,
            )

    @rule(pick=st.integers(0, 20))
    def merge_by_hand(self, pick: int) -> None:
        open_ = [r for r in self._requests(S.PR_OPEN, S.DECOMMISSIONING) if r.change]
        open_ = [r for r in open_ if r.change.is_open and not gitops.queued_entry(r.change)]
        if open_:
            change = open_[pick % len(open_)].change
            self._run(gitops.do_merge, change, acting_user=self.world["pam"])

    @rule()
    def queue_runner_busy(self) -> None:
        merge_queue.acquire_lease(HOLDER)

    @rule()
    def queue_runs(self) -> None:
        merge_queue.release_lease(HOLDER)
        self._run(merge_queue.run_queue, "test", lambda line: None)

    @rule()
    def flux_applies(self) -> None:
        # What the fleet sync records when Flux reports the merged revision applied.
        ChangeRequest.objects.filter(
            tenant_slug__in=self.slugs, status="merged", apply_state="pending"
        ).update(apply_state="applied")

    @rule()
    def catalog_advances(self) -> None:
        self._run(services.advance_requests)

    @rule(pick=st.integers(0, 20))
    def cancel(self, pick: int) -> None:
        waiting = self._requests(S.SUBMITTED, S.APPROVED, S.PR_OPEN)
        if waiting:
            request = waiting[pick % len(waiting)]
            self._run(services.do_cancel, request, acting_user=self.world["bob"])

    @rule(pick=st.integers(0, 20))
    def decommission(self, pick: int) -> None:
        active = list(
            Resource.objects.filter(tenant__slug__in=self.slugs, state=Resource.State.ACTIVE)
        )
        if active:
            resource = active[pick % len(active)]
            self._run(services.do_decommission_request, resource, acting_user=self.world["bob"])

    @invariant()
    def main_holds_every_merged_resource(self) -> None:
        if not self.slugs:
            return
        repo, main = gitops.repository(), gitops.main_sha()
        assert main is not None
        for slug in self.slugs:
            expected = {"shares/base"}
            merged = (
                ResourceRequest.objects.filter(tenant__slug=slug, change__status="merged")
                .select_related("change", "resource")
                .order_by("change__merged_at", "change__pk")
            )
            for request in merged:
                key = f"{'shares' if request.kind == 'gpu-share' else 'endpoints'}/"
                key += request.resource.name
                if request.action == ResourceRequest.Action.DECOMMISSION:
                    expected.discard(key)
                else:
                    expected.add(key)
            spec = repo.read_tree(main, f"tenants/{slug}/spec/")
            held = {
                p.split("/spec/", 1)[1].removesuffix(".json")
                for p in spec
                if p.count("/") == 4  # tenants/<slug>/spec/<collection>/<name>.json
            }
            assert held == expected, (slug, held, expected)
            for key in expected:
                if key.startswith("endpoints/"):
                    name = key.split("/", 1)[1]
                    path = f"tenants/{slug}/workloads/endpoints/{name}.yaml"
                    assert repo.read_file(main, path) is not None, path

    @invariant()
    def every_merge_is_in_mains_history(self) -> None:
        repo, main = gitops.repository(), gitops.main_sha()
        for sha in ChangeRequest.objects.filter(
            tenant_slug__in=self.slugs, status="merged"
        ).values_list("merge_sha", flat=True):
            assert main is not None and repo.is_ancestor(sha, main), sha

    @invariant()
    def no_request_contradicts_its_pull_request(self) -> None:
        for request in ResourceRequest.objects.filter(
            tenant__slug__in=self.slugs, state__in=list(CHANGE_OF)
        ).select_related("change"):
            assert request.change is not None, request
            assert request.change.status in CHANGE_OF[request.state], (
                request.title,
                request.state,
                request.change.status,
            )

    def teardown(self) -> None:
        merge_queue.release_lease(HOLDER)
        # The next example has a repository of its own: what this one left queued or open
        # (commits of this repository) is no concern of its queue.
        MergeQueueEntry.objects.filter(
            change__tenant_slug__in=self.slugs, state__in=MergeQueueEntry.ACTIVE
        ).update(state=MergeQueueEntry.State.REMOVED, reason="the example ended")
        ChangeRequest.objects.filter(tenant_slug__in=self.slugs, status="open").update(
            status="closed"
        )
        # How far the example got: the most requests of one tenant merged in it.
        merged = ResourceRequest.objects.filter(
            tenant__slug__in=self.slugs, change__status="merged"
        )
        per_tenant = [merged.filter(tenant__slug=slug).count() for slug in self.slugs]
        REACHED.append(max(per_tenant, default=0))


@pytest.mark.db_engine  # on SQLite as well as PostgreSQL
@pytest.mark.django_db
def test_nothing_merged_is_ever_lost(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    Requests.django_settings = settings
    Requests.tmp = tmp_path
    Requests.world = world
    Requests.merged_change = staticmethod(merged_change)  # type: ignore[assignment]
    Requests.capture = staticmethod(django_capture_on_commit_callbacks)
    run_state_machine_as_test(
        Requests,
        settings=hypothesis_settings(
            max_examples=25,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            database=None,
        ),
    )
    # The examples reached what the property is about: several requests of one tenant merged.
    assert max(REACHED) >= 3, REACHED
