"""The tenant side of the catalog over HTTP: the catalog, the forms and their live preview,
requests, changes to what the tenant has, the kubeconfig download, and who sees what."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from catalog import services
from catalog.models import Kind, Resource, ResourceRequest
from fleet import services as fleet
from gitops import services as gitops
from gitops.models import ChangeRequest
from portal.models import AuditEvent
from simulator import Simulator
from tests import cluster_oidc
from tests.support.text import refusal, refused_params

S = ResourceRequest.State
SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 2}
SHARE_FORM = {"name": "train", "flavor": "h200", "kind": "whole", "count": "2", "borrow": "on"}
ENDPOINT = {"name": "chat", "model_uri": "hf://org/chat-model", "share": "train"}
HTMX = {"HTTP_HX_REQUEST": "true"}


def _resource(tenant: Any, kind: str, spec: dict[str, Any], **extra: Any) -> Resource:
    return Resource.objects.create(
        tenant=tenant,
        kind=kind,
        name=spec["name"],
        state=extra.pop("state", Resource.State.ACTIVE),
        spec=spec,
        **extra,
    )


def _request(resource: Resource, state: str, **extra: Any) -> ResourceRequest:
    return ResourceRequest.objects.create(
        tenant=resource.tenant,
        resource=resource,
        state=state,
        spec=extra.pop("spec", resource.spec),
        **extra,
    )


def _through_main(
    world: dict[str, Any], run_jobs: Any, kind: str, spec: dict[str, Any]
) -> ResourceRequest:
    """bob asks, pam approves, the checks pass and pam merges: the resource is active."""
    req = run_jobs(
        services.do_create_request, world["alpha"], acting_user=world["bob"], kind=kind, spec=spec
    )
    req = run_jobs(services.do_approve, req, acting_user=world["pam"])
    assert req.change is not None, req.error
    ChangeRequest.objects.filter(pk=req.change.pk).update(checks_state="passed")
    req.change.refresh_from_db()
    run_jobs(gitops.do_merge, req.change, acting_user=world["pam"])
    run_jobs(services.advance_requests)
    req.refresh_from_db()
    assert req.resource.state == Resource.State.ACTIVE
    return req


# --- the catalog ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_catalog_shows_what_the_tenant_has_and_its_quota(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    share = _resource(world["alpha"], Kind.GPU_SHARE, {**SHARE, "count": 3})
    pending = _resource(world["alpha"], Kind.ENDPOINT, ENDPOINT, state=Resource.State.PENDING)
    waiting = _request(pending, S.SUBMITTED)
    response = login("bob").get("/t/alpha/catalog/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<strong>3.00</strong> of <strong>16</strong> GPUs" in page
    for kind in Kind.values:
        assert reverse("catalog:new", args=["alpha", kind]) in page
    assert reverse("catalog:modify", args=["alpha", share.pk]) in page
    assert reverse("catalog:decommission", args=["alpha", share.pk]) in page
    assert reverse("catalog:request", args=["alpha", waiting.pk]) in page
    assert 'id="dedicated-note"' not in page and 'id="trust-note"' in page
    bravo = login("charlie").get("/t/bravo/catalog/").content.decode()
    assert "offered whole GPUs only: MIG slices are off" in bravo
    assert 'href="/t/alpha/catalog/"' in login("bob").get("/t/alpha/").content.decode()


@pytest.mark.django_db
def test_the_form_offers_the_live_flavors(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("bob").get("/t/alpha/catalog/gpu-share/new/").content.decode()
    for value in ["h200", "h200-mig", "h200-hami", "h200-dra", "1g.18gb", "3g.71gb"]:
        assert f'value="{value}"' in page, value
    # One Kind control: the pools, grouped by how they hand out GPUs; no second select.
    assert '<optgroup label="MIG slices">' in page and 'name="kind"' not in page
    assert 'hx-post="/t/alpha/catalog/gpu-share/preview/"' in page
    assert 'hx-trigger="input changed delay:400ms, change"' in page
    cluster = login("bob").get("/t/alpha/catalog/cluster/new/").content.decode()
    assert 'value="1.33"' in cluster and 'name="node_pools"' in cluster
    assert login("bob").get("/t/alpha/catalog/no-such-kind/new/").status_code == 404


@pytest.mark.django_db
def test_a_dedicated_tenant_is_not_offered_hami(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    page = login("charlie").get("/t/bravo/catalog/gpu-share/new/").content.decode()
    assert 'data-kind="whole"' in page and 'data-kind="dra"' in page
    assert 'data-kind="hami"' not in page and "h200-hami" not in page
    # MIG is off for a dedicated tenant until a platform admin enables it (tenants.mig).
    assert 'data-kind="mig"' not in page and "h200-mig" not in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"name": "Bad_Name"}, "may use only lower-case letters"),
        ({"count": "0"}, "must be at least 1 (got 0)"),
        ({"flavor": "no-such-gpu"}, "There is no GPU flavor"),
        ({"until": (timezone.localdate() - timedelta(days=1)).isoformat()}, "in the future"),
        ({"count": "17"}, "its quota is 16"),
    ],
)
def test_bad_input_shows_the_message_and_creates_nothing(
    world: dict[str, Any], login: Callable[[str], Client], extra: dict[str, str], message: str
) -> None:
    response = login("bob").post("/t/alpha/catalog/gpu-share/new/", {**SHARE_FORM, **extra})
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Resource.objects.exists() and not ResourceRequest.objects.exists()


# --- the preview ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_preview_shows_the_files_the_pull_request_changes(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    changes = ChangeRequest.objects.count()
    response = login("bob").post("/t/alpha/catalog/gpu-share/preview/", SHARE_FORM, **HTMX)
    assert response.status_code == 200
    page = response.content.decode()
    assert "<html" not in page and 'id="preview"' in page
    assert "tenants/alpha/queues.yaml" in page  # the ClusterQueue with the new quota
    assert "tenants/alpha/quota.yaml" in page
    assert "nvidia.com/gpu" in page
    assert "form-errors" not in page
    assert "<strong>2.00</strong> of <strong>16</strong> GPUs" in page
    assert ChangeRequest.objects.count() == changes and not ResourceRequest.objects.exists()
    # Without htmx it answers the same fragment.
    plain = login("bob").post("/t/alpha/catalog/gpu-share/preview/", SHARE_FORM)
    assert "tenants/alpha/queues.yaml" in plain.content.decode()


@pytest.mark.django_db
def test_the_preview_prints_mig_slices_as_gpus_with_two_decimals(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    """Three 1g slices are 3/7 of a GPU: 0.43, not 0.4285714285714285714285714286."""
    form = {"name": "slices", "flavor": "h200-mig", "kind": "mig", "mig_profile": "1g.18gb"}
    response = login("bob").post(
        "/t/alpha/catalog/gpu-share/preview/", {**form, "count": "3"}, **HTMX
    )
    page = response.content.decode()
    assert "form-errors" not in page
    assert "<strong>0.43</strong> of <strong>16</strong> GPUs" in page


@pytest.mark.django_db
def test_the_preview_shows_errors_for_bad_input(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    response = login("bob").post(
        "/t/alpha/catalog/gpu-share/preview/", {**SHARE_FORM, "name": "Bad_Name"}, **HTMX
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "form-errors" in page and "lower-case letters" in page
    assert "tenants/alpha/" not in page


@pytest.mark.django_db
@pytest.mark.parametrize("kind", Kind.values)
@pytest.mark.parametrize(
    "data",
    [
        {},
        {"name": "x" * 500, "count": "99999999999999999999999999", "flavor": "\x00"},
        {"name": "ok", "count": "-5", "kind": "dra", "flavor": "h200-mig", "until": "2-31"},
        {"name": "a", "node_pools": ["h200", "h200", "nope"], "gpu_quota": "1e9"},
        {"name": "ep", "share": "../../etc", "args": "--x\x07", "scale_metric": "vibes"},
        {
            "name": "ep",
            "model_uri": "hf://a/b",
            "share": "",
            "min_replicas": "3",
            "max_replicas": "1",
        },
    ],
)
def test_the_preview_never_fails_on_garbage(
    world: dict[str, Any], login: Callable[[str], Client], kind: str, data: dict[str, Any]
) -> None:
    response = login("bob").post(f"/t/alpha/catalog/{kind}/preview/", data, **HTMX)
    assert response.status_code == 200
    assert "form-errors" in response.content.decode()


@pytest.mark.django_db
def test_the_preview_of_a_change_keeps_the_name(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    share = _resource(onboarded["alpha"], Kind.GPU_SHARE, SHARE)
    url = f"/t/alpha/catalog/gpu-share/preview/?resource={share.pk}"
    page = login("bob").post(url, {**SHARE_FORM, "name": "other", "count": "3"}).content.decode()
    assert "already has" not in page and "form-errors" not in page
    assert "tenants/alpha/queues.yaml" in page
    foreign = _resource(onboarded["bravo"], Kind.GPU_SHARE, SHARE)
    url = f"/t/alpha/catalog/gpu-share/preview/?resource={foreign.pk}"
    assert login("bob").post(url, SHARE_FORM).status_code == 404


# --- asking and following -------------------------------------------------------------------


@pytest.mark.django_db
def test_creating_goes_to_the_request_page(
    onboarded: dict[str, Any], login: Callable[[str], Client]
) -> None:
    bob = login("bob")
    data = {**SHARE_FORM, "borrow": "", "reason": "fine-tuning next week"}
    response = bob.post("/t/alpha/catalog/gpu-share/new/", data)
    req = ResourceRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/t/alpha/requests/{req.pk}/"
    assert req.state == S.SUBMITTED and req.requested_by == onboarded["bob"]
    assert req.reason == "fine-tuning next week"
    assert req.spec == {
        **SHARE,
        "mig_profile": "",
        "gpumem_mib": 0,
        "gpucores_percent": 0,
        "borrowing_limit": 0,
        "lending_limit": None,
        "until": "",
    }
    page = bob.get(response["Location"]).content.decode()
    assert "New GPU share train" in page and "Submitted" in page
    assert "fine-tuning next week" in page
    assert 'hx-trigger="every 1s"' in page  # live while not finished
    listing = bob.get("/t/alpha/requests/").content.decode()
    assert f'id="request-{req.pk}"' in listing and 'hx-trigger="every 5s"' in listing
    fragment = bob.get("/t/alpha/requests/", **HTMX).content.decode()
    assert "<html" not in fragment and f'id="request-{req.pk}"' in fragment
    live = bob.get(response["Location"], **HTMX).content.decode()
    assert "<html" not in live and 'id="live"' in live


@pytest.mark.db_engine
@pytest.mark.django_db
def test_the_request_list_stays_cheap(
    world: dict[str, Any],
    login: Callable[[str], Client],
    django_assert_max_num_queries: Any,
) -> None:
    client = login("bob")
    for index in range(8):
        resource = _resource(world["alpha"], Kind.GPU_SHARE, {**SHARE, "name": f"s{index}"})
        _request(resource, S.SUBMITTED, requested_by=world["bob"])
    with django_assert_max_num_queries(8):
        response = client.get("/t/alpha/requests/", **HTMX)
    assert response.content.decode().count('id="request-') == 8


@pytest.mark.django_db
def test_a_viewer_sees_but_cannot_ask(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    vic = login("vic")
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    req = _request(share, S.SUBMITTED, requested_by=world["bob"])
    home = vic.get("/t/alpha/catalog/").content.decode()
    assert "You are a viewer" in home and "/catalog/gpu-share/new/" not in home
    assert "/modify/" not in home
    page = vic.get("/t/alpha/catalog/gpu-share/new/")
    assert page.status_code == 200
    assert "Viewers cannot ask" in page.content.decode() and "hx-post" not in page.content.decode()
    assert (
        vic.post("/t/alpha/catalog/gpu-share/new/", {**SHARE_FORM, "name": "v"}).status_code == 403
    )
    assert vic.post("/t/alpha/catalog/gpu-share/preview/", SHARE_FORM).status_code == 403
    assert vic.post(f"/t/alpha/resources/{share.pk}/modify/", SHARE_FORM).status_code == 403
    assert (
        vic.post(f"/t/alpha/resources/{share.pk}/decommission/", {"confirm": "train"}).status_code
        == 403
    )
    assert vic.post(f"/t/alpha/requests/{req.pk}/cancel/").status_code == 403
    assert vic.post(f"/t/alpha/requests/{req.pk}/edit/", SHARE_FORM).status_code == 403
    detail = vic.get(f"/t/alpha/requests/{req.pk}/").content.decode()
    assert "Cancel the request" not in detail
    assert ResourceRequest.objects.count() == 1
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


@pytest.mark.django_db
def test_cancel(world: dict[str, Any], login: Callable[[str], Client]) -> None:
    req = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind=Kind.GPU_SHARE, spec=SHARE
    )
    bob = login("bob")
    assert "Cancel the request" in bob.get(f"/t/alpha/requests/{req.pk}/").content.decode()
    assert bob.get(f"/t/alpha/requests/{req.pk}/cancel/").status_code == 405
    response = bob.post(f"/t/alpha/requests/{req.pk}/cancel/")
    assert response.status_code == 302
    assert response["Location"] == f"/t/alpha/requests/{req.pk}/"
    req.refresh_from_db()
    assert req.state == S.CANCELLED
    assert req.resource.state == Resource.State.WITHDRAWN
    page = bob.get(f"/t/alpha/requests/{req.pk}/").content.decode()
    assert "Cancel the request" not in page and 'hx-trigger="every 1s"' not in page
    # Cancelling twice says why, and changes nothing.
    again = bob.post(f"/t/alpha/requests/{req.pk}/cancel/", follow=True)
    assert "cannot become cancelled" in again.content.decode()


@pytest.mark.django_db
def test_edit_after_changes_requested(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    req = services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind=Kind.GPU_SHARE, spec=SHARE
    )
    services.do_request_changes(req, acting_user=world["pam"], note="One GPU is enough.")
    bob = login("bob")
    page = bob.get(f"/t/alpha/requests/{req.pk}/edit/").content.decode()
    assert "One GPU is enough." in page
    assert 'name="name" value="train"' in page and "disabled" in page
    assert f"/catalog/gpu-share/preview/?request={req.pk}" in page
    response = bob.post(f"/t/alpha/requests/{req.pk}/edit/", {**SHARE_FORM, "count": "1"})
    assert response.status_code == 302
    req.refresh_from_db()
    assert req.state == S.SUBMITTED and req.spec["count"] == 1
    # Submitted again, it is no longer editable.
    response = bob.get(f"/t/alpha/requests/{req.pk}/edit/")
    assert response.status_code == 302


HEADER_STATE = re.compile(
    r'<span id="request-state"( hx-swap-oob="true")?><span class="badge catalog-state '
    r'catalog-state-(\w+)">'
)
PROGRESS_STATE = re.compile(
    r'<h2>Progress</h2>\s*<p><span class="badge catalog-state catalog-state-(\w+)">'
)


@pytest.mark.django_db
def test_the_header_badge_follows_the_progress_line(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    # A change to an active share: the header used to show the resource's "Active" while the
    # progress line said the request was submitted.
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    req = _request(
        share, S.SUBMITTED, action=ResourceRequest.Action.MODIFY, requested_by=world["bob"]
    )
    bob = login("bob")
    url = f"/t/alpha/requests/{req.pk}/"
    page = bob.get(url).content.decode()
    header, progress = HEADER_STATE.findall(page), PROGRESS_STATE.findall(page)
    assert header == [("", "submitted")] and progress == ["submitted"]
    assert 'catalog-resource-active">Active</span>' in page  # still shown, as the resource's

    # The poll's answer carries the header's badge out of band, with the same state.
    services.do_reject(req, acting_user=world["pam"], note="Not now.")
    fragment = bob.get(url, **HTMX).content.decode()
    assert HEADER_STATE.findall(fragment) == [(' hx-swap-oob="true"', "rejected")]
    assert PROGRESS_STATE.findall(fragment) == ["rejected"]


@pytest.mark.django_db
def test_modify_and_decommission_create_requests(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    spare = _resource(world["alpha"], Kind.GPU_SHARE, {**SHARE, "name": "spare", "count": 1})
    bob = login("bob")
    form = bob.get(f"/t/alpha/resources/{share.pk}/modify/").content.decode()
    assert 'name="count" value="2"' in form and "disabled" in form
    assert f"preview/?resource={share.pk}" in form
    response = bob.post(
        f"/t/alpha/resources/{share.pk}/modify/", {**SHARE_FORM, "count": "4", "name": "x"}
    )
    assert response.status_code == 302
    change = ResourceRequest.objects.get(resource=share)
    assert change.action == "modify" and change.spec["count"] == 4
    assert change.spec["name"] == "train"
    page = bob.get(response["Location"]).content.decode()
    assert "catalog-changed" in page  # the count, now 2, asked 4
    # While that is open the share cannot change again.
    busy = bob.get(f"/t/alpha/resources/{share.pk}/modify/").content.decode()
    assert "is still submitted" in busy and "hx-post" not in busy

    url = f"/t/alpha/resources/{spare.pk}/decommission/"
    assert "Type the name" in bob.get(url).content.decode()
    wrong = bob.post(url, {"confirm": "train", "reason": "done"})
    assert wrong.status_code == 422 and "Type the name spare" in wrong.content.decode()
    assert not ResourceRequest.objects.filter(resource=spare).exists()
    response = bob.post(url, {"confirm": "spare", "reason": "done"})
    assert response.status_code == 302
    gone = ResourceRequest.objects.get(resource=spare)
    assert gone.action == "decommission" and gone.state == S.SUBMITTED and gone.reason == "done"


@pytest.mark.django_db
def test_an_endpoint_shows_its_url_and_curl_once_ready(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    endpoint = _resource(world["alpha"], Kind.ENDPOINT, ENDPOINT)
    req = _request(endpoint, S.PR_OPEN, requested_by=world["bob"])
    bob = login("bob")
    page = bob.get(f"/t/alpha/requests/{req.pk}/").content.decode()
    assert "Use the endpoint" not in page and 'hx-trigger="every 1s"' in page
    ResourceRequest.objects.filter(pk=req.pk).update(state=S.READY)
    access = services.endpoint_access(endpoint)
    page = bob.get(f"/t/alpha/requests/{req.pk}/").content.decode()
    assert "Use the endpoint" in page
    assert access["url"] in page and access["model"] in page
    assert "/v1/chat/completions" in page and "Copy" in page
    assert "https://alpha.models.ai-factory.example.com/" in page
    assert "x-api-key: $AI_FACTORY_API_KEY" in page and access["cluster_url"] in page
    assert 'hx-trigger="every 1s"' not in page  # ready is final: no more polling
    assert "Download kubeconfig" not in page


# --- the kubeconfig -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_kubeconfig_is_for_members_of_a_running_cluster(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    cluster = _resource(world["alpha"], Kind.CLUSTER, {"name": "lab"}, state=Resource.State.PENDING)
    url = f"/t/alpha/resources/{cluster.pk}/kubeconfig/"
    for member in ("bob", "vic"):  # viewers too: there is no credential in it
        response = login(member).get(url)
        assert response.status_code == 409
        assert "does not exist yet" in response.content.decode()
    assert login("nora").get(url).status_code == 404
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    assert login("bob").get(f"/t/alpha/resources/{share.pk}/kubeconfig/").status_code == 404


@pytest.mark.django_db
def test_without_cluster_oidc_the_page_says_why_instead_of_handing_out_the_admin_credential(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    cluster = _resource(world["alpha"], Kind.CLUSTER, {"name": "lab"})
    response = login("bob").get(f"/t/alpha/resources/{cluster.pk}/kubeconfig/")
    assert response.status_code == 409
    page = response.content.decode()
    assert "does not hand out the cluster&#x27;s admin credential" in page
    assert "cluster_oidc" in page
    assert not AuditEvent.objects.filter(action="cluster.kubeconfig").exists()


@pytest.fixture
def sim(start_fleet: Callable[..., Simulator]) -> Simulator:
    return start_fleet()


@pytest.mark.django_db
def test_a_running_cluster_s_kubeconfig_downloads(
    onboarded: dict[str, Any],
    login: Callable[[str], Client],
    run_jobs: Any,
    settings: Any,
    tmp_path: Any,
    sim: Simulator,
) -> None:
    world = onboarded
    cluster_oidc.configure(settings, tmp_path, cluster_oidc.fleet_with_oidc())
    for name in ("bob", "vic"):
        cluster_oidc.link(world[name], f"sub-{name}")
    _through_main(world, run_jobs, Kind.GPU_SHARE, SHARE)
    cluster = {"name": "lab", "node_pools": ["h200"], "gpu_quota": 2}
    req = _through_main(world, run_jobs, Kind.CLUSTER, cluster)
    for _ in range(3):
        sim.tick()
    # The first sync writes the tenant's source token; with it Flux reads the tenant's
    # projection, where the cluster's bindings are, and the change is applied.
    run_jobs(fleet.sync_all)
    sim.tick()
    run_jobs(fleet.sync_all)
    run_jobs(services.advance_requests)
    req.refresh_from_db()
    assert req.state == S.READY, req.error
    url = f"/t/alpha/resources/{req.resource_id}/kubeconfig/"
    for member in ("bob", "vic"):
        page = login(member).get(f"/t/alpha/requests/{req.pk}/").content.decode()
        assert "Download kubeconfig" in page and url in page
    response = login("bob").get(url)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/yaml"
    assert response["Content-Disposition"] == 'attachment; filename="alpha-lab.kubeconfig"'
    assert b"exec:" in response.content and b"client-key-data" not in response.content
    assert AuditEvent.objects.filter(action="cluster.kubeconfig", actor=world["bob"]).exists()
    assert login("vic").get(url).status_code == 200
    # A member the provider does not know gets the reason, not a kubeconfig that fails later.
    refused = login("alice").get(url)
    assert refused.status_code == 409
    assert "not linked to Keycloak" in refused.content.decode()


# --- isolation ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_outsiders_get_404_on_every_catalog_url(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    cluster = _resource(world["alpha"], Kind.CLUSTER, {"name": "lab"})
    req = _request(share, S.SUBMITTED, requested_by=world["bob"])
    urls = [
        "/t/alpha/catalog/",
        "/t/alpha/catalog/gpu-share/new/",
        "/t/alpha/catalog/gpu-share/preview/",
        f"/t/alpha/catalog/gpu-share/preview/?resource={share.pk}",
        "/t/alpha/requests/",
        f"/t/alpha/requests/{req.pk}/",
        f"/t/alpha/requests/{req.pk}/edit/",
        f"/t/alpha/requests/{req.pk}/cancel/",
        f"/t/alpha/resources/{share.pk}/modify/",
        f"/t/alpha/resources/{share.pk}/decommission/",
        f"/t/alpha/resources/{cluster.pk}/kubeconfig/",
    ]
    data = {**SHARE_FORM, "name": "sneaky", "confirm": "train"}
    for outsider in ["charlie", "nora"]:
        client = login(outsider)
        for url in urls:
            assert client.get(url).status_code == 404, (outsider, url)
            assert client.post(url, data).status_code == 404, (outsider, url)
    assert ResourceRequest.objects.count() == 1
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


@pytest.mark.django_db
def test_ids_of_another_tenant_are_404(
    world: dict[str, Any], login: Callable[[str], Client]
) -> None:
    theirs = _resource(world["bravo"], Kind.GPU_SHARE, SHARE)
    req = _request(theirs, S.SUBMITTED, requested_by=world["charlie"])
    alice = login("alice")
    for url in [
        f"/t/alpha/requests/{req.pk}/",
        f"/t/alpha/requests/{req.pk}/edit/",
        f"/t/alpha/resources/{theirs.pk}/modify/",
        f"/t/alpha/resources/{theirs.pk}/decommission/",
    ]:
        assert alice.get(url).status_code == 404, url
    assert alice.post(f"/t/alpha/requests/{req.pk}/cancel/").status_code == 404
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_sign_in(world: dict[str, Any]) -> None:
    share = _resource(world["alpha"], Kind.GPU_SHARE, SHARE)
    req = _request(share, S.SUBMITTED)
    for url in [
        f"/t/alpha/requests/{req.pk}/",
        f"/t/alpha/requests/{req.pk}/edit/",
        f"/t/alpha/resources/{share.pk}/modify/",
        f"/t/alpha/resources/{share.pk}/decommission/",
        f"/t/alpha/resources/{share.pk}/kubeconfig/",
    ]:
        response = Client().get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/")
    assert Client().post(f"/t/alpha/requests/{req.pk}/cancel/").status_code == 302
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


@pytest.mark.django_db
@pytest.mark.parametrize("char", refused_params())
def test_a_reason_hiding_text_is_refused_by_the_form_and_the_service(
    world: dict[str, Any], login: Callable[[str], Client], char: str
) -> None:
    reason = f"fine-tuning{char} next week"
    response = login("bob").post(
        "/t/alpha/catalog/gpu-share/new/", {**SHARE_FORM, "reason": reason}
    )
    assert response.status_code == 422
    assert refusal(char) in response.content.decode()
    with pytest.raises(ValidationError) as caught:
        services.do_create_request(
            world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE, reason=reason
        )
    assert refusal(char) in " ".join(caught.value.message_dict["reason"])
    assert not Resource.objects.exists() and not ResourceRequest.objects.exists()
    # Line breaks are what a reason of several lines is made of.
    services.do_create_request(
        world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=SHARE, reason="a\r\nb\tc"
    )
