"""Tenant isolation holds for pods on nodes that also run host-network DaemonSets.

The rendered policies of a tenant with everything (endpoints, clusters, the Cilium gateway or
Envoy Gateway, NodeLocal DNS, cluster OIDC) are evaluated for the peers a node brings: a
host-network pod of the pod's own node and of another node. How a peer matches follows Cilium
(``gitops.render.network``, "Host-network pods"): such a pod carries the reserved identity
``host`` on its own node and ``remote-node`` elsewhere, never a namespace or pod labels, and
CIDR peers select no node; entity ``cluster`` and ``all`` include both.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

import pytest

from gitops.fleet import demo_fleet
from gitops.render import network, objects_for, render_tenant_tree
from gitops.specs import ClusterOidc, GatewayImplementation, TenantClusterSpec
from tests.gitops.render_samples import rich_tenant

# Which entities select a host-network pod on the same node and on another node
# (cilium/cilium pkg/policy/api/entity.go EntitySelectorMapping and InitEntities).
SELECTS = {
    "same-node": {"host", "cluster", "all"},
    "other-node": {"remote-node", "cluster", "all"},
}


def peer_admits(peer: dict[str, Any]) -> bool:
    """Whether a NetworkPolicy peer admits a host-network pod (on any node): pod and namespace
    selectors match pods by their own identity, which a host-network pod has not; an ipBlock
    would match its node's address on most CNIs, so it counts."""
    return "ipBlock" in peer


def rule_admits(rule: dict[str, Any], kind: str, where: str) -> bool:
    if kind == "CiliumNetworkPolicy":
        # CIDR and endpoint peers: a CIDR selects no node, an empty endpoint selector in a
        # namespaced policy selects the namespace's pods only; entities decide.
        return bool(set(rule.get("fromEntities", ())) & SELECTS[where])
    peers = rule.get("from")
    if peers is None:
        return True  # a rule without "from" admits every source
    return any(peer_admits(peer) for peer in peers)


def admitting(objs: list[dict[str, Any]], where: str) -> set[str]:
    """The names of the tenant policies whose ingress admits a host-network pod ``where``."""
    names = set()
    for obj in objs:
        if obj["kind"] not in ("NetworkPolicy", "CiliumNetworkPolicy"):
            continue
        for rule in obj["spec"].get("ingress", ()):
            if rule_admits(rule, obj["kind"], where):
                names.add(obj["metadata"]["name"])
    return names


def tenant_policies(implementation: GatewayImplementation) -> list[dict[str, Any]]:
    fleet = demo_fleet()
    fleet = dataclasses.replace(
        fleet,
        gateway=dataclasses.replace(fleet.gateway, implementation=implementation),
        node_local_dns="169.254.20.10",
        cluster_oidc=ClusterOidc(issuer_url="https://id.example.com", client_id="kubectl"),
    )
    tenant = dataclasses.replace(
        rich_tenant(), clusters=(TenantClusterSpec(name="dev", node_pools=("h200",)),)
    )
    return [
        obj
        for obj in objects_for(render_tenant_tree(tenant, fleet))
        if obj["kind"] in ("NetworkPolicy", "CiliumNetworkPolicy")
    ]


@pytest.mark.parametrize("implementation", get_args(GatewayImplementation))
def test_no_policy_admits_host_network_pods_of_other_nodes(
    implementation: GatewayImplementation,
) -> None:
    policies = tenant_policies(implementation)
    names = {p["metadata"]["name"] for p in policies}
    assert {"default-deny", "allow-gateway", "allow-vcluster-control-plane"} <= names
    assert admitting(policies, "other-node") == set()


@pytest.mark.parametrize("implementation", get_args(GatewayImplementation))
def test_only_the_probe_rule_admits_the_pods_own_node(
    implementation: GatewayImplementation,
) -> None:
    policies = tenant_policies(implementation)
    expected = {"allow-kubelet-probes"} if implementation == "cilium" else set()
    assert admitting(policies, "same-node") == expected
    for obj in policies:
        for rule in obj["spec"].get("ingress", ()):
            assert set(rule.get("fromEntities", ())) <= network.ADMITTED_ENTITIES


def test_the_evaluation_sees_a_broad_rule() -> None:
    """The evaluator is not blind: the rules it must refuse are caught."""
    broad = [
        {
            "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "nodes"},
            "spec": {"ingress": [{"fromEntities": ["cluster"]}]},
        },
        {
            "kind": "NetworkPolicy",
            "metadata": {"name": "cidr"},
            "spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]},
        },
        {"kind": "NetworkPolicy", "metadata": {"name": "open"}, "spec": {"ingress": [{}]}},
    ]
    assert admitting(broad, "other-node") == {"nodes", "cidr", "open"}
