"""A model endpoint of several replicas is drained one replica at a time: a PodDisruptionBudget
beside its InferenceService selects exactly its predictor pods, labelled as KServe labels them;
an endpoint of one replica gets none."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gitops.checks import run_checks
from gitops.checks.schema import validate_objects
from gitops.fleet import demo_fleet
from gitops.render import load_documents, objects_for, render_repository, render_tenant_tree
from gitops.specs import EndpointSpec, TenantSpec
from tests.gitops.render_samples import rich_tenant
from tests.gitops.test_render_platform import selects

FLEET = demo_fleet()


def _tenant(*endpoints: EndpointSpec) -> TenantSpec:
    return dataclasses.replace(rich_tenant(), endpoints=endpoints)


def _endpoint(name: str, minimum: int, maximum: int) -> EndpointSpec:
    return EndpointSpec(
        name=name,
        model_uri="hf://org/model",
        share="train",
        min_replicas=minimum,
        max_replicas=maximum,
    )


def _file(tenant: TenantSpec, endpoint: str) -> list[dict[str, Any]]:
    path = f"tenants/{tenant.slug}/workloads/endpoints/{endpoint}.yaml"
    return load_documents(render_tenant_tree(tenant, FLEET)[path])


def _predictor_pod_labels(isvc: dict[str, Any], component: str = "predictor") -> dict[str, str]:
    """The labels KServe v0.20.0 gives a predictor pod: the InferenceService's and the
    predictor's labels, then its own, which win (components/predictor.go buildObjectMeta), and
    the Deployment's app label (deployment_reconciler.go createRawDefaultDeployment)."""
    name = isvc["metadata"]["name"]
    return {
        **isvc["metadata"]["labels"],
        **isvc["spec"]["predictor"].get("labels", {}),
        "serving.kserve.io/inferenceservice": name,
        "component": component,
        "app": f"isvc.{name}-{component}",
    }


@pytest.mark.parametrize(("minimum", "maximum"), [(2, 2), (3, 6)])
def test_an_endpoint_of_several_replicas_loses_one_at_a_time(minimum: int, maximum: int) -> None:
    tenant = _tenant(_endpoint("chat", minimum, maximum), _endpoint("chat-mini", 1, 1))
    objs = _file(tenant, "chat")
    [budget] = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    [isvc] = [o for o in objs if o["kind"] == "InferenceService"]
    assert budget["metadata"]["namespace"] == tenant.slug
    assert budget["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in budget["spec"]
    # A replica that cannot become ready must not hold a drain.
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    selector = budget["spec"]["selector"]
    assert selects(selector, _predictor_pod_labels(isvc))
    # Not the other endpoint's pods in the namespace, nor another component's of this one.
    [other] = [o for o in _file(tenant, "chat-mini") if o["kind"] == "InferenceService"]
    assert not selects(selector, _predictor_pod_labels(other))
    assert not selects(selector, _predictor_pod_labels(isvc, component="transformer"))
    assert validate_objects([budget]) == []


@pytest.mark.parametrize(("minimum", "maximum"), [(1, 1), (1, 4)])
def test_an_endpoint_that_may_run_one_replica_has_no_budget(minimum: int, maximum: int) -> None:
    tenant = _tenant(_endpoint("chat", minimum, maximum))
    assert "PodDisruptionBudget" not in {o["kind"] for o in _file(tenant, "chat")}


def test_the_budget_passes_every_check_in_the_tenants_workloads(schema_dir: Path) -> None:
    tenant = _tenant(_endpoint("chat", 2, 2))
    files = render_repository(FLEET, [tenant])
    assert "PodDisruptionBudget" in {o["kind"] for o in objects_for(files)}
    results = run_checks(files, fleet=FLEET, schema_dir=schema_dir)
    assert {r.status for r in results} == {"passed"}, [(r.name, r.details[:3]) for r in results]
