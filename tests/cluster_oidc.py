"""Setting the portal up for per-person cluster access, the way an operator does: a fleet file
with ``cluster_oidc`` (GITOPS_FLEET_FILE) and the portal's sign-in provider (OIDC_*), and
members linked to the provider the way allauth links them (a SocialAccount whose uid is the
``sub`` claim, with the claims it received)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml
from allauth.socialaccount.models import SocialAccount

from gitops.fleet import demo_fleet
from gitops.specs import ClusterOidc, FleetSpec

ISSUER = "https://idp.example.com/realms/ai-factory"
PROVIDER_ID = "keycloak"
CLUSTER_CLIENT = "ai-factory-clusters"


def fleet_with_oidc(issuer: str = ISSUER, **oidc: Any) -> FleetSpec:
    return dataclasses.replace(
        demo_fleet(),
        cluster_oidc=ClusterOidc(issuer_url=issuer, client_id=CLUSTER_CLIENT, **oidc),
    )


def configure(settings: Any, directory: Path, fleet: FleetSpec) -> FleetSpec:
    """Write ``fleet`` as the installation's fleet file and make ``fleet.cluster_oidc``'s
    issuer the portal's sign-in provider."""
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(dataclasses.asdict(fleet)))))
    settings.GITOPS_FLEET_FILE = str(path)
    settings.GITOPS_FLEET_NAME = fleet.name
    assert fleet.cluster_oidc is not None
    settings.OIDC_SERVER_URL = fleet.cluster_oidc.issuer_url
    settings.OIDC_PROVIDER_ID = PROVIDER_ID
    settings.OIDC_PROVIDER_NAME = "Keycloak"
    return fleet


def link(user: Any, sub: str, *, email: str = "", verified: bool = True) -> SocialAccount:
    """What allauth stores when ``user`` signs in through the provider."""
    claims: dict[str, Any] = {"sub": sub}
    if email:
        claims.update(email=email, email_verified=verified)
    return SocialAccount.objects.create(
        user=user, provider=PROVIDER_ID, uid=sub, extra_data={"id_token": claims}
    )
