"""Tenant clusters whose platform objects would share a name with another tenant's.

Every tenant's vCluster is a HelmRelease ``<slug>-<cluster>`` in flux-system, so tenant
``llm`` with cluster ``platform-x`` and tenant ``llm-platform`` with cluster ``x`` would be one
object. The catalog refuses the second, when it is asked for and again when it is approved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from catalog import services
from catalog.forms import ClusterForm
from catalog.models import Resource, ResourceRequest
from gitops.fleet import configured_fleet
from portal.models import AuditEvent
from tenants.models import Membership, Role, Tenant

S = ResourceRequest.State


@pytest.fixture
def teams(world: dict[str, Any], make_user: Callable[..., Any]) -> dict[str, Any]:
    """Tenants ``llm`` and ``llm-platform``, with a member each."""
    people = dict(world)
    for slug, username in (("llm", "lena"), ("llm-platform", "pete")):
        tenant = Tenant.objects.create(slug=slug, display_name=slug.upper())
        people[slug] = tenant
        people[username] = make_user(username)
        Membership.objects.create(user=people[username], tenant=tenant, role=Role.MEMBER)
    return people


def _counts() -> tuple[int, int, int]:
    return (Resource.objects.count(), ResourceRequest.objects.count(), AuditEvent.objects.count())


def _ask(teams: dict[str, Any], slug: str, user: str, name: str) -> ResourceRequest:
    return services.do_create_request(
        teams[slug], acting_user=teams[user], kind="cluster", spec={"name": name}
    )


def test_a_cluster_released_like_another_tenants_is_refused(teams: dict[str, Any]) -> None:
    held = _ask(teams, "llm-platform", "pete", "x")  # asked for first: the name is held
    before = _counts()
    with pytest.raises(ValidationError) as info:
        _ask(teams, "llm", "lena", "platform-x")
    assert info.value.message_dict["name"] == [
        "The name 'platform-x' cannot be used: the cluster's release would be named "
        "'llm-platform-x', like a cluster of another tenant. Choose another name."
    ]
    assert _counts() == before
    # The form says the same, on the name field.
    form = ClusterForm(
        {
            "name": "platform-x",
            "kubernetes_version": "1.33",
            "size": "small",
            "gpu_quota": 0,
            "cpu_quota": 16,
            "memory_gib": 64,
            "max_pods": 100,
        },
        tenant=teams["llm"],
        fleet=configured_fleet(),
    )
    assert not form.is_valid()
    assert "like a cluster of another tenant" in form.errors["name"][0]
    # A name whose release is free is fine, and so is the same name once the other request
    # is withdrawn.
    assert _ask(teams, "llm", "lena", "platform-y").state == S.SUBMITTED
    services.do_cancel(held, acting_user=teams["pete"])
    assert _ask(teams, "llm", "lena", "platform-x").state == S.SUBMITTED


def test_approval_refuses_a_release_taken_since_the_request(teams: dict[str, Any]) -> None:
    request = _ask(teams, "llm", "lena", "platform-x")
    # The other tenant's cluster reached main meanwhile (made before the catalog checked).
    Resource.objects.create(
        tenant=teams["llm-platform"],
        kind="cluster",
        name="x",
        state=Resource.State.ACTIVE,
        spec={"name": "x"},
    )
    with pytest.raises(ValidationError, match="like a cluster of another tenant"):
        services.do_approve(request, acting_user=teams["pam"])
    request.refresh_from_db()
    assert request.state == S.SUBMITTED
    assert request.change is None
    # Once that cluster is decommissioned, its release name is free again.
    Resource.objects.filter(tenant=teams["llm-platform"]).update(
        state=Resource.State.DECOMMISSIONED
    )
    check = services.check_request(teams["llm"], "cluster", "platform-x", request.spec)
    assert check.errors == {}
