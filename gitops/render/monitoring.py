"""What Prometheus (prometheus-operator, ``monitoring.coreos.com/v1``) scrapes: GPU metrics for
billing and health, and the model servers' own metrics for KEDA's autoscaling queries
(``gitops.render.kserve``).

Platform exporters (``infrastructure/configs/monitoring.yaml``, ServiceMonitors in the
monitoring namespace, reaching into the exporters' namespaces):

- DCGM exporter: the GPU Operator's Service ``nvidia-dcgm-exporter`` (label
  ``app: nvidia-dcgm-exporter``, port ``gpu-metrics`` 9400) in its namespace (NVIDIA/gpu-operator
  v26.7.0 assets/state-dcgm-exporter/0400_service.yaml). ``honorLabels: true`` keeps the
  exporter's ``namespace``/``pod``/``container`` labels, the pod that holds the GPU, which is
  what usage is billed by; with the GPU Operator's default (``false``) they would be renamed
  ``exported_*`` and collide with the exporter pod's own labels (../shared/reference/
  metering.md section 1; NVIDIA/gpu-operator#811). The exporter is the platform's, so no
  tenant controls those labels. Turn the GPU Operator's own ServiceMonitor off
  (``dcgmExporter.serviceMonitor.enabled: false``, on by default in
  deployments/gpu-operator/values.yaml) or every sample is scraped twice.
- HAMi (only on a fleet with a HAMi pool): the scheduler's Service (component
  ``hami-scheduler``, port ``monitor``, target 9395; it selects only the leader, so one copy
  of the allocation metrics) and the device plugin's monitor Service (component
  ``hami-device-plugin``, port ``monitorport``, target 9394), Project-HAMi/HAMi v2.10.0
  charts/hami/templates/scheduler/service.yaml and device-plugin/monitorservice.yaml.
  ``honorLabels`` for the same reason as DCGM: the per-container metrics carry the workload's
  ``namespace``/``pod``.

Model servers (``tenants/<slug>/monitoring.yaml``, platform-owned, one PodMonitor in each
tenant namespace with endpoints): pods labelled ``serving.kserve.io/inferenceservice``, port
8080, ``/metrics`` (the Hugging Face runtime's ``prometheus.kserve.io/port``/``path``
annotations, kserve v0.20.0 config/runtimes/kserve-huggingfaceserver.yaml). A PodMonitor's
``namespaceSelector`` can only list names or take every namespace (the CRD has ``any`` and
``matchNames``, no label selector), so each tenant gets its own rather than one that scrapes
every namespace. ``honorLabels`` stays false: a tenant's server must not be able to relabel
its samples as another namespace's. The predictor container declares the port, because a
PodMonitor's ``portNumber`` drops pods that do not (see ``gitops.render.kserve``).
NetworkPolicy ``allow-monitoring`` (``gitops.render.network``) lets Prometheus in.

Prometheus must select these objects: with kube-prometheus-stack, set
``serviceMonitorSelectorNilUsesHelmValues`` and ``podMonitorSelectorNilUsesHelmValues`` to
false (or select ``app.kubernetes.io/managed-by: ai-factory-portal``) and let it watch every
namespace for PodMonitors.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.specs import FleetSpec, TenantSpec

API = "monitoring.coreos.com/v1"
DCGM_SERVICE_LABELS = {"app": "nvidia-dcgm-exporter"}
DCGM_PORT = "gpu-metrics"
HAMI_COMPONENT = "app.kubernetes.io/component"
HAMI_SCHEDULER = "hami-scheduler"
HAMI_DEVICE_PLUGIN = "hami-device-plugin"
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"
MODEL_SERVER_PORT = 8080
METRICS_PATH = "/metrics"
MODEL_SERVERS = "model-servers"


def _service_monitor(
    name: str, fleet: FleetSpec, namespace: str, selector: dict[str, str], port: str
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ServiceMonitor",
        "metadata": metadata(name, fleet.monitoring_namespace),
        "spec": {
            "namespaceSelector": {"matchNames": [namespace]},
            "selector": {"matchLabels": dict(selector)},
            "endpoints": [{"port": port, "path": METRICS_PATH, "honorLabels": True}],
        },
    }


def fleet_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    """ServiceMonitors for the GPU exporters (see the module docstring)."""
    objs = [
        _service_monitor(
            "dcgm-exporter",
            fleet,
            fleet.gpu_operator_namespace,
            DCGM_SERVICE_LABELS,
            DCGM_PORT,
        )
    ]
    if any(flavor.mode == "hami" for flavor in fleet.flavors):
        objs += [
            _service_monitor(
                "hami-scheduler",
                fleet,
                fleet.hami_namespace,
                {HAMI_COMPONENT: HAMI_SCHEDULER},
                "monitor",
            ),
            _service_monitor(
                "hami-device-plugin",
                fleet,
                fleet.hami_namespace,
                {HAMI_COMPONENT: HAMI_DEVICE_PLUGIN},
                "monitorport",
            ),
        ]
    return objs


def model_server_monitor(tenant: TenantSpec) -> dict[str, Any]:
    """The tenant's model servers, scraped in its own namespace only."""
    return {
        "apiVersion": API,
        "kind": "PodMonitor",
        "metadata": metadata(MODEL_SERVERS, tenant.slug, tenant=tenant.slug),
        "spec": {
            "namespaceSelector": {"matchNames": [tenant.slug]},
            "selector": {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]},
            "podMetricsEndpoints": [
                {"portNumber": MODEL_SERVER_PORT, "path": METRICS_PATH, "honorLabels": False}
            ],
        },
    }


def tenant_objects(tenant: TenantSpec) -> list[dict[str, Any]]:
    return [model_server_monitor(tenant)] if tenant.endpoints else []
