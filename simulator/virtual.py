"""A tenant's virtual cluster as its API server answers people: who a request comes from and
what RBAC lets them do, enough to show that cluster access follows tenant membership.

Modelled on kube-apiserver as vCluster's k8s distro runs it (``controlPlane.distro.k8s``):

- **Flags.** The OIDC flags come from ``controlPlane.distro.k8s.apiServer.extraArgs`` (vCluster
  merges them into the command line, ``pkg/k8s/k8s.go``) and are read when the control plane
  (re)starts. An issuer URL that is not ``https`` stops the API server, as kube-apiserver's
  validation does ("URL scheme must be https", k8s.io/apiserver ``pkg/apis/apiserver/
  validation``), and the release then never becomes ready.
- **Authentication** of a bearer token as an OIDC ID token, as the k8s OIDC authenticator does
  (``plugin/pkg/authenticator/token/oidc``): discovery at ``<issuer>/.well-known/openid-
  configuration`` (its ``issuer`` must be the flag's exactly), the signature checked against the
  provider's JWKS (fetched over TLS with the trust the control plane has, ``oidc_ca_file``),
  ``iss``, ``aud`` containing the client id, ``exp``; the user name is the username claim with
  ``--oidc-username-prefix`` (by default the issuer URL and ``#``, none for ``email``), an
  ``email`` claim is refused when ``email_verified`` says false; groups likewise, prefixed. Any
  failure is 401. Flux's kubeconfig authenticates with the admin certificate vCluster exports
  (a member of ``system:masters``).
- **Authorisation** by RBAC (rule matching and the bootstrap roles: ``rbac.py``):
  ClusterRoleBindings and ClusterRoles (RoleBindings are not modelled; nothing the portal
  writes into a tenant cluster uses them). A request is allowed when a rule of a role bound to
  the user, one of their groups or, for ``system:serviceaccount:<ns>:<name>``, that service
  account, matches its verb, API group, resource and name. Creating or changing a binding
  also needs ``bind`` on its role, or every right the role grants (``pkg/registry/rbac``
  escalation check), and a binding's ``roleRef`` cannot change.
- **What it serves**: ``selfsubjectreviews`` (``kubectl auth whoami``),
  ``selfsubjectaccessreviews`` (``kubectl auth can-i``), reads of what it stores (ClusterRoles
  and ClusterRoleBindings, Namespaces, events) and reads and writes of the kinds the syncer
  takes to the host (``syncer.py``): Pods, Services, Endpoints, EndpointSlices. A create is a
  POST, a PATCH applies (creating what is missing, as server-side apply does), a DELETE
  removes the object at once (no graceful deletion). A pod gets the defaults of
  ``pkg/apis/core/v1/defaults.go`` and of the admission plugins that set fields
  (``DefaultTolerationSeconds``, ``ServiceAccount`` without a token volume, ``Priority``) and
  its QoS class; any other resource answers an authorised read with an empty list (or 404 for
  a name). Refusals carry the API server's messages. A Service POST goes to the syncer's
  filter (``service_proxy``), which creates it in the host first.
- **Its own objects**: the namespaces ``default``, ``kube-system``, ``kube-public`` and
  ``kube-node-lease``, and once the control plane runs the ``kube-dns`` Service of the CoreDNS
  it deploys (``controlPlane.coredns``, vCluster ``pkg/coredns/template.go``; its Deployment
  and pods are not modelled).

The manifests of ``experimental.deploy.vcluster.manifests`` are applied when the control
plane starts, and those that left it since the last start are deleted
(``pkg/controllers/deploy``); the objects Flux applies through the exported kubeconfig survive
restarts, as they would in the cluster's own storage.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
import requests
import yaml

from simulator.rbac import (
    BOOTSTRAP_BINDINGS,
    BOOTSTRAP_ROLES,
    MASTERS,
    RBAC_GROUP,
    Attributes,
    UserInfo,
    applies_to_user,
    forbidden_message,
    impersonated,
    rule_allows,
)
from simulator.store import JsonObject, as_dict, as_list, merge_patch, timestamp

ADMIN_USER = "kubernetes-admin"
HTTP_TIMEOUT = 5.0


class Unauthenticated(Exception):
    """The request's credential is not one this API server accepts (401)."""


class Forbidden(Exception):
    """RBAC refused the request (403); the message is the API server's."""


class Invalid(Exception):
    """The object cannot be stored as asked (422)."""


class WriteRefused(Exception):
    """A write of ``apply`` the API server would refuse: the object, the Status reason
    (``Forbidden`` or ``Invalid``) and the API server's message."""

    def __init__(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        super().__init__(message)
        self.obj = obj
        self.reason = reason
        self.message = message


class Refused(Exception):
    """A write the API server answers with an error status (code, reason, message)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class ApiServerRefused(ValueError):
    """kube-apiserver would not start with these flags; the message is its complaint."""


@dataclass(frozen=True)
class OidcFlags:
    """kube-apiserver's --oidc-* flags (their defaults where left out)."""

    issuer_url: str
    client_id: str
    username_claim: str = "sub"
    username_prefix: str | None = None
    groups_claim: str = ""
    groups_prefix: str = ""
    signing_algs: tuple[str, ...] = ("RS256",)

    @property
    def prefix(self) -> str:
        """The user name prefix kube-apiserver applies: by default the issuer URL and ``#``
        for any claim but ``email``; ``-`` for none."""
        if self.username_prefix is None:
            return "" if self.username_claim == "email" else f"{self.issuer_url}#"
        return "" if self.username_prefix == "-" else self.username_prefix


def parse_api_server_args(args: Sequence[object]) -> OidcFlags | None:
    """The OIDC flags among kube-apiserver arguments (``--flag=value`` or ``--flag value``);
    None without ``--oidc-issuer-url``. ``ApiServerRefused`` for flags it would not start with."""
    flags: dict[str, str] = {}
    items = [str(a) for a in args]
    index = 0
    while index < len(items):
        item = items[index]
        name, has_value, value = item.partition("=")
        if not has_value and index + 1 < len(items) and not items[index + 1].startswith("--"):
            value = items[index + 1]
            index += 1
        flags[name.removeprefix("--")] = value
        index += 1
    issuer = flags.get("oidc-issuer-url", "")
    if not issuer:
        if any(key.startswith("oidc-") for key in flags):
            raise ApiServerRefused("--oidc-* flags need --oidc-issuer-url")
        return None
    parts = urlsplit(issuer)
    if parts.scheme != "https":
        raise ApiServerRefused(
            f'oidc-issuer-url: Invalid value: "{issuer}": URL scheme must be https'
        )
    if parts.query or parts.fragment or parts.username:
        raise ApiServerRefused(
            f'oidc-issuer-url: Invalid value: "{issuer}": URL must not contain a query, '
            "fragment or user info"
        )
    if not flags.get("oidc-client-id"):
        raise ApiServerRefused("oidc-client-id: Required value: when oidc-issuer-url is set")
    algs = tuple(a for a in flags.get("oidc-signing-algs", "RS256").split(",") if a)
    return OidcFlags(
        issuer_url=issuer,
        client_id=flags["oidc-client-id"],
        username_claim=flags.get("oidc-username-claim") or "sub",
        username_prefix=flags.get("oidc-username-prefix"),
        groups_claim=flags.get("oidc-groups-claim", ""),
        groups_prefix=flags.get("oidc-groups-prefix", ""),
        signing_algs=algs or ("RS256",),
    )


def api_server_flags(values: Mapping[str, Any]) -> OidcFlags | None:
    """The OIDC flags a vCluster release's values give its API server."""
    k8s = as_dict(as_dict(as_dict(values.get("controlPlane")).get("distro")).get("k8s"))
    return parse_api_server_args(as_list(as_dict(k8s.get("apiServer")).get("extraArgs")))


class OidcAuthenticator:
    """ID tokens of one issuer for one client, verified as kube-apiserver verifies them."""

    def __init__(self, flags: OidcFlags, ca_file: str = "") -> None:
        self.flags = flags
        self.verify: str | bool = ca_file or True
        self._keys: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _get(self, url: str) -> Any:
        try:
            response = requests.get(url, timeout=HTTP_TIMEOUT, verify=self.verify)
            response.raise_for_status()
            return response.json()
        except (requests.RequestException, ValueError) as exc:
            raise Unauthenticated(f"oidc: fetching {url}: {exc}") from exc

    def _refresh_keys(self) -> None:
        issuer = self.flags.issuer_url
        discovery = as_dict(self._get(f"{issuer.rstrip('/')}/.well-known/openid-configuration"))
        if discovery.get("issuer") != issuer:
            raise Unauthenticated(
                "oidc: issuer did not match the issuer returned by provider, expected "
                f"{issuer!r} got {discovery.get('issuer')!r}"
            )
        keys = jwt.PyJWKSet.from_dict(as_dict(self._get(str(discovery.get("jwks_uri")))))
        self._keys = {str(key.key_id): key for key in keys.keys}

    def _key(self, kid: str) -> Any:
        with self._lock:
            if kid not in self._keys:
                self._refresh_keys()  # a key the provider rotated in, or the first request
            key = self._keys.get(kid)
        if key is None:
            raise Unauthenticated(f"oidc: no key {kid!r} in the provider's key set")
        return key

    def authenticate(self, token: str) -> UserInfo:
        flags = self.flags
        try:
            header = jwt.get_unverified_header(token)
            key = self._key(str(header.get("kid", "")))
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(flags.signing_algs),
                audience=flags.client_id,
                issuer=flags.issuer_url,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"oidc: verify token: {exc}") from exc
        username = claims.get(flags.username_claim)
        if not isinstance(username, str) or not username:
            raise Unauthenticated(f"oidc: parse username claims {flags.username_claim!r}")
        if flags.username_claim == "email" and claims.get("email_verified", True) is not True:
            raise Unauthenticated("oidc: email not verified")
        groups: list[str] = []
        if flags.groups_claim:
            value = claims.get(flags.groups_claim)
            values = [value] if isinstance(value, str) else as_list(value)
            groups = [f"{flags.groups_prefix}{g}" for g in values if isinstance(g, str)]
        return UserInfo(f"{flags.prefix}{username}", tuple(groups))


def _resource_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(API group, plural) of an object, the way RBAC names it."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = str(obj.get("kind", ""))
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    return group, plural


ObjectKey = tuple[str, str, str, str]  # (group, kind, namespace, name)


def _derived_uid(*parts: str) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    metadata = as_dict(obj.get("metadata"))
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return (
        group,
        str(obj.get("kind", "")),
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
    )


# (API group, resource) -> kind of what the virtual API serves from its storage.
SERVED: dict[tuple[str, str], str] = {
    (RBAC_GROUP, "clusterroles"): "ClusterRole",
    (RBAC_GROUP, "clusterrolebindings"): "ClusterRoleBinding",
    ("", "namespaces"): "Namespace",
    ("events.k8s.io", "events"): "Event",
    ("", "pods"): "Pod",
    ("", "services"): "Service",
    ("", "endpoints"): "Endpoints",
    ("discovery.k8s.io", "endpointslices"): "EndpointSlice",
}
WRITABLE = frozenset(
    {("", "pods"), ("", "services"), ("", "endpoints"), ("discovery.k8s.io", "endpointslices")}
)
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# vCluster pkg/coredns/template.go: the Service in front of the CoreDNS it deploys.
DNS_SERVICE: JsonObject = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "kube-dns",
        "namespace": "kube-system",
        "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        "labels": {
            "k8s-app": "vcluster-kube-dns",
            "kubernetes.io/cluster-service": "true",
            "kubernetes.io/name": "CoreDNS",
        },
    },
    "spec": {
        "type": "ClusterIP",
        "selector": {"k8s-app": "vcluster-kube-dns"},
        "ports": [
            {"name": "dns", "port": 53, "targetPort": 1053, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "targetPort": 1053, "protocol": "TCP"},
            {"name": "metrics", "port": 9153, "protocol": "TCP"},
        ],
    },
}
_NOT_READY_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def qos_class(pod: Mapping[str, Any]) -> str:
    """``pkg/apis/core/helper/qos`` ``GetPodQOS`` on cpu and memory: BestEffort without
    requests or limits, Guaranteed when every container limits both to its requests."""
    spec = as_dict(pod.get("spec"))
    containers = [
        as_dict(c) for kind in ("initContainers", "containers") for c in as_list(spec.get(kind))
    ]
    any_set, guaranteed = False, True
    for container in containers:
        resources = as_dict(container.get("resources"))
        requests, limits = as_dict(resources.get("requests")), as_dict(resources.get("limits"))
        if any(name in requests or name in limits for name in ("cpu", "memory")):
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_defaults(pod: JsonObject) -> None:
    """What the API server fills in on a new pod: ``SetDefaults_Pod``/``PodSpec`` (requests
    from limits, DNS and restart policies, grace period, scheduler, service links), the
    ``ServiceAccount`` (name only), ``Priority`` and ``DefaultTolerationSeconds`` admission
    plugins, and the status a pod starts with."""
    spec = pod.setdefault("spec", {})
    for container in [
        as_dict(c) for kind in ("initContainers", "containers") for c in as_list(spec.get(kind))
    ]:
        resources = as_dict(container.get("resources"))
        limits = as_dict(resources.get("limits"))
        if limits:
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
            container["resources"] = resources
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    tolerations = [as_dict(t) for t in as_list(spec.get("tolerations"))]
    for default in _NOT_READY_TOLERATIONS:
        if not any(
            t.get("key") == default["key"] and t.get("effect") in (None, "", "NoExecute")
            for t in tolerations
        ):
            tolerations.append(dict(default))
    spec["tolerations"] = tolerations
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}


class VirtualCluster:
    """One vCluster's API: its objects, whom it trusts, and at which addresses."""

    def __init__(self, namespace: str, release: str, *, ca_file: str = "") -> None:
        self.namespace = namespace
        self.release = release
        self.ca_file = ca_file
        self.objects: dict[ObjectKey, JsonObject] = {}
        self.addresses: frozenset[str] = frozenset()
        self.oidc: OidcAuthenticator | None = None
        self.admin_certificate = b""
        self._init_manifests: list[JsonObject] = []
        self.lock = threading.RLock()
        # The release's values as of the last control-plane start (the syncer reads them).
        self.values: Mapping[str, Any] = {}
        self._created = 0
        # The virtual API's Service filter, set by the syncer (``syncer.py``).
        self.service_proxy: Callable[[JsonObject, float], JsonObject] | None = None
        for name in NAMESPACES:
            self._put(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                    "status": {"phase": "Active"},
                }
            )
        for name, rules in BOOTSTRAP_ROLES.items():
            self._put(
                {
                    "apiVersion": f"{RBAC_GROUP}/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": name},
                    "rules": rules,
                }
            )
        for name, group in BOOTSTRAP_BINDINGS.items():
            self._put(
                {
                    "apiVersion": f"{RBAC_GROUP}/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
                    "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group}],
                }
            )

    # --- the control plane -------------------------------------------------------------------

    def start(self, values: Mapping[str, Any], admin_certificate: bytes, now: float) -> None:
        """What a (re)start of the control plane reads from the release's values: the API
        server's flags, the addresses its certificate and routes serve, and the manifests the
        deploy controller applies (deleting those of the last start that are gone)."""
        # A control plane only runs with flags that start (flux.py _control_plane_problem).
        flags = api_server_flags(values)
        control = as_dict(values.get("controlPlane"))
        service = f"{self.release}.{self.namespace}.svc"
        hosts = {service, f"{service}.cluster.local"}
        route = as_dict(control.get("tlsRoute"))
        if route.get("enabled") is True and route.get("host"):
            hosts.add(str(route["host"]))
        with self.lock:
            self.values = copy.deepcopy(dict(values))
            coredns = as_dict(control.get("coredns"))
            if (
                coredns.get("enabled", True) is not False
                and self.get("", "Service", "kube-system", "kube-dns") is None
            ):
                self._put(DNS_SERVICE, now)
            self.addresses = frozenset(hosts)
            self.admin_certificate = admin_certificate
            if flags is None:
                self.oidc = None
            elif self.oidc is None or self.oidc.flags != flags:
                self.oidc = OidcAuthenticator(flags, self.ca_file)
            text = as_dict(
                as_dict(as_dict(values.get("experimental")).get("deploy")).get("vcluster")
            ).get("manifests")
            wanted = [d for d in yaml.safe_load_all(str(text or "")) if isinstance(d, dict)]
            kept = {object_key(o) for o in wanted}
            for old in self._init_manifests:
                if object_key(old) not in kept:
                    self.objects.pop(object_key(old), None)
            for obj in wanted:
                self._put(obj, now)
            self._init_manifests = wanted

    def answers(self, server: str) -> bool:
        """Whether a kubeconfig's server URL reaches this cluster's API."""
        parts = urlsplit(server)
        return (
            parts.scheme == "https"
            and parts.port in (None, 443)
            and parts.hostname in self.addresses
        )

    # --- authentication ----------------------------------------------------------------------

    def authenticate_token(self, token: str) -> UserInfo:
        if self.oidc is None:
            raise Unauthenticated("no authenticator accepts the token")
        return self.oidc.authenticate(token)

    def authenticate_certificate(self, certificate: bytes) -> UserInfo:
        if not certificate or certificate != self.admin_certificate:
            raise Unauthenticated("x509: certificate signed by unknown authority")
        return UserInfo(ADMIN_USER, (MASTERS,))

    def impersonate(self, user: UserInfo, username: str) -> UserInfo:
        """``Impersonate-User`` (``rbac.impersonated``): a name that splits into a namespace
        and a service account name needs ``impersonate`` on that service account, and gets its
        groups; any other needs ``impersonate`` on users."""
        asked = impersonated(username, (), "")
        if asked is None:
            return user
        for check in asked.checks:
            self.authorize(user, check)
        return asked.user

    # --- authorisation -----------------------------------------------------------------------

    def _bound_rules(self, user: UserInfo) -> list[Mapping[str, Any]]:
        rules: list[Mapping[str, Any]] = []
        for (group, kind, _, _), binding in self.objects.items():
            if (group, kind) != (RBAC_GROUP, "ClusterRoleBinding"):
                continue
            subjects = as_list(binding.get("subjects"))
            if not any(applies_to_user(user, s, "") for s in subjects):
                continue
            role = as_dict(binding.get("roleRef"))
            cluster_role = self.objects.get((RBAC_GROUP, "ClusterRole", "", str(role.get("name"))))
            if role.get("kind") == "ClusterRole" and cluster_role is not None:
                rules += [as_dict(r) for r in as_list(cluster_role.get("rules"))]
        return rules

    def allowed(self, user: UserInfo, request: Attributes) -> bool:
        with self.lock:
            return any(rule_allows(rule, request) for rule in self._bound_rules(user))

    def authorize(self, user: UserInfo, request: Attributes) -> None:
        if not self.allowed(user, request):
            raise Forbidden(forbidden_message(user, request))

    def _may_bind(self, user: UserInfo, role_name: str) -> bool:
        """The RBAC escalation check for a binding to ClusterRole ``role_name``: ``bind`` on
        it, or every right it grants already."""
        if self.allowed(user, Attributes("bind", RBAC_GROUP, "clusterroles", name=role_name)):
            return True
        role = self.objects.get((RBAC_GROUP, "ClusterRole", "", role_name))
        for rule in as_list(as_dict(role).get("rules")) if role else []:
            rule = as_dict(rule)
            for verb in as_list(rule.get("verbs")):
                for group in as_list(rule.get("apiGroups")) or [""]:
                    for resource in as_list(rule.get("resources")):
                        wanted = Attributes(str(verb), str(group), str(resource))
                        if not self.allowed(user, wanted):
                            return False
                for path in as_list(rule.get("nonResourceURLs")):
                    if not self.allowed(user, Attributes(str(verb), path=str(path))):
                        return False
        return role is not None

    # --- objects -----------------------------------------------------------------------------

    def _put(self, obj: Mapping[str, Any], now: float | None = None) -> JsonObject:
        stored = json.loads(json.dumps(obj))
        metadata = stored["metadata"] = as_dict(stored.get("metadata"))
        metadata.setdefault("creationTimestamp", timestamp(now if now is not None else time.time()))
        key = object_key(stored)
        metadata.setdefault(
            "uid",
            as_dict(as_dict(self.objects.get(key)).get("metadata")).get("uid")
            or _derived_uid(self.namespace, self.release, *key, str(self._created)),
        )
        self._created += 1
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def get(self, group: str, kind: str, namespace: str, name: str) -> JsonObject | None:
        with self.lock:
            found = self.objects.get((group, kind, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def create(self, obj: Mapping[str, Any], now: float) -> JsonObject:
        """Store a new object as the API server would: a pod defaulted; ``Refused`` when the
        name is taken or the namespace is missing."""
        with self.lock:
            new = copy.deepcopy(dict(obj))
            key = object_key(new)
            group, kind, namespace, name = key
            if not name:
                raise Refused(422, "Invalid", f"{kind} is invalid: metadata.name: Required value")
            if namespace and ("", "Namespace", "", namespace) not in self.objects:
                raise Refused(404, "NotFound", f'namespaces "{namespace}" not found')
            if key in self.objects:
                plural = _resource_of(new)[1]
                qualified = f"{plural}.{group}" if group else plural
                raise Refused(409, "AlreadyExists", f'{qualified} "{name}" already exists')
            if kind == "Pod":
                pod_defaults(new)
            return self._put(new, now)

    def write(self, obj: Mapping[str, Any]) -> JsonObject:
        """Replace a stored object (a controller's update: the syncer's)."""
        with self.lock:
            new = copy.deepcopy(dict(obj))
            old = as_dict(as_dict(self.objects.get(object_key(new))).get("metadata"))
            metadata = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp"):
                if field in old:
                    metadata[field] = old[field]
            return self._put(new)

    def remove(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            self.objects.pop(object_key(obj), None)

    def record_event(
        self,
        regarding: Mapping[str, Any],
        kind: str,
        reason: str,
        action: str,
        note: str,
        controller: str,
        now: float,
    ) -> JsonObject:
        """An ``events.k8s.io/v1`` Event about ``regarding`` (``client-go tools/events``
        ``EventRecorder.Eventf``); the same reason on the same object again counts up."""
        meta = as_dict(regarding.get("metadata"))
        namespace = str(meta.get("namespace") or "default")
        digest = hashlib.sha256(f"{meta.get('uid')}/{reason}/{action}".encode()).hexdigest()
        name = f"{meta.get('name')}.{digest[:16]}"
        with self.lock:
            old = self.objects.get(("events.k8s.io", "Event", namespace, name))
            count = int(as_dict(as_dict(old).get("series")).get("count") or 1) + 1 if old else 0
            event: JsonObject = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": timestamp(now),
                "type": kind,
                "reason": reason,
                "action": action,
                "note": note,
                "reportingController": controller,
                "regarding": {
                    "apiVersion": regarding.get("apiVersion"),
                    "kind": regarding.get("kind"),
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                },
            }
            if count:
                event["series"] = {"count": count, "lastObservedTime": timestamp(now)}
            return self._put(event, now)

    def events(self, regarding: Mapping[str, Any]) -> list[JsonObject]:
        """The events about one object, oldest first."""
        uid = as_dict(regarding.get("metadata")).get("uid")
        return [
            e
            for e in self.listed("events.k8s.io", "Event")
            if as_dict(e.get("regarding")).get("uid") == uid
        ]

    def apply(
        self,
        user: UserInfo,
        objects: Sequence[Mapping[str, Any]],
        prune: Sequence[Mapping[str, Any]],
        now: float,
    ) -> None:
        """Server-side apply of ``objects`` and deletion of ``prune`` as ``user``: every
        request is checked first (kustomize-controller dry-runs the whole set), so a refused
        one changes nothing. ``WriteRefused`` with the first refusal."""
        with self.lock:
            for obj in objects:
                try:
                    self._check_write(user, obj)
                except Forbidden as exc:
                    raise WriteRefused(obj, "Forbidden", str(exc)) from exc
                except Invalid as exc:
                    raise WriteRefused(obj, "Invalid", str(exc)) from exc
            for obj in prune:
                group, plural = _resource_of(obj)
                key = object_key(obj)
                if key in self.objects:
                    try:
                        self.authorize(
                            user,
                            Attributes("delete", group, plural, namespace=key[2], name=key[3]),
                        )
                    except Forbidden as exc:
                        raise WriteRefused(obj, "Forbidden", str(exc)) from exc
            for obj in prune:
                self.objects.pop(object_key(obj), None)
            for obj in objects:
                self._put(obj, now)

    def _check_write(self, user: UserInfo, obj: Mapping[str, Any]) -> None:
        group, plural = _resource_of(obj)
        key = object_key(obj)
        live = self.objects.get(key)
        where = {"namespace": key[2], "name": key[3]}
        self.authorize(user, Attributes("patch", group, plural, **where))
        if live is None:
            self.authorize(user, Attributes("create", group, plural, **where))
        if (group, key[1]) == (RBAC_GROUP, "ClusterRoleBinding"):
            role = as_dict(obj.get("roleRef"))
            if live is not None and as_dict(live.get("roleRef")) != role:
                raise Invalid(
                    f'ClusterRoleBinding.rbac.authorization.k8s.io "{key[3]}" is invalid: '
                    "roleRef: Invalid value: cannot change roleRef"
                )
            if not self._may_bind(user, str(role.get("name"))):
                raise Forbidden(
                    f'clusterrolebindings.rbac.authorization.k8s.io "{key[3]}" is forbidden: '
                    f"user {json.dumps(user.name)} is attempting to grant RBAC permissions not "
                    "currently held"
                )

    def listed(self, group: str, kind: str, namespace: str | None = None) -> list[JsonObject]:
        with self.lock:
            return [
                json.loads(json.dumps(obj))
                for key, obj in sorted(self.objects.items())
                if key[:2] == (group, kind) and (namespace is None or key[2] == namespace)
            ]


class NotFound(Exception):
    """No such object or path (404)."""


class NotAllowed(Exception):
    """A method the simulated API does not serve (405)."""


_METHOD_VERBS = {
    "GET": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


def serve(
    cluster: VirtualCluster, user: UserInfo, method: str, parts: list[str], body: Any
) -> JsonObject:
    """Answer one authenticated request to the virtual API (``parts``: the path's segments)."""
    path = "/" + "/".join(parts)
    if method == "GET" and (
        parts in (["version"], ["api"], ["apis"], ["api", "v1"])
        or (parts[:1] == ["apis"] and len(parts) <= 3)
    ):
        # Discovery, for every authenticated user (system:discovery); its content is not
        # modelled beyond the core group.
        cluster.authorize(user, Attributes("get", path=path))
        return {"kind": "APIVersions", "versions": ["v1"]}
    if parts == ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] and method == "POST":
        cluster.authorize(user, Attributes("create", "authentication.k8s.io", "selfsubjectreviews"))
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
            "metadata": {},
            "status": {"userInfo": {"username": user.name, "groups": list(user.all_groups)}},
        }
    if (
        parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]
        and method == "POST"
    ):
        cluster.authorize(
            user, Attributes("create", "authorization.k8s.io", "selfsubjectaccessreviews")
        )
        spec = as_dict(as_dict(body).get("spec"))
        wanted = as_dict(spec.get("resourceAttributes"))
        other = as_dict(spec.get("nonResourceAttributes"))
        asked = (
            Attributes(
                str(wanted.get("verb", "")),
                str(wanted.get("group", "")),
                str(wanted.get("resource", "")),
                str(wanted.get("subresource", "")),
                str(wanted.get("namespace", "")),
                str(wanted.get("name", "")),
            )
            if wanted
            else Attributes(str(other.get("verb", "")), path=str(other.get("path", "")))
        )
        allowed = cluster.allowed(user, asked)
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {},
            "spec": spec,
            "status": {"allowed": allowed, **({"reason": "RBAC: allowed"} if allowed else {})},
        }
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise NotFound("the server could not find the requested resource")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise NotFound("the server could not find the requested resource")
    resource, name, subresource = rest[0], (rest[1:2] or [""])[0], (rest[2:3] or [""])[0]
    verb = _METHOD_VERBS.get(method, method.lower())
    if method == "GET" and not name:
        verb = "list"
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    cluster.authorize(user, Attributes(verb, group, resource, subresource, namespace, name))
    kind = SERVED.get((group, resource), "")
    api_version = f"{group}/{version}" if group else version
    qualified = f"{resource}.{group}" if group else resource
    if method == "GET":
        stored = cluster.listed(group, kind, namespace or None) if kind and not subresource else []
        if not name:
            return {"apiVersion": api_version, "kind": "List", "metadata": {}, "items": stored}
        found = next((o for o in stored if as_dict(o.get("metadata")).get("name") == name), None)
        if found is None:
            raise NotFound(f'{qualified} "{name}" not found')
        return found
    if (
        (group, resource) not in WRITABLE
        or subresource
        or method not in ("POST", "PATCH", "DELETE")
    ):
        raise NotAllowed(f"the simulated virtual cluster does not serve {method} on {path}")
    now = time.time()
    existing = cluster.get(group, kind, namespace, name) if name else None
    if method == "DELETE":
        if existing is None:
            raise NotFound(f'{qualified} "{name}" not found')
        cluster.remove(existing)
        return {"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {}}
    obj = copy.deepcopy(as_dict(body))
    obj.update(apiVersion=api_version, kind=kind)
    metadata = obj["metadata"] = as_dict(obj.get("metadata"))
    metadata["namespace"] = namespace
    if method == "PATCH":
        if existing is not None:
            # An apply of the fields given (a JSON merge patch of the object).
            return cluster.write(
                merge_patch(existing, {**obj, "metadata": {**metadata, "name": name}})
            )
        metadata["name"] = name  # server-side apply creates, and no filter sees it
        return cluster.create(obj, now)
    if existing is None and (group, resource) == ("", "services") and cluster.service_proxy:
        name = str(metadata.get("name") or "")
        if ("", "Namespace", "", namespace) not in cluster.objects:
            raise NotFound(f'namespaces "{namespace}" not found')
        if cluster.get(group, kind, namespace, name) is not None:
            raise Refused(409, "AlreadyExists", f'{qualified} "{name}" already exists')
        obj = cluster.service_proxy(obj, now)
    return cluster.create(obj, now)
