"""The GPU Operator's ClusterPolicy (``nvidia.com/v1``, cluster-scoped): one for the whole fleet
(``infrastructure/configs/gpu-operator.yaml``).

Sources: the ClusterPolicy CRD of NVIDIA/gpu-operator v26.7.0 (the chart's ``crds/`` folder, the
schema the checks validate against), that tag's ``deployments/gpu-operator/values.yaml`` and
``templates/clusterpolicy.yaml`` (the chart renders the same object, named ``cluster-policy``,
unless ``clusterPolicy.deployCR`` is false) and the operator's controllers.

One ClusterPolicy serves every pool; pools differ by node labels, which the flavors carry and
``validate_fleet`` checks:

- ``mig.strategy`` is ``mixed`` when any pool uses MIG: the portal's MIG resources are
  ``nvidia.com/mig-<profile>``, the mixed strategy's names (the single strategy advertises MIG
  devices as ``nvidia.com/gpu``), and mixed is NVIDIA's choice when not every GPU of the cluster
  is in MIG mode ("GPU Operator with MIG", docs.nvidia.com/datacenter/cloud-native/gpu-operator).
  The operator passes the one strategy to both GFD and the device plugin (``MIG_STRATEGY``,
  controllers/object_controls.go ``applyMIGConfiguration``), so their labels and resources agree.
  Without MIG pools it is ``single``, the chart's default, under which a GPU outside MIG mode is
  one ``nvidia.com/gpu`` as under mixed.
- ``migManager.enabled`` only when a pool uses MIG (a ``mig`` pool, or a ``dra`` pool handing
  out MIG devices). The MIG manager applies the layout each node's ``nvidia.com/mig.config``
  label names, the label the MIG flavors carry; with it off, a node's MIG mode is left alone.
- ``devicePlugin.enabled`` when a pool is served by NVIDIA's device plugin (``whole``, ``mig``).
  Per node the operator runs it only where ``nvidia.com/gpu.deploy.device-plugin`` is ``true``
  (assets/state-device-plugin/0500_daemonset.yaml ``nodeSelector``), and it sets that label to
  ``true`` only where the node has no non-empty value yet (controllers/state_manager.go
  ``addGPUStateLabels``). So ``false`` on the nodes of ``dra`` (required) and ``hami`` pools keeps
  the device plugin off there while it serves every other GPU node.
- No DRA field: the v26.7.0 ClusterPolicy has none. The operator's own DRA stack is a separate
  resource (GPUCluster, chart value ``gpuCluster``), and a ``dra`` pool is served by the NVIDIA
  DRA driver chart (dra-driver-nvidia-gpu) installed beside the operator (docs/operator-guide.md;
  ``gitops.render.stack`` renders it with the fleet's ``stack``).
- ``dcgmExporter`` on, its ``serviceMonitor`` off: the portal's own ServiceMonitor
  (``gitops.render.monitoring``) scrapes the exporter with ``honorLabels``; with the operator's
  as well every sample would be scraped twice. The operator deletes its ServiceMonitor when
  ``serviceMonitor`` is not enabled (object_controls.go ``ServiceMonitor``).
- ``gfd`` on: the portal's inventory reads GFD's ``nvidia.com/gpu.product`` and MIG labels.
- ``nodeStatusExporter`` off (the chart's default): nothing in the portal reads it.
- ``daemonsets.tolerations`` tolerate each pool's taint (``Flavor.taint_key``) and the taint of
  nodes reserved for a dedicated tenant (``gitops.render.reservations``, any tenant), or the
  operands (the device plugin, GFD, the exporter) would never start on tainted GPU nodes and
  a reserved node would advertise no GPU; ``system-node-critical`` as the chart sets.

Images: the CRD leaves them optional, but the operator falls back to environment variables
(``DEVICE_PLUGIN_IMAGE`` ..., api/nvidia/v1/clusterpolicy_types.go ``ImagePath``) that the Helm
chart's operator Deployment does not set, except for the validator and driver manager. So each
enabled operand pins the image of the v26.7.0 chart's ``values.yaml``; change them together
with the operator's version. The node status exporter and validator use the operator's
``VALIDATOR_IMAGE``.
"""

from __future__ import annotations

from typing import Any

from gitops.render.meta import metadata
from gitops.render.reservations import RESERVED_KEY
from gitops.specs import FleetSpec

API = "nvidia.com/v1"
NAME = "cluster-policy"

# (repository, image, version) of the GPU Operator v26.7.0 chart's values.yaml.
IMAGES: dict[str, tuple[str, str, str]] = {
    "driver": ("nvcr.io/nvidia", "driver", "595.91.07"),
    "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
    "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
    "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
}


def uses_mig(fleet: FleetSpec) -> bool:
    """A pool hands out MIG devices, through the device plugin or the DRA driver."""
    return any(
        flavor.mode == "mig" or (flavor.mode == "dra" and flavor.mig_profiles)
        for flavor in fleet.flavors
    )


def uses_device_plugin(fleet: FleetSpec) -> bool:
    """A pool is served by NVIDIA's device plugin."""
    return any(flavor.mode in ("whole", "mig") for flavor in fleet.flavors)


def _operand(name: str, enabled: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": enabled}
    if enabled:
        repository, image, version = IMAGES[name]
        spec.update(repository=repository, image=image, version=version)
    return spec


def cluster_policy(fleet: FleetSpec) -> dict[str, Any]:
    """The fleet's ClusterPolicy (see the module docstring for each setting)."""
    mig = uses_mig(fleet)
    taints = sorted({flavor.taint_key for flavor in fleet.flavors} | {RESERVED_KEY})
    return {
        "apiVersion": API,
        "kind": "ClusterPolicy",
        "metadata": metadata(NAME),
        "spec": {
            "operator": {},
            "daemonsets": {
                "priorityClassName": "system-node-critical",
                "tolerations": [
                    {"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in taints
                ],
            },
            "driver": _operand("driver", True),
            "toolkit": _operand("toolkit", True),
            "devicePlugin": _operand("devicePlugin", uses_device_plugin(fleet)),
            # The standalone DCGM host engine stays off (the chart's default): the exporter
            # runs its own.
            "dcgm": {"enabled": False},
            "dcgmExporter": {
                **_operand("dcgmExporter", True),
                "serviceMonitor": {"enabled": False},
            },
            "gfd": _operand("gfd", True),
            "mig": {"strategy": "mixed" if mig else "single"},
            "migManager": _operand("migManager", mig),
            "nodeStatusExporter": {"enabled": False},
        },
    }
