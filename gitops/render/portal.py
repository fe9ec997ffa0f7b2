"""The portal's own deployment, as a platform component of the fleet it manages (opt-in).

Two directories, each applied by its own Flux Kustomization (``clusters/<fleet>/portal.yaml``):

- ``infrastructure/portal/setup/``: the Namespace (Pod Security ``restricted``, enforced), the
  service account and its ClusterRole, the non-secret configuration, the NetworkPolicies,
  the ExternalSecret (optional) and the migration Job. Flux Kustomization ``portal-setup``
  waits for the Job to complete.
- ``infrastructure/portal/app/``: the web Deployment (gunicorn), the Celery worker and the
  one Celery beat, the Service, PodDisruptionBudgets and the ServiceMonitor. Flux
  Kustomization ``portal`` depends on ``portal-setup``, so new code starts only on a migrated
  database.

That split, and the Job recreated when its template changes, are Flux's own recipe for
migrations ("Running pre and post-deployment jobs with Flux",
https://fluxcd.io/flux/use-cases/running-jobs): a Job's ``spec.template`` is immutable, so the
API server refuses an apply that changes the image. The Job carries
``kustomize.toolkit.fluxcd.io/force: enabled`` (per-object force, fluxcd/kustomize-controller
pull request 787): kustomize-controller then deletes and recreates that one object when an
apply fails on an immutable field, and never the Namespace or anything else. A new image is a
new template, so ``migrate`` runs once per release; with an unchanged template the completed
Job is left alone. The Job has no ``ttlSecondsAfterFinished``: Flux would re-create a Job
the TTL controller deleted, and run it again at every reconciliation.

Secret values never reach Git: every pod takes its environment from the ConfigMap
``portal-config`` (rendered here) and the Secret ``spec.secret_name`` (the operator's, or an
ExternalSecret's), and the ServiceMonitor reads the ``/metrics`` bearer token from that
Secret's ``spec.metrics_token_key``. The pod templates carry a digest of the ConfigMap, so a
configuration change rolls the pods.

Probes follow the portal's contract: ``/healthz`` (process up, no database) for startup and
liveness, ``/readyz`` (database, broker, Git, cluster API) for readiness; both skip the HTTPS
redirect and host checks, as kubelet probes by pod IP over plain HTTP. Celery processes serve
no HTTP and get no probes: a worker that loses its broker reconnects by itself
(``broker_connection_retry``), and an exec probe would start a Python interpreter per check.

Node burn-in (``fleet.burnin``) runs its test Jobs in their own namespace,
``BURN_IN_NAMESPACE`` (``burn-in.yaml``): the portal may create, read and delete Jobs there and
read their pods and logs (and create and delete the headless Service of a run across nodes),
by a Role bound to its service account, and nowhere else. That namespace is Pod Security
``privileged``: the DCGM diagnostic's host engine runs as root in NVIDIA's image (its
entrypoint is ``nv-hostengine``, NVIDIA/DCGM ``docker/Dockerfile.*``), as it does in the GPU
Operator's own namespace.

Every container runs as Pod Security ``restricted`` requires (non-root, no privilege
escalation, every capability dropped, the runtime's default seccomp profile) with a read-only
root filesystem; ``/tmp`` and the portal's ``var/`` are volumes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from gitops.render import flux, monitoring, network, rbac
from gitops.render.meta import FLUX_NAMESPACE, TENANT_LABEL, kustomization, metadata
from gitops.render.reservations import RESERVED_KEY
from gitops.render.validate import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    HTTP_URL,
    validate_fleet,
)
from gitops.render.yamlio import dump_documents
from gitops.specs import FleetSpec, PortalDeploySpec, PortalResources, SpecError

SETUP_DIR = "infrastructure/portal/setup"
APP_DIR = "infrastructure/portal/app"
PORTAL_FLUX_FILE = "portal.yaml"
SETUP_KUSTOMIZATION = "portal-setup"
APP_KUSTOMIZATION = "portal"

# The Service the fleet's default git_url and tenant_git_base_url point at
# (http://portal.<namespace>.svc/git/...): port 80 in front of gunicorn's 8000.
SERVICE = "portal"
SERVICE_PORT = 80
HTTP_PORT = 8000
PORT_NAME = "http"
CONFIG = "portal-config"
CLUSTER_ROLE = "ai-factory-portal"
MIGRATE_JOB = "portal-migrate"
FORCE_ANNOTATION = "kustomize.toolkit.fluxcd.io/force"
PRUNE_ANNOTATION = "kustomize.toolkit.fluxcd.io/prune"
CONFIG_DIGEST_ANNOTATION = "ai-factory.io/config-digest"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
APP_NAME = "ai-factory-portal"
VAR_DIR = "/var/lib/portal"
# An emptyDir of the pod's own (the root filesystem is read-only), not a shared /tmp.
TMP_DIR = "/tmp"  # noqa: S108
METRICS_DIR = "/var/run/portal-metrics"
POD_SECURITY = "restricted"
BURN_IN_NAMESPACE = "gpu-burn-in"  # FLEET_BURN_IN_NAMESPACE's default
BURN_IN_ROLE = "ai-factory-portal-burn-in"
BURN_IN_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("batch", "jobs", ("create", "get", "list", "delete")),
    ("", "pods", ("get", "list")),
    ("", "pods/log", ("get",)),
    ("", "services", ("create", "delete")),  # the domain test's headless Service
)
# The Flux receiver the portal nudges after a merge (notification-controller's webhook
# receiver listens on 9292, its Service webhook-receiver maps 80 to it).
FLUX_RECEIVER_PORT = 9292
# A registry host (with a dot or a port), a repository path, then a tag, a digest or both.
IMAGE = re.compile(
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(\.[a-z0-9]+|:[0-9]+)/[a-z0-9]+([._/-][a-z0-9]+)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?"
)
ABSOLUTE_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
MAX_REPLICAS = 50
# Records a sentence for a field path (the first one per path wins).
_Add = Callable[[str, str], None]

# The cluster-wide reads (and node writes) the portal makes; tenant Secrets are granted per
# tenant (portal-access.yaml), never here. The same list as the operator's guide.
CLUSTER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "nodes", ("get", "list", "watch", "patch")),
    ("", "pods", ("get", "list", "watch")),
    ("", "pods/eviction", ("create",)),
    ("kustomize.toolkit.fluxcd.io", "kustomizations", ("get", "list", "watch")),
    ("helm.toolkit.fluxcd.io", "helmreleases", ("get", "list", "watch")),
    ("serving.kserve.io", "inferenceservices", ("get", "list", "watch")),
    # The queue read back (fleet.queues): Kueue's objects, and the pending workloads of each
    # ClusterQueue from Kueue's visibility API (an aggregated API: a subresource to get).
    # ``patch``: idle reclaim deactivates an idle job's Workload (``spec.active: false``,
    # fleet.activation) and its tenant wakes it; run-once work, not in Git.
    ("kueue.x-k8s.io", "workloads", ("get", "list", "watch", "patch")),
    ("kueue.x-k8s.io", "clusterqueues", ("get", "list", "watch")),
    ("kueue.x-k8s.io", "localqueues", ("get", "list", "watch")),
    ("kueue.x-k8s.io", "cohorts", ("get", "list", "watch")),
    ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", ("get",)),
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", ("get",)),
    # The schema check validates against the CRDs the cluster serves (gitops.schemas).
    ("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list", "watch")),
    # Tenants' batch jobs are submitted as a service account of the tenant (gitops.render.rbac,
    # "batch jobs"), which the portal may impersonate by a Role in each tenant namespace, never
    # here. What stays cluster-wide is the member's name beside it: the API server checks a
    # user extra as ``impersonate`` on ``userextras/<key>`` with no namespace and the value as
    # the name (k8s.io/apiserver filters/impersonation.go, ``WithImpersonation``), so only a
    # ClusterRole can grant it, and the values (people's names) cannot be listed. It lets the
    # portal attach any value under this one key and nothing else: RBAC never reads extras.
    ("authentication.k8s.io", f"userextras/{rbac.MEMBER_EXTRA}", ("impersonate",)),
)


# --- validation ------------------------------------------------------------------------------


def validate_portal(spec: PortalDeploySpec, fleet: FleetSpec) -> None:
    """Raise ``SpecError`` unless the deployment can be rendered for ``fleet``."""
    validate_fleet(fleet)
    errors: dict[str, str] = {}

    def add(path: str, message: str) -> None:
        errors.setdefault(path, message)

    if not isinstance(spec.image, str) or len(spec.image) > 512 or not IMAGE.fullmatch(spec.image):
        add(
            "image",
            "Give the image as registry/repository:tag or registry/repository@sha256:<digest> "
            "(for example registry.example.com/ai-factory/portal:1.4.0), without spaces.",
        )
    elif "@" not in spec.image and ":" not in spec.image.rsplit("/", 1)[-1]:
        add("image", "Pin the image with a tag or a digest: the migration Job runs per image.")
    if not isinstance(spec.hostnames, tuple) or not spec.hostnames:
        add("hostnames", "List at least one hostname the portal is reached on.")
    else:
        for index, host in enumerate(spec.hostnames):
            if not _is_dns_name(host):
                add(
                    f"hostnames[{index}]",
                    f"{host!r} is not a DNS name: lower-case letters, digits, '-' and '.', "
                    "such as portal.example.com.",
                )
        if len(set(spec.hostnames)) != len(spec.hostnames):
            add("hostnames", "A hostname is listed twice.")
    if not isinstance(spec.base_url, str) or not HTTP_URL.fullmatch(spec.base_url):
        add("base_url", "The base URL must look like https://portal.example.com.")
    elif not spec.base_url.startswith("https://"):
        add("base_url", "The portal is served over HTTPS in a deployment: use https://.")
    elif isinstance(spec.hostnames, tuple) and urlsplit(spec.base_url).hostname not in set(
        spec.hostnames
    ):
        add("base_url", "The base URL's host must be one of the hostnames.")
    _count(add, "web_replicas", spec.web_replicas, 1, "The number of web replicas")
    _count(add, "worker_replicas", spec.worker_replicas, 1, "The number of Celery workers")
    _count(add, "gunicorn_workers", spec.gunicorn_workers, 1, "The gunicorn workers per pod")
    _count(add, "worker_concurrency", spec.worker_concurrency, 1, "The Celery concurrency")
    _object_name(add, "secret_name", spec.secret_name, "The Secret's name")
    if not isinstance(spec.metrics_token_key, str) or not _is_secret_key(spec.metrics_token_key):
        add(
            "metrics_token_key",
            "The metrics token key must be a Secret key: letters, digits, '-', '_' and '.'.",
        )
    if spec.external_secret_key:
        if not fleet.secret_store:
            add(
                "external_secret_key",
                "The fleet has no secret_store (an External Secrets ClusterSecretStore) to "
                "read it from: create the Secret by hand, or configure the store.",
            )
        elif not isinstance(spec.external_secret_key, str) or not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9._/-]{0,252}", spec.external_secret_key
        ):
            add("external_secret_key", "The remote key may use letters, digits and . _ / - only.")
    if spec.state_claim:
        _object_name(add, "state_claim", spec.state_claim, "The state claim's name")
    if spec.ingress_namespace and not _is_label(spec.ingress_namespace):
        add("ingress_namespace", "The ingress namespace must be a Kubernetes DNS label.")
    if not isinstance(spec.egress, tuple):
        add("egress", "The egress destinations must be a list.")
    else:
        for index, target in enumerate(spec.egress):
            if target.namespace:
                if target.cidr:
                    add(f"egress[{index}]", "Give a network or a namespace, not both.")
                elif not _is_label(target.namespace):
                    add(f"egress[{index}].namespace", "The namespace must be a DNS label.")
            else:
                try:
                    ipaddress.ip_network(target.cidr, strict=True)
                except (TypeError, ValueError):
                    add(
                        f"egress[{index}].cidr",
                        f"{target.cidr!r} is not a network such as 10.0.12.0/24 or "
                        "10.0.0.5/32 (host bits must be zero).",
                    )
            _count(add, f"egress[{index}].port", target.port, 1, "The port", high=65535)
    for name in ("web", "worker", "beat"):
        resources: PortalResources = getattr(spec, name)
        _count(add, f"{name}.cpu_millis", resources.cpu_millis, 10, "The CPU request", 64_000)
        _count(add, f"{name}.memory_mib", resources.memory_mib, 64, "The memory", 262_144)
    _count(add, "run_as_user", spec.run_as_user, 1, "The user id (non-root)", high=2**31 - 1)
    for name in ("app_dir", "static_root"):
        value = getattr(spec, name)
        if not isinstance(value, str) or not ABSOLUTE_PATH.fullmatch(value) or ".." in value:
            add(name, "Give an absolute path inside the image, such as /app.")
    if errors:
        raise SpecError(errors)


def _count(add: _Add, path: str, value: object, low: int, what: str, high: int = 0) -> None:
    high = high or MAX_REPLICAS
    if not isinstance(value, int) or isinstance(value, bool):
        add(path, f"{what} must be a whole number.")
    elif not low <= value <= high:
        add(path, f"{what} must be between {low} and {high} (got {value}).")


def _is_label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS1123_LABEL.fullmatch(value))


def _is_dns_name(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= 253
        and "." in value
        and bool(DNS1123_SUBDOMAIN.fullmatch(value))
        and all(len(part) <= 63 for part in value.split("."))
    )


def _is_secret_key(value: str) -> bool:
    return len(value) <= 253 and bool(re.fullmatch(r"[-._a-zA-Z0-9]+", value))


def _object_name(add: _Add, path: str, value: object, what: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        add(
            path, f"{what} must be a Kubernetes object name (lower-case letters, digits, '-', '.')."
        )


# --- objects ---------------------------------------------------------------------------------


def _labels(component: str | None = None) -> dict[str, str]:
    out = {NAME_LABEL: APP_NAME}
    if component is not None:
        out[COMPONENT_LABEL] = component
    return out


def _meta(name: str, fleet: FleetSpec, component: str | None = None, **kw: Any) -> dict[str, Any]:
    return metadata(name, fleet.portal_namespace, extra_labels=_labels(component), **kw)


def namespace(fleet: FleetSpec) -> dict[str, Any]:
    """The portal's namespace, held to Pod Security ``restricted`` (enforced, and warned and
    audited at the same level, so a manifest that would be refused says so at apply).

    Never pruned (``kustomize.toolkit.fluxcd.io/prune: disabled``, the per-object opt-out of
    Flux's garbage collection, https://fluxcd.io/flux/components/kustomize/kustomizations/):
    it holds what is not in Git, the operator's Secret and the state claim, and dropping the
    component from the repository must not delete them with it."""
    modes = ("enforce", "audit", "warn")
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(
            fleet.portal_namespace,
            annotations={PRUNE_ANNOTATION: "disabled"},
            extra_labels={
                **_labels(),
                **{f"pod-security.kubernetes.io/{mode}": POD_SECURITY for mode in modes},
                **{f"pod-security.kubernetes.io/{mode}-version": "latest" for mode in modes},
            },
        ),
    }


def rbac_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The service account, and the cluster-wide rights of the operator's guide bound to it."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(fleet.portal_service_account, fleet),
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(CLUSTER_ROLE, extra_labels=_labels()),
        "rules": [
            {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
            for group, resource, verbs in CLUSTER_RULES
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(CLUSTER_ROLE, extra_labels=_labels()),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": CLUSTER_ROLE,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": fleet.portal_service_account,
                "namespace": fleet.portal_namespace,
            }
        ],
    }
    return [account, role, binding, *write_scope_policy(fleet)]


# What the portal's ClusterRole cannot say (RBAC grants a verb on a resource, not on some
# objects or fields of it), held by a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1,
# GA in Kubernetes 1.30) on the portal's own requests only.
WRITE_SCOPE_POLICY = "ai-factory-portal-write-scope"
GPU_NODE_LABEL = "nvidia.com/gpu.present"  # GPU feature discovery's label on GPU nodes
_UNCHANGED = (("metadata", "annotations"),)
_RESERVATION_MESSAGE = (
    f"The portal may change a node's spec.unschedulable and its {RESERVED_KEY} mark only, "
    "not {what}."
)


def _unchanged(*path: str) -> str:
    new, old = ".".join(("object", *path)), ".".join(("oldObject", *path))
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


def _labels_but_reservation() -> str:
    """The node's labels are unchanged but for the reservation label (both ways)."""

    def within(a: str, b: str) -> str:
        return (
            f"!has({a}.metadata.labels) || {a}.metadata.labels.all(k, k == '{RESERVED_KEY}' || "
            f"(has({b}.metadata.labels) && k in {b}.metadata.labels && "
            f"{b}.metadata.labels[k] == {a}.metadata.labels[k]))"
        )

    return f"({within('object', 'oldObject')}) && ({within('oldObject', 'object')})"


def _taints_but_reservation() -> str:
    """The node's taints are unchanged, in order, but for the reservation taint."""

    def others(a: str) -> str:
        return f"(has({a}.spec.taints) ? {a}.spec.taints.filter(t, t.key != '{RESERVED_KEY}') : [])"

    return f"{others('object')} == {others('oldObject')}"


def write_scope_policy(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The portal writes nodes only to cordon GPU nodes and to mark the ones reserved for a
    tenant, and evicts only tenants' pods.

    Its ClusterRole has ``patch`` on every node and ``create`` on every ``pods/eviction``. The
    policy narrows both for requests from its service account: a node update may change
    ``spec.unschedulable`` and the reservation label and taint (``RESERVED_KEY``,
    ``fleet.reservations``) and nothing the scheduler reads besides (other labels, annotations
    and taints stay as they were) and only on a GPU node (GPU feature discovery's
    ``nvidia.com/gpu.present``); an eviction only in a namespace carrying the tenant label
    (``namespaceObject``, the request's namespace). A drain leaves other pods on the node to
    the operator (``fleet.services.drain_plan``)."""
    account = f"system:serviceaccount:{fleet.portal_namespace}:{fleet.portal_service_account}"
    nodes = "request.resource.resource != 'nodes' || "
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(WRITE_SCOPE_POLICY, extra_labels=_labels()),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes"],
                    },
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods/eviction"],
                    },
                ]
            },
            "matchConditions": [
                {
                    "name": "from-the-portal",
                    "expression": f"request.userInfo.username == '{account}'",
                }
            ],
            "validations": [
                {
                    "expression": nodes
                    + f"(has(oldObject.metadata.labels) && '{GPU_NODE_LABEL}' in "
                    f"oldObject.metadata.labels && oldObject.metadata.labels['{GPU_NODE_LABEL}'] "
                    "== 'true')",
                    "message": "The portal cordons and uncordons GPU nodes only.",
                },
                {
                    "expression": nodes + f"({_labels_but_reservation()})",
                    "message": _RESERVATION_MESSAGE.format(what="metadata.labels"),
                },
                *(
                    {
                        "expression": nodes + f"({_unchanged(*path)})",
                        "message": _RESERVATION_MESSAGE.format(what=".".join(path)),
                    }
                    for path in _UNCHANGED
                ),
                {
                    "expression": nodes + f"({_taints_but_reservation()})",
                    "message": _RESERVATION_MESSAGE.format(what="spec.taints"),
                },
                {
                    "expression": "request.resource.resource != 'pods' || "
                    f"(has(namespaceObject.metadata.labels) && '{TENANT_LABEL}' in "
                    "namespaceObject.metadata.labels)",
                    "message": "The portal evicts pods of tenant namespaces only.",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(WRITE_SCOPE_POLICY, extra_labels=_labels()),
        "spec": {"policyName": WRITE_SCOPE_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def config_data(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, str]:
    """The non-secret settings every portal process reads (portal/settings.py).

    Flux reads the fleet repository and the tenants' projections from inside the cluster, at
    the fleet's ``git_url`` and ``tenant_git_base_url`` (``http://portal.<namespace>.svc/git/``
    by default): those hosts are allowed, and ``/git/`` is exempt from the HTTPS redirect,
    which source-controller would follow to a port the Service does not serve. Outside the
    cluster the gateway terminates TLS and says so (``X-Forwarded-Proto``), so nothing but
    in-cluster traffic (which the NetworkPolicy limits to Flux, Prometheus and the gateway)
    is ever plain HTTP.
    """
    internal = [urlsplit(url).hostname for url in (fleet.git_url, fleet.tenant_git_base_url)]
    hosts = list(dict.fromkeys([*spec.hostnames, *(h for h in internal if h)]))
    return {
        "ALLOWED_HOSTS": ",".join(hosts),
        "CSRF_TRUSTED_ORIGINS": ",".join(f"https://{host}" for host in spec.hostnames),
        "FLEET_IN_CLUSTER": "true",
        "FLEET_BURN_IN_NAMESPACE": BURN_IN_NAMESPACE,
        "GITOPS_FLEET_NAME": fleet.name,
        "GITOPS_MAIN_BRANCH": fleet.git_branch,
        # The root filesystem is read-only: kubectl (the kustomize check) keeps its cache
        # under $HOME.
        "HOME": TMP_DIR,
        "PORTAL_BASE_URL": spec.base_url,
        "PORTAL_VAR_DIR": VAR_DIR,
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
        # Behind the ingress every connection comes from it: the sign-in limits count by the
        # client address the ingress appends to X-Forwarded-For (allauth's rate limits).
        "ALLAUTH_TRUSTED_PROXY_COUNT": "1",
        # Flux's notification-controller posts its events in the cluster too (/hooks/flux/).
        "SECURE_REDIRECT_EXEMPT": r"^git/|^hooks/flux/",
        "STATIC_ROOT": spec.static_root,
    }


def config_map(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(CONFIG, fleet),
        "data": config_data(spec, fleet),
    }


def external_secret(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    """The Secret ``spec.secret_name`` filled with every property of the remote secret
    ``spec.external_secret_key`` of the fleet's ClusterSecretStore (as tenants' model-download
    credentials are, ``gitops.render.secrets``)."""
    return {
        "apiVersion": "external-secrets.io/v1",
        "kind": "ExternalSecret",
        "metadata": _meta(spec.secret_name, fleet),
        "spec": {
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": fleet.secret_store},
            "refreshInterval": "1h",
            "target": {"name": spec.secret_name, "creationPolicy": "Owner"},
            "dataFrom": [{"extract": {"key": spec.external_secret_key}}],
        },
    }


def _from_namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {network.NAMESPACE_NAME_LABEL: name}}}


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def network_policies(spec: PortalDeploySpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """Deny by default; the web pods take HTTP from the proxies in front of the portal, from
    Prometheus (``/metrics``) and from Flux (source-controller clones ``/git/``,
    notification-controller posts its events); every pod reaches DNS, Prometheus (billing
    reads it), Flux's receiver and the destinations the spec lists."""

    def policy(name: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": network.API,
            "kind": "NetworkPolicy",
            "metadata": _meta(name, fleet),
            "spec": body,
        }

    # Cilium's gateway traffic has the reserved "ingress" identity, which no NetworkPolicy can
    # select: a CiliumNetworkPolicy admits it (as for tenants' model servers, see
    # gitops.render.network). Envoy Gateway's comes from its proxy namespace.
    cilium = fleet.gateway.implementation == "cilium"
    proxies = spec.ingress_namespace or ("" if cilium else fleet.gateway.proxy_namespace)
    sources = sorted(
        {name for name in (proxies, fleet.monitoring_namespace, FLUX_NAMESPACE) if name}
    )
    prometheus_port = urlsplit(fleet.prometheus_url).port or 80
    egress = [
        *network.dns_egress(fleet),
        {"to": [_from_namespace(fleet.monitoring_namespace)], "ports": [_tcp(prometheus_port)]},
        {"to": [_from_namespace(FLUX_NAMESPACE)], "ports": [_tcp(FLUX_RECEIVER_PORT)]},
    ]
    egress += [
        {
            "to": [
                _from_namespace(target.namespace)
                if target.namespace
                else {"ipBlock": {"cidr": target.cidr}}
            ],
            "ports": [_tcp(target.port)],
        }
        for target in spec.egress
    ]
    if spec.public_https:
        public = {"cidr": "0.0.0.0/0", "except": list(network.PRIVATE_RANGES)}
        egress.append({"to": [{"ipBlock": public}], "ports": [_tcp(443)]})
    objs = [
        policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy(
            "allow-http",
            {
                "podSelector": {"matchLabels": _labels("web")},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [_from_namespace(name) for name in sources],
                        "ports": [_tcp(HTTP_PORT)],
                    }
                ],
            },
        ),
        policy("allow-egress", {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}),
    ]
    if cilium and not spec.ingress_namespace:
        objs.append(
            {
                "apiVersion": network.CILIUM_API,
                "kind": "CiliumNetworkPolicy",
                "metadata": _meta("allow-gateway", fleet),
                "spec": {
                    "endpointSelector": {"matchLabels": _labels("web")},
                    "ingress": [
                        {
                            "fromEntities": ["ingress"],
                            "toPorts": [{"ports": [{"port": str(HTTP_PORT), "protocol": "TCP"}]}],
                        }
                    ],
                },
            }
        )
    return objs


def _security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _resources(resources: PortalResources) -> dict[str, Any]:
    memory = f"{resources.memory_mib}Mi"
    return {
        "requests": {"cpu": f"{resources.cpu_millis}m", "memory": memory},
        "limits": {"memory": memory},
    }


def _container(
    spec: PortalDeploySpec, name: str, command: list[str], resources: PortalResources
) -> dict[str, Any]:
    return {
        "name": name,
        "image": spec.image,
        "command": command,
        "workingDir": spec.app_dir,
        "envFrom": [{"configMapRef": {"name": CONFIG}}, {"secretRef": {"name": spec.secret_name}}],
        "resources": _resources(resources),
        "securityContext": _security_context(),
        "volumeMounts": [
            {"name": "tmp", "mountPath": TMP_DIR},
            {"name": "var", "mountPath": VAR_DIR},
        ],
    }


def config_digest(spec: PortalDeploySpec, fleet: FleetSpec) -> str:
    """A digest of the rendered configuration (and of the Secret's name): in the pod
    templates, so a change to either rolls the pods."""
    data = {"config": config_data(spec, fleet), "secret": spec.secret_name}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _pod(
    spec: PortalDeploySpec,
    fleet: FleetSpec,
    component: str,
    containers: list[dict[str, Any]],
    *,
    api_access: bool,
    restart_policy: str = "Always",
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    var: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": spec.state_claim}}
        if spec.state_claim
        else {"emptyDir": {}}
    )
    body: dict[str, Any] = {
        "serviceAccountName": fleet.portal_service_account,
        # Only the web and worker pods talk to the Kubernetes API.
        "automountServiceAccountToken": api_access,
        "enableServiceLinks": False,
        "restartPolicy": restart_policy,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": spec.run_as_user,
            "runAsGroup": spec.run_as_user,
            "fsGroup": spec.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "var", **var}],
    }
    if init_containers:
        body["initContainers"] = init_containers
    return {
        "metadata": {
            "labels": _labels(component),
            "annotations": {CONFIG_DIGEST_ANNOTATION: config_digest(spec, fleet)},
        },
        "spec": body,
    }


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def web_deployment(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    command = [
        "gunicorn",
        "portal.wsgi",
        "--workers",
        str(spec.gunicorn_workers),
        "--bind",
        f"0.0.0.0:{HTTP_PORT}",
        "--access-logfile",
        "-",
    ]
    container = _container(spec, "web", command, spec.web)
    container["ports"] = [{"name": PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}]
    # Up to 60 s to import Django and open the first connections before liveness counts.
    container["startupProbe"] = _probe("/healthz", 2, 30)
    container["livenessProbe"] = _probe("/healthz", 10, 3)
    container["readinessProbe"] = _probe("/readyz", 5, 2)
    # Each gunicorn worker counts its own requests; with a directory shared by the pod's
    # workers (empty at start) whichever answers a scrape sums them all (prometheus_client's
    # multiprocess mode, docs/operator-guide.md "Health, readiness and metrics").
    container["env"] = [{"name": "PROMETHEUS_MULTIPROC_DIR", "value": METRICS_DIR}]
    container["volumeMounts"].append({"name": "metrics", "mountPath": METRICS_DIR})
    template = _pod(spec, fleet, "web", [container], api_access=True)
    template["spec"]["volumes"].append({"name": "metrics", "emptyDir": {}})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("portal-web", fleet, "web"),
        "spec": {
            "replicas": spec.web_replicas,
            "selector": {"matchLabels": _labels("web")},
            # A new pod is ready before an old one goes.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": template,
        },
    }


def worker_deployment(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    command = [
        "celery",
        "-A",
        "portal",
        "worker",
        "--loglevel=INFO",
        f"--concurrency={spec.worker_concurrency}",
    ]
    template = _pod(
        spec,
        fleet,
        "worker",
        [_container(spec, "worker", command, spec.worker)],
        api_access=True,
    )
    # Celery's warm shutdown finishes the running tasks on SIGTERM (acks_late re-delivers
    # any that outlast this).
    template["spec"]["terminationGracePeriodSeconds"] = 120
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("portal-worker", fleet, "worker"),
        "spec": {
            "replicas": spec.worker_replicas,
            "selector": {"matchLabels": _labels("worker")},
            "template": template,
        },
    }


def beat_deployment(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    """Exactly one scheduler: one replica, and ``Recreate`` so that a rollout stops the old
    beat before the new one starts (a rolling update would run two, and every scheduled job
    would be sent twice)."""
    command = ["celery", "-A", "portal", "beat", "--loglevel=INFO"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("portal-beat", fleet, "beat"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels("beat")},
            "strategy": {"type": "Recreate"},
            "template": _pod(
                spec,
                fleet,
                "beat",
                [_container(spec, "beat", command, spec.beat)],
                api_access=False,
            ),
        },
    }


def watch_deployment(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    """The cluster watcher (``manage.py fleet_watch``): status as events, not polls. One is
    enough and two would only do the same writes twice; ``Recreate`` keeps a rollout from
    running two, and the polling sync covers the seconds in between."""
    command = ["python", "manage.py", "fleet_watch"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("portal-watch", fleet, "watch"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels("watch")},
            "strategy": {"type": "Recreate"},
            "template": _pod(
                spec,
                fleet,
                "watch",
                [_container(spec, "watch", command, spec.beat)],
                api_access=True,
            ),
        },
    }


def migrate_job(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    """``migrate``, then ``createcachetable`` (the login throttle's table when no CACHE_URL is
    set; a no-op otherwise), before any new code serves (see the module docstring)."""
    manage = ["python", "manage.py"]
    migrate = _container(spec, "migrate", [*manage, "migrate", "--noinput"], spec.web)
    cache = _container(spec, "cache-table", [*manage, "createcachetable"], spec.beat)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(MIGRATE_JOB, fleet, "migrate", annotations={FORCE_ANNOTATION: "enabled"}),
        "spec": {
            "backoffLimit": 3,
            "template": _pod(
                spec,
                fleet,
                "migrate",
                [cache],
                api_access=False,
                restart_policy="Never",
                init_containers=[migrate],
            ),
        },
    }


def service(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(SERVICE, fleet, "web"),
        "spec": {
            "selector": _labels("web"),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": SERVICE_PORT,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def disruption_budget(component: str, fleet: FleetSpec) -> dict[str, Any]:
    """One pod at a time may be evicted. ``maxUnavailable`` rather than ``minAvailable``: with
    a single replica a ``minAvailable: 1`` budget would block every node drain for good."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(f"portal-{component}", fleet, component),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels(component)}},
    }


def service_monitor(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, Any]:
    """Prometheus scrapes ``/metrics`` with the bearer token from the portal's Secret. It
    lives in the portal's namespace because a ServiceMonitor's credentials must be a Secret of
    its own namespace (``authorization.credentials``, prometheus-operator CRD); Prometheus
    must select ServiceMonitors there (see ``gitops.render.monitoring``)."""
    return {
        "apiVersion": monitoring.API,
        "kind": "ServiceMonitor",
        "metadata": _meta("portal", fleet, "web"),
        "spec": {
            "namespaceSelector": {"matchNames": [fleet.portal_namespace]},
            "selector": {"matchLabels": _labels("web")},
            "endpoints": [
                {
                    "port": PORT_NAME,
                    "path": monitoring.METRICS_PATH,
                    "interval": "30s",
                    "authorization": {
                        "type": "Bearer",
                        "credentials": {"name": spec.secret_name, "key": spec.metrics_token_key},
                    },
                }
            ],
        },
    }


def flux_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """``portal-setup`` (waits for the migration Job) and ``portal``, which depends on it.

    Neither depends on the rest of the platform (``infra-configs``, ``tenants``): the portal is
    how the platform is repaired, so a broken Kueue or policy change must not hold it back.
    """
    common: dict[str, Any] = {
        "source": flux.FLUX_SYSTEM,
        "service_account": flux.KUSTOMIZE_CONTROLLER,
        "wait": True,
    }
    setup = flux.flux_kustomization(SETUP_KUSTOMIZATION, FLUX_NAMESPACE, f"./{SETUP_DIR}", **common)
    app = flux.flux_kustomization(
        APP_KUSTOMIZATION,
        FLUX_NAMESPACE,
        f"./{APP_DIR}",
        depends_on=SETUP_KUSTOMIZATION,
        **common,
    )
    return [setup, app]


def burn_in_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The burn-in namespace and the portal's rights in it (Jobs, their pods and logs)."""
    modes = ("enforce", "audit", "warn")
    labels = _labels("burn-in")
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": metadata(
                BURN_IN_NAMESPACE,
                annotations={PRUNE_ANNOTATION: "disabled"},
                extra_labels={
                    **labels,
                    **{f"pod-security.kubernetes.io/{mode}": "privileged" for mode in modes},
                },
            ),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(BURN_IN_ROLE, BURN_IN_NAMESPACE, extra_labels=labels),
            "rules": [
                {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
                for group, resource, verbs in BURN_IN_RULES
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(BURN_IN_ROLE, BURN_IN_NAMESPACE, extra_labels=labels),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": BURN_IN_ROLE,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": fleet.portal_service_account,
                    "namespace": fleet.portal_namespace,
                }
            ],
        },
    ]


def setup_files(spec: PortalDeploySpec, fleet: FleetSpec) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file name, objects) of ``infrastructure/portal/setup/``."""
    config = [config_map(spec, fleet)]
    if spec.external_secret_key:
        config.append(external_secret(spec, fleet))
    return [
        ("burn-in.yaml", burn_in_objects(fleet)),
        ("config.yaml", config),
        ("migrate-job.yaml", [migrate_job(spec, fleet)]),
        ("namespace.yaml", [namespace(fleet)]),
        ("network-policy.yaml", network_policies(spec, fleet)),
        ("rbac.yaml", rbac_objects(fleet)),
    ]


def app_files(spec: PortalDeploySpec, fleet: FleetSpec) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file name, objects) of ``infrastructure/portal/app/``."""
    return [
        ("beat.yaml", [beat_deployment(spec, fleet)]),
        ("monitoring.yaml", [service_monitor(spec, fleet)]),
        (
            "web.yaml",
            [web_deployment(spec, fleet), service(fleet), disruption_budget("web", fleet)],
        ),
        ("watch.yaml", [watch_deployment(spec, fleet)]),
        ("worker.yaml", [worker_deployment(spec, fleet), disruption_budget("worker", fleet)]),
    ]


def render_portal_component(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, bytes]:
    """Every file of the component, ``clusters/<fleet>/portal.yaml`` included (the caller adds
    it to the cluster's kustomization). Raises ``SpecError`` for an invalid spec."""
    validate_portal(spec, fleet)
    files: dict[str, bytes] = {
        f"clusters/{fleet.name}/{PORTAL_FLUX_FILE}": dump_documents(flux_objects(fleet))
    }
    for directory, entries in (
        (SETUP_DIR, setup_files(spec, fleet)),
        (APP_DIR, app_files(spec, fleet)),
    ):
        for name, objs in entries:
            files[f"{directory}/{name}"] = dump_documents(objs)
        files[f"{directory}/kustomization.yaml"] = dump_documents(
            [kustomization([name for name, _ in entries])]
        )
    return dict(sorted(files.items()))
