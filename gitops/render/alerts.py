"""The platform's alerts: one PrometheusRule (``monitoring.coreos.com/v1``) in the monitoring
namespace, ``infrastructure/configs/alerts.yaml``, for Prometheus (prometheus-operator) to load
beside the portal's ServiceMonitors (``gitops.render.monitoring``).

- GPU health, from the DCGM exporter the GPU Operator runs (metric names and meanings:
  ../shared/reference/metering.md section 1, NVIDIA/dcgm-exporter etc/default-counters.csv,
  all on by default). ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID a GPU reported, so an
  alert lasts until the driver is reloaded. Fatal XIDs (the GPU needs a reset or a drain:
  48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 94/95 contained
  and uncontained ECC; NVIDIA's XID catalogue, docs.nvidia.com/deploy/xid-errors) are
  critical; the ones NVIDIA's device plugin treats as the application's (13, 31, 43, 45, 68,
  109: NVIDIA/k8s-device-plugin internal/rm/health.go) raise nothing; any other is a warning.
  A failed row remap (``DCGM_FI_DEV_ROW_REMAP_FAILURE``) means the GPU must be replaced; new
  uncorrectable remapped rows, that it needs a reset. An exporter that is down blinds health
  and billing alike (its ServiceMonitor's job is the Service's name).
- Kueue backlog (kueue v0.19.2 pkg/metrics/metrics.go): ``kueue_pending_workloads`` with
  ``status="inadmissible"`` counts workloads a ClusterQueue tried and failed to admit, which it
  does not retry until something changes; ``kueue_admission_wait_time_seconds`` is the time
  from creation (or requeue) to admission, per ClusterQueue. Kueue's chart exposes them to
  Prometheus with ``enablePrometheus`` (the stack sets it, ``gitops.render.stack``).
- Flux: Flux v2 no longer exports a readiness metric of its own (``gotk_reconcile_condition``
  is gone); its documented way is kube-state-metrics' custom resource state, which exports
  ``gotk_resource_info`` with ``ready`` (the Ready condition's status), ``suspended`` and
  ``customresource_kind`` labels (https://fluxcd.io/flux/monitoring/custom-metrics/, the
  configuration in fluxcd/flux2-monitoring-example monitoring/controllers/
  kube-prometheus-stack/kube-state-metrics-config.yaml). ``suspended`` is empty unless
  ``spec.suspend`` is set, so the rule asks for "not true".

Every expression is checked with ``promtool check rules`` and its firing with ``promtool test
rules`` in tests/gitops/test_render_alerts.py.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.specs import FleetSpec

API = "monitoring.coreos.com/v1"
NAME = "ai-factory-platform"
XID = "DCGM_FI_DEV_XID_ERRORS"
FATAL_XIDS = (48, 63, 64, 74, 79, 94, 95)
APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)
# The GPU, whichever pod holds it: released exporters spell the node label "Hostname", newer
# ones "hostname" (metering.md section 1); a label a series lacks is simply left out.
GPU_LABELS = "UUID, gpu, modelName, Hostname, hostname"
DCGM_JOB = "nvidia-dcgm-exporter"
GPU_WHERE = (
    "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}{{ $labels.hostname }}"
)


def _rule(
    alert: str, expr: str, severity: str, summary: str, description: str, duration: str = ""
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert, "expr": expr}
    if duration:
        rule["for"] = duration
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def _xid_filter(values: tuple[int, ...], keep: bool) -> str:
    """``XID`` samples equal to one of ``values`` (``keep``) or to none of them."""
    if keep:
        return " or ".join(f"{XID} == {value}" for value in values)
    return f"{XID} > 0" + "".join(f" != {value}" for value in values)


def gpu_rules() -> list[dict[str, Any]]:
    return [
        _rule(
            "GpuFatalXid",
            f"max by ({GPU_LABELS}) ({_xid_filter(FATAL_XIDS, keep=True)})",
            "critical",
            "A GPU reported a fatal XID error",
            f"{GPU_WHERE} reported XID {{{{ $value }}}}: drain the node and reset the GPU.",
        ),
        _rule(
            "GpuXidError",
            f"max by ({GPU_LABELS}) ({_xid_filter(FATAL_XIDS + APPLICATION_XIDS, keep=False)})",
            "warning",
            "A GPU reported an XID error",
            f"{GPU_WHERE} reported XID {{{{ $value }}}}.",
        ),
        _rule(
            "GpuRowRemapFailure",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
            "critical",
            "A GPU failed to remap a memory row",
            f"{GPU_WHERE} could not remap a failing memory row: replace it.",
        ),
        _rule(
            "GpuUncorrectableRemappedRows",
            f"max by ({GPU_LABELS}) (increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[1h])) > 0",
            "warning",
            "A GPU remapped rows after uncorrectable errors",
            f"{GPU_WHERE} remapped memory rows after uncorrectable errors: reset it when idle.",
        ),
        _rule(
            "DcgmExporterDown",
            f'up{{job="{DCGM_JOB}"}} == 0',
            "warning",
            "A DCGM exporter is not scraped",
            "The DCGM exporter {{ $labels.pod }} is down: GPU health and usage on its node "
            "are not seen, nor billed.",
            "10m",
        ),
    ]


def kueue_rules() -> list[dict[str, Any]]:
    return [
        _rule(
            "KueueInadmissibleWorkloads",
            'sum by (cluster_queue) (kueue_pending_workloads{status="inadmissible"}) > 0',
            "warning",
            "Workloads a ClusterQueue cannot admit",
            "{{ $value }} workloads of ClusterQueue {{ $labels.cluster_queue }} failed "
            "admission (quota, flavors or topology) and wait for the queue to change.",
            "30m",
        ),
        _rule(
            "KueueSlowAdmission",
            "histogram_quantile(0.9, sum by (cluster_queue, le) "
            "(rate(kueue_admission_wait_time_seconds_bucket[1h]))) > 1800",
            "warning",
            "Workloads wait long for admission",
            "Nine in ten workloads of ClusterQueue {{ $labels.cluster_queue }} admitted in the "
            "last hour waited up to {{ $value | humanizeDuration }}.",
            "15m",
        ),
    ]


def flux_rules() -> list[dict[str, Any]]:
    return [
        _rule(
            "FluxReconciliationFailure",
            "max by (customresource_kind, exported_namespace, name) "
            '(gotk_resource_info{ready="False", suspended!="true"}) > 0',
            "warning",
            "A Flux object is not ready",
            "{{ $labels.customresource_kind }} {{ $labels.exported_namespace }}/"
            "{{ $labels.name }} has not been ready for 15 minutes.",
            "15m",
        ),
    ]


def groups() -> list[dict[str, Any]]:
    return [
        {"name": "gpu-health", "rules": gpu_rules()},
        {"name": "kueue-backlog", "rules": kueue_rules()},
        {"name": "flux", "rules": flux_rules()},
    ]


def prometheus_rule(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "PrometheusRule",
        "metadata": metadata(NAME, fleet.monitoring_namespace),
        "spec": {"groups": groups()},
    }


def fleet_objects(fleet: FleetSpec) -> list[dict[str, Any]]:
    return [prometheus_rule(fleet)]
