"""Outbound webhooks: a tenant's URL is called, signed, when one of its requests changes state.

Signing follows the Standard Webhooks scheme (standardwebhooks.com): headers ``webhook-id``
(the message id, the same on every attempt so receivers drop duplicates),
``webhook-timestamp`` (unix seconds of the attempt) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, keyed with the base64-decoded
part of the ``whsec_`` secret; during the day after a rotation both secrets sign, separated
by a space). ``verify`` is what a receiver does, and what the tests do.

Delivery is a database queue: a state change writes one ``WebhookDelivery`` per active
endpoint in the same transaction (so an event is never lost nor sent for a rolled-back
change) and a job tries them once it commits; the periodic task ``catalog.webhooks`` sends
the retries as they fall due. A worker claims an attempt by moving its ``next_attempt_at``
forward with a conditional UPDATE, so two workers never send the same attempt; a worker that
dies mid-send leaves the attempt to be made again after the lease.

The portal calls URLs that tenants type, so it refuses plain HTTP, credentials in the URL and
hosts that resolve to loopback, private, link-local (cloud metadata) or other non-public
addresses, also when spelled inside IPv6 (IPv4-mapped, NAT64, 6to4), at registration and
again at every attempt (DNS may have changed), and it connects to the address it checked
rather than resolving again. Redirects are not followed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import secrets
import socket
import ssl
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from catalog.models import Notification, ResourceRequest, WebhookDelivery, WebhookEndpoint
from portal import encryption
from portal.audit import record_audit
from portal.jobs import enqueue
from tenants import access
from tenants.access import Action
from tenants.models import Tenant
from tenants.names import validate_single_line

EVENT_STATE_CHANGED = "request.state_changed"
# The remediation loop cordoned or returned a node the tenant's workloads ran on.
EVENT_NODE_REMEDIATION = "node.remediation"
SECRET_PREFIX = "whsec_"
# After the first attempt: 30 s, 2 min, 10 min, 1 h, 6 h; then the delivery has failed.
RETRY_DELAYS = (
    timedelta(seconds=30),
    timedelta(minutes=2),
    timedelta(minutes=10),
    timedelta(hours=1),
    timedelta(hours=6),
)
# Both secrets sign for this long after a rotation.
ROTATION_OVERLAP = timedelta(hours=24)
# A claimed attempt is not claimed again for this long (a worker that died mid-send).
LEASE = timedelta(minutes=5)
EXCERPT_BYTES = 1024
CLAIM_BATCH = 50
MAX_ENDPOINTS = 10
USER_AGENT = "ai-factory-portal-webhooks/1"

Status = WebhookDelivery.Status


class InvalidWebhook(ValueError):
    """A webhook request that a receiver must refuse (bad signature, stale timestamp, ...)."""


# --- signing and verifying ----------------------------------------------------------------


def new_secret() -> str:
    """A signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``<id>.<timestamp>.<body>``."""
    content = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def rotating(endpoint: WebhookEndpoint, now: datetime) -> bool:
    """Whether the previous secret still signs too (the day after a rotation)."""
    until = endpoint.previous_secret_until
    return bool(endpoint.previous_secret) and until is not None and now < until


def signing_secrets(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    """The current secret, and the previous one while the rotation overlap lasts, decrypted:
    the one place the portal reads them back."""
    tokens = [endpoint.secret, *([endpoint.previous_secret] if rotating(endpoint, now) else [])]
    return [encryption.decrypt(token) for token in tokens]


def signed_headers(
    keys: Iterable[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(k, message_id, timestamp, body) for k in keys),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    tolerance: int = 300,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a webhook as its receiver should and return the parsed payload.

    Raises ``InvalidWebhook`` when a header is missing, the timestamp is more than
    ``tolerance`` seconds away from ``now`` (a replay, or a forged future one) or no
    signature matches ``secret``. ``body`` must be the raw bytes received.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        message_id = lowered["webhook-id"]
        stamp = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as exc:
        raise InvalidWebhook(f"missing header {exc.args[0]}") from exc
    try:
        timestamp = int(stamp)
    except ValueError as exc:
        raise InvalidWebhook("webhook-timestamp is not a number") from exc
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise InvalidWebhook("webhook-timestamp is too old or in the future")
    raw = body.encode("utf-8") if isinstance(body, str) else body
    expected = sign(secret, message_id, timestamp, raw)
    for candidate in signatures.split():
        if hmac.compare_digest(candidate.encode(), expected.encode()):
            return dict(json.loads(raw))
    raise InvalidWebhook("no signature matches the secret")


# --- the event -----------------------------------------------------------------------------


def _absolute(path: str) -> str:
    return settings.PORTAL_BASE_URL.rstrip("/") + path


def payload(
    resource_request: ResourceRequest, previous: str, message_id: str, now: datetime
) -> dict[str, Any]:
    """The event a state change sends: the tenant's own request, nothing else."""
    change = resource_request.change
    pull_request = ""
    if change is not None:
        pull_request = change.forge_url or _absolute(reverse("gitops:detail", args=[change.pk]))
    tenant = resource_request.tenant.slug
    return {
        "type": EVENT_STATE_CHANGED,
        "id": message_id,
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "data": {
            "tenant": tenant,
            "request": {
                "id": resource_request.pk,
                "action": resource_request.action,
                "kind": resource_request.resource.kind,
                "name": resource_request.resource.name,
                "state": resource_request.state,
                "previous_state": previous,
                "url": _absolute(reverse("catalog:request", args=[tenant, resource_request.pk])),
                "pull_request_url": pull_request or None,
            },
        },
    }


def queue_state_change(resource_request: ResourceRequest, previous: str) -> None:
    """Write a delivery per active endpoint of the request's tenant, in the caller's
    transaction, and try them as soon as it commits."""
    endpoints = list(
        WebhookEndpoint.objects.filter(tenant_id=resource_request.tenant_id, active=True)
    )
    if not endpoints:
        return
    now = timezone.now()
    message_id = f"msg_{uuid.uuid4().hex}"
    body = json.dumps(payload(resource_request, previous, message_id, now), sort_keys=True)
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            endpoint=endpoint,
            message_id=message_id,
            event_type=EVENT_STATE_CHANGED,
            request=resource_request,
            body=body,
            max_attempts=len(RETRY_DELAYS) + 1,
            next_attempt_at=now,
        )
        for endpoint in endpoints
    )
    _send_soon(resource_request.tenant, [d.pk for d in deliveries], "a request's state")


def queue_node_event(tenant: Tenant, *, node: str, title: str, message: str, url: str) -> None:
    """A ``node.remediation`` event to each active endpoint of ``tenant``, in the caller's
    transaction: the node, what happened and the tenant's status page; nothing of others."""
    endpoints = list(WebhookEndpoint.objects.filter(tenant_id=tenant.pk, active=True))
    if not endpoints:
        return
    now = timezone.now()
    message_id = f"msg_{uuid.uuid4().hex}"
    event = {
        "type": EVENT_NODE_REMEDIATION,
        "id": message_id,
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "data": {
            "tenant": tenant.slug,
            "node": node,
            "title": title,
            "message": message,
            "url": _absolute(url),
        },
    }
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            endpoint=endpoint,
            message_id=message_id,
            event_type=EVENT_NODE_REMEDIATION,
            body=json.dumps(event, sort_keys=True),
            max_attempts=len(RETRY_DELAYS) + 1,
            next_attempt_at=now,
        )
        for endpoint in endpoints
    )
    _send_soon(tenant, [d.pk for d in deliveries], "a node remediation")


def _send_soon(tenant: Tenant, delivery_ids: list[int], what: str) -> None:
    enqueue(
        "catalog.webhooks_send",
        title=f"Webhooks: {what}",
        tenant=tenant,
        delivery_ids=delivery_ids,
    )


# --- URLs the portal may call -------------------------------------------------------------

_url_syntax = URLValidator(schemes=["http", "https"])

# IPv6 prefixes that carry an IPv4 address, which a translator or relay on the path turns
# back into IPv4: the well-known NAT64 prefix (RFC 6052; the address is the last 32 bits) and
# 6to4 (RFC 3056; bits 16-48). 64:ff9b:1::/48 is NAT64 for local use (RFC 8215): refused
# whole, as its embedding is the operator's choice. ::/96 is IPv4-compatible (deprecated by
# RFC 4291): nothing public resolves to it.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NOT_PUBLIC = "a loopback, private or link-local address"


def _global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # is_global is False for loopback, private, link-local (169.254.169.254, the cloud
    # metadata address), shared (100.64/10), unique-local IPv6 and reserved ranges.
    return ip.is_global and not ip.is_multicast


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for, and its form (with an article)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "an IPv4-mapped"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "a NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "a 6to4"
    return None


def _refusal(address: str) -> str:
    """Why the portal does not call ``address`` (a phrase for the error), or '' if it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return "a local-use NAT64 address (64:ff9b:1::/48), which may reach any IPv4 address"
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            ipv4, form = embedded
            return "" if _global(ipv4) else f"{form} address for {ipv4}, {_NOT_PUBLIC}"
        if ip in _IPV4_COMPATIBLE and _global(ip):
            return "a deprecated IPv4-compatible address (::/96)"
    return "" if _global(ip) else _NOT_PUBLIC


def _parse(url: str) -> SplitResult:
    """The URL's parts, or a ValidationError saying what is wrong with it."""
    url = url.strip()
    if not url:
        raise ValidationError({"url": ["Enter the URL to call."]})
    if len(url) > 2000:
        raise ValidationError({"url": ["The URL is longer than 2,000 characters."]})
    try:
        _url_syntax(url)
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except (ValidationError, ValueError) as exc:
        raise ValidationError(
            {"url": ["This is not a URL; enter one such as https://hooks.example.com/portal."]}
        ) from exc
    if parts.scheme != "https" and not settings.WEBHOOKS_ALLOW_HTTP:
        raise ValidationError({"url": ["The URL must start with https://."]})
    if parts.username is not None or parts.password is not None:
        raise ValidationError(
            {"url": ["Leave credentials out of the URL: check the signature instead."]}
        )
    return parts


def resolve(parts: SplitResult) -> list[str]:
    """The addresses the portal may connect to for ``parts``; a ValidationError when the host
    does not resolve or resolves to an address the portal does not call."""
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ValidationError({"url": [f"The host {host} does not resolve."]}) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise ValidationError({"url": [f"The host {host} does not resolve."]})
    if not settings.WEBHOOKS_ALLOW_PRIVATE:
        for address in addresses:
            if reason := _refusal(address):
                raise ValidationError(
                    {
                        "url": [
                            f"The host {host} resolves to {address}, {reason}: the portal "
                            "only calls public addresses. Use a host name that resolves to "
                            "public addresses only."
                        ]
                    }
                )
    return addresses


def check_url(url: str) -> str:
    """The URL, stripped, if the portal may call it; else a ValidationError on ``url``."""
    resolve(_parse(url))
    return url.strip()


# --- sending -------------------------------------------------------------------------------


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address that was checked, not to whatever the name resolves to now."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


def tls_context() -> ssl.SSLContext:
    """Certificates are checked against the system's CAs and the URL's host name."""
    return ssl.create_default_context()


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to the checked address, with the certificate checked against the URL's host."""

    def __init__(self, host: str, port: int | None, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=tls_context())
        self.address = address

    def connect(self) -> None:
        raw = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: the response's status and start, or why there was none."""

    status: int | None = None
    excerpt: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def post(url: str, headers: Mapping[str, str], body: bytes) -> Outcome:
    """POST ``body`` to ``url`` once: checked again, no redirects, bounded time and reply."""
    try:
        parts = _parse(url)
        address = resolve(parts)[0]
    except ValidationError as exc:
        return Outcome(error=" ".join(exc.messages))
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = kind(parts.hostname or "", parts.port, address, settings.WEBHOOKS_TIMEOUT_SECONDS)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(
            "POST",
            target,
            body=body,
            headers={
                **headers,
                "content-type": "application/json",
                "user-agent": USER_AGENT,
            },
        )
        response = connection.getresponse()
        excerpt = response.read(EXCERPT_BYTES).decode("utf-8", "replace")
        return Outcome(status=response.status, excerpt=excerpt)
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        connection.close()


def claim(delivery: WebhookDelivery, now: datetime) -> bool:
    """Count an attempt of ``delivery`` as this worker's, unless someone changed the row since
    it was read (a compare-and-swap on attempts and next_attempt_at)."""
    return bool(
        WebhookDelivery.objects.filter(
            pk=delivery.pk,
            status=Status.PENDING,
            attempts=delivery.attempts,
            next_attempt_at=delivery.next_attempt_at,
        ).update(attempts=F("attempts") + 1, next_attempt_at=now + LEASE, last_attempt_at=now)
    )


def claim_due(
    *, now: datetime | None = None, ids: Iterable[int] | None = None, limit: int = CLAIM_BATCH
) -> list[WebhookDelivery]:
    """Claim the pending attempts due at ``now`` (of these ``ids`` only, if given).

    Each claim is a conditional UPDATE that counts the attempt and moves ``next_attempt_at``
    past the lease; a row another worker changed first is skipped. On PostgreSQL the rows are
    also locked with SKIP LOCKED, so concurrent workers pick different rows.
    """
    now = now or timezone.now()
    with transaction.atomic():
        due = (
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(status=Status.PENDING, next_attempt_at__lte=now, endpoint__active=True)
            .order_by("next_attempt_at", "id")
        )
        if ids is not None:
            due = due.filter(pk__in=list(ids))
        claimed = [d.pk for d in list(due[:limit]) if claim(d, now)]
    return list(
        WebhookDelivery.objects.filter(pk__in=claimed)
        .select_related("endpoint__tenant")
        .order_by("id")
    )


def attempt(delivery: WebhookDelivery, *, now: datetime | None = None) -> Outcome:
    """Send one claimed attempt and record it: done on a 2xx, else retried or failed."""
    now = now or timezone.now()
    endpoint = delivery.endpoint
    body = delivery.body.encode("utf-8")
    try:
        keys = signing_secrets(endpoint, timezone.now())
    except encryption.UndecryptableSecret:
        # Its encryption key was dropped before the rows were re-encrypted: nothing to sign with.
        outcome = Outcome(
            error="The signing secret cannot be decrypted (its encryption key was removed); "
            "rotate the secret."
        )
    else:
        # The timestamp is the real clock's: the receiver compares it with its own.
        headers = signed_headers(keys, delivery.message_id, int(time.time()), body)
        outcome = post(endpoint.url, headers, body)
    _record(delivery, outcome, now)
    return outcome


def _record(delivery: WebhookDelivery, outcome: Outcome, now: datetime) -> None:
    fields: dict[str, Any] = {
        "response_status": outcome.status,
        "response_excerpt": outcome.excerpt,
        "error": outcome.error,
    }
    delivery.refresh_from_db(fields=["attempts", "max_attempts"])
    if outcome.ok:
        fields.update(status=Status.SUCCEEDED, next_attempt_at=None)
    elif delivery.attempts >= delivery.max_attempts:
        fields.update(status=Status.FAILED, next_attempt_at=None)
    else:
        delay = RETRY_DELAYS[min(delivery.attempts, len(RETRY_DELAYS)) - 1]
        fields.update(next_attempt_at=now + delay)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**fields)
    for name, value in fields.items():
        setattr(delivery, name, value)
    if outcome.ok:
        WebhookEndpoint.objects.filter(pk=delivery.endpoint_id).update(consecutive_failures=0)
    elif fields.get("status") == Status.FAILED:
        _count_failure(delivery.endpoint)


def _count_failure(endpoint: WebhookEndpoint) -> None:
    """One more delivery that used up its attempts; too many in a row disable the endpoint."""
    with transaction.atomic():
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
            consecutive_failures=F("consecutive_failures") + 1
        )
        endpoint.refresh_from_db(fields=["consecutive_failures", "active"])
        limit = settings.WEBHOOKS_DISABLE_AFTER
        if not endpoint.active or endpoint.consecutive_failures < limit:
            return
        reason = f"Disabled after {endpoint.consecutive_failures} failed deliveries in a row."
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(active=False, disabled_reason=reason)
        endpoint.active, endpoint.disabled_reason = False, reason
        record_audit(
            actor=None,
            action="webhook.disable",
            target=endpoint,
            tenant_slug=endpoint.tenant.slug,
            diff={"active": [True, False], "reason": [None, reason]},
        )
        # catalog.services imports this module (its _move queues the events).
        from catalog.services import notify

        notify(
            access.users_who_may(endpoint.tenant, Action.MANAGE_WEBHOOKS),
            tenant=endpoint.tenant,
            title=f"Webhook {endpoint.url} was disabled"[:200],
            body=f"{reason} Check the receiver, then enable the webhook again; the deliveries "
            "it missed are sent then.",
            url=reverse("catalog:webhook", args=[endpoint.tenant.slug, endpoint.pk]),
        )


def send(delivery_ids: Iterable[int], *, now: datetime | None = None) -> int:
    """Try these deliveries now if they are due and nobody else has claimed them."""
    sent = 0
    for delivery in claim_due(now=now, ids=delivery_ids):
        attempt(delivery, now=now)
        sent += 1
    return sent


def deliver_due(*, now: datetime | None = None, batches: int = 10) -> int:
    """Send every attempt that is due, a batch at a time; return how many were made."""
    sent = 0
    for _ in range(batches):
        claimed = claim_due(now=now)
        for delivery in claimed:
            attempt(delivery, now=now)
        sent += len(claimed)
        if len(claimed) < CLAIM_BATCH:
            break
    return sent


# --- managing endpoints ---------------------------------------------------------------------


def _require(tenant: Tenant, acting_user: Any) -> None:
    access.require(acting_user, Action.MANAGE_WEBHOOKS, tenant)


@transaction.atomic
def do_add_webhook(
    tenant: Tenant, *, acting_user: Any, url: str, description: str = ""
) -> WebhookEndpoint:
    """Register ``url`` for the tenant's request events; its new secret is the returned
    endpoint's ``shown_secret`` (show it once: only its encryption is stored)."""
    _require(tenant, acting_user)
    url = check_url(url)
    description = description.strip()
    if len(description) > 200:
        raise ValidationError({"description": ["Keep the description under 200 characters."]})
    try:
        validate_single_line(description)
    except ValidationError as exc:
        raise ValidationError({"description": exc.messages}) from exc
    if WebhookEndpoint.objects.filter(tenant=tenant).count() >= MAX_ENDPOINTS:
        raise ValidationError(f"A tenant has at most {MAX_ENDPOINTS} webhooks; remove one first.")
    secret = new_secret()
    endpoint = WebhookEndpoint.objects.create(
        tenant=tenant,
        url=url,
        description=description,
        secret=encryption.encrypt(secret),
        created_by=acting_user if getattr(acting_user, "pk", None) else None,
    )
    endpoint.shown_secret = secret
    record_audit(
        actor=acting_user,
        action="webhook.add",
        target=endpoint,
        tenant_slug=tenant.slug,
        diff={"url": [None, url]},
    )
    return endpoint


@transaction.atomic
def do_disable_webhook(endpoint: WebhookEndpoint, *, acting_user: Any) -> None:
    """Stop calling the endpoint; its pending deliveries wait until it is enabled again."""
    _require(endpoint.tenant, acting_user)
    if not endpoint.active:
        raise ValidationError("The webhook is already disabled.")
    endpoint.active = False
    endpoint.disabled_reason = "Disabled by hand."
    endpoint.save(update_fields=["active", "disabled_reason"])
    record_audit(
        actor=acting_user,
        action="webhook.disable",
        target=endpoint,
        tenant_slug=endpoint.tenant.slug,
        diff={"active": [True, False]},
    )


def _settle_disabled_notices(endpoint: WebhookEndpoint) -> None:
    """Mark read, for everyone told, the notices that the endpoint was disabled (the only ones
    linking to its page): enabled again or removed, there is nothing left to do about it."""
    url = reverse("catalog:webhook", args=[endpoint.tenant.slug, endpoint.pk])
    Notification.objects.filter(url=url, read_at__isnull=True).update(read_at=timezone.now())


@transaction.atomic
def do_enable_webhook(endpoint: WebhookEndpoint, *, acting_user: Any) -> None:
    """Call the endpoint again (its URL is checked again); waiting deliveries go out now."""
    _require(endpoint.tenant, acting_user)
    if endpoint.active:
        raise ValidationError("The webhook is already enabled.")
    check_url(endpoint.url)
    endpoint.active = True
    endpoint.disabled_reason = ""
    endpoint.consecutive_failures = 0
    endpoint.save(update_fields=["active", "disabled_reason", "consecutive_failures"])
    _settle_disabled_notices(endpoint)
    record_audit(
        actor=acting_user,
        action="webhook.enable",
        target=endpoint,
        tenant_slug=endpoint.tenant.slug,
        diff={"active": [False, True]},
    )
    waiting = list(endpoint.deliveries.filter(status=Status.PENDING).values_list("pk", flat=True))
    if waiting:
        WebhookDelivery.objects.filter(pk__in=waiting).update(next_attempt_at=timezone.now())
        _send_soon(endpoint.tenant, waiting, "a webhook enabled again")


@transaction.atomic
def do_remove_webhook(endpoint: WebhookEndpoint, *, acting_user: Any) -> None:
    """Forget the endpoint and its delivery log."""
    _require(endpoint.tenant, acting_user)
    _settle_disabled_notices(endpoint)
    record_audit(
        actor=acting_user,
        action="webhook.remove",
        target=endpoint,
        tenant_slug=endpoint.tenant.slug,
        diff={"url": [endpoint.url, None]},
    )
    endpoint.delete()


@transaction.atomic
def do_rotate_secret(endpoint: WebhookEndpoint, *, acting_user: Any) -> str:
    """A new secret (returned, to show once); the old one keeps signing for a day, unless no
    configured key decrypts it any more (then the new one signs alone, at once)."""
    _require(endpoint.tenant, acting_user)
    secret = new_secret()
    try:
        encryption.decrypt(endpoint.secret)
    except encryption.UndecryptableSecret:
        endpoint.previous_secret, endpoint.previous_secret_until = "", None
    else:
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_until = timezone.now() + ROTATION_OVERLAP
    endpoint.secret = encryption.encrypt(secret)
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
    record_audit(
        actor=acting_user,
        action="webhook.rotate_secret",
        target=endpoint,
        tenant_slug=endpoint.tenant.slug,
    )
    return secret


def do_reencrypt_secrets(*, acting_user: Any = None) -> int:
    """Encrypt every endpoint's secrets again with the first of PORTAL_ENCRYPTION_KEYS (after
    a new key was put first, before the old one is dropped); how many endpoints. Each row is
    its own transaction, locked, so a rotation of its secret meanwhile is not undone. Only an
    operator at ``manage.py rotate_encryption_key`` (``acting_user`` None) or a platform
    admin may."""
    access.require(acting_user, Action.OPERATE_FLEET)
    done = 0
    for pk in WebhookEndpoint.objects.order_by("pk").values_list("pk", flat=True):
        with transaction.atomic():
            endpoint = (
                WebhookEndpoint.objects.select_for_update(of=("self",))
                .select_related("tenant")
                .filter(pk=pk)
                .first()
            )
            if endpoint is None:  # removed meanwhile
                continue
            endpoint.secret = encryption.rotate(endpoint.secret)
            if endpoint.previous_secret:
                endpoint.previous_secret = encryption.rotate(endpoint.previous_secret)
            endpoint.save(update_fields=["secret", "previous_secret"])
            record_audit(
                actor=acting_user,
                action="webhook.reencrypt_secret",
                target=endpoint,
                tenant_slug=endpoint.tenant.slug,
            )
            done += 1
    return done


@transaction.atomic
def do_redeliver(delivery: WebhookDelivery, *, acting_user: Any) -> None:
    """Queue one more attempt of a finished delivery (same ``webhook-id``), sent at once."""
    endpoint = delivery.endpoint
    _require(endpoint.tenant, acting_user)
    if not endpoint.active:
        raise ValidationError("Enable the webhook first: a disabled webhook is not called.")
    locked = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
    if locked.status == Status.PENDING:
        # Its next attempt is queued (or on its way): a second one could cross it.
        raise ValidationError("This delivery is still being tried; wait for its next attempt.")
    locked.max_attempts = locked.attempts + 1
    locked.status = Status.PENDING
    locked.next_attempt_at = timezone.now()
    locked.save(update_fields=["status", "max_attempts", "next_attempt_at"])
    record_audit(
        actor=acting_user,
        action="webhook.redeliver",
        target=endpoint,
        tenant_slug=endpoint.tenant.slug,
        diff={"message": [None, locked.message_id]},
    )
    _send_soon(endpoint.tenant, [locked.pk], "a redelivery")
