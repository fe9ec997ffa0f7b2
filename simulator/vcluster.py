"""What a vCluster release leaves in the host cluster: its kubeconfig Secrets, and (below) the
control plane's pod and the quota and limit range the chart may render into the namespace.

As the vCluster syncer writes them (loft-sh/vcluster ``pkg/setup/controllers.go``
``WriteKubeConfigToSecret``, ``pkg/util/kubeconfig`` ``WriteKubeConfig``) once the virtual
control plane runs, in the release's namespace, type ``Opaque``, labelled ``app: vcluster`` and
``vcluster-name: <release>``: always ``vc-<release>``, with the top-level ``exportKubeConfig``
server and context; and each of ``exportKubeConfig.additionalSecrets`` with its own (or, when
the deprecated ``exportKubeConfig.secret`` is set, that one alone, with the top-level settings:
``config.go`` ``GetAdditionalSecrets``). Each holds the kubeconfig under ``config`` and its CA,
client certificate, key and (empty) token on their own under ``certificate-authority``,
``client-certificate``, ``client-key`` and ``token``. A server left out is the syncer's own
``https://localhost:8443``, a context left out the release's name.

The certificates are PEM-shaped but fake: derived from the release, so they are stable from
one run to the next and useless against any API server (``virtual.py`` knows the admin one).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from simulator.store import JsonObject, as_dict

CHART = "vcluster"
DEFAULT_SECRET_PREFIX = "vc-"
DEFAULT_SERVER = "https://localhost:8443"
KUBECONFIG_KEY = "config"


def _fake_pem(label: str, *seed: str) -> bytes:
    # 384 bytes: about the size of a small certificate's DER.
    der = b"".join(
        hashlib.sha256("/".join((*seed, label, str(i))).encode()).digest() for i in range(12)
    )
    text = base64.b64encode(der).decode()
    lines = [text[start : start + 64] for start in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""]).encode()


def kubeconfig(
    server: str, context: str, ca: bytes, cert: bytes, key: bytes, *, insecure: bool = False
) -> bytes:
    """A kubeconfig with one cluster, user and context, all named ``context``, as
    ``clientcmd.Write`` lays it out (keys sorted). ``insecure``: ``insecure-skip-tls-verify``
    and no CA (``pkg/setup/controllers.go`` ``CreateVClusterKubeConfigForExport``)."""
    cluster: JsonObject = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    else:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
        "users": [
            {
                "name": context,
                "user": {
                    "client-certificate-data": base64.b64encode(cert).decode(),
                    "client-key-data": base64.b64encode(key).decode(),
                },
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=True, default_flow_style=False).encode()


def is_vcluster(release: Mapping[str, Any]) -> bool:
    """A HelmRelease of the vCluster chart."""
    chart = as_dict(as_dict(as_dict(release.get("spec")).get("chart")).get("spec"))
    return chart.get("chart") == CHART


def admin_certificate(namespace: str, release: str) -> bytes:
    """The client certificate of the exported kubeconfigs: vCluster's admin."""
    return _fake_pem("CERTIFICATE", namespace, release, "admin")


def exported_kubeconfigs(
    release: Mapping[str, Any], namespace: str, release_name: str
) -> list[JsonObject]:
    """The kubeconfig Secrets the vCluster of HelmRelease ``release`` (installed as
    ``release_name`` into ``namespace``) exports; none when the chart is not vCluster."""
    spec = as_dict(release.get("spec"))
    chart = as_dict(as_dict(spec.get("chart")).get("spec"))
    if chart.get("chart") != CHART:
        return []
    export = as_dict(as_dict(spec.get("values")).get("exportKubeConfig"))
    default = DEFAULT_SECRET_PREFIX + release_name
    wanted: list[tuple[str, Mapping[str, Any]]] = [(default, export)]
    deprecated = as_dict(export.get("secret"))
    if deprecated.get("name") or deprecated.get("namespace"):
        wanted.append((str(deprecated.get("name") or default), export))
    else:
        for extra in export.get("additionalSecrets") or []:
            extra = as_dict(extra)
            wanted.append((str(extra.get("name") or default), extra))
    secrets: dict[str, JsonObject] = {}
    for name, properties in wanted:
        # A later Secret of the same name overwrites an earlier one, as the syncer's writes do.
        secrets[name] = _kubeconfig_secret(properties, namespace, release_name, name)
    return list(secrets.values())


def _kubeconfig_secret(
    properties: Mapping[str, Any], namespace: str, release_name: str, name: str
) -> JsonObject:
    server = properties.get("server")
    context = properties.get("context")
    context = context if isinstance(context, str) and context else release_name
    ca = _fake_pem("CERTIFICATE", namespace, release_name, "ca")
    cert = admin_certificate(namespace, release_name)
    key = _fake_pem("EC PRIVATE KEY", namespace, release_name, "admin")
    insecure = properties.get("insecure") is True
    config = kubeconfig(
        server if isinstance(server, str) and server else DEFAULT_SERVER,
        context,
        ca,
        cert,
        key,
        insecure=insecure,
    )
    data = {
        KUBECONFIG_KEY: config,
        # pkg/util/kubeconfig WriteKubeConfig: the client config's CA data, none when insecure.
        "certificate-authority": b"" if insecure else ca,
        "client-certificate": cert,
        "client-key": key,
        "token": b"",
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "vcluster", "vcluster-name": release_name},
        },
        "type": "Opaque",
        "data": {field: base64.b64encode(value).decode() for field, value in data.items()},
    }


# --- what the chart puts into the host namespace besides the kubeconfig -----------------------
# chart/values.yaml of the pinned chart (0.35.3), the parts that reach the host namespace.
CHART_DEFAULTS: dict[str, Any] = {
    "controlPlane": {
        "distro": {
            "k8s": {
                "image": {
                    "registry": "ghcr.io",
                    "repository": "loft-sh/kubernetes",
                    "tag": "v1.36.0",
                },
                "securityContext": {},
                "resources": {
                    "limits": {"cpu": "100m", "memory": "256Mi"},
                    "requests": {"cpu": "40m", "memory": "64Mi"},
                },
            }
        },
        "statefulSet": {
            "image": {"registry": "ghcr.io", "repository": "loft-sh/vcluster-pro", "tag": ""},
            "resources": {
                "limits": {"ephemeral-storage": "10Gi", "memory": "4Gi"},
                "requests": {"ephemeral-storage": "1Gi", "cpu": "200m", "memory": "256Mi"},
            },
            "security": {
                "podSecurityContext": {},
                "containerSecurityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsUser": 0,
                    "runAsGroup": 0,
                },
            },
        },
        "advanced": {"defaultImageRegistry": "", "serviceAccount": {"name": ""}},
    },
    "policies": {
        "resourceQuota": {
            "enabled": "auto",
            "quota": {
                "requests.cpu": 10,
                "requests.memory": "20Gi",
                "requests.storage": "100Gi",
                "requests.ephemeral-storage": "60Gi",
                "limits.cpu": 20,
                "limits.memory": "40Gi",
                "limits.ephemeral-storage": "160Gi",
                "services.nodeports": 0,
                "services.loadbalancers": 1,
                "count/endpoints": 40,
                "count/pods": 20,
                "count/services": 20,
                "count/secrets": 100,
                "count/configmaps": 100,
                "count/persistentvolumeclaims": 20,
            },
        },
        "limitRange": {
            "enabled": "auto",
            "default": {"ephemeral-storage": "8Gi", "memory": "512Mi", "cpu": "1"},
            "defaultRequest": {"ephemeral-storage": "3Gi", "memory": "128Mi", "cpu": "100m"},
        },
    },
}


def helm_values(
    values: Mapping[str, Any], defaults: Mapping[str, Any] = CHART_DEFAULTS
) -> JsonObject:
    """The chart's defaults with ``values`` over them, maps merged key by key (as Helm
    coalesces a release's values with the chart's)."""
    out: JsonObject = dict(defaults)
    for key, value in values.items():
        base = out.get(key)
        if isinstance(value, Mapping) and isinstance(base, Mapping):
            out[key] = helm_values(value, base)
        else:
            out[key] = value
    return out


def _enabled(value: object) -> str:
    return str(value).lower()


def host_policies(values: Mapping[str, Any], namespace: str, release: str) -> list[JsonObject]:
    """The ``vc-<release>`` ResourceQuota and LimitRange the chart renders into the host
    namespace (``chart/templates/resourcequota.yaml``, ``limitrange.yaml``): each when either
    is ``true`` and it is not ``false``, so ``auto`` follows the other one."""
    merged = helm_values(values)
    policies = as_dict(merged.get("policies"))
    quota = as_dict(policies.get("resourceQuota"))
    limits = as_dict(policies.get("limitRange"))
    either = "true" in (_enabled(quota.get("enabled")), _enabled(limits.get("enabled")))
    labels = {"app": "vcluster", "release": release}
    objects: list[JsonObject] = []
    if either and _enabled(quota.get("enabled")) != "false":
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": labels},
                "spec": {"hard": {str(k): str(v) for k, v in as_dict(quota.get("quota")).items()}},
            }
        )
    if either and _enabled(limits.get("enabled")) != "false":
        item: JsonObject = {"type": "Container"}
        for field in ("default", "defaultRequest", "min", "max"):
            if as_dict(limits.get(field)):
                item[field] = {str(k): str(v) for k, v in as_dict(limits[field]).items()}
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": labels},
                "spec": {"limits": [item]},
            }
        )
    return objects


def _image(image: Mapping[str, Any], tag: str, default_registry: object) -> str:
    """``vcluster.image`` (``chart/templates/_helper.tpl``): ``controlPlane.advanced.
    defaultImageRegistry`` over the image's own registry; neither: the bare repository."""
    registry = default_registry or image.get("registry")
    repository = image.get("repository")
    return f"{registry}/{repository}:{tag}" if registry else f"{repository}:{tag}"


def control_plane_replicas(values: Mapping[str, Any]) -> int:
    """The control plane StatefulSet's replicas (``chart/templates/statefulset.yaml``:
    ``replicas: {{ .Values.controlPlane.statefulSet.highAvailability.replicas }}``, 1 in the
    chart's values.yaml). 0 is how a cluster sleeps without the Platform: vCluster v0.35.3's
    ``sleep`` values are a Platform feature (config/config.go ``IsProFeatureEnabled``). Only
    the control plane goes: the pods its syncer made in the host namespace keep running, as
    nothing deletes them (``vcluster pause`` does, pkg/cli/pause_helm.go ``PauseVCluster``:
    ``lifecycle.DeletePods`` of ``vcluster.loft.sh/managed-by=<release>``; a chart value
    does not)."""
    control = as_dict(helm_values(values).get("controlPlane"))
    ha = as_dict(as_dict(control.get("statefulSet")).get("highAvailability"))
    replicas = ha.get("replicas", 1)
    return replicas if isinstance(replicas, int) and replicas >= 0 else 1


def control_plane_pod(
    values: Mapping[str, Any], namespace: str, release: str, chart_version: str
) -> JsonObject:
    """Pod ``<release>-0`` of the control plane's StatefulSet (``chart/templates/
    statefulset.yaml``, ``_init-containers.tpl``): the syncer with the StatefulSet's security
    context and resources, and the ``kubernetes`` init container that copies the binaries,
    whose security context is ``controlPlane.distro.k8s.securityContext`` (empty by default)."""
    merged = helm_values(values)
    control = as_dict(merged.get("controlPlane"))
    statefulset = as_dict(control.get("statefulSet"))
    security = as_dict(statefulset.get("security"))
    k8s = as_dict(as_dict(control.get("distro")).get("k8s"))
    advanced = as_dict(control.get("advanced"))
    account = as_dict(advanced.get("serviceAccount")).get("name")
    k8s_image = as_dict(k8s.get("image"))
    # ``vcluster.k8s.image.tag`` (``_init-containers.tpl``): ``distro.k8s.version`` wins over
    # the image's tag (private nodes, with their ``-full`` images, are not modelled).
    k8s_tag = str(k8s.get("version") or k8s_image.get("tag") or "")
    init: JsonObject = {
        "name": "kubernetes",
        "image": _image(k8s_image, k8s_tag, advanced.get("defaultImageRegistry")),
        "command": ["cp"],
        "args": ["-r", "/kubernetes/.", "/binaries/"],
        "volumeMounts": [{"name": "binaries", "mountPath": "/binaries"}],
        "resources": as_dict(k8s.get("resources")),
    }
    if as_dict(k8s.get("securityContext")):
        init["securityContext"] = as_dict(k8s.get("securityContext"))
    syncer: JsonObject = {
        "name": "syncer",
        "image": _image(
            as_dict(statefulset.get("image")),
            # ``vcluster.controlPlane.image``: the image's tag, else the chart's version.
            str(as_dict(statefulset.get("image")).get("tag") or chart_version),
            advanced.get("defaultImageRegistry"),
        ),
        "resources": as_dict(statefulset.get("resources")),
        "volumeMounts": [{"name": "binaries", "mountPath": "/binaries"}],
    }
    if as_dict(security.get("containerSecurityContext")):
        syncer["securityContext"] = as_dict(security.get("containerSecurityContext"))
    spec: JsonObject = {
        "serviceAccountName": account or f"vc-{release}",
        "initContainers": [init],
        "containers": [syncer],
        "volumes": [
            {"name": "binaries", "emptyDir": {}},
            {"name": "vcluster-config", "secret": {"secretName": f"vc-config-{release}"}},
        ],
        "restartPolicy": "Always",
    }
    if as_dict(security.get("podSecurityContext")):
        spec["securityContext"] = as_dict(security.get("podSecurityContext"))
    return {
        "metadata": {
            "namespace": namespace,
            "labels": {"app": "vcluster", "release": release},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": release,
                    "uid": hashlib.sha256(f"{namespace}/{release}".encode()).hexdigest()[:32],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def control_plane_service(namespace: str, release: str, chart_version: str) -> JsonObject:
    """The ``<release>`` Service in front of the control plane (``chart/templates/
    service.yaml`` with ``controlPlane.service`` at its defaults: ClusterIP, ``https`` 443 to
    the syncer's 8443). Its cluster IP is the virtual cluster's ``kubernetes`` address, and it
    owns what the syncer creates (``experimental.syncSettings.setOwner``)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": release,
            "namespace": namespace,
            "labels": {
                "app": "vcluster",
                "chart": f"vcluster-{chart_version}",
                "release": release,
                "heritage": "Helm",
                "vcluster.loft.sh/service": "true",
            },
        },
        "spec": {
            "type": "ClusterIP",
            "ports": [
                {"name": "https", "port": 443, "targetPort": 8443, "nodePort": 0, "protocol": "TCP"}
            ],
            "selector": {"app": "vcluster", "release": release},
        },
    }
