"""The catalog's forms without HTTP: what they offer from the fleet, the spec dict they build,
and where check_request's messages land."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django import forms
from django.utils import timezone

from catalog.forms import ClusterForm, EndpointForm, GpuShareForm, SpecForm, mig_profile_label
from catalog.models import Kind, Resource
from catalog.specs import from_json
from gitops.fleet import configured_fleet, demo_fleet, flavor_mapping
from gitops.models import FleetInventory
from gitops.render.vcluster import KUBERNETES_IMAGE_TAGS
from gitops.specs import EndpointSpec, GpuShare, TenantClusterSpec
from tenants.specs import tenant_spec

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": "2", "borrow": "on"}
SHARE_SPEC = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
ENDPOINT = {
    "name": "chat",
    "model_uri": "hf://org/chat-model",
    "share": "train",
    "gpus_per_replica": "1",
    "min_replicas": "1",
    "max_replicas": "2",
    "scale_metric": "concurrency",
    "scale_target": "8",
    "expose": "on",
    "cpu": "8",
    "memory_gib": "64",
    "args": "--max-model-len=8192\n\n  --enable-prefix-caching  \r\n",
}
CLUSTER = {
    "name": "lab",
    "kubernetes_version": "1.33",
    "size": "small",
    "node_pools": "h200",  # one select: a tenant with a share on h200 only
    "gpu_quota": "2",
    "cpu_quota": "16",
    "memory_gib": "64",
    "max_pods": "100",
}


def _form(cls: type[SpecForm], tenant: Any, data: dict[str, Any] | None, **kw: Any) -> SpecForm:
    return cls(data, tenant=tenant, fleet=configured_fleet(), **kw)


def _groups(form: SpecForm, field: str) -> dict[str, list[str]]:
    """The option values of each optgroup of a select."""
    return {
        str(group): [v for v, _ in options]
        for group, options in form.fields[field].choices  # type: ignore[attr-defined]
        if isinstance(options, list | tuple)
    }


def _choices(form: SpecForm, field: str) -> list[str]:
    values = []
    for value, label in form.fields[field].choices:  # type: ignore[attr-defined]
        if isinstance(label, list | tuple):  # an optgroup
            values += [v for v, _ in label]
        else:
            values.append(value)
    return values


def _active_share(tenant: Any, **spec: Any) -> Resource:
    return Resource.objects.create(
        tenant=tenant,
        kind=Kind.GPU_SHARE,
        name=spec.get("name", "train"),
        state=Resource.State.ACTIVE,
        spec={**SHARE_SPEC, **spec},
    )


def _post_data(initial: dict[str, Any]) -> dict[str, Any]:
    """What a browser posts for a form showing ``initial``."""
    data = {}
    for key, value in initial.items():
        if value is True:
            data[key] = "on"
        elif value is False or value is None:
            continue
        else:
            data[key] = value if isinstance(value, list) else str(value)
    return data


@pytest.mark.django_db
def test_it_offers_the_fleet_flavors_kinds_and_profiles(world: dict[str, Any]) -> None:
    form = _form(GpuShareForm, world["alpha"], None)
    assert _choices(form, "flavor") == ["h200", "h200-mig", "h200-hami", "h200-dra"]
    # One Kind control: the pools grouped by how they hand out GPUs.
    assert "kind" not in form.fields
    assert _groups(form, "flavor") == {
        "Whole GPUs": ["h200"],
        "MIG slices": ["h200-mig"],
        "Fraction of a GPU (HAMi)": ["h200-hami"],
        "GPUs claimed through DRA": ["h200-dra"],
    }
    assert set(_choices(form, "mig_profile")) == {"", "1g.18gb", "2g.35gb", "3g.71gb"}
    cluster = _form(ClusterForm, world["alpha"], None)
    assert _choices(cluster, "node_pools") == ["", "h200", "h200-mig", "h200-hami", "h200-dra"]
    assert _choices(cluster, "kubernetes_version") == sorted(KUBERNETES_IMAGE_TAGS)


@pytest.mark.django_db
def test_it_follows_the_live_inventory(world: dict[str, Any]) -> None:
    counted = dataclasses.replace(demo_fleet().flavors[1], name="b200-mig")
    FleetInventory.objects.create(flavors=[flavor_mapping(counted)], topology_levels=[])
    form = _form(GpuShareForm, world["alpha"], None)
    assert _groups(form, "flavor") == {"MIG slices": ["b200-mig"]}


@pytest.mark.django_db
def test_a_dedicated_tenant_is_offered_no_fractions(world: dict[str, Any]) -> None:
    form = _form(GpuShareForm, world["bravo"], None)
    assert "Fraction of a GPU (HAMi)" not in _groups(form, "flavor")
    assert "h200-hami" not in _choices(form, "flavor")
    assert "h200-hami" not in _choices(_form(ClusterForm, world["bravo"], None), "node_pools")
    # Posting it anyway is refused by the one check, on the Kind control.
    form = _form(
        GpuShareForm,
        world["bravo"],
        {
            **SHARE,
            "flavor": "h200-hami",
            "kind": "hami",
            "gpumem_mib": "1024",
            "gpucores_percent": "10",
        },
    )
    assert not form.is_valid()
    assert "dedicated tenant" in form.errors["flavor"][0]


@pytest.mark.django_db
def test_it_builds_exactly_the_dataclass_fields(world: dict[str, Any]) -> None:
    _active_share(world["alpha"])
    cases = [
        (GpuShareForm, SHARE, GpuShare),
        (EndpointForm, ENDPOINT, EndpointSpec),
        (ClusterForm, CLUSTER, TenantClusterSpec),
    ]
    for cls, data, dataclass in cases:
        name = {"train": "extra"}.get(data["name"], data["name"])
        form = _form(cls, world["alpha"], {**data, "name": name})
        assert form.is_valid(), form.errors
        assert list(form.spec) == [f.name for f in dataclasses.fields(dataclass)]
        assert isinstance(from_json(cls.resource_kind, form.spec), dataclass)


@pytest.mark.django_db
def test_borrowing_unticked_means_a_limit_of_zero(world: dict[str, Any]) -> None:
    # Kueue reads no borrowingLimit (None) as "borrow without limit", so "no" must be 0.
    cases = [({"borrow": ""}, 0), ({}, None), ({"borrowing_limit": "3"}, 3)]
    for extra, limit in cases:
        data = {k: v for k, v in {**SHARE, **extra}.items() if v != ""}
        form = _form(GpuShareForm, world["alpha"], data)
        assert form.is_valid(), form.errors
        assert form.spec["borrowing_limit"] == limit, extra
        assert form.spec["lending_limit"] is None


@pytest.mark.django_db
def test_fields_of_other_share_kinds_are_left_out(world: dict[str, Any]) -> None:
    until = timezone.localdate() + timedelta(days=30)
    form = _form(
        GpuShareForm,
        world["alpha"],
        {
            **SHARE,
            "mig_profile": "1g.18gb",
            "gpumem_mib": "4096",
            "gpucores_percent": "30",
            "until": until.isoformat(),
        },
    )
    assert form.is_valid(), form.errors
    assert (form.spec["mig_profile"], form.spec["gpumem_mib"], form.spec["gpucores_percent"]) == (
        "",
        0,
        0,
    )
    assert form.spec["until"] == until.isoformat()
    hami = _form(
        GpuShareForm,
        world["alpha"],
        {
            **SHARE,
            "flavor": "h200-hami",
            "kind": "hami",
            "gpumem_mib": "4096",
            "gpucores_percent": "30",
        },
    )
    assert hami.is_valid(), hami.errors
    assert (hami.spec["gpumem_mib"], hami.spec["gpucores_percent"]) == (4096, 30)
    mig = _form(
        GpuShareForm,
        world["alpha"],
        {**SHARE, "flavor": "h200-mig", "kind": "mig", "mig_profile": "3g.71gb"},
    )
    assert mig.is_valid(), mig.errors
    assert mig.spec["mig_profile"] == "3g.71gb"


@pytest.mark.django_db
def test_hami_needs_memory_and_compute(world: dict[str, Any]) -> None:
    form = _form(GpuShareForm, world["alpha"], {**SHARE, "flavor": "h200-hami", "kind": "hami"})
    assert not form.is_valid()
    assert "GPU memory per slot" in form.errors["gpumem_mib"][0]
    assert "GPU cores" in form.errors["gpucores_percent"][0]


@pytest.mark.django_db
def test_the_checks_land_on_their_fields(world: dict[str, Any]) -> None:
    yesterday = timezone.localdate() - timedelta(days=1)
    cases = [
        ({"name": "Bad_Name"}, "name", "lower-case letters"),
        ({"count": "0"}, "count", "at least 1"),
        ({"flavor": "no-such-gpu"}, "flavor", "There is no GPU flavor 'no-such-gpu'"),
        ({"until": yesterday.isoformat()}, "until", "in the future"),
        ({"count": "17"}, "count", "its quota is 16"),
        ({"count": "many"}, "count", "whole number"),
        ({"mig_profile": "9g.1gb", "flavor": "h200-mig", "kind": "mig"}, "mig_profile", "9g.1gb"),
    ]
    for extra, field, message in cases:
        form = _form(GpuShareForm, world["alpha"], {**SHARE, **extra})
        assert not form.is_valid(), extra
        assert message in " ".join(form.errors.get(field, [])), (extra, form.errors)


@pytest.mark.django_db
def test_a_tenant_wide_problem_is_a_form_error(world: dict[str, Any]) -> None:
    world["alpha"].gpu_quota = 100
    world["alpha"].save()
    # Each share fits its pool; together they are over the tenant's cap.
    _active_share(world["alpha"], name="claims", flavor="h200-dra", kind="dra", count=16)
    form = _form(GpuShareForm, world["alpha"], {**SHARE, "count": "60"})
    assert not form.is_valid()
    assert "at most 64" in " ".join(form.non_field_errors())


@pytest.mark.django_db
def test_a_taken_name_is_refused_on_create_only(world: dict[str, Any]) -> None:
    share = _active_share(world["alpha"])
    form = _form(GpuShareForm, world["alpha"], SHARE)
    assert not form.is_valid()
    assert "already has a GPU share called 'train'" in form.errors["name"][0]
    modify = _form(
        GpuShareForm,
        world["alpha"],
        {**SHARE, "count": "3", "name": "ignored"},
        action="modify",
        fixed_name=share.name,
    )
    assert modify.is_valid(), modify.errors
    assert modify.spec["name"] == "train" and modify.spec["count"] == 3


@pytest.mark.django_db
def test_endpoint_args_are_one_per_line_and_shares_are_live(world: dict[str, Any]) -> None:
    form = _form(EndpointForm, world["alpha"], ENDPOINT)
    assert _choices(form, "share") == []
    assert not form.is_valid()
    assert "no usable GPU share named 'train'" in form.errors["share"][0]
    _active_share(world["alpha"])
    form = _form(EndpointForm, world["alpha"], ENDPOINT)
    assert _choices(form, "share") == ["train"]
    assert form.is_valid(), form.errors
    assert form.spec["args"] == ["--max-model-len=8192", "--enable-prefix-caching"]
    assert form.spec["expose"] is True
    bad = _form(EndpointForm, world["alpha"], {**ENDPOINT, "args": "--model_name=x"})
    assert not bad.is_valid()
    assert "served model name" in bad.errors["args"][0]


@pytest.mark.django_db
def test_a_stored_spec_shows_and_posts_back_unchanged(world: dict[str, Any]) -> None:
    until = (timezone.localdate() + timedelta(days=9)).isoformat()
    specs = [
        (GpuShareForm, {**SHARE_SPEC, "borrowing_limit": 0, "until": until}),
        (GpuShareForm, {**SHARE_SPEC, "borrowing_limit": None, "lending_limit": 1}),
        (GpuShareForm, {**SHARE_SPEC, "borrowing_limit": 4}),
    ]
    share = _active_share(world["alpha"], name="base")
    endpoint = {
        "name": "chat",
        "model_uri": "hf://org/m",
        "share": share.name,
        "args": ["--a=1", "--b"],
        "expose": False,
    }
    specs.append((EndpointForm, endpoint))
    for cls, stored in specs:
        full = dataclasses.asdict(from_json(cls.resource_kind, stored))
        full = {k: list(v) if isinstance(v, tuple) else v for k, v in full.items()}
        initial = cls.initial_from(full)
        form = _form(cls, world["alpha"], _post_data(initial), action="modify", fixed_name="x")
        assert form.is_valid(), (stored, form.errors)
        assert form.spec == {**full, "name": "x"}, stored


@pytest.mark.django_db
def test_a_dedicated_tenant_is_offered_mig_only_with_the_opt_in(
    world: dict[str, Any], merged_change: Callable[..., Any]
) -> None:
    merged_change(tenant_spec(world["bravo"]))
    form = _form(GpuShareForm, world["bravo"], None)
    assert "MIG slices" not in _groups(form, "flavor") and "h200-mig" not in _choices(
        form, "flavor"
    )
    assert "h200-mig" not in _choices(_form(ClusterForm, world["bravo"], None), "node_pools")
    mig = {**SHARE, "flavor": "h200-mig", "kind": "mig", "count": "4", "mig_profile": "1g.18gb"}
    posted = _form(GpuShareForm, world["bravo"], mig)
    assert not posted.is_valid()
    assert "MIG slices are off for a dedicated tenant" in posted.errors["flavor"][0]
    merged_change(dataclasses.replace(tenant_spec(world["bravo"]), mig_allowed=True))
    form = _form(GpuShareForm, world["bravo"], None)
    assert _groups(form, "flavor")["MIG slices"] == ["h200-mig"]
    assert _form(GpuShareForm, world["bravo"], mig).is_valid()


# --- forms that explain -------------------------------------------------------------------


@pytest.mark.django_db
def test_each_kind_of_share_validates_only_its_own_fields(world: dict[str, Any]) -> None:
    garbage = {"mig_profile": "9g.1gb", "gpumem_mib": "lots", "gpucores_percent": "-x"}
    cases = [
        # (kind's pool, the kind's own fields, fields of other kinds that hold garbage)
        ("h200", {}, garbage),
        ("h200-dra", {}, garbage),
        ("h200-mig", {"mig_profile": "2g.35gb"}, {k: garbage[k] for k in ("gpumem_mib",)}),
        (
            "h200-hami",
            {"gpumem_mib": "4096", "gpucores_percent": "30"},
            {"mig_profile": garbage["mig_profile"]},
        ),
    ]
    for flavor, own, others in cases:
        form = _form(GpuShareForm, world["alpha"], {**SHARE, "flavor": flavor, **own, **others})
        assert form.is_valid(), (flavor, form.errors)
        assert form.spec["kind"] == configured_fleet().flavor(flavor).mode  # type: ignore[union-attr]
    # The kind's own fields are still checked, with the sentence on the field.
    hami = _form(
        GpuShareForm,
        world["alpha"],
        {**SHARE, "flavor": "h200-hami", "gpumem_mib": "lots", "gpucores_percent": "30"},
    )
    assert not hami.is_valid()
    assert "whole number" in hami.errors["gpumem_mib"][0]
    mig = _form(GpuShareForm, world["alpha"], {**SHARE, "flavor": "h200-mig"})
    assert not mig.is_valid()
    assert "mig_profile" in mig.errors
    # An unknown pool is refused on the Kind control, naming the pools there are.
    unknown = _form(GpuShareForm, world["alpha"], {**SHARE, "flavor": "b300", **garbage})
    assert not unknown.is_valid()
    assert list(unknown.errors) == ["flavor"]
    assert "h200-hami" in unknown.errors["flavor"][0]


@pytest.mark.django_db
def test_the_kind_control_tags_its_options_and_the_fields_of_each_kind(
    world: dict[str, Any],
) -> None:
    html = str(_form(GpuShareForm, world["alpha"], None))
    for pool, kind in (("h200", "whole"), ("h200-mig", "mig"), ("h200-hami", "hami")):
        assert f'<option value="{pool}" data-kind="{kind}">' in html
    assert 'data-show-for="mig dra-mig"' in html and html.count('data-show-for="hami"') == 2
    assert '<option value="1g.18gb" data-pool="h200-mig">' in html


def test_mig_profiles_say_their_compute_and_memory() -> None:
    assert mig_profile_label("1g.18gb", 32) == (
        "1g.18gb: 1/7 of the compute, 18 GB memory (32 in the pool)"
    )
    assert mig_profile_label("3g.71gb", 16).startswith("3g.71gb: 3/7 of the compute, 71 GB")


@pytest.mark.django_db
def test_the_mig_profile_choices_explain_themselves(world: dict[str, Any]) -> None:
    form = _form(GpuShareForm, world["alpha"], None)
    [(pool, profiles)] = [c for c in form.fields["mig_profile"].choices if c[0]]  # type: ignore[attr-defined]
    assert pool == "h200-mig"
    assert dict(profiles)["2g.35gb"] == "2g.35gb: 2/7 of the compute, 35 GB memory (16 in the pool)"


@pytest.mark.django_db
def test_the_cluster_form_offers_one_pool_when_only_one_may_be_chosen(
    world: dict[str, Any],
) -> None:
    _active_share(world["alpha"])
    one = _form(ClusterForm, world["alpha"], None)
    assert not isinstance(one.fields["node_pools"], forms.MultipleChoiceField)
    assert '<select name="node_pools"' in str(one) and "multiple" not in str(one)
    # HAMi and DRA pools share the label that keeps NVIDIA's device plugin off their nodes, and
    # no other pool has it: a cluster may select both together.
    _active_share(
        world["alpha"],
        name="slots",
        flavor="h200-hami",
        kind="hami",
        count=2,
        gpumem_mib=4096,
        gpucores_percent=30,
    )
    _active_share(world["alpha"], name="claims", flavor="h200-dra", kind="dra", count=1)
    several = _form(ClusterForm, world["alpha"], None)
    assert isinstance(several.fields["node_pools"], forms.MultipleChoiceField)
    form = _form(
        ClusterForm,
        world["alpha"],
        {**CLUSTER, "node_pools": ["h200-hami", "h200-dra"], "gpu_quota": "0"},
    )
    assert form.is_valid(), form.errors
    assert form.spec["node_pools"] == ["h200-hami", "h200-dra"]
    # With the single select, nothing chosen is no pool (a cluster without GPUs).
    none = _form(ClusterForm, world["bravo"], {**CLUSTER, "node_pools": "", "gpu_quota": "0"})
    assert none.is_valid(), none.errors
    assert none.spec["node_pools"] == []


@pytest.mark.django_db
def test_the_endpoint_form_says_why_there_is_no_share(world: dict[str, Any]) -> None:
    ask = f'<a href="/t/alpha/catalog/{Kind.GPU_SHARE}/new/">Ask for a GPU share</a>'
    help_text = str(_form(EndpointForm, world["alpha"], None).fields["share"].help_text)
    assert help_text.startswith("The tenant has no GPU share yet") and ask in help_text
    Resource.objects.create(tenant=world["alpha"], kind=Kind.GPU_SHARE, name="soon")
    help_text = str(_form(EndpointForm, world["alpha"], None).fields["share"].help_text)
    assert "GPU share soon is requested but not merged yet" in help_text and ask in help_text
    _active_share(world["alpha"])
    assert "Ask for" not in str(_form(EndpointForm, world["alpha"], None).fields["share"].help_text)
