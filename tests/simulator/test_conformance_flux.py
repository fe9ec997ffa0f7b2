"""The simulator's Flux against Flux's own unit tests: fluxcd/pkg ``kustomize`` v1.35.4 (the
version kustomize-controller v1.9.4 pins), ``kustomize/kustomize_generator_test.go``,
fluxcd/pkg ``ssa`` v0.76.1, ``ssa/manager_apply_test.go``, and kustomize-controller v1.9.4
``internal/controller/kustomization_acl_test.go``.

Inputs and expected outcomes are the upstream tests'; each test names its Go test (and case).
The builds run the real ``kubectl kustomize``, as the simulator does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from gitops.fleet import demo_fleet
from gitops.render.tree import render_repository
from gitops.specs import GpuShare, TenantSpec
from simulator import Simulator
from simulator.flux import apply_stages, force_selected
from simulator.kustomize import Build, Workspace, generate
from tests.simulator.test_simulator import (
    commit,
    condition,
    git_secret,
    kustomizations,
    repository,
)
from tests.simulator.test_simulator_flux_lockdown import CROSS_DENIED, tenant_files

GENERATOR_TEST = "fluxcd/pkg kustomize/v1.35.4 kustomize/kustomize_generator_test.go"


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    with Workspace() as ws:
        yield ws


def generated(files: dict[str, bytes], directory: str, spec: dict[str, Any]) -> dict[str, Any]:
    _, content = generate(files, directory, spec)
    loaded: dict[str, Any] = yaml.safe_load(content)
    return loaded


def build(ws: Workspace, files: dict[str, bytes], spec: dict[str, Any]) -> Build:
    return ws.build("test", files, spec.get("path", "./"), spec)


# --- the generator ----------------------------------------------------------------------------


def test_an_empty_directory_builds_to_nothing(workspace: Workspace) -> None:
    """TestGenerator_EmptyDir: the generated file holds ``_placeholder``; the build is empty."""
    spec = {"path": "./empty"}
    assert generated({"empty/.keep": b""}, "empty", spec)["namespace"] == "_placeholder"
    result = build(workspace, {"empty/.keep": b""}, spec)
    assert (result.ok, result.objects) == (True, [])


def test_a_kustomization_without_resources_gets_origin_annotations(workspace: Workspace) -> None:
    """TestGenerator_NoResources (testdata/noResources: ``resources: []``)."""
    files = {
        "kustomization.yaml": b"---\napiVersion: kustomize.config.k8s.io/v1beta1\n"
        b"kind: Kustomization\nresources: []\n"
    }
    assert generated(files, "", {"path": "./"})["buildMetadata"] == ["originAnnotations"]
    result = build(workspace, files, {"path": "./"})
    assert (result.ok, result.objects) == (True, [])


def test_name_prefix_suffix_and_target_namespace_apply(workspace: Workspace) -> None:
    """TestGenerator_NameTransformer (testdata/name: a configMapGenerator ``test-configmap``;
    ks.yaml: targetNamespace test-namespace, namePrefix prefix-, nameSuffix -suffix)."""
    files = {
        "kustomization.yaml": b"apiVersion: kustomize.config.k8s.io/v1beta1\n"
        b"kind: Kustomization\nconfigMapGenerator:\n  - name: test-configmap\n"
        b"    literals:\n      - foo=bar\n      - baz=qux\n"
    }
    spec = {
        "targetNamespace": "test-namespace",
        "namePrefix": "prefix-",
        "nameSuffix": "-suffix",
        "path": "./",
    }
    result = build(workspace, files, spec)
    assert result.ok, result.message
    [configmap] = result.objects
    assert "prefix-test-configmap-suffix" in configmap["metadata"]["name"]
    assert configmap["metadata"]["namespace"] == "test-namespace"


def test_build_metadata_from_the_kustomization_replaces_the_fallback(
    workspace: Workspace,
) -> None:
    """TestGenerator_BuildMetadata, TestGenerator_BuildMetadata_EmptySpec and
    TestGenerator_BuildMetadata_NoResources (testdata/buildMetadata: a configMapGenerator and
    no ``resources``; testdata/noResources)."""
    generator_only = {
        "kustomization.yaml": b"apiVersion: kustomize.config.k8s.io/v1beta1\n"
        b"kind: Kustomization\nconfigMapGenerator:\n  - name: test-configmap\n"
        b"    literals:\n      - foo=bar\n      - baz=qux\n"
    }
    both = ["originAnnotations", "transformerAnnotations"]
    assert generated(generator_only, "", {"buildMetadata": both})["buildMetadata"] == both
    result = build(workspace, generator_only, {"path": "./", "buildMetadata": both})
    assert result.ok and len(result.objects) == 1, result.message
    # EmptySpec: no buildMetadata in the Kustomization, no resources in the file.
    assert generated(generator_only, "", {})["buildMetadata"] == ["originAnnotations"]
    no_resources = {"kustomization.yaml": b"resources: []\n"}
    wanted = ["transformerAnnotations"]
    assert generated(no_resources, "", {"buildMetadata": wanted})["buildMetadata"] == wanted


@pytest.mark.parametrize(
    ("existing", "flux", "expected"),
    [
        # "test kustomization.yaml with components and Flux Kustomization without components"
        (True, [], ["componentA"]),
        # "test kustomization.yaml without components and Flux Kustomization with components"
        (False, ["componentB", "componentC"], ["componentB", "componentC"]),
        # "test kustomization.yaml with components and Flux Kustomization with components"
        (True, ["componentB", "componentC"], ["componentA", "componentB", "componentC"]),
    ],
)
def test_components_are_appended(existing: bool, flux: list[str], expected: list[str]) -> None:
    """Test_Components (testdata/components: ``components: [componentA]``)."""
    files = (
        {
            "kustomization.yaml": b"---\napiVersion: kustomize.config.k8s.io/v1beta1\n"
            b"kind: Kustomization\nresources:\n  - configmap.yaml\ncomponents:\n"
            b"  - componentA\n"
        }
        if existing
        else {}
    )
    assert generated(files, "", {"components": flux})["components"] == expected


COMPONENT = b"apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: []\n"


@pytest.mark.parametrize(
    ("components", "ignore", "fails", "expected"),
    [
        # "missing components with ignore enabled"
        (["existing-component", "missing-component"], True, False, ["existing-component"]),
        # "all components missing with ignore enabled"
        (["missing-component-1", "missing-component-2"], True, False, None),
        # "all components exist"
        (["existing-component"], True, False, ["existing-component"]),
        # "missing components with ignore disabled - should fail during build"
        (
            ["existing-component", "missing-component"],
            False,
            True,
            ["existing-component", "missing-component"],
        ),
    ],
)
def test_missing_components_are_dropped_only_when_ignored(
    workspace: Workspace,
    components: list[str],
    ignore: bool,
    fails: bool,
    expected: list[str] | None,
) -> None:
    """Test_IgnoreMissingComponents: components given from the ``overlay`` directory."""
    files = {"existing-component/kustomization.yaml": COMPONENT, "overlay/.keep": b""}
    spec = {
        "path": "./overlay",
        "components": [f"../{c}" for c in components],
        "ignoreMissingComponents": ignore,
    }
    found = generated(files, "overlay", spec).get("components")
    assert found == ([f"../{c}" for c in expected] if expected is not None else None)
    result = build(workspace, files, spec)
    assert result.ok is not fails, result.message
    if fails:
        assert "missing-component" in result.message


def test_a_remote_component_is_refused() -> None:
    """Test_IsLocalRelativePath as the generator uses it: "component path '...' must be
    local and relative"."""
    with pytest.raises(ValueError, match="must be local and relative"):
        generate({}, "", {"components": ["https://github.com/org/repo//component"]})


def test_an_existing_kustomization_is_read_and_not_written() -> None:
    """TestGenerateManifest, "existing kustomization returns unchanged action and file
    content" (testdata/resources: ``kustomization.yml`` with namespace apps and
    ./deployment.yaml, ./config.yaml; the Kustomization of testdata/kustomization.yaml)."""
    files = {
        "kustomization.yml": b"apiVersion: kustomize.config.k8s.io/v1beta1\n"
        b"kind: Kustomization\nnamespace: apps\nresources:\n- ./deployment.yaml\n"
        b"- ./config.yaml\n",
        "deployment.yaml": b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n",
        "config.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
    }
    kfile, content = generate(files, "", {"targetNamespace": "apps"})
    assert kfile == "kustomization.yml"
    kus = yaml.safe_load(content)
    assert {"./deployment.yaml", "./config.yaml"} <= set(kus["resources"])
    assert kus["namespace"] == "apps"


def test_an_empty_directory_generates_a_placeholder() -> None:
    """TestGenerateManifest, "empty dir returns created action with placeholder"."""
    kfile, content = generate({}, "", {"path": "./empty"})
    assert kfile == "kustomization.yaml"
    assert b"_placeholder" in content


IMAGE = "ghcr.io/example/app"
DIGEST = "sha256:" + "a" * 64
DEPLOYMENT = f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  selector:
    matchLabels:
      app: app
  template:
    metadata:
      labels:
        app: app
    spec:
      containers:
        - name: app
          image: {IMAGE}
""".encode()
NEW = "registry.example.com/app"


@pytest.mark.parametrize(
    ("existing", "flux", "expected", "image"),
    [
        pytest.param(
            {"newTag": "v1.2.3"},
            {"newName": NEW},
            {"newName": NEW, "newTag": "v1.2.3"},
            f"{NEW}:v1.2.3",
            id="existing newTag is preserved when only newName is set",
        ),
        pytest.param(
            {"newName": NEW},
            {"newTag": "v2.0.0"},
            {"newName": NEW, "newTag": "v2.0.0"},
            f"{NEW}:v2.0.0",
            id="existing newName is preserved when only newTag is set",
        ),
        pytest.param(
            {"digest": DIGEST},
            {"newName": NEW},
            {"newName": NEW, "digest": DIGEST},
            f"{NEW}@{DIGEST}",
            id="existing digest is preserved when only newName is set",
        ),
        pytest.param(
            {"digest": DIGEST},
            {"newTag": "v2.0.0"},
            {"newTag": "v2.0.0"},
            f"{IMAGE}:v2.0.0",
            id="existing digest is cleared when only newTag is set",
        ),
        pytest.param(
            {"newTag": "v1.2.3"},
            {"digest": DIGEST},
            {"digest": DIGEST},
            f"{IMAGE}@{DIGEST}",
            id="existing newTag is cleared when only digest is set",
        ),
        pytest.param(
            {"newName": NEW, "digest": DIGEST},
            {"newTag": "v2.0.0"},
            {"newName": NEW, "newTag": "v2.0.0"},
            f"{NEW}:v2.0.0",
            id="existing newName is preserved when newTag replaces digest",
        ),
        pytest.param(
            {"newTag": "v1.2.3"},
            {"newTag": "v2.0.0", "digest": DIGEST},
            {"newTag": "v2.0.0", "digest": DIGEST},
            f"{IMAGE}:v2.0.0@{DIGEST}",
            id="newTag and digest set together are both applied",
        ),
        pytest.param(
            {"newName": NEW, "newTag": "v1.2.3"},
            {},
            {"newName": NEW, "newTag": "v1.2.3"},
            f"{NEW}:v1.2.3",
            id="entry with only a name leaves the existing entry unchanged",
        ),
        pytest.param(
            {"newName": "old.example.com/app", "newTag": "v1.2.3"},
            {"newName": NEW, "newTag": "v2.0.0"},
            {"newName": NEW, "newTag": "v2.0.0"},
            f"{NEW}:v2.0.0",
            id="existing fields are overridden when set",
        ),
        pytest.param(
            None,
            {"newName": NEW, "newTag": "v2.0.0"},
            {"newName": NEW, "newTag": "v2.0.0"},
            f"{NEW}:v2.0.0",
            id="image without existing entry is appended",
        ),
    ],
)
def test_images_merge_into_the_kustomization(
    workspace: Workspace,
    existing: dict[str, str] | None,
    flux: dict[str, str],
    expected: dict[str, str],
    image: str,
) -> None:
    """Test_Images (each case by its upstream name)."""
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["deployment.yaml"],
    }
    if existing is not None:
        kustomization["images"] = [{"name": IMAGE, **existing}]
    files = {"deployment.yaml": DEPLOYMENT, "kustomization.yaml": yaml.safe_dump(kustomization)}
    spec = {"path": "./", "images": [{"name": IMAGE, **flux}]}
    encoded = {
        path: data if isinstance(data, bytes) else data.encode() for path, data in files.items()
    }
    assert generated(encoded, "", spec)["images"] == [{"name": IMAGE, **expected}]
    result = build(workspace, encoded, spec)
    assert result.ok, result.message
    [deployment] = result.objects
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_a_directory_without_a_kustomization_lists_manifests_and_kustomized_directories() -> None:
    """``scanManifests`` (kustomize_generator.go): YAML files by lexical walk; a sub-directory
    with its own kustomization file as a whole; other files left out."""
    files = {
        "apps/b.yaml": b"{}\n",
        "apps/a.yml": b"{}\n",
        "apps/notes.txt": b"x",
        "apps/nested/c.yaml": b"{}\n",
        "apps/base/kustomization.yaml": b"resources: []\n",
        "apps/base/ignored.yaml": b"{}\n",
    }
    kus = generated(files, "apps", {})
    assert kus["resources"] == ["./a.yml", "./b.yaml", "./base", "./nested/c.yaml"]
    assert "buildMetadata" not in kus


def test_a_missing_path_is_an_artifact_failure(workspace: Workspace) -> None:
    """kustomize-controller v1.9.4 ``reconcile``: "kustomization path not found" with
    ArtifactFailed, before anything is built; ``..`` does not leave the artifact
    (``securejoin.SecureJoin``)."""
    result = build(workspace, {"apps/a.yaml": b"{}\n"}, {"path": "./missing"})
    assert (result.ok, result.reason) == (False, "ArtifactFailed")
    assert result.message.startswith("kustomization path not found")
    climbing = build(
        workspace,
        {"a.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"},
        {"path": "../../"},
    )
    assert climbing.ok and [o["metadata"]["name"] for o in climbing.objects] == ["a"]


def test_a_reference_out_of_the_artifact_is_refused(workspace: Workspace) -> None:
    """``SecureBuild`` reads nothing outside the artifact's root (fluxcd/pkg
    ``kustomize/filesys``), and with ``--no-remote-bases`` no remote base either."""
    for reference in ("../../etc", "/etc/hostname", "https://github.com/org/repo//base"):
        files = {"apps/kustomization.yaml": f"resources:\n- {reference}\n".encode()}
        result = build(workspace, files, {"path": "./apps"})
        assert (result.ok, result.reason) == (False, "BuildFailed")
        assert "is not in or below" in result.message


def test_remote_bases_are_fetched_without_no_remote_bases(workspace: Workspace) -> None:
    """``SecureBuild(workDir, dirPath, !r.NoRemoteBases)``: without the flag kustomize fetches
    a remote base (a stand-in for kubectl answers here, offline); the artifact's root still
    holds for local paths and ``file://``."""
    fetched = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\n"
    kubectl = [sys.executable, "-c", f"print({fetched!r})"]
    for reference, ok in (
        ("https://github.com/org/repo//base?ref=v1", True),
        ("github.com/org/repo/base", True),
        ("file:///etc", False),
        ("../../etc", False),
    ):
        files = {"apps/kustomization.yaml": f"resources:\n- {reference}\n".encode()}
        result = workspace.build("test", files, "./apps", {}, remote_bases=True, command=kubectl)
        assert result.ok is ok, reference
        if ok:
            assert [o["metadata"]["name"] for o in result.objects] == ["fetched"]
        else:
            assert "is not in or below" in result.message


def test_a_cross_namespace_source_is_refused_once_the_flag_is_set(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    """TestKustomizationReconciler_NoCrossNamespaceRefs: a Kustomization reconciles from a
    source in another namespace; once kustomize-controller runs with
    ``--no-cross-namespace-refs`` (here: the flux-system build now holds the controllers with
    the lockdown) it is Ready False with ``AccessDenied`` and Stalled, and keeps what it
    applied (the last applied revision and its inventory)."""
    git_secret(simulator)
    repo = repository(settings)
    first = commit(repo, tenant_files(components=False), None)
    simulator.tick()
    cross = kustomizations(kube)["alpha/cross"]
    assert condition(cross, "Ready")["reason"] == "ReconciliationSucceeded"
    applied = cross["status"]["inventory"]

    commit(repo, tenant_files(components=True), first)
    simulator.tick()
    cross = kustomizations(kube)["alpha/cross"]
    ready, stalled = condition(cross, "Ready"), condition(cross, "Stalled")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "AccessDenied",
        CROSS_DENIED,
    )
    assert (stalled["status"], stalled["reason"]) == ("True", "AccessDenied")
    assert cross["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
    assert cross["status"]["inventory"] == applied


# --- server-side apply: force and stages (fluxcd/pkg ssa v0.76.1) -----------------------------

FORCE = "kustomize.toolkit.fluxcd.io/force"


@pytest.mark.parametrize(
    ("metadata", "selected"),
    [
        ({"annotations": {FORCE: "enabled"}}, True),
        ({"labels": {FORCE: "Enabled"}}, True),  # strings.EqualFold
        ({"annotations": {FORCE: "disabled"}}, False),
        ({"annotations": {FORCE: ""}}, False),
        ({"annotations": {"fluxcd.io/force": "enabled"}}, False),
        ({}, False),
    ],
)
def test_the_force_selector_matches_labels_or_annotations(
    metadata: dict[str, Any], selected: bool
) -> None:
    """``utils/meta.go`` ``AnyInMetadata`` with kustomize-controller's ``ForceSelector``
    (TestApply_Force, "recreates immutable StorageClass based on metadata", selects by
    annotation the same way)."""
    assert force_selected({"metadata": metadata}) is selected


def test_definitions_then_classes_then_the_rest() -> None:
    """TestApplyAllStaged_PartialFailure, "creates objects in order": Namespace, ClusterRole,
    StorageClass, ClusterRoleBinding (``ApplyAllStaged``'s stages)."""
    objects = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass"},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"},
        {"apiVersion": "v1", "kind": "Namespace"},
    ]
    kinds = [[obj["kind"] for obj in stage] for stage in apply_stages(objects)]
    assert kinds == [["ClusterRole", "Namespace"], ["StorageClass"], ["ClusterRoleBinding"]]


def test_a_refused_object_leaves_what_earlier_stages_applied(
    simulator: Simulator, kube: client.ApiClient, settings: Any
) -> None:
    """TestApplyAllStaged_PartialFailure, "returns change set on failed apply": the stages
    before the refused object's were applied, and the apply fails. The refusal here is the
    immutable update the simulator models (a ResourceClaimTemplate's spec, where the upstream
    test changes a ClusterRoleBinding's roleRef); the earlier stage a Namespace, which
    kustomize's namespace transformer names after ``targetNamespace`` (here ``alpha``)."""
    git_secret(simulator)
    repo = repository(settings)
    claims = "tenants/alpha/workloads/gpu-shares/claims.yaml"
    workloads = "tenants/alpha/workloads/kustomization.yaml"

    def tree(count: int) -> dict[str, bytes]:
        share = GpuShare(name="claims", flavor="h200-dra", kind="dra", count=count)
        files = render_repository(demo_fleet(), [TenantSpec(slug="alpha", shares=(share,))])
        files[claims] = files[claims].replace(f"{FORCE}: enabled".encode(), b"example.com/x: y")
        return files

    first = commit(repo, tree(2), None)
    simulator.tick()
    changed = tree(3)
    listing = yaml.safe_load(changed[workloads])
    listing["resources"].append("namespace.yaml")
    changed[workloads] = yaml.safe_dump(listing).encode()
    changed["tenants/alpha/workloads/namespace.yaml"] = (
        b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: elsewhere\n"
        b"  labels:\n    example.com/stage: definitions\n"
    )
    commit(repo, changed, first)
    simulator.tick()

    found = kustomizations(kube)["alpha/alpha-workloads"]
    ready = condition(found, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReconciliationFailed")
    assert "field is immutable" in ready["message"]
    namespace = client.CoreV1Api(kube).read_namespace("alpha")
    assert namespace.metadata.labels["example.com/stage"] == "definitions"
    inventory = [entry["id"] for entry in found["status"]["inventory"]["entries"]]
    assert "_alpha__Namespace" not in inventory
