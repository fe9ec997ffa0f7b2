"""Rules for what a vCluster release does to the host cluster beyond its own pods.

The vCluster chart renders more than a control plane into the tenant's namespace, and some of
it reaches further. Each rule below is read from loft-sh/vcluster at the chart version the
portal pins (``gitops.render.vcluster.CHART_VERSION``):

- ``vcluster-node-sync``: ``sync.fromHost.nodes.enabled`` grants the control plane's service
  account ``get/list/watch`` on every pod and node of the fleet, and with
  ``networking.advanced.proxyKubelets`` (on by default) ``nodes/proxy``, which is exec on any
  kubelet (``chart/templates/clusterrole.yaml``); ``syncBackChanges`` adds node writes;
- ``vcluster-cluster-role``: ``rbac.clusterRole.enabled`` other than ``false`` lets the chart
  decide, and ``auto`` creates a ClusterRole as soon as any of some thirty options is on,
  ``rbac.enableVolumeSnapshotRules`` (``auto`` by default) among them (``_rbac.tpl``
  ``vcluster.createClusterRole``);
- ``vcluster-host-quota``: ``policies.resourceQuota``/``policies.limitRange`` ``auto`` or
  ``true`` put ``vc-<release>`` ResourceQuota and LimitRange into the host namespace, with the
  chart defaults merged in (``chart/templates/resourcequota.yaml``, ``limitrange.yaml``,
  ``chart/values.yaml``): in a tenant namespace they also count the tenant's endpoints;
- ``vcluster-chart-version``: values are validated against one chart version's schema; another
  version would be installed with values nobody checked;
- ``vcluster-hosts-image``: the syncer adds a ``vcluster-rewrite-hosts`` init container to every
  pod with a ``subdomain``, StatefulSet pods among them
  (``pkg/controllers/resources/pods/translate/translator.go``, ``hosts.go``); its image must be
  one the tenant's registry policy admits, or every such pod in the cluster is refused.

Tenant workloads may not name a ``vc-*`` service account (the chart's control-plane and
workload accounts, ``serviceaccount.yaml``, ``workload-serviceaccount.yaml``): the control
plane's holds a Role with pods, pods/exec and secrets (``role.yaml``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from typing import Any

from gitops.checks.findings import Finding, mapping, object_ref, sequence
from gitops.checks.manifests import iter_objects

CHART = "vcluster"
SERVICE_ACCOUNT_PREFIX = "vc-"
# chart/values.yaml sync.toHost.pods.rewriteHosts.initContainer.image at the pinned version.
DEFAULT_HOSTS_IMAGE = {"registry": "mirror.gcr.io", "repository": "library/alpine", "tag": "3.20"}
REGISTRY_RULE = "restrict-image-registries"


def is_vcluster_release(obj: Mapping[str, Any]) -> bool:
    chart = mapping(mapping(mapping(obj.get("spec")).get("chart")).get("spec"))
    return obj.get("kind") == "HelmRelease" and chart.get("chart") == CHART


def _dig(values: Mapping[str, Any], *keys: str) -> Any:
    current: Any = values
    for key in keys:
        current = mapping(current).get(key)
    return current


def hosts_image(values: Mapping[str, Any]) -> str:
    """The rewrite-hosts image the syncer will use: the values' fields over the chart's, and
    ``controlPlane.advanced.defaultImageRegistry`` over both registries (translator.go)."""
    image = {
        **DEFAULT_HOSTS_IMAGE,
        **{
            key: value
            for key, value in mapping(
                _dig(values, "sync", "toHost", "pods", "rewriteHosts", "initContainer", "image")
            ).items()
            if isinstance(value, str) and value
        },
    }
    registry = _dig(values, "controlPlane", "advanced", "defaultImageRegistry")
    if isinstance(registry, str) and registry:
        image["registry"] = registry
    return f"{image['registry']}/{image['repository']}:{image['tag']}"


def image_allowed(image: str, patterns: str) -> bool:
    """Kyverno's wildcard match of one image against ``a* | b*`` alternatives."""
    return any(fnmatch.fnmatchcase(image, p.strip()) for p in patterns.split("|") if p.strip())


def registry_patterns(files: Mapping[str, bytes], slug: str) -> str | None:
    """The image pattern of the tenant's registry rule, if its policy file has one."""
    path = f"tenants/{slug}/kyverno-policy.yaml"
    if path not in files:
        return None
    objects, _ = iter_objects(files, [path])
    for item in objects:
        for rule in sequence(mapping(item.obj.get("spec")).get("rules")):
            if mapping(rule).get("name") != REGISTRY_RULE:
                continue
            containers = sequence(_dig(mapping(rule), "validate", "pattern", "spec", "containers"))
            image = mapping(containers[0]).get("image") if containers else None
            if isinstance(image, str):
                return image
    return None


def release_findings(
    path: str, obj: Mapping[str, Any], chart_version: str, allowed_images: str | None
) -> list[Finding]:
    """What a platform-owned vCluster HelmRelease may not do to the host cluster."""
    ref = object_ref(obj)
    spec = mapping(obj.get("spec"))
    values = mapping(spec.get("values"))
    findings: list[Finding] = []

    def add(rule: str, message: str) -> None:
        findings.append(Finding(path, ref, rule, message))

    version = _dig(spec, "chart", "spec", "version")
    if version != chart_version:
        add(
            "vcluster-chart-version",
            f"chart version {version!r}: the values are validated against chart "
            f"{chart_version}'s schema; pin that version",
        )
    nodes = mapping(_dig(values, "sync", "fromHost", "nodes"))
    if nodes.get("enabled") is True:
        add(
            "vcluster-node-sync",
            "sync.fromHost.nodes.enabled gives the control plane's service account every pod "
            "and node of the fleet (and nodes/proxy); pin the cluster to its pools with "
            "sync.fromHost.nodes.selector.labels and fake nodes instead",
        )
    if nodes.get("syncBackChanges") is True:
        add(
            "vcluster-node-sync",
            "sync.fromHost.nodes.syncBackChanges lets the virtual cluster change host nodes",
        )
    if _dig(values, "rbac", "clusterRole", "enabled") is not False:
        add(
            "vcluster-cluster-role",
            "rbac.clusterRole.enabled must be false: otherwise the chart may grant the control "
            "plane cluster-wide rights (auto creates a ClusterRole for volume snapshots alone)",
        )
    for key in ("resourceQuota", "limitRange"):
        if _dig(values, "policies", key, "enabled") is not False:
            add(
                "vcluster-host-quota",
                f"policies.{key}.enabled must be false: the chart would put its own {key} "
                "(with its defaults merged in) into the tenant's namespace, where it also "
                "limits the tenant's endpoints; the tenant's quota already bounds the namespace",
            )
    if allowed_images is not None:
        image = hosts_image(values)
        if not image_allowed(image, allowed_images):
            add(
                "vcluster-hosts-image",
                f"vCluster adds the init container image {image!r} to pods with a subdomain "
                "(StatefulSet pods), and "
                "the tenant's registry policy does not allow it",
            )
    return findings


def service_account_findings(path: str, obj: Mapping[str, Any]) -> Iterator[Finding]:
    """A tenant-owned object that would run (or apply, for Flux) as a vCluster's account."""
    for where, value in _accounts(obj, ()):
        if value.startswith(SERVICE_ACCOUNT_PREFIX):
            yield Finding(
                path,
                object_ref(obj),
                "vcluster-service-account",
                f"{where} {value!r}: the vc-* service accounts belong to the tenant's vClusters "
                "(the control plane's may exec into pods and read secrets)",
            )


def _accounts(value: Any, where: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, child in value.items():
            if key in ("serviceAccountName", "serviceAccount") and isinstance(child, str):
                yield ".".join((*where, str(key))), child
            else:
                yield from _accounts(child, (*where, str(key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _accounts(child, (*where, f"[{index}]"))
