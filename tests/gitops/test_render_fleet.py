"""The demo fleet, fleet files and the configured fleet."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gitops.fleet import (
    base_fleet,
    configured_fleet,
    demo_fleet,
    flavor_mapping,
    load_fleet,
    parse_fleet,
)
from gitops.models import FleetInventory
from gitops.render import network
from gitops.specs import SpecError, TenantSpec

FLEET_FILE = """
name: lab
cohort: lab-gpus
max_gpus_per_tenant: 16
allowed_registries: [ghcr.io/lab/]
gateway: {name: gw, namespace: gw-system, hostname: models.lab.example}
flavors:
  - name: h100
    product: NVIDIA-H100-80GB-HBM3
    mode: whole
    gpus: 16
    gpu_memory_mib: 81559
    node_labels: {lab.example/pool: h100}
  - name: h100-dra
    product: NVIDIA-H100-80GB-HBM3
    mode: dra
    gpus: 8
    gpu_memory_mib: 81559
    node_labels: {lab.example/pool: h100-dra, nvidia.com/gpu.deploy.device-plugin: "false"}
  - name: h100-mig
    product: NVIDIA-H100-80GB-HBM3
    mode: mig
    gpus: 4
    gpu_memory_mib: 81559
    mig_profiles: {1g.10gb: 14, 3g.40gb: 4}
    topology: false
"""


def test_it_describes_the_demo_fleet() -> None:
    fleet = demo_fleet()
    flavors = {f.name: f for f in fleet.flavors}
    assert sum(f.gpus for f in fleet.flavors) == 16 * 8
    assert (flavors["h200"].mode, flavors["h200"].gpus) == ("whole", 64)
    # DRA GPUs are a pool of their own, whose nodes run no device plugin.
    dra = flavors["h200-dra"]
    assert (dra.mode, dra.gpus) == ("dra", 16)
    assert ("nvidia.com/gpu.deploy.device-plugin", "false") in dra.node_labels
    assert dict(flavors["h200-mig"].mig_profiles) == {"1g.18gb": 32, "2g.35gb": 16, "3g.71gb": 16}
    assert (flavors["h200-hami"].gpus, flavors["h200-hami"].hami_split) == (32, 10)


def test_it_loads_a_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET_FILE)
    fleet = load_fleet(path)
    assert (fleet.name, fleet.cohort, fleet.max_gpus_per_tenant) == ("lab", "lab-gpus", 16)
    assert fleet.gateway.namespace == "gw-system"
    assert fleet.allowed_registries == ("ghcr.io/lab/",)
    h100, dra, mig = fleet.flavors
    assert h100.node_labels == (("lab.example/pool", "h100"),)
    assert (dra.mode, dra.gpus) == ("dra", 8)
    assert mig.mig_profiles == (("1g.10gb", 14), ("3g.40gb", 4))
    assert mig.topology is False
    # Defaults stay defaults.
    assert fleet.git_branch == "main"


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("name: lab\ncolour: red\n", "colour", "Unknown key 'colour'"),
        (
            "flavors:\n  - {name: a, product: P, mode: whole, gpus: two, gpu_memory_mib: 1}\n",
            "flavors[0].gpus",
            "whole number",
        ),
        (
            "flavors:\n  - {name: a, product: P, mode: whole, gpu_memory_mib: 1}\n",
            "flavors[0].gpus",
            "required",
        ),
        (
            "flavors:\n  - {name: a, product: P, mode: tpu, gpus: 1, gpu_memory_mib: 1}\n",
            "flavors[0].mode",
            "one of",
        ),
        (
            "flavors:\n  - {name: a, product: P, mode: whole, gpus: 1, gpu_memory_mib: 1,"
            " dra: true}\n",
            "flavors[0].dra",
            "The key dra is gone: a device plugin and the NVIDIA DRA driver cannot serve the same",
        ),
        (
            "flavors:\n  - {name: a, product: P, mode: dra, gpus: 1, gpu_memory_mib: 1}\n",
            "flavors[0].node_labels",
            "nvidia.com/gpu.deploy.device-plugin: 'false'",
        ),
        ("gateway: {name: gw, port: 80}\n", "gateway.port", "Unknown key"),
        (
            "gateway: {name: gw, implementation: nginx}\n",
            "gateway.implementation",
            "Must be one of envoy-gateway, cilium",
        ),
        ("max_gpus_per_tenant: true\n", "max_gpus_per_tenant", "whole number"),
        ("topology_levels: kubernetes.io/hostname\n", "topology_levels", "list"),
        ("name: Bad Name\n", "name", "DNS label"),
        ("node_local_dns: 169.254.20\n", "node_local_dns", "not an IP address"),
        ("node_local_dns: [169.254.20.10]\n", "node_local_dns", "Must be text"),
        ("pods_ready: {timeout_seconds: 0}\n", "pods_ready.timeout_seconds", "at least 1"),
        ("pods_ready: {recovery_seconds: -5}\n", "pods_ready.recovery_seconds", "at least 0"),
        ("pods_ready: {requeue_limit: 1.5}\n", "pods_ready.requeue_limit", "whole number"),
        ("pods_ready: {timeout: 5m}\n", "pods_ready.timeout", "Unknown key"),
        (
            "pods_ready: {backoff_base_seconds: 600, backoff_max_seconds: 60}\n",
            "pods_ready.backoff_max_seconds",
            "must be at least the first one",
        ),
        ("pods_ready: 600\n", "pods_ready", "mapping"),
        ("- just\n- a list\n", "(file)", "mapping"),
        ("", "(file)", "mapping"),
    ],
)
def test_it_names_the_key_of_a_bad_fleet_file(
    tmp_path: Path, text: str, path: str, fragment: str
) -> None:
    file = tmp_path / "fleet.yaml"
    file.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_fleet(file)
    assert path in caught.value.errors, caught.value.errors
    assert fragment in caught.value.errors[path]


def test_it_reads_the_gateway_implementation(tmp_path: Path) -> None:
    file = tmp_path / "fleet.yaml"
    file.write_text(
        "gateway: {name: gw, namespace: gw-system, hostname: models.lab.example,"
        " implementation: cilium}\n"
    )
    assert load_fleet(file).gateway.implementation == "cilium"
    file.write_text("gateway: {proxy_namespace: eg}\n")
    gateway = load_fleet(file).gateway
    assert (gateway.implementation, gateway.proxy_namespace) == ("envoy-gateway", "eg")


def test_it_reports_yaml_syntax_errors(tmp_path: Path) -> None:
    file = tmp_path / "fleet.yaml"
    file.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as caught:
        load_fleet(file)
    assert "not valid YAML" in caught.value.errors["(file)"]


def test_it_uses_the_demo_fleet_unless_a_file_is_configured(settings: Any, tmp_path: Path) -> None:
    settings.GITOPS_FLEET_FILE = ""
    settings.GITOPS_FLEET_NAME = "demo-lab"
    settings.GITOPS_MAIN_BRANCH = "trunk"
    fleet = base_fleet()
    assert (fleet.name, fleet.git_branch) == ("demo-lab", "trunk")
    assert fleet.flavors == demo_fleet().flavors

    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET_FILE)
    settings.GITOPS_FLEET_FILE = str(path)
    assert base_fleet().name == "lab"


@pytest.mark.django_db
def test_it_takes_flavors_from_the_stored_inventory(settings: Any) -> None:
    settings.GITOPS_FLEET_FILE = ""
    assert configured_fleet().flavors == demo_fleet().flavors  # nothing counted yet
    counted = dataclasses.replace(demo_fleet().flavors[0], gpus=72)
    FleetInventory.objects.create(
        flavors=[flavor_mapping(counted)], topology_levels=["kubernetes.io/hostname"]
    )
    fleet = configured_fleet()
    assert fleet.flavors == (counted,)
    assert fleet.topology_levels == ("kubernetes.io/hostname",)
    assert fleet.gateway == demo_fleet().gateway  # everything else is still configured
    # A stored inventory that no longer parses is ignored, not fatal.
    FleetInventory.objects.update(flavors=[{"name": "x", "gpus": "many"}])
    assert configured_fleet().flavors == demo_fleet().flavors


def test_nodelocal_dns_is_a_fleet_setting_the_dns_policy_allows() -> None:
    fleet = parse_fleet({"name": "lab", "node_local_dns": "169.254.20.10"})
    assert fleet.node_local_dns == "169.254.20.10"
    assert parse_fleet({"name": "lab"}).node_local_dns == ""

    def dns_rules(fleet: Any) -> list[dict[str, Any]]:
        (policy,) = [
            o
            for o in network.tenant_objects(TenantSpec(slug="alpha"), fleet)
            if o["metadata"]["name"] == "allow-dns"
        ]
        return list(policy["spec"]["egress"])

    without = dns_rules(parse_fleet({"name": "lab"}))
    assert len(without) == 1 and "ipBlock" not in without[0]["to"][0]
    kube_dns, local = dns_rules(fleet)
    assert kube_dns == without[0]
    assert local == {
        "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
