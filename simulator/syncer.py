"""vCluster's syncer, the translation part so far (loft-sh/vcluster v0.35.3, the chart the
portal pins; every rule below names the file it is read from, under ``pkg/``).

- **Names and labels** (``util/translate``): a virtual object ``<name>`` in ``<namespace>``
  is ``<name>-x-<namespace>-x-<vcluster>`` in the host namespace, cut to 52 characters and a
  hash when longer than 63 (``single_namespace.go`` ``SingleNamespaceHostName``,
  ``translate.go`` ``SafeConcatName``). Labels are copied verbatim but ``release`` and
  vCluster's own ``vcluster.loft.sh/namespace``, ``managed-by`` and ``controlled-by``, which
  become ``vcluster.loft.sh/label-<vcluster>-x-<hash>``; the host object gets ``managed-by:
  <vcluster>`` and ``vcluster.loft.sh/namespace: <namespace>`` (``labels.go``
  ``HostLabelsMap``). Annotations are copied, listed in ``managed-annotations``, and the
  ``object-*`` annotations name the virtual object (``translate.go`` ``HostAnnotations``).
  Later changes go both ways, whichever side changed since the syncer last looked
  (``LabelsBidirectionalUpdate``, ``AnnotationsBidirectionalUpdate``, ``patcher/sync.go``
  ``CopyBidirectional``).
- **Configuration**: what the syncer reads from the release's values, the chart's
  values.yaml defaults under them; ``sync.toHost.pods.enforceTolerations`` parsed as
  ``util/toleration`` does.
- **Event notes** name virtual objects, not host ones
  (``syncer/translator/sanitising_event_recorder.go``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.store import JsonObject, as_dict, as_list

# --- names, labels and annotations (util/translate/types.go) --------------------------------

NAME_ANNOTATION = "vcluster.loft.sh/object-name"
NAMESPACE_ANNOTATION = "vcluster.loft.sh/object-namespace"
UID_ANNOTATION = "vcluster.loft.sh/object-uid"
KIND_ANNOTATION = "vcluster.loft.sh/object-kind"
HOST_NAME_ANNOTATION = "vcluster.loft.sh/object-host-name"
HOST_NAMESPACE_ANNOTATION = "vcluster.loft.sh/object-host-namespace"
MANAGED_ANNOTATIONS = "vcluster.loft.sh/managed-annotations"
MANAGED_LABELS = "vcluster.loft.sh/managed-labels"
RELEASE_LABEL = "release"
NAMESPACE_LABEL = "vcluster.loft.sh/namespace"
MARKER_LABEL = "vcluster.loft.sh/managed-by"
CONTROLLER_LABEL = "vcluster.loft.sh/controlled-by"
LABEL_PREFIX = "vcluster.loft.sh/label"
NAMESPACE_LABEL_PREFIX = "vcluster.loft.sh/ns-label"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# single_namespace.go LabelsToTranslate
TRANSLATED_LABELS = (RELEASE_LABEL, NAMESPACE_LABEL, MARKER_LABEL, CONTROLLER_LABEL)
_OBJECT_ANNOTATIONS = (
    NAME_ANNOTATION,
    HOST_NAME_ANNOTATION,
    HOST_NAMESPACE_ANNOTATION,
    UID_ANNOTATION,
    KIND_ANNOTATION,
    NAMESPACE_ANNOTATION,
)


def safe_concat_name(*parts: str) -> str:
    """``translate.go`` ``SafeConcatName``: joined with ``-``; over 63 characters, the first 52,
    ``-`` and 10 hex digits of the whole name's SHA-256 (``.-`` made ``-``)."""
    full = "-".join(parts)
    if len(full) > 63:
        digest = hashlib.sha256(full.encode()).hexdigest()[:10]
        return f"{full[:52]}-{digest}".replace(".-", "-")
    return full


def host_name(name: str, namespace: str, vcluster: str) -> str:
    """``single_namespace.go`` ``SingleNamespaceHostName``."""
    return safe_concat_name(name, "x", namespace, "x", vcluster) if name else ""


def group_version_kind(obj: Mapping[str, Any]) -> str:
    """``schema.GroupVersionKind.String()`` of an object: ``/v1, Kind=Pod``."""
    api_version = str(obj.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={obj.get('kind', '')}"


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("metadata"))


def _strings(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_dict(value).items()}


@dataclass(frozen=True)
class Names:
    """The translator of one tenant cluster: ``translate.VClusterName`` (the release) and the
    host namespace (``single_namespace.go`` ``singleNamespace.targetNamespace``)."""

    vcluster: str
    namespace: str

    def host_name(self, name: str, namespace: str) -> str:
        return host_name(name, namespace, self.vcluster)

    def host_name_cluster(self, name: str) -> str:
        """``single_namespace.go`` ``HostNameCluster``: a cluster-scoped object's host name."""
        return (
            safe_concat_name("vcluster", name, "x", self.namespace, "x", self.vcluster)
            if name
            else ""
        )

    def marker_label_cluster(self) -> str:
        return safe_concat_name(self.namespace, "x", self.vcluster)

    def _label_key(self, prefix: str, key: str) -> str:
        """``single_namespace.go`` ``convertLabelKeyWithPrefix``."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        return safe_concat_name(prefix, self.vcluster, "x", digest)

    def host_label(self, key: str) -> str:
        """``labels.go`` ``HostLabel``."""
        return self._label_key(LABEL_PREFIX, key) if key in TRANSLATED_LABELS else key

    def host_label_namespace(self, key: str) -> str:
        """``single_namespace.go`` ``HostLabelNamespace``: a virtual namespace's label."""
        return self._label_key(NAMESPACE_LABEL_PREFIX, key)

    def translated_label(self, label: str) -> str | None:
        """``labels.go`` ``IsTranslatedLabel``: the virtual key a host key stands for."""
        return next(
            (k for k in TRANSLATED_LABELS if self._label_key(LABEL_PREFIX, k) == label), None
        )

    def virtual_label(self, label: str) -> tuple[str, bool]:
        """``labels.go`` ``VirtualLabel``."""
        if label in TRANSLATED_LABELS:
            return "", False
        original = self.translated_label(label)
        return (original, True) if original is not None else (label, True)

    def host_labels_map(
        self,
        virtual: Mapping[str, str] | None,
        host: Mapping[str, str] | None,
        namespace: str,
        is_metadata: bool,
    ) -> dict[str, str] | None:
        """``labels.go`` ``HostLabelsMap``."""
        if virtual is None:
            return None
        labels = {
            self.host_label(k): v for k, v in virtual.items() if self.translated_label(k) is None
        }
        if is_metadata or host is None or host.get(MARKER_LABEL, ""):
            if not namespace:
                labels[MARKER_LABEL] = self.marker_label_cluster()
            else:
                labels[MARKER_LABEL] = self.vcluster
                labels[NAMESPACE_LABEL] = namespace
        if (host or {}).get(CONTROLLER_LABEL, ""):
            labels[CONTROLLER_LABEL] = (host or {})[CONTROLLER_LABEL]
        return labels

    def virtual_labels_map(
        self,
        host: Mapping[str, str] | None,
        virtual: Mapping[str, str] | None,
        *excluded: str,
    ) -> dict[str, str] | None:
        """``labels.go`` ``VirtualLabelsMap`` (keys the loop adds are not visited again)."""
        if host is None:
            return None
        skip = (*excluded, MARKER_LABEL, NAMESPACE_LABEL, CONTROLLER_LABEL)
        labels = copy_maps(
            host, virtual, lambda k: k in skip or k.startswith(NAMESPACE_LABEL_PREFIX)
        )
        for key, value in list(labels.items()):
            if virtual is not None and key in virtual:
                labels[key] = virtual[key]
            else:
                labels.pop(key, None)
            virtual_key, ok = self.virtual_label(key)
            if ok:
                labels[virtual_key] = value
        return labels

    def host_label_selector(self, selector: Mapping[str, Any] | None) -> JsonObject | None:
        """``labels.go`` ``HostLabelSelector``."""
        return _map_selector(selector, self.host_label)

    def host_label_selector_namespace(
        self, selector: Mapping[str, Any] | None
    ) -> JsonObject | None:
        """``single_namespace.go`` ``HostLabelSelectorNamespace``."""
        return _map_selector(selector, self.host_label_namespace)

    def virtual_label_selector(self, selector: Mapping[str, Any] | None) -> JsonObject | None:
        """``labels.go`` ``VirtualLabelSelector``."""

        def back(key: str) -> str:
            virtual_key, ok = self.virtual_label(key)
            return virtual_key if ok else key

        return _map_selector(selector, back)


def _map_selector(
    selector: Mapping[str, Any] | None, key: Callable[[str], str]
) -> JsonObject | None:
    if selector is None:
        return None
    out: JsonObject = {}
    if "matchLabels" in selector and selector["matchLabels"] is not None:
        out["matchLabels"] = {key(k): v for k, v in as_dict(selector["matchLabels"]).items()}
    expressions = [
        {**as_dict(r), "key": key(str(as_dict(r).get("key", "")))}
        for r in as_list(selector.get("matchExpressions"))
    ]
    if expressions:
        out["matchExpressions"] = expressions
    return out


def merge_label_selectors(*selectors: Mapping[str, Any] | None) -> JsonObject:
    """``labels.go`` ``MergeLabelSelectors``."""
    out: JsonObject = {}
    for selector in selectors:
        if selector is None:
            continue
        labels = as_dict(selector.get("matchLabels"))
        if labels:
            out.setdefault("matchLabels", {}).update(labels)
        expressions = as_list(selector.get("matchExpressions"))
        if expressions:
            out.setdefault("matchExpressions", []).extend(copy.deepcopy(expressions))
    return out


def copy_maps(
    source: Mapping[str, str] | None,
    target: Mapping[str, str] | None,
    exclude: Callable[[str], bool] | None,
) -> dict[str, str]:
    """``translate.go`` ``copyMaps``: ``source`` less the excluded keys, and ``target``'s
    excluded keys kept."""
    out = {k: v for k, v in (source or {}).items() if exclude is None or not exclude(k)}
    for key, value in (target or {}).items():
        if exclude is not None and exclude(key):
            out[key] = value
    return out


def apply_maps(
    source: Mapping[str, str] | None,
    target: Mapping[str, str] | None,
    managed: Sequence[str],
    excluded: Sequence[str],
) -> tuple[dict[str, str], str]:
    """``translate.go`` ``applyMaps``: ``source``'s keys (now managed), ``target``'s excluded
    keys and those it has that were never managed; and the managed keys, sorted, one a line."""
    out: dict[str, str] = {}
    keys: list[str] = []
    for key, value in (source or {}).items():
        if key in excluded:
            continue
        out[key] = value
        keys.append(key)
    for key, value in (target or {}).items():
        if key in excluded:
            out[key] = value
        elif key in keys or key in managed:
            continue
        else:
            out[key] = value
    return out, "\n".join(sorted(keys))


def apply_annotations(
    source: Mapping[str, str] | None, target: Mapping[str, str] | None, *excluded: str
) -> dict[str, str]:
    """``translate.go`` ``applyAnnotations``."""
    target = target or {}
    merged, managed = apply_maps(
        source,
        target,
        target.get(MANAGED_ANNOTATIONS, "").split("\n"),
        [MANAGED_ANNOTATIONS, MANAGED_LABELS, *excluded],
    )
    if managed:
        merged[MANAGED_ANNOTATIONS] = managed
    else:
        merged.pop(MANAGED_ANNOTATIONS, None)
    return merged


def _add_host_annotations(
    annotations: dict[str, str], virtual: Mapping[str, Any], host: Mapping[str, Any] | None
) -> None:
    """``translate.go`` ``addHostAnnotations``."""
    vmeta = _meta(virtual)
    annotations[NAME_ANNOTATION] = str(vmeta.get("name") or "")
    annotations[UID_ANNOTATION] = str(vmeta.get("uid") or "")
    if host is not None:
        hmeta = _meta(host)
        annotations[HOST_NAME_ANNOTATION] = str(hmeta.get("name") or "")
        if hmeta.get("namespace"):
            annotations[HOST_NAMESPACE_ANNOTATION] = str(hmeta["namespace"])
    if not vmeta.get("namespace"):
        annotations.pop(NAMESPACE_ANNOTATION, None)
    else:
        annotations[NAMESPACE_ANNOTATION] = str(vmeta["namespace"])
    annotations[KIND_ANNOTATION] = group_version_kind(virtual)


def host_annotations(
    virtual: Mapping[str, Any], host: Mapping[str, Any] | None, *excluded: str
) -> dict[str, str]:
    """``translate.go`` ``HostAnnotations``."""
    target = _strings(_meta(host).get("annotations")) if host is not None else {}
    out = apply_annotations(
        _strings(_meta(virtual).get("annotations")), target, *excluded, *_OBJECT_ANNOTATIONS
    )
    _add_host_annotations(out, virtual, host)
    return out


def virtual_annotations(
    host: Mapping[str, Any], virtual: Mapping[str, Any] | None, *excluded: str
) -> dict[str, str]:
    """``translate.go`` ``VirtualAnnotations``."""
    skip = (*excluded, *_OBJECT_ANNOTATIONS, MANAGED_ANNOTATIONS, MANAGED_LABELS)
    target = _strings(_meta(virtual).get("annotations")) if virtual is not None else None
    return copy_maps(_strings(_meta(host).get("annotations")), target, lambda k: k in skip)


def strip_annotations(obj: JsonObject, *excluded: str) -> None:
    """``translate.go`` ``stripExcludedAnnotations``."""
    metadata = obj.setdefault("metadata", {})
    annotations = {
        k: v for k, v in as_dict(metadata.get("annotations")).items() if k not in excluded
    }
    _set(metadata, "annotations", annotations)


_RESET_METADATA = (
    "generateName",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


def owner_reference(owner: Mapping[str, Any] | None, obj: Mapping[str, Any]) -> list[JsonObject]:
    """``translate.go`` ``GetOwnerReference``: the chart's Service (``translate.Owner``, with
    ``experimental.syncSettings.setOwner``), a controller when the virtual object has one."""
    if not owner:
        return []
    meta = _meta(owner)
    if not meta.get("name") or not meta.get("uid"):
        return []
    controlled = any(
        as_dict(o).get("controller") is True for o in as_list(_meta(obj).get("ownerReferences"))
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": controlled,
        }
    ]


def copy_object_with_name(
    obj: Mapping[str, Any],
    name: str,
    namespace: str,
    owner: Mapping[str, Any] | None,
    *excluded: str,
) -> JsonObject:
    """``translate.go`` ``CopyObjectWithName``: metadata reset but for labels and annotations,
    the host name and namespace, the owner reference."""
    target: JsonObject = copy.deepcopy(dict(obj))
    metadata = target.setdefault("metadata", {})
    for key in _RESET_METADATA:
        metadata.pop(key, None)
    metadata["name"] = name
    if _meta(obj).get("namespace"):
        metadata["namespace"] = namespace
        _set(metadata, "ownerReferences", owner_reference(owner, obj))
    strip_annotations(target, *excluded)
    return target


def host_metadata(
    names: Names,
    virtual: Mapping[str, Any],
    owner: Mapping[str, Any] | None = None,
    *excluded: str,
) -> JsonObject:
    """``translate.go`` ``HostMetadata``: the virtual object under its host name, with host
    annotations and labels."""
    vmeta = _meta(virtual)
    vnamespace = str(vmeta.get("namespace") or "")
    host = copy_object_with_name(
        virtual,
        names.host_name(str(vmeta.get("name") or ""), vnamespace),
        names.namespace,
        owner,
        *excluded,
    )
    stripped = copy.deepcopy(dict(virtual))
    strip_annotations(stripped, *excluded)
    metadata = host["metadata"]
    _set(metadata, "annotations", host_annotations(stripped, host, *excluded))
    labels = names.host_labels_map(_strings(vmeta.get("labels")), None, vnamespace, True)
    _set(metadata, "labels", labels)
    return host


def merge_maps(
    before: Mapping[str, str] | None,
    after: Mapping[str, str] | None,
    target: Mapping[str, str] | None,
    transform: Callable[[str, str | None], tuple[str, str | None]],
) -> dict[str, str] | None:
    """``labels.go`` ``mergeMaps``: the changes from ``before`` to ``after`` (keys through
    ``transform``; "" drops one) applied to ``target``."""
    before, after = before or {}, after or {}
    out = dict(target) if target is not None else None
    diff: dict[str, str | None] = {}
    for key, value in before.items():
        if key in after and after[key] != value:
            diff[key] = after[key]
        elif key not in after:
            diff[key] = None
    for key, value in after.items():
        if key not in before:
            diff[key] = value
    if not diff:
        return out
    changes: dict[str, str | None] = {}
    for key, change in diff.items():
        new_key, new_value = transform(key, change)
        if new_key:
            changes[new_key] = new_value
    out = out if out is not None else {}
    for key, change in changes.items():
        if change is None:
            out.pop(key, None)
        else:
            out[key] = change
    return out


def _excluding(keys: Iterable[str]) -> Callable[[str, str | None], tuple[str, str | None]]:
    skip = tuple(keys)

    def transform(key: str, value: str | None) -> tuple[str, str | None]:
        return ("", None) if key in skip else (key, value)

    return transform


def annotations_bidirectional(
    virtual_old: Mapping[str, Any],
    virtual: Mapping[str, Any],
    host_old: Mapping[str, Any],
    host: Mapping[str, Any],
    *excluded: str,
) -> tuple[dict[str, str] | None, dict[str, str]]:
    """``labels.go`` ``AnnotationsBidirectionalUpdate``: (virtual, host) annotations, the
    changed side's changes carried to the other, the host's ``object-*`` annotations set."""
    skip = (*_OBJECT_ANNOTATIONS, MANAGED_ANNOTATIONS, MANAGED_LABELS)
    transform_out = _excluding((*skip, *excluded))

    def annotations(obj: Mapping[str, Any]) -> dict[str, str] | None:
        value = _meta(obj).get("annotations")
        return _strings(value) if value is not None else None

    new_virtual = annotations(virtual)
    new_host = annotations(host) or {}
    if (annotations(virtual_old) or {}) != (new_virtual or {}):
        new_host = (
            merge_maps(annotations(virtual_old), new_virtual, annotations(host), transform_out)
            or {}
        )
    elif (annotations(host_old) or {}) != new_host:
        new_virtual = merge_maps(annotations(host_old), new_host, new_virtual, transform_out)
    _add_host_annotations(new_host, virtual, host)
    return new_virtual, new_host


def labels_bidirectional(
    names: Names,
    virtual_old: Mapping[str, str] | None,
    virtual: Mapping[str, str] | None,
    host_old: Mapping[str, str] | None,
    host: Mapping[str, str] | None,
    *excluded: str,
    exclude_prefix: str = "",
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """``labels.go`` ``LabelsBidirectionalUpdateFunctionMaps``: (virtual, host) labels, keys
    translated on the way (``HostLabel`` out, ``VirtualLabel`` back)."""

    def skipped(key: str) -> bool:
        return key in excluded or bool(exclude_prefix and key.startswith(exclude_prefix))

    def to_host(key: str, value: str | None) -> tuple[str, str | None]:
        key = names.host_label(key)
        return ("", None) if skipped(key) else (key, value)

    def from_host(key: str, value: str | None) -> tuple[str, str | None]:
        key, _ = names.virtual_label(key)
        return ("", None) if skipped(key) else (key, value)

    new_virtual = dict(virtual) if virtual is not None else None
    new_host = dict(host) if host is not None else None
    if (virtual_old or {}) != (virtual or {}):
        new_host = merge_maps(virtual_old, virtual, host, to_host)
    elif (host_old or {}) != (host or {}):
        new_virtual = merge_maps(host_old, host, virtual, from_host)
    return new_virtual, new_host


def _zero(value: object) -> bool:
    return value is None or value == "" or value == [] or value == {}


def normalized(value: Any) -> Any:
    """A JSON value as a typed Go struct holds it: absent, null and empty are one."""
    if isinstance(value, Mapping):
        return {k: normalized(v) for k, v in value.items() if not _zero(normalized(v))}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """``apiequality.Semantic.DeepEqual`` for JSON values."""
    return bool(normalized({"value": a}) == normalized({"value": b}))


def copy_bidirectional(virtual_old: Any, virtual: Any, host_old: Any, host: Any) -> tuple[Any, Any]:
    """``patcher/sync.go`` ``CopyBidirectional``: the changed side wins, the virtual first."""
    if not same(virtual_old, virtual):
        return virtual, virtual
    if not same(host_old, host):
        return host, host
    return virtual, host


def _set(mapping: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key``, or drop it for a value Go's ``omitempty`` leaves out."""
    if _zero(value):
        mapping.pop(key, None)
    else:
        mapping[key] = value


def go_json(value: Any) -> str:
    """``encoding/json`` ``Marshal``: compact, ``<``, ``>`` and ``&`` escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


# --- the syncer's configuration (chart/values.yaml at v0.35.3, config/config.go) -------------

REWRITE_HOSTS_IMAGE = {"registry": "mirror.gcr.io", "repository": "library/alpine", "tag": "3.20"}
REWRITE_HOSTS_RESOURCES = {
    "limits": {"cpu": "30m", "memory": "64Mi"},
    "requests": {"cpu": "30m", "memory": "64Mi"},
}
# coredns/coredns.go GetUserID, GetGroupID: the syncer's own ids, 1001 when it runs as root.
ROOT_FALLBACK_ID = 1001


def image_reference(image: Mapping[str, Any]) -> str:
    """``config/config.go`` ``Image.String``: ``library/`` before a repository without a slash
    when there is a registry."""
    registry = str(image.get("registry") or "")
    repository = str(image.get("repository") or "")
    ref = f"{registry}/" if registry else ""
    if registry and repository and "/" not in repository:
        ref += "library/"
    ref += repository
    tag = str(image.get("tag") or "")
    return f"{ref}:{tag}" if tag else ref


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


class InvalidToleration(ValueError):
    """``util/toleration`` ``ParseToleration``'s "invalid toleration spec"."""


def parse_toleration(spec: str) -> JsonObject:
    """``util/toleration/toleration.go`` ``ParseToleration``: ``*``, ``key``, ``key=value``,
    ``key:Effect`` (Exists) or ``key=value:Effect`` (Equal)."""
    if spec == "*":
        return {"operator": "Exists"}
    colon, equals = spec.split(":"), spec.split("=")
    toleration: JsonObject = {}
    if len(colon) == 1:
        if len(equals) > 2:
            raise InvalidToleration(f"invalid toleration spec: {spec}")
        toleration["key"] = equals[0]
        if len(equals) == 2:
            toleration["value"] = _label_value(equals[1], spec)
    elif len(colon) == 2:
        parts = colon[0].split("=")
        if len(parts) > 2:
            raise InvalidToleration(f"invalid toleration spec: {spec}")
        toleration = {"key": parts[0], "operator": "Exists", "effect": colon[1]}
        if len(parts) == 2:
            toleration["operator"] = "Equal"
            toleration["value"] = _label_value(parts[1], spec)
    else:
        raise InvalidToleration(f"invalid toleration spec: {spec}")
    return {k: v for k, v in toleration.items() if v != ""}


def _label_value(value: str, spec: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise InvalidToleration(f"invalid toleration spec: {spec}")
    return value


@dataclass(frozen=True)
class SyncConfig:
    """What the syncer reads from the release's values (defaults: the chart's values.yaml),
    for the parts modelled here."""

    names: Names
    pods: bool = True
    services: bool = True
    endpoints: bool = True
    endpoint_slices: bool = True
    # controlPlane.advanced.workloadServiceAccount.name, "vc-workload-<release>" when empty
    # (config/validation.go); the syncer's own account, controlPlane.advanced.serviceAccount.
    workload_service_account: str = ""
    syncer_account: str = ""
    cluster_domain: str = "cluster.local"
    enforced_tolerations: tuple[JsonObject, ...] = ()
    translate_image: Mapping[str, str] = field(default_factory=dict)
    rewrite_hosts: bool = True
    hosts_image: str = ""
    hosts_resources: Mapping[str, Any] = field(default_factory=dict)
    hosts_user: int = ROOT_FALLBACK_ID
    hosts_group: int = ROOT_FALLBACK_ID
    node_selector: Mapping[str, str] = field(default_factory=dict)
    pod_security_standard: str = ""
    priority_class_name: str = ""
    priority_classes_to_host: bool = False
    priority_classes_from_host: bool = False
    runtime_class_name: str = ""
    set_owner: bool = True
    # The virtual cluster's Kubernetes (major, minor): controlPlane.distro.k8s.version, else
    # its image's tag (config/default_extra_values.go).
    virtual_version: tuple[int, int] | None = None

    @property
    def strips_observed_generation(self) -> bool:
        """``translator.go`` ``virtualClusterStripsObservedGeneration``: before 1.34."""
        return self.virtual_version is not None and self.virtual_version < (1, 34)

    @property
    def requester(self) -> str:
        """Who the syncer is to the host API server."""
        return f"system:serviceaccount:{self.names.namespace}:{self.syncer_account}"


def _enabled(section: Mapping[str, Any], default: bool = True) -> bool:
    value = section.get("enabled", default)
    return value is True or str(value).lower() == "true"


def sync_config(values: Mapping[str, Any], namespace: str, release: str) -> SyncConfig:
    """The syncer's configuration for a release ``release`` in ``namespace``."""
    sync = as_dict(values.get("sync"))
    to_host, from_host = as_dict(sync.get("toHost")), as_dict(sync.get("fromHost"))
    pods = as_dict(to_host.get("pods"))
    rewrite = as_dict(pods.get("rewriteHosts"))
    init = as_dict(rewrite.get("initContainer"))
    control = as_dict(values.get("controlPlane"))
    advanced = as_dict(control.get("advanced"))
    image = {**REWRITE_HOSTS_IMAGE, **as_dict(init.get("image"))}
    # translator.go NewTranslator: defaultImageRegistry, else the image's, else docker.io.
    image["registry"] = advanced.get("defaultImageRegistry") or image.get("registry") or "docker.io"
    tolerations = []
    for spec in as_list(pods.get("enforceTolerations")):
        try:  # translator.go parseEnforcedTolerations skips what does not parse
            tolerations.append(parse_toleration(str(spec)))
        except InvalidToleration:
            continue
    security = as_dict(
        as_dict(as_dict(control.get("statefulSet")).get("security")).get("containerSecurityContext")
    )
    user = int(security.get("runAsUser", 0) or 0) or ROOT_FALLBACK_ID
    group = int(security.get("runAsGroup", 0) or 0) or ROOT_FALLBACK_ID
    workload = as_dict(advanced.get("workloadServiceAccount")).get("name")
    account = as_dict(advanced.get("serviceAccount")).get("name")
    selector = as_dict(as_dict(as_dict(from_host.get("nodes")).get("selector")).get("labels"))
    networking = as_dict(as_dict(values.get("networking")).get("advanced"))
    owner = as_dict(as_dict(values.get("experimental")).get("syncSettings")).get("setOwner")
    k8s = as_dict(as_dict(control.get("distro")).get("k8s"))
    release_tag = str(k8s.get("version") or as_dict(k8s.get("image")).get("tag") or "v1.36.0")
    match = re.match(r"v?(\d+)\.(\d+)", release_tag)
    return SyncConfig(
        names=Names(release, namespace),
        pods=_enabled(pods),
        services=_enabled(as_dict(to_host.get("services"))),
        endpoints=_enabled(as_dict(to_host.get("endpoints"))),
        endpoint_slices=_enabled(as_dict(to_host.get("endpointSlices"))),
        workload_service_account=str(workload or f"vc-workload-{release}"),
        syncer_account=str(account or f"vc-{release}"),
        cluster_domain=str(networking.get("clusterDomain") or "cluster.local"),
        enforced_tolerations=tuple(tolerations),
        translate_image=_strings(pods.get("translateImage")),
        rewrite_hosts=_enabled(rewrite),
        hosts_image=image_reference(image),
        hosts_resources=as_dict(init.get("resources")) or REWRITE_HOSTS_RESOURCES,
        hosts_user=user,
        hosts_group=group,
        node_selector=_strings(selector),
        pod_security_standard=str(as_dict(values.get("policies")).get("podSecurityStandard") or ""),
        priority_class_name=str(pods.get("priorityClassName") or ""),
        priority_classes_to_host=_enabled(as_dict(to_host.get("priorityClasses")), False),
        priority_classes_from_host=_enabled(as_dict(from_host.get("priorityClasses")), False),
        runtime_class_name=str(pods.get("runtimeClassName") or ""),
        set_owner=owner is not False,
        virtual_version=(int(match.group(1)), int(match.group(2))) if match else None,
    )


# --- events (syncer/translator/sanitising_event_recorder.go) ---------------------------------


def sanitised(message: str, vcluster: str, name: str, namespace: str, host: str) -> str:
    """``sanitising_event_recorder.go`` ``Eventf``: the regarding object's host name put back
    to its virtual ``name``, then ``-x-<namespace>-x-<vcluster>`` taken off any other name
    (unless the virtual name itself ends with it)."""
    if host and host != name:
        message = message.replace(host, name)
    if namespace and vcluster:
        suffix = f"-x-{namespace}-x-{vcluster}"
        if not name.endswith(suffix):
            message = message.replace(suffix, "")
    return message
