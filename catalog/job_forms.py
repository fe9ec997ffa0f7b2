"""The batch job form and the template form.

The job form turns what was typed into the same request data the REST API and the declarative
document send (``catalog.jobs.read_job``'s shape: lists of strings, env as a mapping) and asks
``catalog.jobs.check_job`` about it, so every door is judged by one place and its sentences
show on the field they are about. Command, arguments and environment are typed one entry per
line: a line is one list entry, so no entry can hold a line break.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from catalog import jobs
from catalog.models import JobTemplate
from gitops.render import jobs as render
from gitops.render import kueue, resources
from gitops.specs import FleetSpec, TenantSpec
from tenants.models import Tenant

UNITS = {"whole": "GPUs", "mig": "MIG slices", "hami": "vGPU slots", "dra": "GPUs (DRA)"}


class AnyChoiceField(forms.ChoiceField):
    """A select whose value ``check_job`` judges (and names what there is instead)."""

    def valid_value(self, value: Any) -> bool:
        return True


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def share_rows(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """What each of the tenant's shares allows a job: its unit and count, what may be
    admitted with borrowing, and whether its pods can be kept in one NVLink domain or rack."""
    admissible = kueue.admissible(tenant, fleet)
    rows = []
    for share in tenant.shares:
        flavor = fleet.flavor(share.flavor)
        # A share's first Kueue resource is its unit (HAMi's slots before their memory).
        resource = next(iter(resources.kueue_resources(share)))
        rows.append(
            {
                "name": share.name,
                "flavor": share.flavor,
                "unit": f"{share.mig_profile} MIG slices"
                if share.kind == "mig"
                else UNITS[share.kind],
                "count": share.count,
                "admissible": admissible.get(resource, share.count),
                "topology": flavor is not None and kueue.topology_enabled(flavor),
                "dra": share.kind == "dra",
            }
        )
    return rows


class JobForm(forms.Form):
    template = AnyChoiceField(required=False, label="Template")
    name = forms.CharField(
        max_length=render.NAME_MAX, help_text="A DNS label, unique in the tenant."
    )
    image = forms.CharField(max_length=render.IMAGE_MAX, required=False, label="Container image")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, help_text="One entry per line."
    )
    args = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        label="Arguments",
        help_text="One entry per line.",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        label="Environment",
        help_text="NAME=value, one per line. No secrets: values are shown to every member.",
    )
    share = AnyChoiceField(label="GPU share")
    gpus = forms.IntegerField(min_value=1, label="GPUs per pod", required=False)
    nodes = forms.IntegerField(min_value=1, initial=1, label="Nodes (pods)")
    priority = AnyChoiceField()
    topology = AnyChoiceField(required=False, label="Keep the pods in")
    deadline_seconds = forms.IntegerField(
        min_value=1, required=False, label="Deadline (seconds)", help_text="Stopped after this."
    )
    ttl_seconds = forms.IntegerField(
        min_value=0, initial=86400, label="Keep the finished job (seconds)"
    )
    cpu = forms.IntegerField(min_value=1, initial=4, label="CPUs per pod")
    memory_gib = forms.IntegerField(min_value=1, initial=32, label="Memory per pod (GiB)")

    def __init__(
        self, *args: Any, tenant: Tenant, tenant_spec: TenantSpec, fleet: FleetSpec, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.tenant, self.fleet = tenant, fleet
        self.checked: jobs.CheckedJob | None = None
        templates = JobTemplate.objects.filter(active=True)
        allowed = kueue.TRUST_PRIORITIES[tenant_spec.trust_level]
        choices = {
            "template": [("", "None")]
            + [(t.name, f"{t.name} ({t.get_purpose_display()})") for t in templates],
            "share": [(s.name, s.name) for s in tenant_spec.shares],
            "priority": [(p, p) for p in allowed],
            "topology": [("", "Anywhere"), *render.TOPOLOGIES.items()],
        }
        for name, options in choices.items():
            select = self.fields[name]
            assert isinstance(select, forms.ChoiceField)
            select.choices = options
        self.fields["priority"].initial = allowed[-1]

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for line in _lines(self.cleaned_data.get("env") or ""):
            name, sep, value = line.partition("=")
            if not sep:
                raise ValidationError(f"{line!r} is not NAME=value.")
            env[name.strip()] = value
        return env

    def request_data(self) -> dict[str, Any]:
        """The request as the API would send it: only what was given, so a template's
        defaults fill the rest."""
        data = self.cleaned_data
        out: dict[str, Any] = {"name": data["name"], "share": data["share"]}
        for key in ("template", "image", "priority", "topology"):
            if data.get(key):
                out[key] = data[key]
        for key in ("command", "args"):
            if data.get(key):
                out[key] = _lines(data[key])
        if data.get("env"):
            out["env"] = data["env"]
        for key in ("gpus", "nodes", "deadline_seconds", "ttl_seconds", "cpu", "memory_gib"):
            if data.get(key) is not None:
                out[key] = data[key]
        return out

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        try:
            self.checked = jobs.check_job(self.tenant, self.request_data(), fleet=self.fleet)
        except ValidationError as exc:
            self.add_service_error(exc)
        return cleaned

    def add_service_error(self, exc: ValidationError) -> None:
        """A service's errors on their fields (``command[2]`` on ``command``), the rest above."""
        if not hasattr(exc, "error_dict"):
            self.add_error(None, exc.messages)
            return
        for key, errors in exc.message_dict.items():
            field = key.split("[")[0]
            target = field if field in self.fields else None
            for message in errors:
                if target is None and field not in ("__all__", ""):
                    message = f"{key}: {message}"
                self.add_error(target, message)


class JobTemplateForm(forms.ModelForm):
    """A template as platform admins edit it; lists are typed one entry per line."""

    command_text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Command",
        help_text="One entry per line.",
    )
    args_text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        label="Arguments",
        help_text="One entry per line.",
    )

    class Meta:
        model = JobTemplate
        fields = [
            "name",
            "purpose",
            "description",
            "image",
            "gpus",
            "max_runtime_seconds",
            "active",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True
            self.fields["command_text"].initial = "\n".join(self.instance.command)
            self.fields["args_text"].initial = "\n".join(self.instance.args)

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            **{
                k: data[k]
                for k in (
                    "purpose",
                    "description",
                    "image",
                    "gpus",
                    "max_runtime_seconds",
                    "active",
                )
            },
            "command": _lines(data.get("command_text") or ""),
            "args": _lines(data.get("args_text") or ""),
        }
