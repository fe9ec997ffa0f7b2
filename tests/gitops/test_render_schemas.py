"""Every rendered object validates, strictly, against the upstream schemas in ../shared/crds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args

import pytest

from gitops.checks.schema import get_registry, validate_objects
from gitops.fleet import demo_fleet
from gitops.render import objects_for, render_repository
from gitops.specs import (
    ClusterSize,
    EndpointSpec,
    GatewayImplementation,
    ScaleMetric,
    TenantClusterSpec,
)
from tests.gitops.render_samples import dedicated_tenant, reserved_tenant, rich_tenant


@pytest.mark.parametrize("stack", [False, True])
@pytest.mark.parametrize("implementation", get_args(GatewayImplementation))
def test_it_renders_only_objects_the_schemas_accept(
    schema_dir: Path, implementation: GatewayImplementation, stack: bool
) -> None:
    fleet = demo_fleet()
    fleet = dataclasses.replace(
        fleet,
        gateway=dataclasses.replace(
            fleet.gateway, implementation=implementation, cluster_issuer="letsencrypt"
        ),
        secret_store="vault",
        stack=stack,
    )
    files = render_repository(fleet, [rich_tenant(), dedicated_tenant(), reserved_tenant()])
    objs = objects_for(files)
    # Each implementation's own kinds are among them, so they are validated too.
    kinds = {o["kind"] for o in objs}
    assert ("SecurityPolicy" in kinds) == (implementation == "envoy-gateway")
    assert ("CiliumNetworkPolicy" in kinds) == (implementation == "cilium")
    assert ("GatewayClass" in kinds) == (implementation == "envoy-gateway")
    # The stack's releases and sources, strictly against Flux's CRDs.
    assert ("OCIRepository" in kinds) == stack
    assert {"HelmRelease", "HelmRepository"} <= kinds
    # The production platform's kinds (the Kueue manager configuration is a ConfigMap; its
    # content is checked against Kueue's own fields in test_render_platform).
    assert {
        "ConfigMap",
        "ExternalSecret",
        "Gateway",
        "PodMonitor",
        "PriorityClass",
        "ServiceMonitor",
    } <= kinds
    registry = get_registry(schema_dir)
    unknown = {
        (o["apiVersion"], o["kind"]) for o in objs if not registry.knows(o["apiVersion"], o["kind"])
    }
    assert not unknown, f"no schema for {sorted(unknown)}"
    # Kyverno's and the GPU Operator's ClusterPolicy share a kind: both are validated.
    assert {("kyverno.io/v1", "ClusterPolicy"), ("nvidia.com/v1", "ClusterPolicy")} <= {
        (o["apiVersion"], o["kind"]) for o in objs
    }
    errors = validate_objects(objs, schema_dir)
    assert not errors, "\n".join(map(str, errors))


def test_it_validates_every_scaling_mode_and_cluster_size(schema_dir: Path) -> None:
    tenant = rich_tenant()
    endpoints = tuple(
        dataclasses.replace(
            tenant.endpoints[1], name=f"scale-{metric}", scale_metric=metric, scale_target=50
        )
        for metric in get_args(ScaleMetric)
    )
    sizes: tuple[tuple[ClusterSize, str], ...] = (
        ("small", "1.32"),
        ("medium", "1.34"),
        ("large", "1.35"),
    )
    clusters = tuple(
        TenantClusterSpec(name=f"vc-{size}", size=size, kubernetes_version=version)
        for size, version in sizes
    )
    tenant = dataclasses.replace(
        tenant,
        endpoints=(*endpoints, EndpointSpec(name="fixed", model_uri="hf://a/b", share="train")),
        clusters=(*tenant.clusters, *clusters),
    )
    errors = validate_objects(objects_for(render_repository(demo_fleet(), [tenant])), schema_dir)
    assert not errors, "\n".join(map(str, errors))
