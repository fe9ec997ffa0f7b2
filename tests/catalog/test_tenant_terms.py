"""A change of a tenant's rendered settings (trust level, cost centre, display name) is checked
against what the tenant runs and goes through review as a change request."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from catalog.models import Kind, Resource
from gitops import services as gitops
from gitops.models import ChangeRequest
from gitops.specs import GpuShare
from tenants import services
from tenants.models import Tenant
from tenants.specs import tenant_spec

HAMI = {
    "name": "frac",
    "flavor": "h200-hami",
    "kind": "hami",
    "count": 4,
    "gpumem_mib": 24000,
    "gpucores_percent": 25,
}


def _open_changes() -> list[ChangeRequest]:
    return list(ChangeRequest.objects.filter(tenant_slug="alpha", status="open"))


@pytest.mark.django_db
def test_a_tenant_with_hami_shares_cannot_become_dedicated(
    onboarded: dict[str, Any], run_jobs: Any, merged_change: Any
) -> None:
    world = onboarded
    # The share is merged (main holds it), whatever the database says of it yet.
    merged_change(dataclasses.replace(tenant_spec(world["alpha"]), shares=(GpuShare(**HAMI),)))
    Resource.objects.create(
        tenant=world["alpha"], kind=Kind.GPU_SHARE, name="frac", spec=HAMI, state="pending"
    )
    with pytest.raises(ValidationError, match="HAMi"):
        run_jobs(
            services.do_update_tenant,
            world["alpha"],
            acting_user=world["pam"],
            trust_level=Tenant.TrustLevel.DEDICATED,
        )
    assert Tenant.objects.get(slug="alpha").trust_level == Tenant.TrustLevel.SHARED
    assert _open_changes() == []


@pytest.mark.django_db
def test_a_change_of_trust_is_a_reviewed_change(onboarded: dict[str, Any], run_jobs: Any) -> None:
    world = onboarded
    run_jobs(
        services.do_update_tenant,
        world["alpha"],
        acting_user=world["pam"],
        trust_level=Tenant.TrustLevel.DEDICATED,
        cost_centre="CC-9",
    )
    (change,) = _open_changes()
    assert change.title == "Update tenant alpha: cost centre, trust level"
    namespace = gitops.repository().read_file(change.head_sha, "tenants/alpha/namespace.yaml")
    assert b"ai-factory.io/trust-level: dedicated" in namespace
    assert b"ai-factory.io/cost-centre: CC-9" in namespace
    # Four eyes: the admin who changed it cannot approve it.
    with pytest.raises(ValidationError, match="cannot approve"):
        gitops.do_review(change, acting_user=world["pam"], state="approve")
    # A tenant admin still cannot change it at all.
    with pytest.raises(PermissionDenied):
        services.do_update_tenant(
            world["alpha"], acting_user=world["alice"], trust_level=Tenant.TrustLevel.SHARED
        )


@pytest.mark.django_db
def test_a_tenant_admin_renaming_opens_a_change_and_contacts_do_not(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    run_jobs(
        services.do_update_tenant,
        world["alpha"],
        acting_user=world["alice"],
        contacts=["ops@example.com"],
    )
    assert _open_changes() == []
    run_jobs(
        services.do_update_tenant, world["alpha"], acting_user=world["alice"], display_name="A"
    )
    (change,) = _open_changes()
    assert change.files_changed == [
        "tenants/alpha/namespace.yaml",
        "tenants/alpha/spec/tenant.json",
    ]


@pytest.mark.django_db
def test_a_settings_change_supersedes_the_one_still_open(
    onboarded: dict[str, Any], run_jobs: Any
) -> None:
    world = onboarded
    update = services.do_update_tenant
    run_jobs(update, world["alpha"], acting_user=world["alice"], display_name="A")
    (first,) = _open_changes()
    run_jobs(update, world["alpha"], acting_user=world["pam"], cost_centre="CC-7")
    (second,) = _open_changes()
    first.refresh_from_db()
    assert first.status == "closed" and second.pk != first.pk
    # The newer change holds every setting the tenant has now, the earlier one's too.
    namespace = gitops.repository().read_file(second.head_sha, "tenants/alpha/namespace.yaml")
    assert b"ai-factory.io/cost-centre: CC-7" in (namespace or b"")
    settings = gitops.repository().read_file(second.head_sha, "tenants/alpha/spec/tenant.json")
    assert json.loads(settings or b"")["display_name"] == "A"
    # Back to what main holds: nothing left to change, and the open one is closed too.
    run_jobs(update, world["alpha"], acting_user=world["pam"], cost_centre="CC-1")
    run_jobs(update, world["alpha"], acting_user=world["alice"], display_name="Alpha Team")
    assert _open_changes() == []
