"""The checks every change to the fleet repository runs, like CI on a pull request.

``run_checks`` returns one ``CheckResult`` per check, in this order:

- ``schemas``: the objects of the changed files against the upstream CRDs and the built-in
  Kubernetes schemas, strictly (``gitops.checks.schema``);
- ``kustomize``: ``kustomize build`` of every directory a Flux Kustomization applies that the
  change touches (``gitops.checks.kustomize``);
- ``isolation``: tenant and path rules on the whole tree, and the tenant rules again on the
  build output of tenant workloads (``gitops.checks.isolation``);
- ``capacity``: guaranteed GPU quota of all queues against the fleet (``gitops.checks.capacity``);
- ``controllers``: settings the controllers would act on against their intent: topology-aware
  flavors they cannot place, preemption fair sharing ignores, namespace quotas below what Kueue
  admits, rollouts that surge past the GPU quota, immutable specs changed in place
  (``gitops.checks.controllers``);
- ``duplicates``: two documents anywhere in the tree that would be one object in the cluster,
  with the namespace and name kustomize and Flux give them (``gitops.checks.duplicates``).

A check that cannot run here (no kubectl) is ``skipped`` with the reason. The schema check
always validates the built-in kinds (offline, at the fleet's Kubernetes version); when some
objects' kinds have no schema anywhere (no CRD for them in the source), it is ``partial``:
"N objects validated, M custom resources without a schema: <kinds>". Whether a skipped or
partial check may merge is the caller's decision (the portal's ``GITOPS_ALLOW_PARTIAL_CHECKS``),
but neither is ever a passed one. The schema check names its source and the versions it used
(``gitops.checks.schema_source``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from gitops.checks import cluster_access, partition, scope
from gitops.checks.capacity import (
    Claim,
    capacity_findings,
    nominal_quotas,
    reservation_claims,
    reservation_findings,
)
from gitops.checks.controllers import (
    immutable_spec_findings,
    items_of,
    local_findings,
    quota_cover_facts,
    quota_cover_findings,
)
from gitops.checks.duplicates import duplicate_findings, placements, split_placements
from gitops.checks.findings import Finding
from gitops.checks.isolation import (
    PlatformSource,
    check_isolation,
    check_workload_objects,
    platform_sources_in,
    tenant_of,
)
from gitops.checks.kustomize import (
    BuildResult,
    FluxPath,
    KustomizeUnavailable,
    affected_paths,
    aggregated_parts,
    build_parts,
    flux_kustomizations,
    kustomize_build,
    kustomize_command,
    patched_directories,
    patches_matching_nothing,
    present_parts,
    tool_label,
    top_part,
    touched_parts,
)
from gitops.checks.manifests import iter_objects
from gitops.checks.schema import SchemaRegistry, get_registry
from gitops.checks.schema_source import LABEL_KINDS, SchemaSource
from gitops.specs import FleetSpec

logger = logging.getLogger(__name__)

CheckName = Literal[
    "schemas", "kustomize", "isolation", "capacity", "controllers", "duplicates", "scope"
]
CheckStatus = Literal["passed", "failed", "partial", "skipped"]


@dataclass(frozen=True)
class CheckResult:
    name: CheckName
    status: CheckStatus
    summary: str
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_checks(
    files: Mapping[str, bytes],
    *,
    fleet: FleetSpec,
    changed: set[str] | None = None,
    schema_dir: str | Path | None = None,
    schema_source: SchemaSource | None = None,
    gateway_namespace: str | None = None,
    platform_sources: Collection[PlatformSource] | None = None,
    allow_overcommit: bool = False,
    base: Mapping[str, bytes] | None = None,
    parts: partition.TreeParts | None = None,
    base_parts: partition.TreeParts | None = None,
    stats: partition.Stats | None = None,
    cache: str | None = None,
    scopes: Mapping[str, Collection[str]] | None = None,
    drift: bool = True,
) -> list[CheckResult]:
    """Run every check on the tree ``files`` (``{path: bytes}`` at the change's head).

    ``changed`` limits schema validation to those files and builds only the Flux paths they
    affect (None: everything, as for a full check of main). The gateway tenant routes attach
    to defaults to the fleet's; platform sources default to the Flux sources defined under
    ``clusters/`` and ``infrastructure/``. ``base`` is the tree the change starts from, for the
    rules about updates the API server refuses (None: those rules are not run).

    Schemas come from ``schema_source``, or from the directory ``schema_dir`` when no source
    is given (neither: the built-in kinds only); the built-in kinds are those of
    ``fleet.kubernetes_version``.

    The whole-tree rules run by tenant (``gitops.checks.partition``): what they found in a
    tenant's directory is kept by its content, so only the tenants a change touches (and the
    ones never checked before) are read. ``parts`` is ``files`` already split (the merge queue
    splits a batch's tree from its base's, and passes ``base`` split as ``base_parts``);
    ``stats`` counts the tenants kept and computed; ``cache`` is the SQLite file they are kept
    in besides this process (the portal's ``GITOPS_CHECK_CACHE``; None: this process only).

    ``scopes`` is what the change (or batch) was asked to touch, by tenant
    (``gitops.checks.scope``); None: the tree is not a change (a check of main). ``drift``:
    also warn where a touched tenant's directory is not what its spec renders to (the merge
    queue leaves it out: it renders what it merges, and a batch touches hundreds of tenants).
    """
    parts = parts if parts is not None else partition.split(files)
    source = schema_source
    if source is None:
        source = (
            SchemaSource.from_directory(schema_dir)
            if schema_dir is not None
            else SchemaSource.builtin()
        )
    registry: SchemaRegistry | None = None
    registry_error = ""
    try:
        registry = source.registry(fleet.kubernetes_version)
    except (OSError, ValueError) as exc:
        registry_error = f"cannot load schemas from {source.short_label()}: {exc}"

    builds: list[BuildResult] = []
    tree = _Tree(files, parts, fleet, stats, cache)
    if base is not None and base_parts is None:
        base_parts = partition.split(base)
    results = [
        _guarded("schemas", lambda: _schemas(files, changed, source, registry, registry_error)),
        _guarded("kustomize", lambda: _kustomize(tree, changed, builds)),
        _guarded(
            "isolation",
            lambda: _isolation(
                tree,
                builds,
                gateway_namespace=gateway_namespace or fleet.gateway.namespace,
                gateway_name=fleet.gateway.name if gateway_namespace is None else None,
                gateway_domain=fleet.gateway.hostname,
                platform_sources=platform_sources,
                registry=registry or get_registry(None, fleet.kubernetes_version),
                portal_subject=(fleet.portal_namespace, fleet.portal_service_account),
                tenant_source_url=fleet.tenant_git_url,
            ),
        ),
        _guarded("capacity", lambda: _capacity(tree, allow_overcommit)),
        _guarded("controllers", lambda: _controllers(tree, base_parts)),
        _guarded(
            "duplicates",
            lambda: _duplicates(tree, registry or get_registry(None, fleet.kubernetes_version)),
        ),
        _guarded("scope", lambda: _scope(files, base, changed, scopes, fleet if drift else None)),
    ]
    return results


def _scope(
    files: Mapping[str, bytes],
    base: Mapping[str, bytes] | None,
    changed: set[str] | None,
    scopes: Mapping[str, Collection[str]] | None,
    fleet: FleetSpec | None,
) -> CheckResult:
    if changed is None or scopes is None:
        return CheckResult("scope", "passed", "not a change: no request to hold the tree to")
    touched = sorted({s for s in map(partition.slug_of, changed) if s is not None})
    if not touched:
        return CheckResult("scope", "passed", "no tenant directory changed")
    found = scope.violations(base, files, changed, scopes)
    notes = scope.drift(files, changed, fleet) if fleet is not None else []
    where = _plural(len(touched), "tenant directory").replace("directorys", "directories")
    if found:
        return CheckResult(
            "scope",
            "failed",
            f"{_plural(len(found), 'file')} of resources no request of the change asks for "
            f"in {where}",
            [str(v) for v in found] + notes,
        )
    note = f" ({_plural(len(notes), 'warning')})" if notes else ""
    return CheckResult("scope", "passed", f"{where}: only what the requests ask for{note}", notes)


@dataclass
class _Tree:
    """The tree a run checks, whole and by tenant."""

    files: Mapping[str, bytes]
    parts: partition.TreeParts
    fleet: FleetSpec
    stats: partition.Stats | None
    cache: str | None = None

    def by_tenant(
        self,
        rule: str,
        params: Any,
        compute: Callable[[Mapping[str, bytes], list[str]], dict[str | None, Any]],
    ) -> dict[str | None, Any]:
        # The fleet is a parameter of every rule (flavors, gateway, Git URLs).
        return partition.by_tenant(
            rule, self.parts, repr((self.fleet, params)), compute, self.stats, self.cache
        )

    def findings_by_tenant(
        self, rule: str, params: Any, run: Callable[[Mapping[str, bytes]], list[Finding]]
    ) -> list[Finding]:
        values = self.by_tenant(
            rule, params, lambda sub, slugs: partition.split_findings(run(sub), slugs)
        )
        return partition.flatten(values)


def _guarded(name: CheckName, run: Callable[[], CheckResult]) -> CheckResult:
    # A bug in one check must not hide the others' results.
    try:
        return run()
    except Exception as exc:
        logger.exception("check %s crashed", name)
        return CheckResult(name, "failed", f"the check crashed: {type(exc).__name__}", [str(exc)])


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _schemas(
    files: Mapping[str, bytes],
    changed: set[str] | None,
    source: SchemaSource,
    registry: SchemaRegistry | None,
    registry_error: str,
) -> CheckResult:
    if registry is None:
        return CheckResult("schemas", "failed", registry_error)
    paths = sorted(files if changed is None else changed & set(files))
    objects, problems = iter_objects(files, paths)
    details = [f"{p.path}: {p.message}" for p in problems]
    errors = warnings = 0
    unvalidated: list[str] = []
    unknown_kinds: set[str] = set()
    used: set[tuple[str, str]] = set()
    for item in objects:
        obj = item.obj
        if isinstance(obj, dict) and isinstance(obj.get("apiVersion"), str):
            used.add((obj["apiVersion"], str(obj.get("kind"))))
        for error in registry.validate(obj):
            details.append(f"{item.path}: {error}")
            if error.unvalidated:
                unvalidated.append(f"{item.path}: {error.kind}/{error.name}")
                unknown_kinds.add(error.kind)
            elif error.severity == "error":
                errors += 1
            else:
                warnings += 1
    errors += len(problems)
    label = source.label(registry, used)
    # The source first, so a reader sees what the verdict rests on before the findings.
    details[0:0] = [label, *(f"schema source: {line}" for line in registry.skipped)]
    scope = (
        f"{_plural(len(objects), 'object')} in {_plural(len({o.path for o in objects}), 'file')}"
    )
    against = f"; schemas: {source.short_label()}"
    if errors:
        return CheckResult(
            "schemas",
            "failed",
            f"{_plural(errors, 'error')}"
            + (f", {_plural(warnings, 'warning')}" if warnings else "")
            + f" in {scope}{against}",
            details,
        )
    note = f" ({_plural(warnings, 'warning')})" if warnings else ""
    if unvalidated:
        # Not validated is not valid: the check is partial, and names what it could not read.
        kinds = sorted(unknown_kinds)
        named = ", ".join(kinds[:LABEL_KINDS]) + (
            f", {len(kinds) - LABEL_KINDS} more" if len(kinds) > LABEL_KINDS else ""
        )
        return CheckResult(
            "schemas",
            "partial",
            f"{_plural(len(objects) - len(unvalidated), 'object')} validated{note}, "
            f"{len(unvalidated)} custom resource{'' if len(unvalidated) == 1 else 's'} "
            f"without a schema: {named}{against}",
            details,
        )
    return CheckResult("schemas", "passed", f"{scope} valid{note}{against}", details)


def _kustomize(tree: _Tree, changed: set[str] | None, builds: list[BuildResult]) -> CheckResult:
    try:
        command = kustomize_command()
    except KustomizeUnavailable as exc:
        return CheckResult("kustomize", "skipped", str(exc))
    tool = tool_label(command)
    # Which binary and version built the tree, first, as the schema check names its schemas.
    used = f"built with {tool}"
    with_tool = f"; {tool.split(' from ')[0]}"
    files = tree.files
    targets = _flux_targets(tree)
    all_paths = sorted({t.path for t in targets})
    if changed is None:
        paths = all_paths
    else:
        # A change reaches a tenant's Flux path only through that tenant's files (isolation
        # keeps kustomizations inside their tenant), so other tenants' paths are not walked.
        touched = {partition.slug_of(path) for path in changed}
        reach = touched | {None}
        near = [p for p in all_paths if partition.slug_of(f"{p}/x") in reach]
        paths = affected_paths(changed, near, files)
    if not paths:
        reason = "no Flux Kustomization in the tree" if not all_paths else "no Flux path affected"
        return CheckResult("kustomize", "passed", reason, [used])
    details: list[str] = []
    unmatched: list[str] = []
    for path in paths:
        if changed is not None and aggregated_parts(files, path) is not None:
            # Only the parts the change touches (a tenant's directory of tenants/).
            present = present_parts(files, path)
            for part in build_parts(files, path, changed, command=command, present=present):
                builds.append(part)
                if not part.ok:
                    owners = ", ".join(t.kustomization for t in targets if t.path == path)
                    details.append(
                        f"{path or '.'} (Flux Kustomization {owners}): {part.error_text}"
                    )
            # The touched parts' files, found by each file's part (a prefix test against every
            # touched part cost 2.3 s for 1,000 parts at 10,000 tenants).
            touched_set = set(touched_parts(files, path, changed, present=present))
            within = f"{path}/" if path else ""
            inside = (
                {
                    p: d
                    for p, d in files.items()
                    if p.startswith(within) and top_part(p, path) in touched_set
                }
                if touched_set
                else {}
            )
            for directory in patched_directories(inside, path):
                inner = kustomize_build(files, directory, command=command)
                if inner.ok:
                    unmatched += patches_matching_nothing(files, directory, inner.output_objects)
            continue
        result = kustomize_build(files, path, command=command)
        builds.append(result)
        if not result.ok:
            owners = ", ".join(t.kustomization for t in targets if t.path == path)
            details.append(f"{path or '.'} (Flux Kustomization {owners}): {result.error_text}")
            continue
        for directory in patched_directories(files, path):
            inner = (
                result if directory == path else kustomize_build(files, directory, command=command)
            )
            if inner.ok:
                unmatched += patches_matching_nothing(files, directory, inner.output_objects)
    failed = len(details)
    built = f"{_plural(len(paths), 'Flux path')} of {len(all_paths)}"
    if failed:
        return CheckResult(
            "kustomize",
            "failed",
            f"{failed} of {built} do not build{with_tool}",
            [used, *details, *unmatched],
        )
    if unmatched:
        count = len(unmatched)
        summary = f"{count} patch{'' if count == 1 else 'es'} in {built} match nothing{with_tool}"
        return CheckResult("kustomize", "failed", summary, [used, *unmatched])
    return CheckResult(
        "kustomize", "passed", f"{built} build{with_tool}", [used, *(p or "." for p in paths)]
    )


def _flux_targets(tree: _Tree) -> list[FluxPath]:
    """Every Flux Kustomization of the tree that reads this repository or a tenant's."""

    def compute(sub: Mapping[str, bytes], slugs: list[str]) -> dict[str | None, list[FluxPath]]:
        found = flux_kustomizations(sub, repo_urls=_repo_urls(sub, tree.fleet))
        out: dict[str | None, list[FluxPath]] = {None: [], **{slug: [] for slug in slugs}}
        for target in found:
            slug = partition.slug_of(target.file)
            out[slug if slug in out else None].append(target)
        return out

    values = tree.by_tenant("flux-kustomizations", (), compute)
    return sorted(partition.flatten(values), key=lambda f: (f.path, f.kustomization))


def _repo_urls(files: Mapping[str, bytes], fleet: FleetSpec) -> set[str]:
    """The repositories whose Flux Kustomizations apply this tree: the fleet's, and each
    tenant's projection repository, which holds its workloads and its clusters' bindings at the
    same paths as this tree."""
    slugs = {
        path.split("/")[1] for path in files if path.startswith("tenants/") and path.count("/") >= 2
    }
    return {fleet.git_url} | {fleet.tenant_git_url(slug) for slug in slugs}


def _isolation(
    tree: _Tree,
    builds: list[BuildResult],
    *,
    gateway_namespace: str,
    gateway_name: str | None,
    platform_sources: Collection[PlatformSource] | None,
    registry: SchemaRegistry,
    portal_subject: tuple[str, str] | None = None,
    gateway_domain: str | None = None,
    tenant_source_url: Callable[[str], str] | None = None,
) -> CheckResult:
    scopes = registry
    sources = frozenset(
        platform_sources if platform_sources is not None else platform_sources_in(tree.parts.shared)
    )
    params = (
        gateway_namespace,
        gateway_name,
        gateway_domain,
        sorted(sources),
        scopes.scopes_digest(),
        portal_subject,
        tenant_source_url("{slug}") if tenant_source_url else None,
    )
    findings = tree.findings_by_tenant(
        "isolation",
        params,
        lambda sub: check_isolation(
            sub,
            gateway_namespace=gateway_namespace,
            gateway_name=gateway_name,
            gateway_domain=gateway_domain,
            platform_sources=sources,
            registry=scopes,
            portal_subject=portal_subject,
            tenant_source_url=tenant_source_url,
        ),
    )
    seen = {(f.object, f.rule) for f in findings}
    for build in builds:
        slug, tenant_owned = tenant_of(f"{build.directory}/x")
        if build.ok and cluster_access.access_dir(f"{build.directory}/x") is not None:
            # What reaches the virtual cluster is the build, patches applied.
            where = f"{build.directory} (built)"
            for obj in build.output_objects:
                for finding in cluster_access.object_findings(where, obj):
                    if (finding.object, finding.rule) not in seen:
                        findings.append(finding)
            continue
        if not build.ok or slug is None or not tenant_owned:
            continue
        for finding in check_workload_objects(
            slug,
            build.output_objects,
            gateway_namespace=gateway_namespace,
            gateway_name=gateway_name,
            gateway_domain=gateway_domain,
            registry=scopes,
            path=f"{build.directory} (built)",
        ):
            # The same problem in the files is reported once, where it is written.
            if (finding.object, finding.rule) not in seen:
                findings.append(finding)
    return _from_findings("isolation", findings, "no isolation rule broken")


def _capacity(tree: _Tree, allow_overcommit: bool) -> CheckResult:
    fleet = tree.fleet
    if not fleet.flavors:
        return CheckResult("capacity", "skipped", "the fleet has no GPU flavors configured")

    def compute(sub: Mapping[str, bytes], slugs: list[str]) -> dict[str | None, Any]:
        quotas, problems = nominal_quotas(sub)
        out: dict[str | None, tuple[list[Any], list[Finding], list[Claim]]] = {
            part: ([], [], []) for part in [None, *slugs]
        }
        for quota in quotas:
            out[_part(quota.path, out)][0].append(quota)
        for finding in problems:
            out[_part(finding.path, out)][1].append(finding)
        for claim in reservation_claims(sub):
            out[_part(claim.path, out)][2].append(claim)
        return out

    # "reservations": the parts' shape grew the claims (a cache of the old shape is not read).
    values = tree.by_tenant("capacity", ("reservations",), compute)
    quotas = [q for _, (part, _, _) in _in_order(values) for q in part]
    problems = [f for _, (_, part, _) in _in_order(values) for f in part]
    findings = capacity_findings(quotas, problems, fleet, allow_overcommit=allow_overcommit)
    findings += reservation_findings(c for _, (_, _, part) in _in_order(values) for c in part)
    return _from_findings("capacity", findings, "guaranteed quota fits in every GPU pool")


def _controllers(tree: _Tree, base_parts: partition.TreeParts | None) -> CheckResult:
    fleet = tree.fleet

    def compute(sub: Mapping[str, bytes], slugs: list[str]) -> dict[str | None, Any]:
        items = items_of(sub)
        local = partition.split_findings(local_findings(items, fleet), slugs)
        grouped: dict[str | None, list[tuple[str, Any]]] = {part: [] for part in local}
        for path, obj in items:
            grouped[_part(path, local)].append((path, obj))
        return {part: (local[part], quota_cover_facts(grouped[part], fleet)) for part in local}

    values = tree.by_tenant("controllers", (), compute)
    findings = [f for _, (part, _) in _in_order(values) for f in part]
    findings += quota_cover_findings(facts for _, (_, facts) in _in_order(values))
    if base_parts is not None:
        # An update the API server refuses: only where the change differs from its base.
        changed = sorted(
            slug
            for slug in set(tree.parts.digests) | set(base_parts.digests)
            if tree.parts.digests.get(slug) != base_parts.digests.get(slug)
        )
        findings += immutable_spec_findings(
            items_of(tree.parts.subtree(changed)), items_of(base_parts.subtree(changed))
        )
    return _from_findings("controllers", findings, "Kueue, KServe and the namespace quotas agree")


def _duplicates(tree: _Tree, registry: SchemaRegistry) -> CheckResult:
    scopes = registry

    def compute(sub: Mapping[str, bytes], slugs: list[str]) -> dict[str | None, Any]:
        placed = placements(sub, registry=scopes, repo_urls=_repo_urls(sub, tree.fleet))
        out = split_placements(placed, partition.slug_of)
        return {part: out.get(part, {}) for part in [None, *slugs]}

    values = tree.by_tenant("duplicates", scopes.scopes_digest(), compute)
    findings = duplicate_findings(part for _, part in _in_order(values))
    return _from_findings("duplicates", findings, "no two documents define the same object")


def _part(path: str, parts: Mapping[str | None, Any]) -> str | None:
    slug = partition.slug_of(path)
    return slug if slug in parts else None


def _in_order(values: Mapping[str | None, Any]) -> list[tuple[str | None, Any]]:
    return [(None, values[None]), *((k, values[k]) for k in sorted(k for k in values if k))]


def _from_findings(name: CheckName, findings: list[Finding], ok: str) -> CheckResult:
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning"]
    details = [str(f) for f in (*errors, *warnings)]
    if errors:
        summary = f"{_plural(len(errors), 'problem')}" + (
            f", {_plural(len(warnings), 'warning')}" if warnings else ""
        )
        return CheckResult(name, "failed", summary, details)
    summary = ok + (f" ({_plural(len(warnings), 'warning')})" if warnings else "")
    return CheckResult(name, "passed", summary, details)


__all__ = ["CheckResult", "run_checks"]
