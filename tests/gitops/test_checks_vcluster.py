"""What a vCluster release may do to the host cluster, and who may use its service accounts
(issue 9, findings 2, 3, 5 and 14): the checks refuse each mistake before it merges."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gitops.checks.findings import Finding
from gitops.checks.isolation import check_isolation
from gitops.checks.vcluster import hosts_image, image_allowed
from gitops.fleet import demo_fleet
from gitops.render import render_repository
from gitops.render.yamlio import dump_documents, load_documents
from gitops.specs import TenantClusterSpec
from tests.gitops import checks_samples as samples
from tests.gitops.render_samples import rich_tenant

PLATFORM_SOURCES = {("HelmRepository", "flux-system", "vcluster")}


def check(files: dict[str, bytes]) -> list[Finding]:
    return check_isolation(
        files,
        gateway_namespace="gateway-system",
        platform_sources=PLATFORM_SOURCES,
        portal_subject=("portal-system", "portal"),
    )


def rules(findings: list[Finding]) -> list[str]:
    return sorted(f.rule for f in findings)


def tree_with_release(release: dict[str, Any]) -> dict[str, bytes]:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/clusters/dev.yaml"] = samples.dump(release)
    return tree


def test_a_compliant_release_passes() -> None:
    assert check(tree_with_release(samples.vcluster_release())) == []


def _values(release: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = release["spec"]["values"]
    return values


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        # Node sync grants fleet-wide pod reads and nodes/proxy (chart clusterrole.yaml).
        (
            lambda r: _values(r)["sync"]["fromHost"]["nodes"].update(enabled=True),
            "vcluster-node-sync",
        ),
        (
            lambda r: _values(r)["sync"]["fromHost"]["nodes"].update(syncBackChanges=True),
            "vcluster-node-sync",
        ),
        # "auto" creates a ClusterRole for volume snapshots alone.
        (
            lambda r: _values(r)["rbac"]["clusterRole"].update(enabled="auto"),
            "vcluster-cluster-role",
        ),
        (lambda r: _values(r).pop("rbac"), "vcluster-cluster-role"),
        # The chart's own quota and limit range land in the tenant's namespace.
        (
            lambda r: _values(r)["policies"]["resourceQuota"].update(enabled=True),
            "vcluster-host-quota",
        ),
        (lambda r: _values(r)["policies"].pop("limitRange"), "vcluster-host-quota"),
        (
            lambda r: r["spec"]["chart"]["spec"].update(version="0.30.0"),
            "vcluster-chart-version",
        ),
    ],
)
def test_a_release_reaching_beyond_its_namespace_fails(change: Any, rule: str) -> None:
    release = samples.vcluster_release()
    change(release)
    assert rule in rules(check(tree_with_release(release)))


def test_the_rewrite_hosts_image_must_pass_the_tenants_registry_policy() -> None:
    # The rendered tenant: its policy allows exactly the pinned image.
    files = render_repository(demo_fleet(), [rich_tenant()])
    assert "vcluster-hosts-image" not in rules(check(files))
    # Any other image the syncer would add to StatefulSet pods is refused.
    path = next(p for p in files if p.startswith("tenants/alpha/clusters/"))
    [release] = load_documents(files[path])
    _values(release)["sync"]["toHost"]["pods"]["rewriteHosts"] = {
        "initContainer": {"image": {"registry": "docker.io", "repository": "library/busybox"}}
    }
    broken = {**files, path: dump_documents([release])}
    [finding] = [f for f in check(broken) if f.rule == "vcluster-hosts-image"]
    assert "docker.io/library/busybox:3.20" in finding.message


def test_hosts_image_follows_the_chart_and_the_global_registry() -> None:
    assert hosts_image({}) == "mirror.gcr.io/library/alpine:3.20"
    values = {"controlPlane": {"advanced": {"defaultImageRegistry": "registry.corp"}}}
    assert hosts_image(values) == "registry.corp/library/alpine:3.20"
    assert image_allowed("kserve/x:1", "docker.io/vllm/* | kserve/*")
    assert not image_allowed("evil.io/kserve/x:1", "docker.io/vllm/* | kserve/*")


@pytest.mark.parametrize(
    "workload",
    [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "steal", "namespace": "alpha"},
            "spec": {
                "serviceName": "steal",
                "selector": {"matchLabels": {"app": "steal"}},
                "template": {
                    "metadata": {"labels": {"app": "steal"}},
                    "spec": {
                        "serviceAccountName": "vc-dev",
                        "containers": [{"name": "c", "image": "kserve/x:1"}],
                    },
                },
            },
        },
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "as-vcluster", "namespace": "alpha"},
            "spec": {
                "serviceAccountName": "vc-workload-dev",
                "chartRef": {"kind": "x", "name": "y"},
            },
        },
    ],
)
def test_tenant_workloads_may_not_use_a_vcluster_service_account(workload: dict[str, Any]) -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/extra.yaml"] = samples.dump(workload)
    assert "vcluster-service-account" in rules(check(tree))


def test_a_local_queue_named_default_fails_anywhere_in_a_tenant() -> None:
    queue = samples.local_queue()
    queue["metadata"]["name"] = "default"
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/queues.yaml"] = samples.dump(queue)
    assert "default-local-queue" in rules(check(tree))
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/extra.yaml"] = samples.dump(queue)
    assert "default-local-queue" in rules(check(tree))


def test_the_rendered_repository_with_clusters_passes() -> None:
    tenant = rich_tenant()
    assert tenant.clusters, "the sample tenant has a cluster"
    bare = TenantClusterSpec(name="cpu-only")
    files = render_repository(
        demo_fleet(), [dataclasses.replace(tenant, clusters=(*tenant.clusters, bare))]
    )
    assert check(files) == []
