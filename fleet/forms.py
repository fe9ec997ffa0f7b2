"""Forms of the fleet pages. Values are checked again where they are used (the renderer's
``validate_portal``); the form only turns text into the spec's types."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from fleet.models import BurnInExpectation, RemediationPolicy
from gitops.specs import PortalDeploySpec, PortalEgress

EGRESS = re.compile(
    r"((?P<cidr>[0-9A-Fa-f.:]+/[0-9]{1,3})|(?P<namespace>[a-z0-9-]+)):(?P<port>[0-9]{1,5})"
)


def parse_egress(value: str) -> PortalEgress:
    """``CIDR:PORT`` or ``NAMESPACE:PORT``; ``ValueError`` with a sentence otherwise."""
    match = EGRESS.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"{value.strip()!r}: give CIDR:PORT or NAMESPACE:PORT, such as 10.0.12.0/24:5432 "
            "or databases:5432."
        )
    return PortalEgress(match["cidr"] or "", int(match["port"]), match["namespace"] or "")


class PortalDeploymentForm(forms.Form):
    """The portal's own deployment, as a platform admin proposes it (``PortalDeploySpec``)."""

    image = forms.CharField(
        max_length=512, help_text="registry/repository:tag (or @sha256:digest) of the portal"
    )
    hostnames = forms.CharField(
        max_length=2000, help_text="where the portal is served, separated by spaces or commas"
    )
    web_replicas = forms.IntegerField(initial=2)
    worker_replicas = forms.IntegerField(initial=2)
    env_secret = forms.CharField(
        initial="portal-env", max_length=253, help_text="the Secret holding the portal's secrets"
    )
    state_claim = forms.CharField(
        required=False,
        max_length=253,
        help_text="a ReadWriteMany claim for var/ (empty: the Git repository lives on a remote)",
    )
    egress = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="one CIDR:PORT or NAMESPACE:PORT per line: database, Redis, API server, ...",
    )
    public_https = forms.BooleanField(
        required=False, label="HTTPS to public addresses (outbound webhooks)"
    )

    def clean_hostnames(self) -> tuple[str, ...]:
        return tuple(re.split(r"[\s,]+", self.cleaned_data["hostnames"].strip()))

    def clean_egress(self) -> tuple[PortalEgress, ...]:
        lines = [line for line in self.cleaned_data["egress"].splitlines() if line.strip()]
        try:
            return tuple(parse_egress(line) for line in lines)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def spec(self) -> PortalDeploySpec:
        data: dict[str, Any] = self.cleaned_data
        return PortalDeploySpec(
            image=data["image"].strip(),
            base_url=f"https://{data['hostnames'][0]}",
            hostnames=data["hostnames"],
            web_replicas=data["web_replicas"],
            worker_replicas=data["worker_replicas"],
            secret_name=data["env_secret"].strip(),
            state_claim=data["state_claim"].strip(),
            egress=data["egress"],
            public_https=data["public_https"],
        )


class RemediationPolicyForm(forms.ModelForm):
    """The remediation loop's policy; the model's constraints bound it (full_clean)."""

    class Meta:
        model = RemediationPolicy
        fields = [
            "guard_percent",
            "guard_min_nodes",
            "grace_seconds",
            "healthy_seconds",
            "auto_return",
        ]

    def clean_guard_percent(self) -> int:
        value = int(self.cleaned_data["guard_percent"])
        if not 1 <= value <= 100:
            raise forms.ValidationError("Give a share between 1 and 100 percent.")
        return value

    def clean_guard_min_nodes(self) -> int:
        value = int(self.cleaned_data["guard_min_nodes"])
        if value < 1:
            raise forms.ValidationError("At least 1 node: the loop must be able to act.")
        return value


class BurnInExpectationForm(forms.Form):
    """The expected NCCL bus bandwidth of a GPU product (``fleet.burnin.do_set_expectation``
    checks it again)."""

    product = forms.CharField(max_length=120, help_text="the nvidia.com/gpu.product label")
    scope = forms.ChoiceField(
        choices=BurnInExpectation.Scope.choices,
        initial=BurnInExpectation.Scope.NODE,
        required=False,
        help_text="all_reduce_perf on one node, or across the nodes of an NVLink domain",
    )
    busbw_gbps = forms.FloatField(label="Expected bus bandwidth (GB/s)")

    def clean_scope(self) -> str:
        return str(self.cleaned_data.get("scope") or BurnInExpectation.Scope.NODE)

    def clean_busbw_gbps(self) -> float:
        value = self.cleaned_data["busbw_gbps"]
        if value is None or not value > 0:
            raise forms.ValidationError("Give a positive number of GB/s.")
        return float(value)


class ReservationForm(forms.Form):
    """Whole nodes for a dedicated tenant (``fleet.reservations.do_reserve_nodes``, which
    checks them all again against main and the inventory)."""

    tenant = forms.SlugField(max_length=63, help_text="the slug of a dedicated tenant on main")
    nodes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text="whole-GPU nodes that no tenant holds; each must run no other tenant's work",
    )
    drain = forms.BooleanField(
        required=False,
        label="Drain first",
        help_text="cordon the nodes and evict other tenants' work (disruption budgets honoured); "
        "the change opens once they are empty",
    )

    def __init__(self, *args: Any, nodes: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        chosen = self.fields["nodes"]
        assert isinstance(chosen, forms.ChoiceField)
        chosen.choices = [(name, name) for name in nodes]
