"""The approval page's live region: the request's state, its pull request's checks and the
capacity update by themselves (a poll with the region's version, 204 while nothing moved), the
decision forms stay outside it, and polling stops when the request is final."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from catalog import services
from catalog.models import ResourceRequest
from catalog.specs import to_json
from fleet.models import Workload
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from gitops.specs import GpuShare
from tests.catalog.test_views_admin import OUTSIDERS, _approve

S = ResourceRequest.State
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ask(world: dict[str, Any]) -> Callable[[], ResourceRequest]:
    """A submitted GPU share request of alpha, by bob, on a repository with a main."""
    gitops.ensure_bootstrapped(configured_fleet())
    flavor = next(f.name for f in configured_fleet().flavors if f.mode == "whole")
    spec = to_json(GpuShare(name="train", flavor=flavor, kind="whole", count=2))

    def make() -> ResourceRequest:
        return services.do_create_request(
            world["alpha"], acting_user=world["bob"], kind="gpu-share", spec=spec, reason="x"
        )

    return make


def since(page: str) -> str:
    found = re.search(r'\?since=([0-9a-f]+)" hx-trigger="every \d+ms"', page)
    assert found, "the live region polls with its version"
    return found[1]


def region(page: str) -> str:
    start = page.index('<section id="live"')
    return page[start : page.index("</section>", start)]


def test_the_forms_are_outside_the_region_and_an_idle_poll_is_a_cheap_204(
    ask: Callable[..., ResourceRequest],
    login: Callable[[str], Client],
    django_assert_num_queries: Any,
) -> None:
    pam = login("pam")
    request = ask()
    page = pam.get(f"/approvals/{request.pk}/").content.decode()
    assert "Fleet capacity per flavor" in region(page)
    assert "<form" not in region(page) and "Approve and open the pull request" in page
    # Session, user, role; the request with its tenant and pull request; the tenant's pods.
    with django_assert_num_queries(5):
        response = pam.get(f"/approvals/{request.pk}/", {"since": since(page)}, **HTMX)
    assert response.status_code == 204 and "X-Live-Checked" in response


def test_a_decision_and_the_pull_requests_checks_show_up_in_the_fragment(
    world: dict[str, Any], ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    pam = login("pam")
    request = ask()
    url = f"/approvals/{request.pk}/"
    version = since(pam.get(url).content.decode())
    Workload.objects.create(
        namespace="alpha",
        name="w",
        tenant_slug="alpha",
        node="n",
        gpu_requests={"nvidia.com/gpu": 3},
    )
    used = pam.get(url, {"since": version}, **HTMX).content.decode()
    assert "<strong>3</strong> <code>nvidia.com/gpu</code>" in used and "<h1>" not in used

    # The decision (from another tab) shows: the state and the pull request appear.
    assert _approve(pam, request).status_code == 302
    request.refresh_from_db()
    fragment = pam.get(url, {"since": since(used)}, **HTMX).content.decode()
    assert "request-pr_open" in fragment
    assert f"/changes/{request.change_id}/" in fragment and "Checks running" in fragment
    ChangeRequest.objects.filter(pk=request.change_id).update(checks_state="passed")
    checked = pam.get(url, {"since": since(fragment)}, **HTMX).content.decode()
    assert "checks-passed" in checked


def test_a_final_request_stops_polling(
    world: dict[str, Any], ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    request = ask()
    services.do_reject(request, acting_user=world["pam"], note="not now")
    page = login("pam").get(f"/approvals/{request.pk}/").content.decode()
    assert "hx-trigger" not in region(page) and "nothing more will change here" in page


@pytest.mark.parametrize("name", OUTSIDERS)
def test_the_poll_is_404_to_all_but_platform_admins(
    name: str, ask: Callable[..., ResourceRequest], login: Callable[[str], Client]
) -> None:
    request = ask()
    version = since(login("pam").get(f"/approvals/{request.pk}/").content.decode())
    response = login(name).get(f"/approvals/{request.pk}/", {"since": version}, **HTMX)
    assert response.status_code == 404
