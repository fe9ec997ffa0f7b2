"""Multus NetworkAttachmentDefinitions: their CRD, and their CNI configuration checked field by
field.

No upstream CRD directory the checks read holds the NAD kind, so the registry always knows it
from ``CRD`` below, written here after network-attachment-definition-client v1.7.7
``artifacts/networks-crd.yaml`` (group ``k8s.cni.cncf.io``, namespaced, ``v1`` served and
stored, ``spec.config`` a string). A cluster's own CRD, read later, replaces it.

The CRD says only that ``spec.config`` is a string, and the API server stores any; a CNI
plugin ignores a field it does not know (Go's ``encoding/json``), so a typo such as ``pKey``
would silently leave a pod outside its partition. ``config_problems`` therefore parses the
JSON and refuses any field the plugin's configuration struct does not have:

- every plugin: containernetworking/cni v1.3.0 ``pkg/types/types.go`` ``PluginConf``
  (``cniVersion``, ``name``, ``type``, ``capabilities``, ``ipam``, ``dns``; ``prevResult`` and
  ``cni.dev/valid-attachments`` are the runtime's to pass, never a stored configuration's);
- ``ib-sriov``: ib-sriov-cni v1.3.0 ``pkg/types/types.go`` ``IbSriovNetConf`` (``deviceID``
  and ``runtimeConfig`` come from Multus and the device plugin, so they are refused here too);
- ``sriov``: sriov-cni v2.10.0 ``pkg/types/types.go`` ``SriovNetConf``, likewise;
- ``ipam`` of type ``whereabouts``: ``type`` and ``range`` (the only ones the portal writes).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

API = "k8s.cni.cncf.io/v1"
KIND = "NetworkAttachmentDefinition"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
    "spec": {
        "group": "k8s.cni.cncf.io",
        "scope": "Namespaced",
        "names": {
            "plural": "network-attachment-definitions",
            "singular": "network-attachment-definition",
            "kind": KIND,
            "shortNames": ["net-attach-def"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"config": {"type": "string"}},
                            }
                        },
                    }
                },
            }
        ],
    },
}

COMMON_FIELDS = frozenset({"cniVersion", "name", "type", "capabilities", "ipam", "dns"})
PLUGIN_FIELDS = {
    "ib-sriov": frozenset({"pkey", "link_state", "rdmaIsolation", "ibKubernetesEnabled"}),
    "sriov": frozenset(
        {
            "vlan",
            "vlanQoS",
            "vlanProto",
            "min_tx_rate",
            "max_tx_rate",
            "spoofchk",
            "trust",
            "link_state",
            "logLevel",
            "logFile",
        }
    ),
}
IPAM_FIELDS = {"whereabouts": frozenset({"type", "range"})}
# ib-sriov-cni's link_state values (pkg/config/config.go ``LoadConf``), also sriov-cni's.
LINK_STATES = ("auto", "enable", "disable")
PKEY = re.compile(r"0x[0-9a-fA-F]{1,4}")


def _type_problems(config: Mapping[str, Any], plugin: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    where = "spec.config"
    for key in ("cniVersion", "name"):
        if not isinstance(config.get(key), str) or not config.get(key):
            problems.append((f"{where}.{key}", f"{key} must be a non-empty string"))
    link = config.get("link_state")
    if link is not None and link not in LINK_STATES:
        problems.append((f"{where}.link_state", f"must be one of {', '.join(LINK_STATES)}"))
    if plugin == "ib-sriov":
        pkey = config.get("pkey")
        if pkey is not None and not (isinstance(pkey, str) and PKEY.fullmatch(pkey)):
            problems.append((f"{where}.pkey", "must be a hexadecimal key such as 0x0010"))
        for flag in ("rdmaIsolation", "ibKubernetesEnabled"):
            if flag in config and not isinstance(config[flag], bool):
                problems.append((f"{where}.{flag}", "must be true or false"))
    if plugin == "sriov":
        vlan = config.get("vlan")
        # sriov-cni v2.10.0 pkg/config/config.go ``LoadConf``: 0-4094.
        if vlan is not None and (
            not isinstance(vlan, int) or isinstance(vlan, bool) or not 0 <= vlan <= 4094
        ):
            problems.append((f"{where}.vlan", "must be a VLAN id, 0-4094"))
        for switch in ("spoofchk", "trust"):
            if switch in config and config[switch] not in ("on", "off"):
                problems.append((f"{where}.{switch}", "must be on or off"))
    return problems


def _ipam_problems(ipam: Any) -> list[tuple[str, str]]:
    where = "spec.config.ipam"
    if not isinstance(ipam, Mapping):
        return [(where, "must be an object")]
    allowed = IPAM_FIELDS.get(str(ipam.get("type")))
    if allowed is None:
        return [(f"{where}.type", f"unknown IPAM plugin {ipam.get('type')!r}")]
    problems = [(f"{where}.{key}", "unknown field") for key in sorted(set(ipam) - allowed)]
    try:
        ipaddress.ip_network(str(ipam.get("range")))
    except ValueError:
        problems.append((f"{where}.range", "must be a network such as 10.128.1.0/24"))
    return problems


def cni_config_problems(text: Any) -> list[tuple[str, str]]:
    """(path, message) for each problem of a NAD's ``spec.config`` (see the module docstring)."""
    if not isinstance(text, str):
        return [("spec.config", "must be a JSON document")]
    try:
        config = json.loads(text)
    except ValueError as exc:
        return [("spec.config", f"is not valid JSON: {exc}")]
    if not isinstance(config, dict):
        return [("spec.config", "must be a JSON object")]
    plugin = config.get("type")
    if plugin not in PLUGIN_FIELDS:
        known = ", ".join(sorted(PLUGIN_FIELDS))
        return [("spec.config.type", f"the checks know the CNI plugins {known}, not {plugin!r}")]
    allowed = COMMON_FIELDS | PLUGIN_FIELDS[str(plugin)]
    problems = [
        (f"spec.config.{key}", f"unknown field of the {plugin} plugin's configuration")
        for key in sorted(set(config) - allowed)
    ]
    problems += _type_problems(config, str(plugin))
    if "ipam" in config:
        problems += _ipam_problems(config["ipam"])
    return problems


def config_problems(obj: Mapping[str, Any], api_version: str, kind: str) -> list[tuple[str, str]]:
    """The CNI configuration problems of ``obj`` if it is a NetworkAttachmentDefinition."""
    if (api_version, kind) != (API, KIND):
        return []
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or "config" not in spec:
        return [("spec.config", "a NetworkAttachmentDefinition needs its CNI configuration")]
    return cni_config_problems(spec["config"])
