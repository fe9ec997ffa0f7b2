"""What a vCluster release leaves in the host cluster for the portal: its kubeconfig Secret.

As the vCluster syncer writes it (loft-sh/vcluster ``pkg/util/kubeconfig``) once the virtual
control plane runs: named ``exportKubeConfig.secret.name`` (``vc-<release>`` without one), in
the release's namespace, type ``Opaque``, the kubeconfig under ``config`` and its CA, client
certificate and key also on their own under ``certificate-authority``, ``client-certificate``
and ``client-key``. The server is ``exportKubeConfig.server`` (the syncer's own
``https://localhost:8443`` without one), the context ``exportKubeConfig.context`` (the
release's name without one).

The certificates are PEM-shaped but fake: derived from the release, so they are stable from
one run to the next and useless against any API server.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from fleet.simulator.store import JsonObject, as_dict

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


def kubeconfig(server: str, context: str, ca: bytes, cert: bytes, key: bytes) -> bytes:
    """A kubeconfig with one cluster, user and context, all named ``context``, as
    ``clientcmd.Write`` lays it out (keys sorted)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                },
            }
        ],
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


def exported_kubeconfig(
    release: Mapping[str, Any], namespace: str, release_name: str
) -> JsonObject | None:
    """The kubeconfig Secret the vCluster of HelmRelease ``release`` (installed as
    ``release_name`` into ``namespace``) exports; None when the chart is not vCluster."""
    spec = as_dict(release.get("spec"))
    chart = as_dict(as_dict(spec.get("chart")).get("spec"))
    if chart.get("chart") != CHART:
        return None
    export = as_dict(as_dict(spec.get("values")).get("exportKubeConfig"))
    name = as_dict(export.get("secret")).get("name")
    server = export.get("server")
    context = export.get("context")
    context = context if isinstance(context, str) and context else release_name
    ca = _fake_pem("CERTIFICATE", namespace, release_name, "ca")
    cert = _fake_pem("CERTIFICATE", namespace, release_name, "admin")
    key = _fake_pem("EC PRIVATE KEY", namespace, release_name, "admin")
    config = kubeconfig(
        server if isinstance(server, str) and server else DEFAULT_SERVER, context, ca, cert, key
    )
    data = {
        KUBECONFIG_KEY: config,
        "certificate-authority": ca,
        "client-certificate": cert,
        "client-key": key,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name
            if isinstance(name, str) and name
            else DEFAULT_SECRET_PREFIX + release_name,
            "namespace": namespace,
        },
        "type": "Opaque",
        "data": {field: base64.b64encode(value).decode() for field, value in data.items()},
    }
