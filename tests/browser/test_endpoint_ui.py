"""A model endpoint's page in a real browser, against the simulated cluster: alice (an admin of
alpha) opens her ready endpoint from the catalog, reads its URL and curl example, makes the
tenant's gateway key inline (htmx) and the page then says the tenant has one."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from catalog.models import GatewayKey, Resource
from catalog.specs import desired_tenant
from fleet import services as fleet
from fleet.models import FluxObject
from simulator import Simulator
from tenants.specs import tenant_spec

pytestmark = pytest.mark.browser

SHARE = {"name": "infer", "flavor": "h200", "kind": "whole", "count": 2}
ENDPOINT = {"name": "chat", "model_uri": "hf://org/chat-model", "share": "infer"}


@pytest.fixture
def serving(
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    start_fleet: Callable[..., Simulator],
) -> Simulator:
    """alpha on main with a share and the endpoint chat, applied by the simulated cluster and
    read back by the fleet sync: the InferenceService is ready."""
    alpha = world["alpha"]
    merged_change(tenant_spec(alpha))
    for kind, spec in (("gpu-share", SHARE), ("endpoint", ENDPOINT)):
        merged_change(desired_tenant(alpha, kind=kind, name=spec["name"], spec=spec))
        Resource.objects.create(
            tenant=alpha, kind=kind, name=spec["name"], state="active", spec=spec
        )
    sim = start_fleet()
    for _ in range(2):  # Flux applies main; the sync writes the tenant's Git secret; again
        for _ in range(3):
            sim.tick()
        fleet.sync_all()
    isvc = FluxObject.objects.get(kind="InferenceService", namespace="alpha", name="chat")
    assert isvc.ready == "True", isvc.message
    return sim


def test_an_admin_opens_a_ready_endpoint_and_makes_a_key_inline(
    page: Page, sign_in: Callable[[Page, str], None], serving: Simulator
) -> None:
    sign_in(page, "alice")
    page.goto("/t/alpha/catalog/")
    page.locator("#catalog-endpoint").get_by_role("link", name="chat", exact=True).click()
    expect(page).to_have_url(re.compile(r"/t/alpha/endpoints/chat/$"))
    expect(page.locator("#endpoint-state")).to_have_text("ready")
    expect(page.locator("#endpoint-url")).to_have_text(
        "https://alpha.models.ai-factory.example.com/chat/v1"
    )
    curl = page.locator("#endpoint-curl")
    expect(curl).to_contain_text("/chat/v1/chat/completions")
    expect(curl).to_contain_text("x-api-key: $AI_FACTORY_API_KEY")
    expect(page.locator("#endpoint-cluster-url")).to_have_text(
        "http://chat-predictor.alpha.svc.cluster.local/openai"
    )

    expect(page.locator("#endpoint-no-key")).to_contain_text("no gateway key")
    page.get_by_role("button", name="Make a key").click()
    new_key = page.locator("#endpoint-new-key-value")
    expect(new_key).to_have_text(re.compile(r"^aif_\S{20,}$"))
    expect(page.locator("#endpoint-has-key")).to_contain_text("has a gateway key")
    expect(page.locator("#endpoint-no-key")).to_have_count(0)
    key = new_key.inner_text()
    stored = GatewayKey.objects.get(tenant__slug="alpha")
    assert key.startswith(stored.prefix)
    # The key lives in the tenant's namespace, where the gateway checks it.
    assert "alpha" in serving.get_object("secrets", "alpha", "gateway-api-key")["data"]

    # Shown once: opened again, the page names the key by its prefix only.
    page.reload()
    expect(page.locator("#endpoint-has-key")).to_contain_text(stored.prefix)
    expect(page.locator("#endpoint-new-key-value")).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text(key)
