"""Strict schema validation of Kubernetes objects before they reach Git.

The API server does not reject an unknown field in a custom resource: it prunes it and the
object is applied without it, so a typo in a manifest is silently lost. This module therefore
validates *more strictly* than the server: every object schema that lists its fields rejects
any other field. Sources:

- custom resources: the ``openAPIV3Schema`` of every served version of the upstream CRDs in a
  schema directory (``SchemaRegistry.from_dir``) or fetched from a cluster
  (``SchemaRegistry.from_crds``);
- built-in kinds (Namespace, RBAC, quota, NetworkPolicy, DRA, ...): the upstream Kubernetes
  OpenAPI document of the fleet's Kubernetes minor version, as strict JSON Schema, from the
  pinned ``kubernetes-validate`` package (``core_schemas``): always there, offline, whatever
  else is configured;
- Helm values: a chart's ``values.schema.json`` (those ``gitops.upstream`` pins: the vCluster
  and cert-manager charts') checks ``spec.values`` of a Flux HelmRelease of that chart. The
  chart is ``spec.chart.spec.chart``, or for a release whose chart comes from an OCIRepository
  (``spec.chartRef``) the OCIRepository's name, which the portal gives after the chart
  (``gitops.render.stack``): the release alone does not say which chart the repository holds.

What is checked: types, enums, patterns, required fields, ``additionalProperties: false`` on
every object that lists ``properties`` (unless the CRD says ``x-kubernetes-preserve-unknown-
fields``), int-or-string fields, Quantity syntax, uniqueness of ``x-kubernetes-list-type``
``set``/``map`` lists, ``ObjectMeta`` fields and the Kubernetes rules for names, label keys and
values and annotation keys. What is not: CEL rules (``x-kubernetes-validations``) need a CEL
interpreter and are skipped, as are ``format`` annotations (``int32``, ``date-time``, ...) and
admission webhooks. A field set to ``null`` is dropped before validation, as the API server
does for fields that are not ``nullable``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from gitops.checks import names, network_attachment
from gitops.checks.findings import Severity, mapping
from gitops.checks.manifests import load_documents

Scope = Literal["Namespaced", "Cluster"]

# The Kubernetes minor version whose built-in schemas are used when none is given: the fleet
# spec's default (``FleetSpec.kubernetes_version``), the version the simulator serves.
DEFAULT_KUBERNETES_VERSION = "1.34"

# Built-in kinds are namespaced unless listed here (by API group and kind): the OpenAPI
# document does not say, discovery does (``kubectl api-resources --namespaced=false``).
CLUSTER_SCOPED: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("storage.k8s.io", "VolumeAttributesClass"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "IPAddress"),
        ("networking.k8s.io", "ServiceCIDR"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("certificates.k8s.io", "ClusterTrustBundle"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
        ("resource.k8s.io", "DeviceTaintRule"),
        ("storagemigration.k8s.io", "StorageVersionMigration"),
        ("internal.apiserver.k8s.io", "StorageVersion"),
        ("authentication.k8s.io", "TokenReview"),
        ("authentication.k8s.io", "SelfSubjectReview"),
        ("authorization.k8s.io", "SubjectAccessReview"),
        ("authorization.k8s.io", "SelfSubjectAccessReview"),
        ("authorization.k8s.io", "SelfSubjectRulesReview"),
    }
)
# Kinds of the OpenAPI document that are no objects one writes to a repository.
_NOT_OBJECTS = frozenset({"DeleteOptions", "WatchEvent", "Status", "Scale", "Eviction"})

# Definitions every schema shares, by their OpenAPI names.
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"

# k8s.io/apimachinery/pkg/api/resource: the documented Quantity syntax.
QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)\Z"
_QUANTITY_SCHEMA: dict[str, Any] = {"type": ["string", "number"], "pattern": QUANTITY_PATTERN}

# Set by the API server; in Git they either do nothing or make every apply conflict.
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)
ANNOTATIONS_MAX_BYTES = 256 * 1024

# Name rules per built-in kind (k8s.io/kubernetes pkg/apis/*/validation); everything else,
# custom resources included, must be a DNS-1123 subdomain.
_NAME_RULES = {
    "Namespace": names.dns1123_label_problem,
    "Service": names.dns1035_label_problem,
    "Role": names.path_segment_problem,
    "RoleBinding": names.path_segment_problem,
    "ClusterRole": names.path_segment_problem,
    "ClusterRoleBinding": names.path_segment_problem,
}

_DEF_PREFIX = "#/$defs/"


@dataclass(frozen=True)
class SchemaError:
    """One problem with one object. ``path`` is a field path such as
    ``spec.resourceGroups[0].flavors[0]`` ("" for the object itself)."""

    kind: str
    name: str
    path: str
    message: str
    severity: Severity = "error"
    # No schema anywhere for the object's kind: it was not validated at all (a warning, so
    # the check reports it as skipped, never as passed).
    unvalidated: bool = False

    def __str__(self) -> str:
        where = f"{self.kind}/{self.name}" + (f" {self.path}" if self.path else "")
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{where}: {self.message}"


# --- schemas of built-in kinds, from kubernetes-validate ----------------------------------------


@dataclass(frozen=True)
class CoreSchemas:
    """The built-in kinds of one Kubernetes minor version and the definitions they share.

    From the ``kubernetes-validate`` package, which ships the upstream OpenAPI document of
    each Kubernetes release as strict JSON Schema (``additionalProperties: false`` on every
    object): ``kubernetes-json-schema/v<minor>.0-local-strict/_definitions.json``. Kinds are
    the definitions that carry ``x-kubernetes-group-version-kind``. Two definitions are
    replaced: Quantity (a string must then be a quantity) and IntOrString (one type list, so
    a mistake is reported once, not once per ``oneOf`` branch).
    """

    version: str  # "1.34"
    package: str  # "kubernetes-validate 1.37.0"
    defs: dict[str, Any]
    # (apiVersion, kind) -> (definition name, scope)
    kinds: dict[tuple[str, str], tuple[str, Scope]]

    def label(self) -> str:
        return f"built-in kinds of Kubernetes {self.version} from {self.package}"


class UnsupportedKubernetesVersion(ValueError):
    """The installed kubernetes-validate has no schemas for that Kubernetes version."""


def _schema_root() -> Any:
    return importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"


def supported_kubernetes_versions() -> list[str]:
    """The minor versions the installed kubernetes-validate has schemas for, oldest first."""
    found = {
        match.group(1)
        for entry in _schema_root().iterdir()
        if (match := re.fullmatch(r"v(\d+\.\d+)\.\d+-local-strict", entry.name))
    }
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


_core_cache: dict[str, CoreSchemas] = {}
_core_lock = threading.Lock()


def core_schemas(version: str = DEFAULT_KUBERNETES_VERSION) -> CoreSchemas:
    """The built-in schemas of Kubernetes ``version`` ("1.34"), read once per process."""
    with _core_lock:
        cached = _core_cache.get(version)
        if cached is None:
            cached = _core_cache[version] = _load_core(version)
        return cached


def _load_core(version: str) -> CoreSchemas:
    if not re.fullmatch(r"\d+\.\d+", version):
        raise UnsupportedKubernetesVersion(f"{version!r} is not a Kubernetes minor version")
    folder = _schema_root() / f"v{version}.0-local-strict"
    if not folder.is_dir():
        known = ", ".join(supported_kubernetes_versions())
        raise UnsupportedKubernetesVersion(
            f"kubernetes-validate has no schemas for Kubernetes {version} (it has {known})"
        )
    document = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))
    defs: dict[str, Any] = {name: _lean(node) for name, node in document["$defs"].items()}
    defs[_QUANTITY] = dict(_QUANTITY_SCHEMA)
    defs[_INT_OR_STRING] = {"type": ["integer", "string"]}
    kinds: dict[tuple[str, str], tuple[str, Scope]] = {}
    for name, node in document["$defs"].items():
        gvks = node.get("x-kubernetes-group-version-kind") or []
        if len(gvks) != 1:
            continue  # DeleteOptions, WatchEvent: one definition for every group
        group, api, kind = gvks[0]["group"], gvks[0]["version"], gvks[0]["kind"]
        if kind.endswith("List") or kind in _NOT_OBJECTS:
            continue
        scope: Scope = "Cluster" if (group, kind) in CLUSTER_SCOPED else "Namespaced"
        kinds[(f"{group}/{api}" if group else api, kind)] = (name, scope)
    package = f"kubernetes-validate {importlib.metadata.version('kubernetes-validate')}"
    return CoreSchemas(version, package, defs, kinds)


def _lean(node: Any) -> Any:
    """A schema node without its prose (half the document's size), otherwise as it is."""
    if isinstance(node, list):
        return [_lean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _PROSE:
            continue
        if key in ("properties", "patternProperties", "$defs"):
            # Field names, not keywords: a field may be called "description" or "format".
            out[key] = {name: _lean(child) for name, child in value.items()}
        elif key in ("enum", "required", "default"):
            out[key] = value
        else:
            out[key] = _lean(value)
    return out


_PROSE = frozenset({"description", "format", "x-kubernetes-group-version-kind"})


# --- CRD openAPIV3Schema -> strict JSON Schema ------------------------------------------------

# Annotations with no effect on validation here (CEL rules, formats: see the module docstring).
_DROPPED_KEYS = frozenset(
    {
        "description",
        "example",
        "externalDocs",
        "default",
        "format",
        "nullable",
        "title",
        "x-kubernetes-validations",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-map-type",
    }
)
_META_REF = {"$ref": _DEF_PREFIX + _OBJECT_META}


# Go RE2 syntax seen in upstream CRDs that Python's ``re`` spells differently.
_GO_FLAGS_AFTER_ANCHOR = re.compile(r"^\^\(\?([a-z]+)\)")
_GO_NOT_CONTROL = r"[^\x00-\x1f\x7f-\x9f]"  # \PC: not a control character (approximately)


def _python_pattern(pattern: str) -> str | None:
    """The pattern in Python syntax, or None when it cannot be translated (then skipped).

    Besides syntax, ``$`` differs: in Go it matches only at the very end, in Python also
    before a final newline, so ``"name\\n"`` would pass ``^[a-z]+$``. It becomes ``\\Z``.
    """
    candidate = _GO_FLAGS_AFTER_ANCHOR.sub(r"(?\1)^", pattern).replace("\\PC", _GO_NOT_CONTROL)
    if "(?m" not in candidate:
        candidate = _end_anchors(candidate)
    try:
        re.compile(candidate)
    except re.error:
        return None
    return candidate


def _end_anchors(pattern: str) -> str:
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


def _strict_node(
    node: Mapping[str, Any], *, strict: bool, notes: list[str], where: str
) -> dict[str, Any]:
    """Convert one openAPIV3Schema node (and its children).

    ``strict`` is False inside ``allOf``/``anyOf``/``oneOf``/``not``: in a structural schema
    those only add value checks to fields declared outside them, so closing an object there
    would reject fields the enclosing schema declares.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {
                name: _strict_node(child, strict=strict, notes=notes, where=f"{where}.{name}")
                for name, child in value.items()
            }
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _strict_node(value, strict=strict, notes=notes, where=f"{where}.*")
        elif key == "items" and isinstance(value, dict):
            out[key] = _strict_node(value, strict=strict, notes=notes, where=f"{where}[]")
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_strict_node(v, strict=False, notes=notes, where=where) for v in value]
        elif key == "not":
            out[key] = _strict_node(value, strict=False, notes=notes, where=where)
        elif key == "pattern":
            pattern = _python_pattern(value)
            if pattern is None:
                notes.append(f"{where}: pattern {value!r} skipped (not a Python regex)")
                continue
            out[key] = pattern
        else:
            out[key] = value

    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
        # controller-gen also writes anyOf [integer, string]; the type says it already, and
        # twice would report every mistake twice.
        if all(set(b) == {"type"} for b in out.get("anyOf", [{}])):
            out.pop("anyOf", None)
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]

    if node.get("x-kubernetes-embedded-resource") and "properties" in out:
        # An embedded object is a whole Kubernetes object even where the CRD lists less.
        props = out["properties"]
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    is_object = out.get("type") == "object" or "properties" in out
    if (
        strict
        and is_object
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        # The API server would prune any field not listed: reject it instead.
        out["additionalProperties"] = False
    return out


def crd_root_schema(
    open_api: Mapping[str, Any], core_defs: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    root = _strict_node(open_api, strict=True, notes=notes, where="")
    root.setdefault("type", "object")
    props = root.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    # CRDs declare metadata as a bare object; the server validates it as ObjectMeta. A CRD may
    # only add limits on name/generateName, kept beside ObjectMeta (not closed: see strict).
    declared = (open_api.get("properties") or {}).get("metadata") or {}
    if set(declared) - {"type", "description"}:
        limits = _strict_node(declared, strict=False, notes=notes, where=".metadata")
        props["metadata"] = {"allOf": [_META_REF, limits]}
    else:
        props["metadata"] = _META_REF
    root["required"] = sorted({*root.get("required", []), "apiVersion", "kind", "metadata"})
    root["additionalProperties"] = False
    root["$defs"] = core_defs
    return root


def _list_type_keyword(
    validator: Any, list_type: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``x-kubernetes-list-type``: the API server rejects duplicates in sets and list-maps."""
    if not validator.is_type(instance, "array") or list_type not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: set[str] = set()
    for index, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue
            identity = json.dumps([item.get(k) for k in keys], sort_keys=True, default=str)
            described = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
        else:
            identity = json.dumps(item, sort_keys=True, default=str)
            described = repr(item)
        if identity in seen:
            yield ValidationError(f"duplicate entry ({described})", path=[index])
        seen.add(identity)


KubeValidator = jsonschema.validators.extend(
    Draft202012Validator, {"x-kubernetes-list-type": _list_type_keyword}
)


# --- the registry -------------------------------------------------------------------------------


@dataclass
class _KindVersion:
    scope: Scope
    served: bool
    deprecated: bool = False
    warning: str = ""
    storage_version: str = ""
    open_api: Mapping[str, Any] | None = None
    definition: str = ""  # the OpenAPI definition of a built-in kind
    validator: Any = None


@dataclass
class SchemaRegistry:
    """Every schema the checks know, keyed by (apiVersion, kind).

    Validators are built on first use and kept: converting the largest CRD schemas
    (KServe, Kyverno) costs more than validating a whole tree.
    """

    _kinds: dict[tuple[str, str], _KindVersion] = field(default_factory=dict)
    _helm_values: dict[str, Any] = field(default_factory=dict)
    # The Kubernetes minor version of the built-in kinds (kubernetes-validate's schemas).
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    core: CoreSchemas = field(init=False, repr=False)
    notes: list[str] = field(default_factory=list)
    # CRD files or documents that could not be used, with why (malformed ones are skipped).
    skipped: list[str] = field(default_factory=list)
    # What to do about a kind with no schema, for its warning.
    missing_hint: str = "add its CRD to the schema directory"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        # All built-in definitions are made up front (a few milliseconds), so the shared
        # $defs table never changes while another thread validates against it.
        self.core = core_schemas(self.kubernetes_version)
        for key, (definition, scope) in self.core.kinds.items():
            self._kinds[key] = _KindVersion(scope=scope, served=True, definition=definition)
        # Multus's kind, which no upstream CRD directory holds: a cluster's own CRD replaces it.
        self.add_crd(network_attachment.CRD)

    # Construction ---------------------------------------------------------------------------

    @classmethod
    def from_dir(
        cls, path: str | Path, *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    ) -> SchemaRegistry:
        """Every CRD (``*.yaml``/``*.yml``, recursively) and Helm values schema under ``path``.

        A ``values.schema.json`` is registered for the chart named by its directory
        (``vcluster/values.schema.json`` -> chart ``vcluster``).
        """
        root = Path(path)
        if not root.is_dir():
            raise FileNotFoundError(f"schema directory {root} does not exist")
        registry = cls(kubernetes_version=kubernetes_version)
        for file in sorted(root.rglob("*")):
            if file.suffix not in (".yaml", ".yml") or file.name.startswith("."):
                continue
            # A malformed file or CRD is reported (in ``skipped``) and left out; the rest count.
            try:
                docs = load_documents(file.read_bytes())
            except (OSError, ValueError, yaml.YAMLError) as exc:
                registry.skipped.append(f"{file.relative_to(root)}: not read: {exc}")
                continue
            for doc in docs:
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    try:
                        registry.add_crd(doc)
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        registry.skipped.append(f"{file.relative_to(root)}: skipped: {exc}")
        for chart, schema in helm_values_schemas(root).items():
            registry.add_helm_values_schema(chart, schema)
        return registry

    @classmethod
    def from_crds(
        cls,
        crds: Iterable[Mapping[str, Any]],
        *,
        helm_values_schemas: Mapping[str, Mapping[str, Any]] | None = None,
        missing_hint: str = "the cluster serves no CRD for it",
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    ) -> SchemaRegistry:
        """From CustomResourceDefinition objects, e.g. the items of the list the API server
        returns for ``apiextensions.k8s.io/v1`` ``customresourcedefinitions``."""
        registry = cls(missing_hint=missing_hint, kubernetes_version=kubernetes_version)
        for crd in crds:
            registry.add_crd(crd)
        for chart, schema in (helm_values_schemas or {}).items():
            registry.add_helm_values_schema(chart, schema)
        return registry

    def add_crd(self, crd: Mapping[str, Any]) -> None:
        spec = crd.get("spec") or {}
        group = spec.get("group")
        kind = (spec.get("names") or {}).get("kind")
        if not group or not kind:
            raise ValueError(f"not a CustomResourceDefinition: {crd.get('metadata')}")
        scope: Scope = "Cluster" if spec.get("scope") == "Cluster" else "Namespaced"
        versions = spec.get("versions") or []
        storage = next((v["name"] for v in versions if v.get("storage")), "")
        for version in versions:
            open_api = (version.get("schema") or {}).get("openAPIV3Schema")
            self._kinds[(f"{group}/{version['name']}", kind)] = _KindVersion(
                scope=scope,
                served=bool(version.get("served")),
                deprecated=bool(version.get("deprecated")),
                warning=version.get("deprecationWarning") or "",
                storage_version=f"{group}/{storage}" if storage else "",
                open_api=open_api,
            )

    def add_helm_values_schema(self, chart: str, schema: Mapping[str, Any]) -> None:
        self._helm_values[chart] = Draft202012Validator(schema)

    # Queries -----------------------------------------------------------------------------------

    def is_builtin(self, api_version: str, kind: str) -> bool:
        """A kind of Kubernetes itself (not of a CRD)."""
        entry = self._kinds.get((api_version, kind))
        return entry is not None and bool(entry.definition)

    def knows(self, api_version: str, kind: str) -> bool:
        entry = self._kinds.get((api_version, kind))
        return entry is not None and entry.served

    def scope(self, api_version: str, kind: str) -> Scope | None:
        entry = self._kinds.get((api_version, kind))
        if entry is None:
            # The scope is the same in every version of a kind.
            group = api_version.rpartition("/")[0]
            entry = next(
                (
                    e
                    for (av, k), e in self._kinds.items()
                    if k == kind and av.rpartition("/")[0] == group
                ),
                None,
            )
        return entry.scope if entry is not None else None

    def kinds(self) -> set[tuple[str, str]]:
        return {key for key, entry in self._kinds.items() if entry.served}

    def scopes_digest(self) -> str:
        """A digest of every kind's scope: what the isolation and duplicates rules read from
        the registry (``gitops.checks.partition`` keeps their values under it)."""
        table = sorted(f"{av}\0{k}\0{e.scope}\0{e.served}" for (av, k), e in self._kinds.items())
        return hashlib.blake2b("\n".join(table).encode(), digest_size=16).hexdigest()

    def helm_charts(self) -> set[str]:
        return set(self._helm_values)

    def _validator(self, key: tuple[str, str]) -> Any:
        entry = self._kinds[key]
        if entry.validator is None:
            with self._lock:
                if entry.validator is None:
                    if entry.definition:
                        root = self.core.defs[entry.definition]
                        schema = {
                            "$defs": self.core.defs,
                            **root,
                            "required": sorted(
                                {*root.get("required", []), "apiVersion", "kind", "metadata"}
                            ),
                        }
                    else:
                        schema = crd_root_schema(
                            entry.open_api or {"type": "object"}, self.core.defs, self.notes
                        )
                    entry.validator = KubeValidator(schema)
        return entry.validator

    # Validation --------------------------------------------------------------------------------

    def validate(self, obj: Any) -> list[SchemaError]:
        if not isinstance(obj, dict):
            return [SchemaError("?", "?", "", "not a Kubernetes object (not a mapping)")]
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        metadata = obj.get("metadata")
        name = str(metadata.get("name") or "?") if isinstance(metadata, dict) else "?"
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return [SchemaError(str(kind or "?"), name, "", "apiVersion and kind are required")]

        def error(path: str, message: str, severity: Severity = "error") -> SchemaError:
            return SchemaError(kind, name, path, message, severity)

        entry = self._kinds.get((api_version, kind))
        if entry is None:
            others = sorted(av for (av, k) in self.kinds() if k == kind)
            if others:
                # The kind is known, the version is not: a mistake, not a gap in the schemas.
                return [
                    error(
                        "apiVersion",
                        f"no schema for {api_version} {kind} "
                        f"(known versions: {', '.join(others)}); {self.missing_hint}",
                    )
                ]
            return [
                SchemaError(
                    kind,
                    name,
                    "apiVersion",
                    f"no schema for {api_version} {kind}, not validated; {self.missing_hint}",
                    "warning",
                    unvalidated=True,
                )
            ]
        if not entry.served:
            return [
                error(
                    "apiVersion",
                    f"{api_version} {kind} is not served by the API; "
                    f"use {entry.storage_version or 'a served version'}",
                )
            ]
        errors: list[SchemaError] = []
        if entry.definition and "alpha" in api_version.rpartition("/")[2]:
            # In the OpenAPI document, but off unless the cluster enables its feature gate.
            message = (
                f"{api_version} {kind} is an alpha API of Kubernetes "
                f"{self.kubernetes_version}: served only where its feature gate is on"
            )
            errors.append(error("apiVersion", message, "warning"))
        if entry.deprecated:
            # Still accepted, so a warning: the change applies today, but will break when
            # the operator stops serving the version.
            message = f"{api_version} {kind} is deprecated"
            if entry.warning:
                message += f": {entry.warning.rstrip('.')}"
            if entry.storage_version:
                message += f" (current version: {entry.storage_version})"
            errors.append(error("apiVersion", message, "warning"))

        instance = _drop_nulls(obj)
        for problem in self._validator((api_version, kind)).iter_errors(instance):
            errors += [error(path, message) for path, message in _describe(problem)]
        errors += [
            error(path, message, severity)
            for path, message, severity in _metadata_problems(instance, kind, entry.scope)
        ]
        errors += [error(p, m) for p, m in self._helm_values_problems(instance, api_version, kind)]
        errors += [
            error(p, m) for p, m in network_attachment.config_problems(instance, api_version, kind)
        ]
        unique = dict.fromkeys(errors)  # two schema keywords may say the same thing
        return sorted(unique, key=lambda e: (e.severity != "error", e.path, e.message))

    def _helm_values_problems(
        self, obj: Mapping[str, Any], api_version: str, kind: str
    ) -> list[tuple[str, str]]:
        if kind != "HelmRelease" or not api_version.startswith("helm.toolkit.fluxcd.io/"):
            return []
        spec = mapping(obj.get("spec"))
        chart = helm_chart_name(spec)
        validator = self._helm_values.get(chart) if chart else None
        values = spec.get("values")
        if validator is None or values is None:
            return []
        # Values from spec.valuesFrom (ConfigMaps, Secrets) are merged on the cluster and
        # cannot be seen here; only the inline values are checked.
        problems: list[tuple[str, str]] = []
        for problem in validator.iter_errors(values):
            for path, message in _describe(problem):
                where = f"spec.values.{path}" if path else "spec.values"
                problems.append((where, f"chart {chart!r}: {message}"))
        return problems


def helm_chart_name(spec: Mapping[str, Any]) -> str:
    """The chart a HelmRelease's ``spec`` installs, as its values schema is keyed ("" when it
    cannot be told): the chart of ``spec.chart``, else the name of the OCIRepository
    ``spec.chartRef`` points at."""
    chart = mapping(mapping(spec.get("chart")).get("spec")).get("chart")
    if isinstance(chart, str):
        return chart
    ref = mapping(spec.get("chartRef"))
    name = ref.get("name")
    return name if ref.get("kind") == "OCIRepository" and isinstance(name, str) else ""


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


_SIMPLE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def format_path(parts: Iterable[Any]) -> str:
    """``["spec", "resources", "limits", "nvidia.com/gpu"]`` ->
    ``spec.resources.limits["nvidia.com/gpu"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _SIMPLE_KEY.fullmatch(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{json.dumps(str(part))}]"
    return out


def _looks_like_quantity_pattern(pattern: Any) -> bool:
    # Ours, or the one controller-gen writes for resource.Quantity fields of CRDs.
    return pattern == QUANTITY_PATTERN or (isinstance(pattern, str) and "[KMGTPE]i" in pattern)


def _describe(problem: ValidationError) -> list[tuple[str, str]]:
    """Turn one jsonschema error into (path, sentence) pairs a reviewer can act on."""
    path = list(problem.absolute_path)
    if problem.validator == "additionalProperties" and isinstance(problem.instance, dict):
        schema = problem.schema if isinstance(problem.schema, dict) else {}
        known = set(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        extra = [
            key
            for key in problem.instance
            if key not in known and not any(p.search(key) for p in patterns)
        ]
        if extra:
            if not known:
                # e.g. an embedded ObjectMeta that controller-gen wrote as a bare object.
                hint = " (the schema declares no fields here; the API server would drop it)"
            elif len(known) <= 12:
                hint = f" (allowed here: {', '.join(sorted(known))})"
            else:
                hint = ""
            return [(format_path([*path, key]), f"unknown field {key!r}{hint}") for key in extra]
    if problem.validator == "pattern" and _looks_like_quantity_pattern(problem.validator_value):
        return [(format_path(path), f"{problem.instance!r} is not a quantity (e.g. 8, 500m, 64Gi)")]
    if problem.validator in ("anyOf", "oneOf") and problem.context:
        best = best_match(problem.context)
        return [(format_path([*path, *best.relative_path]), best.message)]
    return [(format_path(path), problem.message)]


def _metadata_problems(
    obj: Mapping[str, Any], kind: str, scope: Scope
) -> list[tuple[str, str, Severity]]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return []  # the schema already says metadata is required
    problems: list[tuple[str, str, Severity]] = []
    name = metadata.get("name")
    if name is None:
        problems.append(
            (
                "metadata.name",
                "metadata.name is required (objects in Git need a fixed name; "
                "generateName cannot be reconciled)",
                "error",
            )
        )
    else:
        problem = _NAME_RULES.get(kind, names.dns1123_subdomain_problem)(name)
        if problem:
            problems.append(("metadata.name", problem, "error"))
    namespace = metadata.get("namespace")
    if namespace is not None:
        if scope == "Cluster":
            problems.append(
                (
                    "metadata.namespace",
                    f"{kind} is cluster-scoped; the namespace is ignored",
                    "warning",
                )
            )
        elif problem := names.dns1123_label_problem(namespace):
            problems.append(("metadata.namespace", problem, "error"))
    labels = metadata.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            where = format_path(["metadata", "labels", key])
            for problem in (names.qualified_name_problem(key), names.label_value_problem(value)):
                if problem:
                    problems.append((where, problem, "error"))
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            if problem := names.qualified_name_problem(key):
                problems.append((format_path(["metadata", "annotations", key]), problem, "error"))
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            problems.append(
                ("metadata.annotations", f"annotations total {size} bytes (max 256 KiB)", "error")
            )
    for key in SERVER_METADATA:
        if key in metadata:
            problems.append(
                (f"metadata.{key}", f"{key} is set by the API server; remove it", "error")
            )
    return problems


# --- module-level entry points with a cached registry per directory -----------------------------

_registries: dict[tuple[str, str, str], SchemaRegistry] = {}
_registries_lock = threading.Lock()


def get_registry(
    schema_dir: str | Path | None = None,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
) -> SchemaRegistry:
    """The registry for ``schema_dir`` and the built-in kinds of ``kubernetes_version``,
    loaded once per process.

    ``None`` gives the built-in kinds only: every custom resource is then unknown.
    """
    key = str(Path(schema_dir).resolve()) if schema_dir is not None else ""
    # A directory replaced in place (fetch_schemas renames a new one there) is another set.
    identity = _identity(key) if key else ""
    with _registries_lock:
        registry = _registries.get((key, identity, kubernetes_version))
        if registry is None:
            registry = (
                SchemaRegistry.from_dir(key, kubernetes_version=kubernetes_version)
                if key
                else SchemaRegistry(kubernetes_version=kubernetes_version)
            )
            _registries[(key, identity, kubernetes_version)] = registry
    return registry


def _identity(directory: str) -> str:
    try:
        stat = Path(directory).stat()
    except OSError:
        return ""
    return f"{stat.st_ino}:{stat.st_mtime_ns}"


def validate_object(obj: Any, schema_dir: str | Path | None = None) -> list[SchemaError]:
    return get_registry(schema_dir).validate(obj)


def validate_objects(
    objs: Iterable[Any], schema_dir: str | Path | None = None
) -> list[SchemaError]:
    registry = get_registry(schema_dir)
    return [error for obj in objs for error in registry.validate(obj)]


def helm_values_schemas(directory: str | Path) -> dict[str, Any]:
    """Every chart values schema under ``directory``: ``<chart>/values.schema.json`` is the
    schema of chart ``<chart>`` (``vcluster/values.schema.json`` -> ``vcluster``)."""
    return {
        file.parent.name: json.loads(file.read_text(encoding="utf-8"))
        for file in sorted(Path(directory).rglob("values.schema.json"))
    }


def load_crd_file(path: str | Path) -> list[dict[str, Any]]:
    """The CRDs in one YAML file, as dicts (for ``from_crds`` and tests)."""
    return [
        doc
        for doc in load_documents(Path(path).read_bytes())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


__all__ = [
    "CLUSTER_SCOPED",
    "DEFAULT_KUBERNETES_VERSION",
    "CoreSchemas",
    "SchemaError",
    "SchemaRegistry",
    "UnsupportedKubernetesVersion",
    "core_schemas",
    "get_registry",
    "helm_chart_name",
    "helm_values_schemas",
    "load_crd_file",
    "supported_kubernetes_versions",
    "validate_object",
    "validate_objects",
]
