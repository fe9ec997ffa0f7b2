"""A catalog change that adds a cluster binds the members the tenant has when it is opened;
anyone removed before it merges is not let in: it merges as its request onto main's members."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog import services
from catalog.models import Kind
from gitops import services as gitops
from gitops.models import ChangeRequest
from tenants.models import Membership
from tenants.services import ACCESS_TITLE, do_remove_member
from tests import cluster_oidc

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 4}
DEV = {"name": "dev", "node_pools": ["h200"], "gpu_quota": 2}
LAB = {"name": "lab", "node_pools": ["h200"], "gpu_quota": 2}


def users(cluster: str) -> set[str]:
    path = f"tenants/alpha/cluster-access/{cluster}/bindings.yaml"
    data = gitops.repository().read_file(gitops.main_sha() or "", path) or b""
    return {d["subjects"][0]["name"] for d in yaml.safe_load_all(data) if d}


def approved(world: dict[str, Any], run_jobs: Any, spec: dict[str, Any]) -> ChangeRequest:
    """bob asks, pam approves: the pull request is open and its checks have run."""
    kind = Kind.GPU_SHARE if "flavor" in spec else Kind.CLUSTER
    req = run_jobs(
        services.do_create_request, world["alpha"], acting_user=world["bob"], kind=kind, spec=spec
    )
    req = run_jobs(services.do_approve, req, acting_user=world["pam"])
    assert req.change is not None, req.error
    req.change.refresh_from_db()
    return req.change


@pytest.mark.django_db
def test_a_member_removed_while_a_cluster_waited_is_not_let_into_it(
    onboarded: dict[str, Any], run_jobs: Any, settings: Any, tmp_path: Path
) -> None:
    world = onboarded
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc())
    for name in ("alice", "bob"):
        cluster_oidc.link(world[name], f"sub-{name}")
    for spec in (SHARE, DEV):
        run_jobs(gitops.do_merge, approved(world, run_jobs, spec), acting_user=world["pam"])
        run_jobs(services.advance_requests)
    assert users("dev") == {"oidc:sub-alice", "oidc:sub-bob"}

    lab = approved(world, run_jobs, LAB)  # rendered while bob is a member
    head = gitops.repository().read_file(
        lab.head_sha, "tenants/alpha/cluster-access/lab/bindings.yaml"
    )
    assert b"oidc:sub-bob" in (head or b"")

    bob = Membership.objects.get(user=world["bob"], tenant=world["alpha"])
    run_jobs(do_remove_member, bob, acting_user=world["alice"])
    assert users("dev") == {"oidc:sub-alice"}  # revoked by itself at once

    # lab's change is merged as its request onto main as it is now (gitops.services.replaying):
    # its bindings are rendered from main's members, which no longer hold bob.
    run_jobs(gitops.do_merge, lab, acting_user=world["pam"])
    assert users("lab") == {"oidc:sub-alice"}
    run_jobs(services.advance_requests)
    assert users("lab") == {"oidc:sub-alice"}
    fixes = ChangeRequest.objects.filter(title=ACCESS_TITLE.format(slug="alpha"))
    assert [c.status for c in fixes.order_by("pk")] == ["merged"]  # nothing left to fix
