"""The duplicates check: two documents of the tree that would be one object in the cluster,
found from the YAML alone (no kubectl, no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.checks import run_checks
from gitops.checks.duplicates import check_duplicates, helm_release_name
from gitops.fleet import demo_fleet
from gitops.render import (
    render_cluster_bootstrap,
    render_infrastructure,
    render_repository,
    render_tenant_tree,
    render_tenants_index,
)
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec, TenantSpec
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import hide_kubectl
from tests.gitops.render_samples import dedicated_tenant, rendered_fleet, rich_tenant

FLEET = demo_fleet()
FIXTURES = Path(__file__).parent / "fixtures"


def _config_map(name: str, namespace: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def _fleet_with(*tenants: TenantSpec) -> dict[str, bytes]:
    return rendered_fleet(FLEET, *tenants)


def test_tenant_and_cluster_names_that_join_to_one_release_are_found() -> None:
    files = _fleet_with(
        TenantSpec(slug="llm", clusters=(TenantClusterSpec(name="platform-x"),)),
        TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec(name="x"),)),
    )
    [finding] = check_duplicates(files)
    assert finding.object == "HelmRelease.helm.toolkit.fluxcd.io/flux-system/llm-platform-x"
    assert finding.rule == "duplicate-object"
    # Both files are named; the HelmChart both would make is the same pair, said once.
    assert "tenants/llm/clusters/platform-x.yaml" in finding.message
    assert "tenants/llm-platform/clusters/x.yaml" in finding.message


def test_a_change_that_adds_a_duplicate_fails_without_kubectl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_kubectl(monkeypatch)  # no kustomize build to notice it
    files = _fleet_with(
        TenantSpec(slug="llm", clusters=(TenantClusterSpec(name="platform-x"),)),
        TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec(name="x"),)),
    )
    results = {
        r.name: r
        for r in run_checks(files, fleet=FLEET, changed={"tenants/llm-platform/clusters/x.yaml"})
    }
    assert results["kustomize"].status == "skipped"
    assert results["duplicates"].status == "failed"
    assert results["duplicates"].summary == "1 problem"
    assert "flux-system/llm-platform-x" in results["duplicates"].details[0]


def test_genuine_duplicates_across_tenant_directories() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    # A cluster-scoped object has no namespace: the one each file writes does not matter.
    shared = samples.cluster_queue("alpha")
    shared["metadata"] = {"name": "shared", "namespace": "alpha"}
    other = samples.cluster_queue("bravo")
    other["metadata"] = {"name": "shared", "namespace": "bravo"}
    tree["tenants/alpha/extra.yaml"] = samples.dump(_config_map("notes", "alpha"), shared)
    tree["tenants/bravo/extra.yaml"] = samples.dump(other)
    # A namespaced object in another tenant's namespace, beside that tenant's own.
    tree["tenants/bravo/more.yaml"] = samples.dump(_config_map("notes", "alpha"))
    for slug, added in (("alpha", ["extra.yaml"]), ("bravo", ["extra.yaml", "more.yaml"])):
        path = f"tenants/{slug}/kustomization.yaml"
        listed = yaml.safe_load(tree[path])["resources"]
        tree[path] = samples.kustomization([*listed, *added])
    findings = {f.object: f for f in check_duplicates(tree)}
    assert set(findings) == {
        "ClusterQueue.kueue.x-k8s.io/shared",
        "ConfigMap/alpha/notes",
    }
    queue = findings["ClusterQueue.kueue.x-k8s.io/shared"]
    assert queue.path == "tenants/alpha/extra.yaml"
    assert "tenants/alpha/extra.yaml (document 2); tenants/bravo/extra.yaml." in queue.message
    assert (
        "tenants/alpha/extra.yaml; tenants/bravo/more.yaml."
        in findings["ConfigMap/alpha/notes"].message
    )


def test_same_names_in_different_namespaces_are_different_objects() -> None:
    tree = samples.fleet_tree("alpha", "bravo", "charlie")
    assert check_duplicates(tree) == []
    assert check_duplicates(render_repository(FLEET, [rich_tenant(), dedicated_tenant()])) == []


def test_kustomize_namespace_overrides_the_files_and_the_outermost_wins() -> None:
    base = {
        "apps/a/cm.yaml": samples.dump(_config_map("settings", "written")),
        "apps/b/cm.yaml": samples.dump(_config_map("settings", "written")),
    }
    # Both files say "written", but each build puts its copy in a namespace of its own.
    apart = {
        **base,
        "apps/a/kustomization.yaml": samples.kustomization(["cm.yaml"], namespace="team-a"),
        "apps/b/kustomization.yaml": samples.kustomization(["cm.yaml"], namespace="team-b"),
    }
    assert check_duplicates(apart) == []
    # An outer kustomization puts both into one namespace: now they are one object.
    together = {
        **apart,
        "apps/kustomization.yaml": samples.kustomization(["a", "b"], namespace="shared"),
    }
    [finding] = check_duplicates(together)
    assert finding.object == "ConfigMap/shared/settings"
    assert "apps/a/cm.yaml; apps/b/cm.yaml" in finding.message


def test_flux_target_namespace_puts_a_tenant_copy_beside_a_platform_object() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    # The tenant's workloads name no namespace; their Kustomization's targetNamespace is the
    # tenant's, where the platform keeps an object of the same name.
    tree["tenants/alpha/platform-config.yaml"] = samples.dump(_config_map("gateway", "alpha"))
    tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization(
        ["endpoints/llama3-8b.yaml", "claims.yaml", "config.yaml"]
    )
    tree["tenants/alpha/workloads/config.yaml"] = samples.dump(_config_map("gateway"))
    tree["tenants/bravo/workloads/kustomization.yaml"] = samples.kustomization(
        ["endpoints/llama3-8b.yaml", "claims.yaml", "config.yaml"]
    )
    tree["tenants/bravo/workloads/config.yaml"] = samples.dump(_config_map("gateway"))
    [finding] = check_duplicates(tree)
    assert finding.object == "ConfigMap/alpha/gateway"
    assert "tenants/alpha/platform-config.yaml; tenants/alpha/workloads/config.yaml" in (
        finding.message
    )


def test_name_prefixes_count_but_not_for_namespaces() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    tree = {
        "one/kustomization.yaml": b"resources: [objects.yaml]\nnamePrefix: one-\n",
        "one/objects.yaml": samples.dump(_config_map("cfg", "team"), namespace),
        "two/kustomization.yaml": b"resources: [objects.yaml]\nnamePrefix: two-\n",
        "two/objects.yaml": samples.dump(_config_map("cfg", "team"), namespace),
    }
    [finding] = check_duplicates(tree)
    assert finding.object == "Namespace/team"


def test_a_base_shared_by_two_overlays_is_not_its_own_duplicate() -> None:
    tree = {
        "base/kustomization.yaml": samples.kustomization(["cm.yaml"]),
        "base/cm.yaml": samples.dump(_config_map("cfg", "team")),
        "one/kustomization.yaml": samples.kustomization(["../base"]),
        "two/kustomization.yaml": samples.kustomization(["../base"]),
    }
    assert check_duplicates(tree) == []


def _helm_release(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "interval": "10m",
            "chartRef": {"kind": "OCIRepository", "name": "chart"},
            **spec,
        },
    }


def test_two_helm_releases_that_would_install_one_helm_release() -> None:
    # Different objects, but helm-controller names both releases "<targetNamespace>-<name>",
    # "team" + "a-b" and "team-a" + "b", and stores both in "apps".
    tree = {
        "apps/one.yaml": samples.dump(
            _helm_release("a-b", "flux-system", targetNamespace="team", storageNamespace="apps")
        ),
        "apps/two.yaml": samples.dump(
            _helm_release("b", "apps", targetNamespace="team-a", storageNamespace="apps")
        ),
    }
    [finding] = check_duplicates(tree)
    assert finding.object == "Helm release/apps/team-a-b"
    assert "apps/one.yaml, the Helm release of HelmRelease flux-system/a-b" in finding.message
    assert "apps/two.yaml, the Helm release of HelmRelease apps/b" in finding.message
    # An explicit releaseName, as the portal renders for vClusters, takes them apart.
    tree["apps/two.yaml"] = samples.dump(
        _helm_release(
            "b", "apps", targetNamespace="team-a", storageNamespace="apps", releaseName="b"
        )
    )
    assert check_duplicates(tree) == []


def test_helm_chart_names_join_namespace_and_name() -> None:
    def release(name: str, namespace: str) -> dict[str, Any]:
        obj = samples.vcluster_release()
        obj["metadata"] = {"name": name, "namespace": namespace}
        obj["spec"]["releaseName"] = name  # distinct Helm releases
        return obj

    # Both charts would be "flux-system-team-a" in flux-system, where their source is.
    tree = {
        "apps/one.yaml": samples.dump(release("team-a", "flux-system")),
        "apps/two.yaml": samples.dump(release("system-team-a", "flux")),
    }
    [finding] = check_duplicates(tree)
    assert finding.object == "HelmChart.source.toolkit.fluxcd.io/flux-system/flux-system-team-a"


def test_long_release_names_are_shortened_as_helm_controller_does() -> None:
    name = "a" * 40 + "-" + "b" * 20
    short = helm_release_name(name)
    assert len(short) == 53 and short.startswith("a" * 40 + "-")
    assert helm_release_name(name + "c") != short  # the hash keeps different names apart
    assert helm_release_name("short") == "short"


def test_the_demo_repository_and_bootstrap_have_no_duplicates() -> None:
    tenants = [
        TenantSpec(
            slug="vision",
            shares=(
                GpuShare(name="serve", flavor="h200", kind="whole", count=2),
                GpuShare(name="claims", flavor="h200-dra", kind="dra", count=2),
            ),
            clusters=(TenantClusterSpec(name="lab", node_pools=("h200",)),),
            endpoints=(
                EndpointSpec(name="caption", model_uri="hf://org/model", share="serve"),
                EndpointSpec(name="claimed", model_uri="hf://org/model", share="claims"),
            ),
        ),
        TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec(name="lab"),)),
        TenantSpec(slug="bank-risk", trust_level="dedicated"),
    ]
    files = render_repository(FLEET, tenants)
    files.update(render_cluster_bootstrap(FLEET, include_components=True))
    components = f"clusters/{FLEET.name}/flux-system/gotk-components.yaml"
    files[components] = (FIXTURES / "gotk-components.yaml").read_bytes()
    assert check_duplicates(files) == []


def test_objects_applied_into_other_clusters_do_not_collide() -> None:
    """Each tenant cluster gets the same bindings, applied by a Flux Kustomization through that
    cluster's own kubeconfig: one object per cluster, not two copies of one."""
    from gitops.specs import ClusterMember
    from tests.cluster_oidc import ISSUER, fleet_with_oidc

    fleet = fleet_with_oidc()
    tenant = TenantSpec(
        slug="alpha",
        clusters=(TenantClusterSpec(name="dev"), TenantClusterSpec(name="lab")),
        members=(ClusterMember(name="alice", role="admin", issuer=ISSUER, subject="sub-alice"),),
    )
    files = render_cluster_bootstrap(fleet)
    files.update(render_infrastructure(fleet))
    files.update(render_tenants_index(["alpha"]))
    files.update(render_tenant_tree(tenant, fleet))
    access = [p for p in files if p.startswith("tenants/alpha/cluster-access/")]
    assert {p.split("/")[3] for p in access} == {"dev", "lab"}
    assert check_duplicates(files) == []
    # Point lab's Kustomization at dev's kubeconfig: now both apply into one cluster.
    lab = next(
        p
        for p, b in files.items()
        if b"cluster-access/lab" in b and p.endswith(".yaml") and b"kubeConfig" in b
    )
    files[lab] = files[lab].replace(b"vc-lab", b"vc-dev")
    findings = check_duplicates(files)
    assert findings and all(
        "in the cluster of kubeconfig alpha/vc-dev" in f.object for f in findings
    )
