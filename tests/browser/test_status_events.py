"""Status as events in a real browser: a merged change's page, left open, shows it applied
when Flux reports it, with no reload and no sync running: the simulator's notification-
controller posts the signed event to /hooks/flux/, the portal reads the Kustomization, moves
the change on, and the page's live region re-renders on its next cheap poll."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from fleet import services as fleet
from fleet.kube import Kube
from fleet.models import FluxEventReceipt
from gitops.models import ChangeRequest
from gitops.specs import TenantSpec
from simulator import Simulator
from simulator.store import NAMESPACES
from tests.support import wait_until

pytestmark = pytest.mark.browser

SECRET = "browser-flux-events-key"


def test_a_merged_change_shows_applied_without_a_reload(
    page: Page,
    sign_in: Callable[[Page, str], None],
    live_server: Any,
    settings: Any,
    start_fleet: Callable[..., Simulator],
    merged_change: Callable[..., ChangeRequest],
) -> None:
    settings.FLUX_WEBHOOK_SECRET = SECRET
    cluster = start_fleet(
        tick_seconds=0.2,
        flux_events_address=f"{live_server.url}/hooks/flux/",
        flux_events_secret=SECRET.encode(),
    )
    onboarding = merged_change(TenantSpec(slug="alpha"))
    # Flux creates the tenant's namespace; its own Kustomization waits for the Git Secret the
    # portal writes, so the change stays pending until the test lets it apply.
    wait_until(
        lambda: cluster.store.get(NAMESPACES, "", "alpha") is not None,
        20,
        "Flux to create the tenant's namespace",
    )
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "pending"

    sign_in(page, "bob")
    page.goto(f"/changes/{onboarding.pk}/")
    live = page.locator("#apply")
    expect(live).to_contain_text("Waiting for Flux")
    page.evaluate("window.loadedOnce = true")

    with Kube() as kube:  # what the next sync would do: write the tenant's Git Secret
        fleet.ensure_source_credentials(kube)
    expect(live).to_contain_text("Applied", timeout=20_000)
    assert page.evaluate("window.loadedOnce") is True  # the same document: no reload
    assert FluxEventReceipt.objects.filter(namespace="alpha", name="alpha-workloads").exists()
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "applied"
    assert re.search(r"alpha/alpha-workloads", onboarding.apply_message)
