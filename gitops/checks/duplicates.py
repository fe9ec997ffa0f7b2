"""Objects of the whole repository that would be the same object in the cluster.

The API server keeps one object per identity: API group, kind, namespace (none for
cluster-scoped kinds) and name. Two files that define the same identity do not fail to
apply; the second apply overwrites the first, or two Flux Kustomizations take the object from
each other on every reconciliation. Names the platform builds from two inputs are where this
happens unnoticed: tenant ``llm`` with cluster ``platform-x`` and tenant ``llm-platform`` with
cluster ``x`` both render the HelmRelease ``flux-system/llm-platform-x``. ``kustomize build``
refuses a duplicate only inside one build, and only where kubectl is installed; this check
reads the YAML of every file, with no kubectl and no cluster.

An object's identity is what it would be once applied, not what its file says:

- ``namespace:`` in a kustomization.yaml sets the namespace of every object the build includes
  (kustomize's namespace transformer overrides one the object sets); the outermost
  kustomization applies last, so it wins. A Flux Kustomization's ``spec.targetNamespace`` is
  applied on top of the build it points at (its CRD: it "sets or overrides the namespace in the
  kustomization.yaml file"). ``namePrefix``/``nameSuffix``, in a kustomization.yaml or a Flux
  Kustomization, change names the same way, except for the kinds kustomize leaves alone
  (kustomize plugin/builtin/prefixtransformer ``prefixFieldSpecsToSkip``:
  CustomResourceDefinition, APIService, Namespace);
- cluster-scoped kinds have no namespace, whatever the file or kustomize says. The scope comes
  from the schema registry (the built-in kinds and the CRDs of the schema directory), then the
  CRDs the portal knows (``gitops.checks.isolation.KNOWN_CRD_SCOPES``), then the built-in
  cluster-scoped kinds below; a kind none of them knows is taken as namespaced;
- a namespaced object left without a namespace keeps none: Flux refuses to apply it ("namespace
  not specified", fluxcd/flux2#4301), so it is compared as written.

A file reached through two kustomizations (a base of two overlays) has an identity per way it
is applied; one document is never a duplicate of itself. A file that nothing includes is
compared as written: Flux does not apply it today, but it would clash the day something does.

A HelmRelease also makes objects of its own, named from its fields, and two HelmReleases can
make the same one (helm-controller v2, ``api/v2`` ``GetReleaseName``/``GetStorageNamespace``/
``GetHelmChartName`` and ``internal/release.ShortenName``, used by ``internal/action``):

- the Helm release ``spec.releaseName``, else ``[<targetNamespace>-]<name>``, shortened past 53
  characters to 40 and a hash, stored in ``spec.storageNamespace``, else the HelmRelease's
  namespace; two HelmReleases on one release would upgrade and uninstall each other's;
- the HelmChart ``<namespace>-<name>`` in the namespace of the chart's source
  (``spec.chart.spec.sourceRef.namespace``, else the HelmRelease's), which helm-controller
  creates for a ``spec.chart`` template.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitops.checks.findings import Finding, mapping
from gitops.checks.isolation import KNOWN_CRD_SCOPES
from gitops.checks.kustomize import FLUX_KUSTOMIZE_GROUP, flux_kustomizations
from gitops.checks.manifests import (
    ManifestObject,
    is_kustomization_path,
    is_remote_reference,
    is_yaml_path,
    iter_objects,
    kustomization_file,
    kustomization_refs,
    load_kustomization,
    resolve_reference,
)
from gitops.checks.schema import SchemaRegistry, Scope, get_registry

# Built-in cluster-scoped kinds (``kubectl api-resources --namespaced=false``) beyond those the
# schema registry has models for.
CLUSTER_SCOPED_BUILTINS = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("networking.k8s.io", "IngressClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "VolumeAttachment"),
    }
)
# (group, kind) whose names kustomize's namePrefix and nameSuffix leave alone.
UNPREFIXED_KINDS = frozenset(
    {
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("", "Namespace"),
    }
)
HELM_GROUP = "helm.toolkit.fluxcd.io"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
# What a Helm release is called in findings: it is no Kubernetes kind (Helm keeps it as
# Secrets), so it cannot be mistaken for one.
HELM_RELEASE_IDENTITY = "Helm release"
HELM_RELEASE_NAME_MAX = 53
HELM_SHORT_HASH = 12


@dataclass(frozen=True, order=True)
class Identity:
    """What the API server tells objects apart by (``namespace`` "" when cluster-scoped)."""

    group: str
    kind: str
    namespace: str
    name: str
    # Another cluster than the one Flux runs in: a Flux Kustomization's spec.kubeConfig (the
    # namespace/name of its Secret). Objects in two clusters never collide.
    cluster: str = ""

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        where = f" in the cluster of kubeconfig {self.cluster}" if self.cluster else ""
        return "/".join(part for part in (kind, self.namespace, self.name) if part) + where


@dataclass(frozen=True)
class _Layer:
    """What one kustomization (or Flux Kustomization) does to the objects it includes."""

    namespace: str
    prefix: str
    suffix: str
    cluster: str = ""


@dataclass(frozen=True)
class _Placement:
    """One document applied with one identity; ``via`` says how, for a derived object."""

    path: str
    index: int
    via: str = ""

    def __str__(self) -> str:
        where = f"{self.path} (document {self.index + 1})" if self.index else self.path
        return f"{where}, {self.via}" if self.via else where


def check_duplicates(
    files: Mapping[str, bytes],
    *,
    registry: SchemaRegistry | None = None,
    repo_urls: Iterable[str] | None = None,
) -> list[Finding]:
    """Every identity that more than one document of the tree would apply (see the module
    docstring). ``repo_urls`` limits the Flux Kustomizations whose ``targetNamespace`` counts
    to those reading this repository (None: every one with a GitRepository source)."""
    return duplicate_findings([placements(files, registry=registry, repo_urls=repo_urls)])


Placements = dict[Identity, set[_Placement]]


def placements(
    files: Mapping[str, bytes],
    *,
    registry: SchemaRegistry | None = None,
    repo_urls: Iterable[str] | None = None,
) -> Placements:
    """Which documents of the tree would apply each identity (the first half of
    ``check_duplicates``: a tenant's part can be kept and the rule run over all parts)."""
    registry = registry or get_registry(None)
    objects, _ = iter_objects(files)  # unreadable files are the schema check's findings
    parents, layers = _include_graph(files, objects, repo_urls)
    placed: Placements = defaultdict(set)
    chains: dict[str, list[tuple[str, ...]]] = {}
    for item in objects:
        if item.path not in chains:
            chains[item.path] = _chains(_file_node(item.path), parents)
        for identity in _identities(item, chains[item.path], layers, registry):
            placed[identity].add(_Placement(item.path, item.index))
            if (identity.group, identity.kind) == (HELM_GROUP, "HelmRelease"):
                for derived, via in _helm_release_objects(identity, item.obj):
                    placed[derived].add(_Placement(item.path, item.index, via))
    return dict(placed)


def split_placements(
    placed: Placements, part_of: Callable[[str], str | None]
) -> dict[str | None, Placements]:
    """The placements by the part (``part_of(path)``) each document is in."""
    out: dict[str | None, Placements] = defaultdict(lambda: defaultdict(set))
    for identity, where in placed.items():
        for placement in where:
            out[part_of(placement.path)][identity].add(placement)
    return {part: dict(value) for part, value in out.items()}


def duplicate_findings(parts: Iterable[Placements]) -> list[Finding]:
    """Every identity more than one document is placed on, over all ``parts``."""
    placed: dict[Identity, set[_Placement]] = {}
    for part in parts:
        for identity, where in part.items():
            before = placed.get(identity)
            placed[identity] = where if before is None else before | where
    # One placement is one document: most identities (about 190,000 at 10,000 tenants) are
    # told apart without a set of their documents.
    shared = {
        i: p for i, p in placed.items() if len(p) > 1 and len({(x.path, x.index) for x in p}) > 1
    }
    findings: list[Finding] = []
    reported: set[frozenset[tuple[str, int]]] = set()
    # Objects as written first: a derived duplicate of the same documents says nothing new.
    for identity in sorted(shared, key=lambda i: (all(p.via for p in shared[i]), i)):
        placements_of = sorted(shared[identity], key=lambda p: (p.path, p.index, p.via))
        documents = frozenset((p.path, p.index) for p in placements_of)
        if documents in reported:
            continue
        reported.add(documents)
        findings.append(
            Finding(
                placements_of[0].path,
                str(identity),
                "duplicate-object",
                f"defined {len(documents)} times: {'; '.join(str(p) for p in placements_of)}. "
                "The cluster holds one such object, so each apply overwrites the other; "
                "rename one of them.",
            )
        )
    return findings


# --- what includes what --------------------------------------------------------------------

_Graph = dict[str, list[str]]


def _file_node(path: str) -> str:
    return f"file:{path}"


def _dir_node(directory: str) -> str:
    return f"dir:{directory}"


def _include_graph(
    files: Mapping[str, bytes], objects: Iterable[ManifestObject], repo_urls: Iterable[str] | None
) -> tuple[_Graph, dict[str, _Layer]]:
    """Who includes each file and kustomization directory (``parents``), and what each
    including node does to names (``layers``)."""
    parents: _Graph = defaultdict(list)
    layers: dict[str, _Layer] = {}

    def include(child: str, parent: str) -> None:
        if parent not in parents[child]:
            parents[child].append(parent)

    for path in sorted(files):
        if not is_kustomization_path(path):
            continue
        directory = posixpath.dirname(path)
        if kustomization_file(files, directory) != path:
            continue  # kustomize reads one kustomization file per directory
        kustomization = load_kustomization(files, path)
        if kustomization is None:
            continue
        node = _dir_node(directory)
        refs = kustomization_refs(kustomization)
        layers[node] = _Layer(
            refs.namespace or "",
            _text(kustomization.get("namePrefix")),
            _text(kustomization.get("nameSuffix")),
        )
        for ref in refs.resources:
            target = None if is_remote_reference(ref) else resolve_reference(directory, ref)
            if target is None:
                continue  # the kustomize and isolation checks report it
            if target in files:
                include(_file_node(target), node)
            elif kustomization_file(files, target) is not None:
                include(_dir_node(target), node)

    specs = {
        (item.path, _namespaced_name(item.obj)): mapping(item.obj.get("spec"))
        for item in objects
        if item.obj.get("kind") == "Kustomization"
        and str(item.obj.get("apiVersion", "")).startswith(f"{FLUX_KUSTOMIZE_GROUP}/")
    }
    for flux in flux_kustomizations(files, repo_urls=repo_urls):
        spec = specs.get((flux.file, flux.kustomization), {})
        node = f"flux:{flux.file}:{flux.kustomization}"
        secret = _text(mapping(mapping(spec.get("kubeConfig")).get("secretRef")).get("name"))
        own_namespace = flux.kustomization.partition("/")[0] if "/" in flux.kustomization else ""
        layers[node] = _Layer(
            _text(spec.get("targetNamespace")),
            _text(spec.get("namePrefix")),
            _text(spec.get("nameSuffix")),
            f"{own_namespace}/{secret}" if secret else "",
        )
        if kustomization_file(files, flux.path) is not None:
            include(_dir_node(flux.path), node)
            continue
        for child in _generated_resources(files, flux.path):
            include(child, node)
    return parents, layers


def _generated_resources(files: Mapping[str, bytes], directory: str) -> list[str]:
    """What the kustomization Flux generates for a directory without one includes: every YAML
    file under it, and each outermost sub-directory with a kustomization as a whole."""
    prefix = f"{directory}/" if directory else ""
    kustomized = sorted(
        {
            posixpath.dirname(path)
            for path in files
            if path.startswith(prefix) and is_kustomization_path(path)
        },
        key=len,
    )
    children: list[str] = []
    for path in sorted(files):
        if not path.startswith(prefix) or not is_yaml_path(path):
            continue
        parent = posixpath.dirname(path)
        owner = next((d for d in kustomized if parent == d or parent.startswith(f"{d}/")), None)
        child = _dir_node(owner) if owner is not None else _file_node(path)
        if child not in children:
            children.append(child)
    return children


def _chains(node: str, parents: _Graph, seen: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every way up from ``node`` to something nothing includes, innermost first."""
    ups = [parent for parent in parents.get(node, []) if parent not in seen and parent != node]
    if not ups:
        return [()]
    return [(up, *chain) for up in ups for chain in _chains(up, parents, (*seen, node, up))]


# --- identities ----------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _namespaced_name(obj: Mapping[str, Any]) -> str:
    metadata = mapping(obj.get("metadata"))
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _scope(registry: SchemaRegistry, api_version: str, group: str, kind: str) -> Scope | None:
    scope = registry.scope(api_version, kind)
    if scope is None:
        scope = KNOWN_CRD_SCOPES.get((group, kind))
    if scope is None and (group, kind) in CLUSTER_SCOPED_BUILTINS:
        scope = "Cluster"
    return scope


def _identities(
    item: ManifestObject,
    chains: Iterable[tuple[str, ...]],
    layers: Mapping[str, _Layer],
    registry: SchemaRegistry,
) -> set[Identity]:
    """The object's identity for each way up (``chains``) the include graph applies it."""
    obj = item.obj
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    group = api_version.rpartition("/")[0]
    metadata = mapping(obj.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return set()  # generateName, or no name at all: the schema check reports the latter
    own_namespace = _text(metadata.get("namespace"))
    cluster_scoped = _scope(registry, api_version, group, kind) == "Cluster"
    renamed = (group, kind) not in UNPREFIXED_KINDS
    found: set[Identity] = set()
    for chain in chains:
        namespace, applied_name, cluster = own_namespace, name, ""
        for node in chain:
            layer = layers.get(node)
            if layer is None:
                continue
            namespace = layer.namespace or namespace
            cluster = layer.cluster or cluster
            if renamed:
                applied_name = f"{layer.prefix}{applied_name}{layer.suffix}"
        found.add(Identity(group, kind, "" if cluster_scoped else namespace, applied_name, cluster))
    return found


def helm_release_name(name: str) -> str:
    """A release name as helm-controller shortens it: past 53 characters, the first 40 and
    the first 12 hex digits of the name's SHA-256 (``internal/release.ShortenName``)."""
    if len(name) <= HELM_RELEASE_NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HELM_SHORT_HASH]
    return f"{name[: HELM_RELEASE_NAME_MAX - HELM_SHORT_HASH - 1]}-{digest}"


def _helm_release_objects(release: Identity, obj: Mapping[str, Any]) -> list[tuple[Identity, str]]:
    """The Helm release and the HelmChart a HelmRelease (as applied: ``release``) makes."""
    spec = mapping(obj.get("spec"))
    target = _text(spec.get("targetNamespace"))
    name = _text(spec.get("releaseName")) or (
        f"{target}-{release.name}" if target else release.name
    )
    storage = _text(spec.get("storageNamespace")) or release.namespace
    made = [
        (
            Identity("", HELM_RELEASE_IDENTITY, storage, helm_release_name(name)),
            f"the Helm release of HelmRelease {release.namespace}/{release.name}",
        )
    ]
    chart = mapping(spec.get("chart"))
    if chart:
        source = mapping(mapping(chart.get("spec")).get("sourceRef"))
        made.append(
            (
                Identity(
                    SOURCE_GROUP,
                    "HelmChart",
                    _text(source.get("namespace")) or release.namespace,
                    f"{release.namespace}-{release.name}",
                ),
                f"the HelmChart of HelmRelease {release.namespace}/{release.name}",
            )
        )
    return made


__all__ = ["Identity", "check_duplicates", "helm_release_name"]
