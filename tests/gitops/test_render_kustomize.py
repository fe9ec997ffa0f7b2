"""Every directory a Flux Kustomization points at builds with ``kubectl kustomize``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.checks import run_checks
from gitops.checks.kustomize import patches_matching_nothing
from gitops.fleet import demo_fleet
from gitops.render import flux, objects_for, render_cluster_bootstrap, render_repository
from gitops.render.flux import CROSS_NAMESPACE_CONTROLLERS, lockdown_patches
from gitops.render.meta import kustomization
from gitops.render.yamlio import dump_documents
from gitops.specs import TenantSpec
from tests.gitops.checks_support import require_kubectl
from tests.gitops.render_samples import dedicated_tenant, rich_tenant

FLEET = demo_fleet()


@pytest.fixture
def kubectl() -> str:
    return require_kubectl()


def _write(files: dict[str, bytes], root: Path) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _build(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, f"{directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_it_builds_every_flux_path(kubectl: str, tmp_path: Path) -> None:
    files = render_repository(FLEET, [rich_tenant(), dedicated_tenant()])
    _write(files, tmp_path)
    flux_paths = {
        obj["spec"]["path"].removeprefix("./")
        for obj in objects_for(files)
        if obj["kind"] == "Kustomization" and obj["apiVersion"].startswith("kustomize.toolkit")
    }
    assert flux_paths == {
        "clusters/ai-factory",
        "infrastructure/controllers",
        "infrastructure/configs",
        "tenants",
        "tenants/alpha/workloads",
        "tenants/bravo/workloads",
    }
    built = {path: _build(kubectl, tmp_path / path) for path in sorted(flux_paths)}
    # The platform build holds every platform file's objects and none of the workloads.
    platform = {
        p: d for p, d in files.items() if p.startswith("tenants/") and "/workloads/" not in p
    }
    assert len(built["tenants"]) == len(objects_for(platform))
    # LiteLLM's ConfigMaps are platform-owned: a tenant could otherwise point LiteLLM anywhere.
    assert {o["kind"] for o in built["tenants/alpha/workloads"]} == {
        "HTTPRoute",
        "InferenceService",
        "ResourceClaimTemplate",
    }


def test_it_builds_a_tenant_without_workloads(kubectl: str, tmp_path: Path) -> None:
    files = render_repository(FLEET, [TenantSpec(slug="empty")])
    _write(files, tmp_path)
    assert _build(kubectl, tmp_path / "tenants/empty/workloads") == []
    assert {o["kind"] for o in _build(kubectl, tmp_path / "tenants")} >= {
        "Namespace",
        "ClusterQueue",
    }


def test_it_builds_an_empty_tenants_index(kubectl: str, tmp_path: Path) -> None:
    _write(render_repository(FLEET, []), tmp_path)
    assert _build(kubectl, tmp_path / "tenants") == []


def _controller(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "flux-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "manager", "image": "x", "args": ["--log-level=info"]}]
                },
            },
        },
    }


def test_it_locks_down_the_flux_controllers(kubectl: str, tmp_path: Path) -> None:
    files = render_cluster_bootstrap(FLEET, include_components=True)
    components = [_controller(name) for name in (*CROSS_NAMESPACE_CONTROLLERS, "source-controller")]
    files["clusters/ai-factory/flux-system/gotk-components.yaml"] = dump_documents(components)
    _write(files, tmp_path)
    built = _build(kubectl, tmp_path / "clusters/ai-factory/flux-system")
    args = {
        obj["metadata"]["name"]: obj["spec"]["template"]["spec"]["containers"][0]["args"]
        for obj in built
        if obj["kind"] == "Deployment"
    }
    assert args["kustomize-controller"] == [
        "--default-service-account=default",
        "--no-cross-namespace-refs=true",
        "--log-level=info",
        "--no-remote-bases=true",
    ]
    assert args["helm-controller"] == [
        "--default-service-account=default",
        "--no-cross-namespace-refs=true",
        "--log-level=info",
    ]
    for name in (
        "notification-controller",
        "image-reflector-controller",
        "image-automation-controller",
    ):
        assert args[name] == ["--no-cross-namespace-refs=true", "--log-level=info"]
    assert args["source-controller"] == ["--log-level=info"]
    (sync,) = [o for o in built if o["kind"] == "Kustomization"]
    assert sync["spec"]["serviceAccountName"] == "kustomize-controller"


def test_it_builds_the_bootstrap_before_flux_components_exist(kubectl: str, tmp_path: Path) -> None:
    files = render_cluster_bootstrap(FLEET)
    assert "clusters/ai-factory/flux-system/gotk-components.yaml" not in files
    _write(files, tmp_path)
    kinds = sorted(o["kind"] for o in _build(kubectl, tmp_path / "clusters/ai-factory"))
    assert kinds == [
        "GitRepository",
        "Kustomization",
        "Kustomization",
        "Kustomization",
        "Kustomization",
    ]


# --- the lockdown over realistic components (issue 9, finding 17) ---------------------------

COMPONENTS = (Path(__file__).parent / "fixtures" / "gotk-components.yaml").read_bytes()
FLUX_SYSTEM_DIR = "clusters/ai-factory/flux-system"


def test_the_lockdown_reaches_the_controllers_flux_install_renders(
    kubectl: str, tmp_path: Path
) -> None:
    files = render_cluster_bootstrap(FLEET, include_components=True)
    files[f"{FLUX_SYSTEM_DIR}/gotk-components.yaml"] = COMPONENTS
    _write(files, tmp_path)
    built = _build(kubectl, tmp_path / FLUX_SYSTEM_DIR)
    args = {
        obj["metadata"]["name"]: obj["spec"]["template"]["spec"]["containers"][0]["args"]
        for obj in built
        if obj["kind"] == "Deployment"
    }
    assert set(args) == {
        "source-controller",
        "kustomize-controller",
        "helm-controller",
        "notification-controller",
    }
    for name in ("kustomize-controller", "helm-controller", "notification-controller"):
        assert "--no-cross-namespace-refs=true" in args[name], name
    for name in ("kustomize-controller", "helm-controller"):
        assert "--default-service-account=default" in args[name], name
    assert args["kustomize-controller"][-1] == "--no-remote-bases=true"
    # Flux's own arguments stay.
    assert "--watch-all-namespaces=true" in args["kustomize-controller"]
    assert not any(a.startswith("--no-") for a in args["source-controller"])
    # And the check finds every patch target in the output.
    assert patches_matching_nothing(files, FLUX_SYSTEM_DIR, built) == []


def test_a_lockdown_without_components_is_refused_by_the_check(
    kubectl: str, tmp_path: Path
) -> None:
    # What the portal rendered before: the Deployment patches without gotk-components.yaml.
    files = render_cluster_bootstrap(FLEET)
    files[f"{FLUX_SYSTEM_DIR}/kustomization.yaml"] = dump_documents(
        [kustomization(["gotk-sync.yaml"], patches=lockdown_patches(include_components=True))]
    )
    _write(files, tmp_path)
    built = _build(kubectl, tmp_path / FLUX_SYSTEM_DIR)  # kustomize itself says nothing
    problems = patches_matching_nothing(files, FLUX_SYSTEM_DIR, built)
    assert len(problems) == 3
    assert all("matches no object" in p and "kind=Deployment" in p for p in problems)

    results = {
        r.name: r for r in run_checks(files, fleet=FLEET, changed=set(files), schema_dir=None)
    }
    assert results["kustomize"].status == "failed"
    assert "match nothing" in results["kustomize"].summary
    # As rendered now, the bootstrap without components has no patch that matches nothing.
    rendered = render_cluster_bootstrap(FLEET)
    results = {
        r.name: r for r in run_checks(rendered, fleet=FLEET, changed=set(rendered), schema_dir=None)
    }
    assert results["kustomize"].status == "passed", results["kustomize"].details


def test_the_docs_name_the_secret_gotk_sync_uses() -> None:
    (repo, _) = flux.gotk_sync(FLEET)
    secret = repo["spec"]["secretRef"]["name"]
    guide = (Path(__file__).parents[2] / "docs" / "operator-guide.md").read_text()
    assert f"flux create secret git {secret} " in guide
    assert "--secret-name" not in guide or f"--secret-name={secret}" in guide
