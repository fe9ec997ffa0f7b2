from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

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


def test_it_allows_63_characters_for_general_labels() -> None:
    validate_dns1123_label("a" * 63)
    with pytest.raises(ValidationError):
        validate_dns1123_label("a" * 64)
