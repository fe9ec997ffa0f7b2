"""Isolation rules: a tenant's files cannot reach another tenant or the platform."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gitops.checks import run_checks
from gitops.checks.findings import Finding
from gitops.checks.isolation import check_isolation, check_workload_objects, platform_sources_in
from gitops.fleet import demo_fleet
from gitops.render import rbac
from gitops.specs import TenantSpec
from tests.gitops import checks_samples as samples

GATEWAY_NS = "gateway-system"
PLATFORM_SOURCES = {("HelmRepository", "flux-system", "vcluster")}


def check(files: dict[str, bytes], **options: Any) -> list[Finding]:
    options.setdefault("gateway_namespace", GATEWAY_NS)
    options.setdefault("platform_sources", PLATFORM_SOURCES)
    options.setdefault("gateway_domain", samples.GATEWAY_DOMAIN)
    return check_isolation(files, **options)


def rules(findings: list[Finding]) -> list[str]:
    return sorted(f.rule for f in findings)


def with_workload(*objs: dict[str, Any], slug: str = "alpha") -> dict[str, bytes]:
    tree = samples.fleet_tree("alpha", "bravo")
    tree[f"tenants/{slug}/workloads/extra.yaml"] = samples.dump(*objs)
    return tree


def test_a_well_formed_fleet_passes() -> None:
    assert check(samples.fleet_tree("alpha", "bravo")) == []


def test_platform_sources_are_read_from_the_platform_directories() -> None:
    tree = samples.fleet_tree("alpha")
    assert platform_sources_in(tree) == PLATFORM_SOURCES
    # A source declared in a tenant directory is not a platform source.
    tree["tenants/alpha/source.yaml"] = samples.dump(samples.git_repository("flux-system"))
    assert platform_sources_in(tree) == PLATFORM_SOURCES


def test_the_shared_gateway_is_an_allowed_parent() -> None:
    assert check(with_workload(samples.http_route())) == []
    assert check(with_workload(samples.http_route()), gateway_name="ai-gateway") == []


@pytest.mark.parametrize(
    ("route_change", "options"),
    [
        ({"namespace": "bravo"}, {}),
        ({"name": "other-gateway"}, {"gateway_name": "ai-gateway"}),
        ({"kind": "Service"}, {}),
    ],
)
def test_other_parents_are_refused(route_change: dict[str, str], options: dict[str, Any]) -> None:
    route = samples.http_route()
    route["spec"]["parentRefs"][0].update(route_change)
    findings = check(with_workload(route), **options)
    assert rules(findings) == ["cross-namespace-ref"]
    assert findings[0].object == "HTTPRoute/alpha/llama3-8b"
    assert findings[0].path == "tenants/alpha/workloads/extra.yaml"


def _cluster_admin_binding() -> dict[str, Any]:
    return samples.role_binding(role="cluster-admin")


def _subject_elsewhere() -> dict[str, Any]:
    binding = samples.role_binding()
    binding["subjects"][0]["namespace"] = "bravo"
    return binding


def _flux_from_flux_system() -> dict[str, Any]:
    return samples.flux_kustomization(source_namespace="flux-system")


def _tenant_release() -> dict[str, Any]:
    release = samples.vcluster_release()
    release["spec"]["serviceAccountName"] = "flux-reconciler"
    return release


def _helm_from_flux_system() -> dict[str, Any]:
    # Even the platform's own sources are off limits to tenant-owned files.
    return _tenant_release()


def _release_elsewhere() -> dict[str, Any]:
    release = _tenant_release()
    release["spec"]["chart"]["spec"]["sourceRef"]["namespace"] = "alpha"
    release["spec"]["storageNamespace"] = "kube-system"
    return release


def _flux_without_impersonation() -> dict[str, Any]:
    sync = samples.flux_kustomization()
    del sync["spec"]["serviceAccountName"]
    return sync


def _external_secret_from_cluster_store() -> dict[str, Any]:
    return {
        "apiVersion": "external-secrets.io/v1",
        "kind": "ExternalSecret",
        "metadata": {"name": "token", "namespace": "alpha"},
        "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": "vault"}},
    }


def _reference_grant() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "open", "namespace": "alpha"},
        "spec": {"from": [], "to": []},
    }


def _queue_of_another_tenant() -> dict[str, Any]:
    queue = samples.local_queue()
    queue["spec"]["clusterQueue"] = "bravo"
    return queue


def _service(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "alpha"},
        "spec": {"ports": [{"port": 80}], **spec},
    }


def _deployment(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "alpha"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "kserve/x:1"}]},
            },
        },
    }


def _route_to_backend() -> dict[str, Any]:
    route = samples.http_route()
    route["spec"]["rules"][0]["backendRefs"][0].update(
        {"group": "gateway.envoyproxy.io", "kind": "Backend"}
    )
    return route


@pytest.mark.parametrize(
    ("obj", "rule"),
    [
        # Issue 26 findings 5 and 11: what a route or a NetworkPolicy would trust.
        (_service(type="ExternalName", externalName="x.bravo.svc"), "service-selector"),
        (_service(), "service-selector"),
        (_route_to_backend(), "route-backend"),
        (_deployment({"serving.kserve.io/inferenceservice": "llama"}), "reserved-label"),
        (_deployment({"app": "vcluster"}), "reserved-label"),
        (samples.namespace("zeta"), "cluster-scoped"),
        (samples.cluster_queue("alpha"), "cluster-scoped"),
        (samples.resource_flavor(), "cluster-scoped"),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "mine"},
                "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "x"},
            },
            "cluster-scoped",
        ),
        (samples.litellm_config("bravo"), "namespace"),
        (_cluster_admin_binding(), "cluster-admin"),
        (_subject_elsewhere(), "cross-namespace-subject"),
        (_flux_from_flux_system(), "cross-namespace-ref"),
        (_flux_without_impersonation(), "flux-impersonation"),
        (_helm_from_flux_system(), "cross-namespace-ref"),
        (samples.http_route(backend_namespace="bravo"), "cross-namespace-ref"),
        (_external_secret_from_cluster_store(), "cluster-secret-store"),
        (_reference_grant(), "forbidden-kind"),
        (_queue_of_another_tenant(), "foreign-cluster-queue"),
        ({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, None),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_workload_violation_is_found(obj: dict[str, Any], rule: str | None) -> None:
    findings = check(with_workload(obj))
    assert rules(findings) == [rule or "unknown-scope"], findings
    assert all(f.path == "tenants/alpha/workloads/extra.yaml" for f in findings)


def test_ordinary_services_and_workloads_pass() -> None:
    assert check(with_workload(_service(selector={"app": "web"}))) == []
    assert check(with_workload(_deployment({"app": "web", "release": "dev"}))) == []


def test_a_release_may_not_store_its_state_elsewhere() -> None:
    [finding] = check(with_workload(_release_elsewhere()))
    assert finding.rule == "cross-namespace-ref"
    assert finding.message == "spec.storageNamespace 'kube-system' must be 'alpha'"


def test_a_workload_kustomization_must_not_move_or_reach_out() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization(
        ["claims.yaml", "../rbac.yaml", "../../bravo/workloads/claims.yaml"], namespace="bravo"
    )
    findings = check(tree)
    assert rules(findings) == ["kustomize-escape", "kustomize-escape", "kustomize-namespace"]
    assert all(f.path == "tenants/alpha/workloads/kustomization.yaml" for f in findings)


def test_platform_files_may_not_read_another_tenant() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/kustomization.yaml"] = samples.kustomization(
        ["namespace.yaml", "../bravo/rbac.yaml"]
    )
    assert rules(check(tree)) == ["kustomize-escape"]


def test_remote_and_escaping_references_are_found() -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/workloads/kustomization.yaml"] = samples.kustomization(
        ["https://github.com/x/y//deploy", "../../../../etc"]
    )
    assert rules(check(tree)) == ["kustomize-escape", "kustomize-remote"]


@pytest.mark.parametrize(
    ("obj", "rule"),
    [
        (samples.namespace("bravo"), "cluster-scoped"),
        (samples.cluster_queue("bravo"), "cluster-scoped"),
        (samples.resource_flavor("h200"), "cluster-scoped"),
        (samples.git_repository("bravo"), "namespace"),
        (samples.flux_kustomization(source_namespace="bravo"), "cross-namespace-ref"),
        (samples.flux_kustomization(path="./tenants/bravo/workloads"), "flux-path"),
        (samples.flux_kustomization(path="./infrastructure"), "flux-path"),
    ],
)
def test_each_platform_violation_is_found(obj: dict[str, Any], rule: str) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    if obj["kind"] == "Kustomization":
        obj["metadata"]["name"] = "extra"
    tree["tenants/alpha/extra.yaml"] = samples.dump(obj)
    assert rules(check(tree)) == [rule]


def _platform_external_secret(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "external-secrets.io/v1",
        "kind": "ExternalSecret",
        "metadata": {"name": "model-download-credentials", "namespace": "alpha"},
        "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": "vault"}, **spec},
    }


def test_the_platform_may_read_the_tenants_own_keys_from_a_cluster_secret_store() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    own = [{"extract": {"key": "ai-factory/tenants/alpha/model-download"}}]
    tree["tenants/alpha/model-credentials.yaml"] = samples.dump(
        _platform_external_secret(dataFrom=own)
    )
    assert check(tree) == []


@pytest.mark.parametrize(
    "spec",
    [
        {"dataFrom": [{"extract": {"key": "ai-factory/tenants/bravo/model-download"}}]},
        {"dataFrom": [{"extract": {"key": "ai-factory/tenants/alpha/../bravo/x"}}]},
        {"dataFrom": [{"find": {"name": {"regexp": ".*"}}}]},
        {"data": [{"secretKey": "t", "remoteRef": {"key": "platform/admin-token"}}]},
    ],
)
def test_the_platform_may_not_read_other_keys_from_a_cluster_secret_store(
    spec: dict[str, Any],
) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/model-credentials.yaml"] = samples.dump(_platform_external_secret(**spec))
    assert rules(check(tree)) == ["cluster-secret-store"]


def test_a_tenant_may_not_reach_a_cluster_secret_store_through_a_source_ref() -> None:
    obj = _platform_external_secret(
        dataFrom=[
            {
                "extract": {"key": "ai-factory/tenants/alpha/model-download"},
                "sourceRef": {"storeRef": {"kind": "ClusterSecretStore", "name": "vault"}},
            }
        ]
    )
    obj["spec"]["secretStoreRef"] = {"kind": "SecretStore", "name": "own"}
    assert rules(check(with_workload(obj))) == ["cluster-secret-store"]


def test_the_workloads_sync_must_impersonate_the_tenant() -> None:
    tree = samples.fleet_tree("alpha")
    sync = samples.flux_kustomization()
    del sync["spec"]["serviceAccountName"]
    tree["tenants/alpha/sync.yaml"] = samples.dump(samples.git_repository(), sync)
    [finding] = check(tree)
    assert finding.rule == "flux-impersonation"


def test_platform_objects_take_their_namespace_from_the_kustomization() -> None:
    tree = samples.fleet_tree("alpha")
    tree["tenants/alpha/quota.yaml"] = samples.dump(
        {**samples.resource_quota(), "metadata": {"name": "compute"}}
    )
    assert rules(check(tree)) == ["namespace"]
    tree["tenants/alpha/kustomization.yaml"] = samples.kustomization(
        ["namespace.yaml", "quota.yaml"], namespace="alpha"
    )
    assert check(tree) == []


def test_only_listed_platform_sources_may_be_referenced_across_namespaces() -> None:
    tree = samples.fleet_tree("alpha")
    assert check(tree) == []
    [finding] = check(tree, platform_sources=set())
    assert (finding.rule, finding.object) == ("cross-namespace-ref", "HelmRelease/alpha/alpha-dev")
    assert "spec.chart.spec.sourceRef.namespace 'flux-system'" in finding.message


def test_namespace_keys_in_free_form_data_are_not_references() -> None:
    config = samples.litellm_config()
    config["data"] = {"namespace": "bravo"}
    release = samples.vcluster_release()
    release["spec"]["values"]["exportKubeConfig"]["secret"]["namespace"] = "bravo"
    tree = with_workload(config)
    tree["tenants/alpha/clusters/dev.yaml"] = samples.dump(release)
    assert check(tree) == []


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("../outside.yaml", "path-traversal"),
        ("tenants/alpha/../bravo/x.yaml", "path-traversal"),
        ("/etc/passwd", "path-traversal"),
        ("tenants//alpha/x.yaml", "path-traversal"),
        ("tenants/alpha/./x.yaml", "path-traversal"),
        ("tenants\\alpha\\x.yaml", "path-traversal"),
        ("README.md", "path-root"),
        ("apps/x.yaml", "path-root"),
        ("tenants/Alpha_Team/x.yaml", "tenant-name"),
    ],
)
def test_paths_are_checked(path: str, rule: str) -> None:
    tree = samples.fleet_tree("alpha")
    tree[path] = b"# nothing\n"
    findings = check(tree)
    assert rules(findings) == [rule]
    assert findings[0].path == path


def test_built_workloads_are_checked_too() -> None:
    built = [samples.inference_service(), samples.litellm_config("bravo"), samples.namespace()]
    findings = check_workload_objects("alpha", built, gateway_namespace=GATEWAY_NS)
    assert rules(findings) == ["cluster-scoped", "namespace"]
    assert findings[0].path == "tenants/alpha/workloads"


def test_findings_read_well() -> None:
    [finding] = check(with_workload(samples.litellm_config("bravo")))
    assert str(finding) == (
        "tenants/alpha/workloads/extra.yaml: ConfigMap/bravo/litellm-routes: [namespace] "
        "namespace 'bravo' must be 'alpha' (or left out)"
    )


PORTAL = ("portal-system", "portal")


def _portal_binding(
    *, role_kind: str = "Role", subject_name: str = "portal", namespace: str = "alpha"
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "ai-factory-portal-kubeconfigs", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": "ai-factory-portal-kubeconfigs",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": subject_name, "namespace": "portal-system"}
        ],
    }


def test_the_platform_may_let_the_portal_read_a_tenant_role_and_nothing_more() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/portal-access.yaml"] = samples.dump(_portal_binding())
    assert check(tree, portal_subject=PORTAL) == []
    # Without knowing the portal, it is a foreign subject like any other.
    assert rules(check(tree)) == ["cross-namespace-subject"]
    for binding in [
        _portal_binding(role_kind="ClusterRole"),  # a cluster-wide role: too much
        _portal_binding(subject_name="someone-else"),  # another account of that namespace
    ]:
        tree["tenants/alpha/portal-access.yaml"] = samples.dump(binding)
        assert "cross-namespace-subject" in rules(check(tree, portal_subject=PORTAL))
    # The tenant's own files never grant the portal (or anyone outside) anything.
    tenant_owned = with_workload(_portal_binding())
    assert "cross-namespace-subject" in rules(check(tenant_owned, portal_subject=PORTAL))


def _impersonation_role(**rule: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "ai-factory-portal-jobs", "namespace": "alpha"},
        "rules": [{**rbac.portal_impersonation_rule(), **rule}],
    }


def test_the_rendered_impersonation_of_the_job_accounts_passes() -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tenant = TenantSpec(slug="alpha")
    tree["tenants/alpha/rbac.yaml"] = samples.dump(*rbac.tenant_objects(tenant, demo_fleet()))
    assert check(tree, portal_subject=PORTAL) == []
    # One of the two accounts only is as narrow.
    tree["tenants/alpha/rbac.yaml"] = samples.dump(
        _impersonation_role(resourceNames=["ai-factory-job-reader"])
    )
    assert check(tree, portal_subject=PORTAL) == []


@pytest.mark.parametrize(
    "rule",
    [
        # The tenant's Flux account, or any account at all of the namespace.
        {"resourceNames": ["ai-factory-job-runner", "alpha"]},
        {"resourceNames": []},
        # People, groups (system:masters), extras and uids.
        {"resources": ["users"], "resourceNames": ["ai-factory-job-runner"]},
        {"resources": ["serviceaccounts", "groups"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/scopes"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["uids"]},
        # Wildcards reach the same.
        {"verbs": ["*"]},
        {"resources": ["*"]},
        {"apiGroups": ["*"]},
    ],
)
def test_any_broader_impersonation_in_a_tenant_directory_is_refused(rule: dict[str, Any]) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/rbac.yaml"] = samples.dump(_impersonation_role(**rule))
    assert "impersonation" in rules(check(tree, portal_subject=PORTAL))


def test_a_tenant_may_not_grant_impersonation_or_use_the_job_accounts() -> None:
    # Even the rendered rule is the platform's to write, not the tenant's.
    assert rules(check(with_workload(_impersonation_role()))) == ["impersonation"]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "runner", "namespace": "alpha"},
        "spec": {
            "selector": {"matchLabels": {"app": "runner"}},
            "template": {
                "metadata": {"labels": {"app": "runner"}},
                "spec": {
                    "serviceAccountName": "ai-factory-job-runner",
                    "automountServiceAccountToken": True,
                    "containers": [{"name": "c", "image": "ghcr.io/acme/c:1"}],
                },
            },
        },
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "ai-factory-job-reader", "namespace": "alpha"},
    }
    token = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "runner-token",
            "namespace": "alpha",
            "annotations": {"kubernetes.io/service-account.name": "ai-factory-job-runner"},
        },
    }
    findings = check(with_workload(deployment, account, token))
    assert rules(findings) == ["job-service-account"] * 3
    assert any(
        "spec.template.spec.serviceAccountName 'ai-factory-job-runner'" in f.message
        for f in findings
    )


# --- the shared gateway and LiteLLM --------------------------------------------------------


def _route(**changes: Any) -> dict[str, Any]:
    route = samples.http_route("alpha", name="mine")
    route["spec"].update(changes)
    return route


@pytest.mark.parametrize(
    "hostnames",
    [
        # Another tenant's host: with the longest-prefix rule it would take bravo's prompts.
        ["bravo.models.ai-factory.example.com"],
        # The old shared host, and a second host beside the tenant's own.
        ["models.ai-factory.example.com"],
        ["alpha.models.ai-factory.example.com", "models.ai-factory.example.com"],
        # No hostnames: the route inherits the listener's wildcard, every tenant's host.
        [],
        None,
    ],
)
def test_a_tenant_route_serves_only_its_own_host(hostnames: list[str] | None) -> None:
    route = _route(hostnames=hostnames)
    if hostnames is None:
        del route["spec"]["hostnames"]
    assert rules(check(with_workload(route))) == ["route-hostname"]


def test_a_tenant_route_on_its_own_host_passes() -> None:
    assert check(with_workload(_route(hostnames=["alpha.models.ai-factory.example.com"]))) == []


def test_a_tenant_route_must_carry_the_tenant_label_the_key_check_selects() -> None:
    route = _route()
    route["metadata"]["labels"] = {"ai-factory.io/tenant": "bravo"}
    assert rules(check(with_workload(route))) == ["route-label"]
    del route["metadata"]["labels"]
    assert rules(check(with_workload(route))) == ["route-label"]


def test_route_rules_apply_to_the_built_workloads_too() -> None:
    # A kustomize patch can rewrite the hostnames the files show.
    built = [_route(hostnames=["bravo.models.ai-factory.example.com"])]
    findings = check_workload_objects(
        "alpha", built, gateway_namespace=GATEWAY_NS, gateway_domain=samples.GATEWAY_DOMAIN
    )
    assert rules(findings) == ["route-hostname"]


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy"),
        ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy"),
        ("cilium.io/v2", "CiliumNetworkPolicy"),
    ],
)
def test_gateway_and_cilium_policies_are_reserved_to_the_platform(
    api_version: str, kind: str
) -> None:
    policy = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "open", "namespace": "alpha"},
        "spec": {},
    }
    assert "forbidden-kind" in rules(check(with_workload(policy)))


def _litellm(api_base: str, **params: str) -> dict[str, Any]:
    entry = {
        "model_name": "alpha/chat",
        "litellm_params": {"model": "hosted_vllm/chat", "api_base": api_base, **params},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "chat-litellm",
            "namespace": "alpha",
            "labels": {"ai-factory.io/litellm-model": "true"},
        },
        "data": {"model_list.yaml": yaml.safe_dump([entry])},
    }


OWN_PREDICTOR = "http://chat-predictor.alpha.svc.cluster.local/openai/v1"


def test_a_tenant_cannot_write_litellm_configuration() -> None:
    assert rules(check(with_workload(_litellm(OWN_PREDICTOR)))) == ["litellm-config"]


def test_the_platform_litellm_configuration_passes_when_it_calls_the_tenant() -> None:
    for api_base in (OWN_PREDICTOR, "https://alpha.models.ai-factory.example.com/chat/v1"):
        tree = samples.fleet_tree("alpha", "bravo")
        tree["tenants/alpha/litellm/chat.yaml"] = samples.dump(_litellm(api_base))
        assert check(tree) == [], api_base


@pytest.mark.parametrize(
    ("config", "rule"),
    [
        (_litellm(OWN_PREDICTOR, api_key="os.environ/OPENAI_API_KEY"), "litellm-environ"),
        (_litellm("os.environ/MASTER_KEY"), "litellm-environ"),
        (_litellm("http://chat-predictor.bravo.svc.cluster.local/openai/v1"), "litellm-api-base"),
        (_litellm("https://bravo.models.ai-factory.example.com/chat/v1"), "litellm-api-base"),
        (_litellm("https://attacker.example.com/v1"), "litellm-api-base"),
        (_litellm("http://169.254.169.254/latest"), "litellm-api-base"),
    ],
)
def test_the_platform_litellm_configuration_refuses_secrets_and_foreign_bases(
    config: dict[str, Any], rule: str
) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    tree["tenants/alpha/litellm/chat.yaml"] = samples.dump(config)
    assert rule in rules(check(tree))


def test_a_tenant_source_must_carry_credentials() -> None:
    # What tenants/<t>/sync.yaml said before: no secretRef, so the portal's Git endpoint
    # answered 401 and nothing of the tenant was ever applied.
    tree = samples.fleet_tree("alpha")
    source = samples.git_repository()
    del source["spec"]["secretRef"]
    tree["tenants/alpha/sync.yaml"] = samples.dump(source, samples.flux_kustomization())
    findings = check(tree)
    assert rules(findings) == ["tenant-source"]
    assert "spec.secretRef is required" in findings[0].message


@pytest.mark.parametrize(
    "wrong",
    [
        "http://portal.portal-system.svc/git/fleet.git",
        "http://portal.portal-system.svc/git/tenants/bravo.git",
        "https://github.com/someone/else.git",
    ],
)
def test_a_tenant_source_must_read_the_tenants_own_repository(wrong: str) -> None:
    tree = samples.fleet_tree("alpha", "bravo")
    source = samples.git_repository()
    source["spec"]["url"] = wrong
    tree["tenants/alpha/sync.yaml"] = samples.dump(source, samples.flux_kustomization())
    findings = check(tree, tenant_source_url=samples.FLEET.tenant_git_url)
    assert rules(findings) == ["tenant-source"]
    assert "tenants/alpha.git" in findings[0].message
    # A tenant's own sources in workloads/ (its own Git host, say) are the tenant's business.
    found = check(with_workload(source), tenant_source_url=samples.FLEET.tenant_git_url)
    assert "tenant-source" not in rules(found)


def test_the_checks_run_the_tenant_source_rule_with_the_fleets_url() -> None:
    tree = samples.fleet_tree("alpha")
    source = samples.git_repository()
    source["spec"]["url"] = samples.FLEET.git_url
    tree["tenants/alpha/sync.yaml"] = samples.dump(source, samples.flux_kustomization())
    results = {r.name: r for r in run_checks(tree, fleet=samples.FLEET, changed=None)}
    assert results["isolation"].status == "failed"
    assert any("tenants/alpha.git" in line for line in results["isolation"].details)
