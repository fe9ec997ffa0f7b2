"""Admission of new pods, as kube-apiserver and the platform's webhooks do it.

A pod a controller creates (a ReplicaSet's, a StatefulSet's, a recreated one) goes through the
same chain as on a real cluster, in the same order, so a manifest that is valid but would be
refused shows here as refused, with the API server's message:

1. defaulting: a container's requests default to its limits (``pkg/apis/core/v1/defaults.go``
   ``SetDefaults_Pod``);
2. mutating admission: ``LimitRanger`` sets default limits and requests of every LimitRange of
   the namespace (``plugin/pkg/admission/limitranger``); KServe's pod webhook adds the
   ``storage-initializer`` init container for download URIs, merged with the matching
   ClusterStorageContainer (``kserve.py``); Kueue's webhook gives a pod without a queue the
   namespace's LocalQueue named ``default`` (LocalQueueDefaulting, stable since Kueue 0.17) and
   gates every queued pod until its workload is admitted (``kueue.py``); Kyverno's mutate
   rules last (``kyverno.py``);
3. validating admission: ``PodSecurity`` against the namespace's ``enforce`` level, on every
   container, injected ones included (``k8s.io/pod-security-admission/policy``); LimitRange
   minimums and maximums; Kyverno's validate rules (a validating webhook, which the API
   server calls before ``ResourceQuota``); ``ResourceQuota`` last, against every quota of the
   namespace (``pkg/quota/v1/evaluator/core/pods.go``, ``plugin/pkg/admission/resourcequota``).

``Rejected`` carries the 403 message; the caller (the controller) keeps retrying, as real ones
do, and reports the message where the real controller would (a ReplicaSet's FailedCreate, a
HelmRelease's failed install).

Other kinds a controller or Flux writes (a tenant cluster's syncer: Services, Endpoints,
EndpointSlices and pod updates; Jobs and JobSets) meet Kueue's job webhooks and Kyverno's
(``admit_object``); a new Service gets a ClusterIP from the service range (``cluster_ip``).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from simulator import kueue_webhooks, kyverno
from simulator.store import (
    LIMIT_RANGES,
    NAMESPACES,
    PODS,
    RESOURCE_QUOTAS,
    JsonObject,
    Resource,
    Store,
    as_dict,
    as_list,
)

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# kube-apiserver's default --service-cluster-ip-range.
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/12")
COMPUTE = ("cpu", "memory", "ephemeral-storage")
# Extended resources have no limits.* quota key: requests.<name> (or the bare name) counts
# them (pkg/quota/v1/evaluator/core/pods.go, isExtendedResourceNameForQuota).
STANDARD_PREFIXES = ("requests.", "limits.")
# Pod Security "restricted" allows these volume types (policy/check_restrictedVolumes.go).
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


class Rejected(Exception):
    """The API server refused to create the object (HTTP 403)."""


class WebhookUnreachable(Rejected):
    """A webhook with ``failurePolicy: Fail`` could not be called: the API server answers 500
    InternalError (``str`` is its message), not 403. A controller retries it as any refusal."""

    def __init__(self, cause: str) -> None:
        # apimachinery ``errors.NewInternalError``: the message wraps the cause, which is also
        # the Status's one cause.
        super().__init__(f"Internal error occurred: {cause}")
        self.cause = cause


def quantity(value: object) -> Decimal:
    """A resource quantity (``"500m"``, ``"64Gi"``, ``8``); malformed ones count as 0."""
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def show(value: Decimal) -> str:
    """A quantity as the API server prints it in quota messages (plain numbers here)."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def containers(pod: Mapping[str, Any], *, init: bool = True) -> list[JsonObject]:
    spec = as_dict(pod.get("spec"))
    kinds = ("initContainers", "containers") if init else ("containers",)
    return [as_dict(c) for kind in kinds for c in as_list(spec.get(kind))]


# --- 1. defaulting ----------------------------------------------------------------------------


def default_requests(pod: JsonObject) -> None:
    for container in containers(pod):
        resources = container.setdefault("resources", {})
        limits = as_dict(resources.get("limits"))
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)


# --- 2. LimitRanger ----------------------------------------------------------------------------


def container_limit_items(store: Store, namespace: str) -> list[tuple[str, JsonObject]]:
    """(LimitRange name, its ``type: Container`` item) of the namespace, in name order."""
    out = []
    for limit_range in store.list(LIMIT_RANGES, namespace):
        name = str(as_dict(limit_range.get("metadata")).get("name", ""))
        for item in as_list(as_dict(limit_range.get("spec")).get("limits")):
            if as_dict(item).get("type") == "Container":
                out.append((name, as_dict(item)))
    return out


def apply_limit_defaults(pod: JsonObject, items: Iterable[tuple[str, JsonObject]]) -> None:
    """``default`` fills missing limits, ``defaultRequest`` missing requests; a request still
    missing where a limit is set takes the limit (limitranger/admission.go
    ``mergeContainerResources``)."""
    for _, item in items:
        for container in containers(pod):
            resources = container.setdefault("resources", {})
            limits = resources.setdefault("limits", {})
            requests = resources.setdefault("requests", {})
            for name, value in as_dict(item.get("default")).items():
                limits.setdefault(name, value)
            for name, value in as_dict(item.get("defaultRequest")).items():
                requests.setdefault(name, value)
            for name, value in as_dict(item.get("default")).items():
                requests.setdefault(name, value)


def limit_range_problems(
    pod: Mapping[str, Any], items: Iterable[tuple[str, JsonObject]]
) -> list[str]:
    """LimitRanger's validation of each container against ``min`` and ``max``, in its words
    (kubernetes plugin/pkg/admission/limitranger/admission.go ``minConstraint``,
    ``maxConstraint``): a ``max`` needs a limit on every container, which only ``default``
    supplies to containers that set none."""
    problems = []
    for _, item in items:
        for container in containers(pod):
            resources = as_dict(container.get("resources"))
            limits = as_dict(resources.get("limits"))
            requests = as_dict(resources.get("requests"))
            for name, value in as_dict(item.get("min")).items():
                if name not in requests:
                    problems.append(
                        f"Minimum {name} usage per Container is {value}.  No request is specified."
                    )
                elif quantity(requests[name]) < quantity(value):
                    problems.append(
                        f"Minimum {name} usage per Container is {value}, but request is "
                        f"{requests[name]}."
                    )
            for name, value in as_dict(item.get("max")).items():
                if name not in limits:
                    problems.append(
                        f"Maximum {name} usage per Container is {value}.  No limit is specified."
                    )
                elif quantity(limits[name]) > quantity(value):
                    problems.append(
                        f"Maximum {name} usage per Container is {value}, but limit is "
                        f"{limits[name]}."
                    )
                elif name in requests and quantity(requests[name]) > quantity(value):
                    problems.append(
                        f"Maximum {name} usage per Container is {value}, but request is "
                        f"{requests[name]}."
                    )
    return problems


def validation_problems(pod: Mapping[str, Any]) -> list[str]:
    """The API server's validation of the pod after mutation: no container may request more
    than its limit (kubernetes pkg/apis/core/validation/validation.go
    ``ValidateResourceRequirements``), so a LimitRange ``default`` limit below what a container
    requests without a limit makes the pod invalid."""
    problems = []
    spec = as_dict(pod.get("spec"))
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(as_list(spec.get(kind))):
            resources = as_dict(as_dict(container).get("resources"))
            limits = as_dict(resources.get("limits"))
            for name, value in as_dict(resources.get("requests")).items():
                if name in limits and quantity(value) > quantity(limits[name]):
                    problems.append(
                        f"spec.{kind}[{index}].resources.requests: Invalid value: "
                        f'"{value}": must be less than or equal to {name} limit of {limits[name]}'
                    )
    return problems


# --- 3. Pod Security ---------------------------------------------------------------------------


def _capabilities_added(context: Mapping[str, Any]) -> list[str]:
    return [str(c) for c in as_list(as_dict(context.get("capabilities")).get("add"))]


def pod_security_problems(pod: Mapping[str, Any], level: str) -> list[str]:
    """What the ``baseline``/``restricted`` profile (latest) refuses in ``pod``, in the
    wording of k8s.io/pod-security-admission's checks."""
    if level not in ("baseline", "restricted"):
        return []
    spec = as_dict(pod.get("spec"))
    pod_context = as_dict(spec.get("securityContext"))
    every = [
        as_dict(c)
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in as_list(spec.get(kind))
    ]
    problems: list[str] = []

    def names(bad: list[JsonObject]) -> str:
        quoted = ", ".join(f'"{c.get("name", "")}"' for c in bad)
        return f"container{'s' if len(bad) > 1 else ''} {quoted}"

    # baseline (check_privileged.go, check_hostNamespaces.go, check_capabilities_baseline.go)
    if any(spec.get(key) is True for key in ("hostNetwork", "hostPID", "hostIPC")):
        problems.append("host namespaces (hostNetwork=true, hostPID=true or hostIPC=true)")
    privileged = [c for c in every if as_dict(c.get("securityContext")).get("privileged") is True]
    if privileged:
        problems.append(
            f"privileged ({names(privileged)} must not set securityContext.privileged=true)"
        )
    host_paths = [
        str(as_dict(v).get("name"))
        for v in as_list(spec.get("volumes"))
        if "hostPath" in as_dict(v)
    ]
    if host_paths:
        problems.append(f"hostPath volumes (volumes {', '.join(repr(v) for v in host_paths)})")
    if level == "restricted":
        escalation = [
            c
            for c in every
            if as_dict(c.get("securityContext")).get("allowPrivilegeEscalation") is not False
        ]
        if escalation:
            problems.append(
                f"allowPrivilegeEscalation != false ({names(escalation)} must set "
                "securityContext.allowPrivilegeEscalation=false)"
            )
        undropped = [
            c
            for c in every
            if "ALL"
            not in [
                str(x)
                for x in as_list(
                    as_dict(as_dict(c.get("securityContext")).get("capabilities")).get("drop")
                )
            ]
        ]
        added = [
            c
            for c in every
            if set(_capabilities_added(as_dict(c.get("securityContext")))) - {"NET_BIND_SERVICE"}
        ]
        if undropped or added:
            parts = []
            if undropped:
                parts.append(
                    f'{names(undropped)} must set securityContext.capabilities.drop=["ALL"]'
                )
            if added:
                parts.append(
                    f"{names(added)} must not include capabilities other than NET_BIND_SERVICE "
                    "in securityContext.capabilities.add"
                )
            problems.append(f"unrestricted capabilities ({'; '.join(parts)})")
        pod_non_root = pod_context.get("runAsNonRoot") is True
        root = [
            c
            for c in every
            if as_dict(c.get("securityContext")).get("runAsNonRoot") is False
            or (as_dict(c.get("securityContext")).get("runAsNonRoot") is None and not pod_non_root)
        ]
        if root:
            problems.append(
                f"runAsNonRoot != true (pod or {names(root)} must set "
                "securityContext.runAsNonRoot=true)"
            )
        uid_zero = [c for c in every if as_dict(c.get("securityContext")).get("runAsUser") == 0]
        if uid_zero or pod_context.get("runAsUser") == 0:
            shown = names(uid_zero) if uid_zero else "pod"
            problems.append(f"runAsUser=0 ({shown} must not set runAsUser=0)")
        allowed = ("RuntimeDefault", "Localhost")
        pod_seccomp = as_dict(pod_context.get("seccompProfile")).get("type")
        unconfined = [
            c
            for c in every
            if as_dict(as_dict(c.get("securityContext")).get("seccompProfile")).get("type")
            not in (*allowed, None)
            or (
                as_dict(as_dict(c.get("securityContext")).get("seccompProfile")).get("type") is None
                and pod_seccomp not in allowed
            )
        ]
        if unconfined:
            problems.append(
                f"seccompProfile (pod or {names(unconfined)} must set securityContext."
                'seccompProfile.type to "RuntimeDefault" or "Localhost")'
            )
        volumes = [
            str(as_dict(v).get("name"))
            for v in as_list(spec.get("volumes"))
            if not set(as_dict(v)) - {"name"} <= RESTRICTED_VOLUMES
        ]
        if volumes:
            problems.append(f"restricted volume types (volumes {', '.join(volumes)})")
    return problems


# --- 3. ResourceQuota --------------------------------------------------------------------------


def pod_usage(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What one pod counts against quota keys: the larger of its containers' sum and its
    largest init container, per resource (``PodRequestsAndLimits``), and one pod."""
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for kind in ("requests", "limits"):
        main: dict[str, Decimal] = {}
        for container in containers(pod, init=False):
            for name, value in as_dict(as_dict(container.get("resources")).get(kind)).items():
                main[name] = main.get(name, Decimal(0)) + quantity(value)
        spec = as_dict(pod.get("spec"))
        for container in as_list(spec.get("initContainers")):
            for name, value in as_dict(
                as_dict(as_dict(container).get("resources")).get(kind)
            ).items():
                main[name] = max(main.get(name, Decimal(0)), quantity(value))
        for name, value in main.items():
            usage[f"{kind}.{name}"] = value
            if kind == "requests" and name in COMPUTE[:2]:
                usage[name] = value  # bare cpu/memory mean requests
            if kind == "requests" and "/" in name:
                usage[name] = value  # a bare extended resource name means requests too
    return usage


# Only cpu and memory must be set on every container when a quota tracks them: a backward
# compatibility rule of the pods evaluator (pkg/quota/v1/evaluator/core/pods.go
# ``Constraints``, ``validationSet``); other resources are counted as the pods set them.
MUST_SPECIFY = ("cpu", "memory")


def _missing(pod: Mapping[str, Any], key: str) -> list[str]:
    """Containers that do not set the cpu or memory a quota key tracks."""
    kind, _, name = key.partition(".")
    if kind not in ("requests", "limits") or name not in MUST_SPECIFY:
        return []
    return [
        str(c.get("name", ""))
        for c in containers(pod)
        if name not in as_dict(as_dict(c.get("resources")).get(kind))
    ]


def _counted(pod: Mapping[str, Any]) -> bool:
    phase = as_dict(pod.get("status")).get("phase")
    return phase not in ("Succeeded", "Failed")


def quota_problems(store: Store, pod: Mapping[str, Any], namespace: str) -> str | None:
    """The ResourceQuota admission message for ``pod``, or None when every quota admits it."""
    usage = pod_usage(pod)
    existing = [p for p in store.list(PODS, namespace) if _counted(p)]
    for quota in store.list(RESOURCE_QUOTAS, namespace):
        name = str(as_dict(quota.get("metadata")).get("name", ""))
        hard = {
            str(k): quantity(v) for k, v in as_dict(as_dict(quota.get("spec")).get("hard")).items()
        }
        missing = {key: _missing(pod, key) for key in sorted(hard)}
        missing = {key: found for key, found in missing.items() if found}
        if missing:
            detail = "; ".join(f"{key} for: {','.join(found)}" for key, found in missing.items())
            return f"failed quota: {name}: must specify {detail}"
        used: dict[str, Decimal] = {}
        for other in existing:
            for key, value in pod_usage(other).items():
                used[key] = used.get(key, Decimal(0)) + value
        over = [
            key
            for key in sorted(hard)
            if usage.get(key, Decimal(0)) and used.get(key, Decimal(0)) + usage[key] > hard[key]
        ]
        if over:
            requested = ",".join(f"{k}={show(usage[k])}" for k in over)
            used_text = ",".join(f"{k}={show(used.get(k, Decimal(0)))}" for k in over)
            limited = ",".join(f"{k}={show(hard[k])}" for k in over)
            return (
                f"exceeded quota: {name}, requested: {requested}, used: {used_text}, "
                f"limited: {limited}"
            )
    return None


# --- the chain ---------------------------------------------------------------------------------


def enforce_level(store: Store, namespace: str) -> str:
    obj = store.get(NAMESPACES, "", namespace)
    labels = as_dict(as_dict(obj.get("metadata") if obj else {}).get("labels"))
    return str(labels.get(ENFORCE_LABEL, "privileged"))


def admit_pod(
    store: Store, pod: JsonObject, *, webhooks: Iterable[Any] = (), requester: str = ""
) -> JsonObject:
    """``pod`` as the API server would store it, or ``Rejected`` with its message.

    ``webhooks`` are the mutating webhooks (callables taking the pod) in their order;
    ``requester`` the user creating it (``kyverno.pod_creator`` when not given)."""
    metadata = as_dict(pod.get("metadata"))
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    default_requests(pod)
    items = container_limit_items(store, namespace)
    apply_limit_defaults(pod, items)
    for webhook in webhooks:
        webhook(pod)
    requester = requester or kyverno.pod_creator(pod)
    mutated, refused = kyverno.mutate(store, pod, PODS, username=requester)
    if refused:
        raise Rejected(refused)
    if mutated is not pod:
        pod.clear()
        pod.update(mutated)
    invalid = validation_problems(pod)
    if invalid:
        raise Rejected(f'Pod "{name}" is invalid: {", ".join(invalid)}')
    level = enforce_level(store, namespace)
    security = pod_security_problems(pod, level)
    if security:
        raise Rejected(
            f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
            + ", ".join(security)
        )
    ranges = limit_range_problems(pod, items)
    if ranges:
        raise Rejected(f'pods "{name}" is forbidden: {"; ".join(ranges)}')
    refused = kyverno.validate(store, pod, PODS, username=requester)
    if refused:
        raise Rejected(refused)
    quota = quota_problems(store, pod, namespace)
    if quota:
        raise Rejected(f'pods "{name}" is forbidden: {quota}')
    return pod


# --- other kinds -------------------------------------------------------------------------------


def object_count_problem(store: Store, resource: Resource, namespace: str) -> str | None:
    """The ResourceQuota admission message when one more ``resource`` object would exceed a
    ``count/<resource>.<group>`` quota of the namespace (kubernetes pkg/quota/v1/generic
    ``ObjectCountQuotaResourceNameFor``, ``evaluator.go`` ``Usage``), or None."""
    key = f"count/{resource.qualified}"
    for quota in store.list(RESOURCE_QUOTAS, namespace):
        hard = as_dict(as_dict(quota.get("spec")).get("hard"))
        if key not in hard:
            continue
        limited = quantity(hard[key])
        used = Decimal(len(store.list(resource, namespace)))
        if used + 1 > limited:
            name = str(as_dict(quota.get("metadata")).get("name", ""))
            return (
                f"exceeded quota: {name}, requested: {key}=1, used: {key}={show(used)}, "
                f"limited: {key}={show(limited)}"
            )
    return None


def admit_object(
    store: Store,
    obj: JsonObject,
    resource: Resource,
    *,
    requester: str,
    groups: tuple[str, ...] = (),
    operation: str = "CREATE",
    old: JsonObject | None = None,
) -> JsonObject:
    """``obj`` as the mutating webhooks leave it (Kueue's for Jobs and JobSets, then
    Kyverno's), or ``Rejected`` with the API server's message when a webhook refuses it
    (``operation`` UPDATE with ``old``, the stored object). ``requester`` and ``groups`` are who
    asks, as the webhooks see them (``groups`` empty: derived from the name). Kueue's validating
    webhook runs before Kyverno's, as the API server calls them in name order (``vjob.kb.io``
    sorts before Kyverno's ``validate.kyverno.svc-*``). A create then meets ResourceQuota's
    object counts, last. While Kueue's webhook Service is unreachable (a fault) a Job or JobSet
    it would be called for is ``WebhookUnreachable``, before any other webhook."""
    called = kueue_webhooks.called_webhook(store, obj, resource, operation)
    if called:
        raise WebhookUnreachable(unreachable_message(*called))
    kueue_webhooks.mutate_job(store, obj, resource, operation)
    mutated, refused = kyverno.mutate(
        store, obj, resource, username=requester, operation=operation, old=old, groups=groups
    )
    if not refused:
        try:
            kueue_webhooks.validate_job(store, mutated, resource, operation, old)
        except kueue_webhooks.Denied as exc:
            refused = str(exc)
    refused = refused or kyverno.validate(
        store,
        mutated,
        resource,
        username=requester,
        operation=operation,
        old=old,
        groups=groups,
    )
    if refused:
        raise Rejected(refused)
    if operation == "CREATE":
        metadata = as_dict(mutated.get("metadata"))
        quota = object_count_problem(store, resource, str(metadata.get("namespace") or ""))
        if quota:
            name = str(metadata.get("name") or "")
            raise Rejected(f'{resource.qualified} "{name}" is forbidden: {quota}')
    return mutated


def unreachable_message(webhook: str, path: str) -> str:
    """Why the API server could not call Kueue's ``webhook`` at ``path`` on its Service, in its
    words: k8s.io/apiserver ``pkg/util/webhook/error.go`` ``ErrCallingWebhook.Error`` around
    the mutating dispatcher's ``failed to call webhook: %w`` (``pkg/admission/plugin/webhook/
    mutating/dispatcher.go`` ``callAttrMutatingHook``; the validating one's is the same) and
    Go's net/http error for a Service address nobody listens on (``timeout`` is the
    admissionregistration/v1 default of 10 seconds)."""
    host = f"{kueue_webhooks.SERVICE_NAME}.{kueue_webhooks.SERVICE_NAMESPACE}.svc"
    address = cluster_ip(kueue_webhooks.SERVICE_NAMESPACE, kueue_webhooks.SERVICE_NAME)
    return (
        f'failed calling webhook "{webhook}": failed to call webhook: Post '
        f'"https://{host}:443{path}?timeout=10s": dial tcp {address}:443: connect: '
        "connection refused"
    )


def cluster_ip(namespace: str, name: str) -> str:
    """The ClusterIP the API server hands a new Service: an address of the service range,
    derived from the Service (the allocator picks at random; here a run is repeatable), never
    the range's network address or its first address (the ``kubernetes`` Service's)."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}/{name}".encode()).digest()[:4], "big")
    offset = 2 + digest % (SERVICE_RANGE.num_addresses - 3)
    return str(SERVICE_RANGE.network_address + offset)
