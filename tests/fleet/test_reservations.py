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

from fleet import remediation, reservations, services
from fleet.capacity import capacity_rows, domain_free_gpus
from fleet.kube import Kube
from fleet.models import Node, NodeReservation, Remediation, RemediationEvent, Workload
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
        "h200-07: bravo's work still runs there (1 pods); drain the node first "
        '(the "Drain, then release" button).'
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


# --- drained on confirm ------------------------------------------------------------------------


def _budget(sim: Simulator, namespace: str, pod: str, min_available: Any) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget over the pod's labels, its status written by the
    simulator's disruption controller (a tick)."""
    labels = sim.get_object("pods", namespace, pod)["metadata"]["labels"]
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": namespace, "generation": 1},
        "spec": {"selector": {"matchLabels": labels}, "minAvailable": min_available},
    }
    sim.put_object("poddisruptionbudgets", budget)
    sim.tick()
    return budget


def _pods_on(name: str, namespace: str | None = None) -> list[str]:
    with Kube() as kube:
        pods = kube.list_pods(node=name)
    return [
        p["metadata"]["name"]
        for p in pods
        if namespace is None or p["metadata"]["namespace"] == namespace
    ]


def _round() -> remediation.StepReport:
    """What the scheduled sync does: read the fleet, follow main, mark, a remediation round."""
    services.sync_all()
    reservations.follow()
    with Kube() as kube:
        reservations.apply_marks(kube)
    return remediation.step()


def _until(state: str, node: str, rounds: int = 4) -> Remediation:
    """Rounds until the node's drain incident is in ``state`` (each round moves it one on)."""
    for _ in range(rounds):
        incident = Remediation.objects.filter(node_name=node).first()
        if incident is not None and incident.state == state:
            return incident
        _round()
    incident = Remediation.objects.get(node_name=node)
    assert incident.state == state, (incident.state, incident.blocked)
    return incident


def _cordoned(sim: Simulator, name: str) -> bool:
    return sim.get_object("nodes", "", name)["spec"].get("unschedulable") is True


def test_reserving_a_busy_node_drains_it_on_confirm_then_opens_the_change(
    sim: Simulator, world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    node = "h200-01"
    vision = _pods_on(node, "vision")
    assert vision, "the demo runs vision's work on h200-01"
    with pytest.raises(ValidationError):
        reservations.do_reserve_nodes("bravo", [node], acting_user=world["pam"])
    budget = _budget(sim, "vision", vision[0], min_available="100%")
    (incident,) = remediation.do_drain_then(
        "bravo", [node], release=False, acting_user=world["pam"]
    )
    assert incident.state == Remediation.State.DRAINING and "vision" in incident.tenants
    assert _cordoned(sim, node)
    assert AuditEvent.objects.filter(action="fleet.drain_then_reserve").exists()
    # Asked again meanwhile, for anyone: refused.
    with pytest.raises(ValidationError) as caught:
        reservations.do_reserve_nodes("bravo", [node], acting_user=world["pam"])
    assert f"{node}: being drained to be reserved for bravo." in caught.value.messages
    # The budget holds one pod: recorded, and no change opens.
    report = _round()
    incident.refresh_from_db()
    assert incident.state == Remediation.State.DRAINING
    assert vision[0] in incident.blocked and any(vision[0] in line for line in report.held)
    assert not ChangeRequest.objects.filter(title=f"Reserve {node} for bravo").exists()
    # The budget allows it: the drain ends, then the change opens as pam.
    budget["spec"]["minAvailable"] = 0
    budget["metadata"]["generation"] = 2
    sim.put_object("poddisruptionbudgets", budget)
    sim.tick()
    incident = _until(Remediation.State.WAITING_CHANGE, node)
    assert _pods_on(node, "vision") == []
    assert RemediationEvent.objects.filter(remediation=incident, action="evict").exists()
    change = ChangeRequest.objects.get(title=f"Reserve {node} for bravo")
    assert change.author == world["pam"]
    assert _cordoned(sim, node)  # until main holds it and the node carries the mark
    _merge(change, world, make_user)
    incident = _until(Remediation.State.RETURNED, node)
    assert incident.closed_at is not None
    assert not _cordoned(sim, node)
    assert _mark(sim, node)[0] == "bravo"


def test_releasing_drains_the_owner_work_then_opens_the_change(
    sim: Simulator, world: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    _merge(reservations.do_reserve_nodes("bravo", OWN, acting_user=world["pam"]), world, make_user)
    _round()
    sim.put_object(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "train-0",
                "namespace": "bravo",
                "uid": "0b7d1c52-train-0",
                "labels": {"app": "train"},
            },
            "spec": {
                "nodeName": "h200-07",
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        },
    )
    services.sync_all()
    with pytest.raises(ValidationError):
        reservations.do_release_nodes("bravo", ["h200-07"], acting_user=world["pam"])
    remediation.do_drain_then("bravo", ["h200-07"], release=True, acting_user=world["pam"])
    assert _cordoned(sim, "h200-07")
    _until(Remediation.State.WAITING_CHANGE, "h200-07")
    assert _pods_on("h200-07", "bravo") == []
    release = ChangeRequest.objects.get(title="Release h200-07 from bravo")
    _merge(release, world, make_user)
    _until(Remediation.State.RETURNED, "h200-07")
    assert not _cordoned(sim, "h200-07")
    assert _mark(sim, "h200-07") == (None, [])
    release.refresh_from_db()
    assert NodeReservation.objects.get(node_name="h200-07").released_at == release.merged_at


@pytest.mark.parametrize(
    ("slug", "release", "reason"),
    [
        ("alpha", False, "alpha is a shared tenant; only a dedicated tenant gets nodes"),
        ("bravo", True, "h200-01: not reserved for bravo on main."),
    ],
)
def test_a_drain_the_change_would_refuse_cordons_nothing(
    sim: Simulator, world: dict[str, Any], slug: str, release: bool, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        remediation.do_drain_then(slug, ["h200-01"], release=release, acting_user=world["pam"])
    assert any(reason in message for message in caught.value.messages), caught.value.messages
    assert not Remediation.objects.exists()
    assert not _cordoned(sim, "h200-01")


def test_a_drain_past_the_guard_is_refused(sim: Simulator, world: dict[str, Any]) -> None:
    policy = remediation.RemediationPolicy.current()
    policy.guard_percent, policy.guard_min_nodes = 0, 1
    policy.save()
    with pytest.raises(ValidationError) as caught:
        remediation.do_drain_then(
            "bravo", ["h200-01", "h200-02"], release=False, acting_user=world["pam"]
        )
    assert "h200-02: pool" in caught.value.messages[0]
    assert "more than 1 nodes cordoned at once" in caught.value.messages[0]
    assert not Remediation.objects.exists()
    assert not _cordoned(sim, "h200-01")
    with pytest.raises(PermissionDenied):
        remediation.do_drain_then("bravo", ["h200-01"], release=False, acting_user=world["charlie"])


def test_the_form_drains_on_confirm(
    sim: Simulator, world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = reverse("fleet:reservations")
    for outsider in ("alice", "charlie"):
        assert (
            login(outsider)
            .post(page, {"tenant": "bravo", "nodes": ["h200-01"], "drain": "on"})
            .status_code
            == 404
        )
    pam = login("pam")
    confirmed = pam.post(page, {"tenant": "bravo", "nodes": ["h200-01"], "drain": "on"})
    assert confirmed["Location"] == reverse("fleet:remediation")
    assert Remediation.objects.get().signal == reservations.DRAIN_RESERVE
    assert _cordoned(sim, "h200-01")
    listing = pam.get(reverse("fleet:remediation"))
    assert b"h200-01" in listing.content


def test_a_drained_node_whose_change_closes_unmerged_is_uncordoned(
    sim: Simulator, world: dict[str, Any]
) -> None:
    remediation.do_drain_then("bravo", ["h200-07"], release=False, acting_user=world["pam"])
    _until(Remediation.State.WAITING_CHANGE, "h200-07")
    change = ChangeRequest.objects.get(title="Reserve h200-07 for bravo")
    _round()  # not merged: the node stays cordoned
    assert _cordoned(sim, "h200-07")
    gitops.do_close(change, acting_user=world["pam"], reason="not now")
    incident = _until(Remediation.State.RETURNED, "h200-07")
    assert "closed unmerged" in incident.events.last().reason
    assert not _cordoned(sim, "h200-07")
    assert not NodeReservation.objects.exists()
    assert _mark(sim, "h200-07") == (None, [])
