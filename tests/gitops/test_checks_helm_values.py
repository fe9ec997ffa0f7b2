"""A chart's values schema checks the values of the HelmReleases of that chart: named by
``spec.chart`` or, for a chart from an OCIRepository, by the repository's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitops.checks.schema import SchemaRegistry, helm_values_schemas
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import require_crds
from tests.support.crds import crd

# A chart's own values schema, written here: what values.schema.json files say.
WIDGET_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer"},
        "crds": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
    },
}


@pytest.fixture
def registry() -> SchemaRegistry:
    # A HelmRelease CRD that takes any spec: only the chart's schema judges the values.
    any_spec = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {"type": "object", "properties": {"spec": any_spec}}
    release_crd = crd("HelmRelease", "helm.toolkit.fluxcd.io", "v2", schema=schema)
    return SchemaRegistry.from_crds([release_crd], helm_values_schemas={"widget": WIDGET_SCHEMA})


def _release(values: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "widget", "namespace": "flux-system"},
        "spec": {"interval": "10m", **spec, "values": values},
    }


def _from_repository(values: dict[str, Any], chart: str = "widget") -> dict[str, Any]:
    chart_spec = {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "charts"}}
    return _release(values, chart={"spec": chart_spec})


def _from_oci(values: dict[str, Any], name: str = "widget", kind: str = "OCIRepository") -> Any:
    return _release(values, chartRef={"kind": kind, "name": name})


def test_an_ill_typed_or_unknown_value_is_an_error_naming_the_chart_and_the_field(
    registry: SchemaRegistry,
) -> None:
    errors = registry.validate(_from_repository({"replicas": "two", "crds": {"enable": True}}))
    assert {(e.path, e.severity) for e in errors} == {
        ("spec.values.replicas", "error"),
        ("spec.values.crds.enable", "error"),
    }
    for error in errors:
        assert "chart 'widget'" in error.message
    by_path = {e.path: e.message for e in errors}
    assert "'two' is not of type 'integer'" in by_path["spec.values.replicas"]
    assert "unknown field 'enable'" in by_path["spec.values.crds.enable"]
    assert registry.validate(_from_repository({"replicas": 2, "crds": {"enabled": True}})) == []


def test_a_chart_from_an_oci_repository_is_known_by_the_repository_name(
    registry: SchemaRegistry,
) -> None:
    [error] = registry.validate(_from_oci({"replicas": "two"}))
    assert error.path == "spec.values.replicas"
    # Another repository, or a chart reference that names no repository of the chart: nothing
    # says which chart it is, so its values are not judged by this one's schema.
    assert registry.validate(_from_oci({"replicas": "two"}, name="gadget")) == []
    assert registry.validate(_from_oci({"replicas": "two"}, kind="HelmChart")) == []


def test_other_charts_values_are_not_judged_by_it(registry: SchemaRegistry) -> None:
    assert registry.validate(_from_repository({"replicas": "two"}, chart="gadget")) == []


def test_a_values_schema_is_registered_for_the_chart_its_folder_names(tmp_path: Path) -> None:
    # What fetch_schemas writes: <component folder>/values.schema.json.
    (tmp_path / "cert-manager").mkdir()
    (tmp_path / "cert-manager" / "values.schema.json").write_text(json.dumps(WIDGET_SCHEMA))
    registry = SchemaRegistry.from_dir(tmp_path)
    assert registry.helm_charts() == {"cert-manager"}
    assert set(helm_values_schemas(tmp_path)) == {"cert-manager"}


def test_the_vcluster_schema_judges_a_release_from_an_oci_repository_alike() -> None:
    crds = require_crds()
    registry = SchemaRegistry.from_dir(crds)
    release = samples.vcluster_release()
    release["spec"]["values"]["controlPlane"]["distro"]["k8s"]["enabled"] = "yes"
    from_repository = registry.validate(release)
    assert [e.path for e in from_repository] == ["spec.values.controlPlane.distro.k8s.enabled"]
    assert "chart 'vcluster'" in from_repository[0].message
    del release["spec"]["chart"]
    release["spec"]["chartRef"] = {"kind": "OCIRepository", "name": "vcluster"}
    assert registry.validate(release) == from_repository
