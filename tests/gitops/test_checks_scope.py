"""The scope check: a change may touch only the resources its requests ask for
(gitops/checks/scope.py), read from its diff against its actual base."""

from __future__ import annotations

import dataclasses

import pytest

from gitops.checks import run_checks
from gitops.checks.scope import describe, item_of, violations
from gitops.fleet import demo_fleet
from gitops.render import render_tenant_tree
from gitops.specs import EndpointSpec, GpuShare, TenantSpec

FLEET = demo_fleet()
TRAIN = GpuShare(name="train", flavor="h200", kind="whole", count=4)
CHAT = EndpointSpec(name="chat", model_uri="hf://org/chat", share="train")
BIG = EndpointSpec(name="big", model_uri="hf://org/big", share="train")
BASE = TenantSpec(slug="alpha", display_name="Alpha", shares=(TRAIN,), endpoints=(CHAT,))


def _scope_result(base: dict[str, bytes], head: dict[str, bytes], scopes: dict) -> object:
    changed = {p for p in set(base) | set(head) if base.get(p) != head.get(p)}
    results = run_checks(head, fleet=FLEET, changed=changed, base=base, scopes=scopes)
    (result,) = [r for r in results if r.name == "scope"]
    return result


@pytest.mark.parametrize(
    ("path", "item"),
    [
        ("spec/endpoints/chat.json", "endpoints/chat"),
        ("workloads/endpoints/chat.yaml", "endpoints/chat"),
        ("litellm/chat.yaml", "endpoints/chat"),
        ("spec/shares/train.json", "shares/train"),
        ("workloads/gpu-shares/claims.yaml", "shares/claims"),
        ("clusters/dev.yaml", "clusters/dev"),
        ("cluster-access/dev/bindings.yaml", "clusters/dev"),
        ("spec/tenant.json", "settings"),
        ("spec/members.json", "members"),
        ("quota.yaml", None),
        ("queues.yaml", None),
        ("kustomization.yaml", None),
    ],
)
def test_each_file_of_a_tenant_belongs_to_an_item_or_to_the_whole(
    path: str, item: str | None
) -> None:
    assert item_of(path) == item


def test_the_reported_lost_update_fails_the_check() -> None:
    # The request for endpoint big was rendered from a database that did not have chat yet;
    # its base (main) did: the change deletes chat's files although nothing asked for it.
    base = render_tenant_tree(BASE, FLEET)
    stale = dataclasses.replace(BASE, endpoints=(BIG,))
    head = {p: b for p, b in base.items() if not p.startswith("tenants/alpha/")}
    head.update(render_tenant_tree(stale, FLEET))
    result = _scope_result(base, head, {"alpha": {"endpoints/big", "members"}})
    assert result.status == "failed"
    assert (
        "tenants/alpha/workloads/endpoints/chat.yaml: this change deletes endpoint chat, which "
        "none of its requests asks for"
    ) in result.details
    assert any("litellm/chat.yaml: this change deletes endpoint chat" in d for d in result.details)
    assert "spec/endpoints/chat.json" in " ".join(result.details)


def test_a_change_that_does_what_it_was_asked_passes() -> None:
    base = render_tenant_tree(BASE, FLEET)
    head = render_tenant_tree(dataclasses.replace(BASE, endpoints=(CHAT, BIG)), FLEET)
    result = _scope_result(base, head, {"alpha": {"endpoints/big", "members"}})
    assert (result.status, result.details) == ("passed", [])
    assert result.summary == "1 tenant directory: only what the requests ask for"
    # Decommissioning chat is asking for it.
    removed = render_tenant_tree(dataclasses.replace(BASE, endpoints=()), FLEET)
    assert _scope_result(base, removed, {"alpha": {"endpoints/chat"}}).status == "passed"
    assert _scope_result(base, removed, {"alpha": {"endpoints/big"}}).status == "failed"


def test_a_tenant_no_change_names_may_not_lose_anything() -> None:
    base = render_tenant_tree(BASE, FLEET)
    head = render_tenant_tree(dataclasses.replace(BASE, endpoints=()), FLEET)
    # A platform change (scope []) and a batch of another tenant's changes.
    assert _scope_result(base, head, {"*": set()}).status == "failed"
    assert _scope_result(base, head, {"bravo": {"*"}}).status == "failed"
    # A change opened by hand on alpha (no scope said): the whole directory is its own.
    assert _scope_result(base, head, {"alpha": {"*"}}).status == "passed"


def test_a_hand_edited_manifest_is_a_warning_named_in_the_details() -> None:
    base = render_tenant_tree(BASE, FLEET)
    head = dict(render_tenant_tree(dataclasses.replace(BASE, endpoints=(CHAT, BIG)), FLEET))
    head["tenants/alpha/quota.yaml"] += b"# tuned by hand\n"
    result = _scope_result(base, head, {"alpha": {"endpoints/big"}})
    assert result.status == "passed" and "(1 warning)" in result.summary
    (note,) = result.details
    assert "quota.yaml differ from what tenants/alpha/spec renders" in note


def test_members_rewrite_the_bindings_and_nothing_else() -> None:
    found = violations(
        {"tenants/alpha/cluster-access/dev/bindings.yaml": b"a"},
        {"tenants/alpha/cluster-access/dev/bindings.yaml": b"b"},
        ["tenants/alpha/cluster-access/dev/bindings.yaml"],
        {"alpha": {"members"}},
    )
    assert found == []
    assert describe("members") == "who may use the tenant's clusters"
    assert describe("shares/train") == "GPU share train"


def test_a_check_of_main_has_no_scope_to_hold_it_to() -> None:
    files = render_tenant_tree(BASE, FLEET)
    (result,) = [r for r in run_checks(files, fleet=FLEET) if r.name == "scope"]
    assert (result.status, result.summary) == (
        "passed",
        "not a change: no request to hold the tree to",
    )
