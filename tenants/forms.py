"""Forms for tenants and members. Validation messages name what to fix."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from tenants.models import Role, Tenant
from tenants.names import validate_tenant_slug
from tenants.quota import QUOTA_MAX
from tenants.services import find_user


def _split(value: str) -> list[str]:
    return [item for item in re.split(r"[\s,;]+", value or "") if item]


class ContactsField(forms.CharField):
    """E-mail addresses, one per line or comma-separated."""

    widget = forms.Textarea(attrs={"rows": 2})

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        if isinstance(value, list):
            return value
        return _split(super().to_python(value) or "")

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise ValidationError(self.error_messages["required"], code="required")
        bad = []
        for address in value:
            try:
                validate_email(address)
            except ValidationError:
                bad.append(address)
        if bad:
            raise ValidationError(f"Not e-mail addresses: {', '.join(bad)}")

    def run_validators(self, value: Any) -> None:
        # The CharField length validators would count list items, not characters.
        return None


class TenantSettingsForm(forms.ModelForm):
    contacts = ContactsField(required=False, help_text="One e-mail address per line.")

    class Meta:
        model = Tenant
        fields = ["display_name", "trust_level", "cost_centre", "contacts"]

    def __init__(self, *args: Any, platform_admin: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not platform_admin:
            # Shown, not editable: a disabled field keeps the tenant's value whatever is posted.
            for name in ("trust_level", "cost_centre"):
                self.fields[name].disabled = True
                self.fields[name].help_text = "Only platform admins can change this."


class GpuQuotaForm(forms.Form):
    """A tenant's GPU quota (platform admins): ``tenants.quota.do_set_gpu_quota``."""

    gpu_quota = forms.IntegerField(
        label="GPU quota",
        min_value=0,
        max_value=QUOTA_MAX,
        help_text="The most GPUs the tenant's shares may add up to (MIG slices and HAMi slots "
        "counted as fractions); never below what its approved shares hold.",
    )


class TenantCreateForm(TenantSettingsForm):
    admins = forms.CharField(
        required=False,
        help_text="Usernames or e-mail addresses of the first tenant admins, comma-separated.",
    )

    class Meta(TenantSettingsForm.Meta):
        fields = ["slug", "display_name", "trust_level", "cost_centre", "contacts"]

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        validate_tenant_slug(slug)
        return slug

    def clean_admins(self) -> list[Any]:
        users, missing = [], []
        for ident in _split(self.cleaned_data["admins"]):
            try:
                users.append(find_user(ident))
            except ValidationError:
                missing.append(ident)
        if missing:
            raise ValidationError(f"No such users: {', '.join(missing)}.")
        return users


class AddMemberForm(forms.Form):
    # Not resolved to an account here: "no such user" would tell a tenant admin who has an
    # account (services.do_add_member_by_identifier).
    user = forms.CharField(label="Username or e-mail", max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
