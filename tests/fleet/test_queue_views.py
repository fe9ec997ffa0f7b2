"""The queue pages: a tenant's workloads by state with Kueue's reasons, positions and who
preempted them; its quota per flavor from the live ClusterQueue status; the platform admins'
view of every queue and the cohort tree. Rows are written through the watch's own store code
from Kueue-shaped objects (kueue_samples.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import queues, services
from fleet.charts import queue_figure
from fleet.models import QueueWorkload, SyncState, WatchState
from tests.fleet import kueue_samples as k

ALPHA_QUEUE = "/t/alpha/queue/"


def _live() -> None:
    now = timezone.now()
    for kind in queues.KUEUE_WATCHES:
        WatchState.objects.create(kind=kind, connected=True, last_heard=now)
    SyncState.objects.create(
        source=SyncState.Source.POSITIONS, last_attempt=now, last_success=now, items=1
    )


@pytest.fixture
def queue_rows(world: dict[str, Any]) -> dict[str, Any]:
    """alpha: 4 GPUs nominal on h100, 5 in use of which 1 borrowed; a workload of each state.
    bravo: a workload that preempted one of alpha's."""
    _live()
    services.store_cohorts([k.cohort("fleet"), k.cohort("team", parent="fleet")])
    services.store_cluster_queues(
        [
            k.cluster_queue(
                "alpha", nominal=4, used=5, borrowed=1, reserved=6, pending=2, weighted_share=250
            ),
            k.cluster_queue("bravo", cohort="team", nominal=8, used=2, weight="2"),
        ]
    )
    services.store_local_queues([k.local_queue("alpha", used=5, pending=2), k.local_queue("bravo")])
    urgent = k.workload("bravo", "job-urgent", conditions=k.ADMITTED, admitted_to="bravo", gpus=2)
    services.store_queue_workloads(
        [
            urgent,
            k.workload("alpha", "job-run", conditions=k.ADMITTED, admitted_to="alpha", gpus=2),
            k.workload("alpha", "job-wait", conditions=k.WAITING_FOR_QUOTA, gpus=2),
            k.workload(
                "alpha",
                "job-reclaimed",
                conditions=k.preempted("InCohortReclamation", urgent["metadata"]["uid"]),
            ),
            k.workload(
                "alpha",
                "job-bumped",
                conditions=k.preempted("InClusterQueue", "uid-alpha-job-run", "/fleet/alpha"),
            ),
            k.workload("alpha", "job-slow", conditions=k.EVICTED_PODS_READY),
            k.workload("alpha", "job-done", conditions=k.finished(True), admitted_to="alpha"),
        ]
    )
    QueueWorkload.objects.filter(name="job-wait").update(
        position_in_cluster_queue=2, position_in_local_queue=1, positions_read=timezone.now()
    )
    return world


@pytest.mark.django_db
def test_a_tenant_sees_its_workloads_by_state_with_kueues_reasons(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("vic").get(ALPHA_QUEUE).content.decode()
    assert "job-run" in page and "job-done" in page
    assert "job-urgent" not in page  # bravo's
    # Pending: Kueue's reason and message, and 1-based positions (local queue / cluster queue).
    waiting = page.split("job-wait", 1)[1].split("</tr>", 1)[0]
    assert "2 / 3" in waiting and "WaitingForQuota" in waiting
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100" in waiting
    # Preempted by another tenant: the reason, but not the other tenant's workload.
    reclaimed = page.split("job-reclaimed", 1)[1].split("</tr>", 1)[0]
    assert "a workload of another queue in the cohort" in reclaimed
    assert "reclaim: another queue took back quota" in reclaimed
    # Preempted within its own queue: the tenant's own workload is named.
    bumped = page.split("job-bumped", 1)[1].split("</tr>", 1)[0]
    assert "alpha/job-run" in bumped and "priority" in bumped
    assert "PodsReadyTimeout" in page.split("job-slow", 1)[1].split("</tr>", 1)[0]
    # Quota per flavor, two decimals and a unit, borrowing shown as such.
    flavors = page.split("queue-flavors", 1)[1].split("</table>", 1)[0]
    assert "4.00 GPU" in flavors and "5.00 GPU" in flavors
    assert "1.00 GPU borrowed" in flavors
    assert "0.00 GPU" in flavors  # left of its own quota: all 4 used
    assert "1.00 GPU" in flavors  # reserved, not admitted: 6 - 5
    assert "Kueue preempts borrowing workloads to reclaim it" in page
    # Pending 2, preempted 1 + 1, evicted 1.
    assert "<strong>5.00 GPU</strong> in all" in page


@pytest.mark.django_db
def test_the_fragment_polls_without_the_layout(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    fragment = login("bob").get(ALPHA_QUEUE, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<div id="queue"') and "<html" not in fragment
    assert 'hx-trigger="every' in fragment and "job-wait" in fragment


@pytest.mark.django_db
def test_the_tenant_page_warns_when_kueue_is_not_being_read(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    WatchState.objects.update(connected=False)
    page = login("bob").get(ALPHA_QUEUE).content.decode()
    assert "Kueue&#x27;s queues are not being read" in page or "queues are not being read" in page


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["charlie", "fiona_other"])
def test_non_members_get_404_on_the_tenant_queue(
    queue_rows: dict[str, Any], login: Callable[[str], Client], make_user: Any, who: str
) -> None:
    if who == "fiona_other":
        stranger = make_user("stranger")
        client = Client()
        client.force_login(stranger)
    else:
        client = login(who)
    assert client.get(ALPHA_QUEUE).status_code == 404
    assert client.post(ALPHA_QUEUE).status_code == 404
    assert client.get("/t/nosuch/queue/").status_code == 404


@pytest.mark.django_db
def test_the_queue_tab_is_beside_the_others(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("bob").get("/t/alpha/status/").content.decode()
    assert 'href="/t/alpha/queue/"' in page
    assert login("bob").post(ALPHA_QUEUE).status_code == 405


@pytest.mark.django_db
def test_the_tenant_page_costs_a_fixed_number_of_queries(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    client = login("bob")
    counts = []
    for extra in (0, 40):
        services.store_queue_workloads(
            [
                k.workload("alpha", f"job-more-{i}", conditions=k.WAITING_FOR_QUOTA)
                for i in range(extra)
            ]
            + [k.workload("alpha", "job-run", conditions=k.ADMITTED, admitted_to="alpha")]
        )
        with CaptureQueriesContext(connection) as queries:
            assert client.get(ALPHA_QUEUE).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.django_db
def test_platform_admins_see_every_queue_and_the_cohort_tree(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("pam").get("/fleet/queues/").content.decode()
    listing = page.split("queue-list", 1)[1]
    assert 'href="/t/alpha/queue/"' in listing and 'href="/t/bravo/queue/"' in listing
    assert "250" in listing  # alpha's weighted share
    assert "1.00 GPU borrowed" in listing
    # The tree: team under fleet, bravo's queue in team.
    tree = page.split("queue-cohorts", 1)[1].split("</ul>\n", 1)[0]
    assert tree.index("fleet") < tree.index("team") < tree.index("bravo")
    assert "plotly-chart" in page
    fragment = login("pam").get("/fleet/queues/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<div id="queues"')


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alice", "bob", "charlie", "fiona"])
def test_the_fleet_queues_are_refused_to_everyone_else(
    queue_rows: dict[str, Any], login: Callable[[str], Client], who: str
) -> None:
    assert login(who).get("/fleet/queues/").status_code == 404


@pytest.mark.django_db
def test_the_fleet_view_orders_queues_by_their_longest_wait(queue_rows: dict[str, Any]) -> None:
    board = queues.fleet_queues()
    assert [r.queue.name for r in board.rows] == ["alpha", "bravo"]
    assert board.rows[0].longest_wait is not None and board.rows[1].longest_wait is None
    assert board.pending == 2
    (root,) = board.tree
    assert root.name == "fleet" and [c.name for c in root.children] == ["team"]
    assert [str(a) for a in root.borrowed] == ["1.00 GPU"]


def test_the_queue_chart_shows_nominal_own_use_and_borrowed() -> None:
    cq = services._cluster_queue_row(
        services.kueue.parse_cluster_queue(k.cluster_queue("alpha", nominal=4, used=5, borrowed=1)),  # type: ignore[arg-type]
        {},
        timezone.now(),
    )
    row = queues.QueueRow(
        queue=cq, tenant="alpha", flavors=queues.flavor_rows(cq), longest_wait=None
    )
    figure = queue_figure([row])
    by_name = {trace.name: list(trace.y) for trace in figure.data}
    assert by_name == {"Nominal quota": [4.0], "In use (own quota)": [4.0], "Borrowed": [1.0]}
    assert list(figure.data[0].x) == ["alpha<br>h100 (GPU)"]
    assert queue_figure([]).data[0].x is None or list(queue_figure([]).data[0].x) == []


def test_amounts_have_two_decimals_and_a_unit() -> None:
    from decimal import Decimal

    assert str(queues.Amount(Decimal("3.5"), "nvidia.com/gpu")) == "3.50 GPU"
    assert str(queues.Amount(Decimal(2), "nvidia.com/mig-1g.10gb")) == "2.00 MIG 1g.10gb"
    assert str(queues.Amount(Decimal(16 * 2**30), "memory")) == "16.00 GiB"
    assert str(queues.Amount(Decimal(20480), "nvidia.com/gpumem")) == "20.00 GiB GPU memory"


@pytest.mark.django_db
def test_quota_left_comes_from_the_live_queue_and_says_when_it_does_not(
    queue_rows: dict[str, Any], login: Callable[[str], Client]
) -> None:
    from billing.dashboards import quotas

    live = {q.flavor: q for q in quotas({}, "alpha")}
    assert live["h100"].live and live["h100"].allocated == 5  # borrowed GPUs included
    page = login("bob").get("/t/alpha/usage/?range=24h").content.decode()
    assert "Allocated is live, from Kueue" in page
    WatchState.objects.update(connected=False)  # the watch down, no Kueue sync either
    fallback = {q.flavor: q for q in quotas({("alpha", "h100"): (0, 2, 0)}, "alpha")}
    assert not fallback["h100"].live and fallback["h100"].allocated == 2
    page = login("bob").get("/t/alpha/usage/?range=24h").content.decode()
    assert "Allocated is the ledger" in page and "not being read right now" in page


def test_a_gpu_resource_with_neither_quota_nor_use_has_no_row() -> None:
    from fleet.models import ClusterQueueStatus

    cq = ClusterQueueStatus(
        name="alpha",
        quotas={
            "h200": {"nvidia.com/gpu": {"nominal": "4"}, "nvidia.com/gpucores": {"nominal": "0"}},
            "h200-mig": {"nvidia.com/mig-1g.18gb": {"nominal": "0"}},
        },
        usage={"h200-mig": {"nvidia.com/mig-1g.18gb": {"total": "1", "borrowed": "1"}}},
    )
    rows = queues.flavor_rows(cq)
    assert [(r.flavor, r.resource) for r in rows] == [
        ("h200", "nvidia.com/gpu"),
        ("h200-mig", "nvidia.com/mig-1g.18gb"),  # borrowed: shown although its nominal is 0
    ]
