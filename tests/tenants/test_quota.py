"""A tenant's GPU quota: platform admins set it (service, settings page), audited; a tenant
admin cannot; it never goes below what the tenant's approved shares hold. The API's door is
in tests/api/test_endpoints.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from catalog.specs import desired_tenant
from portal.models import AuditEvent
from tenants.models import Tenant
from tenants.quota import QUOTA_MAX, do_set_gpu_quota
from tenants.specs import tenant_spec

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
URL = "/t/alpha/settings/gpu-quota/"
HAMI_SLOT = {"gpumem_mib": 1024, "gpucores_percent": 10}


def _quota() -> int:
    return Tenant.objects.get(slug="alpha").gpu_quota


def test_a_platform_admin_sets_it_and_it_is_audited(world: dict[str, Any]) -> None:
    tenant = do_set_gpu_quota(world["alpha"], acting_user=world["pam"], quota=40)
    assert tenant.gpu_quota == 40 == _quota()
    event = AuditEvent.objects.get(action="tenant.set_gpu_quota")
    assert (event.actor, event.tenant_slug, event.diff) == (
        world["pam"],
        "alpha",
        {"gpu_quota": [16, 40]},
    )
    # The same value again changes nothing and writes no second row.
    do_set_gpu_quota(world["alpha"], acting_user=world["pam"], quota=40)
    assert AuditEvent.objects.filter(action="tenant.set_gpu_quota").count() == 1


@pytest.mark.parametrize("name", ["alice", "bob", "fiona"])
def test_anyone_but_a_platform_admin_is_refused_and_nothing_changes(
    world: dict[str, Any], name: str
) -> None:
    with pytest.raises(PermissionDenied, match="Only platform admins set a tenant's GPU quota"):
        do_set_gpu_quota(world["alpha"], acting_user=world[name], quota=40)
    assert _quota() == 16
    assert not AuditEvent.objects.filter(action="tenant.set_gpu_quota").exists()


@pytest.mark.parametrize("quota", [-1, QUOTA_MAX + 1, True, 2.5])
def test_it_takes_a_whole_number_from_0_to_the_maximum(world: dict[str, Any], quota: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        do_set_gpu_quota(world["alpha"], acting_user=world["pam"], quota=quota)
    assert "whole number of GPUs from 0 to 10000" in refused.value.message_dict["gpu_quota"][0]
    assert _quota() == 16


def test_it_is_never_below_what_the_approved_shares_hold(
    world: dict[str, Any], merged_change: Callable[..., Any]
) -> None:
    alpha = world["alpha"]
    merged_change(tenant_spec(alpha))
    for name, spec in (
        ("train", {"flavor": "h200", "kind": "whole", "count": 4}),
        # Half a GPU: 5 of its 10 slots.
        ("slots", {"flavor": "h200-hami", "kind": "hami", "count": 5, **HAMI_SLOT}),
    ):
        share = {"name": name, **spec}
        merged_change(desired_tenant(alpha, kind="gpu-share", name=name, spec=share))
    with pytest.raises(ValidationError) as refused:
        do_set_gpu_quota(alpha, acting_user=world["pam"], quota=4)
    assert "already add up to 4.5 GPUs" in refused.value.message_dict["gpu_quota"][0]
    assert _quota() == 16
    assert do_set_gpu_quota(alpha, acting_user=world["pam"], quota=5).gpu_quota == 5


def test_the_settings_page_sets_it_for_a_platform_admin(login: Callable[[str], Client]) -> None:
    pam = login("pam")
    page = pam.get("/t/alpha/settings/").content.decode()
    assert 'hx-post="/t/alpha/settings/gpu-quota/"' in page and 'value="16"' in page
    response = pam.post(URL, {"gpu_quota": "24"}, **HTMX)
    assert response.status_code == 200 and '"/t/alpha/settings/"' in response["HX-Location"]
    assert _quota() == 24
    assert "The GPU quota of alpha is 24." in pam.get("/t/alpha/settings/").content.decode()
    refused = pam.post(URL, {"gpu_quota": "lots"}, **HTMX)
    assert refused.status_code == 422 and 'id="gpu-quota"' in refused.content.decode()
    assert "<h1>" not in refused.content.decode()  # the form's fragment alone
    assert _quota() == 24


def test_a_tenant_admin_sees_it_and_cannot_set_it(login: Callable[[str], Client]) -> None:
    alice = login("alice")
    page = alice.get("/t/alpha/settings/").content.decode()
    assert "16 GPUs" in page and "gpu-quota/" not in page
    assert alice.post(URL, {"gpu_quota": "99"}, **HTMX).status_code == 403
    assert alice.get(URL).status_code == 405
    assert login("charlie").post(URL, {"gpu_quota": "99"}).status_code == 404
    assert _quota() == 16


def test_the_quota_reaches_main_through_a_settings_change(
    world: dict[str, Any], merged_change: Any
) -> None:
    """The quota sizes the namespace's CPU and memory: main follows through a reviewed
    change that only platform admins may close."""
    from gitops.models import ChangeRequest
    from tenants.specs import tenant_spec

    merged_change(tenant_spec(world["alpha"]))
    do_set_gpu_quota(world["alpha"], acting_user=world["pam"], quota=40)
    change = ChangeRequest.objects.get(status="open", tenant_slug="alpha", scope=["settings"])
    assert change.title == "Update tenant alpha: gpu quota"
    assert change.close_action == "change_trust"
    assert any(path.endswith("spec/tenant.json") for path in change.files_changed)
