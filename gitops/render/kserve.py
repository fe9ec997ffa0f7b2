"""A model endpoint: a KServe InferenceService (``serving.kserve.io/v1beta1``) running vLLM
through the Hugging Face runtime, plus its route and DRA claim template (tenant-owned; its
LiteLLM entry is platform-owned, see ``gitops.render.litellm``).

Choices:

- ``Standard`` deployment mode (a Deployment and a ``<name>-predictor`` Service): the gateway
  route needs a plain Service, and Kueue queues the Deployment's pods through its
  ``deployment`` integration. KServe's own ingress is off
  (``networking.kserve.io/visibility: cluster-local``); the HTTPRoute is the way in.
- Kueue: ``kueue.x-k8s.io/queue-name`` and the ``inference-critical`` priority class on the
  InferenceService (KServe copies its labels to the Deployment) and on the predictor's pods.
- Autoscaling: a fixed size (``min == max``) needs no autoscaler (class ``none``); ``cpu`` and
  ``memory`` use the HPA (utilisation in percent); ``concurrency`` and ``rps`` are Knative
  metrics that Standard mode's HPA does not offer, so they use KEDA with a Prometheus query on
  vLLM's own metrics, averaged per pod so the target is per replica.
- GPUs from the share: ``nvidia.com/gpu`` (whole), ``nvidia.com/mig-<profile>`` (MIG), vGPUs
  with the share's memory and cores (HAMi), or a ResourceClaim made from the endpoint's own
  template (DRA; KServe passes ``resourceClaims`` to the pod). More than one GPU turns on
  tensor parallelism unless the arguments set it.
- Pod Security "restricted": non-root, no privilege escalation, all capabilities dropped,
  RuntimeDefault seccomp. (KServe's storage initializer takes its security context from the
  platform's ClusterStorageContainer, which must match.)
"""

from __future__ import annotations

from typing import Any

from gitops.render import dra, gateway, litellm, resources
from gitops.render.kueue import INFERENCE_PRIORITY
from gitops.render.meta import LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, metadata
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
    if endpoint.min_replicas == endpoint.max_replicas:
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
        "minReplicas": endpoint.min_replicas,
        "maxReplicas": endpoint.max_replicas,
        **scaling,
        "labels": dict(queue_labels),
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "model": {
            "modelFormat": {"name": "huggingface"},
            "storageUri": endpoint.model_uri,
            "args": _args(endpoint),
            "resources": container_resources,
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
            },
        },
    }
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
    return objs
