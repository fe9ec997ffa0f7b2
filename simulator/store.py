"""The simulator's object store: Kubernetes objects as plain JSON dicts, plus the query and
patch semantics of the API server (label and field selectors, merge and JSON patches).

Every write bumps one global resourceVersion, as etcd's revision does, so a list's
``metadata.resourceVersion`` moves whenever anything changed. Every write is also kept in a
bounded event log (ADDED, MODIFIED, DELETED with the object as written) that watches read
from: like etcd's compacted history, only the last ``watch_window`` events are kept, and a
watch from an older resourceVersion is told it expired (server.py answers 410). Objects are
copied in and out:
callers never hold a reference to the stored dict, so the HTTP threads, the tick thread and
tests cannot corrupt each other's view. Compound operations hold ``Store.lock`` (reentrant).
"""

from __future__ import annotations

import builtins
import json
import random
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JsonObject = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass(frozen=True)
class Resource:
    """One REST resource the simulator serves."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How API server messages name the resource: ``pods``, ``helmreleases.helm...``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()


NODES = Resource("nodes", "Node", namespaced=False)
NAMESPACES = Resource("namespaces", "Namespace", namespaced=False)
PODS = Resource("pods", "Pod")
SECRETS = Resource("secrets", "Secret")
KUSTOMIZATIONS = Resource("kustomizations", "Kustomization", "kustomize.toolkit.fluxcd.io", "v1")
HELM_RELEASES = Resource("helmreleases", "HelmRelease", "helm.toolkit.fluxcd.io", "v2")
GIT_REPOSITORIES = Resource("gitrepositories", "GitRepository", "source.toolkit.fluxcd.io", "v1")
INFERENCE_SERVICES = Resource(
    "inferenceservices", "InferenceService", "serving.kserve.io", "v1beta1"
)
HTTP_ROUTES = Resource("httproutes", "HTTPRoute", "gateway.networking.k8s.io", "v1")
CLAIM_TEMPLATES = Resource(
    "resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io", "v1"
)
# What admission reads: quotas and limit ranges, Kueue's queues and flavors, KServe's storage
# containers. Flux applies them like any object; the chart model creates the vCluster's.
RESOURCE_QUOTAS = Resource("resourcequotas", "ResourceQuota")
LIMIT_RANGES = Resource("limitranges", "LimitRange")
LOCAL_QUEUES = Resource("localqueues", "LocalQueue", "kueue.x-k8s.io", "v1beta2")
CLUSTER_QUEUES = Resource(
    "clusterqueues", "ClusterQueue", "kueue.x-k8s.io", "v1beta2", namespaced=False
)
RESOURCE_FLAVORS = Resource(
    "resourceflavors", "ResourceFlavor", "kueue.x-k8s.io", "v1beta2", namespaced=False
)
TOPOLOGIES = Resource("topologies", "Topology", "kueue.x-k8s.io", "v1beta2", namespaced=False)
# Run-once work and what Kueue keeps of it: batch/v1 Jobs and JobSets (multi-node), the
# Workload Kueue creates for each, and Cohorts (the tree ClusterQueues borrow in).
JOBS = Resource("jobs", "Job", "batch", "v1")
JOBSETS = Resource("jobsets", "JobSet", "jobset.x-k8s.io", "v1alpha2")
WORKLOADS = Resource("workloads", "Workload", "kueue.x-k8s.io", "v1beta2")
COHORTS = Resource("cohorts", "Cohort", "kueue.x-k8s.io", "v1beta2", namespaced=False)
# What a Workload's priority comes from: the pods' PriorityClass (Flux applies the ones the
# portal renders) or a WorkloadPriorityClass named by the job's label.
PRIORITY_CLASSES = Resource(
    "priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", namespaced=False
)
WORKLOAD_PRIORITY_CLASSES = Resource(
    "workloadpriorityclasses",
    "WorkloadPriorityClass",
    "kueue.x-k8s.io",
    "v1beta2",
    namespaced=False,
)
# RBAC as Flux applies it from the portal's repository; the API server authorises
# impersonated requests with it (``rbac.py``).
ROLES = Resource("roles", "Role", "rbac.authorization.k8s.io", "v1")
ROLE_BINDINGS = Resource("rolebindings", "RoleBinding", "rbac.authorization.k8s.io", "v1")
CLUSTER_ROLES = Resource(
    "clusterroles", "ClusterRole", "rbac.authorization.k8s.io", "v1", namespaced=False
)
CLUSTER_ROLE_BINDINGS = Resource(
    "clusterrolebindings",
    "ClusterRoleBinding",
    "rbac.authorization.k8s.io",
    "v1",
    namespaced=False,
)
STORAGE_CONTAINERS = Resource(
    "clusterstoragecontainers",
    "ClusterStorageContainer",
    "serving.kserve.io",
    "v1alpha1",
    namespaced=False,
)
# The Kyverno policies Flux applies, which the simulator's Kyverno enforces (``kyverno.py``).
POLICIES = Resource("policies", "Policy", "kyverno.io", "v1")
CLUSTER_POLICIES = Resource(
    "clusterpolicies", "ClusterPolicy", "kyverno.io", "v1", namespaced=False
)
# What a tenant cluster's syncer writes into the host namespace (``syncer.py``), besides pods;
# the chart's own Service of the control plane.
SERVICES = Resource("services", "Service")
ENDPOINTS = Resource("endpoints", "Endpoints")
ENDPOINT_SLICES = Resource("endpointslices", "EndpointSlice", "discovery.k8s.io", "v1")
# Budgets the eviction subresource honours (``disruption.py``).
PDBS = Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1")
# Served for what the platform configures through one (Kueue's manager configuration).
CONFIG_MAPS = Resource("configmaps", "ConfigMap")
# Served from the simulator's CRD directory (``SimConfig.crd_dir``), as the API server serves
# the CRDs installed in it: the portal builds its schema registry from them.
CRDS = Resource(
    "customresourcedefinitions",
    "CustomResourceDefinition",
    "apiextensions.k8s.io",
    "v1",
    namespaced=False,
)
# Multus's attachments (simulator/multus.py), and the core Events it and the kubelet record.
NADS = Resource(
    "network-attachment-definitions", "NetworkAttachmentDefinition", "k8s.cni.cncf.io", "v1"
)
EVENTS = Resource("events", "Event")
RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        NODES,
        NAMESPACES,
        PODS,
        SECRETS,
        KUSTOMIZATIONS,
        HELM_RELEASES,
        GIT_REPOSITORIES,
        INFERENCE_SERVICES,
        HTTP_ROUTES,
        CLAIM_TEMPLATES,
        RESOURCE_QUOTAS,
        LIMIT_RANGES,
        LOCAL_QUEUES,
        CLUSTER_QUEUES,
        RESOURCE_FLAVORS,
        TOPOLOGIES,
        JOBS,
        JOBSETS,
        WORKLOADS,
        COHORTS,
        PRIORITY_CLASSES,
        WORKLOAD_PRIORITY_CLASSES,
        ROLES,
        ROLE_BINDINGS,
        CLUSTER_ROLES,
        CLUSTER_ROLE_BINDINGS,
        STORAGE_CONTAINERS,
        POLICIES,
        CLUSTER_POLICIES,
        CRDS,
        SERVICES,
        ENDPOINTS,
        ENDPOINT_SLICES,
        PDBS,
        CONFIG_MAPS,
        NADS,
        EVENTS,
    )
}


def resource_of(api_version: str, kind: str) -> Resource | None:
    """The served resource for an object's ``apiVersion`` and ``kind``, if any."""
    group, _, version = api_version.rpartition("/")
    return next(
        (r for r in RESOURCES.values() if (r.group, r.version, r.kind) == (group, version, kind)),
        None,
    )


def timestamp(now: float) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes times."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_dict(value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (for malformed stored objects)."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def key_of(obj: Mapping[str, Any]) -> Key:
    metadata = as_dict(obj.get("metadata"))
    namespace = metadata.get("namespace")
    name = metadata.get("name")
    return (namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")


@dataclass(frozen=True)
class WatchEvent:
    """One write as a watch reports it: the object after the write (before, for DELETED)."""

    version: int
    plural: str
    type: str  # ADDED | MODIFIED | DELETED
    object: JsonObject


class Expired(Exception):
    """The asked resourceVersion is older than the kept event log."""

    def __init__(self, asked: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {asked} ({oldest})")
        self.asked = asked
        self.oldest = oldest


WATCH_WINDOW = 10_000


def _clone(obj: Any) -> Any:
    # JSON round trip: the objects are JSON by construction and this is faster than deepcopy.
    return json.loads(json.dumps(obj))


class Store:
    """Thread-safe map of resource -> (namespace, name) -> object."""

    def __init__(self, seed: int = 0, watch_window: int = WATCH_WINDOW) -> None:
        self.lock = threading.RLock()
        # Watches wait on this for the next write (it shares the store's lock).
        self.changed = threading.Condition(self.lock)
        self._objects: dict[str, dict[Key, JsonObject]] = {plural: {} for plural in RESOURCES}
        self._version = 0
        self._events: deque[WatchEvent] = deque(maxlen=max(1, watch_window))
        # The newest version no longer in the log: a watch from before it missed events.
        self._compacted = 0
        self._listeners: list[Callable[[WatchEvent], None]] = []
        # Seeded, so a simulator started twice with the same config hands out the same uids.
        self._random = random.Random(seed)  # noqa: S311 (uids, not secrets)
        # Webhook Services ("<namespace>/<name>") the API server cannot reach, a fault:
        # admission that calls one of them fails (``admission.admit_object``).
        self.unreachable_services: set[str] = set()

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._version)

    def new_uid(self) -> str:
        with self.lock:
            return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    def _log(self, plural: str, type_: str, obj: JsonObject) -> None:
        """Keep the write that just bumped the version for watches, and wake them."""
        if len(self._events) == self._events.maxlen:
            self._compacted = self._events[0].version
        event = WatchEvent(self._version, plural, type_, _clone(obj))
        self._events.append(event)
        for listener in self._listeners:
            listener(event)
        self.changed.notify_all()

    def listen(self, listener: Callable[[WatchEvent], None]) -> None:
        """Call ``listener`` with every write, under the store's lock: it must only queue."""
        with self.lock:
            self._listeners.append(listener)

    def compact(self) -> None:
        """Forget the event log, as etcd's compaction does (a test forces a 410 this way)."""
        with self.lock:
            if self._events:
                self._compacted = self._events[-1].version
            self._events.clear()

    def events_since(self, version: int) -> tuple[list[WatchEvent], int]:
        """The writes after ``version`` and the version they bring a reader to; raises
        ``Expired`` when some of them are no longer kept."""
        with self.lock:
            if version < self._compacted:
                raise Expired(version, self._compacted + 1)
            return [e for e in self._events if e.version > version], self._version

    def get(self, resource: Resource, namespace: str, name: str) -> JsonObject | None:
        with self.lock:
            obj = self._objects[resource.plural].get((namespace, name))
            return _clone(obj) if obj is not None else None

    def list(self, resource: Resource, namespace: str | None = None) -> list[JsonObject]:
        """Objects sorted by namespace and name; ``namespace`` None lists all namespaces."""
        with self.lock:
            items = self._objects[resource.plural]
            return [
                _clone(items[key])
                for key in sorted(items)
                if namespace is None or key[0] == namespace
            ]

    def owned_by(
        self, uids: Collection[str], namespace: str | None = None
    ) -> builtins.list[tuple[str, JsonObject]]:
        """(plural, object) of every object (in ``namespace``; None: anywhere) whose
        ``ownerReferences`` name one of ``uids``, in resource then key order."""
        wanted = set(uids)
        found: list[tuple[str, JsonObject]] = []
        with self.lock:
            for plural, items in self._objects.items():
                for key in sorted(items):
                    if namespace is not None and key[0] != namespace:
                        continue
                    references = as_list(as_dict(items[key].get("metadata")).get("ownerReferences"))
                    if any(as_dict(r).get("uid") in wanted for r in references):
                        found.append((plural, _clone(items[key])))
        return found

    def apply(self, resource: Resource, obj: Mapping[str, Any], now: float) -> JsonObject:
        """Create or update like a server-side apply of the whole object.

        A new object gets uid, creationTimestamp and generation 1; an existing one keeps them
        and its status (unless ``obj`` has one), and its generation grows when the spec changed.
        """
        with self.lock:
            new = _clone(dict(obj))
            new["apiVersion"] = resource.api_version
            new["kind"] = resource.kind
            metadata = new.setdefault("metadata", {})
            if not resource.namespaced:
                metadata.pop("namespace", None)
            key = key_of(new)
            old = self._objects[resource.plural].get(key)
            if old is None:
                metadata["uid"] = self.new_uid()
                metadata["creationTimestamp"] = timestamp(now)
                metadata["generation"] = 1
            else:
                old_meta = as_dict(old.get("metadata"))
                for field in ("uid", "creationTimestamp", "generation", "finalizers"):
                    if field in old_meta and field not in metadata:
                        metadata[field] = old_meta[field]
                if "status" not in new and "status" in old:
                    new["status"] = old["status"]
                if new.get("spec") != old.get("spec"):
                    metadata["generation"] = int(old_meta.get("generation") or 0) + 1
            metadata["resourceVersion"] = self._bump()
            self._objects[resource.plural][key] = new
            self._log(resource.plural, "ADDED" if old is None else "MODIFIED", new)
            return _clone(new)

    def put_raw(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Store ``obj`` exactly as given (tests inject malformed objects this way)."""
        with self.lock:
            key = key_of(obj)
            if not key[1]:
                key = ("", f"<unnamed-{self._version + 1}>")
            self._bump()
            added = key not in self._objects[resource.plural]
            self._objects[resource.plural][key] = _clone(dict(obj))
            self._log(resource.plural, "ADDED" if added else "MODIFIED", dict(obj))
            return _clone(dict(obj))

    def mutate(
        self, resource: Resource, namespace: str, name: str, change: Callable[[JsonObject], Any]
    ) -> JsonObject | None:
        """Apply ``change`` to the stored object in place (None when absent); the
        resourceVersion moves only when something changed, the generation when the spec did."""
        with self.lock:
            current = self._objects[resource.plural].get((namespace, name))
            if current is None:
                return None
            new = _clone(current)
            change(new)
            if new == current:
                return _clone(current)
            metadata = new.get("metadata")
            if isinstance(metadata, dict):
                if new.get("spec") != current.get("spec"):
                    metadata["generation"] = int(metadata.get("generation") or 0) + 1
                metadata["resourceVersion"] = self._bump()
            else:
                self._bump()
            self._objects[resource.plural][(namespace, name)] = new
            self._log(resource.plural, "MODIFIED", new)
            return _clone(new)

    def replace(self, resource: Resource, namespace: str, name: str, obj: JsonObject) -> None:
        """Put back an object read with ``get`` and changed as a whole (a patch result)."""
        with self.lock:
            metadata = obj.get("metadata")
            if isinstance(metadata, dict):
                metadata["resourceVersion"] = self._bump()
            else:
                self._bump()
            added = (namespace, name) not in self._objects[resource.plural]
            self._objects[resource.plural][(namespace, name)] = _clone(obj)
            self._log(resource.plural, "ADDED" if added else "MODIFIED", obj)

    def delete(self, resource: Resource, namespace: str, name: str) -> JsonObject | None:
        with self.lock:
            obj = self._objects[resource.plural].pop((namespace, name), None)
            if obj is not None:
                version = self._bump()
                # The API server reports a deletion with the object as last stored, at the
                # deletion's resourceVersion.
                gone = _clone(obj)
                if isinstance(gone.get("metadata"), dict):
                    gone["metadata"]["resourceVersion"] = version
                self._log(resource.plural, "DELETED", gone)
            return obj


# --- selectors -------------------------------------------------------------------------------


class SelectorError(ValueError):
    """A label or field selector the API server would refuse (400 BadRequest)."""


Predicate = Callable[[Mapping[str, Any]], bool]
_LABEL_KEY = r"(?:[A-Za-z0-9.-]+/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*")
_EQUALITY_TERM = re.compile(
    rf"\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*(?:(?P<op>==|!=|=)\s*(?P<value>{_LABEL_VALUE}))?\s*"
)


def _split_terms(text: str) -> list[str]:
    """Split on the commas that are not inside ``in (a, b)`` value lists."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    if match := _SET_TERM.fullmatch(term):
        key, operator, raw_values = match["key"], match["op"], match["values"]
        values = {value.strip() for value in raw_values.split(",") if value.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    match = _EQUALITY_TERM.fullmatch(term)
    if match is None:
        raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
    negated, key, operator, value = match["neg"], match["key"], match["op"], match["value"]
    if negated and operator:
        raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
    if negated:
        return lambda labels: key not in labels
    if operator is None:
        return lambda labels: key in labels
    wanted = value or ""
    if operator == "!=":
        return lambda labels: labels.get(key) != wanted
    return lambda labels: labels.get(key) == wanted


def label_selector(text: str) -> Predicate:
    """A predicate on objects for a ``labelSelector`` (equality and set-based terms)."""
    tests = [_label_term(term) for term in _split_terms(text)]

    def matches(obj: Mapping[str, Any]) -> bool:
        raw = as_dict(as_dict(obj.get("metadata")).get("labels"))
        labels = {str(k): str(v) for k, v in raw.items()}
        return all(test(labels) for test in tests)

    return matches


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: object = obj
    for part in path.split("."):
        value = as_dict(value).get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# The fields the API server lets each resource be selected by (every resource: metadata.*).
_SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "status.phase", "spec.schedulerName", "spec.restartPolicy"),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
}


def field_selector(text: str, resource: Resource) -> Predicate:
    """A predicate for a ``fieldSelector`` such as ``spec.nodeName=n1,status.phase!=Failed``."""
    allowed = ("metadata.name", "metadata.namespace", *_SELECTABLE_FIELDS.get(resource.plural, ()))
    tests: list[Predicate] = []
    for term in _split_terms(text):
        match = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*", term)
        if match is None:
            raise SelectorError(f"invalid selector: {term.strip()!r}; can't understand it")
        path, operator, value = match.groups()
        if path not in allowed:
            raise SelectorError(f'field label not supported: {path} for "{resource.kind}" objects')
        tests.append(_field_test(path, value, negated=operator == "!="))
    return lambda obj: all(test(obj) for test in tests)


def _field_test(path: str, value: str, *, negated: bool) -> Predicate:
    def test(obj: Mapping[str, Any]) -> bool:
        return (_field_value(obj, path) == value) != negated

    return test


def select(objects: Iterable[JsonObject], *predicates: Predicate) -> list[JsonObject]:
    return [obj for obj in objects if all(predicate(obj) for predicate in predicates)]


# --- patches ---------------------------------------------------------------------------------


class PatchError(ValueError):
    """A patch that cannot be applied (the API server answers 422 or 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, the rest replaces.

    Strategic merge patches are applied the same way: for the maps a portal patches (labels,
    annotations, ``spec.unschedulable``) the two agree; lists are replaced, not merged by key.
    """
    if not isinstance(patch, dict):
        return _clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key.startswith("$"):
            continue  # strategic-merge directives ($patch, $retainKeys, ...)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise PatchError(f"path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict) and last in node:
        return node.pop(last)
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node.pop(int(last))
    raise PatchError(f"unable to remove nonexistent key {path!r}")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict):
        if replace and last not in node:
            raise PatchError(f"replace operation does not apply: doc is missing key {path!r}")
        node[last] = value
    elif isinstance(node, list):
        if last == "-" and not replace:
            node.append(value)
        elif last.isdigit() and int(last) <= len(node) - (1 if replace else 0):
            if replace:
                node[int(last)] = value
            else:
                node.insert(int(last), value)
        else:
            raise PatchError(f"index out of range in {path!r}")
    else:
        raise PatchError(f"path {path!r} does not exist")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = _clone(target)
    for operation in operations:
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            raise PatchError(f"invalid JSON patch operation: {operation!r}")
        op, path = operation.get("op"), operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"{op} operation needs a value")
        if op == "add":
            doc = _add(doc, path, _clone(operation["value"]), replace=False)
        elif op == "replace":
            doc = _add(doc, path, _clone(operation["value"]), replace=True)
        elif op == "remove":
            _remove(doc, path)
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError(f"{op} operation needs 'from'")
            value = _remove(doc, source) if op == "move" else _clone(_get(doc, source))
            doc = _add(doc, path, value, replace=False)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise PatchError(f"testing value {path!r} failed")
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}")
    return doc
