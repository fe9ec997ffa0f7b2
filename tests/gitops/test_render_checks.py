"""The renderers and the checks agree: a full rendered repository passes every check, and a
capacity overcommit is caught."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gitops.checks import run_checks
from gitops.fleet import demo_fleet
from gitops.render import render_repository
from gitops.specs import GpuShare
from tests.gitops.render_samples import dedicated_tenant, rich_tenant


@pytest.mark.parametrize("stack", [False, True])
def test_it_passes_every_check_on_the_rendered_repository(schema_dir: Path, stack: bool) -> None:
    # With the stack, infrastructure/controllers holds every controller's HelmRelease.
    fleet = replace(demo_fleet(), stack=stack)
    files = render_repository(fleet, [rich_tenant(), dedicated_tenant()])
    assert any(p.startswith("infrastructure/controllers/kueue") for p in files) == stack
    results = run_checks(files, fleet=fleet, schema_dir=schema_dir)
    assert {r.name: r.status for r in results} == {
        "schemas": "passed",
        "kustomize": "passed",
        "isolation": "passed",
        "capacity": "passed",
        "controllers": "passed",
        "duplicates": "passed",
        "scope": "passed",
    }, [(r.name, r.summary, r.details[:5]) for r in results]


def test_it_catches_an_overcommit_across_tenants(schema_dir: Path) -> None:
    fleet = demo_fleet()
    whole = next(f for f in fleet.flavors if f.mode == "whole")
    big = GpuShare(name="all", flavor=whole.name, kind="whole", count=min(whole.gpus, 64))
    tenants = [
        replace(rich_tenant(), slug=f"team-{i}", shares=(big,), endpoints=(), clusters=())
        for i in range(whole.gpus // big.count + 1)
    ]
    files = render_repository(fleet, tenants)
    capacity = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}[
        "capacity"
    ]
    assert capacity.status == "failed"
    allowed = run_checks(files, fleet=fleet, schema_dir=schema_dir, allow_overcommit=True)
    assert {r.name: r.status for r in allowed}["capacity"] == "passed"


def test_it_flags_a_platform_release_aimed_at_another_tenant(schema_dir: Path) -> None:
    fleet = demo_fleet()
    files = dict(render_repository(fleet, [rich_tenant()]))
    path = next(p for p in files if "/clusters/" in p and p.startswith("tenants/"))
    files[path] = (
        files[path]
        .replace(b"storageNamespace: ", b"storageNamespace: x")
        .replace(b"targetNamespace: ", b"targetNamespace: x")
    )
    result = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert result["isolation"].status == "failed"
    assert any("namespace" in d for d in result["isolation"].details)


def test_it_fails_a_change_that_publishes_on_another_tenants_host(schema_dir: Path) -> None:
    # The cross-tenant hijack: bravo's route claims alpha's host (the old shared host let the
    # longest path prefix win across tenants). The kustomize build sees it too.
    fleet = demo_fleet()
    bravo = replace(rich_tenant(), slug="bravo")
    files = dict(render_repository(fleet, [rich_tenant(), bravo]))
    path = "tenants/bravo/workloads/endpoints/llama.yaml"
    files[path] = files[path].replace(b"bravo.models.", b"alpha.models.")
    result = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert result["isolation"].status == "failed"
    assert any("route-hostname" in d and "alpha.models" in d for d in result["isolation"].details)


def test_it_fails_a_change_that_moves_litellm_configuration_into_workloads(
    schema_dir: Path,
) -> None:
    fleet = demo_fleet()
    files = dict(render_repository(fleet, [rich_tenant()]))
    config = files.pop("tenants/alpha/litellm/llama.yaml")
    files["tenants/alpha/workloads/endpoints/llama.yaml"] += b"---\n" + config
    result = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert result["isolation"].status == "failed"
    assert any("litellm-config" in d for d in result["isolation"].details)
