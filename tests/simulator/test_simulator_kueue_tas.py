"""The simulator's Kueue against Kueue's own unit tests: which flavors a workload may use under
topology-aware scheduling (TAS).

Each case is transcribed from kubernetes-sigs/kueue v0.19.2
``pkg/scheduler/scheduler_tas_test.go`` ``TestScheduleForTAS``, named after the upstream case:
the same nodes (``defaultSingleNode``: node ``x1`` labelled ``tas-node=true`` and
``kubernetes.io/hostname=x1``, 1 CPU, 1Gi allocatable), Topology ``tas-single-level`` (one
level, the hostname), flavors ``tas-default`` (``nodeLabels tas-node=true``, that topology) and
``default`` (no labels, no topology), and the same ClusterQueue ``tas-main`` with 50 CPUs per
flavor. A workload there is a pod here: Kueue's pod integration builds the pod set's topology
request from the pod's annotations (``pkg/controller/jobframework/tas.go``). The inputs and the
expected flavor or reason are upstream's; nothing here comes from the portal's renderers.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.kueue import (
    PREFERRED_TOPOLOGY,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    UNCONSTRAINED_TOPOLOGY,
)
from simulator.store import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    Store,
)
from tests.simulator.kueue_world import admit_pod

HOSTNAME = "kubernetes.io/hostname"


def _store(*flavors: str) -> Store:
    """``defaultSingleNode``, ``defaultSingleLevelTopology``, both flavors, and ``tas-main``
    listing ``flavors`` (in that order) with 50 CPUs each; namespace ``default`` and the
    ``namespaceSelector: {}`` of the test wrapper ``MakeClusterQueue``."""
    store = Store()
    store.apply(NAMESPACES, {"metadata": {"name": "default"}}, 0)
    store.apply(
        NODES,
        {
            "metadata": {"name": "x1", "labels": {"tas-node": "true", HOSTNAME: "x1"}},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
        },
        0,
    )
    store.apply(
        TOPOLOGIES,
        {"metadata": {"name": "tas-single-level"}, "spec": {"levels": [{"nodeLabel": HOSTNAME}]}},
        0,
    )
    store.apply(
        RESOURCE_FLAVORS,
        {
            "metadata": {"name": "tas-default"},
            "spec": {"nodeLabels": {"tas-node": "true"}, "topologyName": "tas-single-level"},
        },
        0,
    )
    store.apply(RESOURCE_FLAVORS, {"metadata": {"name": "default"}, "spec": {}}, 0)
    store.apply(
        CLUSTER_QUEUES,
        {
            "metadata": {"name": "tas-main"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": name, "resources": [{"name": "cpu", "nominalQuota": "50"}]}
                            for name in flavors
                        ],
                    }
                ],
            },
        },
        0,
    )
    store.apply(
        LOCAL_QUEUES,
        {
            "metadata": {"name": "tas-main", "namespace": "default"},
            "spec": {"clusterQueue": "tas-main"},
        },
        0,
    )
    return store


def _pod(cpu: str = "1", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "foo",
            "namespace": "default",
            "labels": {QUEUE_LABEL: "tas-main"},
            "annotations": dict(annotations),
        },
        "spec": {
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def _admit(store: Store, pod: dict[str, Any]) -> str:
    """The flavor Kueue admitted the pod to, or why it did not."""
    found = admit_pod(store, pod)
    return found if isinstance(found, str) else found["cpu"]


def test_workload_which_does_not_specify_tas_annotation_uses_the_only_tas_flavor() -> None:
    # "workload which does not specify TAS annotation uses the only TAS flavor": every flavor
    # of tas-main is a TAS flavor (isTASOnly), so TAS is implied.
    pod = _pod()
    assert _admit(_store("tas-default"), pod) == "tas-default"
    assert pod["spec"]["nodeSelector"] == {"tas-node": "true"}


def test_workload_requiring_tas_skips_the_non_tas_flavor() -> None:
    # "workload requiring TAS skips the non-TAS flavor": Flavors considered: one:
    # default(NoFit;Flavor "default" does not support TopologyAwareScheduling).
    store = _store("default", "tas-default")
    assert _admit(store, _pod(**{REQUIRED_TOPOLOGY: HOSTNAME})) == "tas-default"


def test_workload_which_does_not_need_tas_skips_the_tas_flavor() -> None:
    # "workload which does not need TAS skips the TAS flavor": Flavors considered: one:
    # tas-default(NoFit;Flavor "tas-default" supports only TopologyAwareScheduling).
    assert _admit(_store("tas-default", "default"), _pod()) == "default"


def test_a_workload_without_tas_in_a_mixed_queue_never_gets_the_tas_flavor() -> None:
    # The same rule with the non-TAS flavor out of quota: the TAS flavor is still skipped, so
    # the workload stays pending, naming both reasons (issue 26's critical finding).
    reason = _admit(_store("tas-default", "default"), _pod(cpu="51"))
    assert 'Flavor "tas-default" supports only TopologyAwareScheduling' in reason
    assert "insufficient quota for cpu in flavor default" in reason


@pytest.mark.parametrize(
    "annotation",
    [{PREFERRED_TOPOLOGY: HOSTNAME}, {UNCONSTRAINED_TOPOLOGY: "true"}],
    ids=["preferred", "unconstrained"],
)
def test_any_explicit_tas_request_takes_the_tas_flavor_in_a_mixed_queue(
    annotation: dict[str, str],
) -> None:
    # IsExplicitlyRequestingTAS: Required, Preferred or Unconstrained set (pkg/workload).
    assert _admit(_store("default", "tas-default"), _pod(**annotation)) == "tas-default"


def test_workload_requests_topology_level_which_is_not_present_in_topology() -> None:
    # "workload requests topology level which is not present in topology": inadmissible,
    # Flavor "tas-default" does not contain the requested level.
    reason = _admit(_store("tas-default"), _pod(**{REQUIRED_TOPOLOGY: "cloud.com/non-existing"}))
    assert 'Flavor "tas-default" does not contain the requested level' in reason


def test_workload_does_not_get_scheduled_as_it_does_not_fit_within_the_node_capacity() -> None:
    # "workload does not get scheduled as it does not fit within the node capacity" (there two
    # pods of 1 CPU on a 1-CPU node; here one pod of 2 CPUs: the simulator places single pods).
    reason = _admit(_store("tas-default"), _pod(cpu="2", **{REQUIRED_TOPOLOGY: HOSTNAME}))
    assert "doesn't allow to fit" in reason


def _tainted(store: Store) -> Store:
    node = store.get(NODES, "", "x1")
    assert node is not None
    node["spec"] = {
        "taints": [{"key": "example.com/gpu", "value": "present", "effect": "NoSchedule"}]
    }
    store.apply(NODES, node, 0)
    return store


def test_skip_node_which_has_untolerated_taint() -> None:
    # kubernetes-sigs/kueue v0.19.2 pkg/cache/scheduler/tas_cache_test.go "skip node which has
    # untolerated taint; BestFit": the only node carries example.com/gpu=present:NoSchedule,
    # which the pod set does not tolerate: it is excluded and nothing fits.
    reason = _admit(_tainted(_store("tas-default")), _pod(**{REQUIRED_TOPOLOGY: HOSTNAME}))
    assert "doesn't allow to fit" in reason


def test_a_taint_the_flavor_tolerates_keeps_the_node() -> None:
    # The same node, with the toleration among the flavor's (tas_flavor_snapshot.go: the
    # requirements' tolerations are the pod set's plus the flavor's).
    store = _tainted(_store("tas-default"))
    flavor = store.get(RESOURCE_FLAVORS, "", "tas-default")
    assert flavor is not None
    flavor["spec"]["tolerations"] = [
        {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    store.apply(RESOURCE_FLAVORS, flavor, 0)
    assert _admit(store, _pod(**{REQUIRED_TOPOLOGY: HOSTNAME})) == "tas-default"
