"""The simulator's Kueue against Kueue's own unit tests: flavor assignment and admission.

Cases are transcribed from kubernetes-sigs/kueue v0.19.2: ``TestAssignFlavors`` in
``pkg/scheduler/flavorassigner/flavorassigner_test.go`` (its flavors: ``default``; ``one``,
``two`` labelled ``type``; ``b_one``, ``b_two`` labelled ``b_type``; ``tainted`` with taint
``instance=spot:NoSchedule``; ``taint_and_toleration`` with that taint and its toleration;
``label-x-a``, ``label-xy-b``) and ``TestSchedule`` in ``pkg/scheduler/scheduler_test.go`` (its
ClusterQueues ``sales``, ``eng-alpha``, ``eng-beta``, ``flavor-nonexistent-cq``, ``lend-a``,
``lend-b`` and namespaces labelled ``dep``), each test naming its case. Inputs and expected
outcomes are upstream's.

A Workload there is a pod's Workload here: Kueue's pod integration makes one Workload with one
pod set ``main`` per pod, so a pod set of N pods requesting R each becomes one pod requesting
N x R (the quota arithmetic is the same; the upstream message names its pod set, ``main``
here). Workloads already admitted are Workloads holding their admission. The test wrapper
``MakeClusterQueue`` sets ``namespaceSelector: {}``; so do these queues.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.kueue import QUEUE_LABEL
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    Store,
)
from tests.simulator.kueue_world import admit_pod
from tests.simulator.kueue_world import admitted as admitted_workload

GPU = "example.com/gpu"
SPOT_TAINT = {"key": "instance", "value": "spot", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "instance", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
# TestAssignFlavors' resourceFlavors.
ASSIGN_FLAVORS: dict[str, dict[str, Any]] = {
    "default": {},
    "one": {"nodeLabels": {"type": "one"}},
    "two": {"nodeLabels": {"type": "two"}},
    "b_one": {"nodeLabels": {"b_type": "one"}},
    "b_two": {"nodeLabels": {"b_type": "two"}},
    "tainted": {"nodeTaints": [SPOT_TAINT]},
    "taint_and_toleration": {"nodeTaints": [SPOT_TAINT], "tolerations": [SPOT_TOLERATION]},
    "label-x-a": {"nodeLabels": {"x": "a"}},
    "label-xy-b": {"nodeLabels": {"x": "b", "y": "k"}},
}
# TestSchedule's resourceFlavors.
SCHEDULE_FLAVORS: dict[str, dict[str, Any]] = {
    "default": {},
    "on-demand": {},
    "spot": {},
    "model-a": {},
    "spot-tainted": {"nodeTaints": [{"key": "key", "value": "val", "effect": "NoSchedule"}]},
    "spot-tainted-2": {"nodeTaints": [{"key": "key", "value": "val2", "effect": "NoSchedule"}]},
}


def quota(name: str, **resources: str | tuple[str, str | None, str | None]) -> dict[str, Any]:
    """``MakeFlavorQuotas(name).Resource(r, nominal[, borrowingLimit[, lendingLimit]])``
    (``gpu`` is ``example.com/gpu``)."""
    entries = []
    for resource, value in resources.items():
        nominal, borrowing, lending = (value, None, None) if isinstance(value, str) else value
        entry = {"name": GPU if resource == "gpu" else resource, "nominalQuota": nominal}
        if borrowing:
            entry["borrowingLimit"] = borrowing
        if lending:
            entry["lendingLimit"] = lending
        entries.append(entry)
    return {"name": name, "resources": entries}


def group(*flavors: dict[str, Any]) -> dict[str, Any]:
    covered = list(dict.fromkeys(r["name"] for f in flavors for r in f["resources"]))
    return {"coveredResources": covered, "flavors": list(flavors)}


def cluster_queue(
    name: str, *groups: dict[str, Any], cohort: str = "", selector: Any = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {} if selector is None else selector,
        "resourceGroups": list(groups),
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def dep(value: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "dep", "operator": "In", "values": [value]}]}


def world(
    flavors: dict[str, dict[str, Any]],
    queues: list[dict[str, Any]],
    local_queues: dict[tuple[str, str], str],
    namespaces: dict[str, dict[str, str]] | None = None,
) -> Store:
    store = Store()
    for name, labels in (namespaces or {"default": {}}).items():
        store.apply(NAMESPACES, {"metadata": {"name": name, "labels": labels}}, 0)
    for name, spec in flavors.items():
        store.apply(RESOURCE_FLAVORS, {"metadata": {"name": name}, "spec": spec}, 0)
    for queue in queues:
        store.apply(CLUSTER_QUEUES, queue, 0)
    for (namespace, name), target in local_queues.items():
        store.apply(
            LOCAL_QUEUES,
            {"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": target}},
            0,
        )
    return store


def pod(
    requests: dict[str, str], namespace: str = "default", queue: str = "main", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "wl", "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
            "containers": [{"name": "c", "resources": {"requests": requests}}],
            **spec,
        },
    }


def admitted(
    store: Store, name: str, namespace: str, cq: str, flavors: dict[str, str], **requests: str
) -> None:
    """A workload that already holds quota: a Workload with its admission."""
    admitted_workload(store, name, namespace, cq, flavors, **requests)


def admit(store: Store, obj: dict[str, Any]) -> dict[str, str] | str:
    """The flavor of each resource Kueue assigned, or the pending message; an admitted
    workload keeps its quota."""
    return admit_pod(store, obj)


def assign(*groups: dict[str, Any], requests: dict[str, str], **spec: Any) -> dict[str, str] | str:
    """A TestAssignFlavors case: ``test-clusterqueue`` with ``groups``, one pod set ``main``."""
    store = world(
        ASSIGN_FLAVORS,
        [cluster_queue("test-clusterqueue", *groups)],
        {("default", "main"): "test-clusterqueue"},
    )
    return admit(store, pod(requests, **spec))


PENDING = "couldn't assign flavors to pod set main: "

# --- TestAssignFlavors -----------------------------------------------------------------------


def test_single_flavor_fits() -> None:
    """ "single flavor, fits"."""
    found = assign(
        group(quota("default", cpu="1", memory="2Mi")), requests={"cpu": "1", "memory": "1Mi"}
    )
    assert found == {"cpu": "default", "memory": "default"}


def test_single_flavor_fits_tainted_flavor() -> None:
    """ "single flavor, fits tainted flavor": the pod tolerates the flavor's taint."""
    found = assign(
        group(quota("tainted", cpu="4")), requests={"cpu": "1"}, tolerations=[SPOT_TOLERATION]
    )
    assert found == {"cpu": "tainted"}


def test_single_flavor_fits_tainted_flavor_with_toleration() -> None:
    """ "single flavor, fits tainted flavor with toleration": the flavor tolerates its own."""
    assert assign(group(quota("taint_and_toleration", cpu="4")), requests={"cpu": "1"}) == {
        "cpu": "taint_and_toleration"
    }


def test_single_flavor_used_resources_does_not_fit() -> None:
    """ "single flavor, used resources, doesn't fit": 3 of 4 CPUs used, 2 asked."""
    store = world(
        ASSIGN_FLAVORS,
        [cluster_queue("test-clusterqueue", group(quota("default", cpu="4")))],
        {("default", "main"): "test-clusterqueue"},
    )
    admitted(store, "used", "default", "test-clusterqueue", {"cpu": "default"}, cpu="3")
    assert admit(store, pod({"cpu": "2"})) == (
        PENDING + "insufficient unused quota for cpu in flavor default, 1 more needed"
    )


def test_multiple_resource_groups_fits() -> None:
    """ "multiple resource groups, fits": cpu on ``two`` (``one`` exceeds its maximum), memory
    on ``b_one``; the pod then selects both flavors' labels."""
    obj = pod({"cpu": "3", "memory": "10Mi"})
    store = world(
        ASSIGN_FLAVORS,
        [
            cluster_queue(
                "test-clusterqueue",
                group(quota("one", cpu="2"), quota("two", cpu="4")),
                group(quota("b_one", memory="1Gi"), quota("b_two", memory="5Gi")),
            )
        ],
        {("default", "main"): "test-clusterqueue"},
    )
    assert admit(store, obj) == {"cpu": "two", "memory": "b_one"}
    assert obj["spec"]["nodeSelector"] == {"type": "two", "b_type": "one"}


def test_multiple_resource_groups_one_could_fit_with_preemption_other_does_not_fit() -> None:
    """ "multiple resource groups, one could fit with preemption, other doesn't fit": only the
    group without any flavor is reported."""
    store = world(
        ASSIGN_FLAVORS,
        [
            cluster_queue(
                "test-clusterqueue",
                group(quota("one", cpu="3")),
                group(quota("b_one", memory="1Mi")),
            )
        ],
        {("default", "main"): "test-clusterqueue"},
    )
    admitted(store, "used", "default", "test-clusterqueue", {"cpu": "one"}, cpu="1")
    assert admit(store, pod({"cpu": "3", "memory": "10Mi"})) == (
        PENDING + "insufficient quota for memory in flavor b_one, previously considered "
        "podsets requests (0) + current podset request (10Mi) > maximum capacity (1Mi)"
    )


def test_multiple_resource_groups_with_multiple_resources_fits() -> None:
    """ "multiple resource groups with multiple resources, fits"."""
    found = assign(
        group(quota("one", cpu="2", memory="1Gi"), quota("two", cpu="4", memory="15Mi")),
        group(quota("b_one", gpu="4"), quota("b_two", gpu="2")),
        requests={"cpu": "3", "memory": "10Mi", "example.com/gpu": "3"},
    )
    assert found == {"cpu": "two", "memory": "two", "example.com/gpu": "b_one"}


def test_multiple_resources_in_a_group_does_not_fit() -> None:
    """ "multiple resources in a group, doesn't fit"."""
    found = assign(
        group(quota("one", cpu="2", memory="1Gi"), quota("two", cpu="4", memory="5Mi")),
        requests={"cpu": "3", "memory": "10Mi"},
    )
    assert found == PENDING + (
        "insufficient quota for cpu in flavor one, previously considered podsets requests (0) "
        "+ current podset request (3) > maximum capacity (2), insufficient quota for memory in "
        "flavor two, previously considered podsets requests (0) + current podset request "
        "(10Mi) > maximum capacity (5Mi)"
    )


def test_multiple_flavors_fits_while_skipping_tainted_flavor() -> None:
    """ "multiple flavors, fits while skipping tainted flavor"."""
    found = assign(group(quota("tainted", cpu="4"), quota("two", cpu="4")), requests={"cpu": "3"})
    assert found == {"cpu": "two"}


def test_multiple_flavors_fits_a_node_selector() -> None:
    """ "multiple flavors, fits a node selector": keys no flavor has are ignored."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "ignored2", "operator": "In", "values": ["bar"]}]}
                ]
            }
        }
    }
    found = assign(
        group(quota("one", cpu="4"), quota("two", cpu="4")),
        requests={"cpu": "1"},
        nodeSelector={"type": "two", "ignored1": "foo"},
        affinity=affinity,
    )
    assert found == {"cpu": "two"}


def _required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
            }
        }
    }


def test_multiple_flavors_fits_with_node_affinity() -> None:
    """ "multiple flavors, fits with node affinity"."""
    found = assign(
        group(quota("one", cpu="4", memory="1Gi"), quota("two", cpu="4", memory="1Gi")),
        requests={"cpu": "1", "memory": "1Mi"},
        nodeSelector={"ignored1": "foo"},
        affinity=_required([{"key": "type", "operator": "In", "values": ["two"]}]),
    )
    assert found == {"cpu": "two", "memory": "two"}


def test_multiple_flavors_node_affinity_fits_any_flavor() -> None:
    """ "multiple flavors, node affinity fits any flavor": a term left empty matches all."""
    found = assign(
        group(quota("one", cpu="4"), quota("two", cpu="4")),
        requests={"cpu": "1"},
        affinity=_required(
            [{"key": "ignored2", "operator": "In", "values": ["bar"]}],
            [{"key": "cpuType", "operator": "In", "values": ["two"]}],
        ),
    )
    assert found == {"cpu": "one"}


def test_selector_only_uses_the_flavors_own_keys() -> None:
    """ "multiple flavors with different label keys, selector only uses flavor's own keys"."""
    found = assign(
        group(quota("label-x-a", cpu="4"), quota("label-xy-b", cpu="4")),
        requests={"cpu": "1"},
        nodeSelector={"x": "a", "y": "g"},
    )
    assert found == {"cpu": "label-x-a"}


def test_labelless_flavor_matches_a_labeled_selector() -> None:
    """ "labelless flavor in group with labeled flavor, workload uses labeled selector"."""
    found = assign(
        group(quota("default", cpu="4"), quota("two", cpu="4")),
        requests={"cpu": "1"},
        nodeSelector={"type": "two"},
    )
    assert found == {"cpu": "default"}


def test_multiple_flavors_does_not_fit_node_affinity() -> None:
    """ "multiple flavors, doesn't fit node affinity"."""
    found = assign(
        group(quota("one", cpu="4"), quota("two", cpu="4")),
        requests={"cpu": "1"},
        affinity=_required([{"key": "type", "operator": "In", "values": ["three"]}]),
    )
    assert found == PENDING + (
        "flavor one doesn't match node affinity, flavor two doesn't match node affinity"
    )


def test_not_enough_space_to_borrow() -> None:
    """ "not enough space to borrow": the other queue lends nothing (lendingLimit 0)."""
    store = world(
        ASSIGN_FLAVORS,
        [
            cluster_queue("test-clusterqueue", group(quota("one", cpu="1")), cohort="test-cohort"),
            cluster_queue(
                "test-secondary-clusterqueue",
                group(quota("one", cpu=("10", None, "0"))),
                cohort="test-cohort",
            ),
        ],
        {("default", "main"): "test-clusterqueue"},
    )
    admitted(store, "used", "default", "test-secondary-clusterqueue", {"cpu": "one"}, cpu="9")
    assert admit(store, pod({"cpu": "2"})) == PENDING + (
        "insufficient quota for cpu in flavor one, previously considered podsets requests (0) "
        "+ current podset request (2) > maximum capacity (1)"
    )


def test_resource_not_listed_in_cluster_queue() -> None:
    """ "resource not listed in clusterQueue"."""
    found = assign(group(quota("one", cpu="4")), requests={"example.com/gpu": "2"})
    assert found == PENDING + "resource example.com/gpu unavailable in ClusterQueue"


def test_zero_resource_request_not_in_cluster_queue_succeeds() -> None:
    """ "zero resource request not in clusterQueue should succeed" (and TestSchedule's "admit
    workload with zero-quantity request for resource not in ClusterQueue")."""
    found = assign(group(quota("default", cpu="4")), requests={"cpu": "1", "example.com/gpu": "0"})
    assert found == {"cpu": "default"}


def test_zero_resource_request_defined_in_cluster_queue_gets_a_flavor() -> None:
    """ "zero resource request defined in clusterQueue should get flavor assigned"."""
    found = assign(
        group(quota("default", cpu="4", gpu="4")),
        requests={"cpu": "1", "example.com/gpu": "0"},
    )
    assert found == {"cpu": "default", "example.com/gpu": "default"}


# --- TestSchedule ----------------------------------------------------------------------------

ENG = {
    "default": {},
    "eng-alpha": {"dep": "eng"},
    "eng-beta": {"dep": "eng"},
    "eng-gamma": {"dep": "eng"},
    "sales": {"dep": "sales"},
    "lend": {"dep": "lend"},
}


def schedule(*extra: dict[str, Any], local: dict[tuple[str, str], str] | None = None) -> Store:
    """TestSchedule's ClusterQueues, LocalQueues and namespaces, and ``extra`` queues."""
    queues = [
        cluster_queue(
            "sales", group(quota("default", cpu=("50", "0", None))), selector=dep("sales")
        ),
        cluster_queue(
            "eng-alpha",
            group(
                quota("on-demand", cpu=("50", "50", None)), quota("spot", cpu=("100", "0", None))
            ),
            cohort="eng",
            selector=dep("eng"),
        ),
        cluster_queue(
            "eng-beta",
            group(
                quota("on-demand", cpu=("50", "10", None)), quota("spot", cpu=("0", "100", None))
            ),
            group(quota("model-a", gpu=("20", "0", None))),
            cohort="eng",
            selector=dep("eng"),
        ),
        cluster_queue("flavor-nonexistent-cq", group(quota("nonexistent-flavor", cpu="50"))),
        cluster_queue(
            "lend-a",
            group(quota("default", cpu=("3", None, "2"))),
            cohort="lend",
            selector=dep("lend"),
        ),
        cluster_queue(
            "lend-b",
            group(quota("default", cpu=("2", None, "2"))),
            cohort="lend",
            selector=dep("lend"),
        ),
        *extra,
    ]
    local_queues = {
        ("sales", "main"): "sales",
        ("sales", "blocked"): "eng-alpha",
        ("eng-alpha", "main"): "eng-alpha",
        ("eng-beta", "main"): "eng-beta",
        ("sales", "flavor-nonexistent-queue"): "flavor-nonexistent-cq",
        ("sales", "cq-nonexistent-queue"): "nonexistent-cq",
        ("lend", "lend-a-queue"): "lend-a",
        ("lend", "lend-b-queue"): "lend-b",
        **(local or {}),
    }
    return world(SCHEDULE_FLAVORS, queues, local_queues, ENG)


def test_flavors_with_mixed_misconfiguration_and_insufficient_quota() -> None:
    """ "flavors with mixed misconfiguration and insufficient quota"."""
    store = schedule(
        cluster_queue(
            "custom-cq",
            group(
                quota("spot-tainted", cpu=("20", "20", None)),
                quota("on-demand", cpu=("15", "15", None)),
            ),
        ),
        local={("sales", "custom-q"): "custom-cq"},
    )
    admitted(store, "existing-on-demand-job", "sales", "custom-cq", {"cpu": "on-demand"}, cpu="10")
    assert admit(store, pod({"cpu": "10"}, "sales", "custom-q")) == PENDING + (
        "insufficient unused quota for cpu in flavor on-demand, 5 more needed, "
        "untolerated taint {key val NoSchedule <nil>} in flavor spot-tainted"
    )


def test_flavors_with_mixed_taint_mismatch_and_exceeding_limits() -> None:
    """ "flavors with mixed taint mismatch and exceeding limits"."""
    store = schedule(
        cluster_queue(
            "custom-cq2",
            group(
                quota("spot-tainted", cpu=("20", "20", None)),
                quota("on-demand", cpu=("5", "5", None)),
            ),
        ),
        local={("sales", "custom-q2"): "custom-cq2"},
    )
    assert admit(store, pod({"cpu": "10"}, "sales", "custom-q2")) == PENDING + (
        "insufficient quota for cpu in flavor on-demand, previously considered podsets "
        "requests (0) + current podset request (10) > maximum capacity (5), "
        "untolerated taint {key val NoSchedule <nil>} in flavor spot-tainted"
    )


def test_flavors_are_structurally_incompatible() -> None:
    """ "flavors are structurally incompatible"."""
    store = schedule(
        cluster_queue(
            "custom-cq3",
            group(
                quota("spot-tainted", cpu=("20", "20", None)),
                quota("spot-tainted-2", cpu=("5", "5", None)),
            ),
        ),
        local={("sales", "custom-q3"): "custom-cq3"},
    )
    assert admit(store, pod({"cpu": "1"}, "sales", "custom-q3")) == PENDING + (
        "untolerated taint {key val NoSchedule <nil>} in flavor spot-tainted, "
        "untolerated taint {key val2 NoSchedule <nil>} in flavor spot-tainted-2"
    )


def test_single_cluster_queue_full() -> None:
    """ "single clusterQueue full": 40 of 50 CPUs held, 11 asked."""
    store = schedule()
    admitted(store, "assigned", "sales", "sales", {"cpu": "default"}, cpu="40")
    assert admit(store, pod({"cpu": "11"}, "sales")) == (
        PENDING + "insufficient unused quota for cpu in flavor default, 1 more needed"
    )


def test_failed_to_match_cluster_queue_selector() -> None:
    """ "failed to match clusterQueue selector": ``sales`` is not ``dep: eng``."""
    assert admit(schedule(), pod({"cpu": "1"}, "sales", "blocked")) == (
        "workload namespace doesn't match ClusterQueue selector"
    )


def test_admit_in_different_cohorts() -> None:
    """ "admit in different cohorts": eng-alpha's 51 CPUs borrow from its cohort."""
    store = schedule()
    assert admit(store, pod({"cpu": "1"}, "sales")) == {"cpu": "default"}
    assert admit(store, pod({"cpu": "51"}, "eng-alpha")) == {"cpu": "on-demand"}


def test_admit_in_same_cohort_with_no_borrowing() -> None:
    """ "admit in same cohort with no borrowing"."""
    store = schedule()
    assert admit(store, pod({"cpu": "40"}, "eng-alpha")) == {"cpu": "on-demand"}
    assert admit(store, pod({"cpu": "40"}, "eng-beta")) == {"cpu": "on-demand"}


def test_can_borrow_if_cohort_was_assigned_and_will_not_result_in_overadmission() -> None:
    """ "can borrow if cohort was assigned and will not result in overadmission"."""
    store = schedule()
    assert admit(store, pod({"cpu": "45"}, "eng-alpha")) == {"cpu": "on-demand"}
    assert admit(store, pod({"cpu": "55"}, "eng-beta")) == {"cpu": "on-demand"}


def test_workload_exceeds_lending_limit_when_borrow_in_cohort() -> None:
    """ "workload exceeds lending limit when borrow in cohort"."""
    store = schedule()
    admitted(store, "a", "lend", "lend-b", {"cpu": "default"}, cpu="2")
    assert admit(store, pod({"cpu": "3"}, "lend", "lend-b-queue")) == (
        PENDING + "insufficient unused quota for cpu in flavor default, 1 more needed"
    )


def test_cannot_borrow_resource_not_listed_in_cluster_queue() -> None:
    """ "cannot borrow resource not listed in clusterQueue"."""
    assert admit(schedule(), pod({"example.com/gpu": "1"}, "eng-alpha")) == (
        PENDING + "resource example.com/gpu unavailable in ClusterQueue"
    )


def test_not_enough_resources_to_borrow_fallback_to_next_flavor() -> None:
    """ "not enough resources to borrow, fallback to next flavor; WhenCanPreempt:
    TryNextFlavor" (the default)."""
    store = schedule()
    admitted(store, "existing", "eng-beta", "eng-beta", {"cpu": "on-demand"}, cpu="45")
    assert admit(store, pod({"cpu": "60"}, "eng-alpha")) == {"cpu": "spot"}


def test_workload_should_not_fit_in_cluster_queue_with_nonexistent_flavor() -> None:
    """ "workload should not fit in clusterQueue with nonexistent flavor": the queue is
    inactive (``FlavorNotFound``) and admits nothing."""
    found = admit(schedule(), pod({"cpu": "1"}, "sales", "flavor-nonexistent-queue"))
    assert isinstance(found, str)


def test_workload_should_not_fit_in_nonexistent_cluster_queue() -> None:
    """ "workload should not fit in nonexistent clusterQueue"."""
    assert isinstance(admit(schedule(), pod({"cpu": "1"}, "sales", "cq-nonexistent-queue")), str)


def test_not_enough_resources() -> None:
    """ "not enough resources": 100 CPUs against sales' 50."""
    assert admit(schedule(), pod({"cpu": "100"}, "sales")) == PENDING + (
        "insufficient quota for cpu in flavor default, previously considered podsets requests "
        "(0) + current podset request (100) > maximum capacity (50)"
    )


def test_no_overadmission_while_borrowing() -> None:
    """ "no overadmission while borrowing": eng-gamma already borrows 1 CPU on-demand and 100
    on spot; new-alpha and new-beta fit, new-gamma does not."""
    gamma = cluster_queue(
        "eng-gamma",
        group(quota("on-demand", cpu=("50", "10", None)), quota("spot", cpu=("0", "100", None))),
        cohort="eng",
        selector=dep("eng"),
    )
    store = schedule(gamma, local={("eng-gamma", "main"): "eng-gamma"})
    admitted(store, "borrow-on-demand", "eng-gamma", "eng-gamma", {"cpu": "on-demand"}, cpu="51")
    admitted(store, "use-all-spot", "eng-gamma", "eng-gamma", {"cpu": "spot"}, cpu="100")
    assert admit(store, pod({"cpu": "50"}, "eng-beta")) == {"cpu": "on-demand"}
    assert admit(store, pod({"cpu": "1"}, "eng-alpha")) == {"cpu": "on-demand"}
    assert admit(store, pod({"cpu": "50"}, "eng-gamma")) == PENDING + (
        "insufficient unused quota for cpu in flavor on-demand, 41 more needed, "
        "insufficient unused quota for cpu in flavor spot, 50 more needed"
    )


@pytest.mark.parametrize("namespace", ["eng-alpha", "sales"])
def test_a_null_namespace_selector_selects_nothing(namespace: str) -> None:
    """``namespaceSelector`` defaults to null, "a nothing selector (no namespaces eligible)"
    (apis/kueue/v1beta2/clusterqueue_types.go; ``metav1.LabelSelectorAsSelector``)."""
    queue = cluster_queue("open", group(quota("default", cpu="10")))
    del queue["spec"]["namespaceSelector"]
    store = schedule(queue, local={(namespace, "open"): "open"})
    assert admit(store, pod({"cpu": "1"}, namespace, "open")) == (
        "workload namespace doesn't match ClusterQueue selector"
    )
