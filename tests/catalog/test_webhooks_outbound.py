"""Outbound webhooks against a real HTTP receiver on 127.0.0.1 that checks every signature
with ``catalog.outbound.verify``, as a tenant's receiver would."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from catalog import outbound, services
from catalog.models import Notification, WebhookDelivery, WebhookEndpoint
from gitops.fleet import configured_fleet
from portal.models import AuditEvent
from tests.support.text import refusal, refused_params

pytestmark = pytest.mark.django_db


class Receiver:
    """An HTTP server in a thread: records each call and answers with the next queued code."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.codes: list[int] = []
        self.reply = b"thanks"
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                code = receiver.codes.pop(0) if receiver.codes else 200
                self.send_response(code)
                if code in (301, 302):
                    self.send_header("location", "http://127.0.0.1:9/elsewhere")
                self.send_header("content-length", str(len(receiver.reply)))
                self.end_headers()
                self.wfile.write(receiver.reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks?src=portal"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def payloads(self, secret: str) -> list[dict[str, Any]]:
        return [outbound.verify(secret, headers, body) for headers, body in self.calls]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    settings.WEBHOOKS_ALLOW_HTTP = True
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def hook(world: dict[str, Any], receiver: Receiver) -> WebhookEndpoint:
    return outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=receiver.url)


def _share(name: str = "train") -> dict[str, Any]:
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    return {"name": name, "flavor": flavor, "kind": "whole", "count": 1}


@pytest.fixture
def ask(world: dict[str, Any], run_jobs: Callable[..., Any]) -> Callable[..., Any]:
    """bob asks alpha for a GPU share: draft -> submitted, one state change; jobs run."""

    def run(name: str = "train") -> Any:
        return run_jobs(
            services.do_create_request,
            world["alpha"],
            acting_user=world["bob"],
            kind="gpu-share",
            spec=_share(name),
        )

    return run


def test_it_delivers_a_signed_payload_on_a_state_change(
    world: dict[str, Any], receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    other = outbound.do_add_webhook(world["bravo"], acting_user=world["charlie"], url=receiver.url)
    request = ask()
    assert len(receiver.calls) == 1
    headers, body = receiver.calls[0]
    event = outbound.verify(hook.shown_secret, headers, body)
    assert event["type"] == "request.state_changed"
    assert event["id"] == headers["webhook-id"]
    assert headers["webhook-id"].startswith("msg_")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert headers["content-type"] == "application/json"
    assert event["data"] == {
        "tenant": "alpha",
        "request": {
            "id": request.pk,
            "action": "create",
            "kind": "gpu-share",
            "name": "train",
            "state": "submitted",
            "previous_state": "draft",
            "url": f"http://127.0.0.1:8000/t/alpha/requests/{request.pk}/",
            "pull_request_url": None,
        },
    }
    # Nothing secret, nothing of bravo's: bravo's endpoint heard nothing.
    assert hook.shown_secret.encode() not in body and other.shown_secret.encode() not in body
    with pytest.raises(outbound.InvalidWebhook):
        outbound.verify(other.shown_secret, headers, body)
    delivery = WebhookDelivery.objects.get()
    assert delivery.endpoint == hook
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("succeeded", 1, 200)
    assert delivery.response_excerpt == "thanks"
    assert delivery.next_attempt_at is None


def test_it_retries_a_500_with_backoff_and_the_same_webhook_id(
    receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    receiver.codes = [500, 503]
    before = timezone.now()
    ask()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("pending", 1, 500)
    assert timedelta(seconds=29) < delivery.next_attempt_at - before < timedelta(seconds=40)
    assert outbound.deliver_due() == 0  # not due yet
    assert len(receiver.calls) == 1

    due = delivery.next_attempt_at
    assert outbound.deliver_due(now=due) == 1
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.response_status) == (2, 503)
    assert delivery.next_attempt_at == due + timedelta(minutes=2)

    assert outbound.deliver_due(now=delivery.next_attempt_at) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("succeeded", 3, 200)
    ids = {headers["webhook-id"] for headers, _ in receiver.calls}
    assert ids == {delivery.message_id}
    assert len(receiver.payloads(hook.shown_secret)) == 3  # every attempt signed afresh


def test_a_redirect_is_not_followed_and_the_reply_is_cut_to_a_kilobyte(
    receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    receiver.codes = [302]
    receiver.reply = b"x" * 5000
    ask()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.response_status) == ("pending", 302)
    assert len(delivery.response_excerpt) == 1024
    assert len(receiver.calls) == 1


def _fail_everything(receiver: Receiver) -> None:
    """Answer 500 to everything and run the retries until none is due, a day at a time."""
    receiver.codes = [500] * 100
    now = timezone.now()
    for _ in range(10):
        now += timedelta(hours=7)
        outbound.deliver_due(now=now)


def test_it_gives_up_after_the_last_retry_and_disables_after_n_failures(
    settings: Any,
    world: dict[str, Any],
    receiver: Receiver,
    hook: WebhookEndpoint,
    ask: Callable[..., Any],
) -> None:
    settings.WEBHOOKS_DISABLE_AFTER = 2
    receiver.codes = [500] * 100
    ask("one")
    _fail_everything(receiver)
    first = WebhookDelivery.objects.get()
    assert (first.status, first.attempts) == ("failed", 1 + len(outbound.RETRY_DELAYS))
    hook.refresh_from_db()
    assert hook.active and hook.consecutive_failures == 1

    ask("two")
    _fail_everything(receiver)
    hook.refresh_from_db()
    assert not hook.active
    assert "2 failed deliveries" in hook.disabled_reason
    told = set(
        Notification.objects.filter(title__contains="was disabled").values_list(
            "user__username", flat=True
        )
    )
    assert told == {"alice"}
    assert AuditEvent.objects.filter(action="webhook.disable", actor=None).count() == 1
    calls = len(receiver.calls)
    ask("three")  # a disabled endpoint is not called, nor queued
    assert len(receiver.calls) == calls
    assert WebhookDelivery.objects.count() == 2

    # Enabled again, the notice has nothing left to ask: it turns read.
    notice = Notification.objects.get(title__contains="was disabled")
    assert notice.read_at is None
    outbound.do_enable_webhook(hook, acting_user=world["alice"])
    notice.refresh_from_db()
    assert notice.read_at is not None


def test_verify_rejects_a_replay_a_future_stamp_a_wrong_secret_and_a_changed_body(
    receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    ask()
    headers, body = receiver.calls[0]
    stamp = int(headers["webhook-timestamp"])
    assert outbound.verify(hook.shown_secret, headers, body, now=stamp + 300)["type"]
    for now in (stamp + 301, stamp - 301):
        with pytest.raises(outbound.InvalidWebhook, match="too old or in the future"):
            outbound.verify(hook.shown_secret, headers, body, now=now)
    with pytest.raises(outbound.InvalidWebhook, match="no signature"):
        outbound.verify(outbound.new_secret(), headers, body)
    with pytest.raises(outbound.InvalidWebhook, match="no signature"):
        outbound.verify(hook.shown_secret, headers, body.replace(b"submitted", b"approved"))
    # A replay with a fresh timestamp but the old signature does not match either.
    with pytest.raises(outbound.InvalidWebhook, match="no signature"):
        outbound.verify(hook.shown_secret, {**headers, "webhook-timestamp": str(stamp + 5)}, body)
    with pytest.raises(outbound.InvalidWebhook, match="missing header"):
        outbound.verify(hook.shown_secret, {"webhook-id": "x"}, body)


def test_a_rotated_secret_signs_beside_the_old_one_for_a_day(
    world: dict[str, Any], receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    old = hook.shown_secret
    new = outbound.do_rotate_secret(hook, acting_user=world["alice"])
    assert new != old and new.startswith("whsec_")
    ask()
    headers, body = receiver.calls[0]
    assert len(headers["webhook-signature"].split(" ")) == 2
    outbound.verify(old, headers, body)
    outbound.verify(new, headers, body)

    WebhookEndpoint.objects.filter(pk=hook.pk).update(
        previous_secret_until=timezone.now() - timedelta(seconds=1)
    )
    ask("later")
    headers, body = receiver.calls[1]
    assert len(headers["webhook-signature"].split(" ")) == 1
    outbound.verify(new, headers, body)
    with pytest.raises(outbound.InvalidWebhook):
        outbound.verify(old, headers, body)


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://[::1]/hook",
        "https://[::ffff:192.168.1.1]/hook",
        "https://100.64.0.1/hook",
        # NAT64 (RFC 6052) and 6to4 (RFC 3056) spell an IPv4 address inside an IPv6 one: a
        # gateway on the path turns them back into 10.0.0.5 or the metadata address.
        "https://[64:ff9b::10.0.0.5]/hook",
        "https://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
        "https://[64:ff9b:1::1.1.1.1]/hook",
        "https://[2002:a00:5::1]/hook",
        "https://[2002:7f00:1::]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::10.0.0.5]/hook",
    ],
)
def test_private_addresses_are_refused_at_registration(
    settings: Any, world: dict[str, Any], url: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    with pytest.raises(ValidationError) as refused:
        outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=url)
    assert "only calls public addresses" in " ".join(refused.value.messages)
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(action="webhook.add").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://203.0.113.7/hook", "must start with https://"),
        ("https://user:secret@1.1.1.1/hook", "Leave credentials out"),
        ("https://token@1.1.1.1/hook", "Leave credentials out"),
        ("not a url", "This is not a URL"),
        ("ftp://1.1.1.1/hook", "This is not a URL"),
        ("https://1.1.1.1:99999/hook", "This is not a URL"),
        ("", "Enter the URL"),
    ],
)
def test_bad_urls_get_a_clear_error_and_write_nothing(
    settings: Any, world: dict[str, Any], url: str, message: str
) -> None:
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    audit = AuditEvent.objects.count()
    with pytest.raises(ValidationError) as refused:
        outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=url)
    assert message in " ".join(refused.value.message_dict["url"])
    assert WebhookEndpoint.objects.count() == 0
    assert AuditEvent.objects.count() == audit


@pytest.mark.parametrize(
    ("url", "embedded"),
    [
        ("https://[64:ff9b::a00:5]/hook", "NAT64 address for 10.0.0.5"),
        ("https://[2002:a9fe:a9fe::1]/hook", "6to4 address for 169.254.169.254"),
        ("https://[64:ff9b:1::a00:5]/hook", "local-use NAT64 address"),
    ],
)
def test_the_refusal_of_an_embedded_address_names_it(
    settings: Any, world: dict[str, Any], url: str, embedded: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    with pytest.raises(ValidationError) as refused:
        outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=url)
    assert embedded in " ".join(refused.value.messages)


@pytest.mark.parametrize(
    "url", ["https://[64:ff9b::1.1.1.1]/hook", "https://[2002:101:101::1]/hook"]
)
def test_nat64_and_6to4_forms_of_public_addresses_are_accepted(
    settings: Any, world: dict[str, Any], url: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    endpoint = outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=url)
    assert endpoint.url == url


def test_a_public_https_url_is_accepted_and_audited(settings: Any, world: dict[str, Any]) -> None:
    settings.WEBHOOKS_ALLOW_HTTP = False
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    endpoint = outbound.do_add_webhook(
        world["alpha"], acting_user=world["alice"], url=" https://1.1.1.1/hook "
    )
    assert endpoint.url == "https://1.1.1.1/hook"
    assert endpoint.shown_secret.startswith("whsec_")
    event = AuditEvent.objects.get(action="webhook.add")
    assert endpoint.shown_secret not in json.dumps(event.diff)


def test_the_address_is_checked_again_at_delivery(
    settings: Any, receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    ask()
    assert receiver.calls == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and delivery.response_status is None
    assert "loopback, private or link-local" in delivery.error


def test_only_admins_manage_webhooks(world: dict[str, Any], receiver: Receiver) -> None:
    for name in ("bob", "vic", "charlie", "fiona", "nora"):
        with pytest.raises(PermissionDenied):
            outbound.do_add_webhook(world["alpha"], acting_user=world[name], url=receiver.url)
    assert not WebhookEndpoint.objects.exists()
    hook = outbound.do_add_webhook(world["alpha"], acting_user=world["pam"], url=receiver.url)
    with pytest.raises(PermissionDenied):
        outbound.do_rotate_secret(hook, acting_user=world["bob"])
    with pytest.raises(PermissionDenied):
        outbound.do_remove_webhook(hook, acting_user=world["vic"])
    assert WebhookEndpoint.objects.filter(pk=hook.pk, secret=hook.secret).exists()


def test_redelivery_keeps_the_webhook_id_and_makes_one_more_attempt(
    world: dict[str, Any],
    receiver: Receiver,
    hook: WebhookEndpoint,
    ask: Callable[..., Any],
    run_jobs: Callable[..., Any],
) -> None:
    ask()
    delivery = WebhookDelivery.objects.get()
    run_jobs(outbound.do_redeliver, delivery, acting_user=world["alice"])
    assert len(receiver.calls) == 2
    first, second = (headers["webhook-id"] for headers, _ in receiver.calls)
    assert first == second == delivery.message_id
    assert receiver.calls[0][1] == receiver.calls[1][1]  # the same body, byte for byte
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("succeeded", 2)

    # A failed redelivery is final: one attempt by hand, no new retry schedule.
    receiver.codes = [500]
    run_jobs(outbound.do_redeliver, delivery, acting_user=world["alice"])
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", 3, None)
    with pytest.raises(PermissionDenied):
        outbound.do_redeliver(delivery, acting_user=world["vic"])


def test_a_disabled_endpoint_keeps_its_deliveries_until_it_is_enabled(
    world: dict[str, Any],
    receiver: Receiver,
    hook: WebhookEndpoint,
    ask: Callable[..., Any],
    run_jobs: Callable[..., Any],
) -> None:
    receiver.codes = [500]
    ask()
    outbound.do_disable_webhook(hook, acting_user=world["alice"])
    assert outbound.deliver_due(now=timezone.now() + timedelta(hours=1)) == 0
    with pytest.raises(ValidationError, match="Enable the webhook first"):
        outbound.do_redeliver(WebhookDelivery.objects.get(), acting_user=world["alice"])
    hook.refresh_from_db()
    run_jobs(outbound.do_enable_webhook, hook, acting_user=world["alice"])
    assert len(receiver.calls) == 2
    assert WebhookDelivery.objects.get().status == "succeeded"


def test_a_delivery_is_claimed_once(
    receiver: Receiver, hook: WebhookEndpoint, world: dict[str, Any]
) -> None:
    receiver.codes = [500]
    services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=_share()
    )  # the on-commit job never runs here: the delivery stays due
    now = timezone.now()
    stale = WebhookDelivery.objects.get()  # as a second worker read it, before the claim
    first = outbound.claim_due(now=now)
    assert not outbound.claim(stale, now)
    assert [d.attempts for d in first] == [1]
    assert outbound.claim_due(now=now) == []
    assert outbound.claim_due(now=now + outbound.LEASE - timedelta(seconds=1)) == []
    # A worker that died mid-send: the attempt is made again after the lease.
    assert len(outbound.claim_due(now=now + outbound.LEASE)) == 1


@pytest.mark.db_engine
@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_at_once_send_once(
    world: dict[str, Any], receiver: Receiver, hook: WebhookEndpoint
) -> None:
    from django.db import connection

    services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=_share()
    )
    receiver.calls.clear()  # transactional: the first attempt ran at commit
    WebhookDelivery.objects.update(status="pending", next_attempt_at=timezone.now())
    start = threading.Barrier(2)
    sent: list[int] = []

    def worker() -> None:
        try:
            start.wait()
            sent.append(outbound.deliver_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(sent) == [0, 1]
    assert len(receiver.calls) == 1


def test_the_tenant_guides_snippet_verifies_a_real_delivery(
    receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    guide = (Path(__file__).parents[2] / "docs" / "tenant-guide.md").read_text()
    snippet = guide.split("## Webhooks", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)  # our own documentation, run as a receiver would
    ask()
    headers, body = receiver.calls[0]
    namespace["verify"](hook.shown_secret, headers, body)
    with pytest.raises(ValueError, match="bad signature"):
        namespace["verify"](hook.shown_secret, headers, body + b" ")
    with pytest.raises(ValueError, match="stale"):
        namespace["verify"](hook.shown_secret, {**headers, "webhook-timestamp": "1"}, body)


def test_a_delivery_still_being_tried_is_not_redelivered(
    world: dict[str, Any], receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    receiver.codes = [500]
    ask()
    delivery = WebhookDelivery.objects.get()
    before = (delivery.status, delivery.attempts, delivery.max_attempts, delivery.next_attempt_at)
    with pytest.raises(ValidationError, match="still being tried"):
        outbound.do_redeliver(delivery, acting_user=world["alice"])
    delivery.refresh_from_db()
    after = (delivery.status, delivery.attempts, delivery.max_attempts, delivery.next_attempt_at)
    assert after == before
    assert not AuditEvent.objects.filter(action="webhook.redeliver").exists()


def _self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` (and 127.0.0.1) and its key, as PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = timezone.now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.mark.parametrize(("cert_name", "ok"), [("localhost", True), ("elsewhere.test", False)])
def test_https_checks_the_certificate_against_the_urls_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receiver: Receiver,
    cert_name: str,
    ok: bool,
) -> None:
    import ssl

    cert_file, key_file = _self_signed(tmp_path, cert_name)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert_file, key_file)
    receiver.server.socket = server_side.wrap_socket(receiver.server.socket, server_side=True)
    # The portal trusts the system's CAs; here, this one certificate.
    monkeypatch.setattr(
        outbound, "tls_context", lambda: ssl.create_default_context(cafile=cert_file)
    )
    port = receiver.server.server_address[1]
    outcome = outbound.post(f"https://localhost:{port}/hooks", {"webhook-id": "msg_tls"}, b"{}")
    assert outcome.ok is ok
    if ok:
        assert receiver.calls[0][0]["host"] == f"localhost:{port}"
    else:
        assert "CERTIFICATE_VERIFY_FAILED" in outcome.error
        assert receiver.calls == []


# --- the secrets at rest --------------------------------------------------------------------


def _stored(endpoint: WebhookEndpoint) -> tuple[str, str]:
    """The endpoint's secret columns as the database holds them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT secret, previous_secret FROM catalog_webhookendpoint WHERE id = %s",
            [endpoint.pk],
        )
        secret, previous = cursor.fetchone()
    return str(secret), str(previous)


def test_the_database_holds_no_secret_in_the_clear(
    world: dict[str, Any], receiver: Receiver, hook: WebhookEndpoint, ask: Callable[..., Any]
) -> None:
    old = hook.shown_secret
    new = outbound.do_rotate_secret(hook, acting_user=world["alice"])
    stored = " ".join(_stored(hook))
    assert "whsec_" not in stored
    for secret in (old, new):
        assert secret.removeprefix("whsec_") not in stored
    # Deliveries are still signed with the secrets the admins were shown.
    ask()
    headers, body = receiver.calls[0]
    outbound.verify(old, headers, body)
    outbound.verify(new, headers, body)


def test_a_new_key_put_first_still_decrypts_and_the_command_moves_every_row_to_it(
    settings: Any, world: dict[str, Any], receiver: Receiver, ask: Callable[..., Any]
) -> None:
    from cryptography.fernet import Fernet, InvalidToken
    from django.core.management import call_command

    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.PORTAL_ENCRYPTION_KEYS = [old_key]
    hook = outbound.do_add_webhook(world["alpha"], acting_user=world["alice"], url=receiver.url)
    first = hook.shown_secret
    second = outbound.do_rotate_secret(hook, acting_user=world["alice"])
    assert [Fernet(old_key).decrypt(t.encode()).decode() for t in _stored(hook)] == [second, first]

    settings.PORTAL_ENCRYPTION_KEYS = [new_key, old_key]
    ask()
    headers, body = receiver.calls[0]
    outbound.verify(first, headers, body)
    outbound.verify(second, headers, body)

    out = io.StringIO()
    call_command("rotate_encryption_key", stdout=out)
    assert "1 webhook endpoint re-encrypted" in out.getvalue()
    moved = _stored(hook)
    assert [Fernet(new_key).decrypt(t.encode()).decode() for t in moved] == [second, first]
    with pytest.raises(InvalidToken):
        Fernet(old_key).decrypt(moved[0].encode())
    assert AuditEvent.objects.filter(action="webhook.reencrypt_secret", actor=None).count() == 1

    settings.PORTAL_ENCRYPTION_KEYS = [new_key]  # the old key dropped
    ask("later")
    headers, body = receiver.calls[1]
    outbound.verify(second, headers, body)


def test_the_migration_encrypts_the_secrets_stored_in_the_clear(world: dict[str, Any]) -> None:
    import importlib

    from django.apps import apps

    from portal import encryption

    migration = importlib.import_module("catalog.migrations.0006_webhook_secret_encrypted")
    plain, previous = outbound.new_secret(), outbound.new_secret()
    legacy = WebhookEndpoint.objects.create(
        tenant=world["alpha"], url="https://1.1.1.1/a", secret=plain, previous_secret=previous
    )
    token = encryption.encrypt(outbound.new_secret())
    done = WebhookEndpoint.objects.create(
        tenant=world["alpha"], url="https://1.1.1.1/b", secret=token
    )
    migration.encrypt_secrets(apps, None)
    secret, old = _stored(legacy)
    assert "whsec_" not in secret + old
    assert (encryption.decrypt(secret), encryption.decrypt(old)) == (plain, previous)
    assert _stored(done) == (token, "")  # already encrypted: left alone
    migration.decrypt_secrets(apps, None)
    assert _stored(legacy) == (plain, previous)


@pytest.mark.parametrize("char", refused_params())
def test_a_description_hiding_text_is_refused(
    settings: Any, world: dict[str, Any], char: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    with pytest.raises(ValidationError) as refused:
        outbound.do_add_webhook(
            world["alpha"],
            acting_user=world["alice"],
            url="https://1.1.1.1/h",
            description=f"CI{char}x",
        )
    assert refusal(char) in " ".join(refused.value.message_dict["description"])
    assert WebhookEndpoint.objects.count() == 0
