"""Checking a tree by its tenants (gitops.checks.partition): the same findings as the rules run
over the whole tree, while a run after a change only computes the tenants it touched."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.checks import kustomize, partition, run_checks
from gitops.checks.capacity import check_capacity
from gitops.checks.controllers import check_controllers
from gitops.checks.duplicates import check_duplicates
from gitops.checks.isolation import check_isolation, platform_sources_in
from gitops.checks.schema import get_registry
from gitops.fleet import demo_fleet
from gitops.specs import FleetSpec, TenantClusterSpec, TenantSpec
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import require_kubectl
from tests.gitops.render_samples import dedicated_tenant, rendered_fleet, rich_tenant

OWN_BIN_DIRS = kustomize.own_bin_dirs
RULES = ("isolation", "capacity", "controllers", "duplicates")
# Values kept per tenant: those four rules (Flux's Kustomizations are the fifth, read by the
# kustomize check, which is skipped here without kubectl).
PER_TENANT = len(RULES)


@pytest.fixture(autouse=True)
def _cold_store(monkeypatch: pytest.MonkeyPatch) -> None:
    # No kustomize builds (they are checked elsewhere), and nothing kept from other tests.
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(kustomize, "own_bin_dirs", lambda: [])
    partition.store().clear_memory()


def _whole(files: dict[str, bytes], fleet: FleetSpec, base: dict[str, bytes]) -> dict[str, Any]:
    """What each rule finds run over the whole tree at once, as before the split."""
    urls = {fleet.git_url} | {
        fleet.tenant_git_url(p.split("/")[1])
        for p in files
        if p.startswith("tenants/") and p.count("/") >= 2
    }
    return {
        "isolation": check_isolation(
            files,
            gateway_namespace=fleet.gateway.namespace,
            gateway_name=fleet.gateway.name,
            gateway_domain=fleet.gateway.hostname,
            platform_sources=platform_sources_in(files),
            registry=get_registry(None),
            portal_subject=(fleet.portal_namespace, fleet.portal_service_account),
            tenant_source_url=fleet.tenant_git_url,
        ),
        "capacity": check_capacity(files, fleet),
        "controllers": check_controllers(files, fleet, base=base),
        "duplicates": check_duplicates(files, repo_urls=urls),
    }


def _by_tenant(
    files: dict[str, bytes], fleet: FleetSpec, base: dict[str, bytes], **kwargs: Any
) -> dict[str, list[str]]:
    results = run_checks(files, fleet=fleet, base=base, **kwargs)
    return {r.name: sorted(r.details) for r in results if r.name in RULES}


def _same(files: dict[str, bytes], fleet: FleetSpec, base: dict[str, bytes] | None = None) -> None:
    base = files if base is None else base
    whole = {
        name: sorted(str(f) for f in found) for name, found in _whole(files, fleet, base).items()
    }
    assert _by_tenant(files, fleet, base) == whole
    # And again with every tenant's values kept from the first run.
    stats = partition.Stats()
    assert _by_tenant(files, fleet, base, stats=stats) == whole
    assert stats.computed == 0 and stats.kept == PER_TENANT * len(partition.split(files).tenants)


def _demo_fleet(*tenants: TenantSpec) -> dict[str, bytes]:
    return rendered_fleet(demo_fleet(), *tenants)


def _with_files(tree: dict[str, bytes], slug: str, added: dict[str, bytes]) -> None:
    """Add files to a tenant's directory and list them in its kustomization."""
    for name, data in added.items():
        tree[f"tenants/{slug}/{name}"] = data
    path = f"tenants/{slug}/kustomization.yaml"
    listed = yaml.safe_load(tree[path])["resources"]
    tree[path] = samples.kustomization([*listed, *added])


def _config_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": "v"},
    }


def _cross_tenant_duplicates() -> dict[str, bytes]:
    tree = samples.fleet_tree("alpha", "bravo", "charlie")
    shared = samples.cluster_queue("alpha")
    shared["metadata"] = {"name": "shared"}
    other = samples.cluster_queue("bravo")
    other["metadata"] = {"name": "shared"}
    _with_files(tree, "alpha", {"extra.yaml": samples.dump(shared)})
    _with_files(tree, "bravo", {"extra.yaml": samples.dump(other)})
    _with_files(tree, "charlie", {"more.yaml": samples.dump(_config_map("notes", "alpha"))})
    _with_files(tree, "alpha", {"notes.yaml": samples.dump(_config_map("notes", "alpha"))})
    return tree


def _overcommit() -> dict[str, bytes]:
    tree = samples.fleet_tree("alpha", "bravo")
    for slug in ("alpha", "bravo"):
        tree.update(samples.tenant_tree(slug, gpus=60))
    return tree


def _queue_selects_other_tenant() -> dict[str, bytes]:
    tree = samples.fleet_tree("alpha", "bravo")
    queue = samples.cluster_queue("alpha")
    queue["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": "bravo"}}
    quota = samples.resource_quota("bravo")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "1"
    tree["tenants/alpha/queues.yaml"] = samples.dump(queue, samples.local_queue("alpha"))
    tree["tenants/bravo/quota.yaml"] = samples.dump(quota, samples.limit_range("bravo"))
    return tree


TREES: dict[str, Callable[[], dict[str, bytes]]] = {
    "samples": lambda: samples.fleet_tree("alpha", "bravo"),
    "demo renderers": lambda: _demo_fleet(rich_tenant(), dedicated_tenant()),
    "one release from two tenants": lambda: _demo_fleet(
        TenantSpec(slug="llm", clusters=(TenantClusterSpec(name="platform-x"),)),
        TenantSpec(slug="llm-platform", clusters=(TenantClusterSpec(name="x"),)),
    ),
    "cross-tenant duplicates": _cross_tenant_duplicates,
    "overcommit over tenants": _overcommit,
    "a queue selecting another tenant": _queue_selects_other_tenant,
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_by_tenant_finds_what_the_whole_tree_run_finds(name: str) -> None:
    files = TREES[name]()
    fleet = (
        samples.FLEET
        if name not in ("demo renderers", "one release from two tenants")
        else (demo_fleet())
    )
    _same(files, fleet)


def test_the_trees_above_do_break_the_rules_they_are_about() -> None:
    """The equivalence above is only worth something if the findings are there."""
    checks = {
        name: {r.name: r for r in run_checks(TREES[name](), fleet=fleet)}
        for name, fleet in (
            ("cross-tenant duplicates", samples.FLEET),
            ("overcommit over tenants", samples.FLEET),
            ("a queue selecting another tenant", samples.FLEET),
            ("one release from two tenants", demo_fleet()),
        )
    }
    duplicates = checks["cross-tenant duplicates"]["duplicates"].details
    assert any("ClusterQueue.kueue.x-k8s.io/shared" in d for d in duplicates)
    assert any("ConfigMap/alpha/notes" in d for d in duplicates)
    assert checks["overcommit over tenants"]["capacity"].status == "failed"
    covers = [
        d
        for d in checks["a queue selecting another tenant"]["controllers"].details
        if "quota-covers-queue" in d and "requests.nvidia.com/gpu is 1 " in d
    ]
    assert covers and all("tenants/bravo/quota.yaml" in d for d in covers)
    assert any("ClusterQueue/alpha may admit" in d for d in covers)
    assert checks["one release from two tenants"]["duplicates"].status == "failed"


def test_a_change_computes_only_the_tenants_it_touches_and_still_sees_the_others() -> None:
    fleet = samples.FLEET
    base = samples.fleet_tree("alpha", "bravo", "charlie", "delta")
    run_checks(base, fleet=fleet)  # main, checked once: every tenant's values kept
    head = dict(base)
    # bravo now writes a ClusterQueue alpha (untouched, its values kept) already has.
    clash = samples.cluster_queue("bravo")
    clash["metadata"] = {"name": "alpha"}
    _with_files(head, "bravo", {"clash.yaml": samples.dump(clash)})
    changed = {"tenants/bravo/clash.yaml", "tenants/bravo/kustomization.yaml"}
    stats = partition.Stats()
    parts = partition.split(head, reuse=partition.split(base), changed=changed)
    results = {
        r.name: r
        for r in run_checks(head, fleet=fleet, changed=changed, base=base, parts=parts, stats=stats)
    }
    assert (stats.computed, stats.kept) == (PER_TENANT, 3 * PER_TENANT)  # one tenant of four
    assert results["duplicates"].status == "failed"
    assert any("ClusterQueue.kueue.x-k8s.io/alpha" in d for d in results["duplicates"].details)
    assert parts.digests == partition.split(head).digests
    _same(head, fleet, base)


def test_a_platform_change_or_new_checks_code_computes_every_tenant_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = samples.FLEET
    files = samples.fleet_tree("alpha", "bravo")
    run_checks(files, fleet=fleet)
    platform = dict(files)
    platform["infrastructure/notes.yaml"] = samples.dump(_config_map("notes", "default"))
    stats = partition.Stats()
    run_checks(platform, fleet=fleet, stats=stats)
    assert (stats.computed, stats.kept) == (2 * PER_TENANT, 0)
    monkeypatch.setattr(partition, "CODE_DIGEST", "a newer release of the checks")
    stats = partition.Stats()
    run_checks(files, fleet=fleet, stats=stats)
    assert (stats.computed, stats.kept) == (2 * PER_TENANT, 0)


def test_a_new_tenant_leaves_the_others_values_kept() -> None:
    fleet = demo_fleet()
    before = _demo_fleet(rich_tenant(), dedicated_tenant())
    run_checks(before, fleet=fleet)
    after = _demo_fleet(rich_tenant(), dedicated_tenant(), TenantSpec(slug="newcomer"))
    assert after["tenants/kustomization.yaml"] != before["tenants/kustomization.yaml"]
    stats = partition.Stats()
    run_checks(after, fleet=fleet, stats=stats)
    assert (stats.computed, stats.kept) == (PER_TENANT, 2 * PER_TENANT)
    _same(after, fleet)


def test_values_kept_on_disk_serve_a_new_process(tmp_path: Path) -> None:
    cache = str(tmp_path / "check-cache.sqlite3")
    fleet = samples.FLEET
    files = _cross_tenant_duplicates()
    first = run_checks(files, fleet=fleet, cache=cache)
    # A new worker: nothing in its memory, the file from the run before.
    partition._STORES.clear()
    stats = partition.Stats()
    again = run_checks(files, fleet=fleet, stats=stats, cache=cache)
    assert (stats.computed, stats.kept) == (0, 3 * PER_TENANT)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in first]
    rows = sqlite3.connect(cache).execute("SELECT count(*) FROM check_values")
    assert rows.fetchone()[0] == 3 * PER_TENANT
    # Without the file, a new process computes them again.
    partition._STORES.clear()
    stats = partition.Stats()
    run_checks(files, fleet=fleet, stats=stats)
    assert (stats.computed, stats.kept) == (3 * PER_TENANT, 0)


def test_an_unusable_cache_file_only_costs_time(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    files = _cross_tenant_duplicates()
    for cache in (blocker / "check-cache.sqlite3", tmp_path / "garbage.sqlite3"):
        if cache.parent == tmp_path:
            cache.write_bytes(b"this is not a database" * 100)
        partition._STORES.clear()
        stats = partition.Stats()
        results = {
            r.name: r for r in run_checks(files, fleet=samples.FLEET, stats=stats, cache=str(cache))
        }
        assert results["duplicates"].status == "failed"
        assert stats.computed == 3 * PER_TENANT


def test_paths_that_are_no_tenant_directory_belong_to_the_shared_part() -> None:
    assert partition.slug_of("tenants/alpha/queues.yaml") == "alpha"
    assert partition.slug_of("tenants/kustomization.yaml") is None
    assert partition.slug_of("tenants/../clusters/x.yaml") is None
    assert partition.slug_of("tenants/Alpha/x.yaml") is None
    assert partition.slug_of("infrastructure/alpha/x.yaml") is None


def test_flux_kustomizations_are_kept_by_tenant_and_the_build_summary_counts_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kustomize, "own_bin_dirs", OWN_BIN_DIRS)
    require_kubectl()
    fleet = samples.FLEET
    base = samples.fleet_tree("alpha", "bravo", "charlie")
    first = {r.name: r for r in run_checks(base, fleet=fleet)}
    head = dict(base)
    head["tenants/bravo/notes.yaml"] = samples.dump(_config_map("notes", "bravo"))
    _with_files(head, "bravo", {"notes.yaml": head["tenants/bravo/notes.yaml"]})
    changed = {"tenants/bravo/notes.yaml", "tenants/bravo/kustomization.yaml"}
    stats = partition.Stats()
    again = {
        r.name: r for r in run_checks(head, fleet=fleet, changed=changed, base=base, stats=stats)
    }
    assert (stats.computed, stats.kept) == (PER_TENANT + 1, 2 * (PER_TENANT + 1))
    # Every tenant's Flux Kustomization is counted, the kept ones too; one path is built.
    assert first["kustomize"].status == "passed"
    total = len(first["kustomize"].details[1:])  # a whole-tree run lists every path built
    assert total == 5  # infrastructure, tenants and three tenants' workloads
    assert again["kustomize"].status == "passed"
    assert again["kustomize"].summary.startswith(f"1 Flux path of {total} build; kubectl v1.")


@pytest.mark.django_db
def test_check_main_keeps_every_tenant_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    from gitops import services
    from gitops.fleet import configured_fleet

    with pytest.raises(CommandError, match="no main yet"):
        call_command("check_main", stdout=StringIO())
    services.ensure_bootstrapped(configured_fleet())
    files = dict(services.repository().read_tree(services.main_sha()))
    tenants = _demo_fleet(rich_tenant(), dedicated_tenant())
    services.repository().commit(
        {p: d for p, d in tenants.items() if p.startswith("tenants/")},
        message="two tenants",
        author=services.identity(None),
        branch="main",
        expected_parent=services.main_sha(),
    )
    assert files  # bootstrap wrote the platform's part
    out = StringIO()
    call_command("check_main", stdout=out)
    text = out.getvalue()
    assert "isolation: passed" in text and "duplicates: passed" in text
    assert f"values kept 0, computed {2 * PER_TENANT}" in text
    out = StringIO()
    call_command("check_main", stdout=out)
    assert f"values kept {2 * PER_TENANT}, computed 0" in out.getvalue()
    out = StringIO()
    call_command("check_main", "--all", stdout=out)
    # Every file's schema: the built-in kinds validated, the CRs without CRDs here named.
    assert "schemas: partial — " in out.getvalue() and " objects validated, " in out.getvalue()
