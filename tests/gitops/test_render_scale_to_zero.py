"""Endpoints that scale to zero or sleep, tenant clusters that sleep: what the spec allows and
what is rendered, strictly against the upstream schemas in ../shared/crds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gitops.checks.schema import validate_objects
from gitops.fleet import demo_fleet
from gitops.render import objects_for, render_repository
from gitops.render.validate import validate_tenant
from gitops.specs import SpecError, TenantSpec
from tests.gitops.render_samples import DEV, LLAMA, rich_tenant


def _with(tenant: TenantSpec, **changes: Any) -> TenantSpec:
    return dataclasses.replace(tenant, **changes)


def _isvc(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(
        o for o in objs if o["kind"] == "InferenceService" and o["metadata"]["name"] == name
    )


def _errors(tenant: TenantSpec) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_tenant(tenant, demo_fleet())
    return caught.value.errors


def test_it_allows_min_zero_only_with_a_keda_metric() -> None:
    tenant = rich_tenant()
    keda = dataclasses.replace(LLAMA, min_replicas=0, scale_metric="rps")
    validate_tenant(_with(tenant, endpoints=(keda, *tenant.endpoints[1:])), demo_fleet())
    hpa = dataclasses.replace(LLAMA, min_replicas=0, scale_metric="cpu", scale_target=70)
    errors = _errors(_with(tenant, endpoints=(hpa, *tenant.endpoints[1:])))
    assert "scale to zero" in errors["endpoints[0].min_replicas"]


@pytest.mark.parametrize("bad", [-1, "0", 1.5, None])
def test_it_refuses_bad_minimums(bad: object) -> None:
    tenant = rich_tenant()
    endpoint = dataclasses.replace(LLAMA, min_replicas=bad)  # type: ignore[arg-type]
    assert "endpoints[0].min_replicas" in _errors(
        _with(tenant, endpoints=(endpoint, *tenant.endpoints[1:]))
    )


def test_it_refuses_an_asleep_that_is_not_a_boolean() -> None:
    tenant = rich_tenant()
    endpoint = dataclasses.replace(LLAMA, asleep="yes")  # type: ignore[arg-type]
    cluster = dataclasses.replace(DEV, asleep=1)  # type: ignore[arg-type]
    errors = _errors(
        _with(tenant, endpoints=(endpoint, *tenant.endpoints[1:]), clusters=(cluster,))
    )
    assert errors["endpoints[0].asleep"] == "Asleep must be true or false."
    assert errors["clusters[0].asleep"] == "Asleep must be true or false."


def test_the_share_keeps_room_for_what_a_sleeping_endpoint_wakes_to() -> None:
    tenant = rich_tenant()
    # 16 GPUs in "train": eight endpoints of 2 GPUs at min 0 fit (one replica each to wake)...
    fits = tuple(
        dataclasses.replace(LLAMA, name=f"zero-{i}", min_replicas=0, max_replicas=1)
        for i in range(8)
    )
    validate_tenant(_with(tenant, endpoints=(*fits, *tenant.endpoints[1:])), demo_fleet())
    # ... a ninth does not, though all nine would hold no GPU while at zero.
    nine = (*fits, dataclasses.replace(fits[0], name="zero-9"))
    errors = _errors(_with(tenant, endpoints=(*nine, *tenant.endpoints[1:])))
    assert any("at least one each, to wake" in message for message in errors.values())
    # Asleep, an endpoint still counts the replicas it wakes to.
    asleep = tuple(dataclasses.replace(e, asleep=True) for e in nine)
    assert _errors(_with(tenant, endpoints=(*asleep, *tenant.endpoints[1:])))


def test_it_renders_min_zero_through_keda(schema_dir: Path) -> None:
    tenant = rich_tenant()
    zero = dataclasses.replace(LLAMA, min_replicas=0)
    tenant = _with(tenant, endpoints=(zero, *tenant.endpoints[1:]))
    objs = objects_for(render_repository(demo_fleet(), [tenant]))
    isvc = _isvc(objs, "llama")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    assert isvc["spec"]["predictor"]["maxReplicas"] == 4
    errors = validate_objects(objs, schema_dir)
    assert not errors, "\n".join(map(str, errors))


def test_an_asleep_endpoint_renders_no_replica_and_no_autoscaler(schema_dir: Path) -> None:
    tenant = rich_tenant()
    busy = dataclasses.replace(LLAMA, min_replicas=2)
    awake = objects_for(
        render_repository(demo_fleet(), [_with(tenant, endpoints=(busy, *tenant.endpoints[1:]))])
    )
    assert any(o["kind"] == "PodDisruptionBudget" for o in awake)
    asleep_spec = dataclasses.replace(busy, asleep=True)
    asleep = objects_for(
        render_repository(
            demo_fleet(), [_with(tenant, endpoints=(asleep_spec, *tenant.endpoints[1:]))]
        )
    )
    isvc = _isvc(asleep, "llama")
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    assert "autoScaling" not in isvc["spec"]["predictor"]
    assert not any(o["kind"] == "PodDisruptionBudget" for o in asleep)
    errors = validate_objects(asleep, schema_dir)
    assert not errors, "\n".join(map(str, errors))


def _release(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        o
        for o in objs
        if o["kind"] == "HelmRelease" and o["spec"]["chart"]["spec"]["chart"] == "vcluster"
    )


def test_an_asleep_cluster_scales_its_control_plane_to_zero(schema_dir: Path) -> None:
    tenant = rich_tenant()
    awake = _release(objects_for(render_repository(demo_fleet(), [tenant])))
    assert "highAvailability" not in awake["spec"]["values"]["controlPlane"]["statefulSet"]
    asleep_tenant = _with(tenant, clusters=(dataclasses.replace(DEV, asleep=True),))
    objs = objects_for(render_repository(demo_fleet(), [asleep_tenant]))
    release = _release(objs)
    assert release["spec"]["values"]["controlPlane"]["statefulSet"]["highAvailability"] == {
        "replicas": 0
    }
    errors = validate_objects(objs, schema_dir)
    assert not errors, "\n".join(map(str, errors))
    # The chart's values schema judges these values: a wrong type is caught.
    release["spec"]["values"]["controlPlane"]["statefulSet"]["highAvailability"]["replicas"] = "0"
    assert validate_objects([release], schema_dir)
