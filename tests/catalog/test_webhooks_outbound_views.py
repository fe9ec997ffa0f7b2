"""The webhook pages: who sees what, who may change what, and the secret shown once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from catalog import outbound
from catalog.models import WebhookDelivery, WebhookEndpoint
from portal import encryption
from portal.models import AuditEvent

pytestmark = pytest.mark.django_db

URL = "https://1.1.1.1/hooks/portal"


@pytest.fixture
def hook(world: dict[str, Any], settings: Any) -> WebhookEndpoint:
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    return outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=URL)


@pytest.fixture
def delivery(hook: WebhookEndpoint) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        endpoint=hook,
        message_id="msg_log1",
        event_type=outbound.EVENT_STATE_CHANGED,
        body="{}",
        status=WebhookDelivery.Status.FAILED,
        attempts=6,
        max_attempts=6,
        response_status=502,
        response_excerpt="bad gateway",
    )


def _pages(hook: WebhookEndpoint, delivery: WebhookDelivery) -> list[tuple[str, str, dict]]:
    t = "alpha"
    return [
        ("get", reverse("catalog:webhooks", args=[t]), {}),
        ("post", reverse("catalog:webhooks", args=[t]), {"url": URL}),
        ("get", reverse("catalog:webhook", args=[t, hook.pk]), {}),
        ("post", reverse("catalog:webhook", args=[t, hook.pk]), {"action": "remove"}),
        ("get", reverse("catalog:webhook_redeliver", args=[t, hook.pk, delivery.pk]), {}),
        ("post", reverse("catalog:webhook_redeliver", args=[t, hook.pk, delivery.pk]), {}),
    ]


@pytest.mark.parametrize("outsider", ["charlie", "nora"])
def test_a_non_member_gets_404_on_every_webhook_page(
    login: Callable[[str], Client],
    hook: WebhookEndpoint,
    delivery: WebhookDelivery,
    outsider: str,
) -> None:
    client = login(outsider)
    for method, url, data in _pages(hook, delivery):
        assert getattr(client, method)(url, data).status_code == 404, (method, url)
    assert WebhookEndpoint.objects.count() == 1
    assert WebhookDelivery.objects.get().status == "failed"


def test_another_tenants_endpoint_is_404_under_ones_own_tenant(
    world: dict[str, Any], login: Callable[[str], Client], hook: WebhookEndpoint
) -> None:
    theirs = outbound.do_add_webhook(world["bravo"], acting_user=world["charlie"], url=URL)
    response = login("alice").get(reverse("catalog:webhook", args=["alpha", theirs.pk]))
    assert response.status_code == 404


@pytest.mark.parametrize("reader", ["bob", "vic", "fiona"])
def test_readers_see_the_log_but_cannot_change_anything(
    login: Callable[[str], Client],
    hook: WebhookEndpoint,
    delivery: WebhookDelivery,
    reader: str,
) -> None:
    client = login(reader)
    listing = client.get(reverse("catalog:webhooks", args=["alpha"]))
    assert listing.status_code == 200
    assert URL in listing.content.decode()
    assert "Add the webhook" not in listing.content.decode()
    page = client.get(reverse("catalog:webhook", args=["alpha", hook.pk])).content.decode()
    assert "msg_log1" in page and "502" in page
    assert "Redeliver" not in page and "Rotate the secret" not in page
    assert hook.shown_secret not in page
    writes = [(m, u, d) for m, u, d in _pages(hook, delivery) if m == "post"]
    for _, url, data in writes:
        assert client.post(url, data).status_code == 403, url
    for action in ("disable", "rotate"):
        url = reverse("catalog:webhook", args=["alpha", hook.pk])
        assert client.post(url, {"action": action}).status_code == 403
    assert WebhookEndpoint.objects.filter(pk=hook.pk, active=True, secret=hook.secret).count() == 1
    assert WebhookDelivery.objects.get().status == "failed"


@pytest.mark.parametrize("admin", ["alice", "pam"])
def test_an_admin_adds_a_webhook_and_sees_its_secret_once(
    settings: Any, login: Callable[[str], Client], admin: str
) -> None:
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    client = login(admin)
    url = reverse("catalog:webhooks", args=["alpha"])
    response = client.post(url, {"url": URL, "description": "CI"})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.url, endpoint.description, endpoint.created_by.username) == (URL, "CI", admin)
    secret = encryption.decrypt(endpoint.secret)
    assert secret.startswith("whsec_") and secret in response.content.decode()
    again = client.get(url).content.decode()
    assert URL in again and secret not in again
    detail = client.get(reverse("catalog:webhook", args=["alpha", endpoint.pk])).content.decode()
    assert secret not in detail


def test_a_bad_url_is_shown_with_its_error_and_nothing_is_written(
    settings: Any, login: Callable[[str], Client]
) -> None:
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    client = login("alice")
    audit = AuditEvent.objects.count()
    url = reverse("catalog:webhooks", args=["alpha"])
    for bad, message in [
        ("http://1.1.1.1/x", "must start with https://"),
        ("https://me:pw@1.1.1.1/x", "Leave credentials out"),
        ("https://10.1.2.3/x", "only calls public addresses"),
        ("no url at all", "This is not a URL"),
    ]:
        response = client.post(url, {"url": bad})
        assert response.status_code == 400
        assert message in response.content.decode()
    assert WebhookEndpoint.objects.count() == 0
    assert AuditEvent.objects.count() == audit


def test_an_admin_disables_enables_rotates_and_removes(
    login: Callable[[str], Client], hook: WebhookEndpoint, delivery: WebhookDelivery
) -> None:
    client = login("alice")
    url = reverse("catalog:webhook", args=["alpha", hook.pk])
    client.post(url, {"action": "disable"})
    hook.refresh_from_db()
    assert not hook.active
    assert "Disabled." in client.get(url).content.decode()
    client.post(url, {"action": "enable"})
    hook.refresh_from_db()
    assert hook.active

    old = hook.secret
    response = client.post(url, {"action": "rotate"})
    hook.refresh_from_db()
    assert hook.secret != old and hook.previous_secret == old
    assert encryption.decrypt(hook.secret) in response.content.decode()
    assert response["Cache-Control"] == "no-store"
    assert "The previous secret also signs" in client.get(url).content.decode()

    response = client.post(url, {"action": "remove"})
    assert response.status_code == 302
    assert not WebhookEndpoint.objects.exists()
    assert not WebhookDelivery.objects.exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"webhook.disable", "webhook.enable", "webhook.rotate_secret", "webhook.remove"} <= (
        actions
    )


def test_an_admin_redelivers_from_the_log(
    login: Callable[[str], Client],
    hook: WebhookEndpoint,
    delivery: WebhookDelivery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[str] = []

    def fake_post(url: str, headers: dict[str, str], body: bytes) -> outbound.Outcome:
        sent.append(headers["webhook-id"])
        return outbound.Outcome(status=204)

    monkeypatch.setattr(outbound, "post", fake_post)
    client = login("alice")
    page = client.get(reverse("catalog:webhook", args=["alpha", hook.pk])).content.decode()
    assert "Redeliver" in page
    with_jobs = reverse("catalog:webhook_redeliver", args=["alpha", hook.pk, delivery.pk])
    response = client.post(with_jobs)
    assert response.status_code == 302
    delivery.refresh_from_db()
    # The queued attempt waits for its job (run on commit; the test transaction never commits).
    assert (delivery.status, delivery.max_attempts) == ("pending", 7)
    outbound.deliver_due()
    delivery.refresh_from_db()
    assert sent == ["msg_log1"]
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("succeeded", 7, 204)


def test_the_log_fragment_is_served_to_htmx(
    login: Callable[[str], Client], hook: WebhookEndpoint, delivery: WebhookDelivery
) -> None:
    response = login("vic").get(
        reverse("catalog:webhook", args=["alpha", hook.pk]), HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="log"')
    assert "msg_log1" in body and "<html" not in body


def test_the_tenant_tabs_link_the_webhooks(login: Callable[[str], Client]) -> None:
    page = login("vic").get(reverse("catalog:requests", args=["alpha"])).content.decode()
    assert reverse("catalog:webhooks", args=["alpha"]) in page
