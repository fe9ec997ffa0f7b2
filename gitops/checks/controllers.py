"""Settings that are valid to the schemas but that the controllers would act on badly.

Each rule encodes a behaviour read in the controller's own source (cited next to the rule), so
a manifest that the API server accepts but that would never run as meant does not merge:

- ``tas-hami``: a ResourceFlavor of a HAMi pool may not name a Topology. Topology-aware
  scheduling fits pods against the nodes' ``status.allocatable`` (kueue v0.19.2
  pkg/cache/scheduler/tas_nodes_cache.go keeps Name, Labels, Taints and Allocatable of each
  node, pkg/scheduler/flavorassigner/tas_flavorassigner.go takes a pod's requests from its
  spec), and HAMi's ``nvidia.com/gpumem``/``gpucores`` are never allocatable (HAMi v2.10.0
  registers only its slot resource with the kubelet; the scheduler extender handles the rest,
  charts/hami/templates/_helpers.tpl ``ignoredByScheduler``), so no HAMi pod would ever fit.
- ``tas-dra``: nor may a ResourceFlavor of a DRA pool: TAS counts a pod's container requests
  and not its ResourceClaims ("No DRA + Topology Aware Scheduling (TAS)", kueue v0.19.2
  site/content/en/docs/concepts/dynamic_resource_allocation.md), so it would place DRA pods by
  CPU and memory alone, on nodes whose GPUs are taken.
- ``tas-topology``: a ResourceFlavor's ``topologyName`` names a Topology of the tree, and every
  level of a Topology is a label the fleet's GPU nodes carry. TAS leaves out every node that
  lacks one of the levels (kueue v0.19.2 pkg/util/tas/node.go ``NodeMatchesFlavor``), so an
  unknown level silently empties the flavor. What the nodes carry is assumed to be the fleet's
  ``topology_levels`` (the inventory keeps only levels every GPU node has) plus
  ``kubernetes.io/hostname``, which the kubelet sets on every node.
- ``fair-sharing``: with fair sharing on (the fleet's ``fair_sharing``), a ClusterQueue may not
  set ``preemption.borrowWithinCohort``: Kueue then runs only its fair-sharing preemption, which
  never reads it (kueue v0.19.2 pkg/scheduler/preemption/preemption.go ``getTargets``;
  site/content/en/docs/concepts/preemption.md "Fair Sharing"), so its priority threshold
  would look like a protection and be none.
- ``quota-covers-queue``: every ResourceQuota of a namespace a ClusterQueue admits for allows
  at least what the queue may admit of each GPU resource: nominal quota plus borrowing limit,
  or the flavor's whole pool where borrowing has no limit. Kueue admits against its own quota
  only; a pod the namespace quota then refuses is never created, and the workload holds quota
  it cannot use. The keys per resource are ``gitops.render.resources.quota_keys``; cpu and
  memory are left out (the namespace budget bounds them on purpose).
- ``rollout-surge``: an InferenceService that uses GPUs rolls out without a surge pod
  (``deploymentStrategy`` Recreate, or RollingUpdate with ``maxSurge`` 0). KServe's default is
  a 25% surge (kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/deployment/
  deployment_reconciler.go ``setDefaultDeploymentSpec``), and the surge pod's GPUs are not in
  a quota sized to the replicas, so the update stalls.
- ``immutable-spec``: a change may not alter the spec of a ResourceClaimTemplate that exists on
  its base (same namespace and name) unless the template carries
  ``kustomize.toolkit.fluxcd.io/force: enabled``. The API server refuses the update
  (kubernetes pkg/apis/resource/validation ``ValidateResourceClaimTemplateUpdate``:
  ``ValidateImmutableField`` on ``spec``), so Flux's dry-run apply fails and the Kustomization
  stays Ready False with "field is immutable" until someone deletes the object by hand.
  kustomize-controller deletes and recreates instead when that annotation is on the new or the
  live object (fluxcd/pkg ssa v0.76.1 manager_apply.go ``shouldForceApply``, the selector set
  in kustomize-controller v1.9.4 ``ForceSelector``). A renamed template is a new object and
  needs nothing. Only run when the base tree is given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from gitops.checks.findings import Finding, mapping, object_ref, sequence
from gitops.checks.manifests import iter_objects
from gitops.render.kueue import TOPOLOGY_MODES
from gitops.render.resources import flavor_capacity, quota_keys
from gitops.render.vcluster import pool_labels
from gitops.specs import FleetSpec

KUEUE = "kueue.x-k8s.io/"
KSERVE = "serving.kserve.io/"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The API server labels every Namespace with its own name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
GPU_RESOURCE_PREFIXES = ("nvidia.com/",)

Item = tuple[str, Mapping[str, Any]]


def check_controllers(
    source: Mapping[str, bytes] | Iterable[Mapping[str, Any]],
    fleet: FleetSpec,
    *,
    base: Mapping[str, bytes] | Iterable[Mapping[str, Any]] | None = None,
) -> list[Finding]:
    """Findings for every object the controllers would act on against its intent.

    ``source`` is a repository tree (``{path: bytes}``) or a list of objects (path left empty);
    ``base``, in the same form, is what the change starts from (what the cluster runs), for the
    rules about updates.
    """
    items = items_of(source)
    findings = local_findings(items, fleet)
    findings += quota_cover_findings([quota_cover_facts(items, fleet)])
    if base is not None:
        findings += immutable_spec_findings(items, items_of(base))
    return findings


def local_findings(items: list[Item], fleet: FleetSpec) -> list[Finding]:
    """The rules that look at one object at a time (with the fleet's Topology and
    ResourceFlavor objects, which only the platform's part of a tree may hold)."""
    return [*_topology(items, fleet), *_fair_sharing(items, fleet), *_rollouts(items)]


def items_of(source: Mapping[str, bytes] | Iterable[Mapping[str, Any]]) -> list[Item]:
    if isinstance(source, Mapping):
        objects, _ = iter_objects(source)
        return [(item.path, item.obj) for item in objects]
    return [("", obj) for obj in source]


def _of(items: list[Item], api_prefix: str, kind: str) -> list[Item]:
    return [
        (path, obj)
        for path, obj in items
        if str(obj.get("apiVersion", "")).startswith(api_prefix) and obj.get("kind") == kind
    ]


def _core(items: list[Item], kind: str) -> list[Item]:
    return [
        (path, obj)
        for path, obj in items
        if obj.get("apiVersion") == "v1" and obj.get("kind") == kind
    ]


def _quantity(value: Any) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError):
        return None


# --- topology-aware scheduling ------------------------------------------------------------------


def _topology(items: list[Item], fleet: FleetSpec) -> list[Finding]:
    findings: list[Finding] = []
    topologies = {
        str(mapping(obj.get("metadata")).get("name")) for _, obj in _of(items, KUEUE, "Topology")
    }
    untopological = [flavor for flavor in fleet.flavors if flavor.mode not in TOPOLOGY_MODES]
    for path, obj in _of(items, KUEUE, "ResourceFlavor"):
        spec = mapping(obj.get("spec"))
        topology = spec.get("topologyName")
        if not topology:
            continue
        name = mapping(obj.get("metadata")).get("name")
        labels = mapping(spec.get("nodeLabels"))
        for flavor in untopological:
            selects = all(labels.get(k) == v for k, v in pool_labels(flavor).items())
            if name != flavor.name and not selects:
                continue
            if flavor.mode == "hami":
                rule, why = (
                    "tas-hami",
                    f"flavor {flavor.name!r} is a HAMi pool: topology-aware scheduling fits "
                    "pods against node allocatable, where nvidia.com/gpumem and gpucores "
                    "never appear, so no HAMi pod would be admitted; remove topologyName",
                )
            else:
                rule, why = (
                    "tas-dra",
                    f"flavor {flavor.name!r} is a DRA pool: topology-aware scheduling counts "
                    "container requests, not ResourceClaims, so it would place DRA pods on "
                    "nodes whose GPUs are taken; remove topologyName",
                )
            findings.append(Finding(path, object_ref(obj), rule, why))
            break
        if str(topology) not in topologies:
            findings.append(
                Finding(
                    path,
                    object_ref(obj),
                    "tas-topology",
                    f"topologyName {topology!r} names no Topology in the repository; Kueue "
                    "keeps the flavor's queues inactive until it exists",
                )
            )
    carried = {*fleet.topology_levels, HOSTNAME_LABEL}
    for path, obj in _of(items, KUEUE, "Topology"):
        for level in sequence(mapping(obj.get("spec")).get("levels")):
            label = mapping(level).get("nodeLabel")
            if label not in carried:
                findings.append(
                    Finding(
                        path,
                        object_ref(obj),
                        "tas-topology",
                        f"level {label!r} is not a label the fleet's GPU nodes carry (the fleet "
                        f"has {', '.join(sorted(carried))}); topology-aware scheduling leaves "
                        "out every node without it",
                    )
                )
    return findings


# --- preemption -----------------------------------------------------------------------------


def _fair_sharing(items: list[Item], fleet: FleetSpec) -> list[Finding]:
    if not fleet.fair_sharing:
        return []
    findings: list[Finding] = []
    for path, obj in _of(items, KUEUE, "ClusterQueue"):
        preemption = mapping(mapping(obj.get("spec")).get("preemption"))
        borrow = preemption.get("borrowWithinCohort")
        if borrow is not None and mapping(borrow).get("policy", "Never") != "Never":
            findings.append(
                Finding(
                    path,
                    object_ref(obj),
                    "fair-sharing",
                    "preemption.borrowWithinCohort has no effect: the fleet runs Kueue with fair "
                    "sharing, whose preemption ignores it; remove it (reclaimWithinCohort and "
                    "the fair-sharing weight decide)",
                )
            )
    return findings


# --- ResourceQuota against ClusterQueue -----------------------------------------------------------


def _admissible(
    queue: Mapping[str, Any], fleet: FleetSpec
) -> tuple[dict[str, Decimal | None], dict[str, str]]:
    """What the queue may admit per quota key (None: without bound), and where it comes from."""
    amounts: dict[str, Decimal | None] = defaultdict(Decimal)
    origin: dict[str, str] = {}
    spec = mapping(queue.get("spec"))
    for group in sequence(spec.get("resourceGroups")):
        for entry in sequence(mapping(group).get("flavors")):
            flavor_name = str(mapping(entry).get("name"))
            flavor = fleet.flavor(flavor_name)
            for raw in sequence(mapping(entry).get("resources")):
                resource = mapping(raw)
                name = str(resource.get("name"))
                keys = quota_keys(name)
                nominal = _quantity(resource.get("nominalQuota"))
                if not keys or nominal is None:
                    continue
                amount: Decimal | None
                if "borrowingLimit" in resource:
                    limit = _quantity(resource.get("borrowingLimit"))
                    amount = None if limit is None else nominal + limit
                    how = "nominal + borrowingLimit"
                elif flavor is not None:
                    amount = max(nominal, Decimal(flavor_capacity(flavor, name)))
                    how = "borrowing without limit, up to the pool"
                else:
                    amount = None
                    how = "borrowing without limit"
                for key in keys:
                    current = amounts[key]
                    amounts[key] = None if current is None or amount is None else current + amount
                    origin.setdefault(key, how)
    return dict(amounts), origin


@dataclass(frozen=True)
class QueueFacts:
    """What a ClusterQueue may admit per quota key, and which namespaces it selects."""

    ref: str
    selector: Mapping[str, Any]
    admissible: dict[str, Decimal | None]
    origin: dict[str, str]


@dataclass
class QuotaCoverFacts:
    """The ClusterQueues, Namespaces and ResourceQuotas of (part of) a tree: a tenant's part
    may be kept and the rule run over all parts (``gitops.checks.partition``)."""

    queues: list[QueueFacts] = field(default_factory=list)
    # (name, labels with the name label the API server adds)
    namespaces: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # namespace -> (path, quota ref, spec.hard)
    quotas: dict[str, list[tuple[str, str, dict[str, Any]]]] = field(default_factory=dict)


def quota_cover_facts(items: list[Item], fleet: FleetSpec) -> QuotaCoverFacts:
    facts = QuotaCoverFacts()
    for _, obj in _core(items, "Namespace"):
        meta = mapping(obj.get("metadata"))
        labels = {**mapping(meta.get("labels")), NAMESPACE_NAME_LABEL: meta.get("name")}
        facts.namespaces.append((str(meta.get("name")), labels))
    for path, obj in _core(items, "ResourceQuota"):
        namespace = str(mapping(obj.get("metadata")).get("namespace"))
        hard = dict(mapping(mapping(obj.get("spec")).get("hard")))
        facts.quotas.setdefault(namespace, []).append((path, object_ref(obj), hard))
    for _, queue in _of(items, KUEUE, "ClusterQueue"):
        admissible, origin = _admissible(queue, fleet)
        if not admissible:
            continue
        selector = dict(mapping(mapping(queue.get("spec")).get("namespaceSelector")))
        facts.queues.append(QueueFacts(object_ref(queue), selector, admissible, origin))
    return facts


def _selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool | None:
    """Whether a ClusterQueue's namespaceSelector selects a Namespace with these labels
    (None: cannot tell)."""
    if selector.get("matchExpressions"):
        return None
    return all(labels.get(k) == v for k, v in mapping(selector.get("matchLabels")).items())


def quota_cover_findings(parts: Iterable[QuotaCoverFacts]) -> list[Finding]:
    """A namespace quota below what a ClusterQueue selecting the namespace may admit."""
    queues: list[QueueFacts] = []
    namespaces: list[tuple[str, dict[str, Any]]] = []
    quotas: dict[str, list[tuple[str, str, dict[str, Any]]]] = defaultdict(list)
    for part in parts:
        queues += part.queues
        namespaces += part.namespaces
        for namespace, listed in part.quotas.items():
            quotas[namespace] += listed
    # Namespaces by one label each selector asks for: a queue per tenant would otherwise
    # compare every queue with every namespace (10^8 pairs at 10,000 tenants).
    by_label: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for name, labels in namespaces:
        for key, value in labels.items():
            by_label[(str(key), repr(value))].append((name, labels))
    findings: list[Finding] = []
    for queue in queues:
        wanted = mapping(queue.selector.get("matchLabels"))
        if queue.selector.get("matchExpressions"):
            continue
        if wanted:
            key, value = next(iter(wanted.items()))
            candidates = by_label.get((str(key), repr(value)), [])
        else:
            candidates = namespaces
        for name, labels in candidates:
            if not _selects(queue.selector, labels):
                continue
            for path, quota_ref, hard in quotas.get(name, []):
                for key, needed in sorted(queue.admissible.items()):
                    if key not in hard:
                        continue  # a key a quota does not list is unlimited
                    allowed = _quantity(hard[key])
                    if allowed is not None and (needed is None or allowed < needed):
                        shown = "without bound" if needed is None else _fmt(needed)
                        findings.append(
                            Finding(
                                path,
                                quota_ref,
                                "quota-covers-queue",
                                f"{key} is {_fmt(allowed)} but {queue.ref} may admit "
                                f"{shown} ({queue.origin[key]}); pods of a borrowing workload "
                                "would be refused at creation",
                            )
                        )
    return findings


# --- KServe rollouts ------------------------------------------------------------------------


def _uses_gpus(predictor: Mapping[str, Any]) -> bool:
    if sequence(predictor.get("resourceClaims")):
        return True
    containers = [predictor.get("model"), *sequence(predictor.get("containers"))]
    for container in containers:
        resources = mapping(mapping(container).get("resources"))
        for part in ("limits", "requests"):
            if any(str(k).startswith(GPU_RESOURCE_PREFIXES) for k in mapping(resources.get(part))):
                return True
    return False


def _surges(strategy: Mapping[str, Any]) -> bool:
    if strategy.get("type") == "Recreate":
        return False
    surge = mapping(strategy.get("rollingUpdate")).get("maxSurge")
    return surge is None or str(surge).rstrip("%") != "0"


def _rollouts(items: list[Item]) -> list[Finding]:
    findings: list[Finding] = []
    for path, obj in _of(items, KSERVE, "InferenceService"):
        predictor = mapping(mapping(obj.get("spec")).get("predictor"))
        if _uses_gpus(predictor) and _surges(mapping(predictor.get("deploymentStrategy"))):
            findings.append(
                Finding(
                    path,
                    object_ref(obj),
                    "rollout-surge",
                    "the predictor uses GPUs but its rollout may add a surge pod (KServe's "
                    "default is maxSurge 25%), whose GPUs the quota does not hold; set "
                    "spec.predictor.deploymentStrategy to Recreate or RollingUpdate with "
                    "maxSurge 0",
                )
            )
    return findings


# --- immutable specs -----------------------------------------------------------------------

DRA = "resource.k8s.io/"
FORCE_ANNOTATION = "kustomize.toolkit.fluxcd.io/force"


def forced(obj: Mapping[str, Any]) -> bool:
    """Whether kustomize-controller recreates ``obj`` on an immutable change: the force
    policy as a label or an annotation, compared ignoring case (fluxcd/pkg ssa/utils
    ``AnyInMetadata``)."""
    meta = mapping(obj.get("metadata"))
    return any(
        str(mapping(meta.get(part)).get(FORCE_ANNOTATION, "")).lower() == "enabled"
        for part in ("labels", "annotations")
    )


def _identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = mapping(obj.get("metadata"))
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def immutable_spec_findings(items: list[Item], base: list[Item]) -> list[Finding]:
    before = {_identity(obj): obj for _, obj in _of(base, DRA, "ResourceClaimTemplate")}
    findings: list[Finding] = []
    for path, obj in _of(items, DRA, "ResourceClaimTemplate"):
        old = before.get(_identity(obj))
        if old is None or old.get("spec") == obj.get("spec") or forced(obj) or forced(old):
            continue
        findings.append(
            Finding(
                path,
                object_ref(obj),
                "immutable-spec",
                "this change alters the spec of an existing ResourceClaimTemplate, which the "
                "API server refuses (field is immutable), so Flux's apply would fail until the "
                f"object is deleted by hand; annotate it {FORCE_ANNOTATION}: enabled (Flux "
                "then recreates it) or give the changed template a new name",
            )
        )
    return findings


def _fmt(value: Decimal) -> str:
    return str(value.to_integral_value()) if value == value.to_integral_value() else str(value)
