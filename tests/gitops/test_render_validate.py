"""Specs that cannot be rendered are rejected with a SpecError naming the field."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest

from gitops.fleet import demo_fleet
from gitops.render import render_repository, render_tenant_tree, render_tenants_index, specfiles
from gitops.render.specfiles import SETTINGS_FILE, parse_spec_files, render_spec_files
from gitops.render.validate import validate_fleet, validate_tenant
from gitops.specs import (
    EndpointSpec,
    Flavor,
    FleetSpec,
    GatewayRef,
    GpuShare,
    SpecError,
    TenantClusterSpec,
    TenantSpec,
)
from tests.gitops.render_samples import (
    CLAIMS,
    DEV,
    FRACTIONS,
    LLAMA,
    SLICES,
    TRAIN,
    dedicated_tenant,
    rich_tenant,
)
from tests.support.text import OTHER_INVISIBLE, REFUSED, refusal, refused_params

FLEET = demo_fleet()
Change = Callable[[TenantSpec], TenantSpec]


def _share(index: int, **changes: object) -> Change:
    def change(tenant: TenantSpec) -> TenantSpec:
        shares = list(tenant.shares)
        shares[index] = dataclasses.replace(shares[index], **changes)  # type: ignore[arg-type]
        return dataclasses.replace(tenant, shares=tuple(shares))

    return change


def _endpoint(index: int, **changes: object) -> Change:
    def change(tenant: TenantSpec) -> TenantSpec:
        endpoints = list(tenant.endpoints)
        endpoints[index] = dataclasses.replace(endpoints[index], **changes)  # type: ignore[arg-type]
        return dataclasses.replace(tenant, endpoints=tuple(endpoints))

    return change


def _cluster(**changes: object) -> Change:
    def change(tenant: TenantSpec) -> TenantSpec:
        return dataclasses.replace(tenant, clusters=(dataclasses.replace(DEV, **changes),))  # type: ignore[arg-type]

    return change


def _tenant(**changes: object) -> Change:
    return lambda tenant: dataclasses.replace(tenant, **changes)  # type: ignore[arg-type]


def _expect(tenant: TenantSpec, path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        validate_tenant(tenant, FLEET)
    assert path in caught.value.errors, caught.value.errors
    message = caught.value.errors[path]
    assert fragment in message, message
    # Sentences a person can act on.
    assert message[0].isupper() and message.endswith((".", ")")), message


def test_it_accepts_the_sample_tenants() -> None:
    validate_fleet(FLEET)
    validate_tenant(rich_tenant(), FLEET)
    validate_tenant(dedicated_tenant(), FLEET)


BAD_TENANTS: list[tuple[str, Change, str, str]] = [
    ("slug not a DNS label", _tenant(slug="Alpha"), "slug", "DNS label"),
    ("slug with underscore", _tenant(slug="al_pha"), "slug", "DNS label"),
    ("slug too long", _tenant(slug="a" * 41), "slug", "at most 40"),
    ("slug traversal", _tenant(slug="../alpha"), "slug", "DNS label"),
    ("slug reserved", _tenant(slug="kube-system"), "slug", "reserved"),
    ("slug is the gateway namespace", _tenant(slug="gateway-system"), "slug", "reserved"),
    ("slug is the portal's namespace", _tenant(slug="portal-system"), "slug", "reserved"),
    ("slug is KServe's namespace", _tenant(slug="kserve"), "slug", "reserved"),
    ("slug is the GPU Operator's", _tenant(slug="gpu-operator"), "slug", "reserved"),
    ("display name with newline", _tenant(display_name="a\nb"), "display_name", "line breaks"),
    ("cpu quota zero", _tenant(cpu_quota=0), "cpu_quota", "at least 1"),
    ("memory negative", _tenant(memory_gib=-5), "memory_gib", "at least 1"),
    ("weight huge", _tenant(fair_share_weight=10**9), "fair_share_weight", "at most"),
    ("share name not a label", _share(0, name="Train"), "shares[0].name", "DNS label"),
    ("share name traversal", _share(0, name="../../etc"), "shares[0].name", "DNS label"),
    ("share name with slash", _share(0, name="a/b"), "shares[0].name", "DNS label"),
    ("share count zero", _share(0, count=0), "shares[0].count", "at least 1"),
    ("share count negative", _share(0, count=-3), "shares[0].count", "at least 1"),
    ("share count huge", _share(0, count=10**9), "shares[0].count", "at most 64"),
    ("share count not an int", _share(0, count=1.5), "shares[0].count", "whole number"),
    ("share count bool", _share(0, count=True), "shares[0].count", "whole number"),
    ("unknown flavor", _share(0, flavor="a100"), "shares[0].flavor", "no GPU flavor 'a100'"),
    ("unknown kind", _share(0, kind="tpu"), "shares[0].kind", "must be one of"),
    ("mig share on whole pool", _share(1, flavor="h200"), "shares[1].kind", "whole"),
    ("whole share on mig pool", _share(0, flavor="h200-mig"), "shares[0].kind", "'mig'"),
    ("hami share on whole pool", _share(2, flavor="h200"), "shares[2].kind", "hami"),
    ("dra share on a hami pool", _share(3, flavor="h200-hami"), "shares[3].kind", "a dra flavor"),
    # The device plugin serves the whole pool, so the DRA driver cannot.
    ("dra share on the whole pool", _share(3, flavor="h200"), "shares[3].kind", "a dra flavor"),
    ("whole share on the dra pool", _share(0, flavor="h200-dra"), "shares[0].kind", "'dra'"),
    (
        "mig profile not offered",
        _share(1, mig_profile="3g.40gb"),
        "shares[1].mig_profile",
        "3g.40gb",
    ),
    ("mig profile missing", _share(1, mig_profile=""), "shares[1].mig_profile", "Choose"),
    ("profile on a whole share", _share(0, mig_profile="1g.18gb"), "shares[0].mig_profile", "Only"),
    ("mig slices over capacity", _share(1, count=33), "shares[1].count", "at most 32"),
    ("hami gpumem above the GPU", _share(2, gpumem_mib=200_000), "shares[2].gpumem_mib", "143771"),
    ("hami gpumem zero", _share(2, gpumem_mib=0), "shares[2].gpumem_mib", "at least 1"),
    (
        "hami gpucores zero",
        _share(2, gpucores_percent=0),
        "shares[2].gpucores_percent",
        "at least 1",
    ),
    (
        "hami gpucores above 100",
        _share(2, gpucores_percent=101),
        "shares[2].gpucores_percent",
        "100",
    ),
    ("hami slots over capacity", _share(2, count=321), "shares[2].count", "at most 320"),
    ("gpumem on a whole share", _share(0, gpumem_mib=100), "shares[0].gpumem_mib", "HAMi"),
    (
        "lending above the share",
        _share(0, lending_limit=17),
        "shares[0].lending_limit",
        "at most 16",
    ),
    (
        "borrowing negative",
        _share(0, borrowing_limit=-1),
        "shares[0].borrowing_limit",
        "at least 0",
    ),
    ("until not a date", _share(0, until="31/12/2026"), "shares[0].until", "YYYY-MM-DD"),
    ("until impossible date", _share(0, until="2026-02-30"), "shares[0].until", "does not exist"),
    (
        "duplicate share",
        lambda t: dataclasses.replace(t, shares=(*t.shares, dataclasses.replace(SLICES))),
        "shares[4].name",
        "already named 'slices'",
    ),
    (
        "dra shares over their pool together",
        lambda t: dataclasses.replace(
            t,
            shares=(
                TRAIN,
                CLAIMS,
                dataclasses.replace(CLAIMS, name="more-claims", count=9),
                SLICES,
                FRACTIONS,
            ),
        ),
        "shares[2].count",
        "add up to 17",
    ),
    ("cluster name not a label", _cluster(name="Dev"), "clusters[0].name", "DNS label"),
    ("cluster name starting with a digit", _cluster(name="1dev"), "clusters[0].name", "letter"),
    ("cluster release name too long", _cluster(name="d" * 58), "clusters[0].name", "63"),
    (
        "unknown kubernetes version",
        _cluster(kubernetes_version="1.12"),
        "clusters[0].kubernetes_version",
        "1.33",
    ),
    (
        "unknown node pool",
        _cluster(node_pools=("a100",)),
        "clusters[0].node_pools[0]",
        "no node pool",
    ),
    (
        "pool without a share",
        _cluster(node_pools=("h200-mig", "h200-hami")),
        "clusters[0].node_pools",
        "choose one pool",
    ),
    ("gpu quota above the shares", _cluster(gpu_quota=17), "clusters[0].gpu_quota", "at most 16"),
    (
        "gpus without pools",
        _cluster(node_pools=(), gpu_quota=2),
        "clusters[0].gpu_quota",
        "at most 0",
    ),
    ("cluster cpu above the tenant", _cluster(cpu_quota=65), "clusters[0].cpu_quota", "at most 64"),
    ("unknown size", _cluster(size="huge"), "clusters[0].size", "must be one of"),
    (
        "duplicate cluster",
        lambda t: dataclasses.replace(t, clusters=(DEV, DEV)),
        "clusters[1].name",
        "already named 'dev'",
    ),
    ("endpoint name not a label", _endpoint(0, name="Llama"), "endpoints[0].name", "DNS label"),
    ("endpoint name traversal", _endpoint(0, name="../x"), "endpoints[0].name", "DNS label"),
    ("endpoint name too long", _endpoint(0, name="e" * 46), "endpoints[0].name", "at most 45"),
    ("endpoint unknown share", _endpoint(0, share="nope"), "endpoints[0].share", "'nope'"),
    (
        "endpoint needs more than the share",
        _endpoint(0, gpus_per_replica=17),
        "endpoints[0].gpus_per_replica",
        "at most 16",
    ),
    (
        "endpoint replicas exceed the share",
        _endpoint(0, max_replicas=9),
        "endpoints[0].max_replicas",
        "needs 18",
    ),
    (
        "endpoint zero gpus",
        _endpoint(0, gpus_per_replica=0),
        "endpoints[0].gpus_per_replica",
        "at least 1",
    ),
    (
        "two mig slices per replica",
        _endpoint(2, gpus_per_replica=2),
        "endpoints[2].gpus_per_replica",
        "one MIG slice",
    ),
    (
        "min above max",
        _endpoint(1, min_replicas=3, max_replicas=2),
        "endpoints[1].max_replicas",
        "below the minimum",
    ),
    # Endpoint 1 scales on cpu (an HPA): it cannot go to zero (KEDA's metrics can).
    (
        "zero replicas without KEDA",
        _endpoint(1, min_replicas=0),
        "endpoints[1].min_replicas",
        "with cpu or memory scaling the minimum is 1",
    ),
    ("negative replicas", _endpoint(0, min_replicas=-1), "endpoints[0].min_replicas", "at least 0"),
    (
        "uri with another scheme",
        _endpoint(0, model_uri="http://example.com/m"),
        "endpoints[0].model_uri",
        "hf://",
    ),
    (
        "uri with traversal",
        _endpoint(0, model_uri="pvc://models/../secrets"),
        "endpoints[0].model_uri",
        "'..'",
    ),
    (
        "uri with spaces",
        _endpoint(0, model_uri="hf://org/my model"),
        "endpoints[0].model_uri",
        "not a valid",
    ),
    (
        "uri with a newline",
        _endpoint(0, model_uri="hf://org/m\nx: y"),
        "endpoints[0].model_uri",
        "not a valid",
    ),
    ("uri empty", _endpoint(0, model_uri=""), "endpoints[0].model_uri", "required"),
    ("args not strings", _endpoint(0, args=("--a", 3)), "endpoints[0].args[1]", "string"),
    ("args not a tuple", _endpoint(0, args="--a"), "endpoints[0].args", "list"),
    ("arg too long", _endpoint(0, args=("x" * 1025,)), "endpoints[0].args[0]", "1024"),
    ("too many args", _endpoint(0, args=("--x",) * 65), "endpoints[0].args", "at most 64"),
    ("arg with newline", _endpoint(0, args=("--a\n--b",)), "endpoints[0].args[0]", "line breaks"),
    (
        "arg sets the model name",
        _endpoint(0, args=("--model_name=x",)),
        "endpoints[0].args[0]",
        "served model name",
    ),
    (
        "cpu target above 100",
        _endpoint(1, scale_target=150),
        "endpoints[1].scale_target",
        "at most 100",
    ),
    (
        "unknown scale metric",
        _endpoint(1, scale_metric="gpu"),
        "endpoints[1].scale_metric",
        "must be one of",
    ),
    (
        "served name with spaces",
        _endpoint(0, served_model_name="my model"),
        "endpoints[0].served_model_name",
        "letters",
    ),
    (
        "duplicate endpoint",
        lambda t: dataclasses.replace(t, endpoints=(*t.endpoints, LLAMA)),
        "endpoints[4].name",
        "already named 'llama'",
    ),
    (
        "endpoints together above the share",
        lambda t: dataclasses.replace(
            t,
            endpoints=(
                LLAMA,
                dataclasses.replace(LLAMA, name="other", min_replicas=8, max_replicas=8),
            ),
        ),
        "endpoints[1].min_replicas",
        "need 18",
    ),
    (
        "claim template named like a share",
        lambda t: dataclasses.replace(
            t,
            shares=(*t.shares, GpuShare(name="llama-gpus", flavor="h200", kind="whole", count=1)),
        ),
        "endpoints[0].name",
        "llama-gpus",
    ),
]


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        pytest.param(change, path, fragment, id=label)
        for label, change, path, fragment in BAD_TENANTS
    ],
)
def test_it_rejects_a_bad_tenant_naming_the_field(change: Change, path: str, fragment: str) -> None:
    _expect(change(rich_tenant()), path, fragment)


def test_it_rejects_hami_for_a_dedicated_tenant() -> None:
    tenant = dataclasses.replace(dedicated_tenant(), shares=(*dedicated_tenant().shares, FRACTIONS))
    _expect(tenant, "shares[2].kind", "dedicated tenant")


def test_it_allows_dra_and_mig_for_a_dedicated_tenant() -> None:
    tenant = dataclasses.replace(dedicated_tenant(), shares=(*dedicated_tenant().shares, CLAIMS))
    validate_tenant(tenant, FLEET)


def test_it_refuses_mig_for_a_dedicated_tenant_without_the_opt_in() -> None:
    off = dataclasses.replace(dedicated_tenant(), mig_allowed=False)
    _expect(off, "shares[1].kind", "MIG slices are off for a dedicated tenant")
    # MIG devices claimed through DRA are MIG slices too; whole DRA GPUs are not.
    mig_claims = dataclasses.replace(CLAIMS, name="mig-claims", mig_profile="1g.18gb")
    whole = dataclasses.replace(off, shares=(off.shares[0], CLAIMS))
    validate_tenant(whole, FLEET)
    _expect(
        dataclasses.replace(whole, shares=(*whole.shares, mig_claims)),
        "shares[2].kind",
        "unless a platform admin enables them",
    )
    # A shared tenant needs no opt-in.
    validate_tenant(dataclasses.replace(off, trust_level="shared"), FLEET)


def test_the_mig_opt_in_is_in_the_settings_file_only_when_set() -> None:
    on = json.loads(render_spec_files(dedicated_tenant())[SETTINGS_FILE])
    assert on["mig_allowed"] is True
    off = dataclasses.replace(dedicated_tenant(), mig_allowed=False)
    assert "mig_allowed" not in json.loads(render_spec_files(off)[SETTINGS_FILE])
    assert parse_spec_files("bravo", render_spec_files(off)) == specfiles.canonical(off)
    _expect(dataclasses.replace(off, mig_allowed="yes"), "mig_allowed", "true or false")


def test_it_caps_a_tenant_at_the_fleet_limit() -> None:
    fleet = dataclasses.replace(FLEET, max_gpus_per_tenant=20)
    with pytest.raises(SpecError) as caught:
        validate_tenant(rich_tenant(), fleet)
    # 16 whole + 8 DRA + 8 x 1/7 MIG + 10 x 1/10 HAMi
    assert "add up to 26.1429 GPUs" in caught.value.errors["shares"]


def test_it_validates_before_rendering() -> None:
    with pytest.raises(SpecError) as caught:
        render_tenant_tree(_share(1, mig_profile="7g.141gb")(rich_tenant()), FLEET)
    assert (
        "'7g.141gb' is not offered by flavor 'h200-mig'"
        in caught.value.errors["shares[1].mig_profile"]
    )


def test_it_rejects_tenant_directories_that_are_not_labels() -> None:
    with pytest.raises(SpecError) as caught:
        render_tenants_index(["alpha", "../etc"])
    assert list(caught.value.errors) == ["slugs[0]"]


def test_it_rejects_two_tenants_with_one_slug_in_a_repository() -> None:
    with pytest.raises(SpecError) as caught:
        render_repository(FLEET, [rich_tenant(), rich_tenant()])
    assert "listed twice" in caught.value.errors["tenants[1].slug"]


def test_it_rejects_vcluster_releases_that_collide_across_tenants() -> None:
    first = TenantSpec(slug="a-b", shares=(TRAIN,), clusters=(TenantClusterSpec(name="c"),))
    second = TenantSpec(slug="a", shares=(TRAIN,), clusters=(TenantClusterSpec(name="b-c"),))
    with pytest.raises(SpecError) as caught:
        render_repository(FLEET, [first, second])
    assert "'a-b-c'" in caught.value.errors["tenants[1].clusters"]


BAD_FLEETS: list[tuple[str, FleetSpec, str, str]] = [
    ("fleet name", dataclasses.replace(FLEET, name="AI Factory"), "name", "DNS label"),
    ("cohort", dataclasses.replace(FLEET, cohort=""), "cohort", "required"),
    (
        "duplicate flavor",
        dataclasses.replace(FLEET, flavors=(*FLEET.flavors, FLEET.flavors[0])),
        "flavors[4].name",
        "already named 'h200'",
    ),
    (
        "product with spaces",
        dataclasses.replace(
            FLEET, flavors=(dataclasses.replace(FLEET.flavors[0], product="NVIDIA H200'"),)
        ),
        "flavors[0].product",
        "nvidia.com/gpu.product",
    ),
    (
        "mig flavor without profiles",
        dataclasses.replace(
            FLEET, flavors=(dataclasses.replace(FLEET.flavors[1], mig_profiles=()),)
        ),
        "flavors[0].mig_profiles",
        "must list",
    ),
    (
        "bad mig profile",
        dataclasses.replace(
            FLEET,
            flavors=(dataclasses.replace(FLEET.flavors[1], mig_profiles=(("1g.10gb+me", 7),)),),
        ),
        "flavors[0].mig_profiles[0]",
        "not a MIG profile",
    ),
    (
        "profiles on a whole flavor",
        dataclasses.replace(
            FLEET,
            flavors=(dataclasses.replace(FLEET.flavors[0], mig_profiles=(("1g.18gb", 7),)),),
        ),
        "flavors[0].mig_profiles",
        "Only a MIG flavor",
    ),
    (
        "dra pool with a device plugin",
        dataclasses.replace(FLEET, flavors=(dataclasses.replace(FLEET.flavors[0], mode="dra"),)),
        "flavors[0].node_labels",
        "must run no NVIDIA device plugin",
    ),
    (
        # Issue 26 finding 10: NVIDIA's and HAMi's device plugins both advertised the GPUs.
        "hami pool with NVIDIA's device plugin",
        dataclasses.replace(
            FLEET,
            flavors=(
                dataclasses.replace(FLEET.flavors[0], mode="hami", hami_split=10, topology=None),
            ),
        ),
        "flavors[0].node_labels",
        "or it and HAMi's device plugin would both hand out their GPUs",
    ),
    (
        "device plugin pool without a device plugin",
        dataclasses.replace(FLEET, flavors=(dataclasses.replace(FLEET.flavors[3], mode="whole"),)),
        "flavors[0].node_labels",
        "use mode dra",
    ),
    (
        "profiles on a hami flavor",
        dataclasses.replace(
            FLEET,
            flavors=(dataclasses.replace(FLEET.flavors[2], mig_profiles=(("1g.18gb", 7),)),),
        ),
        "flavors[0].mig_profiles",
        "Only a MIG flavor",
    ),
    (
        # Issue 26 finding 3: Kueue's TAS counts container requests, not ResourceClaims.
        "topology-aware dra flavor",
        dataclasses.replace(FLEET, flavors=(dataclasses.replace(FLEET.flavors[3], topology=True),)),
        "flavors[0].topology",
        "does not count ResourceClaims",
    ),
    (
        "topology-aware hami flavor",
        dataclasses.replace(FLEET, flavors=(dataclasses.replace(FLEET.flavors[2], topology=True),)),
        "flavors[0].topology",
        "HAMi's GPU memory and cores never appear",
    ),
    (
        "topology not a boolean",
        dataclasses.replace(
            FLEET, flavors=(dataclasses.replace(FLEET.flavors[0], topology="yes"),)
        ),
        "flavors[0].topology",
        "true, false or left out",
    ),
    (
        "product label twice",
        dataclasses.replace(
            FLEET,
            flavors=(
                dataclasses.replace(
                    FLEET.flavors[0], node_labels=(("nvidia.com/gpu.product", "x"),)
                ),
            ),
        ),
        "flavors[0].node_labels[0]",
        "listed twice",
    ),
    (
        "bad node label key",
        dataclasses.replace(
            FLEET,
            flavors=(dataclasses.replace(FLEET.flavors[0], node_labels=(("bad key", "x"),)),),
        ),
        "flavors[0].node_labels[0]",
        "not a valid label key",
    ),
    (
        "hostname not last",
        dataclasses.replace(
            FLEET, topology_levels=("kubernetes.io/hostname", "network.topology.kubernetes.io/rack")
        ),
        "topology_levels",
        "last",
    ),
    ("no topology", dataclasses.replace(FLEET, topology_levels=()), "topology_levels", "1 and 16"),
    (
        "registry wildcard",
        dataclasses.replace(FLEET, allowed_registries=("docker.io/*",)),
        "allowed_registries[0]",
        "wildcards",
    ),
    (
        "gateway hostname",
        dataclasses.replace(FLEET, gateway=GatewayRef(hostname="Models Example")),
        "gateway.hostname",
        "DNS name",
    ),
    (
        "chart not pinned",
        dataclasses.replace(FLEET, vcluster_chart_version="0.x"),
        "vcluster_chart_version",
        "0.35.3",
    ),
    (
        # Another real chart version: its values schema is not the one the checks use.
        "chart not the validated one",
        dataclasses.replace(FLEET, vcluster_chart_version="0.30.0"),
        "vcluster_chart_version",
        "values schema",
    ),
    (
        "hosts image without a registry",
        dataclasses.replace(FLEET, vcluster_hosts_image="alpine:3.20"),
        "vcluster_hosts_image",
        "registry/repository:tag",
    ),
    ("git url", dataclasses.replace(FLEET, git_url="file:///srv/git"), "git_url", "http"),
    ("git branch", dataclasses.replace(FLEET, git_branch="../main"), "git_branch", "branch"),
    (
        "prometheus url",
        dataclasses.replace(FLEET, prometheus_url="prometheus:9090"),
        "prometheus_url",
        "http",
    ),
    (
        "gpu cap",
        dataclasses.replace(FLEET, max_gpus_per_tenant=0),
        "max_gpus_per_tenant",
        "at least 1",
    ),
]


@pytest.mark.parametrize(
    ("fleet", "path", "fragment"),
    [pytest.param(fleet, path, fragment, id=label) for label, fleet, path, fragment in BAD_FLEETS],
)
def test_it_rejects_a_bad_fleet_naming_the_field(
    fleet: FleetSpec, path: str, fragment: str
) -> None:
    with pytest.raises(SpecError) as caught:
        validate_fleet(fleet)
    assert path in caught.value.errors, caught.value.errors
    assert fragment in caught.value.errors[path]


def test_it_accepts_a_minimal_fleet_and_tenant() -> None:
    fleet = FleetSpec(
        flavors=(
            Flavor(name="l4", product="NVIDIA-L4", mode="whole", gpus=4, gpu_memory_mib=23_034),
        )
    )
    tenant = TenantSpec(
        slug="tiny",
        shares=(GpuShare(name="one", flavor="l4", kind="whole", count=1),),
        endpoints=(EndpointSpec(name="m", model_uri="pvc://models", share="one"),),
    )
    assert render_tenant_tree(tenant, fleet)


def test_the_namespaces_the_fleet_configures_are_reserved_too() -> None:
    fleet = dataclasses.replace(FLEET, hami_namespace="hami", portal_namespace="ai-portal")
    for slug in ("hami", "ai-portal"):
        validate_tenant(TenantSpec(slug=slug), FLEET)  # free on a fleet that does not use it
        with pytest.raises(SpecError) as caught:
            validate_tenant(TenantSpec(slug=slug), fleet)
        assert "reserved" in caught.value.errors["slug"]


@pytest.mark.parametrize("char", refused_params([*REFUSED, *OTHER_INVISIBLE]))
def test_it_rejects_bidi_overrides_separators_and_other_invisible_characters(char: str) -> None:
    for field in ("display_name", "cost_centre"):
        tenant = dataclasses.replace(rich_tenant(), **{field: f"Alpha{char}Team"})
        _expect(tenant, field, refusal(char))
    args = _endpoint(0, args=(f"--max-model-len{char}=4096",))(rich_tenant())
    _expect(args, "endpoints[0].args[0]", refusal(char))
