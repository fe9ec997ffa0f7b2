"""fleet.sleep against the simulator's API over HTTP: what ``vcluster pause``'s DeletePods
selects, and nothing more (the catalog's end-to-end path is tests/catalog/test_cluster_sleep.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleet.kube import Kube
from fleet.sleep import MANAGED_BY, free_host_pods
from simulator import Simulator
from simulator.store import PODS

pytestmark = [pytest.mark.django_db]


def _pod(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
        "status": {"phase": "Running"},
    }


def _names(sim: Simulator, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in sim.store.list(PODS, namespace)}


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    simulator = start_fleet()
    for namespace in ("alpha", "bravo"):
        simulator.cluster.ensure_namespace(namespace, 0)
    for obj in (
        _pod("alpha", "a-x-default-x-dev", **{MANAGED_BY: "dev"}),
        _pod("alpha", "b-x-default-x-dev", **{MANAGED_BY: "dev"}),
        _pod("alpha", "a-x-default-x-dev-2", **{MANAGED_BY: "dev-2"}),  # another release
        _pod("alpha", "own", app="trainer"),  # the tenant's own pod
        _pod("bravo", "a-x-default-x-dev", **{MANAGED_BY: "dev"}),  # another tenant's
    ):
        simulator.put_object("pods", obj)
    return simulator


def test_it_deletes_exactly_the_releases_pods_in_its_namespace(sim: Simulator) -> None:
    with Kube() as kube:
        freed = free_host_pods(kube, "alpha", "dev")
        assert not freed.waiting
        assert freed.deleted == ("a-x-default-x-dev", "b-x-default-x-dev")
        assert _names(sim, "alpha") == {"a-x-default-x-dev-2", "own"}
        assert _names(sim, "bravo") == {"a-x-default-x-dev"}
        # Again: nothing left to delete.
        assert free_host_pods(kube, "alpha", "dev").deleted == ()


def test_it_waits_while_the_control_plane_pod_is_there(sim: Simulator) -> None:
    sim.put_object("pods", _pod("alpha", "dev-0", app="vcluster", release="dev"))
    with Kube() as kube:
        assert free_host_pods(kube, "alpha", "dev").waiting
    assert {"a-x-default-x-dev", "b-x-default-x-dev", "dev-0"} <= _names(sim, "alpha")


@pytest.mark.parametrize(
    ("namespace", "release"), [("alpha", "dev,app=trainer"), ("alpha", ""), ("Alpha", "dev")]
)
def test_a_name_that_is_no_dns_label_is_refused_and_nothing_goes(
    sim: Simulator, namespace: str, release: str
) -> None:
    before = _names(sim, "alpha")
    with Kube() as kube, pytest.raises(ValueError, match="is not a DNS-1123 label"):
        free_host_pods(kube, namespace, release)
    assert _names(sim, "alpha") == before
