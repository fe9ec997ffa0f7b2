"""The checks every change runs know reserved nodes: a tree with a dedicated tenant's own nodes
passes; a node reserved twice, an overcommitted pool and another tenant's reach for the nodes
fail, each with its reason."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

from gitops.checks import run_checks
from gitops.checks.isolation import check_isolation
from gitops.fleet import demo_fleet
from gitops.render.reservations import RESERVED_KEY
from gitops.specs import GpuShare, NodeReservation
from tests.gitops.render_samples import rendered_fleet, reserved_tenant, rich_tenant

FLEET = demo_fleet()
BANK = dataclasses.replace(
    reserved_tenant(),
    slug="bank",
    clusters=(),
    endpoints=(),
    shares=(),
    reservations=(NodeReservation("h200-06", "h200", 8),),
)


def _statuses(files: dict[str, bytes], schema_dir: Path) -> dict[str, tuple[str, list[str]]]:
    results = run_checks(files, fleet=FLEET, schema_dir=schema_dir)
    return {r.name: (r.status, r.details) for r in results}


def test_a_tree_with_reserved_nodes_passes_every_check(schema_dir: Path) -> None:
    found = _statuses(rendered_fleet(FLEET, reserved_tenant(), rich_tenant(), BANK), schema_dir)
    assert {name: status for name, (status, _) in found.items()} == {
        "schemas": "passed",
        "kustomize": found["kustomize"][0],  # kustomize may be missing on this machine
        "isolation": "passed",
        "capacity": "passed",
        "controllers": "passed",
        "duplicates": "passed",
        "scope": "passed",
    }


def test_a_node_reserved_for_two_tenants_fails(schema_dir: Path) -> None:
    twice = dataclasses.replace(BANK, reservations=(NodeReservation("h200-07", "h200", 8),))
    status, details = _statuses(rendered_fleet(FLEET, reserved_tenant(), twice), schema_dir)[
        "capacity"
    ]
    assert status == "failed"
    assert any(
        "[node-reserved-twice] node h200-07 is reserved for bank and vault" in d for d in details
    )


def test_reserved_gpus_leave_the_shared_pool(schema_dir: Path) -> None:
    # 16 reserved by vault plus its 4 shared: 44 are left; a tenant guaranteed 48 overcommits.
    greedy = dataclasses.replace(
        rich_tenant(),
        shares=(GpuShare(name="big", flavor="h200", kind="whole", count=48),),
        clusters=(),
        endpoints=(),
    )
    status, details = _statuses(rendered_fleet(FLEET, reserved_tenant(), greedy), schema_dir)[
        "capacity"
    ]
    assert status == "failed"
    assert any("nominal quota of nvidia.com/gpu is 68 but the pool has 64" in d for d in details)


def test_another_tenant_reaching_for_the_nodes_is_an_isolation_finding() -> None:
    files = rendered_fleet(FLEET, reserved_tenant(), rich_tenant())
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sneak", "namespace": "alpha"},
        "spec": {
            "nodeSelector": {RESERVED_KEY: "vault"},
            "tolerations": [{"key": RESERVED_KEY, "operator": "Exists"}],
            "containers": [{"name": "c", "image": "kserve/x:1"}],
        },
    }
    files["tenants/alpha/workloads/sneak.yaml"] = yaml.safe_dump(pod).encode()
    queues = "tenants/alpha/queues.yaml"
    docs = list(yaml.safe_load_all(files[queues]))
    queue = next(d for d in docs if d["kind"] == "ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "h200.vault"
    files[queues] = yaml.safe_dump_all(docs).encode()
    findings = [
        f
        for f in check_isolation(files, gateway_namespace=FLEET.gateway.namespace)
        if f.rule == "reserved-nodes"
    ]
    messages = sorted(f"{f.object}: {f.message}" for f in findings)
    assert messages == [
        "ClusterQueue/alpha: spec.resourceGroups[0].flavors[0] queues on flavor h200.vault, "
        "reserved nodes; a tenant's own nodes are its alone",
        "Pod/alpha/sneak: spec.nodeSelector.ai-factory.io/reserved-for selects nodes reserved "
        "for 'vault'; a tenant's own nodes are its alone",
        "Pod/alpha/sneak: spec.tolerations[0] tolerates nodes reserved for another tenant; a "
        "tenant's own nodes are its alone",
    ]
    # The owner's own directory has none.
    assert not [f for f in findings if "/vault/" in f.path]
    assert json.loads(files["tenants/vault/spec/reservations/h200-07.json"])["gpus"] == 8


def test_a_tenant_flavor_that_selects_shared_nodes_is_refused() -> None:
    files = rendered_fleet(FLEET, reserved_tenant())
    queues = "tenants/vault/queues.yaml"
    docs = list(yaml.safe_load_all(files[queues]))
    flavor = next(d for d in docs if d["kind"] == "ResourceFlavor")
    del flavor["spec"]["nodeLabels"][RESERVED_KEY]
    files[queues] = yaml.safe_dump_all(docs).encode()
    findings = check_isolation(files, gateway_namespace=FLEET.gateway.namespace)
    assert [f.object for f in findings if f.rule == "cluster-scoped"] == [
        "ResourceFlavor/h200.vault"
    ]


def test_a_reservation_change_stays_in_its_scope() -> None:
    from gitops.checks import scope

    after = dataclasses.replace(reserved_tenant(), clusters=())
    base = rendered_fleet(FLEET, dataclasses.replace(after, reservations=()))
    head = rendered_fleet(FLEET, after)
    changed = {p for p in set(base) | set(head) if base.get(p) != head.get(p)}
    asked = {"vault": ["reservations/h200-07", "reservations/h200-08"]}
    assert scope.violations(base, head, changed, asked) == []
    found = scope.violations(base, head, changed, {"vault": ["reservations/h200-07"]})
    assert [str(v) for v in found] == [
        "tenants/vault/spec/reservations/h200-08.json: this change adds the reservation of "
        "node h200-08, which none of its requests asks for"
    ]
