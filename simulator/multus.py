"""Multus and the SR-IOV device plugin, as far as a pod's start depends on them.

- The SR-IOV network device plugin advertises each node group's ``sriov_resources`` (VFs per
  node) as extended resources; kube-scheduler's NodeResourcesFit filter places a pod asking
  for one only on a node with enough of it left ("Insufficient <resource>", kubernetes v1.34
  pkg/scheduler/framework/plugins/noderesources/fit.go ``fitsRequest``).
- Multus (thick plugin, multus-cni v4.3.0) reads the pod's ``k8s.v1.cni.cncf.io/networks``
  annotation when the kubelet creates the pod's sandbox: a comma-separated list of
  ``[<namespace>/]<name>[@<interface>]`` or a JSON list of selection elements
  (``pkg/k8sclient/k8sclient.go`` ``parsePodNetworkAnnotation``, ``parsePodNetworkObjectName``);
  a name without namespace is the pod's own. For each it gets the NetworkAttachmentDefinition,
  and when that fails it records a Warning event ``NoNetworkFound`` on the pod, "cannot find a
  network-attachment-definition (<name>) in namespace (<namespace>): ...", and the sandbox is
  not created (``getKubernetesDelegate``; its test "fails when the network does not exist" in
  ``k8sclient_test.go``). With ``namespaceIsolation`` a reference to another namespace than
  the pod's, or ``default``, fails first (``GetNetworkDelegates``: "namespace isolation
  enabled, annotation violates permission, pod is in namespace <ns> but refers to target
  namespace <target>"). The simulated Multus runs with namespace isolation, as the operator
  guide asks.

The pod then stays bound and Pending, its containers waiting in ``ContainerCreating``; the
kubelet retries the sandbox, so the pod starts once the attachment exists (``Cluster.tick``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from simulator.store import NADS, JsonObject, Store, as_dict, as_list

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
# Namespaces any pod may use with namespace isolation (multus-cni docs/configuration.md).
GLOBAL_NAMESPACES = frozenset({"default"})
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def selected_networks(annotation: str, namespace: str) -> list[tuple[str, str]] | str:
    """(namespace, name) of each network the annotation selects, or why Multus refuses it."""
    if not annotation.strip():
        return []
    if any(c in annotation for c in '[{"'):
        try:
            elements = json.loads(annotation)
        except ValueError as exc:
            return f"failed to parse pod Network Attachment Selection Annotation JSON format: {exc}"
        if not isinstance(elements, list):
            return "failed to parse pod Network Attachment Selection Annotation JSON format"
        return [
            (str(as_dict(e).get("namespace") or namespace), str(as_dict(e).get("name", "")))
            for e in elements
        ]
    networks = []
    for item in annotation.split(","):
        parts = item.strip().split("/")
        if len(parts) > 2:
            return "parsePodNetworkObjectName: Invalid network object (failed at '/')"
        target, name = (parts[0].strip(), parts[1]) if len(parts) == 2 else ("", parts[0])
        name = name.split("@")[0].strip()
        for part in (target, name):
            if part and not _LABEL.fullmatch(part):
                return (
                    "parsePodNetworkObjectName: Failed to parse: one or more items did not "
                    f"match comma-delimited format, mismatch @ '{part}'"
                )
        networks.append((target or namespace, name))
    return networks


def sandbox_error(store: Store, pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(event reason, message) when Multus cannot attach the pod's networks, else None."""
    metadata = as_dict(pod.get("metadata"))
    annotation = as_dict(metadata.get("annotations")).get(NETWORKS_ANNOTATION)
    if not isinstance(annotation, str):
        return None
    namespace = str(metadata.get("namespace", ""))
    networks = selected_networks(annotation, namespace)
    if isinstance(networks, str):
        return "FailedCreatePodSandBox", networks
    for target, name in networks:
        if target != namespace and target not in GLOBAL_NAMESPACES:
            return (
                "FailedCreatePodSandBox",
                "GetNetworkDelegates: namespace isolation enabled, annotation violates "
                f"permission, pod is in namespace {namespace} but refers to target namespace "
                f"{target}",
            )
        if store.get(NADS, target, name) is None:
            return (
                "NoNetworkFound",
                f"cannot find a network-attachment-definition ({name}) in namespace "
                f'({target}): network-attachment-definitions.k8s.cni.cncf.io "{name}" '
                "not found",
            )
    return None


def extended_requests(pod: Mapping[str, Any], resources: Mapping[str, int]) -> dict[str, int]:
    """How many of each of ``resources`` (the SR-IOV resource names a node group advertises,
    or any the fleet has) the pod's containers ask for (limits, else requests)."""
    wanted: dict[str, int] = {}
    for container in as_list(as_dict(pod.get("spec")).get("containers")):
        limits = as_dict(as_dict(as_dict(container).get("resources")).get("limits"))
        requests = as_dict(as_dict(as_dict(container).get("resources")).get("requests"))
        for name, value in (limits or requests).items():
            if name in resources:
                try:
                    wanted[name] = wanted.get(name, 0) + int(str(value))
                except ValueError:
                    continue
    return wanted


def waiting_status(pod: JsonObject, node_ip: str, started: str) -> JsonObject:
    """The status of a bound pod whose sandbox the kubelet cannot create yet."""
    containers = [as_dict(c) for c in as_list(as_dict(pod.get("spec")).get("containers"))]
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
        ],
        "hostIP": node_ip,
        "hostIPs": [{"ip": node_ip}],
        "startTime": started,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": str(c.get("name", "")),
                "image": str(c.get("image", "")),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
                "lastState": {},
            }
            for c in containers
        ],
    }


def is_waiting_for_sandbox(pod: Mapping[str, Any]) -> bool:
    spec, status = as_dict(pod.get("spec")), as_dict(pod.get("status"))
    return (
        bool(spec.get("nodeName"))
        and status.get("phase") == "Pending"
        and any(
            as_dict(as_dict(c).get("state")).get("waiting", {}).get("reason") == "ContainerCreating"
            for c in as_list(status.get("containerStatuses"))
        )
    )
