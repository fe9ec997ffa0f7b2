"""The simulator's Kueue scheduler, preemption and visibility API against Kueue's unit tests.

Cases are transcribed from kubernetes-sigs/kueue v0.19.2, each naming its upstream case:
``TestPreemption`` (``pkg/scheduler/preemption/preemption_test.go``, its
``defaultClusterQueues``), ``TestFairPreemptions`` (``preemption_fair_test.go``, its
``baseCQs``: ``a``, ``b``, ``c`` with 3 CPUs each and ``preemptible`` with 0 in cohort
``all``), ``TestSchedule`` (``pkg/scheduler/scheduler_test.go``) and
``TestPendingWorkloadsInCQ`` (``pkg/visibility/storage/pending_workloads_cq_test.go``).

Upstream hands the preemptor's flavor assignment to ``GetTargets``; here the incoming
workload goes through the whole scheduling cycle (assigner, then preemption), with the same
quotas, so the targets must come out the same. Workloads live in namespace ``default``, each
ClusterQueue fed by a LocalQueue of its name; workloads are named as upstream, their uid the
name (candidates tie on it last).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from simulator import visibility
from simulator.kueue import Kueue
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Store,
)
from simulator.workloads import JOB_UID_LABEL, PREEMPTED, condition, holds_quota, workload_name
from tests.simulator.kueue_world import admitted, workload

NOW = 1_700_000_000.0
NS = "default"


def flavor_quotas(flavor: str, **resources: str | tuple[str, ...]) -> dict[str, Any]:
    """``MakeFlavorQuotas(flavor).Resource(name, nominal[, borrowingLimit[, lendingLimit]])``."""
    entries = []
    for name, value in resources.items():
        nominal, borrowing, lending = (*((value,) if isinstance(value, str) else value), "", "")[:3]
        entry: dict[str, Any] = {"name": name, "nominalQuota": nominal}
        if borrowing:
            entry["borrowingLimit"] = borrowing
        if lending:
            entry["lendingLimit"] = lending
        entries.append(entry)
    return {"name": flavor, "resources": entries}


def cq(
    name: str,
    *groups: list[dict[str, Any]],
    cohort: str = "",
    preemption: dict[str, Any] | None = None,
    weight: str = "",
    strategy: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(
                    dict.fromkeys(r["name"] for f in flavors for r in f["resources"])
                ),
                "flavors": flavors,
            }
            for flavors in groups
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if weight:
        spec["fairSharing"] = {"weight": weight}
    if strategy:
        spec["queueingStrategy"] = strategy
    return {"metadata": {"name": name}, "spec": spec}


LOWER, ANY, NEVER = "LowerPriority", "Any", "Never"
BORROW_BELOW_0 = {"policy": "LowerPriority", "maxPriorityThreshold": 0}
# TestPreemption's defaultClusterQueues (those the cases below use).
DEFAULT_QUEUES = [
    cq(
        "standalone",
        [flavor_quotas("default", cpu="6")],
        [flavor_quotas("alpha", memory="3Gi"), flavor_quotas("beta", memory="3Gi")],
        preemption={"withinClusterQueue": LOWER},
    ),
    cq(
        "c1",
        [flavor_quotas("default", cpu=("6", "6"), memory=("3Gi", "3Gi"))],
        cohort="cohort",
        preemption={"withinClusterQueue": LOWER, "reclaimWithinCohort": LOWER},
    ),
    cq(
        "c2",
        [flavor_quotas("default", cpu=("6", "6"), memory=("3Gi", "3Gi"))],
        cohort="cohort",
        preemption={"withinClusterQueue": NEVER, "reclaimWithinCohort": ANY},
    ),
    cq(
        "preventStarvation",
        [flavor_quotas("default", cpu="6")],
        preemption={"withinClusterQueue": "LowerOrNewerEqualPriority"},
    ),
    *(
        cq(
            name,
            [flavor_quotas("default", cpu=quota)],
            cohort="with_shared_cq",
            preemption={
                "withinClusterQueue": within,
                "reclaimWithinCohort": reclaim,
                "borrowWithinCohort": BORROW_BELOW_0,
            },
        )
        for name, quota, within, reclaim in (
            ("a_standard", ("1", "12"), NEVER, LOWER),
            ("b_standard", ("1", "12"), LOWER, ANY),
            ("a_best_effort", ("1", "12"), NEVER, LOWER),
            ("b_best_effort", ("0", "13"), NEVER, LOWER),
        )
    ),
    cq("shared", [flavor_quotas("default", cpu="10")], cohort="with_shared_cq"),
]
FAIR = {
    "withinClusterQueue": LOWER,
    "reclaimWithinCohort": ANY,
    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -3},
}
# TestFairPreemptions' baseCQs.
FAIR_QUEUES = [
    *(
        cq(name, [flavor_quotas("default", cpu="3")], cohort="all", preemption=FAIR)
        for name in ("a", "b", "c")
    ),
    cq("preemptible", [flavor_quotas("default", cpu="0")], cohort="all"),
]


def world(queues: list[dict[str, Any]]) -> Store:
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": NS}}, 0)
    for name in ("default", "alpha", "beta"):
        store.apply(RESOURCE_FLAVORS, {"metadata": {"name": name}, "spec": {}}, 0)
    for queue in queues:
        store.apply(CLUSTER_QUEUES, queue, 0)
        name = queue["metadata"]["name"]
        store.apply(
            LOCAL_QUEUES,
            {"metadata": {"name": name, "namespace": NS}, "spec": {"clusterQueue": name}},
            0,
        )
    return store


def holds(store: Store, name: str, cq_name: str, flavor: str = "default", **kw: Any) -> None:
    """``MakeWorkload(name).Request(...).ReserveQuotaAt(MakeAdmission(cq)...)``; requests
    given as ``cpu="2"`` (and ``priority``, ``created``, ``reserved``)."""
    requests = {k: v for k, v in kw.items() if k in ("cpu", "memory")}
    rest = {k: v for k, v in kw.items() if k not in requests}
    rest.setdefault("created", NOW)
    admitted(
        store, name, NS, cq_name, dict.fromkeys(requests, flavor), uid=name, **rest, **requests
    )


def incoming(store: Store, cq_name: str, name: str = "in", **kw: Any) -> None:
    """``baseIncomingWl``: uid ``wl-in``, job uid ``job-in``."""
    requests = {k: v for k, v in kw.items() if k in ("cpu", "memory")}
    workload(
        store,
        name,
        NS,
        cq_name,
        requests,
        priority=kw.get("priority", 0),
        created=kw.get("created", NOW + 60),
        labels={JOB_UID_LABEL: "job-in"},
        uid="wl-in",
    )


def preempted(store: Store, *, fair: bool = False) -> dict[str, str]:
    """One scheduling cycle; the workloads it preempted and why."""
    Kueue(store, fair_sharing=fair).schedule(NOW + 120)
    found = {}
    for wl in store.list(WORKLOADS):
        cond = condition(wl, PREEMPTED)
        if cond is not None and cond["status"] == "True":
            found[wl["metadata"]["name"]] = cond["reason"]
    return found


# --- TestPreemption ----------------------------------------------------------------------------


def test_preempt_lowest_priority() -> None:
    """ "preempt lowest priority", with its eviction message."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="2")
    holds(store, "mid", "standalone", cpu="2")
    holds(store, "high", "standalone", priority=1, cpu="2")
    incoming(store, "standalone", priority=1, cpu="2")
    assert preempted(store) == {"low": "InClusterQueue"}
    low = store.get(WORKLOADS, NS, "low")
    assert low is not None
    evicted = condition(low, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"]) == ("True", "Preempted")
    assert evicted["message"] == (
        "Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to "
        "prioritization in the ClusterQueue; preemptor path: /standalone; preemptee path: "
        "/standalone"
    )
    assert low["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": "", "count": 1}
    ]
    # The preemptor waits for the eviction, saying so.
    pending = condition(store.get(WORKLOADS, NS, "in") or {}, "QuotaReserved")
    assert pending is not None
    assert pending["message"].endswith(". Pending the preemption of 1 workload(s)")


def test_preempt_multiple() -> None:
    """ "preempt multiple"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="2")
    holds(store, "mid", "standalone", cpu="2")
    holds(store, "high", "standalone", priority=1, cpu="2")
    incoming(store, "standalone", priority=1, cpu="3")
    assert preempted(store) == {"low": "InClusterQueue", "mid": "InClusterQueue"}


def test_no_preemption_for_low_priority() -> None:
    """ "no preemption for low priority"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="3")
    holds(store, "mid", "standalone", cpu="3")
    incoming(store, "standalone", priority=-1, cpu="1")
    assert preempted(store) == {}


def test_not_enough_low_priority_workloads() -> None:
    """ "not enough low priority workloads"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="3")
    holds(store, "mid", "standalone", cpu="3")
    incoming(store, "standalone", cpu="4")
    assert preempted(store) == {}


def test_some_free_quota_preempt_low_priority() -> None:
    """ "some free quota, preempt low priority"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="1")
    holds(store, "mid", "standalone", cpu="1")
    holds(store, "high", "standalone", priority=1, cpu="3")
    incoming(store, "standalone", priority=1, cpu="2")
    assert preempted(store) == {"low": "InClusterQueue"}


def test_minimal_set_excludes_low_priority() -> None:
    """ "minimal set excludes low priority": low goes first, mid makes room, low is put
    back (fillBackWorkloads)."""
    store = world(DEFAULT_QUEUES)
    holds(store, "low", "standalone", priority=-1, cpu="1")
    holds(store, "mid", "standalone", cpu="2")
    holds(store, "high", "standalone", priority=1, cpu="3")
    incoming(store, "standalone", priority=1, cpu="2")
    assert preempted(store) == {"mid": "InClusterQueue"}


def test_reclaim_quota_from_borrower() -> None:
    """ "reclaim quota from borrower": c2 borrows, c1 reclaims; the message names both
    paths."""
    store = world(DEFAULT_QUEUES)
    holds(store, "c1-low", "c1", priority=-1, cpu="3")
    holds(store, "c2-mid", "c2", cpu="3")
    holds(store, "c2-high", "c2", priority=1, cpu="6")
    incoming(store, "c1", priority=1, cpu="3")
    assert preempted(store) == {"c2-mid": "InCohortReclamation"}
    mid = store.get(WORKLOADS, NS, "c2-mid") or {}
    assert (condition(mid, PREEMPTED) or {})["message"].endswith(
        "due to reclamation within the cohort; preemptor path: /cohort/c1; "
        "preemptee path: /cohort/c2"
    )


def test_no_workloads_borrowing() -> None:
    """ "no workloads borrowing"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "c1-high", "c1", priority=1, cpu="4")
    holds(store, "c2-low-1", "c2", priority=-1, cpu="4")
    incoming(store, "c1", priority=1, cpu="4")
    assert preempted(store) == {}


def test_do_not_reclaim_borrowed_quota_from_same_priority_for_lower_priority() -> None:
    """ "do not reclaim borrowed quota from same priority for
    withinCohort=ReclaimFromLowerPriority"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "c1", "c1", cpu="2")
    holds(store, "c2-1", "c2", cpu="4")
    holds(store, "c2-2", "c2", cpu="4")
    incoming(store, "c1", cpu="4")
    assert preempted(store) == {}


def test_reclaim_borrowed_quota_from_same_priority_for_any() -> None:
    """ "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "c1-1", "c1", cpu="4")
    holds(store, "c1-2", "c1", priority=1, cpu="4")
    holds(store, "c2", "c2", cpu="2")
    incoming(store, "c2", cpu="4")
    assert preempted(store) == {"c1-1": "InCohortReclamation"}


def test_cannot_preempt_workloads_in_cluster_queue_for_within_never() -> None:
    """ "can't preempt workloads in ClusterQueue for withinClusterQueue=Never"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "c2-low", "c2", priority=-1, cpu="3")
    incoming(store, "c2", priority=1, cpu="4")
    # c2 alone fits 4 of its 6 with 3 used only by borrowing 1 from c1, which is free: the
    # cycle admits it instead of preempting.
    assert preempted(store) == {}


def test_preempt_newer_workloads_with_the_same_priority() -> None:
    """ "preempt newer workloads with the same priority": LowerOrNewerEqualPriority takes
    the most recently reserved of the equal-priority ones."""
    store = world(DEFAULT_QUEUES)
    holds(store, "wl1", "preventStarvation", priority=2, cpu="2")
    holds(store, "wl2", "preventStarvation", priority=1, cpu="2", reserved=NOW + 1)
    holds(store, "wl3", "preventStarvation", priority=1, cpu="2")
    incoming(store, "preventStarvation", priority=1, cpu="2", created=NOW - 15)
    assert preempted(store) == {"wl2": "InClusterQueue"}


def test_borrow_within_cohort_preempts_a_lower_priority_workload_while_borrowing() -> None:
    """ "use BorrowWithinCohort; allow preempting a lower-priority workload from another
    ClusterQueue while borrowing"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "a_best_effort_low", "a_best_effort", priority=-1, cpu="10")
    holds(store, "b_best_effort_low", "b_best_effort", priority=-1, cpu="1")
    incoming(store, "a_standard", cpu="10")
    assert preempted(store) == {"a_best_effort_low": "InCohortReclaimWhileBorrowing"}


def test_borrow_within_cohort_spares_a_workload_above_the_threshold() -> None:
    """ "use BorrowWithinCohort; don't allow preempting a lower-priority workload with
    priority above MaxPriorityThreshold, if borrowing is required even after the
    preemption"."""
    store = world(DEFAULT_QUEUES)
    holds(store, "b_standard", "b_standard", priority=1, cpu="10")
    incoming(store, "a_standard", priority=2, cpu="10")
    assert preempted(store) == {}


# --- TestFairPreemptions -----------------------------------------------------------------------


def units(store: Store, cq_name: str, *names: str, priority: int = 0) -> None:
    for name in names:
        holds(store, name, cq_name, priority=priority, cpu="1")


def test_fair_reclaim_nominal_from_user_using_the_most() -> None:
    """ "reclaim nominal from user using the most"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a1", "a2", "a3")
    units(store, "b", "b1", "b2", "b3", "b4", "b5")
    units(store, "c", "c1")
    incoming(store, "c", "c_incoming", cpu="1")
    assert preempted(store, fair=True) == {"b1": "InCohortReclamation"}


def test_fair_reclaim_borrowable_quota_from_user_using_the_most() -> None:
    """ "reclaim borrowable quota from user using the most"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a1", "a2", "a3")
    units(store, "b", "b1", "b2", "b3", "b4", "b5")
    units(store, "c", "c1")
    incoming(store, "a", "a_incoming", cpu="1")
    assert preempted(store, fair=True) == {"b1": "InCohortFairSharing"}


def test_fair_cannot_preempt_when_everyone_under_nominal() -> None:
    """ "can't preempt when everyone under nominal"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a1", "a2", "a3")
    units(store, "b", "b1", "b2", "b3")
    units(store, "c", "c1", "c2", "c3")
    incoming(store, "c", "c_incoming", cpu="1")
    assert preempted(store, fair=True) == {}


def test_fair_cannot_preempt_when_it_would_switch_the_imbalance() -> None:
    """ "can't preempt when it would switch the imbalance"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a1", "a2", "a3")
    units(store, "b", "b1", "b2", "b3", "b4", "b5")
    incoming(store, "a", "a_incoming", cpu="2")
    assert preempted(store, fair=True) == {}


def test_fair_can_preempt_lower_priority_workloads_from_same_cq() -> None:
    """ "can preempt lower priority workloads from same CQ"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a1_low", "a2_low", priority=-1)
    units(store, "a", "a3", "a4")
    units(store, "b", "b1", "b2", "b3", "b4", "b5")
    incoming(store, "a", "a_incoming", cpu="2")
    assert preempted(store, fair=True) == {"a1_low": "InClusterQueue", "a2_low": "InClusterQueue"}


def test_fair_can_preempt_a_combination_of_same_cq_and_highest_user() -> None:
    """ "can preempt a combination of same CQ and highest user"."""
    store = world(FAIR_QUEUES)
    units(store, "a", "a_low", priority=-1)
    units(store, "a", "a2", "a3")
    units(store, "b", "b1", "b2", "b3", "b4", "b5", "b6")
    incoming(store, "a", "a_incoming", cpu="2")
    assert preempted(store, fair=True) == {"a_low": "InClusterQueue", "b1": "InCohortFairSharing"}


def test_fair_preempt_huge_workload_if_there_is_no_other_option() -> None:
    """ "preempt huge workload if there is no other option, as long as the target CQ gets a
    lower share"."""
    store = world(FAIR_QUEUES)
    holds(store, "b1", "b", cpu="9")
    incoming(store, "a", "a_incoming", cpu="2")
    assert preempted(store, fair=True) == {"b1": "InCohortReclamation"}


def test_fair_cannot_preempt_huge_workload_if_the_incoming_is_also_huge() -> None:
    """ "can't preempt huge workload if the incoming is also huge"."""
    store = world(FAIR_QUEUES)
    holds(store, "a1", "a", cpu="2")
    holds(store, "b1", "b", cpu="7")
    incoming(store, "a", "a_incoming", cpu="5")
    assert preempted(store, fair=True) == {}


def test_fair_preempt_from_different_queues_for_a_smaller_max_share() -> None:
    """ "preempt from different cluster queues if the end result has a smaller max
    share"."""
    store = world(FAIR_QUEUES)
    holds(store, "b1", "b", cpu="2")
    holds(store, "b2", "b", cpu="2.5")
    holds(store, "c1", "c", cpu="2")
    holds(store, "c2", "c", cpu="2.5")
    incoming(store, "a", "a_incoming", cpu="3.5")
    assert preempted(store, fair=True) == {
        "b1": "InCohortFairSharing",
        "c1": "InCohortFairSharing",
    }


def test_fair_scenario_above_does_not_flap() -> None:
    """ "scenario above does not flap"."""
    store = world(FAIR_QUEUES)
    holds(store, "a1", "a", cpu="3.5")
    holds(store, "b2", "b", cpu="2.5")
    holds(store, "c2", "c", cpu="2.5")
    incoming(store, "b", "b_incoming", cpu="2")
    assert preempted(store, fair=True) == {}


def test_fair_share_shows_in_the_cluster_queue_status() -> None:
    """The weighted share Kueue writes (``ceil(1000 x borrowed / lendable / weight)``): b
    borrows 2 CPUs of the cohort's 9."""
    store = world(FAIR_QUEUES)
    units(store, "b", "b1", "b2", "b3", "b4", "b5")
    Kueue(store, fair_sharing=True).update_status(NOW)
    b = store.get(CLUSTER_QUEUES, "", "b") or {}
    assert b["status"]["fairSharing"] == {"weightedShare": 223}
    assert b["status"]["flavorsReservation"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "5", "borrowed": "2"}]}
    ]
    assert (b["status"]["reservingWorkloads"], b["status"]["pendingWorkloads"]) == (5, 0)


# --- TestSchedule ------------------------------------------------------------------------------


def test_schedule_admits_by_priority_and_skips_what_does_not_fit() -> None:
    """BestEffortFIFO (``TestSchedule`` "workload exceeds quota and the others fit"-style):
    the higher priority head goes first; one that does not fit steps aside."""
    store = world([cq("standalone", [flavor_quotas("default", cpu="6")])])
    workload(store, "big", NS, "standalone", {"cpu": "7"}, priority=5, created=NOW)
    workload(store, "first", NS, "standalone", {"cpu": "4"}, created=NOW)
    workload(store, "second", NS, "standalone", {"cpu": "2"}, created=NOW + 1)
    Kueue(store, fair_sharing=False).schedule(NOW + 2)
    held = {wl["metadata"]["name"] for wl in store.list(WORKLOADS) if holds_quota(wl)}
    assert held == {"first", "second"}
    big = condition(store.get(WORKLOADS, NS, "big") or {}, "QuotaReserved") or {}
    assert big["reason"] == "Pending"
    assert big["message"] == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
        "default, previously considered podsets requests (0) + current podset request (7) > "
        "maximum capacity (6)"
    )


def test_schedule_strict_fifo_blocks_behind_its_head() -> None:
    """StrictFIFO: the head that does not fit keeps the smaller one behind it waiting."""
    store = world([cq("strict", [flavor_quotas("default", cpu="6")], strategy="StrictFIFO")])
    holds(store, "running", "strict", cpu="4")
    workload(store, "head", NS, "strict", {"cpu": "4"}, created=NOW)
    workload(store, "behind", NS, "strict", {"cpu": "1"}, created=NOW + 1)
    Kueue(store, fair_sharing=False).schedule(NOW + 2)
    assert not holds_quota(store.get(WORKLOADS, NS, "behind") or {})


def test_schedule_borrows_in_the_cohort() -> None:
    """``TestSchedule`` "can borrow if cohort was assigned and will not result in
    overadmission": a workload past its nominal quota borrows what the other queue lends,
    and the ClusterQueue's status shows it borrowed."""
    store = world(
        [
            cq("eng-alpha", [flavor_quotas("default", cpu="50")], cohort="eng"),
            cq("eng-beta", [flavor_quotas("default", cpu="50")], cohort="eng"),
        ]
    )
    workload(store, "new", NS, "eng-alpha", {"cpu": "60"}, created=NOW)
    kueue = Kueue(store, fair_sharing=False)
    assert kueue.schedule(NOW) == [f"{NS}/new"]
    kueue.update_status(NOW)
    alpha = store.get(CLUSTER_QUEUES, "", "eng-alpha") or {}
    assert alpha["status"]["flavorsUsage"][0]["resources"] == [
        {"name": "cpu", "total": "60", "borrowed": "10"}
    ]
    new = store.get(WORKLOADS, NS, "new") or {}
    assert new["status"]["admission"] == {
        "clusterQueue": "eng-alpha",
        "podSetAssignments": [
            {
                "name": "main",
                "count": 1,
                "flavors": {"cpu": "default"},
                "resourceUsage": {"cpu": "60"},
            }
        ],
    }
    assert [(c["type"], c["status"]) for c in new["status"]["conditions"]] == [
        ("QuotaReserved", "True"),
        ("Admitted", "True"),
    ]


# --- TestPendingWorkloadsInCQ ------------------------------------------------------------------


def pending_world() -> Kueue:
    """``cqA`` fed by ``lqA`` and ``lqB`` in namespace ``foo``."""
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": "foo"}}, 0)
    store.apply(RESOURCE_FLAVORS, {"metadata": {"name": "default"}}, 0)
    store.apply(CLUSTER_QUEUES, cq("cqA", [flavor_quotas("default", cpu="0")]), 0)
    for lq in ("lqA", "lqB"):
        store.apply(
            LOCAL_QUEUES,
            {"metadata": {"name": lq, "namespace": "foo"}, "spec": {"clusterQueue": "cqA"}},
            0,
        )
    return Kueue(store, fair_sharing=False)


def positions(summary: dict[str, Any]) -> list[tuple[str, str, int, int, int]]:
    return [
        (
            item["metadata"]["name"],
            item["localQueueName"],
            item["priority"],
            item["positionInClusterQueue"],
            item["positionInLocalQueue"],
        )
        for item in summary["items"]
    ]


def test_pending_workloads_in_two_local_queues() -> None:
    """ "single ClusterQueue and two LocalQueue setup with four workloads and default query
    parameters"."""
    kueue = pending_world()
    for name, lq, priority, created in (
        ("lqA-high-prio", "lqA", 100, NOW),
        ("lqA-low-prio", "lqA", 50, NOW),
        ("lqB-high-prio", "lqB", 100, NOW + 1),
        ("lqB-low-prio", "lqB", 50, NOW + 1),
    ):
        workload(kueue.store, name, "foo", lq, {"cpu": "1"}, priority=priority, created=created)
    summary = visibility.cluster_queue_pending(kueue, "cqA")
    assert summary["kind"] == "PendingWorkloadsSummary"
    assert summary["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert positions(summary) == [
        ("lqA-high-prio", "lqA", 100, 0, 0),
        ("lqB-high-prio", "lqB", 100, 1, 0),
        ("lqA-low-prio", "lqA", 50, 2, 1),
        ("lqB-low-prio", "lqB", 50, 3, 1),
    ]
    local = visibility.local_queue_pending(kueue, "foo", "lqB")
    assert positions(local) == [
        ("lqB-high-prio", "lqB", 100, 1, 0),
        ("lqB-low-prio", "lqB", 50, 3, 1),
    ]


@pytest.mark.parametrize(
    ("offset", "limit", "names"),
    [(0, 2, ["a", "b"]), (1, 1000, ["b", "c"]), (1, 1, ["b"]), (0, -1, [])],
    ids=[
        "limit query parameter set",
        "offset query parameter set",
        "limit offset query parameters set",
        "negative limit is clamped to zero and returns no workloads without panicking",
    ],
)
def test_pending_workloads_offset_and_limit(offset: int, limit: int, names: list[str]) -> None:
    kueue = pending_world()
    for index, name in enumerate("abc"):
        workload(kueue.store, name, "foo", "lqA", {"cpu": "1"}, priority=100, created=NOW + index)
    summary = visibility.cluster_queue_pending(kueue, "cqA", offset=offset, limit=limit)
    assert [item["metadata"]["name"] for item in summary["items"]] == names
    assert [item["positionInClusterQueue"] for item in summary["items"]] == [
        offset + i for i in range(len(names))
    ]


def test_pending_workloads_of_a_missing_queue_is_not_found() -> None:
    kueue = pending_world()
    with pytest.raises(
        visibility.QueueNotFound,
        match=re.escape('clusterqueue.visibility.kueue.x-k8s.io "nope" not found'),
    ):
        visibility.cluster_queue_pending(kueue, "nope")
    with pytest.raises(
        visibility.QueueNotFound, match=re.escape('localqueue.visibility.kueue.x-k8s.io "nope"')
    ):
        visibility.local_queue_pending(kueue, "foo", "nope")


def test_workload_names_follow_kueues_hash() -> None:
    """``TestGenerateWorkloadNameWithExtra`` (pkg/controller/jobframework/
    workload_names_test.go) "short name, no extra (ShortWorkloadNames=false)"."""
    assert workload_name("name", "uid", "Job", "batch") == "job-name-ef3a1"
