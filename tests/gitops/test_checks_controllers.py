"""Settings the controllers would act on against their intent: TAS, preemption, quotas,
rollouts (issue 9, findings 6, 8, 16 and 19)."""

from __future__ import annotations

import dataclasses
from typing import Any

from gitops.checks import run_checks
from gitops.checks.controllers import check_controllers
from gitops.fleet import demo_fleet
from gitops.render import dra, render_repository
from gitops.render.kueue import cluster_queue
from gitops.render.quota import resource_quota
from gitops.render.tree import objects_for
from tests.gitops import checks_samples as samples
from tests.gitops.render_samples import CLAIMS, rich_tenant

FLEET = samples.FLEET


def rules(objs: list[dict[str, Any]], fleet: Any = FLEET) -> list[tuple[str, str]]:
    return [(f.object, f.rule) for f in check_controllers(objs, fleet)]


def test_the_rendered_repository_passes() -> None:
    fleet = demo_fleet()
    assert check_controllers(render_repository(fleet, [rich_tenant()]), fleet) == []


def test_a_topology_aware_hami_flavor_is_refused() -> None:
    hami = samples.resource_flavor("l40s-shared")
    assert rules([hami, samples.topology()]) == [("ResourceFlavor/l40s-shared", "tas-hami")]
    # Matched by its pool labels too, whatever its name.
    fleet = dataclasses.replace(
        FLEET,
        flavors=tuple(
            dataclasses.replace(f, node_labels=(("pool", "shared"),)) if f.mode == "hami" else f
            for f in FLEET.flavors
        ),
    )
    renamed = samples.resource_flavor("other")
    renamed["spec"]["nodeLabels"] = {"pool": "shared", "nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert rules([renamed, samples.topology()], fleet) == [("ResourceFlavor/other", "tas-hami")]
    assert rules([samples.resource_flavor("l40s-shared", topology=False)]) == []


def test_a_topology_aware_dra_flavor_is_refused() -> None:
    # Issue 26 finding 3: Kueue's TAS ignores ResourceClaims (its DRA limitations).
    dra = next(f for f in demo_fleet().flavors if f.mode == "dra")
    fleet = dataclasses.replace(FLEET, flavors=(*FLEET.flavors, dra))
    flavor = samples.resource_flavor(dra.name)
    [finding] = check_controllers([flavor, samples.topology()], fleet)
    assert (finding.object, finding.rule) == (f"ResourceFlavor/{dra.name}", "tas-dra")
    assert "ResourceClaims" in finding.message
    assert rules([samples.resource_flavor(dra.name, topology=False)], fleet) == []


def test_topology_levels_must_be_labels_the_nodes_carry() -> None:
    flavor = samples.resource_flavor("h200")
    assert rules([flavor, samples.topology()]) == []
    assert rules([flavor, samples.topology(("kubernetes.io/hostname",))]) == []
    unknown = samples.topology(("cloud.example.com/rack", "kubernetes.io/hostname"))
    [finding] = check_controllers([flavor, unknown], FLEET)
    assert (finding.object, finding.rule) == ("Topology/default", "tas-topology")
    assert "'cloud.example.com/rack'" in finding.message


def test_a_flavor_naming_a_missing_topology_is_refused() -> None:
    assert rules([samples.resource_flavor("h200")]) == [("ResourceFlavor/h200", "tas-topology")]


def test_borrow_within_cohort_is_refused_under_fair_sharing_only() -> None:
    queue = samples.cluster_queue("alpha")
    queue["spec"]["preemption"]["borrowWithinCohort"] = {
        "policy": "LowerPriority",
        "maxPriorityThreshold": 500,
    }
    assert rules([queue]) == [("ClusterQueue/alpha", "fair-sharing")]
    assert rules([queue], dataclasses.replace(FLEET, fair_sharing=False)) == []
    queue["spec"]["preemption"]["borrowWithinCohort"] = {"policy": "Never"}
    assert rules([queue]) == []


def test_the_rendered_queue_passes_under_either_preemption_mode() -> None:
    fleet = demo_fleet()
    for mode in (True, False):
        mode_fleet = dataclasses.replace(fleet, fair_sharing=mode)
        assert rules([cluster_queue(rich_tenant(), mode_fleet)], mode_fleet) == []


def _quota(slug: str, hard: dict[str, Any]) -> dict[str, Any]:
    obj = samples.resource_quota(slug)
    obj["spec"]["hard"].update(hard)
    return obj


def test_a_namespace_quota_below_nominal_plus_borrowing_is_refused() -> None:
    queue = samples.cluster_queue("alpha", gpus=8)  # borrowingLimit 8
    namespace = samples.namespace("alpha")
    ok = _quota("alpha", {"requests.nvidia.com/gpu": "16"})
    assert rules([queue, namespace, ok]) == []
    short = _quota("alpha", {"requests.nvidia.com/gpu": 8})
    [finding] = check_controllers([queue, namespace, short], FLEET)
    assert (finding.object, finding.rule) == ("ResourceQuota/alpha/compute", "quota-covers-queue")
    assert finding.message.startswith(
        "requests.nvidia.com/gpu is 8 but ClusterQueue/alpha may admit 16 "
        "(nominal + borrowingLimit)"
    )
    # A quota that does not list the key does not limit it; another namespace is not selected.
    assert rules([queue, namespace, samples.resource_quota("alpha")]) == []
    assert rules([queue, samples.namespace("bravo"), _quota("bravo", {})]) == []


def test_borrowing_without_limit_needs_the_whole_pool_in_the_quota() -> None:
    queue = samples.cluster_queue("alpha", gpus=4)
    del queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["borrowingLimit"]
    namespace = samples.namespace("alpha")
    assert rules([queue, namespace, _quota("alpha", {"requests.nvidia.com/gpu": 16})]) == []
    [finding] = check_controllers(
        [queue, namespace, _quota("alpha", {"requests.nvidia.com/gpu": 12})], FLEET
    )
    assert "may admit 16 (borrowing without limit, up to the pool)" in finding.message


def test_the_rendered_quota_covers_the_rendered_queue_and_the_old_one_did_not() -> None:
    fleet = demo_fleet()
    tenant = rich_tenant()
    objs = [
        o
        for o in objects_for(render_repository(fleet, [tenant]))
        if o["kind"] in ("Namespace", "ClusterQueue")
    ]
    assert rules([*objs, resource_quota(tenant, fleet)], fleet) == []
    # Today's quota before the fix: GPU keys at the nominal quota (16 whole GPUs).
    nominal = resource_quota(tenant, fleet)
    nominal["spec"]["hard"]["requests.nvidia.com/gpu"] = "16"
    assert ("ResourceQuota/alpha/tenant-quota", "quota-covers-queue") in rules(
        [*objs, nominal], fleet
    )


def test_a_gpu_endpoint_that_surges_on_rollout_is_refused() -> None:
    isvc = samples.inference_service()
    assert rules([isvc]) == []
    del isvc["spec"]["predictor"]["deploymentStrategy"]
    assert rules([isvc]) == [("InferenceService/alpha/llama3-8b", "rollout-surge")]
    isvc["spec"]["predictor"]["deploymentStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
    }
    assert rules([isvc]) == [("InferenceService/alpha/llama3-8b", "rollout-surge")]
    isvc["spec"]["predictor"]["deploymentStrategy"]["rollingUpdate"] = {
        "maxSurge": "0%",
        "maxUnavailable": 1,
    }
    assert rules([isvc]) == []
    cpu_only = samples.inference_service()
    del cpu_only["spec"]["predictor"]["deploymentStrategy"]
    for part in ("requests", "limits"):
        del cpu_only["spec"]["predictor"]["model"]["resources"][part]["nvidia.com/gpu"]
    assert rules([cpu_only]) == []


def test_malformed_objects_give_no_crash() -> None:
    broken: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "spec": "x"},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "spec": []},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "spec": {"levels": [1]}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "spec": {"hard": {"x": "lots"}}},
        {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": None},
    ]
    assert [rule for _, rule in rules(broken)] == ["tas-topology"]


# --- immutable specs (issue 9, finding 15) ----------------------------------------------------

FORCE = "kustomize.toolkit.fluxcd.io/force"


def _claims(count: int, *, force: bool = True, name: str = "claims") -> dict[str, Any]:
    share = dataclasses.replace(CLAIMS, name=name, count=count)
    template = dra.share_template(rich_tenant(), share, demo_fleet().flavor("h200"))  # type: ignore[arg-type]
    if not force:
        del template["metadata"]["annotations"][FORCE]
    return template


def immutable(head: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[str]:
    return [
        f.object for f in check_controllers(head, FLEET, base=base) if f.rule == "immutable-spec"
    ]


def test_a_claim_templates_spec_changed_in_place_is_refused() -> None:
    assert immutable([_claims(3, force=False)], [_claims(2, force=False)]) == [
        "ResourceClaimTemplate/alpha/claims"
    ]


def test_a_forced_or_renamed_or_unchanged_template_passes() -> None:
    assert immutable([_claims(3)], [_claims(2, force=False)]) == []
    # kustomize-controller also reads the live object's annotation.
    assert immutable([_claims(3, force=False)], [_claims(2)]) == []
    assert immutable([_claims(3, force=False, name="claims-b")], [_claims(2, force=False)]) == []
    assert immutable([_claims(2, force=False)], [_claims(2, force=False)]) == []
    # Without a base the rule has nothing to compare with.
    assert [f.rule for f in check_controllers([_claims(3, force=False)], FLEET)] == []


def test_every_rendered_claim_template_is_recreated_by_flux_on_change() -> None:
    templates = [
        obj
        for obj in objects_for(render_repository(demo_fleet(), [rich_tenant()]))
        if obj["kind"] == "ResourceClaimTemplate"
    ]
    assert templates
    for template in templates:
        assert template["metadata"]["annotations"][FORCE] == "enabled"


def test_the_checks_compare_with_the_base_tree() -> None:
    fleet = demo_fleet()
    tenant = rich_tenant()
    base = render_repository(fleet, [tenant])
    path = next(p for p in base if p.endswith(".yaml") and "/gpu-shares/" in p)
    stripped = base[path].replace(f"{FORCE}: enabled".encode(), b"example.com/note: x")
    base = {**base, path: stripped}
    head = {**base, path: stripped.replace(b"count: 8", b"count: 4")}
    assert head[path] != stripped
    results = {r.name: r for r in run_checks(head, fleet=fleet, changed={path}, base=base)}
    assert results["controllers"].status == "failed"
    assert "immutable-spec" in results["controllers"].details[0]
    results = {r.name: r for r in run_checks(head, fleet=fleet, changed={path})}
    assert results["controllers"].status == "passed"
