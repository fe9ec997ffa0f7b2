"""Reserving whole nodes for a dedicated tenant, end to end against the simulator over HTTP:
the change a platform admin opens, what is refused, the marks the sync puts on the nodes (and
puts back), the rows billing reads, and giving the nodes back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.urls import reverse

from fleet import reservations, services
from fleet.capacity import capacity_rows, domain_free_gpus
from fleet.kube import Kube
from fleet.models import Node, NodeReservation, Workload
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.render.reservations import RESERVED_KEY
from gitops.specs import TenantSpec
from portal.jobs import enqueue
from portal.models import AuditEvent, Job
from simulator import Simulator
from tenants.models import PlatformRole

pytestmark = [pytest.mark.db_engine, pytest.mark.django_db]
OWN = ["h200-07", "h200-08"]


@pytest.fixture
def sim(
    start_fleet: Callable[..., Simulator],
    world: dict[str, Any],
    merged_change: Callable[..., Any],
) -> Simulator:
    """The demo fleet read once; bravo (dedicated) and alpha (shared) on main."""
    merged_change(TenantSpec(slug="bravo", trust_level="dedicated"))
    merged_change(TenantSpec(slug="alpha"))
    simulator = start_fleet()
    services.sync_all()
    return simulator


def _merge(change: ChangeRequest, world: dict[str, Any], make_user: Callable[..., Any]) -> None:
    """Another platform admin approves and merges (four eyes)."""
    paul = get_user_model().objects.filter(username="paul").first() or make_user("paul")
    PlatformRole.objects.get_or_create(user=paul, role=PlatformRole.Name.PLATFORM_ADMIN)
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    change.refresh_from_db()
    gitops.do_review(change, acting_user=paul, state="approve")
    gitops.do_merge(change, acting_user=paul)


def _mark(sim: Simulator, name: str) -> tuple[str | None, list[dict[str, Any]]]:
    node = sim.get_object("nodes", "", name)
    taints = [t for t in node["spec"].get("taints", []) if t["key"] == RESERVED_KEY]
    return node["metadata"]["labels"].get(RESERVED_KEY), taints


def test_a_reservation_is_a_change_that_marks_the_nodes_once_merged(
    sim: Simulator, world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    change = reservations.do_reserve_nodes("bravo", OWN, acting_user=world["pam"])
    assert change.kind == ChangeRequest.Kind.PLATFORM and change.tenant_slug == "bravo"
    assert "tenants/bravo/spec/reservations/h200-07.json" in change.files_changed
    assert "tenants/bravo/queues.yaml" in change.files_changed
    rows = NodeReservation.objects.filter(tenant_slug="bravo")
    assert sorted(rows.values_list("node_name", "gpus", "gpu_product")) == [
        ("h200-07", 8, "NVIDIA-H200"),
        ("h200-08", 8, "NVIDIA-H200"),
    ]
    # Nothing is real until main holds it.
    with Kube() as kube:
        assert reservations.apply_marks(kube) == []
    assert _mark(sim, "h200-07") == (None, [])

    _merge(change, world, make_user)
    reservations.follow()
    change.refresh_from_db()
    assert set(rows.values_list("accepted_at", flat=True)) == {change.merged_at}
    with Kube() as kube:
        lines = reservations.apply_marks(kube)
    assert lines == [f"h200-07: {RESERVED_KEY}=bravo", f"h200-08: {RESERVED_KEY}=bravo"]
    taint = {"key": RESERVED_KEY, "value": "bravo", "effect": "NoSchedule"}
    assert _mark(sim, "h200-07") == ("bravo", [taint])
    audit = AuditEvent.objects.filter(action="fleet.mark_reserved_node")
    assert audit.count() == 2
    # Idempotent, and a mark taken off by hand is put back by the next sync.
    with Kube() as kube:
        assert reservations.apply_marks(kube) == []
        node = kube.read_node("h200-08")
        kube.json_patch_node(
            "h200-08",
            [
                {"op": "remove", "path": "/metadata/labels/ai-factory.io~1reserved-for"},
                {
                    "op": "replace",
                    "path": "/spec/taints",
                    "value": [t for t in node["spec"]["taints"] if t["key"] != RESERVED_KEY],
                },
            ],
        )
    services.sync_all()
    with Kube() as kube:
        assert reservations.apply_marks(kube) == [f"h200-08: {RESERVED_KEY}=bravo"]
    assert _mark(sim, "h200-08") == ("bravo", [taint])


@pytest.mark.parametrize(
    ("slug", "nodes", "reason"),
    [
        ("alpha", ["h200-07"], "alpha is a shared tenant; only a dedicated tenant gets nodes"),
        ("zulu", ["h200-07"], "There is no tenant 'zulu' on main"),
        ("bravo", ["nope-01"], "nope-01: there is no such node in the inventory."),
        ("bravo", ["h200-mig-01"], "nodes are reserved from whole-GPU pools"),
        ("bravo", ["h200-01"], "h200-01: runs other tenants' work (vision/"),
        ("bravo", [], "Choose at least one node."),
    ],
)
def test_bad_reservations_are_refused_and_nothing_is_written(
    sim: Simulator, world: dict[str, Any], slug: str, nodes: list[str], reason: str
) -> None:
    before = ChangeRequest.objects.count()
    with pytest.raises(ValidationError) as caught:
        reservations.do_reserve_nodes(slug, nodes, acting_user=world["pam"])
    assert any(reason in message for message in caught.value.messages), caught.value.messages
    assert ChangeRequest.objects.count() == before
    assert not NodeReservation.objects.exists()


def test_a_node_reserved_or_asked_for_already_is_refused(
    sim: Simulator, world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    change = reservations.do_reserve_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    with pytest.raises(ValidationError) as caught:
        reservations.do_reserve_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    assert caught.value.messages == ["h200-07: an open change already reserves it for bravo."]
    _merge(change, world, make_user)
    with pytest.raises(ValidationError) as caught:
        reservations.do_reserve_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    assert caught.value.messages == ["h200-07: already reserved for this tenant."]


def test_only_platform_admins_reserve(sim: Simulator, world: dict[str, Any]) -> None:
    with pytest.raises(PermissionDenied):
        reservations.do_reserve_nodes("bravo", OWN, acting_user=world["charlie"])


def test_releasing_waits_for_the_tenant_work_and_takes_the_marks_off(
    sim: Simulator, world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    _merge(
        reservations.do_reserve_nodes("bravo", OWN, acting_user=world["pam"]),
        world,
        make_user,
    )
    reservations.follow()
    with Kube() as kube:
        reservations.apply_marks(kube)
    pod = Workload.objects.create(
        namespace="bravo", name="train-0", node="h200-07", phase="Running"
    )
    with pytest.raises(ValidationError) as caught:
        reservations.do_release_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    assert caught.value.messages == [
        "h200-07: bravo's work still runs there (1 pods); drain the node first."
    ]
    pod.delete()
    release = reservations.do_release_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    assert "tenants/bravo/spec/reservations/h200-07.json" in release.files_changed
    _merge(release, world, make_user)
    reservations.follow()
    release.refresh_from_db()
    row = NodeReservation.objects.get(node_name="h200-07")
    assert row.released_at == release.merged_at
    assert row.accepted_at is not None and row.accepted_at < row.released_at
    services.sync_all()
    with Kube() as kube:
        assert reservations.apply_marks(kube) == ["h200-07: mark removed"]
    assert _mark(sim, "h200-07") == (None, [])
    assert _mark(sim, "h200-08")[0] == "bravo"


def test_the_pages_are_for_platform_admins_and_mark_reserved_nodes(
    sim: Simulator,
    world: dict[str, Any],
    make_user: Callable[..., Any],
    login: Callable[[str], Client],
) -> None:
    page = reverse("fleet:reservations")
    for outsider in ("alice", "charlie", "fiona"):
        release = reverse("fleet:release_node", args=["h200-07"])
        assert login(outsider).get(page).status_code == 404
        assert login(outsider).post(release).status_code == 404
    pam = login("pam")
    listing = pam.get(page)
    assert listing.status_code == 200
    assert b"No node is reserved." in listing.content
    refused = pam.post(page, {"tenant": "bravo", "nodes": ["h200-01"]})
    assert refused.status_code == 200
    assert b"h200-01: runs other tenants&#x27; work" in refused.content
    assert not NodeReservation.objects.exists()
    opened = pam.post(page, {"tenant": "bravo", "nodes": OWN})
    change = ChangeRequest.objects.get(title="Reserve h200-07, h200-08 for bravo")
    assert opened["Location"] == reverse("gitops:detail", args=[change.pk])
    _merge(change, world, make_user)
    reservations.follow()
    nodes = pam.get(reverse("fleet:nodes"))
    assert nodes.content.count(b"reserved for bravo") == 2
    node = pam.get(reverse("fleet:node", args=["h200-07"]))
    assert b"Reserved for <strong>bravo</strong>" in node.content
    released = pam.post(reverse("fleet:release_node", args=["h200-07"]))
    release = ChangeRequest.objects.get(title="Release h200-07 from bravo")
    assert released["Location"] == reverse("gitops:detail", args=[release.pk])


def test_the_scheduled_sync_follows_main_and_marks_the_nodes(
    sim: Simulator,
    world: dict[str, Any],
    make_user: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    _merge(reservations.do_reserve_nodes("bravo", OWN, acting_user=world["pam"]), world, make_user)
    with django_capture_on_commit_callbacks(execute=True):
        job = enqueue("fleet.sync", title="sync")
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert f"reservations: h200-07: {RESERVED_KEY}=bravo" in job.log
    assert _mark(sim, "h200-08")[0] == "bravo"
    assert NodeReservation.objects.filter(accepted_at__isnull=False).count() == 2
    assert reservations.reserved_nodes() == {"h200-07": "bravo", "h200-08": "bravo"}


def test_reserved_gpus_are_not_the_shared_pool_free_capacity(
    sim: Simulator,
    world: dict[str, Any],
    make_user: Callable[..., Any],
    login: Callable[[str], Client],
) -> None:
    def h200() -> tuple[int, int]:
        rows = capacity_rows(
            configured_fleet(),
            Node.objects.all(),
            Workload.objects.exclude(node=""),
            set(reservations.reserved_nodes()),
        )
        row = next(r for r in rows if r.flavor == "h200")
        return row.free, row.reserved

    free, reserved = h200()
    assert reserved == 0
    domains = sum(domain_free_gpus("h200").values())
    _merge(reservations.do_reserve_nodes("bravo", OWN, acting_user=world["pam"]), world, make_user)
    reservations.follow()
    assert h200() == (free - 16, 16)
    assert sum(domain_free_gpus("h200").values()) == domains - 16
    page = login("pam").get(reverse("fleet:overview")).content.decode()
    assert "<th>Reserved</th>" in page


def test_a_reservation_closed_unmerged_holds_nothing(sim: Simulator, world: dict[str, Any]) -> None:
    first = reservations.do_reserve_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    gitops.do_close(first, acting_user=world["pam"], reason="Not now.")
    again = reservations.do_reserve_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    assert list(NodeReservation.objects.values_list("change_id", flat=True)) == [again.pk]
    gitops.do_close(again, acting_user=world["pam"], reason="Not now either.")
    reservations.follow()
    assert not NodeReservation.objects.exists()
