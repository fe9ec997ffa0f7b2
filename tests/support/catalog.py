"""Catalog scenes the tests share: a resource taken through main as people do it."""

from __future__ import annotations

from typing import Any

from catalog import services
from catalog.models import Resource
from gitops import services as gitops
from gitops.models import ChangeRequest


def through_main(world: dict[str, Any], run_jobs: Any, kind: str, spec: dict[str, Any]) -> Resource:
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
    req.resource.refresh_from_db()
    assert req.resource.state == Resource.State.ACTIVE
    return req.resource
