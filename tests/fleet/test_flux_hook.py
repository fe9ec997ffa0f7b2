"""POST /hooks/flux/: events of a generic-hmac Provider, verified, replay-safe, and turned into
a fresh read of the involved object; the change page's live region then shows it applied."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from fleet import services
from fleet.models import FluxEventReceipt, FluxObject
from gitops.models import ChangeRequest
from gitops.specs import TenantSpec
from simulator import Simulator

SECRET = "flux-events-test-key"
URL = "/hooks/flux/"


@pytest.fixture
def keyed(settings: Any) -> None:
    settings.FLUX_WEBHOOK_SECRET = SECRET
    settings.FLUX_EVENT_MAX_AGE_SECONDS = 600


def event(
    namespace: str, name: str, *, kind: str = "Kustomization", at: datetime | None = None
) -> bytes:
    """An event as notification-controller forwards it (eventv1.Event as JSON)."""
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(
        {
            "involvedObject": {
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": "info",
            "timestamp": stamp,
            "message": "the payload's word, which the portal does not take",
            "reason": "ReconciliationSucceeded",
            "metadata": {"revision": "main@sha1:0000000000000000000000000000000000000000"},
            "reportingController": "kustomize-controller",
            "reportingInstance": "kustomize-controller-0",
        }
    ).encode()


def post(body: bytes, signature: str | None = None) -> Any:
    sig = signature if signature is not None else sign(body)
    headers = {"HTTP_X_SIGNATURE": sig} if sig else {}
    return Client().post(URL, body, content_type="application/json", **headers)


def sign(body: bytes, key: str = SECRET) -> str:
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.django_db
def test_it_is_off_without_a_key(settings: Any) -> None:
    settings.FLUX_WEBHOOK_SECRET = ""
    assert post(event("flux-system", "tenants")).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    "signature",
    ["", "sha256=" + "0" * 64, "md5=abc", "sha256", "nonsense"],
)
def test_a_bad_signature_is_refused_and_changes_nothing(keyed: None, signature: str) -> None:
    body = event("flux-system", "tenants")
    response = post(body, signature or "")
    assert response.status_code == 401
    assert FluxEventReceipt.objects.count() == 0


@pytest.mark.django_db
def test_a_body_signed_with_another_key_is_refused(keyed: None) -> None:
    body = event("flux-system", "tenants")
    assert post(body, sign(body, "another key")).status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"involvedObject": {"kind": "Kustomization"}, "timestamp": "2026-01-01T00:00:00Z"}',
        b'{"involvedObject": {"kind": "K", "namespace": "a", "name": "b"}, "timestamp": "x"}',
    ],
)
def test_a_signed_body_that_is_not_an_event_is_refused(keyed: None, body: bytes) -> None:
    response = post(body)
    assert response.status_code == 400
    assert FluxEventReceipt.objects.count() == 0


@pytest.mark.django_db
def test_an_old_event_is_refused(keyed: None) -> None:
    old = event("flux-system", "tenants", at=datetime.now(UTC) - timedelta(hours=1))
    response = post(old)
    assert response.status_code == 400
    assert "timestamp" in response.json()["error"]
    assert FluxEventReceipt.objects.count() == 0


@pytest.mark.django_db
def test_other_kinds_are_ignored(keyed: None) -> None:
    response = post(event("flux-system", "flux-system", kind="GitRepository"))
    assert response.status_code == 202
    assert FluxEventReceipt.objects.count() == 0


@pytest.fixture
def still(start_fleet: Callable[..., Simulator]) -> Simulator:
    return start_fleet()


def _reconcile(sim: Simulator) -> None:
    sim.flux.request_reconcile(time.time())
    sim.tick()
    sim.tick()


@pytest.mark.django_db
def test_an_event_reads_the_object_and_a_replay_changes_nothing(
    keyed: None, still: Simulator, merged_change: Callable[..., ChangeRequest]
) -> None:
    merged_change(TenantSpec(slug="alpha"))
    _reconcile(still)
    services.sync_all()
    row = FluxObject.objects.get(kind="Kustomization", namespace="flux-system", name="tenants")
    FluxObject.objects.filter(pk=row.pk).update(message="stale", ready="Unknown")
    body = event("flux-system", "tenants")
    response = post(body)
    assert response.status_code == 200 and response.json() == {"status": "refreshed"}
    fresh = FluxObject.objects.get(kind="Kustomization", namespace="flux-system", name="tenants")
    cluster = still.get_object("kustomizations", "flux-system", "tenants")
    ready = next(c for c in cluster["status"]["conditions"] if c["type"] == "Ready")
    # The row is the cluster's word, not the payload's.
    assert fresh.ready == ready["status"] and fresh.message == ready["message"]
    assert "payload" not in fresh.message
    assert FluxEventReceipt.objects.count() == 1
    tenants = FluxObject.objects.filter(kind="Kustomization", name="tenants")
    tenants.update(message="stale")
    replay = post(body)
    assert replay.status_code == 200 and replay.json() == {"status": "duplicate"}
    assert tenants.get().message == "stale"
    assert FluxEventReceipt.objects.count() == 1


@pytest.mark.django_db
def test_an_object_gone_from_the_cluster_loses_its_row(keyed: None, still: Simulator) -> None:
    FluxObject.objects.create(kind="Kustomization", namespace="flux-system", name="removed")
    assert post(event("flux-system", "removed")).status_code == 200
    assert not FluxObject.objects.filter(name="removed").exists()


@pytest.mark.django_db
def test_old_receipts_are_pruned(
    keyed: None, still: Simulator, merged_change: Callable[..., ChangeRequest]
) -> None:
    merged_change(TenantSpec(slug="alpha"))
    _reconcile(still)
    FluxEventReceipt.objects.create(
        digest="0" * 64,
        received=datetime.now(UTC) - timedelta(hours=1),
        kind="Kustomization",
        namespace="a",
        name="b",
    )
    assert post(event("flux-system", "tenants")).status_code == 200
    assert list(FluxEventReceipt.objects.values_list("name", flat=True)) == ["tenants"]


@pytest.mark.django_db
def test_an_event_shows_the_merged_change_applied_on_its_page(
    keyed: None,
    still: Simulator,
    merged_change: Callable[..., ChangeRequest],
    login: Callable[[str], Client],
) -> None:
    onboarding = merged_change(TenantSpec(slug="alpha"))
    _reconcile(still)
    services.sync_all()
    _reconcile(still)  # Flux applied the tenant's workloads; no sync has read it
    onboarding.refresh_from_db()
    assert onboarding.apply_state == "pending"
    bob = login("bob")
    page = bob.get(reverse("gitops:detail", args=[onboarding.pk]))
    version = page.context["apply_version"]
    url = reverse("gitops:detail", args=[onboarding.pk])
    # Nothing moved: the poll costs a 204 and no render.
    idle = bob.get(url, {"part": "apply", "since": version}, HTTP_HX_REQUEST="true")
    assert idle.status_code == 204 and idle.content == b""

    assert post(event("alpha", "alpha-workloads")).status_code == 200

    onboarding.refresh_from_db()
    assert onboarding.apply_state == "applied", onboarding.apply_message
    fragment = bob.get(url, {"part": "apply", "since": version}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    text = fragment.content.decode()
    assert "Applied" in text and f"since={version}" not in text
    assert "hx-trigger" not in text  # applied is final: the region stops polling
