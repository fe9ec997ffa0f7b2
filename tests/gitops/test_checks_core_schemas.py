"""Built-in kinds are validated offline, at the fleet's Kubernetes version, from the pinned
kubernetes-validate package: no CRD folder, cluster or network is needed."""

from __future__ import annotations

from typing import Any

import pytest

from gitops.checks import run_checks
from gitops.checks.schema import (
    CLUSTER_SCOPED,
    SchemaRegistry,
    UnsupportedKubernetesVersion,
    core_schemas,
    supported_kubernetes_versions,
)
from gitops.checks.schema_source import SchemaSource
from gitops.render.validate import validate_fleet
from gitops.specs import FleetSpec, SpecError
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import hide_kubectl
from tests.support.crds import crd

# Every built-in kind the renderers write (gitops/render), at the fleet's default version.
WRITTEN = [
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("policy/v1", "PodDisruptionBudget"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
]


def _pod_spec() -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "ghcr.io/ai-factory/x:1"}]}


def test_every_kind_the_portal_writes_has_a_strict_schema() -> None:
    registry = SchemaRegistry()
    for api_version, kind in WRITTEN:
        assert registry.knows(api_version, kind), (api_version, kind)
        assert registry.is_builtin(api_version, kind)
        group = api_version.rpartition("/")[0]
        scope = registry.scope(api_version, kind)
        assert scope == ("Cluster" if (group, kind) in CLUSTER_SCOPED else "Namespaced")
        metadata = {"name": "x"} | ({"namespace": "alpha"} if scope == "Namespaced" else {})
        obj = {"apiVersion": api_version, "kind": kind, "metadata": metadata, "bogus": 1}
        assert "bogus" in {e.path for e in registry.validate(obj)}, kind
    assert registry.scope("v1", "Namespace") == "Cluster"
    assert registry.scope("v1", "ConfigMap") == "Namespaced"


def test_the_version_decides_which_fields_and_kinds_exist() -> None:
    # PodSpec.schedulingGroup and resource.k8s.io/v1 DeviceTaintRule are newer than 1.34.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "alpha"},
        "spec": {**_pod_spec(), "schedulingGroup": {"podGroupName": "g"}},
    }
    at_134 = SchemaRegistry(kubernetes_version="1.34").validate(pod)
    assert [(e.path, e.severity) for e in at_134] == [("spec.schedulingGroup", "error")]
    assert "unknown field 'schedulingGroup'" in at_134[0].message
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com"}, "taint": {"key": "k"}},
    }
    [unknown] = SchemaRegistry(kubernetes_version="1.34").validate(rule)
    assert unknown.severity == "error" and not unknown.unvalidated
    assert "known versions: resource.k8s.io/v1alpha3" in unknown.message
    newest = supported_kubernetes_versions()[-1]
    assert newest == "1.37"
    assert SchemaRegistry(kubernetes_version=newest).knows("resource.k8s.io/v1", "DeviceTaintRule")


def test_alpha_apis_are_a_warning_and_quantities_are_checked() -> None:
    registry = SchemaRegistry()
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {"taint": {"key": "k", "effect": "NoSchedule"}},
    }
    [warning] = registry.validate(rule)
    assert warning.severity == "warning" and "alpha API of Kubernetes 1.34" in warning.message
    quota = samples.resource_quota()
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "eight"
    quota["spec"]["hard"]["limits.cpu"] = 4
    [error] = registry.validate(quota)
    assert error.path == 'spec.hard["requests.nvidia.com/gpu"]'
    assert "is not a quantity" in error.message


def test_fields_named_like_schema_keywords_survive_the_trimming() -> None:
    # The CRD schema type has fields "description" and "format": prose is dropped, they are not.
    schema = {
        "type": "object",
        "description": "a widget",
        "properties": {"size": {"type": "string", "format": "int-or-string"}},
    }
    definition = crd("Widget", schema=schema)
    assert definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"]
    assert SchemaRegistry().validate(definition) == []


def test_an_unknown_version_is_refused_with_the_ones_there_are() -> None:
    with pytest.raises(UnsupportedKubernetesVersion, match=r"it has 1\.25, .*1\.37"):
        core_schemas("1.99")
    with pytest.raises(UnsupportedKubernetesVersion, match="not a Kubernetes minor version"):
        core_schemas("../1.34")
    with pytest.raises(SpecError) as caught:
        validate_fleet(FleetSpec(kubernetes_version="1.99"))
    assert "kubernetes_version" in str(caught.value)


def test_without_any_crd_built_in_kinds_pass_and_custom_resources_make_it_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_kubectl(monkeypatch)
    tree = samples.fleet_tree("alpha")
    results = {r.name: r for r in run_checks(tree, fleet=samples.FLEET)}
    schemas = results["schemas"]
    assert schemas.status == "partial"
    assert "custom resources without a schema: " in schemas.summary
    assert "ClusterQueue" in schemas.summary
    assert "no schema for kueue.x-k8s.io/v1beta2 ClusterQueue, not validated" in "\n".join(
        schemas.details
    )
    assert schemas.summary.endswith("; schemas: built-in kinds only, no CRDs")
    assert "built-in kinds of Kubernetes 1.34 from kubernetes-validate 1.37.0" in schemas.details[0]
    # Only built-in kinds: every object validated, so it passes.
    only_core = {
        path: data
        for path, data in tree.items()
        if path == "tenants/alpha/namespace.yaml" or not path.startswith("tenants/")
    }
    changed = {"tenants/alpha/namespace.yaml"}
    [schemas] = [
        r
        for r in run_checks(only_core, fleet=samples.FLEET, changed=changed)
        if r.name == "schemas"
    ]
    assert schemas.status == "passed", schemas.summary
    broken = dict(only_core)
    broken["tenants/alpha/namespace.yaml"] = samples.dump(samples.namespace() | {"bogus": 1})
    [schemas] = [
        r for r in run_checks(broken, fleet=samples.FLEET, changed=changed) if r.name == "schemas"
    ]
    assert schemas.status == "failed" and "unknown field 'bogus'" in "\n".join(schemas.details)


def test_the_fleets_version_picks_the_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_kubectl(monkeypatch)
    tree = samples.fleet_tree("alpha")
    source = SchemaSource.builtin()
    for version in ("1.34", "1.37"):
        fleet = FleetSpec(**{**samples.FLEET.__dict__, "kubernetes_version": version})
        [schemas] = [
            r for r in run_checks(tree, fleet=fleet, schema_source=source) if r.name == "schemas"
        ]
        assert f"built-in kinds of Kubernetes {version} from" in schemas.details[0]
