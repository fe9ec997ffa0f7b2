"""A dedicated tenant's own nodes: its flavor, queue, policy and cluster values, and the
reservations that are refused before anything is rendered."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render import render_tenant_tree
from gitops.render.reservations import RESERVED_KEY, node_marks, shared_gpus
from gitops.render.specfiles import parse_spec_files, render_spec_files
from gitops.render.validate import validate_fleet, validate_tenant
from gitops.specs import NodeReservation, SpecError, TenantSpec
from tests.gitops.render_samples import reserved_tenant, rich_tenant

FLEET = demo_fleet()
OWN = "h200.vault"
TOLERATION = {"key": RESERVED_KEY, "operator": "Equal", "value": "vault", "effect": "NoSchedule"}


def _objects(tenant: TenantSpec, path: str) -> list[dict[str, Any]]:
    files = render_tenant_tree(tenant, FLEET)
    return list(yaml.safe_load_all(files[f"tenants/{tenant.slug}/{path}"]))


def test_the_tenant_gets_a_flavor_of_its_own_nodes_first_in_its_queue() -> None:
    flavor, queue, _ = _objects(reserved_tenant(), "queues.yaml")
    assert flavor["kind"] == "ResourceFlavor"
    assert flavor["metadata"]["name"] == OWN
    assert flavor["spec"]["nodeLabels"] == {
        "ai-factory.io/pool": "h200",
        RESERVED_KEY: "vault",
        "nvidia.com/gpu.product": "NVIDIA-H200",
    }
    assert TOLERATION in flavor["spec"]["tolerations"]
    assert flavor["spec"]["topologyName"] == "default"
    group = queue["spec"]["resourceGroups"][0]
    assert [f["name"] for f in group["flavors"]] == [OWN, "h200"]
    gpus = next(r for r in group["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpus == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "16",
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }


def test_the_namespace_quota_and_the_pod_cap_count_the_reserved_gpus() -> None:
    objects = _objects(reserved_tenant(), "quota.yaml")
    quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    # 16 reserved plus the 4 of the share, which may borrow up to the whole shared pool (64).
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "80"
    policy = _objects(reserved_tenant(), "kyverno-policy.yaml")[0]
    cap = next(r for r in policy["spec"]["rules"] if r["name"] == "limit-gpus-per-pod")
    assert cap["validate"]["deny"]["conditions"]["any"][0]["value"] == 20


def test_only_the_owner_may_tolerate_its_nodes() -> None:
    def rule(tenant: TenantSpec) -> dict[str, Any]:
        policy = _objects(tenant, "kyverno-policy.yaml")[0]
        found: dict[str, Any] = next(
            r for r in policy["spec"]["rules"] if r["name"] == "confine-reserved-tolerations"
        )
        return found

    owner = rule(reserved_tenant())["validate"]["deny"]["conditions"]["any"][0]
    assert owner["operator"] == "AnyNotIn" and owner["value"] == ["vault"]
    # A tenant without nodes of its own may tolerate no value at all.
    shared = rule(rich_tenant())["validate"]["deny"]["conditions"]["any"][0]
    assert shared["value"] == []


def test_the_cluster_runs_on_the_tenant_nodes_only() -> None:
    release = _objects(reserved_tenant(), "clusters/risk.yaml")
    values = next(o for o in release if o["kind"] == "HelmRelease")["spec"]["values"]
    assert values["sync"]["fromHost"]["nodes"]["selector"]["labels"][RESERVED_KEY] == "vault"
    assert (
        f"{RESERVED_KEY}=vault:NoSchedule" in values["sync"]["toHost"]["pods"]["enforceTolerations"]
    )


def test_reservations_live_in_the_spec_on_main() -> None:
    tenant = reserved_tenant()
    files = render_spec_files(tenant)
    assert "spec/reservations/h200-07.json" in files
    assert parse_spec_files("vault", files) == tenant


def test_reserved_gpus_leave_the_shared_pool() -> None:
    assert shared_gpus(FLEET, [reserved_tenant()])["h200"] == 64 - 16
    assert node_marks([reserved_tenant(), rich_tenant()]) == {
        "h200-07": "vault",
        "h200-08": "vault",
    }


def _reserve(tenant: TenantSpec, *reservations: NodeReservation) -> TenantSpec:
    return dataclasses.replace(tenant, reservations=reservations)


@pytest.mark.parametrize(
    ("tenant", "field", "reason"),
    [
        (
            _reserve(rich_tenant(), NodeReservation("h200-01", "h200", 8)),
            "reservations",
            "Only a dedicated tenant gets nodes of its own",
        ),
        (
            _reserve(reserved_tenant(), NodeReservation("h200-hami-01", "h200-hami", 8)),
            "reservations[0].flavor",
            "Nodes are reserved from whole-GPU pools; h200-hami hands out hami GPUs.",
        ),
        (
            _reserve(reserved_tenant(), NodeReservation("cpu-01", "cpu", 8)),
            "reservations[0].flavor",
            "There is no GPU pool 'cpu'",
        ),
        (
            _reserve(
                reserved_tenant(),
                NodeReservation("h200-01", "h200", 8),
                NodeReservation("h200-01", "h200", 8),
            ),
            "reservations[1].name",
            "Another reserved node is already named 'h200-01'.",
        ),
        (
            _reserve(reserved_tenant(), NodeReservation("Node_1", "h200", 8)),
            "reservations[0].name",
            "must be a Kubernetes object name",
        ),
        (
            _reserve(reserved_tenant(), NodeReservation("h200-01", "h200", 0)),
            "reservations[0].gpus",
            "GPU count",
        ),
        (
            _reserve(
                reserved_tenant(),
                *(NodeReservation(f"h200-{n:02d}", "h200", 8) for n in range(1, 10)),
            ),
            "reservations",
            "72 GPUs of h200 reserved, but the pool has 64.",
        ),
    ],
)
def test_bad_reservations_are_refused_before_rendering(
    tenant: TenantSpec, field: str, reason: str
) -> None:
    with pytest.raises(SpecError) as caught:
        validate_tenant(tenant, FLEET)
    assert reason in caught.value.errors[field]
    with pytest.raises(SpecError):
        render_tenant_tree(tenant, FLEET)


def test_a_pool_may_not_select_or_taint_by_the_reservation_key() -> None:
    pool = FLEET.flavors[0]
    by_label = dataclasses.replace(pool, node_labels=((RESERVED_KEY, "vault"),))
    with pytest.raises(SpecError) as caught:
        validate_fleet(dataclasses.replace(FLEET, flavors=(by_label,)))
    assert "may not select by it" in caught.value.errors["flavors[0].node_labels"]
    by_taint = dataclasses.replace(pool, taint_key=RESERVED_KEY)
    with pytest.raises(SpecError) as caught:
        validate_fleet(dataclasses.replace(FLEET, flavors=(by_taint,)))
    assert "taint of reserved nodes" in caught.value.errors["flavors[0].taint_key"]


def test_a_pool_and_slug_too_long_for_the_ledger_are_refused() -> None:
    pool = "h200-" + "x" * 25  # a DNS label, 30 characters
    flavors = tuple(
        dataclasses.replace(f, name=pool) if f.name == "h200" else f for f in FLEET.flavors
    )
    fleet = dataclasses.replace(FLEET, flavors=flavors)
    slug = "v" * 40
    tenant = _reserve(
        dataclasses.replace(reserved_tenant(), slug=slug), NodeReservation("h200-01", pool, 8)
    )
    with pytest.raises(SpecError) as caught:
        validate_tenant(tenant, fleet)
    assert "would be 71 characters" in caught.value.errors["reservations[0].flavor"]
