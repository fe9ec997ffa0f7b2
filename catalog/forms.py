"""The catalog's request forms: one per kind of resource.

A form turns what was typed into the spec dict of its gitops dataclass (exactly the
dataclass's fields, never YAML text) and asks ``catalog.services.check_request`` about it, so
validation lives in one place (``gitops.render.validate``) and its sentences show on the
field they are about. The selects offer what the fleet has now (``configured_fleet()``); a
value that is no longer offered is still passed on, so the message that comes back names what
there is instead of "not one of the available choices".
"""

from __future__ import annotations

from datetime import date
from functools import cached_property
from typing import Any, ClassVar

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from catalog.models import Kind, Resource, ResourceRequest
from catalog.services import Check, check_request, shares_of
from catalog.specs import mig_opt_in, offered_flavors
from gitops.render.vcluster import KUBERNETES_IMAGE_TAGS
from gitops.specs import Flavor, FleetSpec, GpuShare
from tenants.models import Tenant
from tenants.names import validate_text

A = ResourceRequest.Action
# How a sentence names each kind ("a GPU share", never "a gpu share").
NOUNS = {
    Kind.CLUSTER: "tenant cluster",
    Kind.GPU_SHARE: "GPU share",
    Kind.ENDPOINT: "model endpoint",
}
MODES = {
    "whole": "whole GPUs",
    "mig": "MIG slices",
    "hami": "GPU fractions (HAMi)",
    "dra": "GPUs claimed through DRA",
}
SHARE_KINDS = {
    "whole": "Whole GPUs",
    "mig": "MIG slices",
    "hami": "Fraction of a GPU (HAMi)",
    "dra": "GPUs claimed through DRA",
}
SIZES = (("small", "Small"), ("medium", "Medium"), ("large", "Large"))
SCALE_METRICS = (
    ("concurrency", "Concurrent requests per replica"),
    ("rps", "Requests per second per replica"),
    ("cpu", "CPU utilisation (%)"),
    ("memory", "Memory utilisation (%)"),
)


class FleetChoiceField(forms.ChoiceField):
    """A select of what the fleet offers; ``validate_tenant`` judges the value."""

    def valid_value(self, value: Any) -> bool:
        return True


class FleetMultipleChoiceField(forms.MultipleChoiceField):
    """A multiple select of what the fleet offers; ``validate_tenant`` judges the values."""

    def valid_value(self, value: Any) -> bool:
        return True


def _number(
    initial: int | None = None,
    *,
    low: int = 0,
    required: bool = True,
    label: str | None = None,
    help_text: str = "",
) -> forms.IntegerField:
    # No min_value: the spec checks give the sentence (with the limit that applies here).
    return forms.IntegerField(
        initial=initial,
        required=required,
        label=label,
        help_text=help_text,
        widget=forms.NumberInput(attrs={"min": low}),
    )


def flavor_label(flavor: Flavor) -> str:
    mode = "MIG devices claimed through DRA" if flavor.mig_profiles and flavor.mode == "dra" else ""
    return f"{flavor.name}: {flavor.gpus} x {flavor.product}, {mode or MODES[flavor.mode]}"


def share_unit(share: GpuShare) -> str:
    if share.kind == "hami":
        return "vGPU slots"
    if share.mig_profile:
        return f"{share.mig_profile} slices"
    return "GPUs"


class SpecForm(forms.Form):
    """The fields of one kind's dataclass, plus why the tenant asks.

    ``fixed_name``: the resource exists (modify) or is already requested (edit), so its name
    is its identity and cannot change here. After ``is_valid()``, ``spec`` is the spec dict
    and ``check`` what ``check_request`` said (None when a field could not even be read).
    """

    resource_kind: ClassVar[str]
    name = forms.CharField(
        max_length=63,
        help_text="Lower-case letters, digits and '-', starting with a letter (a DNS label).",
    )

    def __init__(
        self,
        data: Any = None,
        *,
        tenant: Tenant,
        fleet: FleetSpec,
        action: str = A.CREATE,
        fixed_name: str = "",
        initial: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(data, initial=initial)
        self.tenant = tenant
        self.fleet = fleet
        self.action = action
        self.fixed_name = fixed_name
        self.spec: dict[str, Any] = {}
        self.check: Check | None = None
        if fixed_name:
            self.fields["name"].disabled = True
            self.initial["name"] = fixed_name
            self.fields["name"].help_text = "The name cannot change."
        # Why the tenant asks goes last, after the kind's own fields.
        self.fields["reason"] = forms.CharField(
            required=False,
            max_length=2000,
            validators=[validate_text],
            widget=forms.Textarea(attrs={"rows": 2}),
            help_text="Why you need it: the platform admin who decides reads this.",
        )

    @property
    def dedicated(self) -> bool:
        return self.tenant.trust_level == Tenant.TrustLevel.DEDICATED

    @cached_property
    def mig(self) -> bool:
        """Whether MIG pools are offered (a dedicated tenant's opt-in, ``mig_opt_in``)."""
        return mig_opt_in(self.tenant)

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def initial_from(cls, spec: dict[str, Any]) -> dict[str, Any]:
        """Form values that show ``spec`` (a stored spec dict)."""
        return dict(spec)

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if self.action == A.CREATE and not self.fixed_name:
            taken = self.tenant.resources.filter(kind=self.resource_kind, name=name).exclude(
                state__in=[Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN]
            )
            if taken.exists():
                noun = NOUNS[Kind(self.resource_kind)]
                raise ValidationError(f"The tenant already has a {noun} called {name!r}.")
        return name

    def _choices(self, field: str, choices: list[Any]) -> None:
        select = self.fields[field]
        assert isinstance(select, forms.ChoiceField)
        select.choices = choices

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        self.spec = self.build_spec(cleaned)
        self.check = check_request(
            self.tenant,
            self.resource_kind,
            self.spec["name"],
            self.spec,
            action=self.action,
            fleet=self.fleet,
        )
        for field, message in self.check.errors.items():
            self.add_error(field if field in self.fields else None, message)
        return cleaned

    def add_service_error(self, error: ValidationError) -> None:
        """A service's ValidationError onto the form; fields it names that the form lacks
        become errors of the whole form."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, errors in error.error_dict.items():
            self.add_error(field if field in self.fields else None, errors)


class GpuShareForm(SpecForm):
    resource_kind = Kind.GPU_SHARE
    flavor = FleetChoiceField(help_text="The pool of GPUs the share draws on.")
    kind = FleetChoiceField()
    count = _number(1, low=1, help_text="GPUs, MIG slices or vGPU slots, by the kind of share.")
    mig_profile = FleetChoiceField(
        label="MIG profile", required=False, help_text="For MIG slices (and DRA on a MIG pool)."
    )
    gpumem_mib = _number(
        required=False, label="GPU memory per slot (MiB)", help_text="Fractions (HAMi) only."
    )
    gpucores_percent = _number(
        required=False, label="GPU compute per slot (%)", help_text="Fractions (HAMi) only."
    )
    borrow = forms.BooleanField(
        required=False,
        initial=True,
        label="May borrow idle GPUs of other teams",
        help_text="Borrowed GPUs are given back when their owners need them.",
    )
    borrowing_limit = _number(
        required=False, help_text="When borrowing: at most this many (blank: no limit)."
    )
    lending_limit = _number(
        required=False,
        help_text="Lend at most this many of your idle units to others (blank: all of them).",
    )
    until = forms.DateField(
        label="End date",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="For a time-bound reservation: the share is removed after this day.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavors = offered_flavors(self.fleet, dedicated=self.dedicated, mig=self.mig)
        self._choices("flavor", [(f.name, flavor_label(f)) for f in flavors])
        kinds = [(k, label) for k, label in SHARE_KINDS.items() if self._offered(k, flavors)]
        self._choices("kind", kinds)
        if self.dedicated:
            kind = self.fields["kind"]
            kind.help_text = (
                "A dedicated tenant gets whole GPUs and MIG slices only."
                if self.mig
                else "A dedicated tenant gets whole GPUs only (MIG is off until a platform "
                "admin enables it for the tenant)."
            )
        profiles = [
            (f.name, [(p, f"{p} ({n} slices in the pool)") for p, n in f.mig_profiles])
            for f in flavors
            if f.mig_profiles
        ]
        self._choices("mig_profile", [("", "none (not MIG)"), *profiles])

    @staticmethod
    def _offered(kind: str, flavors: list[Flavor]) -> bool:
        return any(f.mode == kind for f in flavors)

    def clean_until(self) -> date | None:
        until: date | None = self.cleaned_data["until"]
        if until is not None and until <= timezone.localdate():
            raise ValidationError("The end date must be in the future.")
        return until

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        kind = data["kind"]
        flavor = self.fleet.flavor(data["flavor"])
        on_mig = kind == "mig" or (
            kind == "dra" and flavor is not None and bool(flavor.mig_profiles)
        )
        hami = kind == "hami"
        # Unticked: a borrowing limit of 0 (Kueue's None would mean borrowing without limit).
        borrowing = data["borrowing_limit"] if data["borrow"] else 0
        until = data["until"]
        return {
            "name": data["name"],
            "flavor": data["flavor"],
            "kind": kind,
            "count": data["count"],
            "mig_profile": data["mig_profile"] if on_mig else "",
            "gpumem_mib": (data["gpumem_mib"] or 0) if hami else 0,
            "gpucores_percent": (data["gpucores_percent"] or 0) if hami else 0,
            "borrowing_limit": borrowing,
            "lending_limit": data["lending_limit"],
            "until": until.isoformat() if until else "",
        }

    @classmethod
    def initial_from(cls, spec: dict[str, Any]) -> dict[str, Any]:
        limit = spec.get("borrowing_limit")
        return {
            **spec,
            "borrow": limit != 0,
            "borrowing_limit": limit or None,
            "until": spec.get("until") or None,
        }


class ClusterForm(SpecForm):
    resource_kind = Kind.CLUSTER
    kubernetes_version = FleetChoiceField(
        initial="1.33", choices=[(v, v) for v in sorted(KUBERNETES_IMAGE_TAGS)]
    )
    size = FleetChoiceField(
        initial="small", choices=SIZES, help_text="The size of the virtual control plane."
    )
    node_pools = FleetMultipleChoiceField(
        required=False,
        help_text="The GPU pools its workloads run on; the tenant needs a GPU share on each.",
    )
    gpu_quota = _number(
        0, label="GPUs", help_text="GPUs (or slots) of the node pools' shares it may use."
    )
    cpu_quota = _number(16, low=1, label="CPUs")
    memory_gib = _number(64, low=1, label="Memory (GiB)")
    max_pods = _number(100, low=1, label="Most pods")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavors = offered_flavors(self.fleet, dedicated=self.dedicated, mig=self.mig)
        self._choices("node_pools", [(f.name, flavor_label(f)) for f in flavors])

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": data["name"],
            "kubernetes_version": data["kubernetes_version"],
            "size": data["size"],
            "node_pools": list(data["node_pools"]),
            "gpu_quota": data["gpu_quota"],
            "cpu_quota": data["cpu_quota"],
            "memory_gib": data["memory_gib"],
            "max_pods": data["max_pods"],
            "asleep": False,  # as for an endpoint: a change through the form wakes it
        }


class EndpointForm(SpecForm):
    resource_kind = Kind.ENDPOINT
    model_uri = forms.CharField(
        label="Model",
        max_length=512,
        help_text="hf://org/model[:revision], s3://bucket/path or pvc://claim/path.",
    )
    served_model_name = forms.CharField(
        required=False, max_length=128, help_text="The model name clients ask for (optional)."
    )
    share = FleetChoiceField(help_text="The GPU share its replicas run on.")
    gpus_per_replica = _number(
        1, low=1, label="GPUs per replica", help_text="In the share's unit (GPUs, slices, slots)."
    )
    min_replicas = _number(
        1,
        low=0,
        help_text="0 scales to zero when idle: only with concurrency or requests-per-second "
        "scaling (KEDA); the share keeps room for one replica to wake.",
    )
    max_replicas = _number(1, low=1)
    scale_metric = FleetChoiceField(initial="concurrency", choices=SCALE_METRICS)
    scale_target = _number(8, low=1, help_text="Scale out above this much per replica.")
    expose = forms.BooleanField(
        required=False,
        initial=True,
        label="Expose through the gateway and LiteLLM",
        help_text="Unticked, it is reachable inside the tenant's namespace only.",
    )
    cpu = _number(8, low=1, label="CPUs per replica")
    memory_gib = _number(64, low=1, label="Memory per replica (GiB)")
    args = forms.CharField(
        required=False,
        label="Runtime arguments",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="vLLM arguments, one per line, for example --max-model-len=8192.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        shares = shares_of(self.tenant)
        self._choices(
            "share",
            [(s.name, f"{s.name}: {s.count} {share_unit(s)} of {s.flavor}") for s in shares],
        )

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        args = [line.strip() for line in data["args"].splitlines() if line.strip()]
        return {
            "name": data["name"],
            "model_uri": data["model_uri"],
            "share": data["share"],
            "served_model_name": data["served_model_name"],
            "gpus_per_replica": data["gpus_per_replica"],
            "args": args,
            "min_replicas": data["min_replicas"],
            "max_replicas": data["max_replicas"],
            "scale_metric": data["scale_metric"],
            "scale_target": data["scale_target"],
            "expose": data["expose"],
            "cpu": data["cpu"],
            "memory_gib": data["memory_gib"],
            # Changed by its tenant, an endpoint runs: a change through the form wakes it.
            "asleep": False,
        }

    @classmethod
    def initial_from(cls, spec: dict[str, Any]) -> dict[str, Any]:
        return {**spec, "args": "\n".join(spec.get("args") or [])}


FORMS: dict[str, type[SpecForm]] = {
    Kind.CLUSTER: ClusterForm,
    Kind.GPU_SHARE: GpuShareForm,
    Kind.ENDPOINT: EndpointForm,
}
