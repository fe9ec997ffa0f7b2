"""Merging a change that a standing policy approved, without a person's review.

A sleep or a wake (``catalog.idle_actions``) only scales what a tenant already has to zero or
back to what it had: no new resource, no more quota. A platform team sets the idle policy once
(its review is the policy's); a change per idle endpoint waiting for a click would keep the
GPUs it is meant to free. So such a change is merged as soon as its checks pass, like a
revocation (``gitops.services.do_merge_revocation``): the checks still run, the squash commit
names the policy in ``Approved-by``, and the audit row carries the reason. Whether a change
qualifies is decided by the caller from the change's own content; here only how it merges.
Off with GITOPS_POLICY_AUTO_MERGE=false: the change then waits for a review like any other.
A forge merges its own pull requests.
"""

from __future__ import annotations

from django.conf import settings

from gitops.models import ChangeRequest
from gitops.services import _locked, _merge


def do_merge_by_policy(change: ChangeRequest, *, policy: str) -> ChangeRequest | None:
    """Merge the open ``change`` whose checks passed, approved by ``policy``; None, and nothing
    done, when it cannot be merged that way (yet)."""
    if not settings.GITOPS_POLICY_AUTO_MERGE or settings.GITOPS_FORGE:
        return None
    change = _locked(change)
    if not change.is_open or not change.checks_mergeable:
        return None
    return _merge(
        change,
        acting_user=None,
        approved_by=f"none needed: {policy}",
        audit={"without_review": [None, policy[:300]]},
    )
