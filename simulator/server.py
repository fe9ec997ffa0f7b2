"""The Kubernetes REST API of the simulator, over ``http.server`` (JSON in, JSON out).

Paths, list envelopes and ``Status`` errors are the API server's, so the official client works
against it unchanged. Served: discovery (``/version``, ``/api``, ``/apis`` and each group version),
``/healthz``, nodes (get, list, patch), namespaces (get, list), pods (get, list, patch, delete, the
``eviction`` and ``log`` subresources, ``logs``), secrets (get, list; create and replace, which the
portal uses for the tenants' Git credentials; the vCluster kubeconfigs helm-controller's releases
export), Jobs and JobSets (also create: ``_create``, with ``generateName``, ``dryRun`` and
admission as the requesting user) and the other resources in ``store.RESOURCES`` (get, list,
patch, delete), among them RBAC, PriorityClasses and the installed CustomResourceDefinitions
(``crds``). A DELETE takes ``propagationPolicy`` and the garbage collector follows
(``gc``). Lists take ``labelSelector`` and ``fieldSelector``; ``limit`` and ``continue`` are
ignored (every list is one page). ``?watch=1`` streams watch events as the API server does (see
``_watch``).

The bearer token authenticates an administrator (``system:masters``), allowed everything; a
token of ``Simulator(service_account_tokens=...)`` authenticates that service account instead
(the portal's, say), whose every request RBAC authorises. A request with ``Impersonate-User``
(and ``Impersonate-Group``, ``Impersonate-Extra-<key>``, ``Impersonate-Uid``) acts as that user
once the token's user may impersonate each of them, and every verb, subresource and
non-resource path is then authorised by RBAC (``rbac``) with the API server's 403 message.
``/metrics`` is the DCGM exporter's text exposition. ``/allocation`` and
``/allocation/compute`` are OpenCost's allocation API (``opencost``), outside the token like
OpenCost's own.

``/apis/visibility.kueue.x-k8s.io/v1beta2`` is Kueue's visibility API (``visibility``): a
ClusterQueue's or LocalQueue's ``pendingworkloads``.

``/sim/...`` drives the simulation (faults, raw objects, a tick, ``POST /sim/jobs/<namespace>/
<name>/finish`` with ``{"outcome": "Succeeded"|"Failed"}`` to end a Job's pods now) and is not
behind the token:
it stands for the operator's hands, not for the API. ``GET /sim/flux-install`` is what ``flux
install --export`` prints for the Flux this cluster runs (``flux_install``), for the operator
to commit as ``gotk-components.yaml``.

``/vclusters/<namespace>/<release>/...`` is a tenant's virtual cluster, the API its gateway
hostname or Service would reach (``virtual``): its own authentication (the identity provider's
ID tokens, not the simulator's token) and RBAC, with the syncer's Service filter in front
(``syncer``); 503 while its control plane does not run.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
import logging
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from simulator import disruption, flux_install, opencost, rbac, virtual, visibility
from simulator.admission import Rejected, WebhookUnreachable, admit_object
from simulator.cluster import NotFound
from simulator.dcgm import render_exposition
from simulator.flux import REQUESTED_AT
from simulator.gc import JOB_DELETE_WARNING, POLICIES, default_policy
from simulator.logs import LogUnavailable, choose_container, container_log, render
from simulator.rbac import Attributes, UserInfo
from simulator.store import (
    GIT_REPOSITORIES,
    JOBS,
    JOBSETS,
    KUSTOMIZATIONS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCES,
    SECRETS,
    SERVICES,
    Expired,
    JsonObject,
    PatchError,
    Predicate,
    Resource,
    SelectorError,
    as_dict,
    as_list,
    field_selector,
    json_patch,
    label_selector,
    merge_patch,
    select,
    timestamp,
)

if TYPE_CHECKING:
    from simulator import Simulator

logger = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_BODY = 8 * 1024 * 1024
# Resources a client may delete here; nodes and namespaces belong to the simulation.
DELETABLE = frozenset(r for r in RESOURCES.values() if r.group) | {PODS, SECRETS, SERVICES}
# Resources a client may create (POST) besides Secrets: the run-once work tenants submit, and
# the headless Service of the burn-in's Job across nodes (its pods' DNS subdomain).
CREATABLE = frozenset({JOBS, JOBSETS, SERVICES})
# Who the simulator's bearer token authenticates as: an administrator in system:masters,
# whom the authorizer allows everything (kube-apiserver's privileged group).
TOKEN_USER = UserInfo("kubernetes-admin", (rbac.MASTERS,))
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# names.SimpleNameGenerator: five characters of utilrand's alphabet after the prefix.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ApiError(Exception):
    """An error the API answers with a ``Status`` object."""

    def __init__(
        self, code: int, reason: str, message: str, details: JsonObject | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details


@dataclass(frozen=True)
class Response:
    code: int
    body: bytes
    content_type: str = JSON
    # A watch: JSON lines written as they come (chunked), instead of ``body``.
    stream: Iterator[bytes] | None = None
    # Extra headers, such as the API server's ``Warning``.
    headers: tuple[tuple[str, str], ...] = ()


# The API server ends a watch after a randomised --min-request-timeout (1800 s by default)
# unless the client asks for less with timeoutSeconds; clients then watch again from the last
# resourceVersion they saw.
WATCH_TIMEOUT_MAX = 1800.0


def status_object(
    code: int, reason: str, message: str, details: JsonObject | None = None
) -> JsonObject:
    body: JsonObject = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _json(code: int, payload: Any) -> Response:
    return Response(code, json.dumps(payload, separators=(",", ":")).encode())


def _text(code: int, text: str) -> Response:
    return Response(code, text.encode(), "text/plain; charset=utf-8")


def _not_found(resource: Resource, name: str) -> ApiError:
    details: JsonObject = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found', details)


NO_SUCH_PATH = ApiError(404, "NotFound", "the server could not find the requested resource")


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from exc


def _parse_object(body: bytes) -> JsonObject:
    data = _parse_body(body)
    if not isinstance(data, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    return data


def _details(resource: Resource, name: str) -> JsonObject:
    """A Status's details for an object: name, group and, as the API server fills it, the
    resource's plural as the kind."""
    details: JsonObject = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return details


def _dry_run(value: str) -> bool:
    """``dryRun``: "All" or nothing (apimachinery ``ValidateDryRun``)."""
    given = [v for v in value.split(",") if v]
    if not given:
        return False
    if given != ["All"]:
        raise ApiError(
            400,
            "BadRequest",
            f'dryRun: Unsupported value: {json.dumps(value)}: supported values: "All"',
        )
    return True


# A cause of a 422: (field, reason, message) as field.Error renders them.
Cause = tuple[str, str, str]


def _validation_causes(resource: Resource, obj: JsonObject) -> list[Cause]:
    """What the API server's validation finds wrong in a new object: its name (ObjectMeta
    validation, ``NameIsDNSSubdomain``) and, for a Job, the pod template (kubernetes
    ``pkg/apis/batch/validation`` ``ValidateJobSpec``; a template's restartPolicy defaults to
    Always, which a Job does not support). A custom resource's schema is not checked."""
    causes: list[Cause] = []
    metadata = as_dict(obj.get("metadata"))
    name = metadata.get("name")
    if not name:
        causes.append(
            (
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
        )
    elif not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist "
                "of lower case alphanumeric characters, '-' or '.', and must start and end with "
                "an alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        )
    if resource is JOBS:
        template = as_dict(as_dict(obj.get("spec")).get("template"))
        pod_spec = as_dict(template.get("spec"))
        if not as_list(pod_spec.get("containers")):
            causes.append(("spec.template.spec.containers", "FieldValueRequired", "Required value"))
        restart = pod_spec.get("restartPolicy") or "Always"
        if restart not in ("OnFailure", "Never"):
            causes.append(
                (
                    "spec.template.spec.restartPolicy",
                    "FieldValueNotSupported",
                    f'Unsupported value: {json.dumps(restart)}: supported values: "OnFailure", '
                    '"Never"',
                )
            )
    return causes


def _invalid(resource: Resource, name: str, causes: list[Cause]) -> ApiError:
    """``apierrors.NewInvalid``: "<Kind>.<group> "<name>" is invalid: <errors>", one error
    plain, several in brackets, and each as a cause."""
    errors = [f"{field}: {message}" for field, _, message in causes]
    shown = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    qualified = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    details: JsonObject = {"name": name, "kind": resource.kind}
    if resource.group:
        details["group"] = resource.group
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {shown}', details)


class Api:
    """Routes one request to the simulator; returns a ``Response`` or raises ``ApiError``."""

    def __init__(self, simulator: Simulator) -> None:
        self.sim = simulator

    def handle(self, method: str, target: str, headers: Any, body: bytes) -> Response:
        url = urlsplit(target)
        parts = [unquote(part) for part in url.path.split("/") if part]
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if parts[:1] == ["sim"]:
            return self._control(method, parts[1:], body)
        if parts[:1] == ["vclusters"]:
            return self._virtual(method, parts[1:], headers, body)
        if parts[:1] == ["allocation"]:
            # OpenCost's own API, which has no authentication of its own.
            return self._allocation(method, parts[1:], query)
        requester = self._authenticate(headers)
        try:
            user = self._impersonate(headers, requester)
        except rbac.ImpersonationInvalid as exc:
            # WithImpersonation answers with responsewriters.InternalError: plain text.
            return _text(500, f"Internal Server Error: {json.dumps(url.path)}: {exc}")
        if method == "GET":
            found = self._discovery(parts)
            if found is not None:
                self._check(user, Attributes("get", path=url.path))
                return found
        if parts[:3] == ["apis", visibility.GROUP, visibility.VERSION] and len(parts) > 3:
            rest = parts[3:]
            namespace = rest[1] if len(rest) == 5 and rest[0] == "namespaces" else ""
            named = rest[2:] if namespace else rest
            self._check(
                user,
                Attributes(
                    "get",
                    group=visibility.GROUP,
                    resource=named[0],
                    subresource=named[2] if len(named) > 2 else "",
                    namespace=namespace,
                    name=named[1] if len(named) > 1 else "",
                ),
            )
            return self._pending_workloads(method, rest, query)
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NO_SUCH_PATH
        return self._resource(method, group, version, rest, query, headers, body, user)

    def _authenticate(self, headers: Any) -> UserInfo:
        """Who the bearer token is: a service account of ``service_account_tokens`` (the
        groups the service account authenticator gives, ``serviceaccount.MakeGroupNames``),
        else the administrator of ``token`` (anyone when no token is set); 401 otherwise."""
        given = str(headers.get("Authorization") or "").encode()
        for token, account in self.sim.service_account_tokens.items():
            if hmac.compare_digest(given, f"Bearer {token}".encode()):
                namespace, _ = rbac.split_service_account(account) or ("", "")
                return UserInfo(account, rbac.service_account_groups(namespace))
        token = self.sim.token
        if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return TOKEN_USER

    def _impersonate(self, headers: Any, requester: UserInfo) -> UserInfo:
        """The user the request acts as: the requester, or whom its impersonation headers
        name once the requester may impersonate each of them (``rbac.impersonated``); the
        first refusal is the API server's 403."""
        extra = [
            (key, str(value))
            for name, value in headers.items()
            if (key := rbac.extra_key(str(name))) is not None
        ]
        asked = rbac.impersonated(
            str(headers.get(rbac.IMPERSONATE_USER) or ""),
            [str(g) for g in headers.get_all(rbac.IMPERSONATE_GROUP) or []],
            str(headers.get(rbac.IMPERSONATE_UID) or ""),
            extra,
        )
        if asked is None:
            return requester
        for check in asked.checks:
            self._check(requester, check)
        return asked.user

    def _check(self, user: UserInfo, request: Attributes) -> None:
        """Authorise ``request`` for ``user``: system:masters may do anything (the API server's
        privileged group), anyone else what RBAC allows; 403 Forbidden otherwise, in
        ``responsewriters.Forbidden``'s words."""
        if rbac.MASTERS in user.all_groups or rbac.allowed(self.sim.store, user, request):
            return
        details: JsonObject = {"name": request.name, "kind": request.resource}
        if request.group:
            details["group"] = request.group
        raise ApiError(
            403,
            "Forbidden",
            rbac.forbidden_message(user, request),
            {k: v for k, v in details.items() if v},
        )

    # --- discovery ---------------------------------------------------------------------------

    def _discovery(self, parts: list[str]) -> Response | None:
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if parts == ["metrics"]:
            text = render_exposition(self.sim.gpu_samples(), self.sim.clock())
            return Response(200, text.encode(), METRICS_TYPE)
        if parts == ["version"]:
            version = self.sim.config.kubernetes_version
            major, minor = version.lstrip("v").split(".")[:2]
            return _json(
                200,
                {
                    "major": major,
                    "minor": minor,
                    "gitVersion": version,
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2025-09-09T00:00:00Z",
                    "goVersion": "go1.24.6",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        if parts == ["api"]:
            address = self.sim.url.removeprefix("http://")
            return _json(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": address}
                    ],
                },
            )
        if parts == ["apis"]:
            groups = sorted({(r.group, r.version) for r in RESOURCES.values() if r.group})
            groups.append(("policy", "v1"))
            groups.append((visibility.GROUP, visibility.VERSION))
            return _json(
                200,
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [
                        {
                            "name": group,
                            "versions": [
                                {"groupVersion": f"{group}/{version}", "version": version}
                            ],
                            "preferredVersion": {
                                "groupVersion": f"{group}/{version}",
                                "version": version,
                            },
                        }
                        for group, version in sorted(groups)
                    ],
                },
            )
        if parts == ["api", "v1"]:
            return self._resource_list("", "v1")
        if len(parts) == 3 and parts[0] == "apis":
            return self._resource_list(parts[1], parts[2])
        return None

    def _resource_list(self, group: str, version: str) -> Response:
        entries: list[JsonObject] = []
        if (group, version) == (visibility.GROUP, visibility.VERSION):
            # The aggregated API's resources (apis/visibility/v1beta2, storage.go).
            for plural, kind, namespaced in (
                ("clusterqueues", "ClusterQueue", False),
                ("localqueues", "LocalQueue", True),
            ):
                entries.append(
                    {
                        "name": plural,
                        "singularName": plural[:-1],
                        "namespaced": namespaced,
                        "kind": kind,
                        "verbs": ["get"],
                    }
                )
                entries.append(
                    {
                        "name": f"{plural}/pendingworkloads",
                        "singularName": "",
                        "namespaced": namespaced,
                        "kind": "PendingWorkloadsSummary",
                        "verbs": ["get"],
                    }
                )
        for resource in RESOURCES.values():
            if (resource.group, resource.version) != (group, version):
                continue
            verbs = ["get", "list", "watch", "patch"]
            if resource in CREATABLE or resource is SECRETS:
                verbs.append("create")
            if resource is SECRETS:
                verbs.append("update")
            if resource in DELETABLE:
                verbs.append("delete")
            entries.append(
                {
                    "name": resource.plural,
                    "singularName": resource.singular,
                    "namespaced": resource.namespaced,
                    "kind": resource.kind,
                    "verbs": verbs,
                }
            )
        if group == "" and version == "v1":
            entries.append(
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                }
            )
            entries.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
        if not entries and (group, version) != ("policy", "v1"):
            raise NO_SUCH_PATH
        group_version = f"{group}/{version}" if group else version
        return _json(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": entries,
            },
        )

    # --- resources ---------------------------------------------------------------------------

    def _resource(
        self,
        method: str,
        group: str,
        version: str,
        rest: list[str],
        query: dict[str, str],
        headers: Any,
        body: bytes,
        user: UserInfo,
    ) -> Response:
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = RESOURCES.get(rest[0]) if rest else None
        if (
            resource is None
            or (resource.group, resource.version) != (group, version)
            or len(rest) > 3
            or (namespace is not None and not resource.namespaced)
            or (namespace is None and resource.namespaced and len(rest) > 1)
        ):
            raise NO_SUCH_PATH
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) == 3 else ""
        if subresource and (
            (resource, subresource) not in ((PODS, "eviction"), (PODS, "log"))
            or namespace is None
            or name is None
        ):
            raise NO_SUCH_PATH
        # The verb as the API server's RequestInfoFactory derives it from method and path.
        if method == "GET" and name is None:
            verb = "watch" if query.get("watch") in ("true", "1") else "list"
        else:
            verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch"}.get(
                method, method.lower()
            )
        self._check(
            user,
            Attributes(verb, group, resource.plural, subresource, namespace or "", name or ""),
        )
        if subresource == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on evictions")
            return self._evict(namespace or "", name or "", body)
        if subresource == "log":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on pods/log")
            return self._log(namespace or "", name or "", query)
        if name is None:
            if method == "POST" and resource is SECRETS and namespace:
                return self._create_secret(namespace, body)
            if method == "POST" and resource in CREATABLE and namespace:
                return self._create(resource, namespace, query, body, user)
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
            return self._list(resource, namespace, query)
        namespace = namespace or ""
        if method == "PUT" and resource is SECRETS:
            return self._replace_secret(namespace, name, body)
        if method == "GET":
            obj = self.sim.store.get(resource, namespace, name)
            if obj is None:
                raise _not_found(resource, name)
            return _json(200, obj)
        if method == "PATCH":
            return self._patch(resource, namespace, name, headers, body)
        if method == "DELETE" and resource in DELETABLE:
            return self._delete(resource, namespace, name, query, body)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {resource.plural}")

    def _list(self, resource: Resource, namespace: str | None, query: dict[str, str]) -> Response:
        try:
            predicates = []
            if query.get("labelSelector"):
                predicates.append(label_selector(query["labelSelector"]))
            if query.get("fieldSelector"):
                predicates.append(field_selector(query["fieldSelector"], resource))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        if query.get("watch") in ("true", "1"):
            return self._watch(resource, namespace, query, predicates)
        with self.sim.store.lock:
            version = self.sim.store.resource_version
            items = select(self.sim.store.list(resource, namespace), *predicates)
        return _json(
            200,
            {
                "apiVersion": resource.api_version,
                "kind": f"{resource.kind}List",
                "metadata": {"resourceVersion": version},
                "items": items,
            },
        )

    def _watch(
        self,
        resource: Resource,
        namespace: str | None,
        query: dict[str, str],
        predicates: list[Predicate],
    ) -> Response:
        """A watch, as the API server streams it (one JSON object per line, "Efficient detection
        of changes" in the Kubernetes API concepts): from ``resourceVersion`` N, every change
        after N; without one (or "0"), a synthetic ADDED for each object there now, then the
        changes. With ``allowWatchBookmarks=true``, an idle watch gets BOOKMARK events (an
        object of the kind with only ``metadata.resourceVersion``) so the client can resume
        from there. A resourceVersion older than the kept history is not an HTTP error: the
        stream starts with 200 and carries one ERROR event holding a Status with code 410 and
        reason Expired, then ends: the watch cache's "too old resource version: N (M)",
        which the cacher returns as an ERROR event rather than an HTTP error "to match the
        uncached watch implementation" (k8s.io/apiserver storage/cacher). Clients must relist,
        as client-go's reflector does (kubernetes/kubernetes#83520)."""
        store = self.sim.store
        asked = query.get("resourceVersion", "")
        try:
            start = int(asked) if asked not in ("", "0") else None
            timeout = min(
                float(query.get("timeoutSeconds") or WATCH_TIMEOUT_MAX), WATCH_TIMEOUT_MAX
            )
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid watch parameter: {exc}") from exc
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        interval = self.sim.config.watch_bookmark_seconds

        def wanted(obj: JsonObject) -> bool:
            meta = as_dict(obj.get("metadata"))
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return all(predicate(obj) for predicate in predicates)

        def line(kind: str, obj: JsonObject) -> bytes:
            return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"

        def bookmark(version: int) -> bytes:
            return line(
                "BOOKMARK",
                {
                    "kind": resource.kind,
                    "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(version)},
                },
            )

        def events() -> Iterator[bytes]:
            deadline = time.monotonic() + timeout
            version = start
            if version is None:
                with store.lock:
                    version = int(store.resource_version)
                    current = store.list(resource, namespace)
                for obj in current:
                    if wanted(obj):
                        yield line("ADDED", obj)
            last_sent = time.monotonic()
            while not self.sim.stopping:
                try:
                    found, version_now = store.events_since(version)
                except Expired as exc:
                    yield line("ERROR", status_object(410, "Expired", str(exc)))
                    return
                sent = False
                for event in found:
                    if event.plural == resource.plural and wanted(event.object):
                        yield line(event.type, event.object)
                        sent = True
                version = version_now
                now = time.monotonic()
                if sent:
                    last_sent = now
                elif bookmarks and now - last_sent >= interval:
                    yield bookmark(version)
                    last_sent = now
                if now >= deadline:
                    return
                with store.changed:
                    if int(store.resource_version) == version:
                        store.changed.wait(min(interval, max(0.0, deadline - now), 0.5))

        return Response(200, b"", JSON, stream=events())

    def _patch(
        self, resource: Resource, namespace: str, name: str, headers: Any, body: bytes
    ) -> Response:
        content_type = str(headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type not in (MERGE_PATCH, STRATEGIC_PATCH, JSON_PATCH):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}",
            )
        patch = _parse_body(body)
        store = self.sim.store
        now = time.time()
        with store.lock:
            current = store.get(resource, namespace, name)
            if current is None:
                raise _not_found(resource, name)
            try:
                if content_type == JSON_PATCH:
                    patched = json_patch(current, patch)
                elif isinstance(patch, dict):
                    patched = merge_patch(current, patch)
                else:
                    raise PatchError("a merge patch must be a JSON object")
            except PatchError as exc:
                raise ApiError(422, "Invalid", str(exc)) from exc
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patched object is not a JSON object")
            old_meta, new_meta = as_dict(current.get("metadata")), as_dict(patched.get("metadata"))
            for field in ("name", "namespace", "uid"):
                if new_meta.get(field) != old_meta.get(field):
                    raise ApiError(422, "Invalid", f"metadata.{field}: field is immutable")
            if patched.get("spec") != current.get("spec") and isinstance(
                patched.get("metadata"), dict
            ):
                patched["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
            store.replace(resource, namespace, name, patched)
            if resource is NODES:
                self.sim.cluster.sync_node(name, now)
            if resource in (KUSTOMIZATIONS, GIT_REPOSITORIES):
                old_at = as_dict(old_meta.get("annotations")).get(REQUESTED_AT)
                new_at = as_dict(new_meta.get("annotations")).get(REQUESTED_AT)
                if new_at and new_at != old_at:
                    self.sim.flux.request_reconcile(now)
            return _json(200, store.get(resource, namespace, name))

    def _secret_body(self, namespace: str, body: bytes, name: str | None = None) -> JsonObject:
        """A Secret as the API server stores it: ``stringData`` folded into base64 ``data``."""
        obj = _parse_object(body)
        metadata = as_dict(obj.get("metadata"))
        if name is not None and metadata.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        metadata["name"] = name or metadata.get("name")
        if not isinstance(metadata["name"], str) or not metadata["name"]:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if metadata.get("namespace") not in (None, namespace):
            raise ApiError(400, "BadRequest", "the namespace of the object does not match the URL")
        metadata["namespace"] = namespace
        obj["metadata"] = metadata
        data = {str(k): str(v) for k, v in as_dict(obj.get("data")).items()}
        for key, value in as_dict(obj.pop("stringData", None)).items():
            data[str(key)] = base64.b64encode(str(value).encode()).decode("ascii")
        for key, value in data.items():
            try:
                base64.b64decode(value, validate=True)
            except ValueError as exc:
                raise ApiError(422, "Invalid", f"data[{key}]: illegal base64 data") from exc
        obj["data"] = data
        obj.setdefault("type", "Opaque")
        return obj

    def _create_secret(self, namespace: str, body: bytes) -> Response:
        store = self.sim.store
        obj = self._secret_body(namespace, body)
        name = obj["metadata"]["name"]
        with store.lock:
            if store.get(NAMESPACES, "", namespace) is None:
                raise _not_found(NAMESPACES, namespace)
            if store.get(SECRETS, namespace, name) is not None:
                raise ApiError(409, "AlreadyExists", f'secrets "{name}" already exists')
            return _json(201, store.apply(SECRETS, obj, time.time()))

    def _replace_secret(self, namespace: str, name: str, body: bytes) -> Response:
        store = self.sim.store
        obj = self._secret_body(namespace, body, name)
        with store.lock:
            if store.get(SECRETS, namespace, name) is None:
                raise _not_found(SECRETS, name)
            # A replace, not a merge: labels and data are exactly what was sent.
            store.delete(SECRETS, namespace, name)
            return _json(200, store.apply(SECRETS, obj, time.time()))

    # --- create ------------------------------------------------------------------------------

    def _create(
        self,
        resource: Resource,
        namespace: str,
        query: dict[str, str],
        body: bytes,
        user: UserInfo,
    ) -> Response:
        """POST: the object checked and defaulted as the API server's create handler does
        (k8s.io/apiserver ``pkg/endpoints/handlers/create.go``), admitted as ``user``
        (``admission.admit_object``: the webhooks, then ResourceQuota), stored with its system
        fields; with ``dryRun=All`` all of that but the storing."""
        dry_run = _dry_run(query.get("dryRun", ""))
        obj = _parse_object(body)
        api_version = str(obj.get("apiVersion") or resource.api_version)
        kind = str(obj.get("kind") or resource.kind)
        if api_version != resource.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({resource.api_version})",
            )
        if kind != resource.kind:
            # handlers/rest.go transformDecodeError, for a body of another kind.
            version = api_version.rpartition("/")[2]
            raise ApiError(
                400,
                "BadRequest",
                f'{kind} in version "{version}" cannot be handled as a {resource.kind}: '
                f"no kind {json.dumps(kind)} is registered for this resource",
            )
        metadata = as_dict(obj.get("metadata"))
        if metadata.get("namespace") not in (None, "", namespace):
            # registry/rest/meta.go EnsureObjectNamespaceMatchesRequestNamespace.
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        if metadata.get("resourceVersion"):
            raise ApiError(
                400, "BadRequest", "resourceVersion should not be set on objects to be created"
            )
        # BeforeCreate: FillObjectMetaSystemFields, and PrepareForCreate drops the status.
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
            metadata.pop(field, None)
        metadata["namespace"] = namespace
        obj.update(apiVersion=api_version, kind=kind, metadata=metadata)
        obj.pop("status", None)
        store = self.sim.store
        with store.lock:
            if store.get(NAMESPACES, "", namespace) is None:
                raise _not_found(NAMESPACES, namespace)
            if not metadata.get("name") and metadata.get("generateName"):
                metadata["name"] = self._generate_name(
                    resource, namespace, str(metadata["generateName"])
                )
            name = str(metadata.get("name") or "")
            causes = _validation_causes(resource, obj)
            if causes:
                raise _invalid(resource, name, causes)
            if store.get(resource, namespace, name) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.qualified} "{name}" already exists',
                    _details(resource, name),
                )
            try:
                admitted = admit_object(
                    store, obj, resource, requester=user.name, groups=user.all_groups
                )
            except WebhookUnreachable as exc:
                # A webhook failing closed (the mutating dispatcher's ``Dispatch``):
                # ``apierrors.NewInternalError``, whose one cause is the calling error.
                raise ApiError(
                    500, "InternalError", str(exc), {"causes": [{"message": exc.cause}]}
                ) from exc
            except Rejected as exc:
                raise ApiError(403, "Forbidden", str(exc), _details(resource, name)) from exc
            now = time.time()
            if dry_run:
                # A dry run fills the system fields but stores nothing: no resourceVersion.
                admitted["metadata"].update(
                    uid=store.new_uid(), creationTimestamp=timestamp(now), generation=1
                )
                return _json(201, admitted)
            return _json(201, store.apply(resource, admitted, now))

    def _generate_name(self, resource: Resource, namespace: str, prefix: str) -> str:
        """``names.SimpleNameGenerator``: the prefix (cut to 58 characters) and five random
        characters, drawn again while the name is taken (``RetryGenerateName``)."""
        chooser = random.Random(f"{self.sim.store.resource_version}/{namespace}/{prefix}")  # noqa: S311
        while True:
            name = prefix[:58] + "".join(chooser.choice(NAME_ALPHABET) for _ in range(5))
            if self.sim.store.get(resource, namespace, name) is None:
                return name

    # --- delete ------------------------------------------------------------------------------

    def _delete(
        self, resource: Resource, namespace: str, name: str, query: dict[str, str], body: bytes
    ) -> Response:
        """DELETE with ``DeleteOptions`` in the body or the query: ``propagationPolicy`` and
        ``dryRun`` (``gc``). Pods are deleted at once (no graceful deletion) and answered with
        the pod (their registry's ``ReturnDeletedObject``); an object deleted at once answers a
        Status naming it (``Store.finalizeDelete``), one left to a finalizer answers itself."""
        options = _parse_object(body) if body.strip() else {}
        given = query.get("propagationPolicy") or options.get("propagationPolicy")
        if given is not None and given not in POLICIES:
            # apimachinery ValidateDeleteOptions.
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                f'value: {json.dumps(given)}: supported values: "Foreground", "Background", '
                f'"Orphan", "nil"',
            )
        dry_run = _dry_run(query.get("dryRun", "") or ",".join(as_list(options.get("dryRun"))))
        now = time.time()
        if resource is PODS:
            if dry_run:
                pod = self.sim.store.get(PODS, namespace, name)
                if pod is None:
                    raise _not_found(resource, name)
                return _json(200, pod)
            try:
                return _json(200, self.sim.cluster.delete_pod(namespace, name, now))
            except NotFound as exc:
                raise _not_found(resource, name) from exc
        policy = str(given or default_policy(resource))
        deletion = self.sim.gc.delete(resource, namespace, name, policy, now, dry_run=dry_run)
        if deletion is None:
            raise _not_found(resource, name)
        warnings: tuple[tuple[str, str], ...] = ()
        if resource is JOBS and given is None:
            warnings = (("Warning", f'299 - "{JOB_DELETE_WARNING}"'),)
        if not deletion.gone:
            return dataclasses.replace(_json(200, deletion.obj), headers=warnings)
        details = _details(resource, name)
        details["uid"] = as_dict(deletion.obj.get("metadata")).get("uid", "")
        payload = status_object(200, "", "", details)
        payload.pop("code")
        return dataclasses.replace(_json(200, payload), headers=warnings)

    # --- logs --------------------------------------------------------------------------------

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> Response:
        """``pods/log``: the container's log as text (``logs``), its last ``tailLines`` lines,
        with ``timestamps``; 400 when the container is not given and not the only one, or
        has not started."""
        try:
            tail = int(query["tailLines"]) if query.get("tailLines") else None
        except ValueError as exc:
            raise ApiError(
                400, "BadRequest", f"tailLines: Invalid value: {query['tailLines']!r}"
            ) from exc
        if tail is not None and tail < 0:
            raise ApiError(
                422,
                "Invalid",
                f'PodLogOptions "{name}" is invalid: tailLines: Invalid value: {tail}: must be '
                "greater than or equal to 0",
            )
        pod = self.sim.store.get(PODS, namespace, name)
        if pod is None:
            raise _not_found(PODS, name)
        try:
            container = choose_container(pod, query.get("container", ""))
            output = self.sim.program_output(pod, container)
            lines = container_log(pod, container, self.sim.clock(), output)
        except LogUnavailable as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        timestamps = query.get("timestamps", "").lower() in ("true", "1")
        return _text(200, render(lines, tail=tail, timestamps=timestamps))

    def _evict(self, namespace: str, name: str, body: bytes) -> Response:
        eviction = _parse_object(body)
        # Like the API server, a body without apiVersion/kind is read as this endpoint's kind.
        if eviction.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, "BadRequest", "the request body must be a policy/v1 Eviction")
        given = as_dict(eviction.get("metadata")).get("name")
        if given and given != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        try:
            self.sim.cluster.evict(namespace, name, time.time())
        except NotFound as exc:
            raise _not_found(PODS, name) from exc
        except disruption.Refused as exc:
            reason = {429: "TooManyRequests", 403: "Forbidden"}.get(exc.code, "InternalError")
            details = (
                {"causes": [{"reason": "DisruptionBudget", "message": exc.cause}]}
                if exc.cause
                else None
            )
            raise ApiError(exc.code, reason, exc.message, details) from exc
        return _json(201, status_object(201, "", ""))

    # --- Kueue's visibility API ---------------------------------------------------------------

    def _pending_workloads(self, method: str, rest: list[str], query: dict[str, str]) -> Response:
        """``GET .../clusterqueues/<cq>/pendingworkloads`` and
        ``.../namespaces/<ns>/localqueues/<lq>/pendingworkloads`` (``visibility.py``)."""
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        try:
            offset = int(query.get("offset", "0") or 0)
            limit = int(query.get("limit", str(visibility.DEFAULT_LIMIT)) or 0)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"offset and limit must be integers: {exc}") from exc
        kueue = self.sim.cluster.kueue
        try:
            with self.sim.store.lock:
                if len(rest) == 3 and rest[0] == "clusterqueues" and rest[2] == "pendingworkloads":
                    summary = visibility.cluster_queue_pending(
                        kueue, rest[1], offset=offset, limit=limit
                    )
                elif (
                    len(rest) == 5
                    and rest[0] == "namespaces"
                    and rest[2] == "localqueues"
                    and rest[4] == "pendingworkloads"
                ):
                    summary = visibility.local_queue_pending(
                        kueue, rest[1], rest[3], offset=offset, limit=limit
                    )
                else:
                    raise NO_SUCH_PATH
        except visibility.QueueNotFound as exc:
            details = {"name": exc.name, "group": visibility.GROUP, "kind": exc.kind}
            raise ApiError(404, "NotFound", str(exc), details) from exc
        return _json(200, summary)

    # --- OpenCost ----------------------------------------------------------------------------

    def _allocation(self, method: str, rest: list[str], query: dict[str, str]) -> Response:
        if rest not in ([], ["compute"]):
            raise NO_SUCH_PATH
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        now = time.time()
        try:
            window = opencost.parse_window(query.get("window", ""), now)
        except opencost.BadWindow as exc:
            # http.Error in OpenCost's handler: plain text, not the JSON envelope.
            return _text(400, f"Invalid 'window' parameter: {exc}\n")
        aggregate = query.get("aggregate", "")
        if aggregate != "namespace":
            return _text(
                400,
                f"Invalid 'aggregate' parameter: {aggregate!r}: the simulator aggregates by "
                "namespace only\n",
            )
        sim = self.sim
        try:
            step = opencost.accumulate_step(query.get("accumulate", ""))
            if step is None:
                given = query.get("step", "")
                step = opencost.parse_step(given) if given else window[1] - window[0]
            include_idle = query.get("includeIdle", "false").lower() in ("true", "1")
            with sim.store.lock:
                placements = [dataclasses.replace(p) for p in sim.cluster.placements]
                labels = {
                    str(as_dict(ns.get("metadata")).get("name")): {
                        str(k): str(v)
                        for k, v in as_dict(as_dict(ns.get("metadata")).get("labels")).items()
                    }
                    for ns in sim.store.list(NAMESPACES)
                }
            data = opencost.allocation_sets(
                cluster=sim.config.fleet_name,
                placements=placements,
                nodes=sim.cluster.node_capacities(),
                prices=sim.config.prices,
                window=window,
                step=step if step > 0 else window[1] - window[0] or 1.0,
                now=now,
                include_idle=include_idle,
                namespace_labels=labels,
            )
        except opencost.BadRequest as exc:
            return _json(400, opencost.error_envelope(400, str(exc)))
        return Response(200, opencost.to_json(opencost.envelope(data)))

    # --- tenants' virtual clusters -----------------------------------------------------------

    def _virtual(self, method: str, parts: list[str], headers: Any, body: bytes) -> Response:
        if len(parts) < 2:
            raise NO_SUCH_PATH
        namespace, release, rest = parts[0], parts[1], parts[2:]
        if (namespace, release) not in self.sim.flux.virtual:
            raise ApiError(
                404, "NotFound", f"no virtual cluster {release!r} in namespace {namespace!r}"
            )
        cluster = self.sim.flux.virtual_cluster(namespace, release)
        if cluster is None:
            raise ApiError(503, "ServiceUnavailable", "the virtual cluster's control plane is down")
        given = str(headers.get("Authorization") or "")
        scheme, _, token = given.partition(" ")
        try:
            if scheme.lower() != "bearer" or not token:
                raise virtual.Unauthenticated("no credential")
            user = cluster.authenticate_token(token.strip())
        except virtual.Unauthenticated as exc:
            # The API server tells the client nothing more; its log has the reason.
            logger.info("virtual cluster %s/%s: unauthenticated: %s", namespace, release, exc)
            raise ApiError(401, "Unauthorized", "Unauthorized") from exc
        payload = _parse_body(body) if body else None
        self.sim.syncer.attach(cluster)
        try:
            answer = virtual.serve(cluster, user, method, rest, payload)
        except virtual.Forbidden as exc:
            raise ApiError(403, "Forbidden", str(exc)) from exc
        except virtual.NotFound as exc:
            raise ApiError(404, "NotFound", str(exc)) from exc
        except virtual.NotAllowed as exc:
            raise ApiError(405, "MethodNotAllowed", str(exc)) from exc
        except virtual.Refused as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from exc
        return _json(201 if method == "POST" else 200, answer)

    # --- simulation control ------------------------------------------------------------------

    def _control(self, method: str, parts: list[str], body: bytes) -> Response:
        sim = self.sim
        if parts == ["faults"] and method == "DELETE":
            sim.clear_faults()
            return _json(200, {"faults": "cleared"})
        if parts == ["faults"] and method == "POST":
            fault = _parse_object(body)
            kind, node = fault.get("kind"), fault.get("node")
            if kind in ("kueue-webhook-down", "kueue-webhook-up"):
                sim.set_kueue_webhook_reachable(kind == "kueue-webhook-up")
                return _json(200, {"kueueWebhook": "up" if kind == "kueue-webhook-up" else "down"})
            if not isinstance(node, str):
                raise ApiError(400, "BadRequest", "a fault needs the node's name in 'node'")
            try:
                if kind == "xid":
                    gpu, xid = fault.get("gpu"), fault.get("xid")
                    if not isinstance(gpu, int) or not isinstance(xid, int):
                        raise ApiError(400, "BadRequest", "an xid fault needs integer gpu and xid")
                    sim.inject_xid(node, gpu, xid)
                elif kind in ("not-ready", "ready"):
                    sim.set_node_ready(node, kind == "ready")
                elif kind == "condition":
                    # A node agent's condition: NVSentinel's Gpu*Watch (a failed DCGM health
                    # watch) or a Node Problem Detector GPU check.
                    ctype, status = fault.get("type"), fault.get("status", "True")
                    reason, message = fault.get("reason", ""), fault.get("message", "")
                    texts = (ctype, status, reason, message)
                    if not all(isinstance(t, str) for t in texts) or not ctype:
                        raise ApiError(
                            400, "BadRequest", "a condition fault needs string type and status"
                        )
                    if status not in ("True", "False", "Unknown"):
                        raise ApiError(400, "BadRequest", "status must be True, False or Unknown")
                    sim.set_condition(node, str(ctype), str(status), str(reason), str(message))
                elif kind == "diag-fail":
                    try:
                        sim.fail_diag(node, str(fault.get("test", "memory")))
                    except ValueError as exc:
                        raise ApiError(400, "BadRequest", f"a diag-fail fault: {exc}") from exc
                elif kind == "nccl-slow":
                    share = fault.get("fraction")
                    if not isinstance(share, int | float) or isinstance(share, bool):
                        raise ApiError(400, "BadRequest", "an nccl-slow fault needs a fraction")
                    try:
                        sim.slow_nccl(node, float(share))
                    except ValueError as exc:
                        raise ApiError(400, "BadRequest", f"an nccl-slow fault: {exc}") from exc
                elif kind in ("idle", "busy"):
                    gpu = fault.get("gpu")
                    if gpu is not None and not isinstance(gpu, int):
                        raise ApiError(400, "BadRequest", "an idle fault's gpu is an integer")
                    sim.set_gpu_idle(node, gpu, kind == "idle")
                else:
                    raise ApiError(
                        400,
                        "BadRequest",
                        "kind must be 'xid', 'not-ready', 'ready', 'condition', 'diag-fail', "
                        "'nccl-slow', 'idle', 'busy', "
                        "'kueue-webhook-down' or 'kueue-webhook-up'",
                    )
            except NotFound as exc:
                raise ApiError(404, "NotFound", str(exc)) from exc
            return _json(200, sim.store.get(NODES, "", node))
        if parts == ["objects"] and method == "PUT":
            request = _parse_object(body)
            resource = RESOURCES.get(str(request.get("resource")))
            obj = request.get("object")
            if resource is None or not isinstance(obj, dict):
                known = ", ".join(sorted(RESOURCES))
                raise ApiError(
                    400, "BadRequest", f"give 'resource' (one of {known}) and an 'object'"
                )
            return _json(200, sim.store.put_raw(resource, obj))
        if parts == ["flux-install"] and method == "GET":
            return Response(200, flux_install.export(), "application/yaml")
        if len(parts) == 4 and parts[0] == "jobs" and parts[3] == "finish" and method == "POST":
            # The demo's and the tests' hand on a Job: its pods end now, as ``outcome`` says.
            outcome = _parse_object(body).get("outcome", "Succeeded")
            if outcome not in ("Succeeded", "Failed"):
                raise ApiError(400, "BadRequest", "outcome must be 'Succeeded' or 'Failed'")
            try:
                ended = sim.finish_job(parts[1], parts[2], str(outcome))
            except LookupError as exc:
                raise ApiError(404, "NotFound", str(exc)) from exc
            return _json(200, {"pods": ended})
        if parts == ["tick"] and method == "POST":
            sim.tick()
            return _json(200, {"resourceVersion": sim.store.resource_version})
        raise NO_SUCH_PATH


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    # Headers and body go out as separate writes; with Nagle's algorithm the body waits for
    # the client's delayed ACK, 40 ms on every request of a kept-alive connection.
    disable_nagle_algorithm = True
    server: ApiServer

    def _serve(self) -> None:
        try:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", "invalid Content-Length") from exc
            if length > MAX_BODY:
                raise ApiError(413, "RequestEntityTooLarge", "the request body is too large")
            body = self.rfile.read(length) if length > 0 else b""
            response = self.server.api.handle(self.command, self.path, self.headers, body)
        except ApiError as exc:
            response = _json(
                exc.code, status_object(exc.code, exc.reason, exc.message, exc.details)
            )
        except Exception:
            # One bad request must never take the server down.
            logger.exception("simulator request %s %s failed", self.command, self.path)
            response = _json(500, status_object(500, "InternalError", "internal error"))
        self.send_response(response.code)
        self.send_header("Content-Type", response.content_type)
        for header, value in response.headers:
            self.send_header(header, value)
        if response.stream is not None:
            self._stream(response.stream)
            return
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        """Write a watch as HTTP/1.1 chunks, each flushed at once; the connection closes at the
        end (the client watches again on a new request)."""
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("a watch client went away")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), format % args)


class ApiServer(ThreadingHTTPServer):
    """The HTTP server; one thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: Api) -> None:
        super().__init__(address, _Handler)
        self.api = api

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Request errors are answered in the handler; what reaches here is a client hanging up
        # mid-connection, which is no reason for a traceback on stderr.
        logger.debug("connection from %s ended abruptly", client_address, exc_info=True)
