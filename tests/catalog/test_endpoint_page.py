"""A model endpoint's own page (catalog.views_endpoints): what main holds, its state as the
cluster (the simulator, read by the fleet sync) reports it, how to call it, and the tenant's
gateway key made inline by those tenants.access lets make it."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog import idle_actions
from catalog.models import GatewayKey, Kind, Resource, ResourceRequest
from fleet import services as fleet
from fleet.models import FluxObject
from simulator import Simulator
from tests.support.catalog import through_main

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
ENDPOINT = {"name": "chat", "model_uri": "hf://org/chat-model", "share": "train"}
PAGE = "/t/alpha/endpoints/chat/"
KEY = "/t/alpha/endpoints/chat/key/"
HTMX = {"HTTP_HX_REQUEST": "true"}
BASE_URL = "https://alpha.models.ai-factory.example.com/chat/v1"
CLUSTER_URL = "http://chat-predictor.alpha.svc.cluster.local/openai"

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    return start_fleet()


@pytest.fixture
def endpoint(world: dict[str, Any], onboarded: Any, run_jobs: Any) -> Resource:
    """alpha's endpoint chat on main, on its share train; nothing reported by a cluster yet."""
    through_main(world, run_jobs, Kind.GPU_SHARE, SHARE)
    return through_main(world, run_jobs, Kind.ENDPOINT, ENDPOINT)


def _serve(sim: Simulator) -> None:
    """The simulated cluster applies main and the fleet sync reads it back (as the beat does)."""
    for _ in range(3):
        sim.tick()
    fleet.sync_all()
    for _ in range(3):
        sim.tick()
    fleet.sync_all()


def _secret(sim: Simulator) -> dict[str, str]:
    secret = sim.get_object("secrets", "alpha", "gateway-api-key")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_a_member_sees_how_to_call_a_ready_endpoint(
    endpoint: Resource, sim: Simulator, login: Callable[[str], Client]
) -> None:
    _serve(sim)
    isvc = FluxObject.objects.get(kind="InferenceService", namespace="alpha", name="chat")
    assert isvc.ready == "True"
    page = login("bob").get(PAGE)
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    body = page.content.decode()
    assert 'id="endpoint-state">ready<' in body
    assert BASE_URL in body and CLUSTER_URL in body
    assert "curl https://alpha.models.ai-factory.example.com/chat/v1/chat/completions" in body
    # The key header with a placeholder, vLLM's served name as the model, never a key.
    assert "-H &quot;x-api-key: $AI_FACTORY_API_KEY&quot;" in body
    assert "&quot;model&quot;: &quot;chat&quot;" in body
    assert "alpha/chat" in body  # the LiteLLM model
    # No key yet: the page says so, and a member (not an admin) is not offered to make one.
    assert "has no gateway key" in body and "Make a key" not in body
    assert "Make a key" in login("alice").get(PAGE).content.decode()
    assert "Make a key" not in login("vic").get(PAGE).content.decode()


def test_the_state_follows_what_the_cluster_reports(
    endpoint: Resource, login: Callable[[str], Client]
) -> None:
    bob = login("bob")
    assert 'id="endpoint-state">not reported by the cluster yet<' in bob.get(PAGE).content.decode()
    FluxObject.objects.create(
        kind="InferenceService",
        namespace="alpha",
        name="chat",
        tenant_slug="alpha",
        ready="False",
        reason="PredictorNotReady",
        message="0/1 predictor pods ready",
    )
    body = bob.get(PAGE).content.decode()
    assert 'id="endpoint-state">not ready<' in body
    assert "PredictorNotReady" in body and "0/1 predictor pods ready" in body
    # Still callable once it answers: the URL is what main holds, not what is up now.
    assert BASE_URL in body


def test_an_asleep_endpoint_says_so_and_offers_wake(
    world: dict[str, Any], endpoint: Resource, run_jobs: Any, login: Callable[[str], Client]
) -> None:
    run_jobs(idle_actions.sleep, endpoint, reason="idle for 2 hours")
    assert run_jobs(idle_actions.merge_ready) == 1
    body = login("bob").get(PAGE).content.decode()
    assert 'id="endpoint-state">asleep<' in body and 'id="endpoint-asleep"' in body
    wake = f"/t/alpha/resources/{endpoint.pk}/wake/"
    assert f'action="{wake}"' in body
    assert f'action="{wake}"' not in login("vic").get(PAGE).content.decode()  # a viewer
    response = login("bob").post(wake)
    assert response.status_code == 302
    waking = ResourceRequest.objects.filter(resource=endpoint, spec__asleep=False).latest("pk")
    assert waking.requested_by == world["bob"]


def test_an_admin_makes_the_key_inline_and_sees_it_once(
    world: dict[str, Any], endpoint: Resource, sim: Simulator, login: Callable[[str], Client]
) -> None:
    _serve(sim)  # the tenant's namespace exists: the key's Secret goes there
    alice = login("alice")
    made = alice.post(KEY, **HTMX)
    assert made.status_code == 200 and made["Cache-Control"] == "no-store"
    fragment = made.content.decode()
    key = _secret(sim)["alpha"]
    assert key in fragment and fragment.lstrip().startswith('<section class="catalog-endpoint"')
    assert 'id="endpoint-has-key"' in fragment and "Make a key" not in fragment
    stored = GatewayKey.objects.get(tenant=world["alpha"])
    assert stored.created_by == world["alice"]
    # Shown once: the page then says the tenant has a key, by its prefix only.
    again = alice.get(PAGE).content.decode()
    assert key not in again and key[:12] in again and "has no gateway key" not in again
    # A second make does not rotate the key behind the page's back.
    twice = alice.post(KEY, **HTMX)
    assert twice.status_code == 422 and "has a key already" in twice.content.decode()
    assert _secret(sim)["alpha"] == key
    assert GatewayKey.objects.get(tenant=world["alpha"]).digest == stored.digest


@pytest.mark.parametrize("persona", ["bob", "vic"])
def test_members_and_viewers_cannot_make_the_key(
    persona: str, endpoint: Resource, login: Callable[[str], Client]
) -> None:
    assert login(persona).post(KEY, **HTMX).status_code == 403
    assert not GatewayKey.objects.exists()


def test_outsiders_get_404_and_so_does_an_endpoint_main_does_not_hold(
    world: dict[str, Any], endpoint: Resource, login: Callable[[str], Client]
) -> None:
    charlie = login("charlie")  # bravo's admin
    assert charlie.get(PAGE).status_code == 404
    assert charlie.post(KEY).status_code == 404
    assert not GatewayKey.objects.exists()
    assert login("bob").get("/t/alpha/endpoints/nope/").status_code == 404
    assert login("alice").post("/t/alpha/endpoints/nope/key/").status_code == 404
    assert login("bob").post(PAGE).status_code == 405
    # Requested but not merged: main does not hold it, so it has no page yet.
    Resource.objects.create(
        tenant=world["alpha"],
        kind=Kind.ENDPOINT,
        name="later",
        spec={**ENDPOINT, "name": "later"},
        state=Resource.State.PENDING,
    )
    assert login("bob").get("/t/alpha/endpoints/later/").status_code == 404


def test_the_catalog_the_request_and_the_status_link_the_page(
    endpoint: Resource, sim: Simulator, login: Callable[[str], Client]
) -> None:
    _serve(sim)
    bob = login("bob")
    assert f'href="{PAGE}"' in bob.get("/t/alpha/catalog/").content.decode()
    request = endpoint.requests.get()
    assert f'href="{PAGE}"' in bob.get(f"/t/alpha/requests/{request.pk}/").content.decode()
    assert f'href="{PAGE}"' in bob.get("/t/alpha/status/").content.decode()
    # The page links back to that request.
    assert f"/t/alpha/requests/{request.pk}/" in bob.get(PAGE).content.decode()
