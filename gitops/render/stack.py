"""The platform's controllers as Flux HelmReleases (``infrastructure/controllers/``), rendered
when the fleet file sets ``stack: true``: the repository then bootstraps the fleet, not only
its tenants.

One file per component, ``infrastructure/controllers/<component>.yaml``: the component's
Namespace, its chart source and its HelmRelease(s). Sources and releases live in
``flux-system`` and install into the component's namespace (``targetNamespace`` and
``storageNamespace``) as ``helm-controller``, as the vCluster releases do
(``gitops.render.vcluster``): the lockdown's ``--no-cross-namespace-refs`` keeps a release
beside its source, and ``--default-service-account`` gives a release that names no account
no rights. Namespaces are never pruned (``kustomize.toolkit.fluxcd.io/prune: disabled``): a
component dropped from the repository must not take its namespace, and everything in it,
with it.

Chart versions are pinned to the versions the renderers target (named in their modules); a
chart published only as OCI (or, the DRA driver's, installed from OCI by its own guide) comes
from an OCIRepository named after the chart (what the values schema check matches it by,
``gitops.checks.schema``), the others from a HelmRepository. Charts with a ``crds/`` directory
replace their CRDs on install and upgrade (``CreateReplace``; Flux's default upgrade policy is
``Skip``, helm-controller v1.6.3 HelmRelease CRD ``upgrade.crds``), but for the DRA driver's
(see ``dra_driver``); the others template their CRDs, which Helm upgrades with the release.

Install order (``dependsOn``; helm-controller reconciles a release only once those it depends on
are Ready). ``infra-controllers`` waits for every release (``wait: true``) before
``infra-configs`` applies the objects the controllers serve (Kueue queues, Kyverno policies,
the ClusterPolicy, the ClusterStorageContainer, the Gateway), so no edge is needed for those:

- ``kserve-resources`` after ``kserve-crd`` (the CRDs are a chart of their own at KServe
  v0.20.0, charts/kserve-crd), ``cert-manager`` (the chart's webhook certificate is a
  cert-manager Certificate from its own Issuer, charts/kserve-resources/files/kserve/
  resources.yaml ``serving-cert``) and ``keda`` (the controller watches ScaledObjects only if
  KEDA's CRD is there when it starts, pkg/controller/v1beta1/inferenceservice/controller.go
  ``IsCrdAvailable``; the ``keda`` autoscaler class of ``gitops.render.kserve`` needs it);
- ``kserve-runtime-configs`` after ``kserve-resources``: KServe's validating webhook for
  ClusterServingRuntimes comes with that release;
- ``hami`` and ``nvidia-dra-driver-gpu`` after ``gpu-operator``, whose driver and container
  toolkit they run on: HAMi's device plugin waits for the toolkit's ready file
  (``devicePlugin.gpuOperatorToolkitReady``, HAMi v2.10.0 charts/hami/templates/device-plugin/
  daemonsetnvidia.yaml), the DRA driver reads the operator's driver root;
- ``cert-manager`` after ``envoy-gateway`` when cert-manager issues the Gateway's certificate
  (``gateway.cluster_issuer``): Envoy Gateway's chart brings the Gateway API CRDs (v1.9.0
  charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml, bundle v1.6.1), and cert-manager
  starts its Gateway API support only when they exist at start;
- ``kyverno``, ``keda``, ``kueue`` (its webhook certificates are its own, ``enableCertManager``
  off), ``gpu-operator``, ``envoy-gateway`` and ``litellm`` depend on nothing and start in the
  first wave; Kyverno's policies are in ``infra-configs``, so every controller is installed
  before the first policy acts.

Values are only what the fleet relies on (each cited where it is set). Three charts ship an
object the portal renders itself; their values turn the chart's copy off:

- Kueue's chart always renders ``<release>-manager-config`` (v0.19.2 charts/kueue/templates/
  manager/manager-config.yaml has no condition), so the portal's Configuration goes *into* the
  chart (``managerConfig.controllerManagerConfigYaml``) instead of a ConfigMap of its own, and
  the release is named ``kueue`` (the names ``gitops.render.kueue_config`` assumes). A change
  of configuration changes the HelmRelease; the upgrade re-renders the ConfigMap, and the
  Deployment's ``charts.kueue.x-k8s.io/config-checksum`` annotation (the ConfigMap template's
  sha256, charts/kueue/templates/manager/manager.yaml) rolls the manager, which reads its
  configuration only at start;
- KServe's ``kserve-resources`` renders the ClusterStorageContainer ``default`` when
  ``kserve.storagecontainer.enabled | default kserve.createSharedResources`` is true (v0.20.0
  charts/kserve-resources/templates/common/clusterstoragecontainer.yaml). ``false`` counts as
  empty for Helm's ``default``, so ``storagecontainer.enabled: false`` alone still renders it:
  ``createSharedResources`` must be false, and the two shared resources the fleet does want,
  the ``inferenceservice-config`` ConfigMap and the webhook's Issuer, are enabled by name;
- the GPU Operator's chart renders the ClusterPolicy ``cluster-policy`` unless
  ``clusterPolicy.deployCR`` is false (v26.7.0 deployments/gpu-operator/templates/
  clusterpolicy.yaml); the portal's is ``gitops.render.gpu_operator``.

What the stack leaves to the operator (docs/operator-guide.md, "Preparing the cluster"):
Flux itself, the CNI (Cilium where ``gateway.implementation`` is ``cilium``, which then also
brings the Gateway API CRDs), prometheus-operator, External Secrets, JobSet, the wildcard
certificate or a ClusterIssuer, and LiteLLM's database, cache and keys (the Secret
``flux-system/litellm-values``, merged into the release's values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitops.render import kueue_config, resources
from gitops.render.meta import FLUX_NAMESPACE, metadata
from gitops.render.yamlio import dump_value
from gitops.specs import Flavor, FleetSpec

HELM_API = "helm.toolkit.fluxcd.io/v2"
SOURCE_API = "source.toolkit.fluxcd.io/v1"
PRUNE_ANNOTATION = "kustomize.toolkit.fluxcd.io/prune"
# The layer of a Helm chart artifact: without a selector an OCIRepository takes the first
# layer, which for some charts is the provenance (Envoy Gateway v1.9.0 site/content/en/latest/
# install/install-flux.md selects it the same way).
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
REPLACE_CRDS = "CreateReplace"
# Namespaces Kubernetes makes itself: a component installed there gets no Namespace object.
KUBERNETES_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})

# Chart versions, each the release the renderers target.
CERT_MANAGER_VERSION = "v1.21.1"  # the current release (cert-manager/cert-manager v1.21.1)
KYVERNO_CHART_VERSION = "3.9.0"  # Kyverno v1.19.0 (charts/kyverno/Chart.yaml at v1.19.0)
KEDA_VERSION = "2.20.2"
ENVOY_GATEWAY_VERSION = "v1.9.0"
GPU_OPERATOR_VERSION = "v26.7.0"
HAMI_VERSION = "2.10.0"
# The current release; from v0.4.0 the chart is dra-driver-nvidia-gpu, published by
# kubernetes-sigs (NVIDIA/k8s-dra-driver-gpu v0.4.0 docs/install.md).
DRA_DRIVER_VERSION = "0.4.0"
KUEUE_VERSION = "0.19.2"
KSERVE_VERSION = "v0.20.0"
# The componentized chart docs.litellm.ai/docs/proxy/deploy/helm installs (2026-11).
LITELLM_VERSION = "1.0.0"

DRA_NAMESPACE = "nvidia-dra-driver-gpu"
# The operator-managed driver's root on the host (GPU Operator v26.7.0 values.yaml
# ``hostPaths.driverInstallDir``), which the DRA driver must be told.
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
# LiteLLM's database, cache and keys: the operator's, never in Git.
LITELLM_VALUES_SECRET = "litellm-values"
# ``<release>-manager-config`` and ``<release>-webhook-service`` must be the names
# gitops.render.kueue_config assumes.
KUEUE_RELEASE = "kueue"
KSERVE_NAMESPACE = "kserve"
# Every HelmRelease the stack may render in flux-system, on any fleet: a tenant cluster's
# release there must not take one of the names (tests check it against ``components``).
RELEASE_NAMES = frozenset(
    {
        "cert-manager",
        "envoy-gateway",
        "gpu-operator",
        "hami",
        "keda",
        "kserve-crd",
        "kserve-resources",
        "kserve-runtime-configs",
        "kueue",
        "kyverno",
        "litellm",
        "nvidia-dra-driver-gpu",
    }
)


@dataclass(frozen=True)
class HelmRepository:
    name: str
    url: str


@dataclass(frozen=True)
class OCIRepository:
    """A chart published only as OCI, at ``url`` (the chart's own repository) and ``tag``."""

    name: str
    url: str
    tag: str


@dataclass(frozen=True)
class Release:
    """One HelmRelease: ``name`` is also the Helm release name."""

    name: str
    namespace: str
    chart: str
    version: str
    source: HelmRepository | OCIRepository
    depends_on: tuple[str, ...] = ()
    # The chart has a crds/ directory (or a subchart with one) whose CRDs it must keep current.
    replace_crds: bool = False
    values: Mapping[str, Any] = field(default_factory=dict)
    values_from_secret: str = ""


@dataclass(frozen=True)
class Component:
    """``infrastructure/controllers/<name>.yaml``: a namespace and the releases into it."""

    name: str
    namespace: str
    releases: tuple[Release, ...]
    # Its pods run privileged (device plugins, driver containers): Pod Security "privileged".
    privileged: bool = False


JETSTACK = HelmRepository("jetstack", "https://charts.jetstack.io")
KYVERNO = HelmRepository("kyverno", "https://kyverno.github.io/kyverno/")
KEDACORE = HelmRepository("kedacore", "https://kedacore.github.io/charts")
NVIDIA = HelmRepository("nvidia", "https://helm.ngc.nvidia.com/nvidia")
HAMI = HelmRepository("hami", "https://project-hami.github.io/HAMi/")


def _oci(chart: str, registry: str, tag: str) -> OCIRepository:
    return OCIRepository(chart, f"oci://{registry}/{chart}", tag)


def cert_manager(fleet: FleetSpec) -> Component:
    values: dict[str, Any] = {"crds": {"enabled": True}}
    depends: tuple[str, ...] = ()
    if fleet.gateway.cluster_issuer:
        # It issues the Gateway's certificate (gitops.render.gateway); ``gatewayAPI.enabled``
        # replaces the deprecated ``enableGatewayAPI`` (pkg/apis/config/controller/v1alpha1/
        # types.go at v1.21.1).
        values["config"] = {
            "apiVersion": "controller.config.cert-manager.io/v1alpha1",
            "kind": "ControllerConfiguration",
            "gatewayAPI": {"enabled": True},
        }
        if fleet.gateway.implementation == "envoy-gateway":
            depends = ("envoy-gateway",)
    release = Release(
        "cert-manager",
        "cert-manager",
        "cert-manager",
        CERT_MANAGER_VERSION,
        JETSTACK,
        depends_on=depends,
        values=values,
    )
    return Component("cert-manager", "cert-manager", (release,))


def kyverno() -> Component:
    release = Release("kyverno", "kyverno", "kyverno", KYVERNO_CHART_VERSION, KYVERNO)
    return Component("kyverno", "kyverno", (release,))


def keda() -> Component:
    release = Release("keda", "keda", "keda", KEDA_VERSION, KEDACORE)
    return Component("keda", "keda", (release,))


def envoy_gateway(fleet: FleetSpec) -> Component:
    # Its proxies run in its own namespace, where the tenants' NetworkPolicies expect them.
    namespace = fleet.gateway.proxy_namespace
    source = _oci("gateway-helm", "docker.io/envoyproxy", ENVOY_GATEWAY_VERSION)
    release = Release(
        "envoy-gateway",
        namespace,
        "gateway-helm",
        ENVOY_GATEWAY_VERSION,
        source,
        replace_crds=True,
    )
    return Component("envoy-gateway", namespace, (release,))


def gpu_operator(fleet: FleetSpec) -> Component:
    release = Release(
        "gpu-operator",
        fleet.gpu_operator_namespace,
        "gpu-operator",
        GPU_OPERATOR_VERSION,
        NVIDIA,
        replace_crds=True,
        values={"clusterPolicy": {"deployCR": False}},
    )
    return Component("gpu-operator", fleet.gpu_operator_namespace, (release,), privileged=True)


def _tolerations(pools: list[Flavor]) -> list[dict[str, str]]:
    return [
        {"key": key, "operator": "Exists", "effect": "NoSchedule"}
        for key in sorted({pool.taint_key for pool in pools})
    ]


def hami(fleet: FleetSpec, pools: list[Flavor]) -> Component:
    """HAMi for the ``hami`` pools (``validate_fleet`` makes them agree on the split)."""
    values = {
        # gitops.render.resources: vGPU slots are nvidia.com/vgpu, never nvidia.com/gpu.
        "resourceName": resources.VGPU,
        "devicePlugin": {
            "deviceSplitCount": pools[0].hami_split,
            "tolerations": _tolerations(pools),
            "gpuOperatorToolkitReady": {"enabled": True},
        },
        # The chart's kube-scheduler image defaults to a mirror in one region
        # (charts/hami/values.yaml); the tag follows the cluster's version either way.
        "scheduler": {
            "kubeScheduler": {
                "image": {"registry": "registry.k8s.io", "repository": "kube-scheduler"}
            }
        },
        # gitops.render.monitoring renders the ServiceMonitors (with honorLabels).
        "prometheus": {"enabled": False},
    }
    release = Release(
        "hami",
        fleet.hami_namespace,
        "hami",
        HAMI_VERSION,
        HAMI,
        depends_on=("gpu-operator",),
        values=values,
    )
    return Component("hami", fleet.hami_namespace, (release,), privileged=True)


def dra_driver(pools: list[Flavor]) -> Component:
    """NVIDIA's DRA driver, its kubelet plugin on the ``dra`` pools' nodes only (each pool's
    node labels, one node selector term per pool)."""
    terms = [
        {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(pool.node_labels)
            ]
        }
        for pool in pools
    ]
    values = {
        # GPU allocation is off unless asked for (v0.4.0 docs/install.md); ComputeDomains
        # (multi-node NVLink) are not used by the fleet.
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "nvidiaDriverRoot": OPERATOR_DRIVER_ROOT,
        "kubeletPlugin": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            },
            "tolerations": _tolerations(pools),
        },
    }
    source = _oci(
        "dra-driver-nvidia-gpu", "registry.k8s.io/dra-driver-nvidia/charts", DRA_DRIVER_VERSION
    )
    release = Release(
        DRA_NAMESPACE,
        DRA_NAMESPACE,
        "dra-driver-nvidia-gpu",
        DRA_DRIVER_VERSION,
        source,
        depends_on=("gpu-operator",),
        # Its crds/ holds only the ComputeDomain CRDs, which the GPU Operator's chart also
        # ships (v26.7.0 deployments/gpu-operator/crds): left to that one.
        values=values,
    )
    return Component(DRA_NAMESPACE, DRA_NAMESPACE, (release,), privileged=True)


def kueue(fleet: FleetSpec) -> Component:
    values = {
        # The portal's configuration as the chart's own (see the module docstring).
        "managerConfig": {
            "controllerManagerConfigYaml": dump_value(kueue_config.configuration(fleet))
        },
        # The backlog alerts (gitops.render.alerts) read Kueue's metrics: the chart's
        # ServiceMonitor and the Role for Prometheus in the monitoring namespace.
        "enablePrometheus": True,
        "metrics": {"prometheusNamespace": fleet.monitoring_namespace},
    }
    source = _oci("kueue", "registry.k8s.io/kueue/charts", KUEUE_VERSION)
    release = Release(
        KUEUE_RELEASE, kueue_config.NAMESPACE, "kueue", KUEUE_VERSION, source, values=values
    )
    return Component("kueue", kueue_config.NAMESPACE, (release,))


def kserve() -> Component:
    registry = "ghcr.io/kserve/charts"
    crd = Release(
        "kserve-crd",
        KSERVE_NAMESPACE,
        "kserve-crd",
        KSERVE_VERSION,
        _oci("kserve-crd", registry, KSERVE_VERSION),
    )
    controller = Release(
        "kserve-resources",
        KSERVE_NAMESPACE,
        "kserve-resources",
        KSERVE_VERSION,
        _oci("kserve-resources", registry, KSERVE_VERSION),
        depends_on=("cert-manager", "keda", "kserve-crd"),
        values={
            "kserve": {
                # Off so that the ClusterStorageContainer is the portal's (module docstring).
                "createSharedResources": False,
                "storagecontainer": {"enabled": False},
                "inferenceServiceConfig": {"enabled": True},
                "certManager": {"enabled": True},
                "controller": {
                    # gitops.render.kserve: Standard mode, and the HTTPRoute is the way in.
                    "deploymentMode": "Standard",
                    "gateway": {"disableIngressCreation": True},
                },
            }
        },
    )
    runtimes = Release(
        "kserve-runtime-configs",
        KSERVE_NAMESPACE,
        "kserve-runtime-configs",
        KSERVE_VERSION,
        _oci("kserve-runtime-configs", registry, KSERVE_VERSION),
        depends_on=("kserve-resources",),
        # The ClusterServingRuntimes (kserve-huggingfaceserver among them) are off by default
        # (charts/kserve-runtime-configs/values.yaml).
        values={"kserve": {"servingruntime": {"enabled": True}}},
    )
    return Component("kserve", KSERVE_NAMESPACE, (crd, controller, runtimes))


def litellm(fleet: FleetSpec) -> Component:
    release = Release(
        "litellm",
        fleet.litellm_namespace,
        "litellm",
        LITELLM_VERSION,
        _oci("litellm", "ghcr.io/berriai/litellm/chart", LITELLM_VERSION),
        values_from_secret=LITELLM_VALUES_SECRET,
    )
    return Component("litellm", fleet.litellm_namespace, (release,))


def components(fleet: FleetSpec) -> list[Component]:
    """The fleet's controllers, in install order where one waits for another."""
    out = [cert_manager(fleet), kyverno(), keda()]
    if fleet.gateway.implementation == "envoy-gateway":
        out.append(envoy_gateway(fleet))
    out.append(gpu_operator(fleet))
    hami_pools = [flavor for flavor in fleet.flavors if flavor.mode == "hami"]
    if hami_pools:
        out.append(hami(fleet, hami_pools))
    dra_pools = [flavor for flavor in fleet.flavors if flavor.mode == "dra"]
    if dra_pools:
        out.append(dra_driver(dra_pools))
    out += [kueue(fleet), kserve(), litellm(fleet)]
    return out


def namespace(component: Component) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if component.privileged:
        # Device plugins and driver containers need host access; the namespace must admit
        # them whatever the cluster's default Pod Security level is.
        labels = {"pod-security.kubernetes.io/enforce": "privileged"}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(
            component.namespace,
            annotations={PRUNE_ANNOTATION: "disabled"},
            extra_labels=labels,
        ),
    }


def source(repository: HelmRepository | OCIRepository) -> dict[str, Any]:
    if isinstance(repository, HelmRepository):
        return {
            "apiVersion": SOURCE_API,
            "kind": "HelmRepository",
            "metadata": metadata(repository.name, FLUX_NAMESPACE),
            "spec": {"interval": "1h", "url": repository.url},
        }
    return {
        "apiVersion": SOURCE_API,
        "kind": "OCIRepository",
        "metadata": metadata(repository.name, FLUX_NAMESPACE),
        "spec": {
            "interval": "1h",
            "url": repository.url,
            "ref": {"tag": repository.tag},
            "layerSelector": {"mediaType": HELM_CHART_LAYER, "operation": "copy"},
        },
    }


def helm_release(release: Release) -> dict[str, Any]:
    spec: dict[str, Any] = {"interval": "10m"}
    if isinstance(release.source, OCIRepository):
        spec["chartRef"] = {"kind": "OCIRepository", "name": release.source.name}
    else:
        spec["chart"] = {
            "spec": {
                "chart": release.chart,
                "version": release.version,
                "sourceRef": {"kind": "HelmRepository", "name": release.source.name},
                "interval": "1h",
            }
        }
    spec.update(
        releaseName=release.name,
        targetNamespace=release.namespace,
        storageNamespace=release.namespace,
        # The lockdown's default service account has no rights: install as the controller.
        serviceAccountName="helm-controller",
    )
    if release.depends_on:
        spec["dependsOn"] = [{"name": name} for name in release.depends_on]
    install: dict[str, Any] = {"createNamespace": False, "remediation": {"retries": 3}}
    upgrade: dict[str, Any] = {"remediation": {"retries": 3}}
    if release.replace_crds:
        install["crds"] = upgrade["crds"] = REPLACE_CRDS
    spec.update(install=install, upgrade=upgrade)
    if release.values:
        spec["values"] = dict(release.values)
    if release.values_from_secret:
        spec["valuesFrom"] = [{"kind": "Secret", "name": release.values_from_secret}]
    return {
        "apiVersion": HELM_API,
        "kind": "HelmRelease",
        "metadata": metadata(release.name, FLUX_NAMESPACE),
        "spec": spec,
    }


def component_objects(component: Component) -> list[dict[str, Any]]:
    """Everything in the component's file: its namespace (unless Kubernetes' own), each
    source once, its releases."""
    objs = []
    if component.namespace not in KUBERNETES_NAMESPACES:
        objs.append(namespace(component))
    sources = {release.source.name: release.source for release in component.releases}
    objs += [source(repository) for repository in sources.values()]
    objs += [helm_release(release) for release in component.releases]
    return objs


def controller_files(fleet: FleetSpec) -> list[tuple[str, list[dict[str, Any]]]]:
    """(file name under ``infrastructure/controllers/``, objects) per component."""
    return [(f"{c.name}.yaml", component_objects(c)) for c in components(fleet)]
