from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from gitops.render.validate import PLATFORM_NAMESPACES
from tenants.models import Tenant
from tenants.names import validate_dns1123_label, validate_tenant_slug


@pytest.mark.parametrize("name", ["a", "team-1", "x" * 40, "0abc", "gpu-h200"])
def test_it_accepts_dns1123_labels(name: str) -> None:
    validate_tenant_slug(name)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("", "required"),
        ("Team", "dns1123"),
        ("-team", "dns1123"),
        ("team-", "dns1123"),
        ("te_am", "dns1123"),
        ("te.am", "dns1123"),
        ("../etc", "dns1123"),
        ("a: b", "dns1123"),
        ("*anchor", "dns1123"),
        ("null\n", "dns1123"),
        ("x" * 41, "max_length"),
        ("kube-system", "reserved"),
        ("flux-system", "reserved"),
        ("kube-anything", "reserved"),
        ("default", "reserved"),
    ],
)
def test_it_rejects_bad_slugs_with_a_reason(name: str, code: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_tenant_slug(name)
    assert info.value.code == code
    assert info.value.messages[0]


# The platform's namespaces as the operator's guide installs them, and the fleet file's
# defaults (the portal's own, the gateway's and its proxies', LiteLLM, monitoring).
PLATFORM = [
    "default",
    "flux-system",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "kyverno",
    "kserve",
    "kueue-system",
    "gpu-operator",
    "nvidia-dra-driver-gpu",
    "cert-manager",
    "monitoring",
    "keda",
    "external-secrets",
    "jobset-system",
    "litellm",
    "portal-system",
    "gateway-system",
    "envoy-gateway-system",
    "cilium-secrets",
]


def test_the_list_is_the_platform_namespaces() -> None:
    assert set(PLATFORM) == PLATFORM_NAMESPACES


@pytest.mark.parametrize("name", [*PLATFORM, "kube-anything", "flux-anything"])
def test_it_reserves_every_platform_namespace(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_tenant_slug(name)
    assert info.value.code == "reserved"
    [message] = info.value.messages
    assert message.startswith(f"The name {name!r} is reserved: "), message


def test_it_reserves_what_the_fleet_file_configures(settings: Any, tmp_path: Path) -> None:
    configured = {
        "ai-portal": "portal_namespace: ai-portal",
        "edge": "gateway: {namespace: edge, proxy_namespace: edge-proxies}",
        "edge-proxies": "gateway: {namespace: edge, proxy_namespace: edge-proxies}",
        "router": "litellm_namespace: router",
        "observability": "monitoring_namespace: observability",
        "nvidia": "gpu_operator_namespace: nvidia",
        "hami": "hami_namespace: hami",
    }
    for name, line in configured.items():
        validate_tenant_slug(name)  # free on the default fleet
        fleet_file = tmp_path / f"{name}.yaml"
        fleet_file.write_text(line + "\n")
        settings.GITOPS_FLEET_FILE = str(fleet_file)
        with pytest.raises(ValidationError) as info:
            validate_tenant_slug(name)
        assert info.value.code == "reserved", name
        settings.GITOPS_FLEET_FILE = ""
    # The fixed list holds whatever the file says.
    settings.GITOPS_FLEET_FILE = str(tmp_path / "ai-portal.yaml")
    with pytest.raises(ValidationError):
        validate_tenant_slug("portal-system")


def test_the_portal_keeps_its_own_words() -> None:
    for word in ("admin", "new"):
        with pytest.raises(ValidationError) as info:
            validate_tenant_slug(word)
        assert info.value.messages == [
            f"The name {word!r} is reserved: the portal's own pages use it."
        ]


def test_the_model_refuses_a_reserved_slug(db: None) -> None:
    with pytest.raises(ValidationError) as info:
        Tenant(slug="kyverno", display_name="Kyverno fans").full_clean()
    assert "reserved" in info.value.message_dict["slug"][0]


def test_it_allows_63_characters_for_general_labels() -> None:
    validate_dns1123_label("a" * 63)
    with pytest.raises(ValidationError):
        validate_dns1123_label("a" * 64)
