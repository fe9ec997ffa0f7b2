"""A dedicated tenant's own partition of the GPU fabric: Multus NetworkAttachmentDefinitions.

For each pool of the fleet's ``fabric`` that a dedicated tenant with a partition has a share
on, one ``NetworkAttachmentDefinition`` (``k8s.cni.cncf.io/v1``) named ``fabric-<pool>`` in the
tenant's namespace. Its ``k8s.v1.cni.cncf.io/resourceName`` annotation names the pool's SR-IOV
resource, so Multus hands the CNI plugin the virtual function the device plugin allocated to
the pod (multus-cni v4.3.0 pkg/k8sclient/k8sclient.go ``getKubernetesDelegate``: the
``deviceID`` comes from the pod's resource map under that name); ``spec.config`` is the CNI
configuration, a JSON document whose ``name`` is the attachment's own, as the NAD standard
recommends (k8snetworkplumbingwg/multi-net-spec v1.0 markdown, the last release as text:
``NetworkAttachmentDefinitionSpec`` and 3.4.3 "Naming Considerations"):

- InfiniBand: ib-sriov-cni (``type: ib-sriov``, v1.3.0 ``pkg/types/types.go``
  ``IbSriovNetConf``) with the tenant's ``pkey``. The plugin does not program the subnet
  manager: ib-kubernetes adds each pod's VF GUID to the partition, and with
  ``ibKubernetesEnabled`` the plugin refuses to attach a VF ib-kubernetes has not configured
  (``cmd/ib-sriov-cni/main.go`` ``getNetConfNetns``), so no pod joins the fabric outside its
  partition. ``rdmaIsolation`` moves the RDMA device into the pod's network namespace;
- RoCE: sriov-cni (``type: sriov``, v2.10.0 ``pkg/types/types.go`` ``SriovNetConf``) with the
  tenant's ``vlan``, spoof checking on and trust off, so the VF cannot leave its VLAN.

Addresses come from whereabouts over the partition's ``subnet`` when it has one. The
configuration is built as data and dumped with ``json.dumps``: nothing typed is pasted into
it, and ``gitops.checks.network_attachment`` validates it against the plugins' fields.

Pods join the partition by asking for it: the annotation ``k8s.v1.cni.cncf.io/networks:
fabric-<pool>`` and one unit of the pool's SR-IOV resource (``attachment_request``). The
portal's own jobs ask for them (``gitops.render.jobs``); no policy adds them to other pods,
because the pool a pod lands on is Kueue's choice at admission, after the pod exists
(docs/tenant-guide.md). A pod that names the attachment without the resource gets no VF; one
that names another namespace's attachment is refused by the tenant's Kyverno policy
(``own_namespace_rule``) and by Multus with ``namespaceIsolation`` (docs/operator-guide.md).
"""

from __future__ import annotations

import json
from typing import Any

from gitops.render.meta import metadata
from gitops.specs import FabricPartition, FabricPool, FleetSpec, TenantSpec

API = "k8s.cni.cncf.io/v1"
KIND = "NetworkAttachmentDefinition"
RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# Both plugins register every CNI spec version (skel.PluginMainFuncs with version.All).
CNI_VERSION = "1.0.0"
NAME_PREFIX = "fabric-"


def attachment_name(pool: str) -> str:
    """The NetworkAttachmentDefinition of ``pool`` in a tenant's namespace."""
    return f"{NAME_PREFIX}{pool}"


def cni_config(name: str, kind: str, partition: FabricPartition) -> dict[str, Any]:
    """The CNI configuration of one attachment, as data."""
    config: dict[str, Any] = {"cniVersion": CNI_VERSION, "name": name}
    if kind == "infiniband":
        config.update(
            {
                "type": "ib-sriov",
                "pkey": f"0x{partition.pkey:04x}",
                "link_state": "enable",
                "ibKubernetesEnabled": True,
                "rdmaIsolation": True,
            }
        )
    else:
        config.update(
            {
                "type": "sriov",
                "vlan": partition.vlan,
                "spoofchk": "on",
                "trust": "off",
                "link_state": "enable",
            }
        )
    if partition.subnet:
        config["ipam"] = {"type": "whereabouts", "range": partition.subnet}
    return config


def attachment(
    tenant: TenantSpec, pool: FabricPool, kind: str, partition: FabricPartition
) -> dict[str, Any]:
    name = attachment_name(pool.flavor)
    return {
        "apiVersion": API,
        "kind": KIND,
        "metadata": metadata(
            name,
            tenant.slug,
            tenant=tenant.slug,
            annotations={RESOURCE_NAME_ANNOTATION: pool.resource},
        ),
        "spec": {"config": json.dumps(cni_config(name, kind, partition), sort_keys=True)},
    }


def tenant_pools(tenant: TenantSpec, fleet: FleetSpec) -> list[FabricPool]:
    """The fabric pools the tenant has a partition on: those of its shares, for a dedicated
    tenant the fleet file gives a partition; none otherwise."""
    fabric = fleet.fabric
    if fabric is None or tenant.trust_level != "dedicated" or fabric.partition(tenant.slug) is None:
        return []
    used = {share.flavor for share in tenant.shares}
    return sorted((p for p in fabric.pools if p.flavor in used), key=lambda p: p.flavor)


def tenant_objects(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """The tenant's NetworkAttachmentDefinitions (see the module docstring)."""
    pools = tenant_pools(tenant, fleet)
    if not pools or fleet.fabric is None:
        return []
    partition = fleet.fabric.partition(tenant.slug)
    assert partition is not None
    return [attachment(tenant, pool, fleet.fabric.kind, partition) for pool in pools]


def own_namespace_rule() -> dict[str, Any]:
    """The tenant policy's rule (``gitops.render.kyverno``, on fleets with a fabric): a pod names
    attachments of its own namespace only, by bare name. Multus's ``namespaceIsolation`` holds
    the same in the node's CNI; this refuses the pod at admission, with a reason, even where
    Multus runs without it: ``other/fabric-h200`` would otherwise join that tenant's partition.
    The annotation's two forms (multus-cni v4.3.0 ``parsePodNetworkAnnotation``) name another
    namespace with a ``/`` or a ``namespace`` key."""
    return {
        "name": "confine-network-attachments",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {
            "failureAction": "Enforce",
            "message": (
                f"{NETWORKS_ANNOTATION} may name only network attachments of the pod's own "
                "namespace, by name (without a namespace)."
            ),
            "deny": {
                "conditions": {
                    "any": [
                        {
                            "key": (
                                f'{{{{ request.object.metadata.annotations."{NETWORKS_ANNOTATION}"'
                                " || '' }}"
                            ),
                            "operator": "AnyIn",
                            "value": ["*/*", "*namespace*"],
                        }
                    ]
                }
            },
        },
    }


def attachment_request(pool: FabricPool) -> tuple[dict[str, str], dict[str, int]]:
    """What a pod adds to join its tenant's partition on ``pool``: the annotation and the
    resource request (per pod, one VF)."""
    return {NETWORKS_ANNOTATION: attachment_name(pool.flavor)}, {pool.resource: 1}
