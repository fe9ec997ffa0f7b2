"""The portal's Kubernetes client: the official ``kubernetes`` package, read as raw JSON.

Objects are read with ``_preload_content=False`` and parsed here, not deserialised into the
client's typed models: a real cluster (or a misbehaving controller) can return objects the
models reject, and one bad node must not hide the other hundred. ``fleet.inventory`` parses
each object on its own and records what it lacked.

Every failure (unreachable API server, timeout, an error status, a body that is not JSON)
becomes ``KubeError`` with a sentence a person can act on; callers mark their data stale.

Run-once work (Jobs, JobSets) is written on a member's behalf: ``Kube.impersonating`` gives a
client whose requests carry ``Impersonate-User``, one ``Impersonate-Group`` per group and one
``Impersonate-Extra-<key>`` per extra value, so the API server's RBAC and admission (Kyverno,
Kueue's webhooks, quota) decide as the impersonated identity and its audit log names the
member. Its
generic ``create``, ``get``, ``list``, ``delete`` and ``pod_log`` find a kind's resource through
discovery (cached per client and the clients derived from it) and use the raw REST paths.
"""

from __future__ import annotations

import base64
import builtins
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

logger = logging.getLogger(__name__)


class KubeError(Exception):
    """The API could not be read or written; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CustomKind:
    group: str
    version: str
    plural: str
    kind: str


KUSTOMIZATION = CustomKind("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
HELM_RELEASE = CustomKind("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
INFERENCE_SERVICE = CustomKind(
    "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"
)
WORKLOAD = CustomKind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
CLUSTER_QUEUE = CustomKind("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue")
LOCAL_QUEUE = CustomKind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
COHORT = CustomKind("kueue.x-k8s.io", "v1beta2", "cohorts", "Cohort")
# Kueue's visibility API, an aggregated API served by the Kueue controller (kueue v0.19.2
# apis/visibility/v1beta2, pkg/visibility/storage/pending_workloads_cq.go).
VISIBILITY_PENDING = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{name}/pendingworkloads"


IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"
IMPERSONATE_EXTRA_PREFIX = "Impersonate-Extra-"
# RFC 7230 token characters, which a header name may hold (client-go transport
# round_trippers.go ``legalHeaderKeyBytes``); every other byte of an extra's key, and '%',
# is percent-encoded (``headerKeyEscape``), and the API server decodes it with
# url.PathUnescape (k8s.io/apiserver filters/impersonation.go ``unescapeExtraKey``).
_HEADER_KEY_BYTES = frozenset(
    b"!#$&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")


def extra_header(key: str) -> str:
    """The header that carries user extra ``key`` (client-go ``headerKeyEscape``)."""
    escaped = "".join(
        chr(byte) if byte in _HEADER_KEY_BYTES else f"%{byte:02X}" for byte in key.encode()
    )
    return f"{IMPERSONATE_EXTRA_PREFIX}{escaped}"


def header_value(value: str) -> str:
    """``value`` as a header can carry it: printable ASCII as it is, anything else (a name in
    another script, a control character) and '%' percent-encoded as UTF-8, so the header is
    valid and the value unambiguous."""
    return quote(value, safe="".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%"))


class ImpersonatingApiClient(client.ApiClient):
    """An ApiClient whose every request acts as ``user`` with ``groups`` and ``extra``.

    ``Impersonate-User`` is a default header; the API server reads each ``Impersonate-Group``
    header as one group and each value of an ``Impersonate-Extra-<key>`` header as one value
    (k8s.io/apiserver ``filters/impersonation.go``), which a dict of default headers cannot
    repeat, so they are added to each request's headers as urllib3's multi-valued
    ``HTTPHeaderDict``."""

    def __init__(
        self,
        configuration: client.Configuration,
        user: str,
        groups: Sequence[str],
        extra: Mapping[str, Sequence[str]],
    ) -> None:
        super().__init__(configuration)
        self.set_default_header(IMPERSONATE_USER, user)
        self.groups = tuple(groups)
        self.extra = tuple(
            (extra_header(key), header_value(value))
            for key, values in sorted(extra.items())
            for value in values
        )

    def call_api(
        self,
        method: Any,
        url: Any,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        headers = urllib3.HTTPHeaderDict(header_params or {})
        for group in self.groups:
            headers.add(IMPERSONATE_GROUP, group)
        for name, value in self.extra:
            headers.add(name, value)
        return super().call_api(method, url, headers, body, post_params, _request_timeout)


def api_client() -> client.ApiClient:
    """An ApiClient for the configured cluster (see the FLEET_* settings)."""
    if settings.FLEET_KUBECONFIG:
        cfg = client.Configuration()
        config.load_kube_config(
            config_file=settings.FLEET_KUBECONFIG,
            context=settings.FLEET_KUBE_CONTEXT or None,
            client_configuration=cfg,
        )
    elif settings.FLEET_IN_CLUSTER:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
    else:
        cfg = client.Configuration()
        cfg.host = settings.FLEET_API_URL.rstrip("/")
        if settings.FLEET_API_TOKEN:
            cfg.api_key = {"authorization": settings.FLEET_API_TOKEN}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        if settings.FLEET_API_CA_FILE:
            cfg.ssl_ca_cert = settings.FLEET_API_CA_FILE
    # One quick retry at most: a sync that waits is worse than a stale page.
    cfg.retries = 1
    return client.ApiClient(cfg)


# What the watcher lists and watches: "nodes", "pods" or a custom kind.
Watchable = str | CustomKind


@dataclass(frozen=True)
class Listing:
    items: list[Any]
    resource_version: str


class Kube:
    """Typed-enough access to the kinds the portal reads and patches."""

    def __init__(self, api: client.ApiClient | None = None, timeout: float | None = None) -> None:
        self.api = api if api is not None else api_client()
        self.timeout = timeout if timeout is not None else settings.FLEET_API_TIMEOUT
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.extensions = client.ApiextensionsV1Api(self.api)
        # (apiVersion, kind) -> (plural, namespaced), from discovery.
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def impersonating(
        self,
        user: str,
        groups: Sequence[str] = (),
        *,
        extra: Mapping[str, Sequence[str]] | None = None,
    ) -> Kube:
        """A client of the same API server whose requests act as ``user`` in ``groups`` with
        the user ``extra`` values (the API server adds ``system:authenticated``, and a service
        account's own groups when ``groups`` is empty). Close it when done; it shares
        discovery with this one. The token's user needs ``impersonate`` on each of them: the
        portal's account has it on its tenants' job accounts and one extra key only
        (``gitops.render.rbac``, docs/architecture.md)."""
        if not user:
            raise ValueError("impersonating needs a user name")
        api = ImpersonatingApiClient(self.api.configuration, user, groups, extra or {})
        acting = Kube(api, timeout=self.timeout)
        acting._resources = self._resources
        return acting

    @property
    def where(self) -> str:
        return str(self.api.configuration.host)

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> dict[str, Any]:
        """The API server's /version (the cheapest authenticated answer it gives)."""
        body = self._call("read the server version", client.VersionApi(self.api).get_code)
        return body if isinstance(body, dict) else {}

    def list_nodes(self) -> builtins.list[Any]:
        return self._items("nodes", lambda **kw: self.core.list_node(**kw))

    def list_pods(self, *, node: str = "") -> builtins.list[Any]:
        selector = f"spec.nodeName={node}" if node else None
        return self._items(
            "pods",
            lambda **kw: self.core.list_pod_for_all_namespaces(field_selector=selector, **kw),
        )

    def list_custom(self, kind: CustomKind) -> builtins.list[Any]:
        return self._items(
            kind.plural,
            lambda **kw: self.custom.list_cluster_custom_object(
                kind.group, kind.version, kind.plural, **kw
            ),
        )

    def list_crds(self) -> builtins.list[Any]:
        """The CustomResourceDefinitions the API server serves.

        Needs ``list`` on ``customresourcedefinitions.apiextensions.k8s.io`` (cluster-wide)."""
        return self._items(
            "customresourcedefinitions",
            lambda **kw: self.extensions.list_custom_resource_definition(**kw),
        )

    def _lister(self, what: Watchable) -> Callable[..., Any]:
        if what == "nodes":
            return lambda **kw: self.core.list_node(**kw)
        if what == "pods":
            return lambda **kw: self.core.list_pod_for_all_namespaces(**kw)
        if isinstance(what, CustomKind):
            return lambda **kw: self.custom.list_cluster_custom_object(
                what.group, what.version, what.plural, **kw
            )
        raise ValueError(f"cannot list {what!r}")

    def list_versioned(self, what: Watchable) -> Listing:
        """A list with the collection's resourceVersion, the point a watch starts from."""
        name = what.plural if isinstance(what, CustomKind) else what
        body = self._call(f"list {name}", self._lister(what))
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise KubeError(f"The API server's answer to list {name} has no items list.")
        metadata = body.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return Listing(list(body["items"]), str(version or ""))

    def watch(
        self, what: Watchable, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The watch events (type, object) after ``resource_version``, with bookmarks, until
        the server ends the watch (about ``timeout_seconds``). An ERROR event is yielded as is
        (its object a Status): the caller decides, e.g. to relist on 410."""
        name = what.plural if isinstance(what, CustomKind) else what
        try:
            response = self._lister(what)(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                # The read timeout outlasts the server's own end of the watch: a silent
                # connection past it is a dead one.
                _request_timeout=(self.timeout, timeout_seconds + self.timeout),
            )
        except ApiException as exc:
            raise KubeError(_api_message(f"watch {name}", exc), exc.status) from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise KubeError(f"Could not watch {name} at {self.where}: {exc}.") from exc
        pending = b""
        try:
            for chunk in response.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(name, line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"The watch of {name} at {self.where} broke off: {exc}.") from exc
        finally:
            response.release_conn()
        if pending.strip():
            yield _watch_event(name, pending)

    def read_custom(self, kind: CustomKind, namespace: str, name: str) -> dict[str, Any]:
        """One custom object (a 404 is a ``KubeError`` with that status)."""
        body = self._call(
            f"read {kind.kind} {namespace}/{name}",
            lambda **kw: self.custom.get_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name, **kw
            ),
        )
        if not isinstance(body, dict):
            raise KubeError(f"The API server's answer to read {kind.kind} is not an object.")
        return body

    def merge_patch_custom(
        self, kind: CustomKind, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        """Apply a JSON merge patch (RFC 7386) to one custom object: the only patch type an API
        server accepts for custom resources besides JSON patch (no strategic merge)."""
        body = self._call(
            f"patch {kind.kind} {namespace}/{name}",
            lambda **kw: self.custom.patch_namespaced_custom_object(
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                name,
                patch,
                _content_type="application/merge-patch+json",
                **kw,
            ),
        )
        if not isinstance(body, dict):
            raise KubeError(f"The API server's answer to patch {kind.kind} is not an object.")
        return body

    def pending_workloads(self, cluster_queue: str, *, offset: int, limit: int) -> Any:
        """One page of a ClusterQueue's pending workloads from Kueue's visibility API (a
        ``PendingWorkloadsSummary``), from position ``offset``, at most ``limit`` items.

        Needs ``get`` on ``clusterqueues/pendingworkloads`` of
        ``visibility.kueue.x-k8s.io``. The generated client has no method for an aggregated
        API's subresource, so the request is built with its own serializer (the path, auth
        and headers as its CustomObjectsApi builds them)."""

        def call(**kw: Any) -> Any:
            request = self.api.param_serialize(
                method="GET",
                resource_path=VISIBILITY_PENDING,
                path_params={"name": cluster_queue},
                query_params=[("offset", offset), ("limit", limit)],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*request, _request_timeout=kw["_request_timeout"])
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)
            return response

        return self._call(f"read the pending workloads of ClusterQueue {cluster_queue}", call)

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        """A Secret's ``data``, decoded. The portal reads only the Secrets it names (vCluster
        kubeconfigs), never lists them: its RBAC grants ``get`` alone."""
        what = f"read secret {namespace}/{name}"
        body = self._call(
            what, lambda **kw: self.core.read_namespaced_secret(name, namespace, **kw)
        )
        data = (body.get("data") or {}) if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise KubeError(f"The API server's answer to {what} is not a Secret.")
        try:
            return {str(key): base64.b64decode(value, validate=True) for key, value in data.items()}
        except (TypeError, ValueError) as exc:
            # The message leaves the value out: it is a credential.
            raise KubeError(f"Could not {what}: its data is not base64.") from exc

    def write_secret(
        self, namespace: str, name: str, data: dict[str, bytes], *, labels: dict[str, str]
    ) -> None:
        """Create the Opaque Secret, or replace the one there (data and labels as given).

        A missing namespace is a ``KubeError`` with status 404, as from the API server.
        """
        body = client.V1Secret(
            api_version="v1",
            kind="Secret",
            type="Opaque",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
            data={key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
        )
        what = f"write secret {namespace}/{name}"
        try:
            self._call(what, lambda **kw: self.core.read_namespaced_secret(name, namespace, **kw))
        except KubeError as exc:
            if exc.status != 404:
                raise
            self._call(what, lambda **kw: self.core.create_namespaced_secret(namespace, body, **kw))
        else:
            self._call(
                what, lambda **kw: self.core.replace_namespaced_secret(name, namespace, body, **kw)
            )

    def delete_secret(self, namespace: str, name: str) -> None:
        """Delete a Secret; one that is not there is no error (the goal is its absence)."""
        try:
            self._call(
                f"delete secret {namespace}/{name}",
                lambda **kw: self.core.delete_namespaced_secret(name, namespace, **kw),
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    def set_unschedulable(self, node: str, value: bool) -> None:
        """Cordon (True) or uncordon (False) a node, as ``kubectl cordon`` does."""
        self._call(
            f"patch node {node}",
            lambda **kw: self.core.patch_node(node, {"spec": {"unschedulable": value}}, **kw),
        )

    def read_node(self, name: str) -> dict[str, Any]:
        return self.get("v1", "Node", "", name)

    def json_patch_node(self, name: str, patch: builtins.list[dict[str, Any]]) -> None:
        """Apply a JSON patch (RFC 6902) to a node: the reservation mark (``fleet.reservations``),
        with a ``test`` of its resourceVersion so a node changed meanwhile is refused (409/422)."""
        what = f"patch node {name}"
        path = self._path(what, "v1", "Node", "", name)
        self._request(what, "PATCH", path, body=patch, content_type="application/json-patch+json")

    def evict(self, namespace: str, name: str) -> None:
        """Ask the eviction API to remove a pod; it honours PodDisruptionBudgets (429)."""
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        )
        self._call(
            f"evict pod {namespace}/{name}",
            lambda **kw: self.core.create_namespaced_pod_eviction(name, namespace, body, **kw),
        )

    def pod_exists(self, namespace: str, name: str) -> bool:
        """Whether pod ``namespace/name`` is there (running, pending or terminating)."""
        try:
            self._call(
                f"read pod {namespace}/{name}",
                lambda **kw: self.core.read_namespaced_pod(name, namespace, **kw),
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list_namespace_pods(self, namespace: str, *, label_selector: str) -> builtins.list[Any]:
        """The pods of one namespace matching ``label_selector`` (raw objects)."""
        return self._items(
            f"pods in {namespace}",
            lambda **kw: self.core.list_namespaced_pod(
                namespace, label_selector=label_selector, **kw
            ),
        )

    def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete a pod with its own grace period, as ``kubectl delete pod`` does; False when
        it was already gone (the goal is its absence)."""
        try:
            self._call(
                f"delete pod {namespace}/{name}",
                lambda **kw: self.core.delete_namespaced_pod(name, namespace, **kw),
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # --- any kind, by apiVersion and kind (run-once work) -----------------------------------

    def create(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        obj: dict[str, Any],
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create ``obj`` in ``namespace``; the object as stored (as it would be, with
        ``dry_run``: admission runs, nothing is stored)."""
        what = f"create {kind} in {namespace}"
        path = self._path(what, api_version, kind, namespace)
        query = [("dryRun", "All")] if dry_run else []
        return self._object(what, self._request(what, "POST", path, query=query, body=obj))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """One object (a missing one is a ``KubeError`` with status 404)."""
        what = f"read {kind} {namespace}/{name}"
        path = self._path(what, api_version, kind, namespace, name)
        return self._object(what, self._request(what, "GET", path))

    def list(
        self, api_version: str, kind: str, namespace: str, *, label_selector: str = ""
    ) -> builtins.list[dict[str, Any]]:
        """The objects of ``kind`` in ``namespace`` matching ``label_selector``."""
        what = f"list {kind} in {namespace}"
        path = self._path(what, api_version, kind, namespace)
        query = [("labelSelector", label_selector)] if label_selector else []
        body = self._object(what, self._request(what, "GET", path, query=query))
        items = body.get("items")
        if not isinstance(items, builtins.list):
            raise KubeError(f"The API server's answer to {what} has no items list.")
        return [item for item in items if isinstance(item, dict)]

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
    ) -> None:
        """Delete an object with ``propagation`` (``Background``: the garbage collector then
        removes what it owns, a Job's pods; ``Foreground``: those first, then the object)."""
        if propagation not in PROPAGATION_POLICIES:
            raise ValueError(f"propagation must be one of {', '.join(PROPAGATION_POLICIES)}")
        what = f"delete {kind} {namespace}/{name}"
        path = self._path(what, api_version, kind, namespace, name)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        self._request(what, "DELETE", path, body=options)

    def pod_log(
        self, namespace: str, name: str, *, container: str = "", tail_lines: int = 100
    ) -> str:
        """The last ``tail_lines`` lines of a pod's container log (``container`` may be left
        out when the pod has one)."""
        if tail_lines < 0:
            raise ValueError("tail_lines must not be negative")
        what = f"read the log of pod {namespace}/{name}"
        query = [("tailLines", str(tail_lines))]
        if container:
            query.append(("container", container))
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/log"
        return self._request(what, "GET", path, query=query).decode("utf-8", errors="replace")

    def _path(self, what: str, api_version: str, kind: str, namespace: str, name: str = "") -> str:
        plural, namespaced = self._resource(what, api_version, kind)
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        path = f"{base}/namespaces/{_segment(namespace)}" if namespaced else base
        path = f"{path}/{plural}"
        return f"{path}/{_segment(name)}" if name else path

    def _resource(self, what: str, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of ``kind`` from the API server's discovery, as kubectl's
        RESTMapper finds it."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            try:
                listing = self._object(what, self._request(what, "GET", base))
            except KubeError as exc:
                if exc.status != 404:
                    raise
                listing = {}
            for entry in listing.get("resources") or []:
                if isinstance(entry, dict) and "/" not in str(entry.get("name", "")):
                    found = (str(entry.get("kind")), api_version)
                    self._resources[(found[1], found[0])] = (
                        str(entry["name"]),
                        bool(entry.get("namespaced")),
                    )
            if key not in self._resources:
                raise KubeError(
                    f"Could not {what}: the API server at {self.where} serves no {kind} in "
                    f"{api_version}; is its CustomResourceDefinition installed?",
                    404,
                )
        return self._resources[key]

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        query: builtins.list[tuple[str, str]] | None = None,
        body: dict[str, Any] | builtins.list[Any] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        """One REST call; the body of a 2xx answer, else ``KubeError``."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            request = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*request, _request_timeout=self.timeout)
            data = response.read()
        except urllib3.exceptions.HTTPError as exc:
            # After its retries urllib3 raises MaxRetryError with the last failure as reason.
            cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            if isinstance(cause, urllib3.exceptions.TimeoutError):
                raise KubeError(
                    f"Could not {what}: the API server at {self.where} did not answer within "
                    f"{self.timeout:g} s."
                ) from exc
            raise KubeError(
                f"Could not {what}: the API server at {self.where} did not answer ({exc})."
            ) from exc
        except (OSError, ValueError) as exc:
            raise KubeError(f"Could not {what} at {self.where}: {exc}.") from exc
        if not 200 <= response.status < 300:
            raise KubeError(_refusal(what, response.status, data), response.status)
        return bytes(data or b"")

    @staticmethod
    def _object(what: str, raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise KubeError(f"Could not {what}: the answer is not JSON.") from exc
        if not isinstance(body, dict):
            raise KubeError(f"Could not {what}: the answer is not an object.")
        return body

    def _items(self, what: str, call: Callable[..., Any]) -> builtins.list[Any]:
        body = self._call(f"list {what}", call)
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise KubeError(f"The API server's answer to list {what} has no items list.")
        return list(body["items"])

    def _call(self, what: str, call: Callable[..., Any]) -> Any:
        try:
            response = call(_preload_content=False, _request_timeout=self.timeout)
            raw = response.data
        except ApiException as exc:
            raise KubeError(_api_message(what, exc), exc.status) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeError(
                f"Could not {what}: the API server at {self.where} did not answer ({exc})."
            ) from exc
        except (OSError, ValueError) as exc:
            raise KubeError(f"Could not {what} at {self.where}: {exc}.") from exc
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise KubeError(f"Could not {what}: the answer is not JSON.") from exc


def _watch_event(name: str, line: bytes) -> tuple[str, dict[str, Any]]:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise KubeError(f"The watch of {name} sent a line that is not JSON.") from exc
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("type"), str)
        or not isinstance(event.get("object"), dict)
    ):
        raise KubeError(f"The watch of {name} sent an event without type or object.")
    return event["type"], event["object"]


def _api_message(what: str, exc: ApiException) -> str:
    detail = ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            detail = str(body.get("message") or "")
    except ValueError:
        detail = (exc.body or "")[:200] if isinstance(exc.body, str) else ""
    status = f"HTTP {exc.status}" if exc.status else "an error"
    return f"Could not {what}: {status}{f' - {detail}' if detail else f' {exc.reason}'}."


def _segment(value: str) -> str:
    """A path segment, escaped (a name is a DNS label, but the caller may pass anything)."""
    return quote(value, safe="")


def _refusal(what: str, status: int, raw: bytes) -> str:
    """A sentence for an error status, from the API server's Status: its message, and for an
    invalid object the fields at fault."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = raw.decode("utf-8", errors="replace").strip()[:200]
        return f"Could not {what}: HTTP {status}{f' - {text}' if text else ''}."
    message = str(body.get("message") or "").strip()
    details = body.get("details")
    if not isinstance(details, dict):
        details = {}
    if status == 403:
        return f"Kubernetes refused: {message}"
    if status == 409 and body.get("reason") == "AlreadyExists":
        return f"Kubernetes refused: {message}; choose another name or delete the old one."
    if status == 409:
        return f"Kubernetes refused: {message}; read the object again and retry."
    if status == 422:
        causes = [
            f"{cause.get('field')}: {cause.get('message')}"
            for cause in details.get("causes") or []
            if isinstance(cause, dict) and cause.get("field")
        ]
        shown = "; ".join(causes) if causes else message
        return f"Could not {what}: Kubernetes found it invalid: {shown}."
    if status == 404:
        return f"Could not {what}: {message or 'not found'}."
    if status == 401:
        return (
            f"Could not {what}: the API server did not accept the portal's credentials "
            "(HTTP 401); check FLEET_API_TOKEN or the kubeconfig."
        )
    return f"Could not {what}: HTTP {status}{f' - {message}' if message else ''}."
