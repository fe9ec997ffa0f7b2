"""Reading a repository tree (``{path: bytes}``) the way kubectl, kustomize and Flux read it.

Three things are shared by every check: a YAML loader with Kubernetes semantics, telling
Kubernetes objects from kustomize's own files (kustomization.yaml, patches, generator
inputs), and following the references of a kustomization, so a check knows which files a
build reads.
"""

from __future__ import annotations

import marshal
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gitops.checks.findings import sequence

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class KubeYamlLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader without the YAML 1.1 timestamp type.

    kubectl and Flux decode YAML through JSON, where an unquoted ``2026-01-01`` is a string;
    PyYAML would make it a ``datetime.date`` and a string field would fail to validate.
    """


KubeYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_STR, _MAP, _SEQ = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "seq"))
_PLAIN_SCALARS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null"))
# What a plain scalar resolves to depends only on its text: most are keys and values met
# thousands of times (apiVersion, metadata, name). Bounded; cleared when full.
_RESOLVED: dict[str, str] = {}
_RESOLVED_MAX = 100_000


class _Fallback(Exception):
    """A document the fast path leaves to PyYAML's constructor (merge keys, explicit tags,
    recursive aliases, unhashable keys): it builds it, or raises its own error."""


class FastKubeYamlLoader(KubeYamlLoader):
    """``KubeYamlLoader`` with the same results, built faster: plain scalars' tags resolved
    once per text, and documents of maps, lists and plain scalars built by direct recursion
    instead of PyYAML's generic constructor (its state machine was most of a check run's
    parsing). Anything else goes to the generic constructor, so the results and errors stay
    PyYAML's; tests compare the two on every fixture and sample."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(_RESOLVED) >= _RESOLVED_MAX:
                    _RESOLVED.clear()
                _RESOLVED[value] = tag
            return tag
        return super().resolve(kind, value, implicit)

    def construct_document(self, node: Any) -> Any:
        try:
            return self._build(node, set())
        except _Fallback:
            return super().construct_document(node)

    def _build(self, node: Any, active: set[int]) -> Any:
        kind, tag = node.__class__, node.tag
        if kind is yaml.ScalarNode:
            if tag == _STR:
                return node.value
            if tag in _PLAIN_SCALARS:
                return self.yaml_constructors[tag](self, node)
            raise _Fallback
        if id(node) in active or tag not in (_MAP, _SEQ):
            raise _Fallback
        active.add(id(node))
        if kind is yaml.MappingNode and tag == _MAP:
            out = {}
            for key_node, value_node in node.value:
                key = self._build(key_node, active)
                if key.__class__ in (dict, list):
                    raise _Fallback  # unhashable: PyYAML's error
                out[key] = self._build(value_node, active)
        elif kind is yaml.SequenceNode and tag == _SEQ:
            out = [self._build(item, active) for item in node.value]  # type: ignore[assignment]
        else:
            raise _Fallback
        active.discard(id(node))
        return out


KUSTOMIZATION_FILE_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Fields a check refuses to build: plugin configs can name any file of the machine running
# the build (e.g. a PatchTransformer's ``path``), and Flux does not inflate Helm charts.
UNSAFE_KUSTOMIZE_FIELDS = (
    "generators",
    "transformers",
    "validators",
    "helmCharts",
    "helmGlobals",
    "helmChartInflationGenerator",
)
KUSTOMIZE_CONFIG_GROUP = "kustomize.config.k8s.io"


# Parsed documents by file content, kept as ``marshal`` bytes. Every check reads the whole
# tree (isolation, duplicates, controllers, Flux's Kustomizations), so one check run parsed
# each file up to nine times, and a merge queue batch parses a tree that differs from the last
# one in a few files: at 1,000 tenants YAML construction was almost all of a check run's
# minutes. ``marshal`` gives each caller its own copy (callers may change what they get),
# made in C. Bounded, least recently used first out.
_PARSED: OrderedDict[bytes, bytes] = OrderedDict()
_PARSED_MAX = 200_000
_PARSED_LOCK = threading.Lock()


def load_documents(data: bytes | str) -> list[Any]:
    """Every YAML document in ``data`` (empty documents dropped). Raises ``yaml.YAMLError``."""
    key = data.encode() if isinstance(data, str) else data
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
    if hit is not None:
        docs: list[Any] = marshal.loads(hit)  # noqa: S302 (bytes this process made)
        return docs
    docs = [doc for doc in yaml.load_all(data, Loader=FastKubeYamlLoader) if doc is not None]
    try:
        frozen = marshal.dumps(docs)
    except ValueError:
        return docs  # a type marshal cannot keep (a YAML set, say): parsed each time
    with _PARSED_LOCK:
        _PARSED[key] = frozen
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return docs


def is_yaml_path(path: str) -> bool:
    return path.endswith((".yaml", ".yml"))


def is_kustomization_path(path: str) -> bool:
    return posixpath.basename(path) in KUSTOMIZATION_FILE_NAMES


def kustomization_file(files: Mapping[str, bytes], directory: str) -> str | None:
    """The kustomization file of ``directory`` ("" is the root), if it has one."""
    for name in KUSTOMIZATION_FILE_NAMES:
        path = posixpath.join(directory, name) if directory else name
        if path in files:
            return path
    return None


def normalise_dir(path: str) -> str:
    """``./tenants/a/`` -> ``tenants/a``; the repository root is ``""``."""
    cleaned = posixpath.normpath(path.strip() or ".")
    return "" if cleaned in (".", "/") else cleaned.lstrip("/")


def is_remote_reference(ref: str) -> bool:
    """A kustomize reference that would be fetched over the network (Flux forbids them)."""
    return (
        "://" in ref
        or ref.startswith(("git@", "github.com/", "gitlab.com/", "bitbucket.org/"))
        or "?ref=" in ref
        or ".git//" in ref
    )


def resolve_reference(directory: str, ref: str) -> str | None:
    """The repository path ``ref`` names from ``directory``; None when it is absolute or
    climbs out of the repository (a build must not read files of the machine running it)."""
    if not ref or ref.startswith("/") or "\\" in ref:
        return None
    joined = posixpath.normpath(posixpath.join(directory or ".", ref))
    if joined == ".." or joined.startswith("../"):
        return None
    return "" if joined == "." else joined


@dataclass(frozen=True)
class KustomizationRefs:
    """What a kustomization file names, split by whether the target is a Kubernetes object.

    ``resources`` are files or directories whose content is objects (resources, components,
    bases); ``inputs`` are files kustomize reads as something else (patches, generator
    inputs, transformer configs), which are partial objects or plain data.
    """

    resources: tuple[str, ...]
    inputs: tuple[str, ...]
    namespace: str | None


def kustomization_refs(kustomization: Mapping[str, Any]) -> KustomizationRefs:
    resources: list[str] = []
    inputs: list[str] = []

    def strings(value: Any) -> list[str]:
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    for key in ("resources", "bases", "components"):
        resources += strings(kustomization.get(key))
    for key in ("crds", "configurations"):
        inputs += [v for v in strings(kustomization.get(key)) if "\n" not in v]
    for key in ("patches", "patchesJson6902", "replacements"):
        for entry in sequence(kustomization.get(key)):
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                inputs.append(entry["path"])
    # Strategic-merge patches are either paths or inline YAML documents.
    inputs += [v for v in strings(kustomization.get("patchesStrategicMerge")) if "\n" not in v]
    for key in ("configMapGenerator", "secretGenerator"):
        for entry in sequence(kustomization.get(key)):
            if not isinstance(entry, dict):
                continue
            # ``files`` entries may be ``key=path``.
            inputs += [v.split("=", 1)[-1] for v in strings(entry.get("files"))]
            inputs += strings(entry.get("envs"))
            if isinstance(entry.get("env"), str):
                inputs.append(entry["env"])
    openapi = kustomization.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        inputs.append(openapi["path"])
    namespace = kustomization.get("namespace")
    return KustomizationRefs(
        resources=tuple(resources),
        inputs=tuple(inputs),
        namespace=namespace if isinstance(namespace, str) else None,
    )


def load_kustomization(files: Mapping[str, bytes], path: str) -> Mapping[str, Any] | None:
    try:
        docs = load_documents(files[path])
    except (yaml.YAMLError, KeyError):
        return None
    return docs[0] if len(docs) == 1 and isinstance(docs[0], dict) else None


@dataclass(frozen=True)
class BuildInputs:
    """The files one kustomize build reads, and the references it cannot follow safely."""

    files: frozenset[str]
    problems: tuple[str, ...]


def build_inputs(files: Mapping[str, bytes], directory: str) -> BuildInputs:
    """Follow kustomization references from ``directory`` through the tree.

    A directory without a kustomization file is read as Flux reads it: every YAML file under
    it, and each sub-directory that has its own kustomization as a whole.
    """
    seen_dirs: set[str] = set()
    read: set[str] = set()
    problems: list[str] = []

    def visit_dir(directory: str) -> None:
        if directory in seen_dirs:
            return
        seen_dirs.add(directory)
        kfile = kustomization_file(files, directory)
        if kfile is None:
            prefix = f"{directory}/" if directory else ""
            for path in files:
                if path.startswith(prefix) and is_yaml_path(path):
                    read.add(path)
            return
        read.add(kfile)
        kustomization = load_kustomization(files, kfile)
        if kustomization is None:
            return
        problems.extend(
            f"{kfile}: {key!r} is not supported (kustomize plugins and Helm charts can read "
            "files outside the repository)"
            for key in UNSAFE_KUSTOMIZE_FIELDS
            if key in kustomization
        )
        refs = kustomization_refs(kustomization)
        for ref in (*refs.resources, *refs.inputs):
            if is_remote_reference(ref):
                problems.append(f"{kfile}: remote reference {ref!r} is not allowed")
                continue
            target = resolve_reference(directory, ref)
            if target is None:
                problems.append(f"{kfile}: reference {ref!r} points outside the repository")
                continue
            if target in files:
                read.add(target)
            elif ref in refs.resources or any(p.startswith(f"{target}/") for p in files):
                visit_dir(target)

    visit_dir(normalise_dir(directory))
    return BuildInputs(files=frozenset(read), problems=tuple(problems))


# What one kustomization file reads as patches or data, by its path and content: every check
# of a merge queue batch asks for the whole tree's (10,000 kustomizations at 10,000 tenants,
# all but a few the same as in the batch before), and loading each again cost 0.05 s a call.
_INPUTS_OF: OrderedDict[tuple[str, bytes], tuple[str, ...]] = OrderedDict()
_INPUTS_MAX = 100_000


def _kustomization_inputs(path: str, data: bytes) -> tuple[str, ...]:
    key = (path, data)
    with _PARSED_LOCK:
        hit = _INPUTS_OF.get(key)
    if hit is not None:
        return hit
    kustomization = load_kustomization({path: data}, path)
    targets: tuple[str, ...] = ()
    if kustomization is not None:
        directory = posixpath.dirname(path)
        resolved = (
            resolve_reference(directory, ref) for ref in kustomization_refs(kustomization).inputs
        )
        targets = tuple(t for t in resolved if t is not None)
    with _PARSED_LOCK:
        _INPUTS_OF[key] = targets
        while len(_INPUTS_OF) > _INPUTS_MAX:
            _INPUTS_OF.popitem(last=False)
    return targets


def non_object_files(files: Mapping[str, bytes]) -> set[str]:
    """Files that kustomizations read as patches or data rather than as objects."""
    skipped: set[str] = set()
    for path, data in files.items():
        # endswith first (in C): a tenth of the time of a basename for every file of the tree.
        if not path.endswith(KUSTOMIZATION_FILE_NAMES) or not is_kustomization_path(path):
            continue
        skipped.update(_kustomization_inputs(path, data))
    return skipped


@dataclass(frozen=True)
class ManifestObject:
    """One Kubernetes object found in the tree: the file it is in and its position there."""

    path: str
    index: int
    obj: dict[str, Any]


@dataclass(frozen=True)
class ParseProblem:
    path: str
    message: str


def is_kustomize_config(obj: Mapping[str, Any]) -> bool:
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.startswith(f"{KUSTOMIZE_CONFIG_GROUP}/")


def iter_objects(
    files: Mapping[str, bytes], paths: Iterable[str] | None = None
) -> tuple[list[ManifestObject], list[ParseProblem]]:
    """The Kubernetes objects in the YAML files of ``paths`` (default: the whole tree).

    Kustomization files and the files they read as patches or generator inputs are not
    objects and are left out; a document that is neither is a problem, not silently skipped.
    """
    skipped = non_object_files(files)
    objects: list[ManifestObject] = []
    problems: list[ParseProblem] = []
    for path in sorted(files if paths is None else paths):
        if path not in files or not is_yaml_path(path) or is_kustomization_path(path):
            continue
        if path in skipped:
            continue
        try:
            docs = load_documents(files[path])
        except yaml.YAMLError as exc:
            problems.append(ParseProblem(path, f"not valid YAML: {exc}"))
            continue
        for index, doc in enumerate(docs):
            if (
                not isinstance(doc, dict)
                or not isinstance(doc.get("apiVersion"), str)
                or not isinstance(doc.get("kind"), str)
            ):
                problems.append(ParseProblem(path, f"document {index} is not a Kubernetes object"))
                continue
            if is_kustomize_config(doc):
                continue
            objects.append(ManifestObject(path, index, doc))
    return objects, problems
