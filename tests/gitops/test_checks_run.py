"""run_checks: one result per check, on a whole tree or a change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitops.checks import CheckResult, run_checks
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import hide_kubectl, require_crds, require_kubectl

FLEET = samples.FLEET


@pytest.fixture
def crds_dir() -> Path:
    return require_crds()


@pytest.fixture
def kubectl() -> str:
    return require_kubectl()


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    assert [r.name for r in results] == [
        "schemas",
        "kustomize",
        "isolation",
        "capacity",
        "controllers",
        "duplicates",
        "scope",
    ]
    return {r.name: r for r in results}


def test_a_good_fleet_passes_every_check(crds_dir: Path, kubectl: str) -> None:
    results = by_name(
        run_checks(samples.fleet_tree("alpha", "bravo"), fleet=FLEET, schema_dir=crds_dir)
    )
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(results, "passed")
    assert results["schemas"].summary == "39 objects in 24 files valid; schemas: directory crds"
    assert results["kustomize"].summary.startswith("4 Flux paths of 4 build; kubectl v1.")


def test_results_are_json_serialisable(crds_dir: Path, kubectl: str) -> None:
    results = run_checks(samples.fleet_tree("alpha"), fleet=FLEET, schema_dir=crds_dir)
    data = json.loads(json.dumps([r.to_dict() for r in results]))
    assert data[0] == {
        "name": "schemas",
        "status": "passed",
        "summary": results[0].summary,
        "details": [results[0].details[0]],
    }
    assert data[0]["details"][0].startswith("schemas: directory crds (")


def test_a_change_is_checked_where_it_touches(crds_dir: Path, kubectl: str) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    results = by_name(
        run_checks(
            tree,
            fleet=FLEET,
            changed={"tenants/alpha/workloads/claims.yaml", "tenants/gone.yaml"},
            schema_dir=crds_dir,
        )
    )
    assert results["schemas"].summary == "1 object in 1 file valid; schemas: directory crds"
    assert results["kustomize"].details[1:] == ["tenants", "tenants/alpha/workloads"]


def test_each_check_reports_its_failures(crds_dir: Path, kubectl: str) -> None:
    tree = samples.fleet_tree("alpha", "bravo", "charlie")
    bad_route = samples.http_route(backend_namespace="bravo")
    bad_route["spec"]["rules"][0]["timeout"] = "1s"
    tree["tenants/alpha/workloads/endpoints/llama3-8b.yaml"] = samples.dump(bad_route)
    tree["tenants/bravo/workloads/kustomization.yaml"] = samples.kustomization(["missing.yaml"])
    queue = samples.cluster_queue("charlie")
    queue["spec"]["preemption"]["borrowWithinCohort"] = {"policy": "LowerPriority"}
    tree["tenants/charlie/queues.yaml"] = samples.dump(queue, samples.local_queue("charlie"))
    # A second copy of a flavor the platform already defines.
    tree["infrastructure/kustomization.yaml"] = samples.kustomization(
        ["flavors.yaml", "sources.yaml", "more-flavors.yaml"]
    )
    tree["infrastructure/more-flavors.yaml"] = samples.dump(samples.resource_flavor("h200"))
    results = by_name(
        run_checks(
            tree,
            fleet=FLEET,
            changed={
                "tenants/alpha/workloads/endpoints/llama3-8b.yaml",
                "tenants/bravo/workloads/kustomization.yaml",
            },
            schema_dir=crds_dir,
            # The change was asked for another endpoint of alpha, nothing of bravo's.
            scopes={"alpha": {"endpoints/chat"}},
        )
    )
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(results, "failed")
    assert results["scope"].details == [
        "tenants/alpha/workloads/endpoints/llama3-8b.yaml: this change alters endpoint "
        "llama3-8b, which none of its requests asks for"
    ]
    assert results["schemas"].details[1:] == [
        "tenants/alpha/workloads/endpoints/llama3-8b.yaml: "
        "HTTPRoute/llama3-8b spec.rules[0].timeout: unknown field 'timeout' "
        "(allowed here: backendRefs, filters, matches, name, timeouts)"
    ]
    [build_failure] = results["kustomize"].details[1:]
    assert build_failure.startswith(
        "tenants/bravo/workloads (Flux Kustomization bravo/bravo-workloads): "
    )
    assert "missing.yaml" in build_failure
    assert results["isolation"].details == [
        "tenants/alpha/workloads/endpoints/llama3-8b.yaml: HTTPRoute/alpha/llama3-8b: "
        "[cross-namespace-ref] spec.rules[0].backendRefs[0].namespace 'bravo' is another namespace"
    ]
    assert results["capacity"].summary == "1 problem"
    [preemption] = results["controllers"].details
    assert preemption.startswith(
        "tenants/charlie/queues.yaml: ClusterQueue/charlie: [fair-sharing] "
    )
    [duplicate] = results["duplicates"].details
    assert duplicate.startswith(
        "infrastructure/flavors.yaml: ResourceFlavor.kueue.x-k8s.io/h200: [duplicate-object] "
        "defined 2 times: infrastructure/flavors.yaml; infrastructure/more-flavors.yaml."
    )


def test_an_allowed_overcommit_passes_with_a_warning(crds_dir: Path, kubectl: str) -> None:
    tree = samples.fleet_tree("alpha", "bravo", "charlie")
    results = by_name(run_checks(tree, fleet=FLEET, schema_dir=crds_dir, allow_overcommit=True))
    assert results["capacity"].status == "passed"
    assert results["capacity"].summary.endswith("(1 warning)")
    assert results["capacity"].details[0].startswith("warning: ResourceFlavor/h200")


def test_isolation_also_checks_what_a_patch_builds(crds_dir: Path, kubectl: str) -> None:
    tree = samples.fleet_tree("alpha")
    # The files say nothing wrong; the patch moves the claim template out of the tenant.
    workloads = "tenants/alpha/workloads"
    tree[f"{workloads}/kustomization.yaml"] = (
        b"resources: [claims.yaml]\n"
        b"patches:\n"
        b"- path: move.yaml\n"
        b"  target: {kind: ResourceClaimTemplate}\n"
    )
    tree[f"{workloads}/move.yaml"] = b"- {op: add, path: /metadata/namespace, value: bravo}\n"
    results = by_name(run_checks(tree, fleet=FLEET, schema_dir=crds_dir))
    assert results["schemas"].status == "passed"
    assert results["isolation"].details == [
        "tenants/alpha/workloads (built): ResourceClaimTemplate/bravo/single-gpu: [namespace] "
        "namespace 'bravo' must be 'alpha' (or left out)"
    ]


def test_without_a_schema_dir_built_in_kinds_are_still_validated() -> None:
    results = by_name(run_checks(samples.fleet_tree("alpha"), fleet=FLEET, schema_dir=None))
    assert results["schemas"].status == "partial"
    assert results["schemas"].summary == (
        "8 objects validated, 15 custom resources without a schema: ClusterQueue, GitRepository, "
        "HTTPRoute, HelmRelease, HelmRepository, InferenceService, Kustomization, LocalQueue, "
        "3 more; "
        "schemas: built-in kinds only, no CRDs"
    )


def test_a_missing_schema_dir_fails(tmp_path: Path) -> None:
    results = by_name(
        run_checks(samples.fleet_tree("alpha"), fleet=FLEET, schema_dir=tmp_path / "nope")
    )
    assert results["schemas"].status == "failed"
    assert "does not exist" in results["schemas"].summary


def test_without_kubectl_the_build_check_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_kubectl(monkeypatch)
    results = by_name(run_checks(samples.fleet_tree("alpha"), fleet=FLEET, schema_dir=None))
    assert results["kustomize"].status == "skipped"
    assert "kubectl" in results["kustomize"].summary
    assert results["isolation"].status == "passed"


def test_a_crashing_check_does_not_hide_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    import gitops.checks as checks

    def explode(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(checks, "capacity_findings", explode)
    hide_kubectl(monkeypatch)
    results = by_name(run_checks(samples.fleet_tree("alpha"), fleet=FLEET, schema_dir=None))
    assert (results["capacity"].status, results["capacity"].details) == ("failed", ["boom"])
    assert results["isolation"].status == "passed"


def test_malformed_manifests_fail_the_checks_without_crashing_them(crds_dir: Path) -> None:
    malformed: list[dict[Any, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": "alpha"},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": 5, "labels": {1: 2}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "spec": [1]},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "alpha"},
            "spec": {"resourceGroups": [None, {"flavors": [1, {"resources": "x"}]}]},
        },
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "spec": "x"},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "roleRef": "x"},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "spec": {"x": [1]}},
        {"apiVersion": 1, "kind": ["x"]},
    ]
    tree = {
        "tenants/alpha/workloads/bad.yaml": samples.dump(*malformed),
        "tenants/alpha/bad.yaml": samples.dump(*malformed),
        "tenants/alpha/kustomization.yaml": b"resources: 5\nnamespace: [1]\npatches: [1]\n",
        "clusters/broken.yaml": b"{{{",
        "infrastructure/binary.yaml": b"\x00\xff",
    }
    results = by_name(run_checks(tree, fleet=FLEET, schema_dir=crds_dir))
    for name in ("schemas", "isolation"):
        assert results[name].status == "failed"
        assert "crashed" not in results[name].summary
    assert "crashed" not in results["kustomize"].summary
    assert "crashed" not in results["duplicates"].summary
    assert results["capacity"].status == "passed"
