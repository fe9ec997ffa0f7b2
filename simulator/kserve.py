"""KServe as it shapes predictor pods (Standard deployment mode), read from kserve/kserve v0.20.0.

- The controller builds the predictor's pod template: the ``kserve-container`` from
  ``spec.predictor.model`` (the runtime's image and the model's args, resources, security
  context and env) and the pod fields of ``spec.predictor`` (security context, node selector,
  tolerations, resource claims, service account), and records the model's ``storageUri`` in
  the ``internal.serving.kserve.io/storage-initializer-sourceuri`` annotation
  (``pkg/constants``).
- The pod mutating webhook then adds the ``storage-initializer`` init container for every URI
  but ``pvc://`` (mounted directly) and ``oci://`` (modelcar): built from the
  ``inferenceservice-config`` defaults with *no* security context, then merged with the first
  enabled ClusterStorageContainer whose ``supportedUriFormats`` match
  (``pkg/webhook/admission/pod/storage_initializer_injector.go``: ``GetStorageContainerSpec``,
  ``CommonStorageInitialization``, ``mergeContainerSpecs``). KServe lists them in no defined
  order; the simulator takes name order.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from simulator.store import STORAGE_CONTAINERS, JsonObject, Store, as_dict, as_list

VERSION = "v0.20.0"
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
STORAGE_INITIALIZER = "storage-initializer"
MODEL_CONTAINER = "kserve-container"
MODEL_MOUNT = "/mnt/models"
MODEL_VOLUME = "kserve-provision-location"
NO_DOWNLOAD = ("pvc://", "oci://")
# inferenceservice-config's storageInitializer defaults (config/configmap/inferenceservice.yaml)
_DEFAULT_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "100Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}
# Fields of spec.predictor that are pod fields (PodSpec is inlined into PredictorSpec).
POD_FIELDS = (
    "nodeSelector",
    "tolerations",
    "resourceClaims",
    "securityContext",
    "serviceAccountName",
    "affinity",
    "priorityClassName",
    "volumes",
)
CONTAINER_FIELDS = (
    "args",
    "command",
    "env",
    "envFrom",
    "resources",
    "securityContext",
    "volumeMounts",
)


def model_container(predictor: Mapping[str, Any]) -> JsonObject:
    """The ``kserve-container`` of a predictor that names a model (Hugging Face runtime)."""
    model = as_dict(predictor.get("model"))
    model_format = str(as_dict(model.get("modelFormat")).get("name", "huggingface"))
    container: JsonObject = {
        "name": MODEL_CONTAINER,
        "image": f"kserve/{model_format}server:{VERSION}",
    }
    for field in CONTAINER_FIELDS:
        if model.get(field):
            container[field] = model[field]
    return container


def pod_spec(predictor: Mapping[str, Any]) -> JsonObject:
    model = as_dict(predictor.get("model"))
    if model:
        containers = [model_container(predictor)]
    else:
        containers = [as_dict(c) for c in as_list(predictor.get("containers"))]
    spec: JsonObject = {"containers": containers, "restartPolicy": "Always"}
    for field in POD_FIELDS:
        if predictor.get(field):
            spec[field] = predictor[field]
    return spec


def predictor_replica_set(name: str, predictor: Mapping[str, Any]) -> tuple[str, str]:
    """(ReplicaSet name, pod-template-hash) of the InferenceService ``name``'s predictor: the
    Deployment is ``<name>-predictor`` (kserve v0.20.0 pkg/constants PredictorServiceName) and
    its ReplicaSet ``<deployment>-<hash>``, the hash a function of the pod template in the
    alphabet of Kubernetes' ``rand.SafeEncodeString`` (here of ``spec.predictor``, which
    makes the template), so the same spec gives the same names."""
    digest = hashlib.sha256(json.dumps(predictor, sort_keys=True).encode()).hexdigest()
    template_hash = "".join("bcdfghjklmnpqrstvwxz2456789"[int(c, 16)] for c in digest[:10])
    return f"{name}-predictor-{template_hash}", template_hash


def storage_uri(predictor: Mapping[str, Any]) -> str:
    uri = as_dict(predictor.get("model")).get("storageUri")
    return uri if isinstance(uri, str) else ""


def _matches(formats: Any, uri: str) -> bool:
    for entry in as_list(formats):
        entry = as_dict(entry)
        prefix, pattern = entry.get("prefix"), entry.get("regex")
        if isinstance(prefix, str) and prefix and uri.startswith(prefix):
            return True
        if isinstance(pattern, str) and pattern:
            try:
                if re.match(pattern, uri):
                    return True
            except re.error:
                continue
    return False


def storage_container(store: Store, uri: str) -> JsonObject | None:
    for candidate in store.list(STORAGE_CONTAINERS):
        if candidate.get("disabled") is True:
            continue
        spec = as_dict(candidate.get("spec"))
        if spec.get("workloadType", "initContainer") != "initContainer":
            continue
        if _matches(spec.get("supportedUriFormats"), uri):
            return as_dict(spec.get("container"))
    return None


def _merge(base: JsonObject, override: Mapping[str, Any]) -> JsonObject:
    """A strategic merge of two containers: maps merge, ``env`` and ``volumeMounts`` merge by
    name/mount path (their patch merge keys), other lists are replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif key in ("env", "volumeMounts") and isinstance(value, list):
            merge_key = "name" if key == "env" else "mountPath"
            merged = {as_dict(item).get(merge_key): item for item in as_list(out.get(key))}
            merged.update({as_dict(item).get(merge_key): item for item in value})
            out[key] = list(merged.values())
        else:
            out[key] = value
    return out


class StorageInitializerWebhook:
    """KServe's pod webhook, as far as the storage initializer goes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, pod: JsonObject) -> None:
        annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
        uri = annotations.get(SOURCE_URI_ANNOTATION)
        if not isinstance(uri, str) or not uri or uri.startswith(NO_DOWNLOAD):
            return
        spec = pod.setdefault("spec", {})
        init = [as_dict(c) for c in as_list(spec.get("initContainers"))]
        if any(c.get("name") == STORAGE_INITIALIZER for c in init):
            return
        container: JsonObject = {
            "name": STORAGE_INITIALIZER,
            "image": f"kserve/storage-initializer:{VERSION}",
            "args": [uri, MODEL_MOUNT],
            "resources": {kind: dict(values) for kind, values in _DEFAULT_RESOURCES.items()},
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT}],
        }
        override = storage_container(self.store, uri)
        if override:
            container = _merge(container, override)
            container["name"] = STORAGE_INITIALIZER
        spec["initContainers"] = [*init, container]
        spec["volumes"] = [*as_list(spec.get("volumes")), {"name": MODEL_VOLUME, "emptyDir": {}}]
        for main in as_list(spec.get("containers")):
            if as_dict(main).get("name") == MODEL_CONTAINER:
                mounts = as_list(main.get("volumeMounts"))
                main["volumeMounts"] = [
                    *mounts,
                    {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True},
                ]
