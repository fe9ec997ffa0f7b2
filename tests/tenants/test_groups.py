from __future__ import annotations

from tenants.groups import groups_from_claims, parse_groups


def test_it_maps_tenant_and_platform_groups() -> None:
    grants = parse_groups(
        ["/tenants/alpha/admin", "tenants/bravo/viewer", "/platform/admin", "/platform/finance"]
    )
    assert grants.tenant_roles == {"alpha": "admin", "bravo": "viewer"}
    assert grants.platform_roles == {"platform-admin", "finance"}


def test_it_keeps_the_strongest_role_per_tenant() -> None:
    grants = parse_groups(
        ["/tenants/alpha/viewer", "/tenants/alpha/admin", "/tenants/alpha/member"]
    )
    assert grants.tenant_roles == {"alpha": "admin"}


def test_it_ignores_unknown_shapes_and_roles() -> None:
    grants = parse_groups(
        ["/tenants/alpha/owner", "/tenants/alpha", "/other/x/admin", "/platform/root", 42, None, ""]
    )
    assert grants.tenant_roles == {}
    assert grants.platform_roles == set()


def test_it_honours_a_prefix() -> None:
    grants = parse_groups(
        ["/ai-factory/tenants/alpha/member", "/tenants/bravo/admin"], prefix="/ai-factory/"
    )
    assert grants.tenant_roles == {"alpha": "member"}


def test_it_collects_groups_from_id_token_and_userinfo() -> None:
    found = groups_from_claims(
        {"groups": ["/a", "/b"]}, {"groups": ["/b", "/c"]}, {"groups": "/d"}, {"other": 1}
    )
    assert found == ["/a", "/b", "/c", "/d"]
