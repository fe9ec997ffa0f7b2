"""Sleep and wake through Git (catalog.idle_actions): the change is rendered from main, checked,
merged by the standing policy, and main then holds the resource asleep (or awake)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from catalog import idle_actions
from catalog.models import Kind, Resource, ResourceRequest
from gitops import services as gitops
from portal.models import AuditEvent
from tests.support.catalog import through_main

S = ResourceRequest.State
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
ENDPOINT = {"name": "chat", "model_uri": "hf://org/chat-model", "share": "train"}
CLUSTER = {"name": "dev"}

pytestmark = pytest.mark.django_db


def _checked(request: ResourceRequest) -> None:
    """The change's checks ran (as a job, in this process) and did not fail: "partial" here,
    as these tests run without ../shared/crds (tests/gitops validates against them)."""
    assert request.change is not None, request.error
    request.change.refresh_from_db()
    assert request.change.checks_state in ("passed", "partial"), request.change.checks_state
    assert request.change.checks_mergeable


@pytest.fixture
def endpoint(world: dict[str, Any], onboarded: Any, run_jobs: Any) -> Resource:
    through_main(world, run_jobs, Kind.GPU_SHARE, SHARE)
    return through_main(world, run_jobs, Kind.ENDPOINT, ENDPOINT)


def test_an_endpoint_sleeps_and_wakesthrough_main(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any
) -> None:
    assert not idle_actions.is_asleep(endpoint)
    main_before = gitops.repository().head("main")
    request = run_jobs(idle_actions.sleep, endpoint, reason="idle for 2 hours")
    assert request.state == S.PR_OPEN and request.requested_by is None
    # Nothing is on main until it merges; is_asleep reads main, not the request.
    assert gitops.repository().head("main") == main_before
    assert not idle_actions.is_asleep(endpoint)
    _checked(request)
    assert run_jobs(idle_actions.merge_ready) == 1
    request.refresh_from_db()
    assert request.state in (S.MERGED, S.READY)
    assert request.change is not None and request.change.status == "merged"
    assert request.change.merged_by is None  # the policy's merge, no person's
    assert idle_actions.is_asleep(endpoint)
    sha = request.change.merge_sha
    isvc = gitops.repository().read_file(sha, "tenants/alpha/workloads/endpoints/chat.yaml")
    assert b"minReplicas: 0" in isvc and b"autoscalerClass: none" in isvc
    assert "Approved-by: none needed: a standing idle policy" in (
        gitops.repository().commit_message(sha)
    )
    assert AuditEvent.objects.filter(action="change.merge", tenant_slug="alpha").exists()
    endpoint.refresh_from_db()
    assert endpoint.spec["asleep"] is True  # the database followed Git

    with pytest.raises(ValidationError, match="already asleep"):
        idle_actions.sleep(endpoint, reason="again")

    woken = run_jobs(idle_actions.wake, endpoint, reason="wanted", actor=world["bob"])
    assert woken.requested_by == world["bob"]
    _checked(woken)
    assert run_jobs(idle_actions.merge_ready) == 1
    assert not idle_actions.is_asleep(endpoint)


def test_a_viewer_may_not_wake_and_bad_input_changes_nothing(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any
) -> None:
    before = ResourceRequest.objects.count()
    with pytest.raises(PermissionDenied, match="Viewers cannot wake"):
        idle_actions.wake(endpoint, reason="please", actor=world["vic"])
    with pytest.raises(PermissionDenied):
        idle_actions.sleep(endpoint, reason="please", actor=world["charlie"])  # not a member
    with pytest.raises(ValidationError, match="already awake"):
        idle_actions.wake(endpoint, reason="please", actor=world["bob"])
    with pytest.raises(ValidationError, match="Say why"):
        idle_actions.sleep(endpoint, reason=" ")
    share = Resource.objects.get(kind=Kind.GPU_SHARE, name="train")
    with pytest.raises(ValidationError, match="Only endpoints and tenant clusters"):
        idle_actions.sleep(share, reason="idle")
    assert ResourceRequest.objects.count() == before


def test_a_change_that_is_not_only_a_sleep_waits_for_review(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any
) -> None:
    request = run_jobs(idle_actions.sleep, endpoint, reason="idle")
    _checked(request)
    # Its spec now asks for more than main's with asleep flipped: not the policy's to merge.
    ResourceRequest.objects.filter(pk=request.pk).update(spec={**request.spec, "max_replicas": 2})
    assert run_jobs(idle_actions.merge_ready) == 0
    request.refresh_from_db()
    assert request.change is not None and request.change.status == "open"


def test_policy_merges_can_be_turned_off(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any, settings: Any
) -> None:
    settings.GITOPS_POLICY_AUTO_MERGE = False
    request = run_jobs(idle_actions.sleep, endpoint, reason="idle")
    _checked(request)
    assert run_jobs(idle_actions.merge_ready) == 0
    assert not idle_actions.is_asleep(endpoint)


def test_a_cluster_sleepsthrough_main(world: dict[str, Any], onboarded: Any, run_jobs: Any) -> None:
    cluster = through_main(world, run_jobs, Kind.CLUSTER, CLUSTER)
    request = run_jobs(idle_actions.sleep, cluster, reason="idle for 8 hours")
    _checked(request)
    assert run_jobs(idle_actions.merge_ready) == 1
    assert idle_actions.is_asleep(cluster)
    assert request.change is not None
    request.change.refresh_from_db()
    release = gitops.repository().read_file(
        request.change.merge_sha, "tenants/alpha/clusters/dev.yaml"
    )
    assert b"highAvailability:\n" in release and b"replicas: 0" in release


# --- the catalog page and its wake button ------------------------------------------------


def test_the_catalog_shows_asleep_since_and_wakes_on_a_click(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any, login: Any
) -> None:
    bob = login("bob")
    page = bob.get("/t/alpha/catalog/").content.decode()
    assert "awake" in page and "Wake</button>" not in page
    request = run_jobs(idle_actions.sleep, endpoint, reason="idle")
    run_jobs(idle_actions.merge_ready)
    request.refresh_from_db()
    assert request.change is not None and request.change.merged_at is not None
    page = bob.get("/t/alpha/catalog/").content.decode()
    assert "asleep" in page and "Wake</button>" in page
    assert f"since {request.change.merged_at:%Y-%m-%d %H:%M} UTC" in page
    assert "0 pods running" in page and "loads it onto its GPUs" in page
    # A viewer sees the state but no button, and may not post.
    vic = login("vic")
    assert "Wake</button>" not in vic.get("/t/alpha/catalog/").content.decode()
    url = f"/t/alpha/resources/{endpoint.pk}/wake/"
    assert vic.post(url).status_code == 403
    # A non-member gets 404, and nothing is opened.
    before = ResourceRequest.objects.count()
    assert login("charlie").post(url).status_code == 404
    assert login("charlie").get(url).status_code == 404
    assert ResourceRequest.objects.count() == before
    assert bob.get(url).status_code == 405
    response = run_jobs(bob.post, url)
    woken = ResourceRequest.objects.latest("pk")
    assert response.status_code == 302 and response["Location"].endswith(f"/{woken.pk}/")
    assert woken.requested_by == world["bob"] and woken.spec["asleep"] is False
    run_jobs(idle_actions.merge_ready)
    assert not idle_actions.is_asleep(endpoint)


def test_idle_reclaim_puts_an_idle_endpoint_to_sleep_and_its_tenant_wakes_it(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any
) -> None:
    """billing.idle acting on an endpoint's case goes through this module: a sleep change the
    policy merges, then the tenant's wake from the idle case opens the change that wakes it."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from billing import idle
    from billing.models import IdleCase, IdleKind, IdlePolicy

    policy = IdlePolicy.objects.create(flavor="h200", threshold_percent=Decimal("5"))
    now = timezone.now()
    case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="tenant-alpha",
        flavor="h200",
        workload="InferenceService/chat",
        kind=IdleKind.ENDPOINT,
        target="chat",
        policy=policy,
        state=IdleCase.State.NOTIFIED,
        utilisation_percent=Decimal("0.50"),
        gpus=Decimal("2"),
        detected_at=now - timedelta(hours=3),
        act_after=now - timedelta(minutes=1),
    )
    assert run_jobs(idle.act, case, None) == IdleCase.State.ACTED
    assert "put to sleep through a Git change" in case.note
    sleep = ResourceRequest.objects.filter(resource=endpoint).latest("pk")
    assert sleep.spec["asleep"] is True and sleep.requested_by is None
    _checked(sleep)
    assert run_jobs(idle_actions.merge_ready) == 1
    assert idle_actions.is_asleep(endpoint)
    # Acting again (another pass) finds it asleep on main and opens nothing more.
    count = ResourceRequest.objects.filter(resource=endpoint).count()
    assert run_jobs(idle.act, case, None) == IdleCase.State.ACTED
    assert ResourceRequest.objects.filter(resource=endpoint).count() == count

    case.state = IdleCase.State.ACTED
    case.acted_at = now
    case.save()
    with pytest.raises(PermissionDenied):
        idle.do_wake(case, acting_user=world["vic"])
    run_jobs(idle.do_wake, case, acting_user=world["bob"])
    case.refresh_from_db()
    assert case.state == IdleCase.State.WOKEN
    wake = ResourceRequest.objects.filter(resource=endpoint).latest("pk")
    assert wake.spec["asleep"] is False and wake.requested_by == world["bob"]
    _checked(wake)
    assert run_jobs(idle_actions.merge_ready) == 1
    assert not idle_actions.is_asleep(endpoint)


def test_an_idle_case_ends_when_its_endpoint_is_woken_from_the_catalog(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any
) -> None:
    """Woken through the catalog's button (not the case's), the acted case ends with it: it
    stops counting reclaimed hours, and the workload may be found idle again later."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from billing import idle
    from billing.models import IdleCase, IdleKind, IdlePolicy, ReclaimedHour, UsageHour

    policy = IdlePolicy.objects.create(flavor="h200", threshold_percent=Decimal("5"))
    now = timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    for back in (1, 2):  # idle in the ledger all along: only the catalog's state ends it
        UsageHour.objects.create(
            hour=this_hour - back * timedelta(hours=1),
            tenant_slug="alpha",
            namespace="tenant-alpha",
            flavor="h200",
            workload="ReplicaSet/chat-predictor-6d5f8c7b9c",
            source="exporter",
            allocated_gpu_seconds=Decimal(7200),
            used_gpu_seconds=Decimal(0),
            observed_seconds=3600,
        )
    case = IdleCase.objects.create(
        tenant=world["alpha"],
        namespace="tenant-alpha",
        flavor="h200",
        workload="ReplicaSet/chat-predictor-6d5f8c7b9c",
        kind=IdleKind.ENDPOINT,
        target="chat",
        policy=policy,
        state=IdleCase.State.NOTIFIED,
        utilisation_percent=Decimal("0.50"),
        gpus=Decimal("2"),
        detected_at=now - timedelta(hours=3),
        act_after=now - timedelta(minutes=1),
    )
    assert run_jobs(idle.evaluate, now=now).acted == 1
    case.refresh_from_db()
    assert case.state == IdleCase.State.ACTED
    # The sleep change is not merged yet: main holds it awake, but the case stays acted.
    assert run_jobs(idle.evaluate, now=now).closed == 0
    assert run_jobs(idle_actions.merge_ready) == 1
    assert run_jobs(idle.evaluate, now=now + timedelta(minutes=5)).closed == 0

    run_jobs(idle_actions.wake, endpoint, reason="needed now", actor=world["bob"])
    # Its wake change on the way: still acted.
    assert run_jobs(idle.evaluate, now=now + timedelta(minutes=6)).closed == 0
    assert run_jobs(idle_actions.merge_ready) == 1
    assert run_jobs(idle.evaluate, now=now + timedelta(minutes=10)).closed == 1
    case.refresh_from_db()
    assert (case.state, case.ended_by) == (IdleCase.State.WOKEN, None)
    assert "awake on main again" in case.note
    assert case.ended_at == now + timedelta(minutes=10)
    assert sum(r.gpu_hours for r in ReclaimedHour.objects.filter(case=case)) == Decimal("0.333")
