"""Mapping identity-provider groups to memberships and platform roles.

Group paths, as Keycloak sends them with "full group path" on (the leading '/' is optional):
  /tenants/<slug>/admin | member | viewer   -> a Membership in <slug>
  /platform/admin                           -> platform-admin
  /platform/finance                         -> finance
Anything else is ignored. The prefix can be moved under a parent group with OIDC_GROUP_PREFIX
(for example "/ai-factory/").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tenants.models import PlatformRole, Role

_PLATFORM = {"admin": PlatformRole.Name.PLATFORM_ADMIN, "finance": PlatformRole.Name.FINANCE}
# When a user is in several groups of one tenant, the strongest role wins.
_ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2}


@dataclass
class GroupGrants:
    tenant_roles: dict[str, str] = field(default_factory=dict)
    platform_roles: set[str] = field(default_factory=set)


def parse_groups(groups: Iterable[object], prefix: str = "/") -> GroupGrants:
    grants = GroupGrants()
    norm_prefix = prefix.strip("/")
    for raw in groups:
        if not isinstance(raw, str):
            continue
        parts = [p for p in raw.strip().split("/") if p]
        if norm_prefix:
            prefix_parts = norm_prefix.split("/")
            if parts[: len(prefix_parts)] != prefix_parts:
                continue
            parts = parts[len(prefix_parts) :]
        if len(parts) == 3 and parts[0] == "tenants" and parts[2] in _ROLE_RANK:
            slug, role = parts[1], parts[2]
            current = grants.tenant_roles.get(slug)
            if current is None or _ROLE_RANK[Role(role)] > _ROLE_RANK[Role(current)]:
                grants.tenant_roles[slug] = role
        elif len(parts) == 2 and parts[0] == "platform" and parts[1] in _PLATFORM:
            grants.platform_roles.add(_PLATFORM[parts[1]])
    return grants


def groups_from_claims(*claim_sets: dict[str, object], claim: str = "groups") -> list[str]:
    """Collect the group claim from the ID token and userinfo, whichever carries it."""
    found: list[str] = []
    for claims in claim_sets:
        value = claims.get(claim) if isinstance(claims, dict) else None
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str) and v not in found)
    return found
