"""vCluster's syncer: what a tenant cluster's pods, Services, Endpoints and EndpointSlices
become in the host namespace, and what flows back (loft-sh/vcluster v0.35.3, the chart the
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
  ``CopyBidirectional``), against the objects it last saw (``syncer/syncer.go`` ``getObjects``).
- **Pods** (``controllers/resources/pods``): created in the host *as the syncer's service
  account* ``vc-<release>``, so the host's admission (Kueue, HAMi, quota, Kyverno with that
  requester) and scheduler treat them like any pod of the namespace. See ``translate_pod``
  and ``pod_diff``; status flows back (``translate/diff.go``).
- **Services** (``controllers/resources/services``, ``server/filters/service.go``): a Service
  created through the virtual API is created in the host first, as the syncer, and only then
  in the virtual cluster with the host's ClusterIP, so a host refusal refuses the request; one
  that reaches the virtual cluster otherwise (server-side apply is a PATCH, which the filter
  does not intercept) is created in the host by the syncer. The selector is translated like
  labels; a Service without one gets none in the host.
- **Endpoints, EndpointSlices** (``controllers/resources/endpoints``, ``endpointslices``),
  when ``sync.toHost.endpoints.enabled`` / ``endpointSlices.enabled`` (both true in the
  chart's values.yaml; ``controllers/resources/register.go``): those of a virtual Service
  *without* a selector are copied verbatim, addresses included, only pod references
  translated; none while the virtual Service is missing or has a selector (``ReconcileStart``).
- **Errors** become Warning ``SyncError`` events on the virtual object, with host names put
  back to virtual ones (``syncer/translator/sanitising_event_recorder.go``); the syncer
  retries on its next pass (the controller's requeue). A requeue, and the watch event of the
  syncer's own write, come back within the same pass.

Not modelled: the ConfigMap, Secret, PersistentVolumeClaim and ServiceAccount syncers (a pod's
references are translated, the objects are not copied), service account tokens (the virtual
API server mounts none), fake nodes as objects (a virtual pod is bound to its host pod's node
name), graceful deletion, ephemeral containers, in-place resize, the host path mapper, the
virtual and hybrid schedulers, translate patches, resource claims (off by default), the
special ``default/kubernetes`` Service sync, the filter's ExternalName update path, and the
CoreDNS Deployment (its Service is there, ``virtual.py``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from simulator.admission import Rejected, admit_object, cluster_ip, pod_security_problems
from simulator.cluster import Cluster
from simulator.store import (
    ENDPOINT_SLICES,
    ENDPOINTS,
    PODS,
    SERVICES,
    JsonObject,
    Resource,
    Store,
    as_dict,
    as_list,
    key_of,
)
from simulator.virtual import Refused, VirtualCluster

logger = logging.getLogger(__name__)

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


# --- pods: virtual -> host (controllers/resources/pods/translate/translator.go) --------------

POD_NAMESPACE_ANNOTATION = "vcluster.loft.sh/namespace"
POD_NAME_ANNOTATION = "vcluster.loft.sh/name"
POD_UID_ANNOTATION = "vcluster.loft.sh/uid"
LABELS_ANNOTATION = "vcluster.loft.sh/labels"
OWNER_REFERENCES_ANNOTATION = "vcluster.loft.sh/owner-references"
OWNER_SET_KIND_ANNOTATION = "vcluster.loft.sh/owner-set-kind"
SERVICE_ACCOUNT_NAME_ANNOTATION = "vcluster.loft.sh/service-account-name"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DAEMONSET_POD_ANNOTATION = "cluster-autoscaler.kubernetes.io/daemonset-pod"
# translate/hosts.go
HOSTS_REWRITTEN_ANNOTATION = "vcluster.loft.sh/hosts-rewritten"
DISABLE_SUBDOMAIN_REWRITE_ANNOTATION = "vcluster.loft.sh/disable-subdomain-rewrite"
HOSTS_CONTAINER = "vcluster-rewrite-hosts"
HOSTS_VOLUME = "vcluster-rewrite-hosts"
_FIELD_PATH_LABEL = re.compile(r"^metadata\.labels\['(.+)'\]$")
_OWNER_SET_KINDS = ("DaemonSet", "Job", "ReplicaSet", "StatefulSet")
MAX_PRIORITY = 1_000_000_000
# metav1.OwnerReference's fields in the order encoding/json writes them.
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")


def labels_annotation(obj: Mapping[str, Any]) -> str:
    """``translator.go`` ``LabelsAnnotation``: ``key=<JSON value>``, sorted, one a line."""
    labels = _strings(_meta(obj).get("labels"))
    return "\n".join(sorted(f"{k}={go_json(v)}" for k, v in labels.items()))


def _owner_annotations(annotations: dict[str, str], vpod: Mapping[str, Any]) -> None:
    owners = [
        {k: as_dict(o)[k] for k in _OWNER_FIELDS if k in as_dict(o)}
        for o in as_list(_meta(vpod).get("ownerReferences"))
    ]
    annotations[OWNER_REFERENCES_ANNOTATION] = go_json(owners)
    for owner in owners:
        if owner.get("apiVersion") == "apps/v1" and owner.get("kind") in _OWNER_SET_KINDS:
            annotations[OWNER_SET_KIND_ANNOTATION] = str(owner["kind"])
            break


def translate_field_ref(names: Names, ref: JsonObject | None) -> None:
    """``translator.go`` ``translateFieldRef``: downward API fields the host pod holds under
    other names."""
    if not ref:
        return
    path = str(ref.get("fieldPath", ""))
    match = _FIELD_PATH_LABEL.match(path)
    if match:
        ref["fieldPath"] = f"metadata.labels['{names.host_label(match.group(1))}']"
        return
    moved = {
        "metadata.labels": LABELS_ANNOTATION,
        "metadata.name": POD_NAME_ANNOTATION,
        "metadata.namespace": POD_NAMESPACE_ANNOTATION,
        "metadata.uid": POD_UID_ANNOTATION,
        "spec.serviceAccountName": SERVICE_ACCOUNT_NAME_ANNOTATION,
    }
    if path in moved:
        ref["fieldPath"] = f"metadata.annotations['{moved[path]}']"


def _has_cluster_ip(service: Mapping[str, Any]) -> bool:
    ip = as_dict(service.get("spec")).get("clusterIP")
    return ip not in (None, "", "None")


def _env_name(name: str) -> str:
    return name.replace("-", "_").upper()


def services_environment(
    enable_service_links: object, services: Iterable[Mapping[str, Any]], kube_ip: str
) -> dict[str, str]:
    """``translator.go`` ``ServicesToEnvironmentVariables`` with ``envvars.go``
    ``buildEnvironmentVariables``: the namespace's Services (with service links) and the
    ``kubernetes`` Service, which is the vCluster's own address."""
    env: dict[str, str] = {}
    if enable_service_links is True:
        for service in services:
            if not _has_cluster_ip(service):
                continue
            spec = as_dict(service.get("spec"))
            ip = str(spec.get("clusterIP"))
            prefix = _env_name(str(_meta(service).get("name", "")))
            ports = [as_dict(p) for p in as_list(spec.get("ports"))]
            if not ports:
                continue
            env[f"{prefix}_SERVICE_HOST"] = ip
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port", 0))
            for port in ports:
                if port.get("name"):
                    env[f"{prefix}_SERVICE_PORT_{_env_name(str(port['name']))}"] = str(port["port"])
            for index, port in enumerate(ports):
                protocol = str(port.get("protocol") or "TCP")
                host_port = f"[{ip}]:{port['port']}" if ":" in ip else f"{ip}:{port['port']}"
                url = f"{protocol.lower()}://{host_port}"
                if index == 0:
                    env[f"{prefix}_PORT"] = url
                base = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
                env[base] = url
                env[f"{base}_PROTO"] = protocol.lower()
                env[f"{base}_PORT"] = str(port["port"])
                env[f"{base}_ADDR"] = ip
    for name, value in (
        ("KUBERNETES_PORT", "tcp://IP:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://IP:443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "IP"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_SERVICE_HOST", "IP"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
    ):
        env[name] = value.replace("IP", kube_ip)
    return env


def _config_map_name(names: Names, name: str, namespace: str) -> str:
    """``mappings/resources/configmaps.go``: ``kube-root-ca.crt`` has a name of its own."""
    if name == "kube-root-ca.crt":
        return safe_concat_name("vcluster", "kube-root-ca.crt", "x", names.vcluster)
    return names.host_name(name, namespace)


def translate_container_env(
    names: Names, container: JsonObject, namespace: str, service_env: Mapping[str, str]
) -> None:
    """``translator.go`` ``TranslateContainerEnv``: references to ConfigMaps and Secrets
    under their host names, downward API fields moved, the Services' variables first."""
    env = [as_dict(e) for e in as_list(container.get("env"))]
    for item in env:
        source = as_dict(item.get("valueFrom"))
        translate_field_ref(names, as_dict(source.get("fieldRef")) or None)
        config_map = as_dict(source.get("configMapKeyRef"))
        if config_map.get("name"):
            config_map["name"] = _config_map_name(names, str(config_map["name"]), namespace)
        secret = as_dict(source.get("secretKeyRef"))
        if secret.get("name"):
            secret["name"] = names.host_name(str(secret["name"]), namespace)
    for source in as_list(container.get("envFrom")):
        source = as_dict(source)
        if as_dict(source.get("configMapRef")).get("name"):
            ref = source["configMapRef"]
            ref["name"] = _config_map_name(names, str(ref["name"]), namespace)
        if as_dict(source.get("secretRef")).get("name"):
            source["secretRef"]["name"] = names.host_name(
                str(source["secretRef"]["name"]), namespace
            )
    named = {str(item.get("name")) for item in env}
    extra = [
        {"name": name, "value": value}
        for name, value in sorted(service_env.items())
        if name not in named
    ]
    container["env"] = extra + env


def rewrite_hosts(
    config: SyncConfig, pod: JsonObject, from_host: str, to_hostname: str, fqdn: str
) -> None:
    """``translate/hosts.go`` ``rewritePodHostnameFQDN``: an init container that writes the
    pod's FQDN into an ``/etc/hosts`` every container mounts."""
    annotations = as_dict(_meta(pod).get("annotations"))
    if (
        annotations.get(DISABLE_SUBDOMAIN_REWRITE_ANNOTATION) == "true"
        and annotations.get(HOSTS_REWRITTEN_ANNOTATION) == "true"
    ):
        return
    spec = pod.setdefault("spec", {})
    init = {
        "name": HOSTS_CONTAINER,
        "image": config.hosts_image,
        "command": ["sh"],
        "args": [
            "-c",
            "sed -E -e 's/^(\\d+.\\d+.\\d+.\\d+\\s+)"
            + from_host
            + "$/\\1 "
            + fqdn
            + " "
            + to_hostname
            + "/' /etc/hosts > /hosts/hosts",
        ],
        "securityContext": {
            "runAsUser": config.hosts_user,
            "runAsGroup": config.hosts_group,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "allowPrivilegeEscalation": False,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": copy.deepcopy(dict(config.hosts_resources)),
        "volumeMounts": [{"mountPath": "/hosts", "name": HOSTS_VOLUME}],
    }
    spec["volumes"] = [*as_list(spec.get("volumes")), {"name": HOSTS_VOLUME, "emptyDir": {}}]
    spec["initContainers"] = [init, *as_list(spec.get("initContainers"))]
    pod.setdefault("metadata", {}).setdefault("annotations", {})[HOSTS_REWRITTEN_ANNOTATION] = (
        "true"
    )
    mount = {"mountPath": "/etc/hosts", "name": HOSTS_VOLUME, "subPath": "hosts"}
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for container in as_list(spec.get(kind)):
            if as_dict(container).get("name") != HOSTS_CONTAINER or kind != "initContainers":
                container["volumeMounts"] = [*as_list(container.get("volumeMounts")), dict(mount)]


def _dns_config(
    config: SyncConfig, host: JsonObject, virtual: Mapping[str, Any], nameserver: str
) -> None:
    """``translator.go`` ``translateDNSConfig``: ClusterFirst resolves through the virtual
    cluster's DNS Service."""
    spec = host["spec"]
    policy = spec.get("dnsPolicy")
    cluster_first = policy == "ClusterFirstWithHostNet" or (
        policy == "ClusterFirst" and not spec.get("hostNetwork")
    )
    if not cluster_first or not nameserver:
        return
    dns: JsonObject = {
        "nameservers": [nameserver],
        "options": [{"name": "ndots", "value": "5"}],
    }
    domain = config.cluster_domain
    if domain:
        namespace = _meta(virtual).get("namespace")
        dns["searches"] = [f"{namespace}.svc.{domain}", f"svc.{domain}", domain]
    existing = as_dict(spec.get("dnsConfig"))
    if existing:
        for key in ("nameservers", "searches"):
            dns[key] = list(dict.fromkeys([*as_list(dns.get(key)), *as_list(existing.get(key))]))
    spec["dnsPolicy"] = "None"
    spec["dnsConfig"] = dns


def translate_pod_affinity_term(
    names: Names, vpod: Mapping[str, Any], term: Mapping[str, Any]
) -> tuple[JsonObject, list[str]]:
    """``translator.go`` ``translatePodAffinityTerm``: the term in the host's labels, limited
    to this cluster's pods of the namespaces it meant; and the warning events it records."""
    selector = term.get("labelSelector")
    out: JsonObject = {}
    host_selector = names.host_label_selector(as_dict(selector) if selector is not None else None)
    if host_selector is not None:
        out["labelSelector"] = host_selector
    if term.get("topologyKey"):
        out["topologyKey"] = term["topologyKey"]
    warnings: list[str] = []
    if selector is None or host_selector is None:
        return out, warnings
    namespaces = [str(n) for n in as_list(term.get("namespaces"))]
    namespace_selector = term.get("namespaceSelector")
    ns_terms = len(as_dict(as_dict(namespace_selector).get("matchLabels"))) + len(
        as_list(as_dict(namespace_selector).get("matchExpressions"))
    )
    if namespaces:
        if namespace_selector is not None and ns_terms:
            warnings.append(
                "Warning SyncWarning Inter-pod affinity rule(s) that use both .namespaces and "
                ".namespaceSelector fields in the same term are not supported by vcluster yet. "
                "The .namespaceSelector fields of the unsupported affinity entries will be "
                "ignored."
            )
        if namespace_selector is None or ns_terms:
            host_selector.setdefault("matchExpressions", []).append(
                {"key": NAMESPACE_LABEL, "operator": "In", "values": list(namespaces)}
            )
    elif namespace_selector is not None:
        out["labelSelector"] = host_selector = merge_label_selectors(
            host_selector, names.host_label_selector_namespace(as_dict(namespace_selector))
        )
    else:
        host_selector.setdefault("matchLabels", {})[NAMESPACE_LABEL] = _meta(vpod).get(
            "namespace", ""
        )
    host_selector.setdefault("matchLabels", {})[MARKER_LABEL] = names.vcluster
    return out, warnings


def _translate_affinity(names: Names, vpod: Mapping[str, Any], spec: JsonObject) -> None:
    affinity = as_dict(spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        section = as_dict(affinity.get(kind))
        for weighted in as_list(section.get("preferredDuringSchedulingIgnoredDuringExecution")):
            weighted["podAffinityTerm"], _ = translate_pod_affinity_term(
                names, vpod, as_dict(weighted.get("podAffinityTerm"))
            )
        required = as_list(section.get("requiredDuringSchedulingIgnoredDuringExecution"))
        for index, term in enumerate(required):
            required[index], _ = translate_pod_affinity_term(names, vpod, as_dict(term))


def _translate_volumes(
    names: Names, spec: JsonObject, namespace: str, vpod: Mapping[str, Any]
) -> None:
    """``translator.go`` ``translateVolumes``: ConfigMaps, Secrets and claims by their host
    names, an ephemeral volume as the claim the virtual cluster makes for it, downward API
    fields moved."""
    for volume in as_list(spec.get("volumes")):
        volume = as_dict(volume)
        if as_dict(volume.get("configMap")):
            ref = volume["configMap"]
            ref["name"] = _config_map_name(names, str(ref.get("name", "")), namespace)
        if as_dict(volume.get("secret")):
            ref = volume["secret"]
            ref["secretName"] = names.host_name(str(ref.get("secretName", "")), namespace)
        if as_dict(volume.get("persistentVolumeClaim")):
            ref = volume["persistentVolumeClaim"]
            ref["claimName"] = names.host_name(str(ref.get("claimName", "")), namespace)
        if "ephemeral" in volume:
            # k8s.io/component-helpers storage/ephemeral VolumeClaimName: <pod>-<volume>.
            claim = f"{_meta(vpod).get('name')}-{volume.get('name')}"
            volume["persistentVolumeClaim"] = {"claimName": names.host_name(claim, namespace)}
            del volume["ephemeral"]
        for source in as_list(as_dict(volume.get("projected")).get("sources")):
            source = as_dict(source)
            if as_dict(source.get("secret")):
                source["secret"]["name"] = names.host_name(
                    str(source["secret"].get("name")), namespace
                )
            if as_dict(source.get("configMap")):
                ref = source["configMap"]
                ref["name"] = _config_map_name(names, str(ref.get("name", "")), namespace)
            for item in as_list(as_dict(source.get("downwardAPI")).get("items")):
                translate_field_ref(names, as_dict(as_dict(item).get("fieldRef")) or None)
        for item in as_list(as_dict(volume.get("downwardAPI")).get("items")):
            translate_field_ref(names, as_dict(as_dict(item).get("fieldRef")) or None)


def translate_pod(
    config: SyncConfig,
    vpod: Mapping[str, Any],
    vnamespace: Mapping[str, Any],
    services: Sequence[Mapping[str, Any]],
    kube_ip: str,
    dns_ip: str,
    owner: Mapping[str, Any] | None = None,
) -> JsonObject:
    """``translator.go`` ``Translate``: the host pod for virtual pod ``vpod`` in the virtual
    namespace ``vnamespace``, whose ``services`` give it environment variables; ``kube_ip`` is
    the chart's Service (the virtual ``kubernetes`` Service), ``dns_ip`` the synced DNS
    Service. Runs as the workload service account, without service links or an automounted
    token; the virtual namespace's labels on it under ``ns-label`` keys; the enforced
    tolerations added. (``SyncToHost`` adds the node selector: ``pod_to_host``.)"""
    names = config.names
    vmeta = _meta(vpod)
    namespace = str(vmeta.get("namespace") or "")
    pod = host_metadata(names, vpod, owner if config.set_owner else None)
    pod["status"] = {}
    spec = pod.setdefault("spec", {})
    vspec = as_dict(vpod.get("spec"))
    spec.pop("serviceAccount", None)
    spec["serviceAccountName"] = config.workload_service_account
    spec["automountServiceAccountToken"] = False
    spec["enableServiceLinks"] = False
    if config.priority_classes_to_host and spec.get("priorityClassName"):
        spec["priorityClassName"] = names.host_name_cluster(str(spec["priorityClassName"]))
        if int(spec.get("priority") or 0) > MAX_PRIORITY:
            spec["priority"] = MAX_PRIORITY
    elif not config.priority_classes_to_host and not config.priority_classes_from_host:
        spec.pop("priorityClassName", None)
        spec.pop("priority", None)
    if config.priority_class_name and not spec.get("priorityClassName"):
        spec["priorityClassName"] = config.priority_class_name
        spec.pop("priority", None)
    metadata = pod["metadata"]
    annotations = metadata.setdefault("annotations", {})
    vannotations = vmeta.get("annotations")
    if vannotations is not None:
        vannotations = _strings(vannotations)
        for key in (
            POD_NAMESPACE_ANNOTATION,
            POD_NAME_ANNOTATION,
            POD_UID_ANNOTATION,
            SERVICE_ACCOUNT_NAME_ANNOTATION,
        ):
            annotations[key] = vannotations.get(key, "")
        if LABELS_ANNOTATION in vannotations:
            annotations[LABELS_ANNOTATION] = vannotations[LABELS_ANNOTATION]
    for key, value in (
        (POD_NAMESPACE_ANNOTATION, namespace),
        (POD_NAME_ANNOTATION, str(vmeta.get("name") or "")),
        (POD_UID_ANNOTATION, str(vmeta.get("uid") or "")),
        (SERVICE_ACCOUNT_NAME_ANNOTATION, str(vspec.get("serviceAccountName") or "")),
    ):
        if not annotations.get(key):
            annotations[key] = value
    annotations.setdefault(LABELS_ANNOTATION, labels_annotation(vpod))
    if SAFE_TO_EVICT_ANNOTATION not in annotations:
        controller = next(
            (
                as_dict(o)
                for o in as_list(vmeta.get("ownerReferences"))
                if as_dict(o).get("controller") is True
            ),
            None,
        )
        annotations[SAFE_TO_EVICT_ANNOTATION] = "true" if controller is not None else "false"
        if controller is not None and controller.get("kind") == "DaemonSet":
            annotations[DAEMONSET_POD_ANNOTATION] = "true"
    if OWNER_REFERENCES_ANNOTATION not in annotations and as_list(vmeta.get("ownerReferences")):
        _owner_annotations(annotations, vpod)
    labels = metadata.setdefault("labels", {})
    for key, value in _strings(_meta(vnamespace).get("labels")).items():
        labels[names.host_label_namespace(key)] = value
    service_env = services_environment(vspec.get("enableServiceLinks"), services, kube_ip)
    aliases = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    if config.cluster_domain:
        aliases.insert(0, f"kubernetes.default.svc.{config.cluster_domain}")
    spec["hostAliases"] = [*as_list(spec.get("hostAliases")), {"ip": kube_ip, "hostnames": aliases}]
    _dns_config(config, pod, vpod, dns_ip)
    if not spec.get("hostname"):
        hostname = str(vmeta.get("name") or "")[:63].replace(".", "-")
        spec["hostname"] = hostname.removesuffix("-")
    if spec.get("subdomain"):
        if config.rewrite_hosts:
            hostname = str(spec["hostname"])
            fqdn = f"{hostname}.{spec['subdomain']}.{namespace}.svc.{config.cluster_domain}"
            rewrite_hosts(config, pod, hostname, hostname, fqdn)
        spec.pop("subdomain")
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        # The rewrite-hosts container is in the list by now, and gets the same variables.
        for container in as_list(spec.get(kind)):
            translate_container_env(names, container, namespace, service_env)
            image = str(container.get("image", ""))
            container["image"] = config.translate_image.get(image, image)
    for secret in as_list(spec.get("imagePullSecrets")):
        secret["name"] = names.host_name(str(as_dict(secret).get("name", "")), namespace)
    _translate_volumes(names, spec, namespace, vpod)
    if config.runtime_class_name:
        spec["runtimeClassName"] = config.runtime_class_name
    for constraint in as_list(spec.get("topologySpreadConstraints")):
        selector = names.host_label_selector(
            as_dict(constraint.get("labelSelector")) if "labelSelector" in constraint else None
        )
        if selector is not None:
            selector.setdefault("matchLabels", {}).update(
                {NAMESPACE_LABEL: namespace, MARKER_LABEL: names.vcluster}
            )
            constraint["labelSelector"] = selector
    _translate_affinity(names, vpod, spec)
    for toleration in config.enforced_tolerations:
        if not any(same(t, toleration) for t in as_list(spec.get("tolerations"))):
            spec["tolerations"] = [*as_list(spec.get("tolerations")), dict(toleration)]
    return pod


def pod_to_host(
    config: SyncConfig,
    vpod: Mapping[str, Any],
    vnamespace: Mapping[str, Any],
    services: Sequence[Mapping[str, Any]],
    kube_ip: str,
    dns_ip: str,
    owner: Mapping[str, Any] | None = None,
) -> JsonObject:
    """``pods/syncer.go`` ``SyncToHost`` after the checks: the translated pod with
    ``sync.fromHost.nodes.selector.labels`` over its node selector (none when the pod names
    its node)."""
    pod = translate_pod(config, vpod, vnamespace, services, kube_ip, dns_ip, owner)
    spec = pod["spec"]
    if config.node_selector and not spec.get("nodeName"):
        spec["nodeSelector"] = {**as_dict(spec.get("nodeSelector")), **config.node_selector}
    return pod


# --- pods: later changes, both ways (controllers/resources/pods/translate/diff.go) -----------


def excluded_pod_annotations() -> tuple[str, ...]:
    """``diff.go`` ``GetExcludedAnnotations`` (service account token annotations aside: the
    simulator's virtual cluster mounts no tokens)."""
    return (
        SAFE_TO_EVICT_ANNOTATION,
        OWNER_REFERENCES_ANNOTATION,
        OWNER_SET_KIND_ANNOTATION,
        POD_NAMESPACE_ANNOTATION,
        POD_NAME_ANNOTATION,
        POD_UID_ANNOTATION,
        SERVICE_ACCOUNT_NAME_ANNOTATION,
        HOSTS_REWRITTEN_ANNOTATION,
        LABELS_ANNOTATION,
    )


def _without_observed_generation(conditions: object) -> list[Any]:
    out = [dict(as_dict(c)) for c in as_list(conditions)]
    for condition in out:
        condition.pop("observedGeneration", None)
    return out


def _compared_conditions(conditions: object, strips: bool) -> object:
    return _without_observed_generation(conditions) if strips else conditions


def desired_virtual_status(
    host: Mapping[str, Any], virtual: Mapping[str, Any], *, strips_generation: bool = False
) -> JsonObject:
    """``diff.go`` ``DesiredVirtualStatus``: the host pod's status, but the virtual QoS class;
    and the virtual ``observedGeneration``s when the virtual API server (before Kubernetes
    1.34) throws them away."""
    status = copy.deepcopy(as_dict(host))
    _set(status, "qosClass", as_dict(virtual).get("qosClass"))
    if strips_generation:
        _set(status, "observedGeneration", as_dict(virtual).get("observedGeneration"))
        _set(status, "conditions", _without_observed_generation(status.get("conditions")))
    return status


def _container_images(
    host: list[Any], virtual: list[Any], translate: Mapping[str, str], skip: Sequence[str]
) -> list[Any] | None:
    """``diff.go`` ``calcContainerImageDiff``: the host containers with the virtual images,
    or None when none changed (host containers the virtual pod lacks are dropped then)."""
    out: list[Any] = []
    changed = False
    for container in host:
        name = as_dict(container).get("name")
        if name in skip:
            out.append(container)
            continue
        for other in virtual:
            if as_dict(other).get("name") != name:
                continue
            image = str(as_dict(other).get("image", ""))
            image = translate.get(image, image)
            if str(as_dict(container).get("image") or "") != image:
                out.append({**as_dict(container), "image": image})
                changed = True
            else:
                out.append(container)
            break
    return out if changed else None


def calc_spec_diff(config: SyncConfig, host: JsonObject, virtual: Mapping[str, Any]) -> None:
    """``diff.go`` ``calcSpecDiff``: what the syncer sets on the host pod on every update —
    the active deadline, container images, **the scheduling gates (the virtual pod's, so a
    gate only the host pod has goes)** and the tolerations (the virtual pod's, then those only
    the host pod has, then the enforced ones)."""
    spec = host.setdefault("spec", {})
    vspec = as_dict(virtual.get("spec"))
    _set(spec, "activeDeadlineSeconds", vspec.get("activeDeadlineSeconds"))
    images = _container_images(
        as_list(spec.get("containers")),
        as_list(vspec.get("containers")),
        config.translate_image,
        (),
    )
    if images is not None:
        spec["containers"] = images
    rewritten = as_dict(_meta(host).get("annotations")).get(HOSTS_REWRITTEN_ANNOTATION) == "true"
    images = _container_images(
        as_list(spec.get("initContainers")),
        as_list(vspec.get("initContainers")),
        config.translate_image,
        (HOSTS_CONTAINER,) if rewritten else (),
    )
    if images is not None:
        spec["initContainers"] = images
    _set(spec, "schedulingGates", copy.deepcopy(vspec.get("schedulingGates")))
    tolerations = [copy.deepcopy(t) for t in as_list(vspec.get("tolerations"))]
    for toleration in [*as_list(spec.get("tolerations")), *config.enforced_tolerations]:
        if not any(same(t, toleration) for t in tolerations):
            tolerations.append(copy.deepcopy(toleration))
    _set(spec, "tolerations", tolerations)


@dataclass
class Pair:
    """A virtual object and its host object as a reconcile sees them: as they are now, and
    as the syncer last saw or wrote them (``syncer/syncer.go`` ``getObjects``)."""

    virtual_old: JsonObject
    virtual: JsonObject
    host_old: JsonObject
    host: JsonObject


def pod_diff(
    config: SyncConfig, pair: Pair, vnamespace: Mapping[str, Any]
) -> tuple[JsonObject, JsonObject]:
    """``diff.go`` ``Diff``: (the virtual pod, the host pod) as the syncer writes them back —
    the host's status on the virtual pod (its own containers' statuses only), the spec diff on
    the host pod, labels and annotations both ways."""
    names = config.names
    virtual, host = copy.deepcopy(pair.virtual), copy.deepcopy(pair.host)
    vstatus = virtual.setdefault("status", {})
    hstatus = host.setdefault("status", {})
    strips = config.strips_observed_generation
    virtual_old_conditions = as_dict(pair.virtual_old.get("status")).get("conditions")
    # diff.go conditionsCopyBidirectional: the virtual conditions go to the host when they
    # changed (observedGeneration ignored where it is stripped); the other way the virtual
    # status is the host's anyway.
    if not same(
        _compared_conditions(virtual_old_conditions, strips),
        _compared_conditions(vstatus.get("conditions"), strips),
    ):
        _set(hstatus, "conditions", copy.deepcopy(vstatus.get("conditions")))
    vstatus = virtual["status"] = desired_virtual_status(hstatus, vstatus, strips_generation=strips)
    vspec = as_dict(virtual.get("spec"))
    for kind, statuses in (
        ("initContainers", "initContainerStatuses"),
        ("containers", "containerStatuses"),
    ):
        wanted = {as_dict(c).get("name") for c in as_list(vspec.get(kind))}
        kept = [s for s in as_list(hstatus.get(statuses)) if as_dict(s).get("name") in wanted]
        _set(vstatus, statuses, copy.deepcopy(kept))
    calc_spec_diff(config, host, virtual)
    vmeta, hmeta = virtual.setdefault("metadata", {}), host.setdefault("metadata", {})
    new_annotations, host_annotations_ = annotations_bidirectional(
        pair.virtual_old, pair.virtual, pair.host_old, pair.host, *excluded_pod_annotations()
    )
    _set(vmeta, "annotations", new_annotations)
    new_labels, host_labels = labels_bidirectional(
        names,
        _strings(_meta(pair.virtual_old).get("labels"))
        if _meta(pair.virtual_old).get("labels") is not None
        else None,
        _strings(vmeta.get("labels")) if vmeta.get("labels") is not None else None,
        _strings(_meta(pair.host_old).get("labels"))
        if _meta(pair.host_old).get("labels") is not None
        else None,
        _strings(hmeta.get("labels")) if hmeta.get("labels") is not None else None,
        exclude_prefix=NAMESPACE_LABEL_PREFIX,
    )
    _set(vmeta, "labels", new_labels)
    host_labels = {
        k: v for k, v in (host_labels or {}).items() if not k.startswith(NAMESPACE_LABEL_PREFIX)
    }
    for key, value in _strings(_meta(vnamespace).get("labels")).items():
        host_labels[names.host_label_namespace(key)] = value
    _set(hmeta, "labels", host_labels)
    host_annotations_[LABELS_ANNOTATION] = labels_annotation(virtual)
    if as_list(vmeta.get("ownerReferences")):
        _owner_annotations(host_annotations_, virtual)
    else:
        host_annotations_.pop(OWNER_REFERENCES_ANNOTATION, None)
        host_annotations_.pop(OWNER_SET_KIND_ANNOTATION, None)
    _set(hmeta, "annotations", host_annotations_)
    return virtual, host


# --- services (controllers/resources/services, server/filters/service.go) -------------------

SERVICE_BLOCK_DELETION = "vcluster.loft.sh/block-deletion"
RANCHER_ENDPOINTS_ANNOTATION = "field.cattle.io/publicEndpoints"
# services/syncer.go Sync: the spec fields that follow whichever side changed.
_SERVICE_FIELDS = (
    "type",
    "externalIPs",
    "externalName",
    "loadBalancerIP",
    "ports",
    "publishNotReadyAddresses",
    "externalTrafficPolicy",
    "sessionAffinity",
    "sessionAffinityConfig",
    "loadBalancerSourceRanges",
    "healthCheckNodePort",
)


def _labels(obj: Mapping[str, Any]) -> dict[str, str] | None:
    value = _meta(obj).get("labels")
    return _strings(value) if value is not None else None


def _selector(obj: Mapping[str, Any]) -> dict[str, str] | None:
    value = as_dict(obj.get("spec")).get("selector")
    return _strings(value) if value else None


def service_to_host(
    names: Names, virtual: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> JsonObject:
    """``services/translate.go`` ``translate``: the host Service, its selector translated
    like labels (none when the virtual one has none), no cluster IPs, families or node ports
    of its own."""
    vnamespace = str(_meta(virtual).get("namespace") or "")
    service = host_metadata(names, virtual, owner, RANCHER_ENDPOINTS_ANNOTATION)
    spec = service.setdefault("spec", {})
    _set(spec, "selector", names.host_labels_map(_selector(virtual), None, vnamespace, False))
    if spec.get("clusterIP") != "None":
        spec.pop("clusterIP", None)
    for key in ("clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        spec.pop(key, None)
    for port in as_list(spec.get("ports")):
        as_dict(port).pop("nodePort", None)
    return service


def service_created_through_proxy(
    names: Names, virtual: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> JsonObject:
    """``server/filters/service.go`` ``createService``: the host Service the virtual API's
    filter creates before the virtual one (not translated further than the metadata and the
    selector, and marked ``block-deletion`` until the syncer sees it)."""
    vnamespace = str(_meta(virtual).get("namespace") or "")
    service = host_metadata(names, virtual, owner)
    service["metadata"].setdefault("annotations", {})[SERVICE_BLOCK_DELETION] = "true"
    spec = service.setdefault("spec", {})
    _set(spec, "selector", names.host_labels_map(_selector(virtual), None, vnamespace, False))
    return service


@dataclass
class ServiceSync:
    """What one services reconcile writes: the virtual and host Services, or that the
    virtual one is recreated with the host's cluster IP (then nothing else this pass)."""

    virtual: JsonObject
    host: JsonObject
    recreate_virtual: bool = False
    wait: bool = False


def service_sync(names: Names, pair: Pair) -> ServiceSync:
    """``services/syncer.go`` ``Sync``."""
    virtual, host = copy.deepcopy(pair.virtual), copy.deepcopy(pair.host)
    vspec, hspec = virtual.setdefault("spec", {}), host.setdefault("spec", {})
    if (
        vspec.get("type") == "ExternalName"
        and hspec.get("type") != vspec.get("type")
        and hspec.get("clusterIP")
    ):
        return ServiceSync(virtual, host, wait=True)  # isSwitchingFromExternalName
    if (vspec.get("clusterIP") or "") != (hspec.get("clusterIP") or ""):
        vspec.pop("clusterIPs", None)
        _set(vspec, "clusterIP", hspec.get("clusterIP"))
        return ServiceSync(virtual, host, recreate_virtual=True)
    vold = as_dict(pair.virtual_old.get("spec"))
    hold = as_dict(pair.host_old.get("spec"))
    for key in _SERVICE_FIELDS:
        new_virtual, new_host = copy_bidirectional(
            vold.get(key), vspec.get(key), hold.get(key), hspec.get(key)
        )
        _set(vspec, key, copy.deepcopy(new_virtual))
        _set(hspec, key, copy.deepcopy(new_host))
    # ensureLoadBalancerStatus
    if hspec.get("type") != "LoadBalancer":
        hspec.pop("loadBalancerIP", None)
        status = host.setdefault("status", {})
        balancer = as_dict(status.get("loadBalancer"))
        balancer.pop("ingress", None)
        _set(status, "loadBalancer", balancer)
    _set(virtual, "status", copy.deepcopy(host.get("status")))
    _metadata_both_ways(
        names,
        pair,
        virtual,
        host,
        RANCHER_ENDPOINTS_ANNOTATION,
        drop_from_host=SERVICE_BLOCK_DELETION,
    )
    vmeta = virtual["metadata"]
    if not same(vold.get("selector"), vspec.get("selector")) or same(
        hold.get("selector"), hspec.get("selector")
    ):
        namespace = str(vmeta.get("namespace") or "")
        _set(
            hspec,
            "selector",
            names.host_labels_map(_selector(virtual), _selector(host), namespace, False),
        )
    else:
        _set(vspec, "selector", names.virtual_labels_map(_selector(host), _selector(virtual)))
    return ServiceSync(virtual, host)


# --- endpoints and endpoint slices (controllers/resources/endpoints, endpointslices) ---------

LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"


def _target_ref(names: Names, ref: JsonObject | None, *, clear: bool) -> None:
    """``endpoints/translate.go`` ``translateSpec``: a pod reference names the host pod."""
    if not ref or ref.get("kind") != "Pod":
        return
    ref["name"] = names.host_name(str(ref.get("name", "")), str(ref.get("namespace", "")))
    ref["namespace"] = names.namespace if ref.get("namespace") else ""
    if clear:
        ref.pop("uid", None)
        ref.pop("resourceVersion", None)
    _set(ref, "namespace", ref.get("namespace"))


def _endpoint_subsets(names: Names, virtual: Mapping[str, Any]) -> list[Any]:
    subsets = copy.deepcopy(as_list(virtual.get("subsets")))
    for subset in subsets:
        for key in ("addresses", "notReadyAddresses"):
            for address in as_list(as_dict(subset).get(key)):
                _target_ref(names, as_dict(address.get("targetRef")) or None, clear=True)
    return subsets


def endpoints_to_host(
    names: Names, virtual: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> JsonObject:
    """``endpoints/translate.go`` ``translate``: the subsets verbatim, addresses included."""
    endpoints = host_metadata(names, virtual, owner, LEADER_ANNOTATION)
    _set(endpoints, "subsets", _endpoint_subsets(names, virtual))
    return endpoints


def endpoints_sync(names: Names, pair: Pair) -> tuple[JsonObject, JsonObject]:
    """``endpoints/syncer.go`` ``Sync``: the virtual subsets on the host, labels and
    annotations both ways."""
    virtual, host = copy.deepcopy(pair.virtual), copy.deepcopy(pair.host)
    _set(host, "subsets", _endpoint_subsets(names, virtual))
    _metadata_both_ways(names, pair, virtual, host, LEADER_ANNOTATION)
    return virtual, host


def _metadata_both_ways(
    names: Names,
    pair: Pair,
    virtual: JsonObject,
    host: JsonObject,
    *excluded: str,
    drop_from_host: str = "",
) -> None:
    vmeta, hmeta = virtual.setdefault("metadata", {}), host.setdefault("metadata", {})
    new_annotations, new_host_annotations = annotations_bidirectional(
        pair.virtual_old, pair.virtual, pair.host_old, pair.host, *excluded
    )
    _set(vmeta, "annotations", new_annotations)
    if drop_from_host:
        new_host_annotations.pop(drop_from_host, None)
    _set(hmeta, "annotations", new_host_annotations)
    new_labels, new_host_labels = labels_bidirectional(
        names,
        _labels(pair.virtual_old),
        _labels(pair.virtual),
        _labels(pair.host_old),
        _labels(pair.host),
    )
    _set(vmeta, "labels", new_labels)
    _set(hmeta, "labels", new_host_labels)


def _slice_endpoints(names: Names, virtual: Mapping[str, Any]) -> list[Any]:
    endpoints = copy.deepcopy(as_list(virtual.get("endpoints")))
    for endpoint in endpoints:
        _target_ref(names, as_dict(as_dict(endpoint).get("targetRef")) or None, clear=False)
    return endpoints


def endpoint_slice_to_host(
    names: Names, virtual: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> JsonObject:
    """``endpointslices/translate.go`` ``translate``: the endpoints verbatim, the
    ``kubernetes.io/service-name`` label naming the host Service (``translateSvcName``)."""
    endpoint_slice = host_metadata(names, virtual, owner, LEADER_ANNOTATION)
    labels = endpoint_slice["metadata"].setdefault("labels", {})
    service = labels.get(SERVICE_NAME_LABEL, "")
    labels[SERVICE_NAME_LABEL] = (
        f"{service}-x-{labels.get(NAMESPACE_LABEL, '')}-x-{labels.get(MARKER_LABEL, '')}"
    )
    _set(endpoint_slice, "endpoints", _slice_endpoints(names, virtual))
    return endpoint_slice


def endpoint_slice_sync(names: Names, pair: Pair) -> tuple[JsonObject, JsonObject]:
    """``endpointslices/syncer.go`` ``Sync``."""
    virtual, host = copy.deepcopy(pair.virtual), copy.deepcopy(pair.host)
    _set(host, "endpoints", _slice_endpoints(names, virtual))
    _metadata_both_ways(names, pair, virtual, host, LEADER_ANNOTATION)
    return virtual, host


def endpoints_wanted(service: Mapping[str, Any] | None) -> bool:
    """``endpoints/syncer.go`` (and ``endpointslices``) ``ReconcileStart``: synced only for a
    virtual Service that exists and has no selector."""
    return service is not None and not _selector(service)


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


# --- the controller --------------------------------------------------------------------------

DNS_SERVICE = ("kube-system", "kube-dns")
# How often one request is reconciled again in a pass (a requeue, the syncer's own write).
REQUEUES = 4


class HostRefused(Refused):
    """The host API server refused a write of the syncer; the message is its own (a webhook's
    refusal is a 400 to the client, apiserver ``webhook/errors/statuserror.go``)."""

    def __init__(self, message: str, code: int = 400, reason: str = "BadRequest") -> None:
        super().__init__(code, reason, message)


@dataclass(frozen=True)
class SyncedKind:
    """A kind one of the syncers takes to the host: its group and kind in the virtual API,
    its resource in the host's."""

    group: str
    kind: str
    resource: Resource


class Syncer:
    """The syncers of every running tenant cluster, one pass per tick: Services first (the
    pods syncer waits for the DNS Service's host address), then Endpoints and EndpointSlices,
    then pods. Host writes go through the host's admission as the syncer's service account;
    a refused one is a ``SyncError`` event on the virtual object and is tried again next pass.
    """

    def __init__(
        self,
        store: Store,
        cluster: Cluster,
        clusters: Callable[[], Iterable[VirtualCluster]],
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.clusters = clusters
        # What each reconcile last saw or wrote: (host namespace, release, kind, virtual
        # namespace, name) -> (virtual, host); the object cache of syncer/syncer.go.
        self._seen: dict[tuple[str, ...], tuple[JsonObject | None, JsonObject | None]] = {}

    def attach(self, vcluster: VirtualCluster) -> None:
        """Put the syncer's Service filter in front of a virtual API."""
        vcluster.service_proxy = partial(self.create_service, vcluster)

    def tick(self, now: float) -> None:
        running = list(self.clusters())
        # The object cache is the syncer's memory (pkg/syncer/synccontext/cache.go, a map per
        # controller): a control plane that stopped (asleep, or its pod deleted) starts again
        # without it, so a host object that went meanwhile is no ``HostOld`` then.
        alive = {(vcluster.namespace, vcluster.release) for vcluster in running}
        for key in [key for key in self._seen if (key[0], key[1]) not in alive]:
            del self._seen[key]
        for vcluster in running:
            config = sync_config(vcluster.values, vcluster.namespace, vcluster.release)
            self.attach(vcluster)
            with self.store.lock, vcluster.lock:
                owner = self.store.get(SERVICES, vcluster.namespace, vcluster.release)
                if config.services:
                    self.reconcile(vcluster, config, SERVICE_KIND, owner, now)
                if config.endpoints:
                    self.reconcile(vcluster, config, ENDPOINTS_KIND, owner, now)
                if config.endpoint_slices:
                    self.reconcile(vcluster, config, ENDPOINT_SLICE_KIND, owner, now)
                if config.pods:
                    self.reconcile(vcluster, config, POD_KIND, owner, now)

    # --- the generic controller (syncer/syncer.go Reconcile) -------------------------------

    def _key(
        self, config: SyncConfig, kind: SyncedKind, namespace: str, name: str
    ) -> tuple[str, ...]:
        return (config.names.namespace, config.names.vcluster, kind.kind, namespace, name)

    def reconcile(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        kind: SyncedKind,
        owner: JsonObject | None,
        now: float,
    ) -> None:
        """One controller's pass over ``kind``: every virtual object, and every host object
        of this cluster's (by its marker label and ``object-*`` annotations)."""
        names = config.names
        virtual = {
            (str(_meta(o).get("namespace", "")), str(_meta(o).get("name", ""))): o
            for o in vcluster.listed(kind.group, kind.kind)
        }
        requests = set(virtual)
        for host in self.store.list(kind.resource, names.namespace):
            annotations = as_dict(_meta(host).get("annotations"))
            served = {"apiVersion": kind.resource.api_version, "kind": kind.kind}
            if (
                as_dict(_meta(host).get("labels")).get(MARKER_LABEL) == names.vcluster
                and annotations.get(NAME_ANNOTATION)
                and annotations.get(KIND_ANNOTATION) == group_version_kind(served)
            ):
                requests.add(
                    (
                        str(annotations.get(NAMESPACE_ANNOTATION, "")),
                        str(annotations[NAME_ANNOTATION]),
                    )
                )
        for namespace, name in sorted(requests):
            try:
                # A requeue (or the watch event of the syncer's own write) comes back within
                # milliseconds: within the same pass here.
                for _ in range(REQUEUES):
                    vobj = vcluster.get(kind.group, kind.kind, namespace, name)
                    if not self._reconcile_one(
                        vcluster, config, kind, owner, namespace, name, vobj, now
                    ):
                        break
            except HostRefused as exc:
                logger.info(
                    "syncer %s/%s: %s %s/%s: %s",
                    names.namespace,
                    names.vcluster,
                    kind.kind,
                    namespace,
                    name,
                    exc.message,
                )

    def _reconcile_one(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        kind: SyncedKind,
        owner: JsonObject | None,
        namespace: str,
        name: str,
        vobj: JsonObject | None,
        now: float,
    ) -> bool:
        """One reconcile (``syncer/syncer.go`` ``Reconcile``); whether to run again."""
        names = config.names
        if kind in (ENDPOINTS_KIND, ENDPOINT_SLICE_KIND) and not self.endpoints_start(
            vcluster, config, kind, namespace, name, vobj
        ):
            return False
        key = self._key(config, kind, namespace, name)
        host_key = (names.namespace, names.host_name(name, namespace))
        host = self.store.get(kind.resource, *host_key)
        seen_virtual, seen_host = self._seen.get(key, (None, None))
        if vobj is not None and host is not None:
            if kind is not SERVICE_KIND:
                uid = as_dict(_meta(host).get("annotations")).get(UID_ANNOTATION)
                if uid and uid != _meta(vobj).get("uid"):
                    self._delete_host(kind, host, now)  # "virtual object uid is different"
                    self._seen.pop(key, None)
                    return True
            virtual_old = seen_virtual
            if virtual_old is None:
                # syncer.go getObjects: labels synced once as if new
                virtual_old = copy.deepcopy(vobj)
                virtual_old.setdefault("metadata", {}).pop("labels", None)
            pair = Pair(virtual_old, vobj, seen_host or host, host)
            return self._sync(vcluster, config, kind, key, pair, now)
        elif vobj is not None:
            if seen_host is not None or (
                kind is POD_KIND and as_dict(vobj.get("status")).get("startTime")
            ):
                # SyncToHost with HostOld: the host object went, so does the virtual one.
                vcluster.remove(vobj)
                self._seen.pop(key, None)
                return False
            return self._to_host(vcluster, config, kind, owner, key, vobj, now)
        elif host is not None:
            # SyncToVirtual: the virtual object went (or was never there): so does the host's.
            self._delete_host(kind, host, now)
            self._seen.pop(key, None)
        return False

    def endpoints_start(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        kind: SyncedKind,
        namespace: str,
        name: str,
        vobj: JsonObject | None,
    ) -> bool:
        """``endpoints/syncer.go``, ``endpointslices/syncer.go`` ``ReconcileStart``: whether
        to go on; host objects the host's own controllers should own are deleted."""
        names = config.names
        host_name_ = names.host_name(name, namespace)
        if kind is ENDPOINT_SLICE_KIND:
            if vobj is None:
                host = self.store.get(kind.resource, names.namespace, host_name_)
                if host is not None:
                    self.store.delete(kind.resource, names.namespace, host_name_)
                return False
            service_name = _strings(_meta(vobj).get("labels")).get(SERVICE_NAME_LABEL)
            if service_name is None:
                return False  # "unable to retrieve label 'kubernetes.io/service-name'"
        else:
            service_name = name
        if (namespace, service_name) == ("default", "kubernetes"):
            return False
        service = vcluster.get("", "Service", namespace, service_name)
        if service is None:
            return False
        host = self.store.get(kind.resource, names.namespace, host_name_)
        managed = host is not None and bool(
            as_dict(_meta(host).get("annotations")).get(NAME_ANNOTATION)
        )
        if not endpoints_wanted(service):
            if managed:
                self.store.delete(kind.resource, names.namespace, host_name_)
            return False
        if host is not None and not managed:
            self.store.delete(kind.resource, names.namespace, host_name_)
        return True

    # --- SyncToHost ----------------------------------------------------------------------

    def _to_host(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        kind: SyncedKind,
        owner: JsonObject | None,
        key: tuple[str, ...],
        vobj: JsonObject,
        now: float,
    ) -> bool:
        """``SyncToHost``: create the host object as the syncer; whether to reconcile again
        (its watch sees the new host object at once)."""
        names = config.names
        if kind is POD_KIND:
            built = self._pod_to_host(vcluster, config, owner, vobj, now)
            if built is None:
                return False
            try:
                created = self.cluster.create_pod(
                    built, "", now, name=_meta(built)["name"], requester=config.requester
                )
            except Rejected as exc:
                self._refused(
                    vcluster, config, vobj, "Error syncing to host cluster: create object", exc, now
                )
                raise HostRefused(str(exc)) from exc
        else:
            if kind is SERVICE_KIND:
                built = service_to_host(names, vobj, owner if config.set_owner else None)
            elif kind is ENDPOINTS_KIND:
                built = endpoints_to_host(names, vobj, owner if config.set_owner else None)
            else:
                built = endpoint_slice_to_host(names, vobj, owner if config.set_owner else None)
            try:
                created = self._write_host(config, kind, built, None, now)
            except HostRefused as exc:
                self._refused(
                    vcluster, config, vobj, "Error syncing to host cluster: create object", exc, now
                )
                raise
        # patcher/apply.go: the cache holds the object as sent, with the server's uid.
        sent = copy.deepcopy(built)
        sent["metadata"]["uid"] = _meta(created).get("uid")
        self._seen[key] = (copy.deepcopy(vobj), sent)
        return True

    def _pod_to_host(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        owner: JsonObject | None,
        vpod: JsonObject,
        now: float,
    ) -> JsonObject | None:
        """``pods/syncer.go`` ``SyncToHost`` up to the create: the virtual pod checked against
        ``policies.podSecurityStandard``, then translated with the addresses it needs."""
        if config.pod_security_standard and not self._pod_security(vcluster, config, vpod, now):
            return None
        namespace = str(_meta(vpod).get("namespace", ""))
        vnamespace = vcluster.get("", "Namespace", "", namespace)
        kube = self.store.get(SERVICES, config.names.namespace, config.names.vcluster)
        dns = self.store.get(
            SERVICES, config.names.namespace, config.names.host_name(DNS_SERVICE[1], DNS_SERVICE[0])
        )
        if vnamespace is None or kube is None or dns is None:
            return None  # translate.go findKubernetesIP / "waiting for DNS service IP"
        services = vcluster.listed("", "Service", namespace)
        return pod_to_host(
            config,
            vpod,
            vnamespace,
            services,
            str(as_dict(kube.get("spec")).get("clusterIP", "")),
            str(as_dict(dns.get("spec")).get("clusterIP", "")),
            owner if config.set_owner else None,
        )

    def _pod_security(
        self, vcluster: VirtualCluster, config: SyncConfig, vpod: JsonObject, now: float
    ) -> bool:
        """``pods/validate_pod_security.go``: the virtual pod against the standard; a pod that
        fails it is not synced, with a ``SyncError`` event."""
        level = config.pod_security_standard
        problems = pod_security_problems(vpod, level)
        if problems:
            name = str(_meta(vpod).get("name", ""))
            message = f'violates PodSecurity "{level}:latest": ' + ", ".join(problems)
            vcluster.record_event(
                vpod,
                "Warning",
                "SyncError",
                "SyncPod",
                f"Pod {name} is forbidden: {message}",
                "pod-syncer",
                now,
            )
        return not problems

    # --- Sync ------------------------------------------------------------------------------

    def _sync(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        kind: SyncedKind,
        key: tuple[str, ...],
        pair: Pair,
        now: float,
    ) -> bool:
        """``Sync``: both objects exist; whether to reconcile again (a requeue, or the watch
        event of a write)."""
        names = config.names
        if kind is POD_KIND:
            bound = self._pod_node(vcluster, pair)
            if bound is not None:
                return bound
            if config.pod_security_standard and not self._pod_security(
                vcluster, config, pair.virtual, now
            ):
                return False
            vnamespace = vcluster.get(
                "", "Namespace", "", str(_meta(pair.virtual).get("namespace", ""))
            )
            if vnamespace is None:
                return False
            virtual, host = pod_diff(config, pair, vnamespace)
        elif kind is SERVICE_KIND:
            result = service_sync(names, pair)
            if result.wait:
                return False
            if result.recreate_virtual:
                # services/syncer.go recreateService: deleted and created with the host's IP.
                vcluster.remove(pair.virtual)
                fresh = copy.deepcopy(result.virtual)
                for field_ in ("uid", "resourceVersion", "creationTimestamp"):
                    fresh.setdefault("metadata", {}).pop(field_, None)
                vcluster.create(fresh, now)
                return True
            virtual, host = result.virtual, result.host
        elif kind is ENDPOINTS_KIND:
            virtual, host = endpoints_sync(names, pair)
        else:
            virtual, host = endpoint_slice_sync(names, pair)
        written_virtual = pair.virtual
        if not same(virtual, pair.virtual):
            written_virtual = vcluster.write(virtual)
        written_host = pair.host
        try:
            if not same(
                {k: v for k, v in host.items() if k != "status"},
                {k: v for k, v in pair.host.items() if k != "status"},
            ):
                written_host = self._update_host(config, kind, host, pair.host, now)
            if not same(host.get("status"), pair.host.get("status")):
                written_host = self._host_status(kind, host) or written_host
        except HostRefused as exc:
            self._refused(
                vcluster,
                config,
                pair.virtual,
                "Error syncing: patch host object: update object",
                exc,
                now,
            )
            # The controller requeues; the cache keeps the host as it was last seen.
            self._seen[key] = (copy.deepcopy(written_virtual), copy.deepcopy(pair.host_old))
            raise
        self._seen[key] = (copy.deepcopy(written_virtual), copy.deepcopy(written_host))
        return written_virtual is not pair.virtual or written_host is not pair.host

    def _pod_node(self, vcluster: VirtualCluster, pair: Pair) -> bool | None:
        """``pods/syncer.go`` ``ensureNode``: the virtual pod is bound to the host pod's node
        (a fake node in the virtual cluster, not modelled as an object) and the reconcile
        requeued (True); a virtual pod on another node is deleted (False); None: go on."""
        node = as_dict(pair.host.get("spec")).get("nodeName")
        vnode = as_dict(pair.virtual.get("spec")).get("nodeName")
        if (not node and vnode) or (node and vnode and vnode != node):
            vcluster.remove(pair.virtual)  # "node name is different between the two"
            return False
        if node and not vnode:
            bound = copy.deepcopy(pair.virtual)
            bound.setdefault("spec", {})["nodeName"] = node
            vcluster.write(bound)
            return True
        return None

    # --- host writes -----------------------------------------------------------------------

    def _write_host(
        self,
        config: SyncConfig,
        kind: SyncedKind,
        obj: JsonObject,
        old: JsonObject | None,
        now: float,
    ) -> JsonObject:
        """Create or update a host Service, Endpoints or EndpointSlice as the syncer: Kyverno's
        webhooks, then a ClusterIP for a new Service that wants one."""
        operation = "CREATE" if old is None else "UPDATE"
        try:
            admitted = admit_object(
                self.store,
                obj,
                kind.resource,
                requester=config.requester,
                operation=operation,
                old=old,
            )
        except Rejected as exc:
            raise HostRefused(str(exc)) from exc
        if kind is SERVICE_KIND and old is None:
            spec = admitted.setdefault("spec", {})
            if spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
                address = cluster_ip(*key_of(admitted))
                spec["clusterIP"], spec["clusterIPs"] = address, [address]
            _set(spec, "type", spec.get("type") or "ClusterIP")
        return self.store.apply(kind.resource, admitted, now)

    def _update_host(
        self, config: SyncConfig, kind: SyncedKind, host: JsonObject, old: JsonObject, now: float
    ) -> JsonObject:
        if kind is POD_KIND:
            try:
                return self.cluster.update_pod(host, now, requester=config.requester)
            except Rejected as exc:
                raise HostRefused(str(exc)) from exc
        current = self.store.get(kind.resource, *key_of(host))
        return self._write_host(config, kind, host, current or old, now)

    def _host_status(self, kind: SyncedKind, host: JsonObject) -> JsonObject | None:
        def change(obj: JsonObject) -> None:
            _set(obj, "status", copy.deepcopy(host.get("status")))

        return self.store.mutate(kind.resource, *key_of(host), change)

    def _delete_host(self, kind: SyncedKind, host: JsonObject, now: float) -> None:
        namespace, name = key_of(host)
        if kind is POD_KIND:
            with contextlib.suppress(LookupError):
                self.cluster.delete_pod(namespace, name, now, recreate=False)
        else:
            self.store.delete(kind.resource, namespace, name)

    def _refused(
        self,
        vcluster: VirtualCluster,
        config: SyncConfig,
        vobj: JsonObject,
        what: str,
        exc: Exception,
        now: float,
    ) -> None:
        """The ``SyncError`` event the syncer records on the virtual object, sanitised."""
        names = config.names
        meta = _meta(vobj)
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        note = sanitised(
            f"{what}: {exc}", names.vcluster, name, namespace, names.host_name(name, namespace)
        )
        kind = str(vobj.get("kind", ""))
        vcluster.record_event(
            vobj, "Warning", "SyncError", f"Sync{kind}", note, f"{kind.lower()}-syncer", now
        )

    # --- the virtual API's Service filter --------------------------------------------------

    def create_service(
        self, vcluster: VirtualCluster, service: JsonObject, now: float
    ) -> JsonObject:
        """``server/filters/service.go`` ``createService``: the host Service first, as the
        syncer (``HostRefused`` with the host's message), then the virtual one with its
        cluster IP, ports and status; the syncer takes it from there."""
        config = sync_config(vcluster.values, vcluster.namespace, vcluster.release)
        owner = self.store.get(SERVICES, vcluster.namespace, vcluster.release)
        with self.store.lock:
            host = service_created_through_proxy(
                config.names, service, owner if config.set_owner else None
            )
            if self.store.get(SERVICES, *key_of(host)) is not None:
                raise HostRefused(f'services "{_meta(service).get("name")}" already exists')
            created = self._write_host(config, SERVICE_KIND, host, None, now)
        spec = service.setdefault("spec", {})
        hspec = as_dict(created.get("spec"))
        for key in ("clusterIP", "clusterIPs", "ports", "healthCheckNodePort"):
            _set(spec, key, copy.deepcopy(hspec.get(key)))
        _set(service, "status", copy.deepcopy(created.get("status")))
        return service


SERVICE_KIND = SyncedKind("", "Service", SERVICES)
ENDPOINTS_KIND = SyncedKind("", "Endpoints", ENDPOINTS)
ENDPOINT_SLICE_KIND = SyncedKind("discovery.k8s.io", "EndpointSlice", ENDPOINT_SLICES)
POD_KIND = SyncedKind("", "Pod", PODS)
