"""Kueue's admission webhooks for pods, batch/v1 Jobs and JobSets, as the API server calls them.

Read from kubernetes-sigs/kueue v0.19.2:

- pods (``pkg/controller/jobs/pod/pod_webhook.go`` ``Default``): a pod whose owner Kueue
  manages already (a Job or JobSet with a queue) is left alone; otherwise, in a managed
  namespace, LocalQueueDefaulting gives it the namespace's LocalQueue named ``default``
  (``jobframework.ApplyDefaultLocalQueue``), and a queued pod gets the
  ``kueue.x-k8s.io/admission`` scheduling gate;
- Jobs and JobSets (``pkg/controller/jobs/job/job_webhook.go``, ``pkg/controller/jobs/jobset/
  jobset_webhook.go``; the mutating webhooks ``mjob.kb.io``/``mjobset.kb.io`` act on CREATE
  only): the same default queue, then ``jobframework.ApplyDefaultForSuspend``: a job with a
  queue whose owner Kueue does not manage is created ``spec.suspend: true``;
- validation (``vjob.kb.io``/``vjobset.kb.io`` on CREATE and UPDATE,
  ``jobframework/validation.go``): the queue label must be a DNS-1123 subdomain
  (``ValidateQueueName``), must not change while the job runs unsuspended
  (``validateUpdateForQueueName``: ``field is immutable``) and must not be removed in a
  namespace with a ``default`` LocalQueue.

Namespaces Kueue does not manage are left alone (``managedJobsNamespaceSelector`` excludes
``kube-system`` and ``kueue-system`` by default).

The API server calls these webhooks for every Job and JobSet outside those two namespaces,
labelled with a queue or not: ``config/components/webhook/manifests.yaml`` gives them no
objectSelector, ``failurePolicy: Fail`` and ``sideEffects: None`` (so a dry run calls them
too), and its ``kustomization.yaml`` copies ``vpod.kb.io``'s namespaceSelector (NotIn
``kube-system``, ``kueue-system``) onto each. When the webhook Service does not answer, the
create (or the update, for the validating ones) fails: ``called_webhook``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from simulator.store import (
    JOBS,
    JOBSETS,
    LOCAL_QUEUES,
    JsonObject,
    Resource,
    Store,
    as_dict,
    as_list,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
DEFAULT_QUEUE = "default"
UNMANAGED_NAMESPACES = frozenset({"kube-system", "kueue-system"})
WEBHOOKS = {JOBS.plural: "vjob.kb.io", JOBSETS.plural: "vjobset.kb.io"}
# The webhook Service, as config/default/kustomization.yaml names it (namePrefix ``kueue-``,
# namespace ``kueue-system``).
SERVICE_NAMESPACE, SERVICE_NAME = "kueue-system", "kueue-webhook-service"
SERVICE = f"{SERVICE_NAMESPACE}/{SERVICE_NAME}"
# Each kind's mutating (CREATE) and validating (CREATE, UPDATE) webhook and their paths
# (config/components/webhook/manifests.yaml).
_CALLED = {
    JOBS.plural: (("mjob.kb.io", "/mutate-batch-v1-job"), ("vjob.kb.io", "/validate-batch-v1-job")),
    JOBSETS.plural: (
        ("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset"),
        ("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset"),
    ),
}
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUEUE_PATH = f"metadata.labels[{QUEUE_LABEL}]"


class Denied(Exception):
    """A validating webhook refused the object; the message is the API server's."""


def gated(pod: Mapping[str, Any]) -> bool:
    gates = as_list(as_dict(pod.get("spec")).get("schedulingGates"))
    return any(as_dict(g).get("name") == ADMISSION_GATE for g in gates)


def queue_name(obj: Mapping[str, Any]) -> str:
    return str(as_dict(as_dict(obj.get("metadata")).get("labels")).get(QUEUE_LABEL) or "")


def managed_owner(store: Store, obj: Mapping[str, Any]) -> bool:
    """``IsOwnerManagedByKueueForObject``: the controller owner is a Job or JobSet that has a
    queue, or is itself owned by one (a JobSet's child Jobs)."""
    metadata = as_dict(obj.get("metadata"))
    namespace = str(metadata.get("namespace") or "")
    for ref in as_list(metadata.get("ownerReferences")):
        ref = as_dict(ref)
        if ref.get("controller") is not True:
            continue
        resource = {"Job": JOBS, "JobSet": JOBSETS}.get(str(ref.get("kind")))
        if resource is None:
            return False
        owner = store.get(resource, namespace, str(ref.get("name", "")))
        return owner is not None and (bool(queue_name(owner)) or managed_owner(store, owner))
    return False


def _default_queue(store: Store, obj: JsonObject) -> None:
    metadata = obj.setdefault("metadata", {})
    namespace = str(metadata.get("namespace") or "default")
    labels = metadata.setdefault("labels", {})
    if QUEUE_LABEL not in labels and store.get(LOCAL_QUEUES, namespace, DEFAULT_QUEUE):
        labels[QUEUE_LABEL] = DEFAULT_QUEUE


def called_webhook(
    store: Store, obj: Mapping[str, Any], resource: Resource, operation: str
) -> tuple[str, str] | None:
    """The first of Kueue's job webhooks the API server would call for ``obj`` and cannot
    reach, as (name, path), while its Service is unreachable (a fault); None otherwise. The
    mutating webhook is called first, and on CREATE only; the validating one on UPDATE too."""
    if SERVICE not in store.unreachable_services or resource.plural not in _CALLED:
        return None
    if str(as_dict(obj.get("metadata")).get("namespace") or "default") in UNMANAGED_NAMESPACES:
        return None
    mutating, validating = _CALLED[resource.plural]
    if operation == "CREATE":
        return mutating
    return validating if operation == "UPDATE" else None


def mutate_pod(store: Store, pod: JsonObject) -> None:
    """The pod webhook's ``Default``."""
    metadata = pod.setdefault("metadata", {})
    if str(metadata.get("namespace") or "default") in UNMANAGED_NAMESPACES:
        return
    if managed_owner(store, pod):
        return
    _default_queue(store, pod)
    if queue_name(pod) and not gated(pod):
        spec = pod.setdefault("spec", {})
        spec["schedulingGates"] = [*as_list(spec.get("schedulingGates")), {"name": ADMISSION_GATE}]


def mutate_job(store: Store, obj: JsonObject, resource: Resource, operation: str) -> None:
    """``JobWebhook.Default`` and the JobSet's: on CREATE only."""
    if resource not in (JOBS, JOBSETS) or operation != "CREATE":
        return
    namespace = str(as_dict(obj.get("metadata")).get("namespace") or "default")
    if namespace in UNMANAGED_NAMESPACES or managed_owner(store, obj):
        return
    _default_queue(store, obj)
    if queue_name(obj):
        obj.setdefault("spec", {})["suspend"] = True


def validate_job(
    store: Store,
    obj: Mapping[str, Any],
    resource: Resource,
    operation: str,
    old: Mapping[str, Any] | None,
) -> None:
    """``ValidateCreate``/``ValidateUpdate``; ``Denied`` in the API server's words."""
    if resource not in (JOBS, JOBSETS):
        return
    problems: list[str] = []
    name = queue_name(obj)
    labels = as_dict(as_dict(obj.get("metadata")).get("labels"))
    if QUEUE_LABEL in labels and not (len(name) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(name)):
        problems.append(
            f'{_QUEUE_PATH}: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
            "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    if operation == "UPDATE" and old is not None:
        suspended = as_dict(obj.get("spec")).get("suspend") is True
        before = queue_name(old)
        if not suspended and name != before:
            problems.append(f'{_QUEUE_PATH}: Invalid value: "{name}": field is immutable')
        namespace = str(as_dict(old.get("metadata")).get("namespace") or "")
        if not name and before and store.get(LOCAL_QUEUES, namespace, DEFAULT_QUEUE):
            problems.append(
                f'{_QUEUE_PATH}: Invalid value: "": queue-name must not be empty in namespace '
                "with default queue"
            )
    if problems:
        # field.ErrorList.ToAggregate: one error alone, several as "[a, b]".
        detail = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
        raise Denied(
            f'admission webhook "{WEBHOOKS[resource.plural]}" denied the request: {detail}'
        )
