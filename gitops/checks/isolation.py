"""Isolation rules on the fleet repository: one tenant's files cannot reach another tenant or
the platform.

The layout (flux2-multi-tenancy) gives each directory an owner:

- ``clusters/`` and ``infrastructure/``: the platform, applied by Flux with full rights;
- ``tenants/<slug>/`` outside ``workloads/``: platform-owned objects *for* the tenant
  (namespace, RBAC, quota, queues, Flux sync, vClusters), applied with full rights, so every
  object must stay in the tenant's namespace;
- ``tenants/<slug>/cluster-access/``: the members' bindings, applied into the tenant's virtual
  clusters (``gitops.checks.cluster_access`` has their rules);
- ``tenants/<slug>/workloads/``: tenant-owned, applied by a Flux Kustomization impersonating
  the tenant's service account. RBAC stops most escapes on the cluster; these rules stop the
  rest before merge (cluster-scoped kinds, cross-namespace references that controllers
  follow with their own rights, grants to other namespaces) and give a reviewer a sentence.

Rules are checked on the files as written; ``check_workload_objects`` applies the tenant rules
to a kustomize build's output as well, since patches can change what the files say.

The shared gateway and LiteLLM need rules of their own, because what a real controller does
with a valid object is the escape:

- a tenant route must name exactly the tenant's own host, ``<slug>.<gateway domain>``, and carry
  the tenant label. Gateway API merges the routes of all namespaces attached to a hostname and
  gives the longest matching path prefix precedence (HTTPRouteRule, "precedence",
  https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule), so a route on a shared or
  inherited (wildcard) host could take another tenant's traffic; and the platform's
  Envoy Gateway SecurityPolicy asks for the tenant's key on routes selected by that label;
- gateway and Cilium policies are reserved to the platform: a tenant SecurityPolicy or
  CiliumNetworkPolicy could loosen the key check in front of its routes;
- an ExternalSecret may use a ClusterSecretStore (which answers every namespace) only in the
  platform-owned part, and only for remote keys under ``ai-factory/tenants/<slug>/``
  (``gitops.render.secrets``); a tenant's own must use a SecretStore of its namespace;
- a tenant's pods and pod templates may not carry the labels the namespace's NetworkPolicies
  trust (a model server's, a tenant-cluster control plane's), its Services need a selector
  and may not be ``ExternalName``, and its routes use only Services (``gitops.render.network``,
  the Kyverno policy ``tenant-creators`` holding the same in the cluster);
- impersonation: a Role in a tenant directory may grant ``impersonate`` only as the platform
  renders it (``gitops.render.rbac.portal_impersonation_rule``: the tenant's two job service
  accounts, by name, in the platform-owned part), never on users, groups, extras, uids or any
  other service account (one that may be impersonated is as good as its token); and a tenant's
  own objects may not run as, define or mint a token for those job accounts, which exist only
  to be impersonated by the portal;
- reserved nodes (``gitops.render.reservations``): nothing in a tenant's directory may select,
  tolerate or queue on another tenant's reserved nodes: a node selector or flavor label
  ``ai-factory.io/reserved-for`` with another tenant's slug, a toleration of that key with
  another value or with ``Exists``, such a toleration in a vCluster's ``enforceTolerations``,
  or a ClusterQueue flavor or ResourceFlavor ``<pool>.<other slug>``;
- a LiteLLM model ConfigMap (label ``ai-factory.io/litellm-model``) is refused in
  ``workloads/``, and in the platform-owned part may not use ``os.environ/`` (LiteLLM replaces
  it with the proxy's own environment, secrets included: https://docs.litellm.ai/docs/proxy/configs)
  nor send requests anywhere but a Service of the tenant's namespace or the tenant's own host.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import yaml

from gitops.checks import cluster_access, names, vcluster
from gitops.checks.findings import Finding, mapping, object_ref, sequence
from gitops.checks.manifests import (
    is_kustomization_path,
    is_remote_reference,
    iter_objects,
    kustomization_refs,
    load_kustomization,
    resolve_reference,
)
from gitops.checks.schema import SchemaRegistry, Scope, get_registry
from gitops.render import rbac, secrets
from gitops.render.kyverno import RESERVED_LABEL_KEYS, RESERVED_LABELS
from gitops.render.meta import LITELLM_MODEL_LABEL, LOCAL_QUEUE, TENANT_LABEL
from gitops.render.reservations import RESERVED_KEY
from gitops.render.vcluster import CHART_VERSION

ALLOWED_ROOTS = ("clusters", "infrastructure", "tenants")
WORKLOADS_DIR = "workloads"
DEFAULT_FORBIDDEN_CLUSTER_ROLES = frozenset({"cluster-admin"})
# Namespaced, but they act on other namespaces: a ReferenceGrant opens this namespace's
# objects to routes elsewhere, a Kyverno PolicyException can exempt any namespace's pods.
# Gateway and Cilium policies change who may reach the tenant's routes and pods (a tenant's own
# SecurityPolicy could replace the platform's key check); the platform renders them.
FORBIDDEN_WORKLOAD_KINDS = frozenset(
    {
        "ReferenceGrant",
        "PolicyException",
        "SecurityPolicy",
        "ClientTrafficPolicy",
        "BackendTrafficPolicy",
        "EnvoyExtensionPolicy",
        "EnvoyPatchPolicy",
        "CiliumNetworkPolicy",
        # A tenant's own attachment could name another tenant's partition key or VLAN
        # (gitops.render.fabric): the platform renders them from the fleet file.
        "NetworkAttachmentDefinition",
    }
)
ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"})
# Routes matched by hostname; TCP and UDP routes have none and tenants may not write them (RBAC).
HOSTNAME_ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute", "TLSRoute"})
LITELLM_ENV_REFERENCE = "os.environ/"
LITELLM_DATA_KEY = "model_list.yaml"
FLUX_GROUPS = (
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "source.toolkit.fluxcd.io/",
)
FLUX_SOURCE_KINDS = frozenset(
    {"GitRepository", "HelmRepository", "OCIRepository", "Bucket", "HelmChart"}
)
# Used when no schema registry is given: the upstream CRDs the portal writes or meets.
KNOWN_CRD_SCOPES: dict[tuple[str, str], Scope] = {
    ("cilium.io", "CiliumCIDRGroup"): "Cluster",
    ("cilium.io", "CiliumClusterwideNetworkPolicy"): "Cluster",
    ("cilium.io", "CiliumNetworkPolicy"): "Namespaced",
    ("k8s.cni.cncf.io", "NetworkAttachmentDefinition"): "Namespaced",
    ("gateway.envoyproxy.io", "BackendTrafficPolicy"): "Namespaced",
    ("gateway.envoyproxy.io", "ClientTrafficPolicy"): "Namespaced",
    ("gateway.envoyproxy.io", "SecurityPolicy"): "Namespaced",
    ("external-secrets.io", "ClusterSecretStore"): "Cluster",
    ("external-secrets.io", "ExternalSecret"): "Namespaced",
    ("external-secrets.io", "SecretStore"): "Namespaced",
    ("gateway.networking.k8s.io", "GRPCRoute"): "Namespaced",
    ("gateway.networking.k8s.io", "Gateway"): "Namespaced",
    ("gateway.networking.k8s.io", "GatewayClass"): "Cluster",
    ("gateway.networking.k8s.io", "HTTPRoute"): "Namespaced",
    ("gateway.networking.k8s.io", "ReferenceGrant"): "Namespaced",
    ("helm.toolkit.fluxcd.io", "HelmRelease"): "Namespaced",
    ("kueue.x-k8s.io", "AdmissionCheck"): "Cluster",
    ("kueue.x-k8s.io", "ClusterQueue"): "Cluster",
    ("kueue.x-k8s.io", "Cohort"): "Cluster",
    ("kueue.x-k8s.io", "LocalQueue"): "Namespaced",
    ("kueue.x-k8s.io", "ResourceFlavor"): "Cluster",
    ("kueue.x-k8s.io", "Topology"): "Cluster",
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): "Cluster",
    ("kustomize.toolkit.fluxcd.io", "Kustomization"): "Namespaced",
    ("monitoring.coreos.com", "PodMonitor"): "Namespaced",
    ("monitoring.coreos.com", "PrometheusRule"): "Namespaced",
    ("monitoring.coreos.com", "ServiceMonitor"): "Namespaced",
    ("nvidia.com", "ClusterPolicy"): "Cluster",
    ("kyverno.io", "ClusterPolicy"): "Cluster",
    ("kyverno.io", "Policy"): "Namespaced",
    ("kyverno.io", "PolicyException"): "Namespaced",
    ("policies.kyverno.io", "ValidatingPolicy"): "Cluster",
    ("serving.kserve.io", "ClusterServingRuntime"): "Cluster",
    ("serving.kserve.io", "InferenceService"): "Namespaced",
    ("serving.kserve.io", "LLMInferenceService"): "Namespaced",
    ("serving.kserve.io", "ServingRuntime"): "Namespaced",
    ("source.toolkit.fluxcd.io", "Bucket"): "Namespaced",
    ("source.toolkit.fluxcd.io", "GitRepository"): "Namespaced",
    ("source.toolkit.fluxcd.io", "HelmChart"): "Namespaced",
    ("source.toolkit.fluxcd.io", "HelmRepository"): "Namespaced",
    ("source.toolkit.fluxcd.io", "OCIRepository"): "Namespaced",
}

PlatformSource = tuple[str, str, str]  # (kind, namespace, name)
# What a grant of ``impersonate`` reaches (k8s.io/apiserver filters/impersonation.go
# ``WithImpersonation``: users, groups, serviceaccounts, userextras/<key>, uids); "*" and
# "*/<sub>" reach them too.
IMPERSONABLE = frozenset({"users", "groups", "serviceaccounts", "userextras", "uids", "*"})
# Where an object names the service account it runs as, or a token Secret the account it is for.
ACCOUNT_KEYS = frozenset(
    {"serviceAccountName", "serviceAccount", "kubernetes.io/service-account.name"}
)


def check_isolation(
    files: Mapping[str, bytes],
    *,
    gateway_namespace: str,
    platform_sources: Collection[PlatformSource] = (),
    gateway_name: str | None = None,
    gateway_domain: str | None = None,
    registry: SchemaRegistry | None = None,
    forbidden_cluster_roles: Collection[str] = DEFAULT_FORBIDDEN_CLUSTER_ROLES,
    portal_subject: tuple[str, str] | None = None,
    tenant_source_url: Callable[[str], str] | None = None,
) -> list[Finding]:
    """Every isolation rule broken in the tree.

    ``gateway_namespace`` (and ``gateway_name`` when given) is the shared Gateway that tenant
    routes may attach to. ``platform_sources`` are the Flux sources, as (kind, namespace,
    name), that platform-owned tenant objects may use from another namespace (see
    ``platform_sources_in``). ``registry`` tells namespaced from cluster-scoped kinds; without
    one the built-in kinds and the well-known CRDs are known. ``portal_subject`` is the
    portal's (namespace, service account): a platform-owned RoleBinding may grant it a Role of
    the tenant's namespace (to read kubeconfig Secrets), and no other foreign subject.
    ``gateway_domain`` is the gateway's base domain: a tenant's routes must use exactly
    ``<slug>.<gateway_domain>`` (without it, hostnames are not checked).
    ``tenant_source_url(slug)`` is the one URL a tenant's platform-owned GitRepository may
    read (its projection repository); every such GitRepository needs a ``secretRef`` anyway.
    """
    rules = _Rules(
        gateway_namespace=gateway_namespace,
        gateway_name=gateway_name,
        gateway_domain=gateway_domain,
        platform_sources=frozenset(platform_sources),
        registry=registry or get_registry(None),
        forbidden_cluster_roles=frozenset(forbidden_cluster_roles),
        portal_subject=portal_subject,
        tenant_source_url=tenant_source_url,
    )
    findings: list[Finding] = []
    unsafe: set[str] = set()
    rules.files = files
    for path in sorted(files):
        path_findings = list(_path_findings(path))
        if any(f.rule == "path-traversal" for f in path_findings):
            unsafe.add(path)
        findings += path_findings

    safe_files = {p: data for p, data in files.items() if p not in unsafe}
    for path in sorted(safe_files):
        if is_kustomization_path(path):
            findings += rules.kustomization(safe_files, path)
    objects, _ = iter_objects(safe_files)
    for item in objects:
        slug, tenant_owned = tenant_of(item.path)
        if slug is None:
            continue
        findings += reservation_findings(item.path, item.obj, slug)
        if cluster_access.access_dir(item.path) is not None:
            findings += cluster_access.object_findings(item.path, item.obj)
        elif tenant_owned:
            findings += rules.workload_object(item.path, item.obj, slug)
        else:
            namespace = _effective_namespace(safe_files, item.path, item.obj)
            findings += rules.platform_object(item.path, item.obj, slug, namespace)
    return findings


def check_workload_objects(
    slug: str,
    objects: Iterable[Mapping[str, Any]],
    *,
    gateway_namespace: str,
    gateway_name: str | None = None,
    gateway_domain: str | None = None,
    registry: SchemaRegistry | None = None,
    path: str = "",
    forbidden_cluster_roles: Collection[str] = DEFAULT_FORBIDDEN_CLUSTER_ROLES,
) -> list[Finding]:
    """The tenant-owned rules on objects as built (e.g. a kustomize build of the workloads)."""
    rules = _Rules(
        gateway_namespace=gateway_namespace,
        gateway_name=gateway_name,
        gateway_domain=gateway_domain,
        platform_sources=frozenset(),
        registry=registry or get_registry(None),
        forbidden_cluster_roles=frozenset(forbidden_cluster_roles),
    )
    where = path or f"tenants/{slug}/{WORKLOADS_DIR}"
    return [f for obj in objects for f in rules.workload_object(where, obj, slug)]


def platform_sources_in(files: Mapping[str, bytes]) -> set[PlatformSource]:
    """Flux sources defined by the platform (under ``clusters/`` or ``infrastructure/``):
    the ones platform-owned tenant objects may reference across namespaces."""
    objects, _ = iter_objects({p: d for p, d in files.items() if not p.startswith("tenants/")})
    found: set[PlatformSource] = set()
    for item in objects:
        obj = item.obj
        if str(obj.get("kind")) in FLUX_SOURCE_KINDS and _is_flux(obj):
            metadata = mapping(obj.get("metadata"))
            found.add((str(obj["kind"]), str(metadata.get("namespace")), str(metadata.get("name"))))
    return found


def tenant_of(path: str) -> tuple[str | None, bool]:
    """(slug, tenant-owned) for a path under ``tenants/<slug>/``; (None, False) elsewhere."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tenants":
        return None, False
    return parts[1], len(parts) > 3 and parts[2] == WORKLOADS_DIR


def _path_findings(path: str) -> Iterator[Finding]:
    parts = path.split("/")
    if (
        path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(part in ("", ".", "..") for part in parts)
    ):
        yield Finding(
            path,
            "",
            "path-traversal",
            "paths must be relative, with no '..', '.', empty components or backslashes",
        )
        return
    if parts[0] not in ALLOWED_ROOTS or len(parts) == 1:
        yield Finding(
            path,
            "",
            "path-root",
            f"files belong under {', '.join(r + '/' for r in ALLOWED_ROOTS)}",
        )
        return
    if parts[0] == "tenants" and len(parts) > 2:
        problem = names.dns1123_label_problem(parts[1])
        if problem:
            yield Finding(path, "", "tenant-name", f"tenant directory name: {problem}")


def _is_flux(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).startswith(FLUX_GROUPS)


def _effective_namespace(files: Mapping[str, bytes], path: str, obj: Mapping[str, Any]) -> str:
    """The namespace the object lands in: its own, or that of the nearest kustomization file
    (up to the tenant directory) that sets ``namespace:``."""
    metadata = mapping(obj.get("metadata"))
    if metadata.get("namespace"):
        return str(metadata["namespace"])
    directory = posixpath.dirname(path)
    while directory.count("/") >= 1:
        for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
            kfile = f"{directory}/{name}"
            if kfile in files:
                kustomization = load_kustomization(files, kfile)
                namespace = kustomization_refs(kustomization).namespace if kustomization else None
                if namespace:
                    return namespace
        directory = posixpath.dirname(directory)
    return ""


class _Rules:
    def __init__(
        self,
        *,
        gateway_namespace: str,
        gateway_name: str | None,
        platform_sources: frozenset[PlatformSource],
        registry: SchemaRegistry,
        forbidden_cluster_roles: frozenset[str],
        portal_subject: tuple[str, str] | None = None,
        gateway_domain: str | None = None,
        tenant_source_url: Callable[[str], str] | None = None,
    ) -> None:
        self.portal_subject = portal_subject
        self.gateway_domain = gateway_domain
        self.tenant_source_url = tenant_source_url
        self.gateway_namespace = gateway_namespace
        self.gateway_name = gateway_name
        self.platform_sources = platform_sources
        self.registry = registry
        self.forbidden_cluster_roles = forbidden_cluster_roles
        # The whole tree, when the rules run on one (a tenant's policy is read from it).
        self.files: Mapping[str, bytes] = {}
        self._patterns: dict[str, str | None] = {}

    def scope(self, obj: Mapping[str, Any]) -> Scope | None:
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        scope = self.registry.scope(api_version, kind)
        if scope is None:
            scope = KNOWN_CRD_SCOPES.get((api_version.rpartition("/")[0], kind))
        return scope

    # Kustomization files ------------------------------------------------------------------------

    def kustomization(self, files: Mapping[str, bytes], path: str) -> list[Finding]:
        slug, tenant_owned = tenant_of(path)
        if slug is None:
            return []
        kustomization = load_kustomization(files, path)
        if kustomization is None:
            return []
        refs = kustomization_refs(kustomization)
        directory = posixpath.dirname(path)
        findings: list[Finding] = []
        if refs.namespace is not None and refs.namespace != slug:
            findings.append(
                Finding(
                    path,
                    "",
                    "kustomize-namespace",
                    f"namespace: {refs.namespace!r} must be {slug!r}, the tenant's namespace",
                )
            )
        tenant_dir = f"tenants/{slug}"
        access = cluster_access.access_dir(path)
        allowed = f"{tenant_dir}/{WORKLOADS_DIR}" if tenant_owned else access or tenant_dir
        confined = tenant_owned or access is not None
        for ref in (*refs.resources, *refs.inputs):
            if is_remote_reference(ref):
                findings.append(Finding(path, "", "kustomize-remote", f"remote reference {ref!r}"))
                continue
            target = resolve_reference(directory, ref)
            if target is None:
                findings.append(
                    Finding(path, "", "kustomize-escape", f"{ref!r} points outside the repository")
                )
            elif confined and not _within(target, allowed):
                findings.append(
                    Finding(
                        path,
                        "",
                        "kustomize-escape",
                        f"{ref!r} leaves {allowed}/: "
                        + (
                            "tenant workloads may only include their own files"
                            if tenant_owned
                            else "a cluster's bindings directory may only include its own files"
                        ),
                    )
                )
            elif _within(target, "tenants") and not _within(target, tenant_dir) and target:
                findings.append(
                    Finding(
                        path,
                        "",
                        "kustomize-escape",
                        f"{ref!r} reads another tenant's directory",
                    )
                )
        return findings

    # Objects -------------------------------------------------------------------------------------

    def workload_object(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        ref = object_ref(obj)
        kind = str(obj.get("kind"))
        findings: list[Finding] = []

        def add(rule: str, message: str) -> None:
            findings.append(Finding(path, ref, rule, message))

        scope = self.scope(obj)
        if scope == "Cluster":
            add("cluster-scoped", f"{kind} is cluster-scoped; tenant workloads are namespaced only")
            return findings
        if scope is None:
            add(
                "unknown-scope",
                f"{obj.get('apiVersion')} {kind} is unknown, so it cannot be shown to be "
                "namespaced",
            )
        if kind in FORBIDDEN_WORKLOAD_KINDS:
            add(
                "forbidden-kind", f"{kind} acts on other namespaces and is reserved to the platform"
            )
        namespace = mapping(obj.get("metadata")).get("namespace")
        if namespace is not None and namespace != slug:
            add("namespace", f"namespace {namespace!r} must be {slug!r} (or left out)")
        findings.extend(vcluster.service_account_findings(path, obj))
        findings.extend(_job_account_findings(path, obj))
        findings.extend(_impersonation_findings(path, obj, platform=False))
        findings.extend(_default_queue(path, obj))
        findings.extend(self._vcluster_release(path, obj, slug))
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            role_ref = mapping(obj.get("roleRef"))
            if (
                role_ref.get("kind") == "ClusterRole"
                and role_ref.get("name") in self.forbidden_cluster_roles
            ):
                add(
                    "cluster-admin",
                    f"binding ClusterRole {role_ref.get('name')!r} is reserved to the platform",
                )
        spec = mapping(obj.get("spec"))
        if (
            _is_flux(obj)
            and kind in ("Kustomization", "HelmRelease")
            and not spec.get("serviceAccountName")
            and not spec.get("kubeConfig")
        ):
            # Without it, the controller's own (cluster-wide) identity applies the result,
            # unless the fleet runs Flux with --default-service-account: do not rely on that.
            add(
                "flux-impersonation",
                "spec.serviceAccountName is required on a tenant's own Flux objects",
            )
        if kind in HOSTNAME_ROUTE_KINDS:
            findings.extend(self._route_confinement(path, obj, slug))
        findings.extend(_backend_findings(path, obj))
        if kind == "ConfigMap" and _labels(obj).get(LITELLM_MODEL_LABEL) is not None:
            add(
                "litellm-config",
                "LiteLLM model configuration is platform-owned (LiteLLM follows its api_base and "
                "reads its own environment through os.environ/); ask for an endpoint instead",
            )
        findings.extend(self._references(path, obj, slug, allow_platform_sources=False))
        return findings

    def _route_confinement(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        """A tenant route serves the tenant's own host only, and carries the tenant label the
        gateway's key check selects routes by."""
        ref = object_ref(obj)
        findings: list[Finding] = []
        if _labels(obj).get(TENANT_LABEL) != slug:
            findings.append(
                Finding(
                    path,
                    ref,
                    "route-label",
                    f"metadata.labels.{TENANT_LABEL} must be {slug!r}: the gateway asks for the "
                    "tenant's API key on the routes that carry it",
                )
            )
        if self.gateway_domain is None:
            return findings
        own = f"{slug}.{self.gateway_domain}"
        hostnames = mapping(obj.get("spec")).get("hostnames")
        if not isinstance(hostnames, list) or not hostnames:
            findings.append(
                Finding(
                    path,
                    ref,
                    "route-hostname",
                    f"spec.hostnames must be [{own!r}]: a route without hostnames takes every "
                    "host of the gateway's listener, other tenants' included",
                )
            )
            return findings
        foreign = [h for h in hostnames if h != own]
        if foreign:
            findings.append(
                Finding(
                    path,
                    ref,
                    "route-hostname",
                    f"spec.hostnames {', '.join(map(repr, foreign))} "
                    f"{'is' if len(foreign) == 1 else 'are'} not the tenant's own host {own!r}",
                )
            )
        return findings

    def _litellm_config(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        """What a platform-owned LiteLLM model ConfigMap may say."""
        ref = object_ref(obj)
        findings: list[Finding] = []
        data = mapping(obj.get("data"))
        for key, value in data.items():
            if LITELLM_ENV_REFERENCE in str(value):
                findings.append(
                    Finding(
                        path,
                        ref,
                        "litellm-environ",
                        f"data.{key} uses {LITELLM_ENV_REFERENCE}: LiteLLM would fill in its own "
                        "environment (its secrets) and send it on",
                    )
                )
        try:
            entries = yaml.safe_load(str(data.get(LITELLM_DATA_KEY, "")))
        except yaml.YAMLError:
            entries = None
        if not isinstance(entries, list) or not entries:
            findings.append(
                Finding(
                    path,
                    ref,
                    "litellm-api-base",
                    f"data.{LITELLM_DATA_KEY} must be a list of model_list entries",
                )
            )
            return findings
        for index, entry in enumerate(entries):
            params = mapping(mapping(entry).get("litellm_params"))
            api_base = params.get("api_base")
            if not isinstance(api_base, str) or not self._tenant_api_base(api_base, slug):
                findings.append(
                    Finding(
                        path,
                        ref,
                        "litellm-api-base",
                        f"model_list[{index}].litellm_params.api_base {api_base!r} must be a "
                        f"Service of namespace {slug!r} or the tenant's own gateway host: "
                        "LiteLLM sends the prompts there",
                    )
                )
        return findings

    def _tenant_api_base(self, url: str, slug: str) -> bool:
        match = _URL.fullmatch(url)
        if match is None:
            return False
        scheme, host = match.group("scheme"), match.group("host")
        inside = re.fullmatch(
            rf"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.{re.escape(slug)}\.svc(\.cluster\.local)?", host
        )
        if inside is not None:
            return True
        return (
            scheme == "https"
            and self.gateway_domain is not None
            and host == f"{slug}.{self.gateway_domain}"
        )

    def platform_object(
        self, path: str, obj: Mapping[str, Any], slug: str, namespace: str
    ) -> list[Finding]:
        ref = object_ref(obj)
        kind = str(obj.get("kind"))
        name = mapping(obj.get("metadata")).get("name")
        findings: list[Finding] = []

        def add(rule: str, message: str) -> None:
            findings.append(Finding(path, ref, rule, message))

        scope = self.scope(obj)
        if scope == "Cluster":
            own = (kind == "Namespace" and str(obj.get("apiVersion")) == "v1") or (
                kind == "ClusterQueue" and str(obj.get("apiVersion")).startswith("kueue.x-k8s.io/")
            )
            # The flavor of the tenant's own nodes (gitops.render.reservations): named
            # <pool>.<slug> and selecting only nodes reserved for the tenant.
            reserved = (
                kind == "ResourceFlavor"
                and str(obj.get("apiVersion")).startswith("kueue.x-k8s.io/")
                and isinstance(name, str)
                and name.endswith(f".{slug}")
                and mapping(mapping(obj.get("spec")).get("nodeLabels")).get(RESERVED_KEY) == slug
            )
            if reserved:
                return findings
            if not own or name != slug:
                add(
                    "cluster-scoped",
                    f"the only cluster-scoped objects in tenants/{slug}/ are the Namespace, "
                    f"the Kueue ClusterQueue named {slug!r} and the ResourceFlavors of its "
                    f"reserved nodes (<pool>.{slug}, selecting {RESERVED_KEY}: {slug})",
                )
            return findings
        if scope is None:
            add("unknown-scope", f"{obj.get('apiVersion')} {kind} is unknown")
        findings.extend(_impersonation_findings(path, obj, platform=True))
        findings.extend(_default_queue(path, obj))
        findings.extend(self._vcluster_release(path, obj, slug))
        if _platform_release_for(obj, slug):
            # The release is the platform's (helm-controller in flux-system installs it), and
            # everything it installs lands in the tenant's namespace.
            return findings + list(self._references(path, obj, slug, allow_platform_sources=True))
        if namespace != slug:
            add(
                "namespace",
                f"must be in namespace {slug!r}"
                + (f", not {namespace!r}" if namespace else " (no namespace set)"),
            )
        if kind == "Kustomization" and _is_flux(obj):
            findings += self._flux_kustomization(path, obj, slug)
            findings += cluster_access.kustomization_findings(path, obj, slug)
        if kind == "ConfigMap" and _labels(obj).get(LITELLM_MODEL_LABEL) is not None:
            findings += self._litellm_config(path, obj, slug)
        if kind == "GitRepository" and _is_flux(obj):
            findings += self._tenant_source(path, obj, slug)
        findings += self._references(path, obj, slug, allow_platform_sources=True)
        return findings

    def _registry_patterns(self, slug: str) -> str | None:
        """The tenant's image rule, parsed once per tenant however many clusters it has."""
        if slug not in self._patterns:
            self._patterns[slug] = vcluster.registry_patterns(self.files, slug)
        return self._patterns[slug]

    def _vcluster_release(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        if not vcluster.is_vcluster_release(obj):
            return []
        return vcluster.release_findings(path, obj, CHART_VERSION, self._registry_patterns(slug))

    def _tenant_source(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        """The tenant's Flux source reads its own projection repository, with credentials.

        Without a secretRef the portal's Git endpoint answers 401 and nothing of the tenant is
        ever applied; pointed at the fleet repository (or another tenant's), the source would
        hand every tenant's files and every open change to this tenant's namespace.
        """
        ref = object_ref(obj)
        spec = mapping(obj.get("spec"))
        findings: list[Finding] = []
        if not mapping(spec.get("secretRef")).get("name"):
            findings.append(
                Finding(
                    path,
                    ref,
                    "tenant-source",
                    "spec.secretRef is required: the tenant's source authenticates with the "
                    "token the portal writes into the tenant's namespace",
                )
            )
        if self.tenant_source_url is not None:
            expected = self.tenant_source_url(slug)
            if str(spec.get("url", "")).rstrip("/") != expected.rstrip("/"):
                findings.append(
                    Finding(
                        path,
                        ref,
                        "tenant-source",
                        f"spec.url must be the tenant's own read-only repository {expected}, "
                        f"not {spec.get('url')!r}",
                    )
                )
        return findings

    def _flux_kustomization(self, path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
        ref = object_ref(obj)
        spec = mapping(obj.get("spec"))
        findings: list[Finding] = []
        target = resolve_reference("", str(spec.get("path") or "."))
        if target is None or not _within(target, f"tenants/{slug}"):
            findings.append(
                Finding(
                    path,
                    ref,
                    "flux-path",
                    f"spec.path {spec.get('path')!r} must be inside tenants/{slug}/",
                )
            )
        if not spec.get("serviceAccountName"):
            findings.append(
                Finding(
                    path,
                    ref,
                    "flux-impersonation",
                    "spec.serviceAccountName is required: without it Flux applies the tenant's "
                    "files with its own cluster-wide rights",
                )
            )
        return findings

    def _references(
        self, path: str, obj: Mapping[str, Any], slug: str, *, allow_platform_sources: bool
    ) -> Iterator[Finding]:
        """References that carry a namespace (or point at a cluster-wide object)."""
        ref = object_ref(obj)
        kind = str(obj.get("kind"))
        flux = _is_flux(obj)
        for where, key, value in _walk(obj):
            if key == "namespace" and where and isinstance(value, str) and value != slug:
                holder = str(where[-1] if isinstance(where[-1], str) else where[-2])
                # Only references: a "namespace" key in free-form data (a ConfigMap, Helm
                # values) or the object's own metadata is not one.
                if not holder.endswith(("Ref", "Refs")) and holder not in ("subjects", "dependsOn"):
                    continue
                parent = _lookup(obj, where)
                if (
                    holder == "parentRefs"
                    and self._is_gateway(parent)
                    and (kind in ROUTE_KINDS or allow_platform_sources)
                ):
                    # Routes attach to the fleet gateway; so may a platform-owned release's
                    # (the vCluster chart's TLSRoute, in its values).
                    continue
                if holder == "dependsOn":
                    continue  # ordering only; Flux reads its status, nothing is applied there
                if holder == "subjects" and (
                    allow_platform_sources and self._is_portal_grant(obj, _lookup(obj, where))
                ):
                    continue
                if holder == "subjects":
                    yield Finding(
                        path,
                        ref,
                        "cross-namespace-subject",
                        f"{_dotted(where)} grants to namespace {value!r}",
                    )
                    continue
                if flux and allow_platform_sources and holder in ("sourceRef", "chartRef"):
                    source_kind = str(parent.get("kind", ""))
                    if (source_kind, value, str(parent.get("name"))) in self.platform_sources:
                        continue
                yield Finding(
                    path,
                    ref,
                    "cross-namespace-ref",
                    f"{_dotted(where)}.namespace {value!r} is another namespace"
                    + (
                        " (only the platform's own sources may be referenced)"
                        if flux and allow_platform_sources and holder in ("sourceRef", "chartRef")
                        else ""
                    ),
                )
            elif (
                key in ("targetNamespace", "storageNamespace")
                and flux
                and isinstance(value, str)
                and value != slug
            ):
                yield Finding(
                    path,
                    ref,
                    "cross-namespace-ref",
                    f"spec.{key} {value!r} must be {slug!r}",
                )
            elif key in ("secretStoreRef", "storeRef") and isinstance(value, dict):
                if value.get("kind") != "ClusterSecretStore":
                    continue
                if allow_platform_sources and kind == "ExternalSecret":
                    foreign = _foreign_remote_keys(obj, slug)
                    if foreign:
                        yield Finding(
                            path,
                            ref,
                            "cluster-secret-store",
                            f"a platform-owned ExternalSecret may read only keys under "
                            f"{secrets.remote_prefix(slug)!r} from a ClusterSecretStore, "
                            f"not {', '.join(foreign)}",
                        )
                    continue
                yield Finding(
                    path,
                    ref,
                    "cluster-secret-store",
                    "a ClusterSecretStore serves every namespace; use the tenant's SecretStore",
                )
            elif (
                key == "clusterQueue"
                and kind == "LocalQueue"
                and isinstance(value, str)
                and value != slug
            ):
                yield Finding(
                    path,
                    ref,
                    "foreign-cluster-queue",
                    f"spec.clusterQueue {value!r} is not the tenant's ClusterQueue {slug!r}",
                )

    def _is_portal_grant(self, binding: Mapping[str, Any], subject: Any) -> bool:
        """The portal's service account bound to a Role of the tenant's own namespace: it
        reads what that Role lists there and nothing elsewhere."""
        if self.portal_subject is None or not isinstance(subject, dict):
            return False
        role_ref = binding.get("roleRef")
        return (
            binding.get("kind") == "RoleBinding"
            and isinstance(role_ref, dict)
            and role_ref.get("kind") == "Role"
            and subject.get("kind") == "ServiceAccount"
            and (subject.get("namespace"), subject.get("name")) == self.portal_subject
        )

    def _is_gateway(self, parent: Any) -> bool:
        if not isinstance(parent, dict):
            return False
        if parent.get("namespace") != self.gateway_namespace:
            return False
        if parent.get("kind", "Gateway") != "Gateway":
            return False
        return self.gateway_name is None or parent.get("name") == self.gateway_name


def _impersonation_findings(
    path: str, obj: Mapping[str, Any], *, platform: bool
) -> Iterator[Finding]:
    """Rules of a Role or ClusterRole that grant ``impersonate``, unless it is the one rule
    the platform renders in a tenant namespace's Role (see the module's docstring)."""
    kind = obj.get("kind")
    if kind not in ("Role", "ClusterRole") or not str(obj.get("apiVersion")).startswith(
        "rbac.authorization.k8s.io/"
    ):
        return
    for index, rule in enumerate(obj.get("rules") or []):
        rule = mapping(rule)
        if not _grants_impersonation(rule):
            continue
        if platform and kind == "Role" and _is_job_account_impersonation(rule):
            continue
        yield Finding(
            path,
            object_ref(obj),
            "impersonation",
            f"rules[{index}] grants impersonate on {_names(rule.get('resources'))}"
            + (
                f" named {_names(rule.get('resourceNames'))}"
                if rule.get("resourceNames")
                else " by any name"
            )
            + ": a tenant directory may only let the portal impersonate the tenant's job "
            f"service accounts ({', '.join(rbac.JOB_ACCOUNTS)}) by name, in a Role the "
            "platform renders",
        )


def _grants_impersonation(rule: Mapping[str, Any]) -> bool:
    verbs = {str(v) for v in rule.get("verbs") or []}
    resources = {str(r).split("/")[0] for r in rule.get("resources") or []}
    return bool(verbs & {"impersonate", "*"}) and bool(resources & IMPERSONABLE)


def _is_job_account_impersonation(rule: Mapping[str, Any]) -> bool:
    names = [str(n) for n in rule.get("resourceNames") or []]
    return (
        list(rule.get("verbs") or []) == ["impersonate"]
        and list(rule.get("apiGroups") or []) == [""]
        and list(rule.get("resources") or []) == ["serviceaccounts"]
        and bool(names)
        and set(names) <= set(rbac.JOB_ACCOUNTS)
    )


def _names(values: Any) -> str:
    return ", ".join(repr(str(v)) for v in values or []) or "nothing"


def _job_account_findings(path: str, obj: Mapping[str, Any]) -> Iterator[Finding]:
    """A tenant-owned object that runs as one of the job accounts, defines one, or asks for a
    token of one: whoever holds its token acts as the tenant's job runner without the portal
    (no record, no audit of who)."""
    metadata_name = mapping(obj.get("metadata")).get("name")
    if obj.get("kind") == "ServiceAccount" and metadata_name in rbac.JOB_ACCOUNTS:
        yield Finding(
            path,
            object_ref(obj),
            "job-service-account",
            f"ServiceAccount {metadata_name!r} is the platform's (the identity the portal "
            "submits batch jobs as)",
        )
    for where, key, value in _walk(obj):
        if key in ACCOUNT_KEYS and value in rbac.JOB_ACCOUNTS:
            yield Finding(
                path,
                object_ref(obj),
                "job-service-account",
                f"{_dotted((*where, key))} {value!r}: the job service accounts are for the "
                "portal to impersonate, never for a tenant's pods or tokens",
            )


def _foreign_remote_keys(obj: Mapping[str, Any], slug: str) -> list[str]:
    """The remote keys of an ExternalSecret outside the tenant's own prefix (a ``find``, which
    matches keys by pattern, counts as one): a ClusterSecretStore answers every namespace, so
    the key is what keeps one tenant's credentials from another's namespace."""
    spec = mapping(obj.get("spec"))
    prefix = secrets.remote_prefix(slug)
    keys: list[str] = []
    foreign: list[str] = []
    for entry in spec.get("data") or []:
        keys.append(str(mapping(mapping(entry).get("remoteRef")).get("key", "")))
    for entry in spec.get("dataFrom") or []:
        entry = mapping(entry)
        if entry.get("find") is not None:
            foreign.append("a find")
        if entry.get("extract") is not None:
            keys.append(str(mapping(entry.get("extract")).get("key", "")))
    foreign += [
        repr(key)
        for key in keys
        if not key.startswith(prefix) or ".." in key.split("/") or key == prefix
    ]
    return foreign


def _default_queue(path: str, obj: Mapping[str, Any]) -> list[Finding]:
    """Kueue's LocalQueueDefaulting gives a LocalQueue named "default" every workload of its
    namespace that names no queue (see ``gitops.render.meta.LOCAL_QUEUE``)."""
    if (
        obj.get("kind") == "LocalQueue"
        and str(obj.get("apiVersion", "")).startswith("kueue.x-k8s.io/")
        and mapping(obj.get("metadata")).get("name") == "default"
    ):
        return [
            Finding(
                path,
                object_ref(obj),
                "default-local-queue",
                "a LocalQueue named 'default' captures every workload of the namespace that "
                "names no queue (the vCluster control plane, CoreDNS), pinning them to GPU "
                f"flavors or gating them; name it {LOCAL_QUEUE!r}",
            )
        ]
    return []


_URL = re.compile(r"(?P<scheme>https?)://(?P<host>[A-Za-z0-9.-]+)(:[0-9]{1,5})?(/[^\s?#]*)?")


def _pod_label_maps(obj: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The labels a pod, or the pods a workload object creates, would carry."""
    spec = mapping(obj.get("spec"))
    templates = (
        mapping(spec.get("template")),
        mapping(mapping(mapping(spec.get("jobTemplate")).get("spec")).get("template")),
    )
    if obj.get("kind") == "Pod":
        yield _labels(obj)
    for template in templates:
        yield _labels(template)


def _backend_findings(path: str, obj: Mapping[str, Any]) -> Iterator[Finding]:
    """What a tenant's own objects may not do to the network (``gitops.render.network``): carry
    the labels its policies trust, or give a route a backend other than the tenant's pods."""
    ref = object_ref(obj)
    kind = obj.get("kind")
    for labels in _pod_label_maps(obj):
        reserved = [key for key in RESERVED_LABEL_KEYS if key in labels] + [
            f"{key}: {value}" for key, value in RESERVED_LABELS if labels.get(key) == value
        ]
        if reserved:
            yield Finding(
                path,
                ref,
                "reserved-label",
                f"{', '.join(reserved)} marks the platform's model servers or tenant-cluster "
                "control planes, whose network access depends on it; tenant workloads may not "
                "carry it",
            )
    spec = mapping(obj.get("spec"))
    if kind == "Service" and (spec.get("type") == "ExternalName" or not spec.get("selector")):
        yield Finding(
            path,
            ref,
            "service-selector",
            "a tenant Service needs a selector and may not be an ExternalName: without one its "
            "endpoints, and the routes that use it, could point at any address",
        )
    if kind in ROUTE_KINDS:
        for rule in spec.get("rules") or []:
            for backend in mapping(rule).get("backendRefs") or []:
                backend = mapping(backend)
                if backend.get("kind", "Service") != "Service" or backend.get("group", "") not in (
                    "",
                    "core",
                ):
                    yield Finding(
                        path,
                        ref,
                        "route-backend",
                        f"backend {backend.get('group', '')}/{backend.get('kind')} "
                        f"{backend.get('name')!r}: a tenant route may only use Services",
                    )


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(mapping(obj.get("metadata")).get("labels"))


def _within(path: str, directory: str) -> bool:
    return not directory or path == directory or path.startswith(f"{directory}/")


def reservation_findings(path: str, obj: Mapping[str, Any], slug: str) -> list[Finding]:
    """Where an object of tenant ``slug`` reaches nodes reserved for another tenant (the
    module docstring's reserved-node rule)."""
    ref = object_ref(obj)
    problems: list[str] = []
    for where, key, value in _walk(obj):
        dotted = _dotted((*where, key))
        if key == RESERVED_KEY and value != slug:
            problems.append(f"{dotted} selects nodes reserved for {value!r}")
        elif key == "matchExpressions" and isinstance(value, list):
            for index, expression in enumerate(value):
                expression = mapping(expression)
                values = expression.get("values")
                if (
                    expression.get("key") == RESERVED_KEY
                    and expression.get("operator") in ("In", "Exists")
                    and (not isinstance(values, list) or any(v != slug for v in values))
                ):
                    problems.append(f"{dotted}[{index}] selects nodes reserved for another tenant")
        elif key == "tolerations" and isinstance(value, list):
            for index, toleration in enumerate(value):
                toleration = mapping(toleration)
                if toleration.get("key") != RESERVED_KEY:
                    continue
                if toleration.get("operator") == "Exists" or toleration.get("value") != slug:
                    problems.append(
                        f"{dotted}[{index}] tolerates nodes reserved for another tenant"
                    )
        elif key == "enforceTolerations" and isinstance(value, list):
            # vCluster's "key[=value][:Effect]" (v0.35.3 pkg/util/toleration ParseToleration).
            for index, text in enumerate(value):
                if not isinstance(text, str):
                    continue
                spec = text.split(":", 1)[0]
                if spec.split("=", 1)[0] == RESERVED_KEY and spec != f"{RESERVED_KEY}={slug}":
                    problems.append(
                        f"{dotted}[{index}] tolerates nodes reserved for another tenant"
                    )
    kind = obj.get("kind")
    name = str(mapping(obj.get("metadata")).get("name", ""))
    if kind == "ResourceFlavor" and "." in name and name.rpartition(".")[2] != slug:
        problems.append(f"the flavor {name} is another tenant's reserved nodes")
    if kind == "ClusterQueue":
        groups = sequence(mapping(obj.get("spec")).get("resourceGroups"))
        for g, group in enumerate(groups):
            for f, flavor in enumerate(sequence(mapping(group).get("flavors"))):
                value = mapping(flavor).get("name")
                if isinstance(value, str) and "." in value and value.rpartition(".")[2] != slug:
                    problems.append(
                        f"spec.resourceGroups[{g}].flavors[{f}] queues on flavor {value}, "
                        "reserved nodes"
                    )
    return [
        Finding(path, ref, "reserved-nodes", f"{problem}; a tenant's own nodes are its alone")
        for problem in problems
    ]


def _walk(value: Any, where: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    """(path of the mapping, key, value) for every key of every mapping under ``value``."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield where, str(key), child
            yield from _walk(child, (*where, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, (*where, index))


def _lookup(value: Any, where: tuple[Any, ...]) -> Any:
    for part in where:
        value = value[part]
    return value


def _dotted(where: tuple[Any, ...]) -> str:
    out = ""
    for part in where:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _platform_release_for(obj: Mapping[str, Any], slug: str) -> bool:
    """A Flux HelmRelease in flux-system that installs into, and stores its state in, the
    tenant's namespace: how the platform owns a tenant's vCluster."""
    if obj.get("kind") != "HelmRelease" or not _is_flux(obj):
        return False
    spec = mapping(obj.get("spec"))
    return (
        mapping(obj.get("metadata")).get("namespace") == "flux-system"
        and spec.get("targetNamespace") == slug
        and spec.get("storageNamespace") == slug
    )
