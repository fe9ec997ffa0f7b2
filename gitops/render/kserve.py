"""A model endpoint: a KServe InferenceService (``serving.kserve.io/v1beta1``) running vLLM
through the Hugging Face runtime, plus its route and DRA claim template (tenant-owned; its
LiteLLM entry is platform-owned, see ``gitops.render.litellm``).

Choices:

- ``Standard`` deployment mode (a Deployment and a ``<name>-predictor`` Service): the gateway
  route needs a plain Service, and Kueue queues the Deployment's pods through its
  ``deployment`` integration. KServe's own ingress is off
  (``networking.kserve.io/visibility: cluster-local``); the HTTPRoute is the way in.
- Kueue: ``kueue.x-k8s.io/queue-name`` and the ``inference-critical`` priority class on the
  InferenceService (KServe copies its labels to the Deployment) and on the predictor's pods;
  the pods also name the ``inference-critical`` PriorityClass (``gitops.render.priority``).
- Autoscaling: a fixed size (``min == max``) needs no autoscaler (class ``none``); ``cpu`` and
  ``memory`` use the HPA (utilisation in percent); ``concurrency`` and ``rps`` are Knative
  metrics that Standard mode's HPA does not offer, so they use KEDA with a Prometheus query on
  vLLM's own metrics, averaged per pod so the target is per replica.
- Scale to zero, two ways (docs/architecture.md, "Scale to zero and sleep"). ``min_replicas``
  0 is allowed with the KEDA metrics only: KServe v0.20.0 hands minReplicas to the
  ScaledObject's ``minReplicaCount`` (pkg/controller/v1beta1/inferenceservice/reconcilers/
  keda/keda_reconciler.go ``createKedaScaledObject``), and KEDA scales the Deployment to zero
  while the query reads 0. An endpoint put to sleep (``asleep``, by an idle policy or its
  tenant) renders class ``none`` and ``minReplicas: 0``: KServe then sets the Deployment's
  replicas to minReplicas (reconcilers/deployment/deployment_reconciler.go
  ``createRawDefaultDeployment``), so it runs no pod and nothing scales it up until a change
  wakes it; its PodDisruptionBudget goes while it sleeps (it would guard no pod).
- GPUs from the share: ``nvidia.com/gpu`` (whole), ``nvidia.com/mig-<profile>`` (MIG),
  ``nvidia.com/vgpu`` slots with the share's memory and cores (HAMi), or a ResourceClaim made
  from the endpoint's own template (DRA; KServe passes ``resourceClaims`` to the pod). More
  than one GPU turns on tensor parallelism unless the arguments set it.
- Rollouts replace pods one at a time without a surge (``deploymentStrategy`` RollingUpdate,
  ``maxSurge: 0``, ``maxUnavailable: 1``): KServe otherwise gives the predictor Deployment
  Kubernetes' 25% surge (kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/
  deployment/deployment_reconciler.go ``setDefaultDeploymentSpec``; a user-set strategy takes
  precedence there), and a surge pod needs GPUs the quota, sized to the replicas, does not
  have, so the update would stall. An endpoint of one replica is briefly down while it updates.
- Pod Security "restricted": non-root, no privilege escalation, all capabilities dropped,
  RuntimeDefault seccomp. KServe's pod webhook adds a ``storage-initializer`` init container
  for ``hf://``, ``s3://`` and the other download schemes. It builds that container from its
  ConfigMap defaults, with no security context, then merges into it the container of the first
  ClusterStorageContainer whose ``supportedUriFormats`` match
  (kserve/kserve ``pkg/webhook/admission/pod/storage_initializer_injector.go``,
  ``CommonStorageInitialization`` and ``mergeContainerSpecs``). Pod Security checks the pod
  after every mutating webhook, so without a restricted security context there the namespace
  refuses the pod. ``cluster_storage_container`` renders that ClusterStorageContainer; it is
  named ``default``, the name KServe's own chart gives it, so it replaces the chart's rather
  than competing with it (two containers claiming one scheme are picked in no defined order);
  the stack's KServe release renders none (``gitops.render.stack``).
  Its environment reads the tenant's model-download credentials (``gitops.render.secrets``)
  from the Secret ``model-download-credentials``, each key ``optional``: the storage
  initializer runs in the predictor pod, in the tenant's namespace, so the reference resolves
  to that tenant's own Secret, and a missing Secret or key leaves the variable unset.
- Disruptions: an endpoint of more than one replica (``min_replicas`` > 1) gets a
  PodDisruptionBudget ``<name>-predictor`` beside it, ``maxUnavailable: 1``, so a node drain
  takes its replicas one at a time. It selects the labels KServe puts on every predictor pod,
  last so that no user label can override them (kserve v0.20.0
  pkg/controller/v1beta1/inferenceservice/components/predictor.go ``buildObjectMeta``:
  ``serving.kserve.io/inferenceservice: <name>``, ``component: predictor``; the Deployment's
  pod template takes them, reconcilers/deployment/deployment_reconciler.go
  ``createRawDefaultDeployment``). Pods that are not ready may always be evicted
  (``unhealthyPodEvictionPolicy: AlwaysAllow``, kubernetes.io/docs/tasks/run-application/
  configure-pdb, "Unhealthy Pod Eviction Policy"):
  a replica that cannot start must not hold a drain. A single replica gets none: the budget
  would protect nothing (with ``maxUnavailable: 1``) or, as ``minAvailable: 1``, block every
  drain of its node for good.
- Metrics: the model container declares port 8080, where the runtime serves the API and
  ``/metrics``. KServe's Standard-mode Service already targets 8080 without it (kserve v0.20.0
  pkg/controller/v1beta1/inferenceservice/reconcilers/service/service_reconciler.go), but the
  PodMonitor (``gitops.render.monitoring``) only finds declared ports.
"""

from __future__ import annotations

from typing import Any

from gitops.render import dra, gateway, kueue, litellm, resources, secrets
from gitops.render.kueue import INFERENCE_PRIORITY
from gitops.render.meta import LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, metadata
from gitops.render.monitoring import ISVC_POD_LABEL, MODEL_SERVER_PORT
from gitops.render.validate import DRA_TEMPLATE_SUFFIX
from gitops.specs import EndpointSpec, FleetSpec, GpuShare, TenantSpec

API = "serving.kserve.io/v1beta1"
CLAIM_NAME = "gpu"
TENSOR_PARALLEL_ARGS = ("--tensor-parallel-size", "--tensor_parallel_size")
# PromQL per scale metric, averaged over the predictor's pods (vLLM's metric names).
PROMQL = {
    "concurrency": "avg(sum by (pod) (vllm:num_requests_running{{{selector}}}))",
    "rps": "avg(sum by (pod) (rate(vllm:request_success_total{{{selector}}}[1m])))",
}


STORAGE_API = "serving.kserve.io/v1alpha1"
STORAGE_CONTAINER = "default"
STORAGE_INITIALIZER_IMAGE = "kserve/storage-initializer:v0.20.0"
# The storage-initializer image runs as this user (python/storage-initializer.Dockerfile).
STORAGE_INITIALIZER_USER = 1000
# What the default storage initializer downloads (KServe's chart lists the same formats).
STORAGE_URI_PREFIXES = ("gs://", "s3://", "hdfs://", "webhdfs://", "hf://")
STORAGE_URI_REGEXES = (
    "https://(.+?).blob.core.windows.net/(.+)",
    "https://(.+?).file.core.windows.net/(.+)",
    "https?://(.+)/(.+)",
)
RESTRICTED_CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def cluster_storage_container() -> dict[str, Any]:
    """The storage initializer KServe injects, Pod Security "restricted" compliant."""
    return {
        "apiVersion": STORAGE_API,
        "kind": "ClusterStorageContainer",
        "metadata": metadata(STORAGE_CONTAINER),
        "spec": {
            "container": {
                "name": "storage-initializer",
                "image": STORAGE_INITIALIZER_IMAGE,
                "resources": {
                    "requests": {"cpu": "100m", "memory": "100Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
                "securityContext": {
                    **RESTRICTED_CONTAINER_SECURITY,
                    "runAsUser": STORAGE_INITIALIZER_USER,
                },
                "env": [
                    {
                        "name": key,
                        "valueFrom": {
                            "secretKeyRef": {"name": secrets.SECRET, "key": key, "optional": True}
                        },
                    }
                    for key in secrets.ENV_KEYS
                ],
            },
            "supportedUriFormats": [{"prefix": prefix} for prefix in STORAGE_URI_PREFIXES]
            + [{"regex": regex} for regex in STORAGE_URI_REGEXES],
        },
    }


def rollout_strategy() -> dict[str, Any]:
    """No surge pod during an update (see the module docstring). maxSurge 0 needs
    maxUnavailable above 0, or the Deployment is invalid."""
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def claim_template_name(endpoint: EndpointSpec) -> str:
    return f"{endpoint.name}{DRA_TEMPLATE_SUFFIX}"


def _args(endpoint: EndpointSpec) -> list[str]:
    args = [f"--model_name={litellm.served_name(endpoint)}", *endpoint.args]
    sets_parallel = any(arg.split("=", 1)[0] in TENSOR_PARALLEL_ARGS for arg in endpoint.args)
    if endpoint.gpus_per_replica > 1 and not sets_parallel:
        args.append(f"--tensor-parallel-size={endpoint.gpus_per_replica}")
    return args


def _autoscaling(
    tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec
) -> tuple[dict[str, str], dict[str, Any]]:
    """(InferenceService annotations, predictor fields) for the endpoint's scaling."""
    if endpoint.asleep or endpoint.min_replicas == endpoint.max_replicas:
        return {"serving.kserve.io/autoscalerClass": "none"}, {}
    if endpoint.scale_metric in ("cpu", "memory"):
        return {"serving.kserve.io/autoscalerClass": "hpa"}, {
            "scaleMetric": endpoint.scale_metric,
            "scaleMetricType": "Utilization",
            "scaleTarget": endpoint.scale_target,
        }
    # Label values are DNS labels (validated), so they are safe inside the PromQL string.
    selector = f'namespace="{tenant.slug}",pod=~"{gateway.predictor_service(endpoint)}-.*"'
    query = PROMQL[endpoint.scale_metric].format(selector=selector)
    metric = {
        "type": "External",
        "external": {
            "metric": {
                "backend": "prometheus",
                "serverAddress": fleet.prometheus_url,
                "query": query,
            },
            "target": {"type": "Value", "value": str(endpoint.scale_target)},
        },
    }
    return {"serving.kserve.io/autoscalerClass": "keda"}, {"autoScaling": {"metrics": [metric]}}


def inference_service(
    tenant: TenantSpec, endpoint: EndpointSpec, share: GpuShare, fleet: FleetSpec
) -> dict[str, Any]:
    gpu = resources.container_resources(share, endpoint.gpus_per_replica)
    compute = {"cpu": str(endpoint.cpu), "memory": f"{endpoint.memory_gib}Gi", **gpu}
    container_resources: dict[str, Any] = {"requests": compute, "limits": dict(compute)}
    queue_labels = {QUEUE_NAME_LABEL: LOCAL_QUEUE, PRIORITY_CLASS_LABEL: INFERENCE_PRIORITY}
    scaling_annotations, scaling = _autoscaling(tenant, endpoint, fleet)
    predictor: dict[str, Any] = {
        "minReplicas": 0 if endpoint.asleep else endpoint.min_replicas,
        "maxReplicas": endpoint.max_replicas,
        **scaling,
        "deploymentStrategy": rollout_strategy(),
        "labels": dict(queue_labels),
        # The pod PriorityClass of the same name and value (gitops.render.priority).
        "priorityClassName": INFERENCE_PRIORITY,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "model": {
            "modelFormat": {"name": "huggingface"},
            "storageUri": endpoint.model_uri,
            "args": _args(endpoint),
            "ports": [{"name": "http", "containerPort": MODEL_SERVER_PORT, "protocol": "TCP"}],
            "resources": container_resources,
            "securityContext": {
                key: value
                for key, value in RESTRICTED_CONTAINER_SECURITY.items()
                if key != "seccompProfile"  # set once for the pod
            },
        },
    }
    if set(gpu) & set(kueue.tas_resources(tenant, fleet)):
        # Kueue implies TAS only in a queue whose flavors all have it (gitops.render.kueue);
        # KServe puts the predictor's annotations on its pods (kserve v0.20.0
        # pkg/controller/v1beta1/inferenceservice/components/predictor.go buildObjectMeta).
        predictor["annotations"] = {kueue.TAS_REQUEST_ANNOTATION: "true"}
    if share.kind == "dra":
        predictor["resourceClaims"] = [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(endpoint)}
        ]
        container_resources["claims"] = [{"name": CLAIM_NAME}]
    return {
        "apiVersion": API,
        "kind": "InferenceService",
        "metadata": metadata(
            endpoint.name,
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={**queue_labels, "networking.kserve.io/visibility": "cluster-local"},
            annotations={"serving.kserve.io/deploymentMode": "Standard", **scaling_annotations},
        ),
        "spec": {"predictor": predictor},
    }


PREDICTOR_COMPONENT_LABEL = "component"


def predictor_pod_selector(endpoint: EndpointSpec) -> dict[str, str]:
    """Labels every predictor pod of the endpoint carries (see the module docstring)."""
    return {ISVC_POD_LABEL: endpoint.name, PREDICTOR_COMPONENT_LABEL: "predictor"}


def disruption_budget(tenant: TenantSpec, endpoint: EndpointSpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(gateway.predictor_service(endpoint), tenant.slug, tenant=tenant.slug),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": predictor_pod_selector(endpoint)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def endpoint_objects(
    tenant: TenantSpec, endpoint: EndpointSpec, fleet: FleetSpec
) -> list[dict[str, Any]]:
    """Everything in ``workloads/endpoints/<name>.yaml``; the spec must be validated."""
    share = tenant.share(endpoint.share)
    assert share is not None, "validate_tenant checks that the share exists"
    flavor = fleet.flavor(share.flavor)
    assert flavor is not None, "validate_tenant checks that the flavor exists"
    objs: list[dict[str, Any]] = []
    if share.kind == "dra":
        objs.append(
            dra.claim_template(
                claim_template_name(endpoint), tenant, share, flavor, endpoint.gpus_per_replica
            )
        )
    objs.append(inference_service(tenant, endpoint, share, fleet))
    if endpoint.expose:
        objs.append(gateway.http_route(tenant, endpoint, fleet))
    if endpoint.min_replicas > 1 and not endpoint.asleep:
        objs.append(disruption_budget(tenant, endpoint))
    return objs
