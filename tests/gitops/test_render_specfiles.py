"""A tenant's directory carries the spec it is rendered from (gitops/render/specfiles.py):
read back, it renders the same directory, whatever order its resources were asked for in."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gitops.fleet import demo_fleet
from gitops.render import render_tenant_tree
from gitops.render.specfiles import canonical, parse_spec_files
from gitops.specs import ClusterMember, SpecError
from tests.gitops.render_samples import rich_tenant

FLEET = demo_fleet()
PREFIX = "tenants/alpha/"


def _spec_files(files: dict[str, bytes]) -> dict[str, bytes]:
    return {p[len(PREFIX) :]: b for p, b in files.items() if p.startswith(PREFIX + "spec/")}


def _tenant():
    member = ClusterMember("ann", "admin", "https://sso.example.com", "sub-ann", "ann@example.com")
    return dataclasses.replace(rich_tenant(), members=(member,))


def test_the_directory_renders_again_from_its_own_spec() -> None:
    tenant = _tenant()
    files = render_tenant_tree(tenant, FLEET)
    spec = _spec_files(files)
    assert sorted(spec) == sorted(
        ["spec/tenant.json", "spec/members.json"]
        + [f"spec/shares/{s.name}.json" for s in tenant.shares]
        + [f"spec/clusters/{c.name}.json" for c in tenant.clusters]
        + [f"spec/endpoints/{e.name}.json" for e in tenant.endpoints]
    )
    parsed = parse_spec_files("alpha", spec)
    assert parsed == canonical(tenant)
    assert render_tenant_tree(parsed, FLEET) == files
    # Nothing in the spec files is a manifest: no kustomization lists them.
    kustomizations = b"".join(v for p, v in files.items() if p.endswith("kustomization.yaml"))
    assert b"spec/" not in kustomizations


def test_the_order_resources_were_asked_for_in_does_not_show() -> None:
    tenant = _tenant()
    reordered = dataclasses.replace(
        tenant,
        shares=tuple(reversed(tenant.shares)),
        endpoints=tuple(reversed(tenant.endpoints)),
    )
    assert tenant.shares != reordered.shares
    assert render_tenant_tree(reordered, FLEET) == render_tenant_tree(tenant, FLEET)


@pytest.mark.parametrize(
    ("path", "data", "message"),
    [
        ("spec/shares/infer.json", b"{not json", "not JSON"),
        (
            "spec/shares/infer.json",
            b'{"name": "infer", "flavor": "h200", "kind": "whole", "count": 1, "size": 3}',
            "size: Unknown field",
        ),
        (
            "spec/shares/other.json",
            b'{"name": "infer", "flavor": "h200", "kind": "whole", "count": 1}',
            "holds shares item 'infer'",
        ),
        ("spec/widgets/x.json", b"{}", "not a spec file"),
        ("spec/members.json", b'{"ann": "admin"}', "expected a list of members"),
        ("spec/tenant.json", b'{"slug": "bravo"}', "slug: Unknown field"),
    ],
)
def test_a_spec_file_that_does_not_parse_is_named(path: str, data: bytes, message: str) -> None:
    spec = _spec_files(render_tenant_tree(_tenant(), FLEET))
    spec[path] = data
    with pytest.raises(SpecError) as caught:
        parse_spec_files("alpha", spec)
    assert message in caught.value.errors[PREFIX + path]


def test_a_directory_without_settings_is_not_a_spec() -> None:
    spec = _spec_files(render_tenant_tree(_tenant(), FLEET))
    del spec["spec/tenant.json"]
    with pytest.raises(SpecError, match=r"tenant\.json: missing"):
        parse_spec_files("alpha", spec)


def test_the_files_are_sorted_json_of_the_spec() -> None:
    spec = _spec_files(render_tenant_tree(_tenant(), FLEET))
    settings = json.loads(spec["spec/tenant.json"])
    assert settings["display_name"] == _tenant().display_name
    assert "shares" not in settings and "members" not in settings and "slug" not in settings
    assert spec["spec/tenant.json"].endswith(b"}\n")
