"""Kueue's own configuration (``config.kueue.x-k8s.io/v1beta2`` ``Configuration``), delivered
as the ConfigMap the Kueue manager reads at start-up.

Where it lives: kueue v0.19.2 ``config/components/manager/kustomization.yaml`` generates the
ConfigMap ``manager-config`` from ``controller_manager_config.yaml``, and
``config/default/kustomization.yaml`` prefixes every name with ``kueue-`` in ``kueue-system``,
so the release manifests run the manager with ``kueue-system/kueue-manager-config``, key
``controller_manager_config.yaml`` (the Helm chart's ``templates/manager/manager-config.yaml``
uses the same name and key for a release named ``kueue``). The manager decodes the file
strictly (``pkg/config/config.go``: ``serializer.EnableStrict``), so an unknown key stops it;
tests/gitops checks the document against the fields of ``apis/config/v1beta2``.

Only what the platform decides is set; everything else keeps the defaults of
``apis/config/v1beta2/defaults.go`` (ports, leader election, internal certificates with the
``kueue-webhook-service``/``kueue-webhook-server-cert`` names of the release manifests), which
are also the values the release's own file sets:

- ``integrations.frameworks``: ``batch/job`` (training and evaluation Jobs), ``pod`` (plain
  GPU pods, and what the vCluster syncer creates), ``deployment`` (KServe's Standard-mode
  predictor), ``statefulset`` and ``jobset.x-k8s.io/jobset`` (the tenant reconciler may write
  JobSets, see ``gitops.render.rbac``).
- ``managedJobsNamespaceSelector``: namespaces carrying the tenant label, which only the
  platform sets. For the pod-based integrations this is a hard boundary: a pod, Deployment or
  StatefulSet anywhere else is never managed, whatever its labels (``configuration_types.go``,
  ``ManagedJobsNamespaceSelector``), so system namespaces cannot be queued by accident.
  Kueue's default selects every namespace but kube-system and its own.
- ``manageJobsWithoutQueueName`` stays false: only workloads that name the tenant's ``gpu``
  queue are Kueue's (see ``gitops.render.meta.LOCAL_QUEUE``).
- ``resources.deviceClassMappings``: each NVIDIA DeviceClass counted as a resource named after
  the class, as ``gitops.render.resources`` and the ClusterQueues expect.
- ``resources.excludeResourcePrefixes``: the fabric's SR-IOV resources (``fleet.fabric``), which
  pods of dedicated tenants request beside their GPUs (``gitops.render.fabric``): Kueue drops
  them from the Workload (kueue v0.19.2 ``pkg/workload/workload.go``
  ``dropExcludedResources``) instead of refusing a resource no ClusterQueue covers.
- ``fairSharing``: its presence turns fair sharing on (kueue v0.19.2
  ``pkg/scheduler/preemption/fairsharing/strategy.go`` ``Enabled``: ``pfs != nil``); the
  strategies are Kueue's documented default pair, and ``pkg/config/validation.go`` accepts
  only the listed combinations. Left out when the fleet turns fair sharing off.
- ``waitForPodsReady`` from the fleet's ``pods_ready``: ``timeout`` (admitted until every pod
  is ready), ``recoveryTimeout`` (ready once, then short of ready pods, as after a drain whose
  replacement pod cannot be placed), ``blockAdmission: false`` (a slow job does not stop the
  queue behind it) and ``requeuingStrategy`` (``Eviction`` timestamp, ``backoffLimitCount``,
  base and maximum backoff). Past the timeout Kueue evicts the workload (reason
  ``PodsReadyTimeout``), suspends the job, releases its quota and requeues it after the
  backoff; past ``backoffLimitCount`` requeues it deactivates it (kueue v0.19.2
  ``pkg/controller/core/workload_controller.go`` ``reconcileNotReadyTimeout``,
  ``triggerDeactivation``; ``pkg/controller/jobframework/reconciler.go``
  ``generatePodsReadyCondition``). In ``v1beta2`` the feature has no ``enable`` switch: it is
  on with Kueue's defaults (30 minutes, no limit) even when left out (``defaults.go``
  ``SetDefaults_Configuration``), and the strict decoder refuses an ``enable`` key. Durations
  are written in seconds (``600s``), which Go's ``time.ParseDuration`` reads.

Kueue reads the file once, at start: after a change, restart the ``kueue-controller-manager``
Deployment (the operator's guide says so). With the fleet's ``stack`` the document is the Kueue
chart's ``managerConfig`` value instead, and the chart restarts Kueue (``gitops.render.stack``).
"""

from __future__ import annotations

from typing import Any

from gitops.render import resources
from gitops.render.meta import TENANT_LABEL, metadata
from gitops.render.yamlio import dump_value
from gitops.specs import FleetSpec, PodsReady

API = "config.kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset", "jobset.x-k8s.io/jobset")
FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
DEVICE_CLASSES = (resources.DRA_GPU_CLASS, resources.DRA_MIG_CLASS)
# A requeued workload queues by the time of its eviction, not its creation (Kueue's default).
REQUEUING_TIMESTAMP = "Eviction"


def configuration(fleet: FleetSpec) -> dict[str, Any]:
    """The Configuration document (see the module docstring for each field)."""
    config: dict[str, Any] = {
        "apiVersion": API,
        "kind": "Configuration",
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {
            "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "resources": {
            "deviceClassMappings": [
                {"name": device_class, "deviceClassNames": [device_class]}
                for device_class in DEVICE_CLASSES
            ]
        },
    }
    if fleet.fabric is not None and fleet.fabric.pools:
        # A pod's SR-IOV VF comes with its node (gitops.render.fabric): no ClusterQueue covers
        # it, and Kueue refuses a request of a resource its queue does not cover.
        config["resources"]["excludeResourcePrefixes"] = sorted(
            {pool.resource for pool in fleet.fabric.pools}
        )
    if fleet.fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": list(FAIR_SHARING_STRATEGIES)}
    config["waitForPodsReady"] = wait_for_pods_ready(fleet.pods_ready)
    return config


def wait_for_pods_ready(pods_ready: PodsReady) -> dict[str, Any]:
    """``waitForPodsReady`` (``WaitForPodsReady`` in apis/config/v1beta2)."""
    strategy: dict[str, Any] = {"timestamp": REQUEUING_TIMESTAMP}
    if pods_ready.requeue_limit is not None:
        strategy["backoffLimitCount"] = pods_ready.requeue_limit
    strategy["backoffBaseSeconds"] = pods_ready.backoff_base_seconds
    strategy["backoffMaxSeconds"] = pods_ready.backoff_max_seconds
    return {
        "timeout": f"{pods_ready.timeout_seconds}s",
        "recoveryTimeout": f"{pods_ready.recovery_seconds}s",
        "blockAdmission": False,
        "requeuingStrategy": strategy,
    }


def manager_config_map(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(CONFIG_MAP, NAMESPACE),
        "data": {CONFIG_KEY: dump_value(configuration(fleet))},
    }
