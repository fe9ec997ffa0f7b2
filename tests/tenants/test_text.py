"""A tenant's text (display name, cost centre) refuses bidi overrides, line and paragraph
separators and other invisible characters at every door: the onboarding and settings forms,
the service, the model; the renderers apply the same rule (tests/gitops/test_render_validate.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from tenants import services
from tenants.models import Tenant
from tests.support.text import refusal, refused_params

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("char", refused_params())
def test_the_settings_form_refuses_it_and_changes_nothing(
    login: Callable[[str], Client], char: str
) -> None:
    response = login("alice").post("/t/alpha/settings/", {"display_name": f"Alpha{char}Team"})
    assert response.status_code == 200
    assert refusal(char) in response.content.decode()
    assert Tenant.objects.get(slug="alpha").display_name == "Alpha Team"


@pytest.mark.parametrize("char", refused_params())
def test_the_onboarding_form_refuses_it_and_makes_no_tenant(
    login: Callable[[str], Client], char: str
) -> None:
    for field in ("display_name", "cost_centre"):
        form = {"slug": "delta", "display_name": "Delta", "trust_level": "shared"}
        response = login("pam").post("/tenants/new/", {**form, field: f"De{char}lta"})
        assert response.status_code in (200, 422)
        assert refusal(char) in response.content.decode()
        assert not Tenant.objects.filter(slug="delta").exists()


@pytest.mark.parametrize("char", refused_params())
def test_the_service_and_the_model_refuse_it(world: dict[str, Any], char: str) -> None:
    for field in ("display_name", "cost_centre"):
        with pytest.raises(ValidationError) as caught:
            services.do_update_tenant(
                world["alpha"], acting_user=world["pam"], **{field: f"CC{char}1"}
            )
        assert refusal(char) in " ".join(caught.value.message_dict[field])
        with pytest.raises(ValidationError) as invalid:
            Tenant(**{"slug": "delta", "display_name": "Delta", field: f"CC{char}1"}).full_clean()
        assert list(invalid.value.message_dict) == [field]
    alpha = Tenant.objects.get(pk=world["alpha"].pk)
    assert (alpha.display_name, alpha.cost_centre) == ("Alpha Team", "CC-1")
