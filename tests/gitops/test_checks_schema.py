"""Strict schema validation: upstream CRDs, built-in kinds (kubernetes-validate), Helm values."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitops.checks.manifests import iter_objects, load_documents
from gitops.checks.schema import (
    SchemaError,
    SchemaRegistry,
    get_registry,
    load_crd_file,
    validate_object,
    validate_objects,
)
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import require_crds


@pytest.fixture
def crds_dir() -> Path:
    return require_crds()


@pytest.fixture
def registry(crds_dir: Path) -> SchemaRegistry:
    return get_registry(crds_dir)


def errors_of(registry: SchemaRegistry, obj: dict[str, Any]) -> list[SchemaError]:
    return [e for e in registry.validate(obj) if e.severity == "error"]


VALID: list[Callable[[], dict[str, Any]]] = [
    samples.namespace,
    samples.service_account,
    samples.role_binding,
    samples.resource_quota,
    samples.limit_range,
    samples.network_policy,
    samples.resource_flavor,
    samples.cluster_queue,
    samples.local_queue,
    samples.kyverno_policy,
    samples.git_repository,
    samples.flux_kustomization,
    samples.vcluster_release,
    samples.inference_service,
    samples.http_route,
    samples.litellm_config,
    samples.resource_claim_template,
]


@pytest.mark.parametrize("make", VALID, ids=lambda make: make.__name__)
def test_it_accepts_every_kind_the_portal_writes(
    registry: SchemaRegistry, make: Callable[[], dict[str, Any]]
) -> None:
    assert registry.validate(make()) == []


def test_it_accepts_a_whole_fleet_tree(crds_dir: Path) -> None:
    objects, problems = iter_objects(samples.fleet_tree("alpha", "bravo"))
    assert problems == []
    assert len(objects) > 30
    assert validate_objects([o.obj for o in objects], crds_dir) == []


def _set(obj: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("make", "where", "expected_path"),
    [
        (samples.cluster_queue, ["spec", "cohortt"], "spec.cohortt"),
        (
            samples.cluster_queue,
            ["spec", "resourceGroups", 0, "flavors", 0, "quota"],
            "spec.resourceGroups[0].flavors[0].quota",
        ),
        (samples.inference_service, ["metadata", "labelz"], "metadata.labelz"),
        (samples.inference_service, ["status2"], "status2"),
        (
            samples.inference_service,
            ["spec", "predictor", "model", "resourcez"],
            "spec.predictor.model.resourcez",
        ),
        (
            samples.vcluster_release,
            ["spec", "values", "sync", "fromHost", "nodez"],
            "spec.values.sync.fromHost.nodez",
        ),
        (samples.vcluster_release, ["spec", "values", "isolation"], "spec.values.isolation"),
        (samples.http_route, ["spec", "rules", 0, "timeout"], "spec.rules[0].timeout"),
        (samples.kyverno_policy, ["spec", "rules", 0, "validate", "mesage"], None),
        (samples.network_policy, ["spec", "podselector"], "spec.podselector"),
        (samples.resource_quota, ["spec", "hardd"], "spec.hardd"),
        (samples.namespace, ["metadata", "label"], "metadata.label"),
        (
            samples.resource_claim_template,
            ["spec", "spec", "devices", "requests", 0, "exactly", "deviceClass"],
            "spec.spec.devices.requests[0].exactly.deviceClass",
        ),
        (samples.flux_kustomization, ["spec", "sourceRef", "branch"], "spec.sourceRef.branch"),
    ],
)
def test_it_rejects_an_unknown_field_with_its_path(
    registry: SchemaRegistry,
    make: Callable[[], dict[str, Any]],
    where: list[Any],
    expected_path: str | None,
) -> None:
    obj = _set(make(), where, "surprise")
    errors = errors_of(registry, obj)
    assert len(errors) == 1, errors
    expected = expected_path or ".".join(
        f"{p}" if isinstance(p, str) else f"[{p}]" for p in where
    ).replace(".[", "[")
    assert errors[0].path == expected
    assert f"unknown field {where[-1]!r}" in errors[0].message
    assert errors[0].kind == obj["kind"]
    assert errors[0].name == obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("make", "where", "value", "expected_path"),
    [
        (samples.cluster_queue, ["spec", "queueingStrategy"], "Random", "spec.queueingStrategy"),
        (samples.inference_service, ["spec", "predictor", "minReplicas"], "one", None),
        (samples.local_queue, ["spec", "clusterQueue"], 3, "spec.clusterQueue"),
        (samples.network_policy, ["spec", "policyTypes"], "Ingress", "spec.policyTypes"),
        (samples.namespace, ["metadata", "labels"], ["a"], "metadata.labels"),
        (samples.vcluster_release, ["spec", "values", "sync"], "yes", "spec.values.sync"),
        (samples.resource_quota, ["spec", "hard", "requests.cpu"], "lots", None),
        (samples.role_binding, ["roleRef", "name"], None, "roleRef"),
    ],
)
def test_it_rejects_wrong_types_and_values(
    registry: SchemaRegistry,
    make: Callable[[], dict[str, Any]],
    where: list[Any],
    value: Any,
    expected_path: str | None,
) -> None:
    obj = _set(make(), where, value)
    errors = errors_of(registry, obj)
    assert errors, obj
    if expected_path:
        assert errors[0].path == expected_path


def test_it_accepts_numbers_and_strings_where_kubernetes_takes_quantities(
    registry: SchemaRegistry,
) -> None:
    quota = samples.resource_quota()
    quota["spec"]["hard"] = {"requests.cpu": 64, "requests.memory": "1Ti", "limits.cpu": "500m"}
    assert registry.validate(quota) == []
    quota["spec"]["hard"]["requests.cpu"] = "8 cores"
    [error] = registry.validate(quota)
    assert error.path == 'spec.hard["requests.cpu"]'
    assert "not a quantity" in error.message


def test_it_accepts_integers_and_strings_in_int_or_string_fields(
    registry: SchemaRegistry,
) -> None:
    queue = samples.cluster_queue(gpus="8")
    assert registry.validate(queue) == []
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = True
    [error] = registry.validate(queue)
    assert error.path == "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota"


def test_it_tells_kueue_v1beta1_cohort_from_v1beta2_cohort_name(
    registry: SchemaRegistry,
) -> None:
    v1beta2 = samples.cluster_queue()
    assert registry.validate(v1beta2) == []
    v1beta2["spec"]["cohort"] = v1beta2["spec"].pop("cohortName")
    [error] = registry.validate(v1beta2)
    assert (error.path, error.severity) == ("spec.cohort", "error")

    v1beta1 = samples.cluster_queue()
    v1beta1["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    v1beta1["spec"]["cohort"] = v1beta1["spec"].pop("cohortName")
    # Deprecated but served: valid today, so a warning that names the current version.
    [warning] = registry.validate(v1beta1)
    assert warning.severity == "warning"
    assert warning.path == "apiVersion"
    assert "kueue.x-k8s.io/v1beta2" in warning.message

    v1beta1["spec"]["cohortName"] = v1beta1["spec"].pop("cohort")
    assert [e.path for e in errors_of(registry, v1beta1)] == ["spec.cohortName"]


def test_it_reports_kinds_it_has_no_schema_for_as_not_validated(
    registry: SchemaRegistry,
) -> None:
    [error] = registry.validate(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    # Not an error (nothing says it is wrong) and never valid: the check reports it skipped.
    assert (error.severity, error.unvalidated) == ("warning", True)
    assert "no schema for example.com/v1 Widget, not validated" in error.message
    assert "add its CRD to the schema directory" in error.message

    queue = samples.local_queue()
    queue["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    [error] = registry.validate(queue)
    assert "known versions: kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2" in error.message


def test_it_rejects_versions_that_are_not_served(registry: SchemaRegistry) -> None:
    secret = {
        "apiVersion": "external-secrets.io/v1beta1",
        "kind": "ExternalSecret",
        "metadata": {"name": "token", "namespace": "alpha"},
    }
    [error] = registry.validate(secret)
    assert "not served" in error.message
    assert "external-secrets.io/v1" in error.message


def test_without_a_schema_dir_only_built_in_kinds_are_known() -> None:
    assert validate_object(samples.namespace()) == []
    [error] = validate_objects([samples.cluster_queue()])
    assert "no schema for kueue.x-k8s.io/v1beta2 ClusterQueue" in error.message


@pytest.mark.parametrize(
    ("make", "where", "value"),
    [
        (samples.namespace, ["metadata", "name"], "Alpha"),
        (samples.namespace, ["metadata", "name"], "a.b"),  # a namespace is a label
        (samples.resource_flavor, ["metadata", "name"], "h200_"),
        (samples.local_queue, ["metadata", "namespace"], "Team A"),
        (samples.local_queue, ["metadata", "name"], "x" * 254),
        (samples.local_queue, ["metadata", "labels"], {"bad key!": "v"}),
        (samples.local_queue, ["metadata", "labels"], {"k": "-starts-with-dash"}),
        (samples.local_queue, ["metadata", "labels"], {"k": "x" * 64}),
        (samples.local_queue, ["metadata", "labels"], {"k": 3}),
        (samples.local_queue, ["metadata", "labels"], {"Bad_Prefix/k": "v"}),
        (samples.local_queue, ["metadata", "annotations"], {"/k": "v"}),
        (samples.local_queue, ["metadata", "uid"], "0b0e"),
        (samples.local_queue, ["metadata", "resourceVersion"], "12"),
    ],
)
def test_it_applies_the_kubernetes_rules_for_metadata(
    registry: SchemaRegistry, make: Callable[[], dict[str, Any]], where: list[Any], value: Any
) -> None:
    errors = errors_of(registry, _set(make(), where, value))
    assert errors
    assert all(e.path.startswith("metadata") for e in errors), errors


def test_it_accepts_names_rbac_allows_and_null_creation_timestamps(
    registry: SchemaRegistry,
) -> None:
    binding = samples.role_binding()
    binding["metadata"]["name"] = "system:flux-reconciler"
    # Written by `kubectl create --dry-run -o yaml`; the API server ignores a null.
    binding["metadata"]["creationTimestamp"] = None
    assert registry.validate(binding) == []


def test_it_warns_when_a_cluster_scoped_object_names_a_namespace(
    registry: SchemaRegistry,
) -> None:
    flavor = samples.resource_flavor()
    flavor["metadata"]["namespace"] = "alpha"
    [warning] = registry.validate(flavor)
    assert (warning.severity, warning.path) == ("warning", "metadata.namespace")


def test_it_requires_a_fixed_name(registry: SchemaRegistry) -> None:
    queue = samples.local_queue()
    del queue["metadata"]["name"]
    queue["metadata"]["generateName"] = "default-"
    [error] = registry.validate(queue)
    assert error.path == "metadata.name"


def test_it_rejects_duplicate_keys_in_list_maps(registry: SchemaRegistry) -> None:
    queue = samples.cluster_queue()
    resources = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    resources.append({"name": "cpu", "nominalQuota": 1})
    [error] = registry.validate(queue)
    assert error.path == "spec.resourceGroups[0].flavors[0].resources[3]"
    assert "duplicate" in error.message


def test_go_end_anchors_do_not_let_a_trailing_newline_through(registry: SchemaRegistry) -> None:
    queue = samples.cluster_queue()
    queue["spec"]["cohortName"] = "gpu-fleet\n"
    assert [e.path for e in errors_of(registry, queue)] == ["spec.cohortName"]


def test_it_checks_vcluster_values_only_for_the_vcluster_chart(registry: SchemaRegistry) -> None:
    release = samples.vcluster_release()
    release["spec"]["values"]["controlPlane"]["distro"]["k8s"]["enabled"] = "yes"
    [error] = registry.validate(release)
    assert error.path == "spec.values.controlPlane.distro.k8s.enabled"

    release["spec"]["chart"]["spec"]["chart"] = "another-chart"
    assert registry.validate(release) == []


def test_it_loads_the_same_schemas_from_crd_objects(crds_dir: Path) -> None:
    # As a fleet module would, with CRDs listed from the API server.
    crds = [crd for path in sorted(crds_dir.rglob("*.yaml")) for crd in load_crd_file(path)]
    values = load_documents((crds_dir / "vcluster" / "values.schema.json").read_bytes())[0]
    registry = SchemaRegistry.from_crds(crds, helm_values_schemas={"vcluster": values})
    from_dir = get_registry(crds_dir)
    assert registry.kinds() == from_dir.kinds()
    assert registry.helm_charts() == {"vcluster"}

    assert registry.scope("kueue.x-k8s.io/v1beta2", "ClusterQueue") == "Cluster"
    assert registry.scope("kueue.x-k8s.io/v1beta2", "LocalQueue") == "Namespaced"
    assert registry.scope("v1", "Namespace") == "Cluster"
    assert registry.scope("resource.k8s.io/v1", "DeviceClass") == "Cluster"
    assert registry.scope("example.com/v1", "Widget") is None

    release = samples.vcluster_release()
    release["spec"]["values"]["sync"]["fromHost"]["nodez"] = True
    assert registry.validate(release) == from_dir.validate(release)
    assert registry.validate(release)[0].path == "spec.values.sync.fromHost.nodez"


def test_from_crds_rejects_what_is_not_a_crd() -> None:
    with pytest.raises(ValueError, match="not a CustomResourceDefinition"):
        SchemaRegistry.from_crds([{"kind": "ConfigMap", "metadata": {"name": "x"}}])


def test_unquoted_dates_stay_strings_as_in_kubectl(registry: SchemaRegistry) -> None:
    [config] = load_documents(
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: a}\n"
        b"data: {until: 2026-12-31}\n"
    )
    assert config["data"]["until"] == "2026-12-31"
    assert registry.validate(config) == []


def test_validation_does_not_change_the_object(registry: SchemaRegistry) -> None:
    release = samples.vcluster_release()
    release["metadata"]["creationTimestamp"] = None
    before = copy.deepcopy(release)
    registry.validate(release)
    assert release == before


def test_schema_errors_read_well(registry: SchemaRegistry) -> None:
    queue = samples.cluster_queue()
    queue["spec"]["stopPolicy"] = "Halt"
    assert [str(e) for e in registry.validate(queue)] == [
        "ClusterQueue/alpha spec.stopPolicy: 'Halt' is not one of ['None', 'Hold', 'HoldAndDrain']"
    ]


def test_a_crd_may_limit_metadata_name(crds_dir: Path) -> None:
    crds = load_crd_file(crds_dir / "kueue" / "kueue.x-k8s.io_localqueues.yaml")
    for version in crds[0]["spec"]["versions"]:
        properties = version["schema"]["openAPIV3Schema"]["properties"]
        properties["metadata"] = {"type": "object", "properties": {"name": {"maxLength": 2}}}
    registry = SchemaRegistry.from_crds(crds)
    queue = samples.local_queue()
    queue["metadata"]["labels"] = {"team": "alpha"}
    [error] = registry.validate(queue)
    assert (error.path, error.message) == ("metadata.name", "'gpu' is too long")
    queue["metadata"]["name"] = "q"
    assert registry.validate(queue) == []
