"""The portal's own deployment: rendered into a bootstrapped fleet repository it passes the
same checks as every change, holds Pod Security ``restricted``, runs what the project runs,
and refuses a bad spec."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from gitops.checks import run_checks
from gitops.fleet import demo_fleet
from gitops.render import load_documents, objects_for, render_portal_deployment, render_repository
from gitops.render.portal import APP_DIR, SETUP_DIR
from gitops.specs import PortalDeploySpec, PortalEgress, PortalResources, SpecError
from tests.gitops.checks_support import require_kubectl
from tests.gitops.render_samples import rich_tenant

SPEC = PortalDeploySpec(
    image="registry.example.com/ai-factory/portal:1.4.0",
    base_url="https://portal.example.com",
    hostnames=("portal.example.com", "portal.internal.example.com"),
    web_replicas=3,
    worker_replicas=2,
    egress=(
        PortalEgress("10.20.0.0/24", 5432),
        PortalEgress("10.20.1.7/32", 6379),
        PortalEgress("", 8080, namespace="opencost"),
    ),
    public_https=True,
)


@pytest.fixture
def kubectl() -> str:
    return require_kubectl()


def _tree(spec: PortalDeploySpec = SPEC) -> dict[str, bytes]:
    fleet = demo_fleet()
    files = render_repository(fleet, [rich_tenant()])
    files.update(render_portal_deployment(spec, fleet))
    return files


def _objects(spec: PortalDeploySpec = SPEC) -> list[dict[str, Any]]:
    return objects_for(render_portal_deployment(spec, demo_fleet()))


def _by_name(kind: str, spec: PortalDeploySpec = SPEC) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in _objects(spec) if o["kind"] == kind}


def test_it_passes_every_check_in_a_bootstrapped_fleet_repository(
    schema_dir: Path, kubectl: str
) -> None:
    fleet = demo_fleet()
    files = _tree()
    results = {r.name: r for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert {name: r.status for name, r in results.items()} == {
        "schemas": "passed",
        "kustomize": "passed",
        "isolation": "passed",
        "capacity": "passed",
        "controllers": "passed",
        "duplicates": "passed",
        "scope": "passed",
    }, [(r.name, r.summary, r.details[:5]) for r in results.values()]
    # Built for real, not skipped: both component directories are among the Flux paths.
    assert {SETUP_DIR, APP_DIR} <= set(results["kustomize"].details)


def test_its_schema_check_counts_every_portal_object(schema_dir: Path) -> None:
    fleet = demo_fleet()
    files = _tree()
    portal_files = set(render_portal_deployment(SPEC, fleet))
    result = run_checks(files, fleet=fleet, changed=portal_files, schema_dir=schema_dir)[0]
    kinds = sorted(o["kind"] for o in _objects())
    assert result.status == "passed", result.details
    assert result.summary.startswith(f"{len(kinds)} objects in")
    assert {"ServiceMonitor", "Job", "PodDisruptionBudget", "NetworkPolicy"} <= set(kinds)


def test_a_wrong_field_fails_the_schema_check(schema_dir: Path) -> None:
    fleet = demo_fleet()
    files = _tree()
    path = f"{APP_DIR}/monitoring.yaml"
    files[path] = files[path].replace(b"authorization:", b"authorisation:")
    result = run_checks(files, fleet=fleet, changed={path}, schema_dir=schema_dir)[0]
    assert result.status == "failed"
    assert any("authorisation" in line for line in result.details), result.details


def _pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in {"Deployment", "Job"}
    ]


def test_every_container_meets_pod_security_restricted() -> None:
    # The "restricted" profile, https://kubernetes.io/docs/concepts/security/pod-security-standards/
    pods = _pod_specs(_objects(replace(SPEC, state_claim="portal-state")))
    assert sorted(name for name, _ in pods) == [
        "portal-beat",
        "portal-migrate",
        "portal-watch",
        "portal-web",
        "portal-worker",
    ]
    allowed_volumes = {"emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected"}
    for name, pod in pods:
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod), name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= allowed_volumes, (name, volume)
        containers = pod["containers"] + pod.get("initContainers", [])
        for container in containers:
            where = (name, container["name"])
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["runAsNonRoot"] is True, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert "privileged" not in context, where
            assert not any("hostPort" in port for port in container.get("ports", [])), where
            # A read-only root: every path the processes write is a volume.
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/var/lib/portal"} <= mounts, where
            assert container["resources"]["limits"]["memory"], where


def test_the_namespace_enforces_restricted() -> None:
    namespaces = _by_name("Namespace")
    assert set(namespaces) == {"portal-system", "gpu-burn-in"}
    labels = namespaces["portal-system"]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_the_burn_in_namespace_grants_jobs_pods_and_logs_there_only() -> None:
    (role,) = _by_name("Role").values()
    assert role["metadata"]["namespace"] == "gpu-burn-in"
    assert {(r["apiGroups"][0], r["resources"][0]) for r in role["rules"]} == {
        ("batch", "jobs"),
        ("", "pods"),
        ("", "pods/log"),
        ("", "services"),  # the headless Service of the burn-in across an NVLink domain
    }
    (binding,) = _by_name("RoleBinding").values()
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "portal-system"}
    ]


def test_it_runs_the_projects_own_commands() -> None:
    deployments = _by_name("Deployment")
    commands = {
        name: d["spec"]["template"]["spec"]["containers"][0]["command"]
        for name, d in deployments.items()
    }
    assert commands["portal-web"][:2] == ["gunicorn", "portal.wsgi"]
    assert commands["portal-worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["portal-beat"][:4] == ["celery", "-A", "portal", "beat"]
    assert commands["portal-watch"] == ["python", "manage.py", "fleet_watch"]
    assert importlib.util.find_spec("fleet.management.commands.fleet_watch") is not None
    # What those names load exists: the WSGI module and the Celery app of `-A portal`.
    assert importlib.util.find_spec("portal.wsgi") is not None
    from portal.celery import app

    assert app.main == "portal"
    job = _by_name("Job")["portal-migrate"]["spec"]["template"]["spec"]
    assert job["initContainers"][0]["command"] == [
        "python",
        "manage.py",
        "migrate",
        "--noinput",
    ]
    assert job["containers"][0]["command"] == ["python", "manage.py", "createcachetable"]
    assert Path("manage.py").is_file()


def test_exactly_one_beat_and_the_replicas_asked_for() -> None:
    deployments = _by_name("Deployment")
    beat = deployments["portal-beat"]["spec"]
    assert beat["replicas"] == 1
    assert beat["strategy"] == {"type": "Recreate"}
    assert deployments["portal-web"]["spec"]["replicas"] == 3
    assert deployments["portal-worker"]["spec"]["replicas"] == 2
    budgets = _by_name("PodDisruptionBudget")
    assert sorted(budgets) == ["portal-web", "portal-worker"]
    assert all(b["spec"] == {**b["spec"], "maxUnavailable": 1} for b in budgets.values())


def test_probes_follow_the_health_contract() -> None:
    web = _by_name("Deployment")["portal-web"]["spec"]["template"]["spec"]["containers"][0]
    assert web["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (monitor,) = _by_name("ServiceMonitor").values()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "portal-env", "key": "METRICS_TOKEN"},
    }


def test_the_migration_job_is_recreated_by_flux_and_gates_the_app() -> None:
    job = _by_name("Job")["portal-migrate"]
    assert job["metadata"]["annotations"] == {"kustomize.toolkit.fluxcd.io/force": "enabled"}
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    flux = {o["metadata"]["name"]: o["spec"] for o in _objects() if o["kind"] == "Kustomization"}
    assert flux["portal-setup"]["path"] == f"./{SETUP_DIR}"
    assert flux["portal-setup"]["wait"] is True
    assert flux["portal"]["dependsOn"] == [{"name": "portal-setup"}]
    files = render_portal_deployment(SPEC, demo_fleet())
    cluster = load_documents(files["clusters/ai-factory/kustomization.yaml"])[0]
    assert cluster["resources"] == [
        "flux-system",
        "infrastructure.yaml",
        "tenants.yaml",
        "portal.yaml",
    ]


def test_a_new_image_or_configuration_rolls_the_pods() -> None:
    def template(spec: PortalDeploySpec) -> dict[str, Any]:
        return _by_name("Deployment", spec)["portal-web"]["spec"]["template"]

    before = template(SPEC)["metadata"]["annotations"]
    moved = template(replace(SPEC, hostnames=(*SPEC.hostnames, "p.example.com")))
    assert moved["metadata"]["annotations"] != before
    assert template(replace(SPEC, image=SPEC.image.replace("1.4.0", "1.5.0")))["spec"][
        "containers"
    ][0]["image"].endswith(":1.5.0")


def test_no_secret_value_is_rendered() -> None:
    objects = _objects()
    assert "Secret" not in {o["kind"] for o in objects}
    config = _by_name("ConfigMap")["portal-config"]["data"]
    assert not {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "METRICS_TOKEN"} & set(config)
    assert config["ALLOWED_HOSTS"] == (
        "portal.example.com,portal.internal.example.com,portal.portal-system.svc"
    )
    assert config["PORTAL_BASE_URL"] == "https://portal.example.com"
    web = _by_name("Deployment")["portal-web"]["spec"]["template"]["spec"]["containers"][0]
    assert {"secretRef": {"name": "portal-env"}} in web["envFrom"]


def test_network_policy_admits_only_its_peers() -> None:
    policies = _by_name("NetworkPolicy")
    assert policies["default-deny"]["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policies["allow-http"]["spec"]["ingress"]
    sources = {
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]
    }
    assert sources == {"envoy-gateway-system", "monitoring", "flux-system"}
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    egress = policies["allow-egress"]["spec"]["egress"]
    blocks = {
        (peer["ipBlock"]["cidr"], r["ports"][0]["port"])
        for r in egress
        for peer in r["to"]
        if "ipBlock" in peer
    }
    assert blocks == {("10.20.0.0/24", 5432), ("10.20.1.7/32", 6379), ("0.0.0.0/0", 443)}
    public = next(r["to"][0]["ipBlock"] for r in egress if r["ports"][0]["port"] == 443)
    assert "169.254.0.0/16" in public["except"] and "10.0.0.0/8" in public["except"]
    assert {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "opencost"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}],
    } in egress
    without = _by_name("NetworkPolicy", replace(SPEC, public_https=False))["allow-egress"]
    assert all(r["ports"][0]["port"] != 443 for r in without["spec"]["egress"])
    assert any(p["port"] == 53 for r in egress for p in r["ports"])


def test_an_external_secret_needs_the_fleets_store(schema_dir: Path) -> None:
    spec = replace(SPEC, external_secret_key="platform/portal")
    with pytest.raises(SpecError) as excinfo:
        render_portal_deployment(spec, replace(demo_fleet(), secret_store=""))
    assert "external_secret_key" in excinfo.value.errors
    fleet = replace(demo_fleet(), secret_store="vault")
    files = render_repository(fleet, [])
    files.update(render_portal_deployment(spec, fleet))
    (external,) = [o for o in objects_for(files) if o["kind"] == "ExternalSecret"]
    assert external["spec"]["target"]["name"] == "portal-env"
    assert external["spec"]["dataFrom"] == [{"extract": {"key": "platform/portal"}}]
    statuses = {r.name: r.status for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert statuses["schemas"] == statuses["isolation"] == "passed"


def test_it_is_deterministic() -> None:
    first = render_portal_deployment(SPEC, demo_fleet())
    again = render_portal_deployment(
        PortalDeploySpec(**{f: getattr(SPEC, f) for f in SPEC.__dataclass_fields__}), demo_fleet()
    )
    assert first == again
    assert list(first) == sorted(first)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hostnames": ("Portal_Example.com",)}, "hostnames[0]"),
        ({"hostnames": ()}, "hostnames"),
        ({"hostnames": ("portal.example.com", "-bad-.example.com")}, "hostnames[1]"),
        ({"web_replicas": 0}, "web_replicas"),
        ({"worker_replicas": -1}, "worker_replicas"),
        ({"image": "registry.example.com/portal:1.0 --privileged"}, "image"),
        ({"image": "registry.example.com/portal"}, "image"),
        ({"base_url": "http://portal.example.com"}, "base_url"),
        ({"base_url": "https://elsewhere.example.com"}, "base_url"),
        ({"secret_name": "Portal Env"}, "secret_name"),
        ({"egress": (PortalEgress("10.0.0.1/24", 5432),)}, "egress[0].cidr"),
        ({"egress": (PortalEgress("10.0.0.0/24", 0),)}, "egress[0].port"),
        ({"egress": (PortalEgress("", 5432, namespace="Data Base"),)}, "egress[0].namespace"),
        ({"egress": (PortalEgress("10.0.0.0/24", 5432, namespace="db"),)}, "egress[0]"),
        ({"web": PortalResources(cpu_millis=0, memory_mib=512)}, "web.cpu_millis"),
        ({"app_dir": "relative/path"}, "app_dir"),
        ({"metrics_token_key": "a key"}, "metrics_token_key"),
    ],
)
def test_it_refuses_a_bad_spec(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as excinfo:
        render_portal_deployment(replace(SPEC, **changes), demo_fleet())
    assert field in excinfo.value.errors, excinfo.value.errors


def test_on_a_cilium_gateway_it_admits_the_ingress_identity(schema_dir: Path) -> None:
    fleet = replace(demo_fleet(), gateway=replace(demo_fleet().gateway, implementation="cilium"))
    files = render_repository(fleet, [])
    files.update(render_portal_deployment(SPEC, fleet))
    objects = {
        (o["kind"], o["metadata"]["name"]): o
        for o in objects_for(files)
        if o["metadata"].get("namespace") == "portal-system"
    }
    cilium = objects[("CiliumNetworkPolicy", "allow-gateway")]["spec"]
    assert cilium["ingress"][0]["fromEntities"] == ["ingress"]
    (rule,) = objects[("NetworkPolicy", "allow-http")]["spec"]["ingress"]
    assert "envoy-gateway-system" not in str(rule)
    statuses = {r.name: r.status for r in run_checks(files, fleet=fleet, schema_dir=schema_dir)}
    assert statuses["schemas"] == statuses["isolation"] == statuses["duplicates"] == "passed"


def test_the_cluster_role_is_the_one_the_operator_guide_lists() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "operator-guide.md").read_text()
    block = guide.split("kind: ClusterRole\nmetadata: {name: ai-factory-portal}\n", 1)[1]
    listed = yaml.safe_load(block.split("```", 1)[0])["rules"]
    (role,) = _by_name("ClusterRole").values()
    assert role["metadata"]["name"] == "ai-factory-portal"
    assert role["rules"] == listed


def test_one_watcher_and_the_web_pods_share_a_metrics_directory() -> None:
    deployments = _by_name("Deployment")
    watch = deployments["portal-watch"]["spec"]
    assert (watch["replicas"], watch["strategy"]) == (1, {"type": "Recreate"})
    web = deployments["portal-web"]["spec"]["template"]["spec"]
    (container,) = web["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == mounts["metrics"]
    assert {"name": "metrics", "emptyDir": {}} in web["volumes"]


def _admits(validations: list[dict[str, Any]], request: dict[str, Any]) -> list[str]:
    """The messages of the validations that refuse ``request``, evaluated with a CEL
    interpreter (cel-python) over the variables a ValidatingAdmissionPolicy sees."""
    environment = celpy.Environment()
    activation = {name: celpy.json_to_cel(value) for name, value in request.items()}
    return [
        v["message"]
        for v in validations
        if not environment.program(environment.compile(v["expression"])).evaluate(activation)
    ]


def _node(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}, "spec": spec}


def test_the_portal_may_cordon_gpu_nodes_and_evict_tenant_pods_only() -> None:
    # Issue 26 finding 13: the ClusterRole's nodes patch and pods/eviction are cluster-wide.
    (policy,) = _by_name("ValidatingAdmissionPolicy").values()
    (binding,) = _by_name("ValidatingAdmissionPolicyBinding").values()
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["matchConditions"] == [
        {
            "name": "from-the-portal",
            "expression": "request.userInfo.username == "
            "'system:serviceaccount:portal-system:portal'",
        }
    ]
    checks = spec["validations"]
    gpu = {"nvidia.com/gpu.present": "true", "ai-factory.io/pool": "h200"}
    nodes = {"resource": {"group": "", "version": "v1", "resource": "nodes"}}
    cordon = {
        "request": nodes,
        "oldObject": _node(gpu),
        "object": _node(gpu, unschedulable=True),
    }
    assert _admits(checks, cordon) == []
    system = {**cordon, "oldObject": _node({}), "object": _node({}, unschedulable=True)}
    assert _admits(checks, system) == ["The portal cordons and uncordons GPU nodes only."]
    only = "The portal may change a node's spec.unschedulable and its ai-factory.io/reserved-for"
    relabel = {**cordon, "object": _node({**gpu, "ai-factory.io/pool": "other"})}
    assert _admits(checks, relabel) == [f"{only} mark only, not metadata.labels."]
    unlabel = {**cordon, "object": _node({"nvidia.com/gpu.present": "true"})}
    assert _admits(checks, unlabel) == [f"{only} mark only, not metadata.labels."]
    taint = {**cordon, "object": _node(gpu, taints=[{"key": "x", "effect": "NoSchedule"}])}
    assert _admits(checks, taint) == [f"{only} mark only, not spec.taints."]
    # Marking a node reserved (fleet.reservations), and taking the mark off again.
    mark = {"key": "ai-factory.io/reserved-for", "value": "bank", "effect": "NoSchedule"}
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    reserved = _node({**gpu, "ai-factory.io/reserved-for": "bank"}, taints=[gpu_taint, mark])
    plain = _node(gpu, taints=[gpu_taint])
    assert _admits(checks, {**cordon, "oldObject": plain, "object": reserved}) == []
    assert _admits(checks, {**cordon, "oldObject": reserved, "object": plain}) == []
    sneaky = _node({**gpu, "ai-factory.io/reserved-for": "bank"}, taints=[mark])
    assert _admits(checks, {**cordon, "oldObject": plain, "object": sneaky}) == [
        f"{only} mark only, not spec.taints."
    ]
    pods = {"resource": {"group": "", "version": "v1", "resource": "pods"}}
    eviction = {"request": pods, "object": {"metadata": {"name": "p"}}}
    tenant = {"metadata": {"name": "alpha", "labels": {"ai-factory.io/tenant": "alpha"}}}
    assert _admits(checks, {**eviction, "namespaceObject": tenant}) == []
    platform = {"metadata": {"name": "kube-system", "labels": {}}}
    assert _admits(checks, {**eviction, "namespaceObject": platform}) == [
        "The portal evicts pods of tenant namespaces only."
    ]
