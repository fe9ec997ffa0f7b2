"""Checks a spec must pass before anything is rendered.

``validate_tenant`` and ``validate_fleet`` raise ``SpecError`` mapping a field path
(``shares[1].mig_profile``) to a sentence the person who filled in the form can act on. They
check what the renderers rely on and what Kubernetes would reject later, where it is cheaper
to say it now: names that become object names or file names (DNS labels, so no path
traversal either), derived names that must stay within 63 characters, counts against the
fleet's capacity, and combinations the fleet cannot run (a MIG share on a whole-GPU pool, HAMi
for a dedicated tenant, MIG for a dedicated tenant without the platform admin's opt-in).

Checks that need the whole repository (two tenants' shares together against the fleet) are
the capacity check's job in ``gitops.checks``.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date
from fractions import Fraction
from typing import Any, get_args
from urllib.parse import urlsplit

from gitops.render import cluster_access, kueue_config, reservations, resources, stack, vcluster
from gitops.render.meta import FLUX_NAMESPACE
from gitops.specs import (
    ClusterMember,
    ClusterOidc,
    ClusterSize,
    EndpointSpec,
    Fabric,
    FabricKind,
    Flavor,
    FleetSpec,
    GatewayImplementation,
    GpuMode,
    GpuShare,
    MemberRole,
    PodsReady,
    ScaleMetric,
    ShareKind,
    SpecError,
    TenantClusterSpec,
    TenantSpec,
    TrustLevel,
    UsernameClaim,
)

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# registry host (with a dot or a port), repository path, tag: all three, so nothing is implied.
IMAGE_REF = re.compile(
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(\.[a-z0-9]+|:[0-9]+)/[a-z0-9]+([._/-][a-z0-9]+)*"
    r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
)
ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
GIT_URL = re.compile(r"(https?|ssh)://[^\s]+")
HTTP_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
GIT_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
REGISTRY_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
# hf://<org>/<repo>[:<revision>], s3://<bucket>/<key>, pvc://<claim>[/<path>]
# A claim name as kube-apiserver's --oidc-groups-claim takes it (one JSON key, no spaces).
CLAIM_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")
# An OAuth client id as a flag value: printable, no spaces or commas.
CLIENT_ID = re.compile(r"[\x21-\x2b\x2d-\x7e]{1,255}")
MODEL_URI = {
    "hf": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9._-]+)?"),
    "s3": re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()=+-]+)*/?"),
    "pvc": re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[A-Za-z0-9._-]+)*/?"),
}
# What text people type may not carry into a manifest or onto a page (``text_problem``). Line
# breaks and other control characters (Unicode categories Cc, with C1's NEL U+0085, and the
# line and paragraph separators Zl U+2028 and Zp U+2029, which YAML and JavaScript read as line
# breaks): a one-line value must stay one line. And every format character (Cf), invisible:
# the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) show text in
# another order than it is stored and read by tools ("Trojan Source", CVE-2021-42574), and the
# zero-width ones make two names look alike. None is spared, not even the joiners (U+200C,
# U+200D) some scripts and emoji use: a name reads the same without them, and one that looks
# like another's is the greater harm.
BREAKING = frozenset({"Cc", "Zl", "Zp"})
INVISIBLE = frozenset({"Cf"})
# In text of several lines (a request's reason): the line feed, the return and the tab.
MULTI_LINE_ALLOWED = frozenset("\n\r\t")


def text_problem(value: str, *, multi_line: bool = False) -> str:
    """What keeps ``value`` out of a manifest or a page, to follow "may not contain", or ""
    when nothing does. ``multi_line`` allows line feeds, returns and tabs."""
    for char in value:
        if multi_line and char in MULTI_LINE_ALLOWED:
            continue
        category = unicodedata.category(char)
        if category in INVISIBLE:
            return (
                f"invisible formatting characters such as bidi overrides (it has U+{ord(char):04X})"
            )
        if category in BREAKING:
            return "control characters" if multi_line else "line breaks or other control characters"
    return ""


# A slug is a namespace and the prefix of names such as "<slug>-<cluster>".
TENANT_SLUG_MAX = 40
# A tenant's namespace is named after its slug, and the platform writes the tenant's Namespace
# (labels, Pod Security), quota, policies and RoleBindings into it with full rights. A tenant
# named after a namespace of the platform's own components would have all of that written over
# the component's namespace, and the tenant's Flux would apply workloads into it. These are
# Kubernetes' own namespaces and those the components of the operator's guide are installed in
# by their own instructions (the fleet file's defaults among them, in case it names others);
# the namespaces the fleet file configures are added by reserved_namespaces.
PLATFORM_NAMESPACES = frozenset(
    {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        FLUX_NAMESPACE,
        kueue_config.NAMESPACE,
        "kserve",
        "kyverno",
        "cert-manager",
        "gpu-operator",
        "nvidia-dra-driver-gpu",
        "monitoring",
        "keda",
        "external-secrets",
        "envoy-gateway-system",
        # Cilium keeps the Gateway's TLS Secrets here when its Gateway API support is on.
        "cilium-secrets",
        "jobset-system",
        "litellm",
        "portal-system",
        "gateway-system",
    }
)
# Kubernetes creates kube-* namespaces of its own; flux-* are Flux's.
RESERVED_PREFIXES = ("kube-", "flux-")
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Tenants are served on "<slug>.<gateway hostname>", a DNS name of at most 253 characters.
GATEWAY_DOMAIN_MAX = 253 - TENANT_SLUG_MAX - 1
# Kueue allows 8 node labels on a ResourceFlavor; the renderer adds the product label.
MAX_FLAVOR_NODE_LABELS = 7
# KServe names the predictor Service "<name>-predictor" and hosts "<name>-<namespace>.<domain>".
ENDPOINT_NAME_MAX = 45
# Helm release names are at most 53 characters; a vCluster is released under its own name.
HELM_RELEASE_MAX = 53
KUBECONFIG_SUFFIX = "-kubeconfig"
DRA_TEMPLATE_SUFFIX = "-gpus"
MAX_ARGS = 64
MAX_ARG_LENGTH = 1024
MAX_REPLICAS = 100
# The scale metrics gitops.render.kserve serves through KEDA, the only autoscaler that scales
# an endpoint to zero and back.
KEDA_METRICS = ("concurrency", "rps")
MAX_URI_LENGTH = 512
SANE_LIMITS = {
    "cpu_quota": 100_000,
    "memory_gib": 1_000_000,
    "max_pods": 100_000,
    "storage_gib": 10_000_000,
    "fair_share_weight": 1_000,
    "endpoint_cpu": 512,
    "endpoint_memory_gib": 16_384,
    "flavor_gpus": 1_000_000,
    "gpu_memory_mib": 1 << 22,
}


class _Errors:
    """Collects the first problem found per field path."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def add(self, path: str, message: str) -> None:
        self.errors.setdefault(path, message)

    def raise_if_any(self) -> None:
        if self.errors:
            raise SpecError(self.errors)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(items: Iterable[str]) -> str:
    listed = ", ".join(sorted(items))
    return listed or "none"


def _check_int(errors: _Errors, path: str, value: object, low: int, high: int, what: str) -> bool:
    """Whether ``value`` is a whole number in ``low..high``; records a sentence if not."""
    if not _is_int(value):
        errors.add(path, f"{what} must be a whole number.")
        return False
    assert isinstance(value, int)
    if value < low:
        errors.add(path, f"{what} must be at least {low} (got {value}).")
        return False
    if value > high:
        errors.add(path, f"{what} must be at most {high} (got {value}).")
        return False
    return True


def _check_label(
    errors: _Errors,
    path: str,
    value: object,
    what: str,
    *,
    max_length: int = 63,
    dns1035: bool = False,
) -> bool:
    if not isinstance(value, str) or not value:
        errors.add(path, f"{what} is required.")
        return False
    if len(value) > max_length:
        errors.add(
            path, f"{what} must be at most {max_length} characters (this one has {len(value)})."
        )
        return False
    pattern = DNS1035_LABEL if dns1035 else DNS1123_LABEL
    if not pattern.fullmatch(value):
        first = "a letter" if dns1035 else "a letter or digit"
        errors.add(
            path,
            f"{what} may use only lower-case letters, digits and '-', and must start with "
            f"{first} and end with a letter or digit (a Kubernetes DNS label).",
        )
        return False
    return True


def _check_subdomain(errors: _Errors, path: str, value: object, what: str) -> None:
    """A Kubernetes object name (DNS-1123 subdomain), as Secrets and cluster objects use."""
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        errors.add(
            path,
            f"{what} must be a Kubernetes object name: lower-case letters, digits, '-' and '.', "
            "at most 253 characters.",
        )


def _check_text(errors: _Errors, path: str, value: object, what: str, max_length: int) -> None:
    if not isinstance(value, str):
        errors.add(path, f"{what} must be text.")
    elif len(value) > max_length:
        errors.add(path, f"{what} must be at most {max_length} characters.")
    elif problem := text_problem(value):
        errors.add(path, f"{what} may not contain {problem}.")


def _check_choice(
    errors: _Errors, path: str, value: object, choices: Sequence[str], what: str
) -> bool:
    if value not in choices:
        errors.add(path, f"{what} must be one of {', '.join(choices)} (got {value!r}).")
        return False
    return True


def _check_label_key(errors: _Errors, path: str, key: object, what: str) -> bool:
    if not isinstance(key, str) or not key:
        errors.add(path, f"{what} is required.")
        return False
    prefix, _, name = key.rpartition("/")
    if (
        len(name) > 63
        or not QUALIFIED_NAME.fullmatch(name)
        or (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)))
    ):
        errors.add(
            path,
            f"{what} {key!r} is not a valid label key (an optional DNS prefix and '/', then up "
            "to 63 letters, digits, '-', '_' or '.').",
        )
        return False
    return True


def _duplicates(errors: _Errors, items: Sequence[Any], field: str, what: str) -> None:
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = getattr(item, "name", None)
        if isinstance(name, str) and name in seen:
            errors.add(f"{field}[{index}].name", f"Another {what} is already named {name!r}.")
        if isinstance(name, str):
            seen.add(name)


# --- the fleet -------------------------------------------------------------------------------


def _validate_kubernetes_version(errors: _Errors, version: Any) -> None:
    from gitops.checks.schema import supported_kubernetes_versions

    known = supported_kubernetes_versions()
    if version not in known:
        errors.add(
            "kubernetes_version",
            f"{version!r} is not a Kubernetes minor version the checks have schemas for "
            f"(one of {', '.join(known)}).",
        )


# Pools that topology-aware scheduling cannot place pods on, and why (gitops.render.kueue).
NO_TOPOLOGY = {
    "hami": (
        "A HAMi pool cannot use topology-aware scheduling: Kueue fits pods against the "
        "nodes' allocatable resources, where HAMi's GPU memory and cores never appear, so "
        "no HAMi pod would be admitted. Leave topology out or set it to false."
    ),
    "dra": (
        "A DRA pool cannot use topology-aware scheduling: Kueue sizes pods from their "
        "containers and does not count ResourceClaims (Kueue's DRA limitations), so it "
        "would place DRA pods on nodes without free GPUs. Leave topology out or set it to "
        "false."
    ),
}


def validate_fleet(fleet: FleetSpec) -> None:
    """Raise ``SpecError`` unless the fleet description can be rendered."""
    errors = _Errors()
    _check_label(errors, "name", fleet.name, "The fleet name")
    _check_label(errors, "cohort", fleet.cohort, "The Kueue cohort name")
    if not isinstance(fleet.flavors, tuple):
        errors.add("flavors", "The flavors must be a list.")
    else:
        _duplicates(errors, fleet.flavors, "flavors", "flavor")
        for index, flavor in enumerate(fleet.flavors):
            _validate_flavor(errors, f"flavors[{index}]", flavor)
    _validate_topology(errors, fleet.topology_levels)
    _validate_kubernetes_version(errors, fleet.kubernetes_version)
    if fleet.node_local_dns:
        try:
            ipaddress.ip_address(fleet.node_local_dns)
        except ValueError:
            errors.add(
                "node_local_dns",
                f"{fleet.node_local_dns!r} is not an IP address: give the address NodeLocal "
                "DNSCache listens on (169.254.20.10 by default), or leave it out.",
            )
    if not isinstance(fleet.api_server_cidrs, tuple):
        errors.add("api_server_cidrs", "The API server's addresses must be a list of CIDRs.")
    else:
        for index, cidr in enumerate(fleet.api_server_cidrs):
            try:
                ipaddress.ip_network(cidr)
            except (TypeError, ValueError):
                errors.add(
                    f"api_server_cidrs[{index}]",
                    f"{cidr!r} is not a CIDR such as 10.0.0.1/32: give the addresses of the "
                    "host cluster's API server.",
                )
    if not fleet.allowed_registries:
        errors.add("allowed_registries", "List at least one image registry prefix tenants may use.")
    for index, prefix in enumerate(fleet.allowed_registries):
        if (
            not isinstance(prefix, str)
            or not REGISTRY_PREFIX.fullmatch(prefix)
            or len(prefix) > 253
        ):
            errors.add(
                f"allowed_registries[{index}]",
                f"{prefix!r} is not a registry prefix: use letters, digits and . _ : / - only "
                "(for example 'ghcr.io/my-org/'); wildcards are added by the platform.",
            )
    _check_label(errors, "gateway.name", fleet.gateway.name, "The gateway name")
    _check_label(errors, "gateway.namespace", fleet.gateway.namespace, "The gateway namespace")
    hostname = fleet.gateway.hostname
    if (
        not isinstance(hostname, str)
        or len(hostname) > GATEWAY_DOMAIN_MAX
        or not DNS1123_SUBDOMAIN.fullmatch(hostname)
    ):
        errors.add(
            "gateway.hostname",
            "The gateway hostname must be a lower-case DNS name such as models.example.com, "
            f"at most {GATEWAY_DOMAIN_MAX} characters: each tenant is served on "
            "<tenant>.<hostname>.",
        )
    _check_choice(
        errors,
        "gateway.implementation",
        fleet.gateway.implementation,
        get_args(GatewayImplementation),
        "The gateway implementation",
    )
    _check_label(
        errors,
        "gateway.proxy_namespace",
        fleet.gateway.proxy_namespace,
        "The gateway's proxy namespace",
    )
    _check_subdomain(errors, "gateway.tls_secret", fleet.gateway.tls_secret, "The TLS Secret")
    if fleet.gateway.cluster_issuer:
        _check_subdomain(
            errors, "gateway.cluster_issuer", fleet.gateway.cluster_issuer, "The ClusterIssuer"
        )
    _check_label(errors, "litellm_namespace", fleet.litellm_namespace, "The LiteLLM namespace")
    _check_label(
        errors,
        "gpu_operator_namespace",
        fleet.gpu_operator_namespace,
        "The GPU Operator's namespace",
    )
    _check_label(errors, "hami_namespace", fleet.hami_namespace, "HAMi's namespace")
    if fleet.secret_store:
        _check_subdomain(errors, "secret_store", fleet.secret_store, "The ClusterSecretStore")
    _check_label(
        errors, "monitoring_namespace", fleet.monitoring_namespace, "The monitoring namespace"
    )
    _check_label(errors, "portal_namespace", fleet.portal_namespace, "The portal's namespace")
    _check_label(
        errors,
        "portal_service_account",
        fleet.portal_service_account,
        "The portal's service account",
    )
    if not isinstance(fleet.prometheus_url, str) or not HTTP_URL.fullmatch(fleet.prometheus_url):
        errors.add(
            "prometheus_url",
            "The Prometheus URL must look like http://prometheus.monitoring.svc:9090.",
        )
    if fleet.vcluster_chart_version != vcluster.CHART_VERSION:
        errors.add(
            "vcluster_chart_version",
            f"The portal writes values for vCluster chart {vcluster.CHART_VERSION} (the version "
            "its values schema is for); pin that version.",
        )
    domain = fleet.vcluster_api_domain
    if domain and (
        not isinstance(domain, str) or len(domain) > 200 or not DNS1123_SUBDOMAIN.fullmatch(domain)
    ):
        errors.add(
            "vcluster_api_domain",
            "The tenant clusters' API domain must be a lower-case DNS name such as "
            "clusters.example.com (or empty).",
        )
    if not isinstance(fleet.vcluster_hosts_image, str) or not IMAGE_REF.fullmatch(
        fleet.vcluster_hosts_image
    ):
        errors.add(
            "vcluster_hosts_image",
            "Give the rewrite-hosts image as registry/repository:tag, e.g. "
            "ghcr.io/my-org/alpine:3.20.",
        )
    if (
        not isinstance(fleet.git_url, str)
        or len(fleet.git_url) > 2048
        or not GIT_URL.fullmatch(fleet.git_url)
    ):
        errors.add("git_url", "The Git URL must start with http://, https:// or ssh://.")
    branch = fleet.git_branch
    if (
        not isinstance(branch, str)
        or len(branch) > 255
        or not GIT_BRANCH.fullmatch(branch)
        or ".." in branch
        or branch.endswith(("/", ".lock"))
    ):
        errors.add("git_branch", "The Git branch must be a plain branch name such as main.")
    _check_int(
        errors,
        "max_gpus_per_tenant",
        fleet.max_gpus_per_tenant,
        1,
        SANE_LIMITS["flavor_gpus"],
        "The per-tenant GPU cap",
    )
    if fleet.cluster_oidc is not None:
        _validate_cluster_oidc(errors, "cluster_oidc", fleet.cluster_oidc)
    if not isinstance(fleet.stack, bool):
        errors.add("stack", "stack must be true or false.")
    _validate_pods_ready(errors, "pods_ready", fleet.pods_ready)
    if fleet.fabric is not None:
        _validate_fabric(errors, "fabric", fleet.fabric, fleet)
    splits = {f.hami_split for f in fleet.flavors if isinstance(f, Flavor) and f.mode == "hami"}
    if fleet.stack is True and len(splits) > 1:
        # The stack's HAMi release takes one devicePlugin.deviceSplitCount for every node.
        errors.add(
            "flavors",
            "With stack: true the HAMi pools must share one hami_split (HAMi's chart sets one "
            f"split count for all its nodes); they have {sorted(splits)}.",
        )
    errors.raise_if_any()


def _validate_cluster_oidc(errors: _Errors, path: str, oidc: ClusterOidc) -> None:
    """What kube-apiserver would refuse to start with (its issuer URL rules, k8s.io/apiserver
    ``pkg/apis/apiserver/validation``), and what cannot be a flag value."""
    url = oidc.issuer_url
    parts = urlsplit(url) if isinstance(url, str) else None
    if (
        parts is None
        or len(url) > 2048
        or text_problem(url)
        or " " in url
        or parts.scheme != "https"
        or not parts.hostname
    ):
        errors.add(
            f"{path}.issuer_url",
            "The issuer URL must be an https:// URL, such as "
            "https://keycloak.example.com/realms/ai-factory: the clusters' API servers refuse "
            "any other scheme.",
        )
    elif parts.username or parts.password or parts.query or parts.fragment:
        errors.add(
            f"{path}.issuer_url",
            "The issuer URL may not carry a user name, password, query or fragment.",
        )
    if not isinstance(oidc.client_id, str) or not CLIENT_ID.fullmatch(oidc.client_id):
        errors.add(
            f"{path}.client_id",
            "The client id is required: printable characters without spaces or commas.",
        )
    _check_choice(
        errors,
        f"{path}.username_claim",
        oidc.username_claim,
        get_args(UsernameClaim),
        "The username claim",
    )
    if oidc.groups_claim and (
        not isinstance(oidc.groups_claim, str) or not CLAIM_NAME.fullmatch(oidc.groups_claim)
    ):
        errors.add(
            f"{path}.groups_claim",
            "The groups claim must be a claim name such as groups (or empty for none).",
        )


def _validate_flavor(errors: _Errors, path: str, flavor: Flavor) -> None:
    _check_label(errors, f"{path}.name", flavor.name, "The flavor name")
    # The reservation key is the portal's alone: a pool selecting or tainting by it would let
    # its tenants' pods onto (or tolerate) another tenant's reserved nodes.
    if any(key == reservations.RESERVED_KEY for key, _ in flavor.node_labels):
        errors.add(
            f"{path}.node_labels",
            f"{reservations.RESERVED_KEY} marks the nodes reserved for one tenant; a pool may "
            "not select by it.",
        )
    if flavor.taint_key == reservations.RESERVED_KEY:
        errors.add(
            f"{path}.taint_key",
            f"{reservations.RESERVED_KEY} is the taint of reserved nodes; give the pool its own.",
        )
    product = flavor.product
    if (
        not isinstance(product, str)
        or not product
        or len(product) > 63
        or not LABEL_VALUE.fullmatch(product)
    ):
        errors.add(
            f"{path}.product",
            "The product must be the node label nvidia.com/gpu.product as GPU feature discovery "
            "writes it, for example NVIDIA-H200.",
        )
    modes = get_args(GpuMode)
    mode_ok = _check_choice(errors, f"{path}.mode", flavor.mode, modes, "The GPU mode")
    gpus_ok = _check_int(
        errors, f"{path}.gpus", flavor.gpus, 1, SANE_LIMITS["flavor_gpus"], "The number of GPUs"
    )
    _check_int(
        errors,
        f"{path}.gpu_memory_mib",
        flavor.gpu_memory_mib,
        1,
        SANE_LIMITS["gpu_memory_mib"],
        "The GPU memory in MiB",
    )
    if len(flavor.node_labels) > MAX_FLAVOR_NODE_LABELS:
        errors.add(
            f"{path}.node_labels",
            f"A flavor may select nodes by at most {MAX_FLAVOR_NODE_LABELS} labels "
            "(Kueue allows 8 and the GPU product label is always added).",
        )
    seen_keys: set[str] = set()
    for index, pair in enumerate(flavor.node_labels):
        where = f"{path}.node_labels[{index}]"
        if not isinstance(pair, tuple) or len(pair) != 2:
            errors.add(where, "Each node label must be a key and a value.")
            continue
        key, value = pair
        if _check_label_key(errors, where, key, "The node label") and key in (
            vcluster.GPU_PRODUCT_LABEL,
            *seen_keys,
        ):
            errors.add(
                where,
                f"The node label {key!r} is listed twice (the GPU product label comes from "
                "product).",
            )
        if isinstance(key, str):
            seen_keys.add(key)
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            errors.add(where, f"The value of node label {key!r} is not a valid label value.")
    if mode_ok and flavor.mode in ("mig", "dra"):
        if flavor.mode == "mig" and not flavor.mig_profiles:
            errors.add(
                f"{path}.mig_profiles",
                "A MIG flavor must list its MIG profiles and how many slices of each it has.",
            )
        seen_profiles: set[str] = set()
        for index, entry in enumerate(flavor.mig_profiles):
            where = f"{path}.mig_profiles[{index}]"
            if not isinstance(entry, tuple) or len(entry) != 2:
                errors.add(where, "Each MIG profile must be a profile name and a slice count.")
                continue
            profile, slices = entry
            if not isinstance(profile, str) or not resources.MIG_PROFILE.fullmatch(profile):
                errors.add(
                    where,
                    f"{profile!r} is not a MIG profile name such as 1g.18gb or 3g.71gb.",
                )
            elif profile in seen_profiles:
                errors.add(where, f"The MIG profile {profile} is listed twice.")
            else:
                seen_profiles.add(profile)
            high = flavor.gpus * resources.MIG_SLICES_PER_GPU if gpus_ok else 0
            _check_int(errors, f"{where}.slices", slices, 1, max(high, 1), "The slice count")
    elif flavor.mig_profiles:
        errors.add(
            f"{path}.mig_profiles",
            "Only a MIG flavor (mode mig, or mode dra for MIG devices) has MIG profiles.",
        )
    if mode_ok and flavor.mode == "hami":
        _check_int(errors, f"{path}.hami_split", flavor.hami_split, 1, 100, "The HAMi split")
    if flavor.topology is not None and not isinstance(flavor.topology, bool):
        errors.add(f"{path}.topology", "topology must be true, false or left out.")
    elif mode_ok and flavor.topology is True and flavor.mode in NO_TOPOLOGY:
        errors.add(f"{path}.topology", NO_TOPOLOGY[flavor.mode])
    _validate_serving(errors, path, flavor)
    _check_label_key(errors, f"{path}.taint_key", flavor.taint_key, "The taint key")


def _validate_serving(errors: _Errors, path: str, flavor: Flavor) -> None:
    """A pool is served by the NVIDIA DRA driver or by a device plugin, never both (see
    ``gitops.specs.Flavor``): its node labels must say which, since they are what the GPU
    Operator reads per node and what Kueue selects the pool's nodes by."""
    labels = {pair[0]: pair[1] for pair in flavor.node_labels if isinstance(pair, tuple)}
    plugin = labels.get(resources.DEVICE_PLUGIN_LABEL)
    if flavor.mode in ("dra", "hami") and plugin != "false":
        other = "the DRA driver" if flavor.mode == "dra" else "HAMi's device plugin"
        errors.add(
            f"{path}.node_labels",
            f"A {flavor.mode.upper() if flavor.mode == 'dra' else 'HAMi'} pool's nodes must run "
            f"no NVIDIA device plugin: select them by {resources.DEVICE_PLUGIN_LABEL}: 'false' "
            f"(the GPU Operator then leaves its device plugin off), or it and {other} would "
            "both hand out their GPUs.",
        )
    elif flavor.mode in ("whole", "mig") and plugin == "false":
        errors.add(
            f"{path}.node_labels",
            f"Nodes labelled {resources.DEVICE_PLUGIN_LABEL}: 'false' run no device plugin, so "
            f"they cannot serve a {flavor.mode!r} pool; use mode dra for them.",
        )


def _validate_topology(errors: _Errors, levels: tuple[str, ...]) -> None:
    if not 1 <= len(levels) <= 16:
        errors.add("topology_levels", "Kueue needs between 1 and 16 topology levels.")
        return
    if len(set(levels)) != len(levels):
        errors.add("topology_levels", "Each topology level may appear only once.")
    for index, level in enumerate(levels):
        _check_label_key(errors, f"topology_levels[{index}]", level, "The topology level")
    if HOSTNAME_LABEL in levels and levels[-1] != HOSTNAME_LABEL:
        errors.add(
            "topology_levels",
            f"{HOSTNAME_LABEL} can only be the last (lowest) topology level.",
        )


# --- a tenant --------------------------------------------------------------------------------


def reserved_namespaces(fleet: FleetSpec) -> frozenset[str]:
    """Every namespace no tenant may be named after on ``fleet``: the platform's fixed ones
    and those the fleet file configures (gateway, its proxies, LiteLLM, monitoring, the GPU
    Operator, HAMi, the portal itself)."""
    return PLATFORM_NAMESPACES | {
        fleet.gateway.namespace,
        fleet.gateway.proxy_namespace,
        fleet.litellm_namespace,
        fleet.monitoring_namespace,
        fleet.gpu_operator_namespace,
        fleet.hami_namespace,
        fleet.portal_namespace,
    }


def reserved_name_problem(slug: str, fleet: FleetSpec) -> str | None:
    """Why ``slug`` cannot name a tenant on ``fleet``, or None: the one rule for reserved
    tenant names (``tenants.names`` asks it before a tenant is made)."""
    if slug.startswith(RESERVED_PREFIXES):
        prefixes = " or ".join(f"'{prefix}'" for prefix in RESERVED_PREFIXES)
        return (
            f"The name {slug!r} is reserved: names starting with {prefixes} belong to "
            "Kubernetes and Flux."
        )
    if slug in reserved_namespaces(fleet):
        return (
            f"The name {slug!r} is reserved: the platform runs its own components in a "
            "namespace of that name, and a tenant's namespace is named after the tenant."
        )
    return None


# Why a dedicated tenant has no MIG slices by default (the seed: split a GPU only inside one
# trust domain; a whole GPU is the conservative choice for low trust).
MIG_OPT_IN = (
    "MIG slices are off for a dedicated tenant unless a platform admin enables them for it "
    "(MIG as a barrier between hostile tenants is still debated): ask for whole GPUs, or ask "
    "a platform admin to enable MIG on the tenant's settings page."
)


def is_mig_share(share: GpuShare) -> bool:
    """A share of MIG slices: of a MIG pool, or MIG devices claimed through DRA."""
    return share.kind == "mig" or (share.kind == "dra" and bool(share.mig_profile))


def mig_allowed(tenant: TenantSpec) -> bool:
    """Whether the tenant may have MIG slices: a shared tenant always, a dedicated one only
    with the platform admin's opt-in (``TenantSpec.mig_allowed``)."""
    return tenant.trust_level != "dedicated" or tenant.mig_allowed is True


def validate_tenant(tenant: TenantSpec, fleet: FleetSpec) -> None:
    """Raise ``SpecError`` unless the tenant can be rendered for this fleet."""
    errors = _Errors()
    slug_ok = _check_label(
        errors, "slug", tenant.slug, "The tenant slug", max_length=TENANT_SLUG_MAX
    )
    reserved = reserved_name_problem(tenant.slug, fleet) if slug_ok else None
    if reserved:
        errors.add("slug", reserved)
    _check_text(errors, "display_name", tenant.display_name, "The display name", 200)
    _check_text(errors, "cost_centre", tenant.cost_centre, "The cost centre", 64)
    _check_choice(
        errors, "trust_level", tenant.trust_level, get_args(TrustLevel), "The trust level"
    )
    if not isinstance(tenant.mig_allowed, bool):
        errors.add("mig_allowed", "Whether MIG is enabled is true or false.")
    _check_int(errors, "cpu_quota", tenant.cpu_quota, 1, SANE_LIMITS["cpu_quota"], "The CPU quota")
    _check_int(
        errors, "memory_gib", tenant.memory_gib, 1, SANE_LIMITS["memory_gib"], "The memory quota"
    )
    _check_int(errors, "max_pods", tenant.max_pods, 1, SANE_LIMITS["max_pods"], "The pod limit")
    _check_int(
        errors,
        "ephemeral_storage_gib",
        tenant.ephemeral_storage_gib,
        1,
        SANE_LIMITS["storage_gib"],
        "The ephemeral storage quota",
    )
    _check_int(
        errors,
        "storage_gib",
        tenant.storage_gib,
        0,
        SANE_LIMITS["storage_gib"],
        "The persistent storage quota",
    )
    _check_int(
        errors,
        "fair_share_weight",
        tenant.fair_share_weight,
        1,
        SANE_LIMITS["fair_share_weight"],
        "The fair-share weight",
    )
    _duplicates(errors, tenant.shares, "shares", "GPU share")
    _duplicates(errors, tenant.clusters, "clusters", "cluster")
    _duplicates(errors, tenant.endpoints, "endpoints", "endpoint")
    valid_shares: dict[str, GpuShare] = {}
    for index, share in enumerate(tenant.shares):
        if _validate_share(errors, f"shares[{index}]", share, tenant, fleet):
            valid_shares.setdefault(share.name, share)
    _validate_share_totals(errors, tenant, fleet, valid_shares)
    for index, cluster in enumerate(tenant.clusters):
        _validate_cluster(errors, f"clusters[{index}]", cluster, tenant, fleet, valid_shares)
    for index, endpoint in enumerate(tenant.endpoints):
        _validate_endpoint(errors, f"endpoints[{index}]", endpoint, tenant, valid_shares)
    _validate_endpoint_totals(errors, tenant, valid_shares)
    _validate_derived_names(errors, tenant)
    _validate_members(errors, tenant, fleet)
    _validate_fabric_tenant(errors, tenant, fleet)
    _validate_reservations(errors, tenant, fleet)
    errors.raise_if_any()


def _validate_reservations(errors: _Errors, tenant: TenantSpec, fleet: FleetSpec) -> None:
    """Whole nodes of whole-GPU pools, for a dedicated tenant only (``NodeReservation``).
    Whether a node is already another tenant's is a check over all tenants
    (``gitops.checks.isolation``) and the reservation service's, not the tenant's alone."""
    if not tenant.reservations:
        return
    if tenant.trust_level != "dedicated":
        errors.add(
            "reservations",
            f"Only a dedicated tenant gets nodes of its own; {tenant.slug} is "
            f"{tenant.trust_level}.",
        )
    _duplicates(errors, tenant.reservations, "reservations", "reserved node")
    per_pool: dict[str, int] = defaultdict(int)
    for index, reservation in enumerate(tenant.reservations):
        path = f"reservations[{index}]"
        _check_subdomain(errors, f"{path}.name", reservation.name, "The node name")
        pool = fleet.flavor(reservation.flavor) if isinstance(reservation.flavor, str) else None
        if pool is None:
            errors.add(
                f"{path}.flavor",
                f"There is no GPU pool {reservation.flavor!r}; the fleet has: "
                f"{_names(f.name for f in fleet.flavors)}.",
            )
        elif pool.mode != "whole":
            errors.add(
                f"{path}.flavor",
                f"Nodes are reserved from whole-GPU pools; {pool.name} hands out {pool.mode} GPUs.",
            )
        elif len(own := reservations.flavor_name(pool.name, tenant.slug)) > 63:
            # The usage ledger keys rows by flavor in 63 characters (billing.models), and a
            # longer name would leave the node's usage billed beside its reservation.
            errors.add(
                f"{path}.flavor",
                f"The tenant's own flavor {own} would be {len(own)} characters; pool name and "
                "tenant slug together must fit 62.",
            )
        if (
            _check_int(errors, f"{path}.gpus", reservation.gpus, 1, 64, "The node's GPU count")
            and pool is not None
        ):
            per_pool[pool.name] += reservation.gpus
    for name, gpus in sorted(per_pool.items()):
        pool = fleet.flavor(name)
        if pool is not None and gpus > pool.gpus:
            errors.add(
                "reservations",
                f"{gpus} GPUs of {name} reserved, but the pool has {pool.gpus}.",
            )


def _validate_members(errors: _Errors, tenant: TenantSpec, fleet: FleetSpec) -> None:
    """Members become RBAC subjects and annotations: single-line text, a known role, and no
    two members with one identity in the clusters (their bindings would share a name)."""
    seen: dict[str, int] = {}
    for index, member in enumerate(tenant.members):
        path = f"members[{index}]"
        if not isinstance(member, ClusterMember):
            errors.add(path, "A member must be a ClusterMember.")
            continue
        _check_text(errors, f"{path}.name", member.name, "The member's name", 150)
        _check_choice(errors, f"{path}.role", member.role, get_args(MemberRole), "The role")
        _check_text(errors, f"{path}.issuer", member.issuer, "The issuer", 2048)
        _check_text(errors, f"{path}.subject", member.subject, "The subject", 255)
        _check_text(errors, f"{path}.email", member.email, "The e-mail address", 254)
        oidc = fleet.cluster_oidc
        texts = (member.issuer, member.subject, member.email)
        user = (
            cluster_access.cluster_user(member, oidc)
            if oidc is not None and all(isinstance(v, str) for v in texts)
            else None
        )
        if user is not None and user in seen:
            errors.add(
                f"{path}.subject",
                f"{member.name} has the same identity in the clusters ({user}) as "
                f"{tenant.members[seen[user]].name}.",
            )
        elif user is not None:
            seen[user] = index


def _validate_share(
    errors: _Errors, path: str, share: GpuShare, tenant: TenantSpec, fleet: FleetSpec
) -> bool:
    """Check one share; True when it is sound enough to count in totals."""
    before = len(errors.errors)
    _check_label(errors, f"{path}.name", share.name, "The share name")
    kind_ok = _check_choice(
        errors, f"{path}.kind", share.kind, get_args(ShareKind), "The share kind"
    )
    flavor = fleet.flavor(share.flavor) if isinstance(share.flavor, str) else None
    if flavor is None:
        errors.add(
            f"{path}.flavor",
            f"There is no GPU flavor {share.flavor!r}; the fleet has: "
            f"{_names(f.name for f in fleet.flavors)}.",
        )
    if kind_ok and share.kind == "hami" and tenant.trust_level == "dedicated":
        errors.add(
            f"{path}.kind",
            "A dedicated tenant gets hardware isolation only: ask for whole GPUs, MIG slices "
            "or DRA GPUs instead of HAMi fractions.",
        )
    if kind_ok and is_mig_share(share) and not mig_allowed(tenant):
        errors.add(f"{path}.kind", MIG_OPT_IN)
    if flavor is not None and kind_ok:
        _validate_share_on_flavor(errors, path, share, flavor)
    if kind_ok and share.kind != "hami":
        if share.gpumem_mib != 0:
            errors.add(f"{path}.gpumem_mib", "Only a HAMi share sets GPU memory; leave it at 0.")
        if share.gpucores_percent != 0:
            errors.add(
                f"{path}.gpucores_percent", "Only a HAMi share sets GPU cores; leave it at 0."
            )
    if share.until:
        if not isinstance(share.until, str) or not ISO_DATE.fullmatch(share.until):
            errors.add(f"{path}.until", "Give the end date as YYYY-MM-DD, for example 2026-12-31.")
        else:
            try:
                date.fromisoformat(share.until)
            except ValueError:
                errors.add(f"{path}.until", f"The date {share.until} does not exist.")
    return len(errors.errors) == before


def _validate_share_on_flavor(errors: _Errors, path: str, share: GpuShare, flavor: Flavor) -> None:
    # A share's kind is the flavor's mode: one pool, one way of handing out its GPUs.
    if flavor.mode != share.kind:
        errors.add(
            f"{path}.kind",
            f"Flavor {flavor.name!r} hands out GPUs as {flavor.mode!r}, so it cannot serve a "
            f"{share.kind!r} share; pick a {share.kind} flavor.",
        )
        return
    profiles = dict(flavor.mig_profiles)
    needs_profile = share.kind == "mig" or (share.kind == "dra" and bool(profiles))
    if needs_profile:
        if not share.mig_profile:
            errors.add(
                f"{path}.mig_profile",
                f"Choose a MIG profile; flavor {flavor.name!r} offers {_names(profiles)}.",
            )
            return
        if share.mig_profile not in profiles:
            errors.add(
                f"{path}.mig_profile",
                f"MIG profile {share.mig_profile!r} is not offered by flavor {flavor.name!r} "
                f"(it has {_names(profiles)}).",
            )
            return
    elif share.mig_profile:
        errors.add(
            f"{path}.mig_profile",
            f"Only MIG slices have a profile; flavor {flavor.name!r} gives whole GPUs or "
            "fractions, so leave it empty.",
        )
        return
    capacity = resources.share_capacity(share, flavor)
    unit = _unit(share)
    _check_int(errors, f"{path}.count", share.count, 1, capacity, f"The number of {unit}")
    if share.kind == "hami":
        _check_int(
            errors,
            f"{path}.gpumem_mib",
            share.gpumem_mib,
            1,
            flavor.gpu_memory_mib,
            f"The GPU memory per slot (MiB, flavor {flavor.name!r} has "
            f"{flavor.gpu_memory_mib} MiB per GPU)",
        )
        _check_int(
            errors, f"{path}.gpucores_percent", share.gpucores_percent, 1, 100, "The GPU cores %"
        )
    count = share.count if _is_int(share.count) else 0
    if share.borrowing_limit is not None:
        _check_int(
            errors,
            f"{path}.borrowing_limit",
            share.borrowing_limit,
            0,
            capacity,
            f"The borrowing limit ({unit})",
        )
    if share.lending_limit is not None:
        _check_int(
            errors,
            f"{path}.lending_limit",
            share.lending_limit,
            0,
            max(count, 0),
            f"The lending limit ({unit}, at most the share itself)",
        )


def _unit(share: GpuShare) -> str:
    if share.kind == "hami":
        return "vGPU slots"
    if share.mig_profile:
        return f"{share.mig_profile} MIG slices"
    return "GPUs"


def _unit_key(share: GpuShare) -> tuple[str, str]:
    if share.kind == "hami":
        return share.flavor, "hami"
    if share.mig_profile:
        return share.flavor, f"mig:{share.mig_profile}"
    return share.flavor, "gpu"


def _validate_share_totals(
    errors: _Errors, tenant: TenantSpec, fleet: FleetSpec, shares: dict[str, GpuShare]
) -> None:
    totals: dict[tuple[str, str], int] = defaultdict(int)
    equivalents = Fraction(0)
    for index, share in enumerate(tenant.shares):
        if shares.get(share.name) is not share:
            continue
        flavor = fleet.flavor(share.flavor)
        assert flavor is not None
        key = _unit_key(share)
        totals[key] += share.count
        capacity = resources.share_capacity(share, flavor)
        if totals[key] > capacity:
            errors.add(
                f"shares[{index}].count",
                f"The tenant's shares on flavor {flavor.name!r} add up to {totals[key]} "
                f"{_unit(share)}, but the flavor has only {capacity}.",
            )
        equivalents += resources.gpu_equivalents(share, flavor)
    if equivalents > fleet.max_gpus_per_tenant:
        shown = f"{float(equivalents):g}"
        errors.add(
            "shares",
            f"The shares add up to {shown} GPUs (counting MIG slices and HAMi slots as "
            f"fractions); a tenant may have at most {fleet.max_gpus_per_tenant}.",
        )


def _validate_cluster(
    errors: _Errors,
    path: str,
    cluster: TenantClusterSpec,
    tenant: TenantSpec,
    fleet: FleetSpec,
    shares: dict[str, GpuShare],
) -> None:
    if _check_label(errors, f"{path}.name", cluster.name, "The cluster name", dns1035=True):
        release = vcluster.release_name(tenant, cluster)
        if len(release) > 63 or len(cluster.name) + len(KUBECONFIG_SUFFIX) > 63:
            errors.add(
                f"{path}.name",
                f"The cluster name is too long: '{release}' must fit in 63 characters; use at "
                f"most {63 - len(tenant.slug) - 1} characters.",
            )
        elif len(cluster.name) > HELM_RELEASE_MAX:
            errors.add(
                f"{path}.name", f"The cluster name must be at most {HELM_RELEASE_MAX} characters."
            )
        elif release in stack.RELEASE_NAMES:
            # Both are HelmReleases in flux-system (gitops.render.vcluster, .stack).
            errors.add(
                f"{path}.name",
                f"The cluster would be released as {release!r}, the name of a platform "
                "component's release; rename the cluster.",
            )
    _check_choice(
        errors,
        f"{path}.kubernetes_version",
        cluster.kubernetes_version,
        sorted(vcluster.KUBERNETES_IMAGE_TAGS),
        "The Kubernetes version",
    )
    _check_choice(errors, f"{path}.size", cluster.size, get_args(ClusterSize), "The cluster size")
    pools: list[Flavor] = []
    reserved = reservations.reserved_gpus(tenant)
    share_flavors = {share.flavor for share in shares.values()} | set(reserved)
    seen: set[str] = set()
    for index, pool in enumerate(cluster.node_pools):
        where = f"{path}.node_pools[{index}]"
        flavor = fleet.flavor(pool) if isinstance(pool, str) else None
        if flavor is None:
            errors.add(
                where,
                f"There is no node pool {pool!r}; the fleet has: "
                f"{_names(f.name for f in fleet.flavors)}.",
            )
        elif pool in seen:
            errors.add(where, f"The node pool {pool!r} is listed twice.")
        elif pool not in share_flavors:
            errors.add(
                where,
                f"The tenant has no GPU share on {pool!r}; ask for one before running a cluster "
                "there.",
            )
        else:
            pools.append(flavor)
        seen.add(str(pool))
    if pools and vcluster.node_selector(pools, fleet) is None:
        errors.add(
            f"{path}.node_pools",
            f"The pools {_names(p.name for p in pools)} share no node labels that select them "
            "alone, and a vCluster selects its nodes by one set of labels: choose one pool.",
        )
    gpu_units = sum(
        resources.kueue_resources(share).get(resources.GPU, 0)
        for share in shares.values()
        if share.flavor in {p.name for p in pools}
    )
    if pools and all(p.name in reserved for p in pools):
        # Its pods run on the tenant's own nodes only (gitops.render.vcluster).
        gpu_units = sum(reserved[p.name] for p in pools)
    if (
        _check_int(
            errors, f"{path}.gpu_quota", cluster.gpu_quota, 0, max(gpu_units, 0), "The GPU quota"
        )
        and cluster.gpu_quota > 0
        and not cluster.node_pools
    ):
        errors.add(f"{path}.node_pools", "A cluster with GPUs must name its node pools.")
    _check_int(
        errors, f"{path}.cpu_quota", cluster.cpu_quota, 1, max(tenant.cpu_quota, 1), "The CPU quota"
    )
    _check_int(
        errors, f"{path}.memory_gib", cluster.memory_gib, 1, max(tenant.memory_gib, 1), "The memory"
    )
    _check_int(
        errors, f"{path}.max_pods", cluster.max_pods, 1, max(tenant.max_pods, 1), "The pod limit"
    )
    if not isinstance(cluster.asleep, bool):
        errors.add(f"{path}.asleep", "Asleep must be true or false.")


def _validate_endpoint(
    errors: _Errors,
    path: str,
    endpoint: EndpointSpec,
    tenant: TenantSpec,
    shares: dict[str, GpuShare],
) -> None:
    if (
        _check_label(
            errors,
            f"{path}.name",
            endpoint.name,
            "The endpoint name",
            dns1035=True,
            max_length=ENDPOINT_NAME_MAX,
        )
        and len(endpoint.name) + 1 + len(tenant.slug) > 63
    ):
        errors.add(
            f"{path}.name",
            f"The endpoint name is too long: KServe names its host "
            f"'{endpoint.name}-{tenant.slug}', which must fit in 63 characters.",
        )
    _validate_model_uri(errors, f"{path}.model_uri", endpoint.model_uri)
    if endpoint.served_model_name and (
        not isinstance(endpoint.served_model_name, str)
        or len(endpoint.served_model_name) > 128
        or not SERVED_NAME.fullmatch(endpoint.served_model_name)
    ):
        errors.add(
            f"{path}.served_model_name",
            "The served model name may use letters, digits and . _ / - (at most 128).",
        )
    share = shares.get(endpoint.share) if isinstance(endpoint.share, str) else None
    if share is None:
        errors.add(
            f"{path}.share",
            f"There is no usable GPU share named {endpoint.share!r}; the tenant has: "
            f"{_names(shares)}.",
        )
    _check_args(errors, f"{path}.args", endpoint.args)
    min_ok = _check_int(
        errors,
        f"{path}.min_replicas",
        endpoint.min_replicas,
        0,
        MAX_REPLICAS,
        "The minimum replicas",
    )
    max_ok = _check_int(
        errors,
        f"{path}.max_replicas",
        endpoint.max_replicas,
        1,
        MAX_REPLICAS,
        "The maximum replicas",
    )
    replicas_ok = min_ok and max_ok
    if replicas_ok and endpoint.min_replicas > endpoint.max_replicas:
        errors.add(
            f"{path}.max_replicas",
            f"The maximum replicas ({endpoint.max_replicas}) must not be below the minimum "
            f"({endpoint.min_replicas}).",
        )
    if min_ok and endpoint.min_replicas == 0 and endpoint.scale_metric not in KEDA_METRICS:
        # Only KEDA scales a Deployment to zero and back: KServe v0.20.0 passes minReplicas to
        # the ScaledObject's minReplicaCount (pkg/controller/v1beta1/inferenceservice/
        # reconcilers/keda/keda_reconciler.go createKedaScaledObject); the HPA of "cpu" and
        # "memory" keeps at least one replica (autoscaling/v2 minReplicas >= 1).
        errors.add(
            f"{path}.min_replicas",
            "Only an endpoint that scales on concurrency or requests per second (KEDA) can "
            "scale to zero replicas; with cpu or memory scaling the minimum is 1.",
        )
    if not isinstance(endpoint.asleep, bool):
        errors.add(f"{path}.asleep", "Asleep must be true or false.")
    if _check_choice(
        errors,
        f"{path}.scale_metric",
        endpoint.scale_metric,
        get_args(ScaleMetric),
        "The scale metric",
    ):
        # CPU and memory scale on utilisation, a percentage of the replica's request.
        percent = endpoint.scale_metric in ("cpu", "memory")
        high = 100 if percent else 1_000_000
        what = "The utilisation target (%)" if percent else "The scale target"
        _check_int(errors, f"{path}.scale_target", endpoint.scale_target, 1, high, what)
    _check_int(
        errors,
        f"{path}.cpu",
        endpoint.cpu,
        1,
        min(SANE_LIMITS["endpoint_cpu"], max(tenant.cpu_quota, 1)),
        "The CPUs per replica",
    )
    _check_int(
        errors,
        f"{path}.memory_gib",
        endpoint.memory_gib,
        1,
        min(SANE_LIMITS["endpoint_memory_gib"], max(tenant.memory_gib, 1)),
        "The memory per replica (GiB)",
    )
    if not isinstance(endpoint.expose, bool):
        errors.add(f"{path}.expose", "Expose must be true or false.")
    if share is None or not _check_int(
        errors,
        f"{path}.gpus_per_replica",
        endpoint.gpus_per_replica,
        1,
        share.count,
        f"The {_unit(share)} per replica",
    ):
        return
    if share.mig_profile and endpoint.gpus_per_replica != 1:
        errors.add(
            f"{path}.gpus_per_replica",
            "A process can use only one MIG slice, so a MIG endpoint runs one slice per replica.",
        )
    elif replicas_ok and endpoint.gpus_per_replica * endpoint.max_replicas > share.count:
        errors.add(
            f"{path}.max_replicas",
            f"At {endpoint.max_replicas} replicas of {endpoint.gpus_per_replica} the endpoint "
            f"needs {endpoint.gpus_per_replica * endpoint.max_replicas} {_unit(share)}, but "
            f"share {share.name!r} has {share.count}.",
        )


def _validate_endpoint_totals(
    errors: _Errors, tenant: TenantSpec, shares: dict[str, GpuShare]
) -> None:
    used: dict[str, int] = defaultdict(int)
    for index, endpoint in enumerate(tenant.endpoints):
        share = shares.get(endpoint.share) if isinstance(endpoint.share, str) else None
        if share is None or not (
            _is_int(endpoint.min_replicas) and _is_int(endpoint.gpus_per_replica)
        ):
            continue
        # An endpoint at zero (by KEDA or asleep) holds no GPUs, but the share must still have
        # room for the replica it wakes to.
        used[share.name] += max(endpoint.min_replicas, 1) * endpoint.gpus_per_replica
        if used[share.name] > share.count:
            errors.add(
                f"endpoints[{index}].min_replicas",
                f"The endpoints on share {share.name!r} need {used[share.name]} "
                f"{_unit(share)} at their minimum replicas (at least one each, to wake), but "
                f"the share has {share.count}.",
            )


def _validate_model_uri(errors: _Errors, path: str, uri: object) -> None:
    if not isinstance(uri, str) or not uri:
        errors.add(path, "The model location is required, for example hf://org/model.")
        return
    scheme, sep, rest = uri.partition("://")
    pattern = MODEL_URI.get(scheme) if sep else None
    if pattern is None:
        errors.add(
            path,
            "The model location must start with hf://, s3:// or pvc:// (for example "
            "hf://meta-llama/Llama-3.1-8B-Instruct).",
        )
    elif len(uri) > MAX_URI_LENGTH or ".." in rest or "//" in rest or not pattern.fullmatch(rest):
        errors.add(
            path,
            f"This is not a valid {scheme}:// location: use letters, digits and . _ - / "
            "only, without spaces, '..' or empty path parts.",
        )


def _check_args(errors: _Errors, path: str, args: object) -> None:
    if not isinstance(args, tuple):
        errors.add(path, "The arguments must be a list of strings.")
        return
    if len(args) > MAX_ARGS:
        errors.add(path, f"Give at most {MAX_ARGS} arguments.")
    for index, arg in enumerate(args):
        where = f"{path}[{index}]"
        if not isinstance(arg, str):
            errors.add(where, "Each argument must be a string.")
        elif not arg or len(arg) > MAX_ARG_LENGTH:
            errors.add(where, f"Each argument must be 1 to {MAX_ARG_LENGTH} characters.")
        elif problem := text_problem(arg):
            errors.add(where, f"Arguments may not contain {problem}.")
        elif arg.split("=", 1)[0] in ("--model_name", "--model-name"):
            errors.add(where, "Set the served model name instead of passing --model_name.")


def _validate_derived_names(errors: _Errors, tenant: TenantSpec) -> None:
    """Object names built from two inputs must not collide with each other."""
    share_names = {share.name for share in tenant.shares}
    for index, endpoint in enumerate(tenant.endpoints):
        template = f"{endpoint.name}{DRA_TEMPLATE_SUFFIX}"
        if template in share_names:
            errors.add(
                f"endpoints[{index}].name",
                f"The endpoint's device claim template would be named {template!r}, like a "
                "GPU share; rename the endpoint or the share.",
            )


# A week: a job not ready after that is stuck, whatever it downloads. Kueue's own bound is
# time.Duration's; the requeuing fields are int32 (apis/config/v1beta2 configuration_types.go).
PODS_READY_MAX_SECONDS = 7 * 24 * 3600
REQUEUE_LIMIT_MAX = 1_000


def _validate_pods_ready(errors: _Errors, path: str, pods_ready: object) -> None:
    """Kueue's ``waitForPodsReady`` settings: what kueue v0.19.2 ``pkg/config/validation.go``
    ``validateWaitForPodsReady`` accepts (no negative value; a zero timeout would be defaulted
    to 30 minutes, so it is refused as meaningless here), within sane bounds."""
    if not isinstance(pods_ready, PodsReady):
        errors.add(path, "pods_ready must be a mapping of Kueue's waitForPodsReady settings.")
        return
    limit = PODS_READY_MAX_SECONDS
    _check_int(
        errors,
        f"{path}.timeout_seconds",
        pods_ready.timeout_seconds,
        1,
        limit,
        "The time a job has to get all its pods ready",
    )
    _check_int(
        errors,
        f"{path}.recovery_seconds",
        pods_ready.recovery_seconds,
        0,
        limit,
        "The time a running job may stay short of ready pods (0: no limit)",
    )
    if pods_ready.requeue_limit is not None:
        _check_int(
            errors,
            f"{path}.requeue_limit",
            pods_ready.requeue_limit,
            0,
            REQUEUE_LIMIT_MAX,
            "The number of requeues before a job is deactivated",
        )
    base_ok = _check_int(
        errors,
        f"{path}.backoff_base_seconds",
        pods_ready.backoff_base_seconds,
        0,
        limit,
        "The first requeue's wait",
    )
    max_ok = _check_int(
        errors,
        f"{path}.backoff_max_seconds",
        pods_ready.backoff_max_seconds,
        0,
        limit,
        "The longest requeue wait",
    )
    if base_ok and max_ok and pods_ready.backoff_max_seconds < pods_ready.backoff_base_seconds:
        errors.add(
            f"{path}.backoff_max_seconds",
            f"The longest requeue wait ({pods_ready.backoff_max_seconds} s) must be at least "
            f"the first one (backoff_base_seconds, {pods_ready.backoff_base_seconds} s).",
        )


# --- the GPU fabric (gitops.render.fabric) ----------------------------------------------------

# InfiniBand partition keys a tenant may own: 15 bits, without 0x0000 (invalid) and 0x7fff (the
# default partition every port is a member of, so no isolation at all). The 16th bit is the
# membership type (full or limited), which the subnet manager's partition table sets per port,
# not the key (InfiniBand Architecture Specification vol. 1, 10.9 "Partitioning").
PKEY_MIN, PKEY_MAX = 0x0001, 0x7FFE
# 802.1Q VLAN ids: 0 is priority tagging only and 4095 reserved; sriov-cni v2.10.0
# pkg/config/config.go ``LoadConf`` accepts 0-4094, where 0 means no tag at all.
VLAN_MIN, VLAN_MAX = 1, 4094
# An extended resource name: a domain prefix and a name (Kubernetes, "Extended resources").
EXTENDED_RESOURCE = re.compile(
    r"(?P<domain>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def _validate_fabric(errors: _Errors, path: str, fabric: object, fleet: FleetSpec) -> None:
    """The fleet's fabric: known pools with a valid SR-IOV resource each, and partitions that
    fit the fabric's kind, each key, VLAN and subnet given to one tenant only."""
    if not isinstance(fabric, Fabric):
        errors.add(path, "fabric must be a mapping with kind, pools and partitions.")
        return
    kinds = get_args(FabricKind)
    kind_ok = _check_choice(errors, f"{path}.kind", fabric.kind, kinds, "The fabric kind")
    flavors = {f.name for f in fleet.flavors if isinstance(f, Flavor)}
    pools: set[str] = set()
    for index, pool in enumerate(fabric.pools):
        where = f"{path}.pools[{index}]"
        if pool.flavor not in flavors:
            errors.add(
                f"{where}.flavor",
                f"There is no pool {pool.flavor!r} in this fleet (its pools: {_names(flavors)}).",
            )
        elif pool.flavor in pools:
            errors.add(f"{where}.flavor", f"The pool {pool.flavor!r} is listed twice.")
        pools.add(str(pool.flavor))
        match = (
            EXTENDED_RESOURCE.fullmatch(pool.resource) if isinstance(pool.resource, str) else None
        )
        domain = match.group("domain") if match else ""
        if (
            match is None
            or len(pool.resource) > 253
            or domain == "kubernetes.io"
            or domain.endswith(".kubernetes.io")
        ):
            errors.add(
                f"{where}.resource",
                f"{pool.resource!r} is not an extended resource name: give the SR-IOV "
                "resource the nodes advertise, as <prefix>/<name> (for example "
                "nvidia.com/rdma_ib0), outside kubernetes.io.",
            )
    if fabric.partitions and not fabric.pools:
        errors.add(f"{path}.pools", "Partitions need at least one pool with a fabric.")
    owners: dict[tuple[str, object], str] = {}
    subnets: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
    for index, partition in enumerate(fabric.partitions):
        where = f"{path}.partitions[{index}]"
        if _check_label(
            errors, f"{where}.tenant", partition.tenant, "The tenant", max_length=TENANT_SLUG_MAX
        ):
            if ("tenant", partition.tenant) in owners:
                errors.add(
                    f"{where}.tenant",
                    f"The tenant {partition.tenant!r} already has a partition; give each tenant "
                    "one.",
                )
            owners[("tenant", partition.tenant)] = partition.tenant
        if kind_ok:
            _validate_partition_key(errors, where, partition, str(fabric.kind), owners)
        if partition.subnet:
            try:
                subnet = ipaddress.ip_network(partition.subnet)
            except (TypeError, ValueError):
                errors.add(
                    f"{where}.subnet",
                    f"{partition.subnet!r} is not a network such as 10.128.1.0/24 (the host "
                    "bits must be zero).",
                )
                continue
            other = next((t for net, t in subnets if net.overlaps(subnet)), None)  # type: ignore[arg-type]
            if other is not None:
                errors.add(
                    f"{where}.subnet",
                    f"{partition.subnet} overlaps the subnet of tenant {other!r}: each "
                    "partition needs addresses of its own.",
                )
            subnets.append((subnet, str(partition.tenant)))
        elif fabric.kind == "roce":
            errors.add(
                f"{where}.subnet",
                "A RoCE partition needs a subnet: RoCE routes RDMA traffic by IP address.",
            )


def _validate_partition_key(
    errors: _Errors, where: str, partition: Any, kind: str, owners: dict[tuple[str, object], str]
) -> None:
    """The partition's key (InfiniBand) or VLAN (RoCE): in range, the other one unset, and not
    given to another tenant already."""
    field, other_field = ("pkey", "vlan") if kind == "infiniband" else ("vlan", "pkey")
    value = getattr(partition, field)
    if getattr(partition, other_field):
        errors.add(
            f"{where}.{other_field}",
            f"This {kind} fabric is partitioned by {field}, not {other_field}: leave "
            f"{other_field} out.",
        )
    if kind == "infiniband":
        ok = _is_int(value) and PKEY_MIN <= value <= PKEY_MAX
        if not ok:
            shown = f"0x{value:04x}" if _is_int(value) and value >= 0 else repr(value)
            errors.add(
                f"{where}.pkey",
                f"The partition key must be 0x0001-0x7ffe (got {shown}): 0x7fff is the default "
                "partition every port is in, and the membership bit (0x8000) is the subnet "
                "manager's to set.",
            )
    else:
        ok = _check_int(errors, f"{where}.vlan", value, VLAN_MIN, VLAN_MAX, "The VLAN")
    if not ok:
        return
    shown = f"0x{value:04x}" if field == "pkey" else str(value)
    owner = owners.get((field, value))
    if owner is not None:
        what = "partition key" if field == "pkey" else "VLAN"
        errors.add(
            f"{where}.{field}",
            f"The {what} {shown} is already the partition of tenant {owner!r}: a {what} "
            "may be given to one tenant only.",
        )
        return
    owners[(field, value)] = str(partition.tenant)


def _validate_fabric_tenant(errors: _Errors, tenant: TenantSpec, fleet: FleetSpec) -> None:
    """Only a dedicated tenant may own a fabric partition: a shared tenant's pods share nodes
    with other tenants, so a partition would isolate nothing."""
    partition = fleet.fabric.partition(tenant.slug) if fleet.fabric is not None else None
    if partition is not None and tenant.trust_level != "dedicated":
        errors.add(
            "trust_level",
            f"The fleet file gives {tenant.slug!r} a fabric partition (fabric.partitions), "
            "which only a dedicated tenant may have: make the tenant dedicated, or remove "
            "its partition from the fleet file.",
        )


__all__ = ["reserved_name_problem", "reserved_namespaces", "validate_fleet", "validate_tenant"]
