"""Fabric partitions for dedicated tenants: the fleet file's ``fabric``, validated, and the
Multus NetworkAttachmentDefinitions rendered from it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gitops.checks.isolation import check_isolation
from gitops.checks.network_attachment import cni_config_problems
from gitops.checks.schema import SchemaRegistry, get_registry
from gitops.fleet import demo_fleet, flavor_free_fields, flavor_mapping, load_fleet, parse_fleet
from gitops.render import fabric, jobs, kueue_config, objects_for, render_tenant_tree
from gitops.specs import (
    BatchJobSpec,
    Fabric,
    FabricPartition,
    FabricPool,
    SpecError,
    TenantSpec,
)
from tests.gitops.render_samples import dedicated_tenant, rich_tenant
from tests.gitops.test_render_platform import KUEUE_CONFIGURATION_SCHEMA

IB_FABRIC = {
    "kind": "infiniband",
    "pools": [
        {"flavor": "h200", "resource": "nvidia.com/rdma_ib0"},
        {"flavor": "h200-mig", "resource": "nvidia.com/rdma_ib1"},
    ],
    "partitions": [
        {"tenant": "bravo", "pkey": 0x0010, "subnet": "10.128.16.0/24"},
        {"tenant": "delta", "pkey": 0x0011},
    ],
}


def fleet_data(fabric_data: dict[str, Any]) -> dict[str, Any]:
    """The demo fleet as a fleet file would hold it, with ``fabric_data``."""
    base = demo_fleet()
    return {
        **flavor_free_fields(base),
        "flavors": [flavor_mapping(f) for f in base.flavors],
        "fabric": fabric_data,
    }


def with_partitions(*partitions: dict[str, Any], kind: str = "infiniband") -> dict[str, Any]:
    return fleet_data({**IB_FABRIC, "kind": kind, "partitions": list(partitions)})


def test_a_fleet_file_declares_the_fabric(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    # YAML reads 0x0010 as the number 16: keys are written as InfiniBand tools show them.
    text = yaml.safe_dump(fleet_data(IB_FABRIC)).replace("pkey: 16", "pkey: 0x0010")
    path.write_text(text, encoding="utf-8")
    fleet = load_fleet(path)
    assert fleet.fabric == Fabric(
        kind="infiniband",
        pools=(
            FabricPool("h200", "nvidia.com/rdma_ib0"),
            FabricPool("h200-mig", "nvidia.com/rdma_ib1"),
        ),
        partitions=(
            FabricPartition("bravo", pkey=0x10, subnet="10.128.16.0/24"),
            FabricPartition("delta", pkey=0x11),
        ),
    )
    # A spec turned back into data (the stored inventory's path) parses to the same fleet.
    assert parse_fleet({**flavor_free_fields(fleet), "flavors": fleet_data(IB_FABRIC)["flavors"]})


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        (
            with_partitions({"tenant": "bravo", "pkey": 16}, {"tenant": "delta", "pkey": 16}),
            "fabric.partitions[1].pkey",
            "already the partition of tenant 'bravo'",
        ),
        (
            with_partitions(
                {"tenant": "bravo", "vlan": 100, "subnet": "10.1.0.0/24"},
                {"tenant": "delta", "vlan": 100, "subnet": "10.2.0.0/24"},
                kind="roce",
            ),
            "fabric.partitions[1].vlan",
            "already the partition of tenant 'bravo'",
        ),
        (
            with_partitions({"tenant": "bravo", "pkey": 0x7FFF}),
            "fabric.partitions[0].pkey",
            "0x7fff",
        ),
        (
            with_partitions({"tenant": "bravo", "pkey": 0xFFFF}),
            "fabric.partitions[0].pkey",
            "0xffff",
        ),
        (
            with_partitions({"tenant": "bravo", "pkey": 0}),
            "fabric.partitions[0].pkey",
            "0x0001-0x7ffe",
        ),
        (
            with_partitions(
                {"tenant": "bravo", "vlan": 4095, "subnet": "10.1.0.0/24"}, kind="roce"
            ),
            "fabric.partitions[0].vlan",
            "at most 4094",
        ),
        (
            with_partitions({"tenant": "bravo", "vlan": 0, "subnet": "10.1.0.0/24"}, kind="roce"),
            "fabric.partitions[0].vlan",
            "at least 1",
        ),
        (
            with_partitions({"tenant": "bravo", "pkey": 16, "vlan": 7}),
            "fabric.partitions[0].vlan",
            "partitioned by pkey",
        ),
        (
            with_partitions({"tenant": "bravo", "vlan": 7}, kind="roce"),
            "fabric.partitions[0].subnet",
            "needs a subnet",
        ),
        (
            with_partitions(
                {"tenant": "bravo", "pkey": 16, "subnet": "10.1.0.0/16"},
                {"tenant": "delta", "pkey": 17, "subnet": "10.1.2.0/24"},
            ),
            "fabric.partitions[1].subnet",
            "overlaps the subnet of tenant 'bravo'",
        ),
        (
            with_partitions({"tenant": "bravo", "pkey": 16}, {"tenant": "bravo", "pkey": 17}),
            "fabric.partitions[1].tenant",
            "already has a partition",
        ),
        (
            fleet_data({**IB_FABRIC, "pools": [{"flavor": "b300", "resource": "nvidia.com/ib"}]}),
            "fabric.pools[0].flavor",
            "no pool 'b300'",
        ),
        (
            fleet_data({**IB_FABRIC, "pools": [{"flavor": "h200", "resource": "rdma_ib0"}]}),
            "fabric.pools[0].resource",
            "not an extended resource name",
        ),
        (fleet_data({**IB_FABRIC, "kind": "ethernet"}), "fabric.kind", "Must be one of"),
        (fleet_data({**IB_FABRIC, "pkey": 16}), "fabric.pkey", "Unknown key"),
    ],
)
def test_bad_fabric_settings_are_refused_naming_the_key(
    data: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_fleet(data)
    assert key in caught.value.errors, caught.value.errors
    assert words in caught.value.errors[key]


def fabric_fleet() -> Any:
    return parse_fleet(fleet_data(IB_FABRIC))


def test_only_a_dedicated_tenant_may_own_a_partition() -> None:
    shared = dataclasses.replace(dedicated_tenant(), trust_level="shared")
    with pytest.raises(SpecError) as caught:
        render_tenant_tree(shared, fabric_fleet())
    assert "only a dedicated tenant" in caught.value.errors["trust_level"]


def nads(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [o for o in objects_for(files) if o["kind"] == fabric.KIND]


def test_a_dedicated_tenant_gets_an_attachment_per_pool_it_uses(schema_dir: Path) -> None:
    files = render_tenant_tree(dedicated_tenant(), fabric_fleet())
    assert "tenants/bravo/fabric.yaml" in files
    kustomization = yaml.safe_load(files["tenants/bravo/kustomization.yaml"])
    assert "fabric.yaml" in kustomization["resources"]
    attachments = {o["metadata"]["name"]: o for o in nads(files)}
    assert sorted(attachments) == ["fabric-h200", "fabric-h200-mig"]
    h200 = attachments["fabric-h200"]
    assert h200["apiVersion"] == "k8s.cni.cncf.io/v1"
    assert h200["metadata"]["namespace"] == "bravo"
    assert h200["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "nvidia.com/rdma_ib0"
    }
    assert json.loads(h200["spec"]["config"]) == {
        "cniVersion": "1.0.0",
        "name": "fabric-h200",
        "type": "ib-sriov",
        "pkey": "0x0010",
        "link_state": "enable",
        "ibKubernetesEnabled": True,
        "rdmaIsolation": True,
        "ipam": {"type": "whereabouts", "range": "10.128.16.0/24"},
    }
    registry = get_registry(schema_dir)
    for obj in attachments.values():
        assert registry.validate(obj) == []


def test_roce_attachments_carry_the_tenants_vlan() -> None:
    fleet = parse_fleet(
        with_partitions({"tenant": "bravo", "vlan": 210, "subnet": "10.210.0.0/24"}, kind="roce")
    )
    (nad, _mig) = nads(render_tenant_tree(dedicated_tenant(), fleet))
    assert json.loads(nad["spec"]["config"]) == {
        "cniVersion": "1.0.0",
        "name": "fabric-h200",
        "type": "sriov",
        "vlan": 210,
        "spoofchk": "on",
        "trust": "off",
        "link_state": "enable",
        "ipam": {"type": "whereabouts", "range": "10.210.0.0/24"},
    }
    assert cni_config_problems(nad["spec"]["config"]) == []


def test_no_attachment_without_a_partition_or_a_fabric_pool() -> None:
    fleet = fabric_fleet()
    # Shared tenants, a dedicated tenant without a partition, and pools without a fabric.
    assert nads(render_tenant_tree(rich_tenant(), fleet)) == []
    other = dataclasses.replace(dedicated_tenant(), slug="echo")
    assert nads(render_tenant_tree(other, fleet)) == []
    assert nads(render_tenant_tree(dedicated_tenant(), demo_fleet())) == []
    assert fabric.tenant_objects(TenantSpec(slug="delta", trust_level="dedicated"), fleet) == []


def test_a_bad_partition_key_renders_nothing() -> None:
    data = with_partitions({"tenant": "bravo", "pkey": 16}, {"tenant": "delta", "pkey": 16})
    fleet = dataclasses.replace(
        demo_fleet(),
        fabric=Fabric(
            kind="infiniband",
            pools=(FabricPool("h200", "nvidia.com/rdma_ib0"),),
            partitions=tuple(FabricPartition(**p) for p in data["fabric"]["partitions"]),
        ),
    )
    with pytest.raises(SpecError) as caught:
        render_tenant_tree(dedicated_tenant(), fleet)
    assert "fabric.partitions[1].pkey" in caught.value.errors


@pytest.mark.parametrize(
    ("config", "path", "words"),
    [
        ({"pKey": "0x0010"}, "spec.config.pKey", "unknown field"),
        ({"deviceID": "0000:03:02.0"}, "spec.config.deviceID", "unknown field"),
        ({"pkey": 16}, "spec.config.pkey", "hexadecimal"),
        ({"link_state": "up"}, "spec.config.link_state", "one of"),
        ({"rdmaIsolation": "yes"}, "spec.config.rdmaIsolation", "true or false"),
        (
            {"ipam": {"type": "whereabouts", "range": "10.0.0.0/24", "gateway": "x"}},
            "spec.config.ipam.gateway",
            "unknown field",
        ),
        ({"ipam": {"type": "dhcp"}}, "spec.config.ipam.type", "unknown IPAM"),
        ({"type": "macvlan"}, "spec.config.type", "not 'macvlan'"),
    ],
)
def test_the_cni_configuration_is_checked_against_the_plugins_fields(
    config: dict[str, Any], path: str, words: str
) -> None:
    base = {"cniVersion": "1.0.0", "name": "fabric-h200", "type": "ib-sriov", "pkey": "0x0010"}
    nad = {
        "apiVersion": fabric.API,
        "kind": fabric.KIND,
        "metadata": {"name": "fabric-h200", "namespace": "bravo"},
        "spec": {"config": json.dumps({**base, **config})},
    }
    problems = [e for e in SchemaRegistry().validate(nad) if e.path == path]
    assert problems and words in problems[0].message, SchemaRegistry().validate(nad)


def test_the_nad_schema_is_strict() -> None:
    nad = {
        "apiVersion": fabric.API,
        "kind": fabric.KIND,
        "metadata": {"name": "fabric-h200", "namespace": "bravo"},
        "spec": {"config": "{}", "conifg": "typo"},
    }
    problems = {e.path: e.message for e in SchemaRegistry().validate(nad)}
    assert "unknown field 'conifg'" in problems["spec.conifg"]


def test_a_tenant_may_not_write_its_own_attachment() -> None:
    files = render_tenant_tree(dedicated_tenant(), fabric_fleet())
    (nad, _mig) = nads(files)
    own = dict(nad, metadata={**nad["metadata"], "name": "mine"})
    files["tenants/bravo/workloads/mine.yaml"] = yaml.safe_dump(own).encode()
    kustomization = yaml.safe_load(files["tenants/bravo/workloads/kustomization.yaml"])
    kustomization["resources"].append("mine.yaml")
    files["tenants/bravo/workloads/kustomization.yaml"] = yaml.safe_dump(kustomization).encode()
    findings = check_isolation(files, gateway_namespace="gateway-system")
    assert [f.rule for f in findings if "mine.yaml" in f.path] == ["forbidden-kind"]


def test_kueue_leaves_the_fabric_resources_out_of_workloads() -> None:
    with_fabric = kueue_config.configuration(fabric_fleet())
    assert with_fabric["resources"]["excludeResourcePrefixes"] == [
        "nvidia.com/rdma_ib0",
        "nvidia.com/rdma_ib1",
    ]
    assert "excludeResourcePrefixes" not in kueue_config.configuration(demo_fleet())["resources"]
    # A field of kueue v0.19.2 apis/config/v1beta2 Resources: the strict decoder takes it.
    jsonschema.validate(with_fabric, KUEUE_CONFIGURATION_SCHEMA)


def test_a_dedicated_tenants_job_joins_its_partition() -> None:
    job = BatchJobSpec(name="tune", image="ghcr.io/ai-factory/trainer:1", share="serving", nodes=2)
    jobset = jobs.render_job(job, dedicated_tenant(), fabric_fleet())
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "fabric-h200"
    resources = template["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/rdma_ib0"] == "1"
    assert resources["requests"]["nvidia.com/rdma_ib0"] == "1"
    # Without a partition (a fleet without a fabric): neither.
    plain = jobs.render_job(job, dedicated_tenant(), demo_fleet())
    template = plain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert "k8s.v1.cni.cncf.io/networks" not in template["metadata"].get("annotations", {})
    assert "nvidia.com/rdma_ib0" not in template["spec"]["containers"][0]["resources"]["limits"]


def test_every_object_of_a_fabric_fleet_passes_the_strict_schemas(schema_dir: Path) -> None:
    fleet = fabric_fleet()
    files = render_tenant_tree(dedicated_tenant(), fleet)
    files.update(render_tenant_tree(rich_tenant(), fleet))
    registry = get_registry(schema_dir)
    objs = objects_for(files)
    # The shared tenant's policy refuses attachments of other namespaces too.
    policies = [o for o in objs if o["kind"] == "Policy" and o["metadata"]["namespace"] == "alpha"]
    rules = {r["name"] for p in policies for r in p["spec"]["rules"]}
    assert "confine-network-attachments" in rules
    problems = [str(e) for o in objs for e in registry.validate(o) if e.severity == "error"]
    assert problems == []
