"""A dedicated tenant's MIG opt-in: only platform admins turn it on or off, with the caveat in
view, through a change; main's spec holds it once merged (and only then in tenant.json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.urls import reverse

from gitops import services as gitops
from gitops.models import ChangeRequest
from portal.models import AuditEvent
from tenants import mig
from tenants.models import PlatformRole
from tenants.specs import tenant_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def on_main(world: dict[str, Any], merged_change: Callable[..., Any]) -> dict[str, Any]:
    """alpha (shared) and bravo (dedicated) on main, as onboarding leaves them."""
    merged_change(tenant_spec(world["alpha"]))
    merged_change(tenant_spec(world["bravo"]))
    return world


def _merge(change: ChangeRequest, make_user: Callable[..., Any]) -> None:
    """Another platform admin approves and merges (four eyes)."""
    paul = get_user_model().objects.filter(username="paul").first() or make_user("paul")
    PlatformRole.objects.get_or_create(user=paul, role=PlatformRole.Name.PLATFORM_ADMIN)
    ChangeRequest.objects.filter(pk=change.pk).update(checks_state="passed")
    change.refresh_from_db()
    gitops.do_review(change, acting_user=paul, state="approve")
    gitops.do_merge(change, acting_user=paul)


def _settings_json(slug: str) -> dict[str, Any]:
    """The tenant's settings file on main, as Git holds it."""
    main = gitops.main_sha()
    assert main is not None
    data = gitops.repository().read_file(main, f"tenants/{slug}/spec/tenant.json")
    assert data is not None
    return dict(json.loads(data))


def test_a_platform_admin_enables_mig_through_a_change(
    on_main: dict[str, Any], make_user: Callable[..., Any]
) -> None:
    world = on_main
    assert "mig_allowed" not in _settings_json("bravo")
    change = mig.do_set_mig_allowed(world["bravo"], allowed=True, acting_user=world["pam"])
    assert change.title == "Enable MIG slices for bravo" and change.scope == ["settings"]
    assert change.files_changed == ["tenants/bravo/spec/tenant.json"]
    assert "still debated" in change.description
    assert AuditEvent.objects.filter(action="tenant.mig_allowed", tenant_slug="bravo").exists()
    assert mig.mig_on_main(world["bravo"]) is False  # not until merged
    with pytest.raises(ValidationError, match="is still open"):
        mig.do_set_mig_allowed(world["bravo"], allowed=True, acting_user=world["pam"])
    _merge(change, make_user)
    assert mig.mig_on_main(world["bravo"]) is True
    assert _settings_json("bravo")["mig_allowed"] is True
    # Every other tenant's settings file stays as it was.
    assert "mig_allowed" not in _settings_json("alpha")
    with pytest.raises(ValidationError, match="enabled for bravo on main already"):
        mig.do_set_mig_allowed(world["bravo"], allowed=True, acting_user=world["pam"])
    off = mig.do_set_mig_allowed(world["bravo"], allowed=False, acting_user=world["pam"])
    assert off.title == "Disable MIG slices for bravo"


@pytest.mark.parametrize(
    ("slug", "who", "error", "match"),
    [
        ("bravo", "charlie", PermissionDenied, "Only platform admins enable MIG"),
        ("bravo", "alice", PermissionDenied, "Only platform admins enable MIG"),
        ("alpha", "pam", ValidationError, "the opt-in is for dedicated tenants"),
    ],
)
def test_only_platform_admins_set_it_and_only_for_dedicated_tenants(
    on_main: dict[str, Any], slug: str, who: str, error: type[Exception], match: str
) -> None:
    before = ChangeRequest.objects.count()
    with pytest.raises(error, match=match):
        mig.do_set_mig_allowed(on_main[slug], allowed=True, acting_user=on_main[who])
    assert ChangeRequest.objects.count() == before


def test_the_settings_page_shows_the_caveat_and_the_toggle_to_platform_admins(
    on_main: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = reverse("tenants:settings", kwargs={"tenant": "bravo"})
    toggle = reverse("tenants:mig", kwargs={"tenant": "bravo"})
    # Outsiders get the 404 of a tenant they do not see; the tenant's own admin a 403.
    assert login("alice").post(toggle, {"allowed": "on"}).status_code == 404
    assert login("charlie").post(toggle, {"allowed": "on"}).status_code == 403
    own = login("charlie").get(page).content.decode()
    assert "still debated" in own and toggle not in own
    assert "<strong>Off</strong>" in own
    admin = login("pam")
    assert toggle in admin.get(page).content.decode()
    assert not ChangeRequest.objects.filter(title__contains="MIG").exists()
    opened = admin.post(toggle, {"allowed": "on"})
    change = ChangeRequest.objects.get(title="Enable MIG slices for bravo")
    assert opened["Location"] == reverse("gitops:detail", args=[change.pk])
    shown = admin.get(page).content.decode()
    assert f"#{change.pk}" in shown and toggle not in shown
    # A shared tenant's settings page has no MIG section.
    alpha = reverse("tenants:settings", kwargs={"tenant": "alpha"})
    assert 'id="mig-state"' not in login("pam").get(alpha).content.decode()
