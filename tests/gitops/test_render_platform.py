"""What a production fleet needs besides the queues: Kueue's configuration, pod priorities,
monitors, model-download credentials and the TLS Gateway (infrastructure/ and tenants/)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonschema
import pytest
import yaml

from gitops.fleet import demo_fleet, parse_fleet
from gitops.render import gateway, kserve, kueue, kueue_config, monitoring, priority, secrets
from gitops.render.meta import TENANT_LABEL
from gitops.render.tree import render_infrastructure, render_tenant_tree
from gitops.render.yamlio import load_documents
from gitops.specs import FleetSpec
from tests.gitops.render_samples import rich_tenant

FLEET = demo_fleet()

# The fields of kueue v0.19.2 apis/config/v1beta2/configuration_types.go the platform sets,
# by their JSON names; the manager decodes strictly (pkg/config/config.go), so anything else
# is an error here too.
_LABEL_SELECTOR: dict[str, Any] = {  # metav1.LabelSelector
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
# metav1.Duration: a string time.ParseDuration reads ("600s", "1h30m"); validateWaitForPodsReady
# refuses a negative one.
_DURATION: dict[str, Any] = {
    "type": "string",
    "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$",
}
_INT32: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
KUEUE_CONFIGURATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind"],
    "properties": {
        "apiVersion": {"const": "config.kueue.x-k8s.io/v1beta2"},
        "kind": {"const": "Configuration"},
        "manageJobsWithoutQueueName": {"type": "boolean"},
        "managedJobsNamespaceSelector": _LABEL_SELECTOR,
        "integrations": {  # Integrations
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "frameworks": {"type": "array", "items": {"type": "string"}},
                "externalFrameworks": {"type": "array", "items": {"type": "string"}},
                "labelKeysToCopy": {"type": "array", "items": {"type": "string"}},
            },
        },
        "resources": {  # Resources
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "deviceClassMappings": {
                    "type": "array",
                    "items": {  # DeviceClassMapping
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "deviceClassNames"],
                        "properties": {
                            "name": {"type": "string"},
                            "deviceClassNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "excludeResourcePrefixes": {"type": "array", "items": {"type": "string"}},
            },
        },
        "waitForPodsReady": {  # WaitForPodsReady; pkg/config/validation.go
            "type": "object",
            "additionalProperties": False,
            "required": ["timeout"],  # the one field without omitempty
            "properties": {
                "timeout": _DURATION,
                "blockAdmission": {"type": "boolean"},
                "recoveryTimeout": _DURATION,
                "requeuingStrategy": {  # RequeuingStrategy
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "timestamp": {"enum": ["Eviction", "Creation"]},
                        "backoffLimitCount": _INT32,
                        "backoffBaseSeconds": _INT32,
                        "backoffMaxSeconds": _INT32,
                    },
                },
            },
        },
        "fairSharing": {  # FairSharing; pkg/config/validation.go validStrategySets
            "type": "object",
            "additionalProperties": False,
            "required": ["preemptionStrategies"],
            "properties": {
                "preemptionStrategies": {
                    "enum": [
                        ["LessThanOrEqualToFinalShare"],
                        ["LessThanInitialShare"],
                        ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
                    ]
                }
            },
        },
    },
}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) applied to labels."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        ok = {
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
            "In": labels.get(key) in values,
            "NotIn": key not in labels or labels[key] not in values,
        }[operator]
        if not ok:
            return False
    return True


def namespace_labels(name: str, tenant: bool = False) -> dict[str, str]:
    # The API server labels every namespace with its name; the platform adds the tenant label.
    labels = {"kubernetes.io/metadata.name": name}
    if tenant:
        labels[TENANT_LABEL] = name
    return labels


def _infra(fleet: FleetSpec, name: str) -> list[dict[str, Any]]:
    return load_documents(render_infrastructure(fleet)[f"infrastructure/configs/{name}"])


def _kueue_configuration(fleet: FleetSpec) -> dict[str, Any]:
    [config_map] = _infra(fleet, "kueue-manager-config.yaml")
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "kueue-manager-config"
    assert config_map["metadata"]["namespace"] == "kueue-system"
    assert list(config_map["data"]) == ["controller_manager_config.yaml"]
    document: dict[str, Any] = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    return document


@pytest.mark.parametrize("fair_sharing", [True, False])
def test_the_kueue_configuration_has_only_fields_kueue_knows(fair_sharing: bool) -> None:
    config = _kueue_configuration(dataclasses.replace(FLEET, fair_sharing=fair_sharing))
    jsonschema.validate(config, KUEUE_CONFIGURATION_SCHEMA)
    assert ("fairSharing" in config) == fair_sharing


def test_kueue_waits_for_pods_ready_with_the_fleets_timeouts_and_requeue_limit() -> None:
    fleet = parse_fleet(
        {
            "name": "lab",
            "pods_ready": {
                "timeout_seconds": 900,
                "recovery_seconds": 120,
                "requeue_limit": 3,
                "backoff_base_seconds": 30,
                "backoff_max_seconds": 600,
            },
        }
    )
    config = _kueue_configuration(fleet)
    jsonschema.validate(config, KUEUE_CONFIGURATION_SCHEMA)
    assert config["waitForPodsReady"] == {
        "timeout": "900s",
        "recoveryTimeout": "120s",
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffLimitCount": 3,
            "backoffBaseSeconds": 30,
            "backoffMaxSeconds": 600,
        },
    }
    # Without a limit Kueue requeues for ever: the key is left out (null in Kueue).
    endless = parse_fleet({"name": "lab", "pods_ready": {"requeue_limit": None}})
    strategy = _kueue_configuration(endless)["waitForPodsReady"]["requeuingStrategy"]
    assert "backoffLimitCount" not in strategy
    # The defaults: Kueue's 30 minutes to start, 10 minutes to recover, five requeues.
    default = _kueue_configuration(FLEET)["waitForPodsReady"]
    assert (default["timeout"], default["recoveryTimeout"]) == ("1800s", "600s")
    assert default["requeuingStrategy"]["backoffLimitCount"] == 5


def test_the_strict_schema_refuses_v1beta1s_enable_switch() -> None:
    # v1beta2 has no waitForPodsReady.enable: Kueue's strict decoder would stop on it.
    config = _kueue_configuration(FLEET)
    config["waitForPodsReady"]["enable"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, KUEUE_CONFIGURATION_SCHEMA)


def test_the_strict_schema_refuses_an_unknown_key() -> None:
    config = _kueue_configuration(FLEET)
    config["integrations"]["framework"] = ["pod"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, KUEUE_CONFIGURATION_SCHEMA)


def test_kueue_manages_tenant_namespaces_only() -> None:
    selector = _kueue_configuration(FLEET)["managedJobsNamespaceSelector"]
    assert selects(selector, namespace_labels("alpha", tenant=True))
    for system in ("kube-system", "kueue-system", "gpu-operator", "default"):
        assert not selects(selector, namespace_labels(system))


def test_kueue_integrates_what_the_portal_runs_and_counts_dra_devices() -> None:
    config = _kueue_configuration(FLEET)
    assert {"batch/job", "pod", "deployment", "statefulset", "jobset.x-k8s.io/jobset"} == set(
        config["integrations"]["frameworks"]
    )
    assert config["manageJobsWithoutQueueName"] is False
    mappings = {
        m["name"]: m["deviceClassNames"] for m in config["resources"]["deviceClassMappings"]
    }
    assert mappings == {"gpu.nvidia.com": ["gpu.nvidia.com"], "mig.nvidia.com": ["mig.nvidia.com"]}


def test_pod_priority_classes_mirror_the_workload_priority_classes() -> None:
    pods = {o["metadata"]["name"]: o for o in _infra(FLEET, "priority-classes.yaml")}
    workloads = {
        o["metadata"]["name"]: o["value"]
        for o in _infra(FLEET, "kueue.yaml")
        if o["kind"] == "WorkloadPriorityClass"
    }
    assert {name: o["value"] for name, o in pods.items()} == workloads
    assert not any(o["globalDefault"] for o in pods.values())
    assert pods["batch-low"]["preemptionPolicy"] == "Never"
    assert pods["inference-critical"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert priority.API == "scheduling.k8s.io/v1"


def test_model_server_pods_name_the_inference_priority_class() -> None:
    tenant = rich_tenant()
    endpoint = next(e for e in tenant.endpoints if e.name == "llama")
    objs = kserve.endpoint_objects(tenant, endpoint, FLEET)
    [isvc] = [o for o in objs if o["kind"] == "InferenceService"]
    assert isvc["spec"]["predictor"]["priorityClassName"] == kueue.INFERENCE_PRIORITY


def test_gpu_exporters_are_scraped_with_their_own_pod_labels() -> None:
    monitors = {o["metadata"]["name"]: o for o in _infra(FLEET, "monitoring.yaml")}
    assert set(monitors) == {"dcgm-exporter", "hami-scheduler", "hami-device-plugin"}
    dcgm = monitors["dcgm-exporter"]
    assert dcgm["metadata"]["namespace"] == FLEET.monitoring_namespace
    assert dcgm["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    assert dcgm["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
    assert dcgm["spec"]["endpoints"] == [
        {"port": "gpu-metrics", "path": "/metrics", "honorLabels": True}
    ]
    assert monitors["hami-scheduler"]["spec"]["endpoints"][0]["port"] == "monitor"
    assert monitors["hami-device-plugin"]["spec"]["endpoints"][0]["port"] == "monitorport"


def test_a_fleet_without_hami_has_no_hami_monitors() -> None:
    fleet = dataclasses.replace(FLEET, flavors=FLEET.flavors[:1])
    assert [o["metadata"]["name"] for o in _infra(fleet, "monitoring.yaml")] == ["dcgm-exporter"]


def test_each_tenant_scrapes_its_own_model_servers() -> None:
    tenant = rich_tenant()
    files = render_tenant_tree(tenant, FLEET)
    [monitor] = load_documents(files[f"tenants/{tenant.slug}/monitoring.yaml"])
    assert monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["namespace"] == tenant.slug
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [tenant.slug]}
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"portNumber": 8080, "path": "/metrics", "honorLabels": False}
    ]
    # The predictor pods carry the InferenceService label and declare the port scraped.
    endpoint = tenant.endpoints[0]
    [isvc] = [
        o
        for o in kserve.endpoint_objects(tenant, endpoint, FLEET)
        if o["kind"] == "InferenceService"
    ]
    assert selects(monitor["spec"]["selector"], {monitoring.ISVC_POD_LABEL: endpoint.name})
    assert selects(monitor["spec"]["selector"], {}) is False
    ports = isvc["spec"]["predictor"]["model"]["ports"]
    assert [p["containerPort"] for p in ports] == [monitoring.MODEL_SERVER_PORT]


def test_a_tenant_without_endpoints_has_no_pod_monitor() -> None:
    tenant = dataclasses.replace(rich_tenant(), endpoints=())
    assert f"tenants/{tenant.slug}/monitoring.yaml" not in render_tenant_tree(tenant, FLEET)


def test_model_credentials_come_from_the_configured_cluster_secret_store() -> None:
    tenant = rich_tenant()
    path = f"tenants/{tenant.slug}/model-credentials.yaml"
    assert path not in render_tenant_tree(tenant, dataclasses.replace(FLEET, secret_store=""))
    files = render_tenant_tree(tenant, dataclasses.replace(FLEET, secret_store="vault"))
    [external] = load_documents(files[path])
    assert external["metadata"]["namespace"] == tenant.slug
    assert external["spec"]["secretStoreRef"] == {"kind": "ClusterSecretStore", "name": "vault"}
    assert external["spec"]["target"]["name"] == secrets.SECRET
    assert external["spec"]["dataFrom"] == [
        {"extract": {"key": f"ai-factory/tenants/{tenant.slug}/model-download"}}
    ]
    assert (
        path.removeprefix(f"tenants/{tenant.slug}/")
        in yaml.safe_load(files[f"tenants/{tenant.slug}/kustomization.yaml"])["resources"]
    )


def test_the_storage_initializer_reads_the_credentials_optionally() -> None:
    container = kserve.cluster_storage_container()["spec"]["container"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert set(env) == {
        "HF_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_REGION",
    }
    for name, ref in env.items():
        assert ref == {"name": "model-download-credentials", "key": name, "optional": True}


@pytest.mark.parametrize(
    ("implementation", "class_name", "rendered_class"),
    [("envoy-gateway", "eg", True), ("cilium", "cilium", False)],
)
def test_the_gateway_uses_the_implementations_class(
    implementation: str, class_name: str, rendered_class: bool
) -> None:
    fleet = dataclasses.replace(
        FLEET, gateway=dataclasses.replace(FLEET.gateway, implementation=implementation)
    )
    objs = _infra(fleet, "gateway.yaml")
    kinds = [o["kind"] for o in objs]
    assert ("GatewayClass" in kinds) == rendered_class
    [gw] = [o for o in objs if o["kind"] == "Gateway"]
    assert gw["spec"]["gatewayClassName"] == class_name
    if rendered_class:
        [cls] = [o for o in objs if o["kind"] == "GatewayClass"]
        assert cls["metadata"]["name"] == class_name
        assert cls["spec"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"


def test_the_gateway_serves_tenant_hosts_over_tls_to_tenant_namespaces_only() -> None:
    objs = _infra(FLEET, "gateway.yaml")
    assert objs[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": FLEET.gateway.namespace,
            "labels": {"app.kubernetes.io/managed-by": "ai-factory-portal"},
        },
    }
    [gw] = [o for o in objs if o["kind"] == "Gateway"]
    assert (gw["metadata"]["name"], gw["metadata"]["namespace"]) == ("ai-gateway", "gateway-system")
    assert "annotations" not in gw["metadata"]
    listener, clusters = gw["spec"]["listeners"]
    # Tenant clusters' API servers: TLS passed through to them (the chart's TLSRoute).
    assert (clusters["name"], clusters["protocol"], clusters["port"]) == (
        "vcluster-api",
        "TLS",
        443,
    )
    assert clusters["tls"] == {"mode": "Passthrough"}
    assert clusters["hostname"] == f"*.{FLEET.vcluster_api_domain}"
    assert clusters["allowedRoutes"]["kinds"] == [
        {"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}
    ]
    internal = dataclasses.replace(FLEET, vcluster_api_domain="")
    [only] = [o for o in _infra(internal, "gateway.yaml") if o["kind"] == "Gateway"]
    assert [lst["name"] for lst in only["spec"]["listeners"]] == [listener["name"]]
    assert (listener["protocol"], listener["port"]) == ("HTTPS", 443)
    assert listener["hostname"] == f"*.{FLEET.gateway.hostname}"
    assert gateway.tenant_host("alpha", FLEET).endswith(listener["hostname"][1:])
    assert listener["tls"]["certificateRefs"] == [
        {"group": "", "kind": "Secret", "name": "ai-gateway-tls"}
    ]
    namespaces = listener["allowedRoutes"]["namespaces"]
    assert namespaces["from"] == "Selector"
    assert selects(namespaces["selector"], namespace_labels("alpha", tenant=True))
    for other in ("kube-system", "gateway-system", "litellm", "monitoring"):
        assert not selects(namespaces["selector"], namespace_labels(other))


def test_cert_manager_issues_the_certificate_when_an_issuer_is_set() -> None:
    fleet = dataclasses.replace(
        FLEET, gateway=dataclasses.replace(FLEET.gateway, cluster_issuer="letsencrypt-dns")
    )
    [gw] = [o for o in _infra(fleet, "gateway.yaml") if o["kind"] == "Gateway"]
    assert gw["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt-dns"}


def test_the_configs_kustomization_lists_every_platform_file() -> None:
    files = render_infrastructure(FLEET)
    listed = yaml.safe_load(files["infrastructure/configs/kustomization.yaml"])["resources"]
    present = sorted(
        path.removeprefix("infrastructure/configs/")
        for path in files
        if path.startswith("infrastructure/configs/") and not path.endswith("kustomization.yaml")
    )
    assert listed == present
    assert kueue_config.CONFIG_MAP == "kueue-manager-config"
