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
from itertools import combinations
from typing import Any, ClassVar

from django import forms
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from catalog.models import Kind, Resource, ResourceRequest
from catalog.services import Check, check_request, shares_of
from catalog.specs import desired_tenant, mig_opt_in, offered_flavors
from gitops.render.reservations import reserved_gpus
from gitops.render.resources import MIG_PROFILE, MIG_SLICES_PER_GPU
from gitops.render.vcluster import KUBERNETES_IMAGE_TAGS, node_selector
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


class TaggedSelect(forms.Select):
    """A select whose options carry data attributes (``tags``: value -> attributes), so that
    static/portal/portal.js can show the fields that go with the chosen option."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.tags: dict[str, dict[str, str]] = {}

    def create_option(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option: dict[str, Any] = super().create_option(*args, **kwargs)
        option["attrs"].update(self.tags.get(str(option["value"]), {}))
        return option


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


def share_kind(flavor: Flavor) -> str:
    """Which of the share form's fields go with ``flavor``: its mode, or ``dra-mig`` for MIG
    devices claimed through DRA (a DRA pool that lists MIG profiles needs a profile too)."""
    return "dra-mig" if flavor.mode == "dra" and flavor.mig_profiles else flavor.mode


def mig_profile_label(profile: str, slices: int) -> str:
    """``1g.18gb: 1/7 of the compute, 18 GB memory (32 in the pool)``.

    The fleet lists MIG profiles by name only, so their size is read from NVIDIA's naming
    (``<compute slices>g.<memory>gb``, out of the seven compute slices of a GPU), the rule the
    renderer and the quota count already use (``gitops.render.resources.mig_slices``).
    """
    match = MIG_PROFILE.fullmatch(profile)
    if match is None:
        return f"{profile} ({slices} in the pool)"
    compute, memory = match.groups()
    return (
        f"{profile}: {compute}/{MIG_SLICES_PER_GPU} of the compute, {memory} GB memory "
        f"({slices} in the pool)"
    )


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
    # Spec fields the checks name that the form asks through another field.
    error_fields: ClassVar[dict[str, str]] = {}
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
        for spec_field, message in self.check.errors.items():
            field = self.error_fields.get(spec_field, spec_field)
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
    """A share of one pool. The pool is the one Kind control: a pool hands out its GPUs one
    way (``Flavor.mode``), so choosing it chooses the kind, and the kind decides which of the
    fields below apply (``DISCLOSED``). The others are ignored whatever they hold, so a
    browser without JavaScript, which shows them all, cannot trip over them."""

    resource_kind = Kind.GPU_SHARE
    error_fields = {"kind": "flavor"}
    # The fields of some kinds only (``share_kind``); portal.js hides them for the others.
    DISCLOSED: ClassVar[dict[str, tuple[str, ...]]] = {
        "mig_profile": ("mig", "dra-mig"),
        "gpumem_mib": ("hami",),
        "gpucores_percent": ("hami",),
    }
    flavor = FleetChoiceField(
        label="Kind",
        widget=TaggedSelect(attrs={"data-disclose": ""}),
        help_text="How the GPUs are handed out, and the pool they come from.",
    )
    count = _number(1, low=1, help_text="GPUs, MIG slices or vGPU slots, by the kind of share.")
    mig_profile = FleetChoiceField(
        label="MIG profile",
        required=False,
        widget=TaggedSelect(),
        help_text="MIG slices only: the size of each slice.",
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
        # One option per pool, grouped by kind: "MIG slices" > "h200-mig: 16 x NVIDIA-H200".
        grouped = [
            (label, [(f.name, flavor_label(f)) for f in flavors if f.mode == kind])
            for kind, label in SHARE_KINDS.items()
        ]
        self._choices("flavor", [group for group in grouped if group[1]])
        self._tag("flavor", {f.name: {"data-kind": share_kind(f)} for f in flavors})
        if self.dedicated:
            self.fields["flavor"].help_text = (
                "A dedicated tenant gets whole GPUs and MIG slices only."
                if self.mig
                else "A dedicated tenant gets whole GPUs only (MIG is off until a platform "
                "admin enables it for the tenant)."
            )
        profiles = [
            (f.name, [(p, mig_profile_label(p, n)) for p, n in f.mig_profiles])
            for f in flavors
            if f.mig_profiles
        ]
        self._choices("mig_profile", [("", "choose a slice size"), *profiles])
        self._tag(
            "mig_profile",
            {p: {"data-pool": f.name} for f in flavors for p, _ in f.mig_profiles},
        )
        for name, kinds in self.DISCLOSED.items():
            self.fields[name].widget.attrs["data-show-for"] = " ".join(kinds)

    def _tag(self, field: str, tags: dict[str, dict[str, str]]) -> None:
        widget = self.fields[field].widget
        assert isinstance(widget, TaggedSelect)
        widget.tags = tags

    def clean(self) -> dict[str, Any]:
        flavor = self.fleet.flavor(self.cleaned_data.get("flavor") or "")
        kind = share_kind(flavor) if flavor else ""
        for name, kinds in self.DISCLOSED.items():
            if kind not in kinds:
                # Another kind's field: what it holds is not asked for, so not an error either.
                self.errors.pop(name, None)
                self.cleaned_data[name] = None
        return super().clean()

    def clean_until(self) -> date | None:
        until: date | None = self.cleaned_data["until"]
        if until is not None and until <= timezone.localdate():
            raise ValidationError("The end date must be in the future.")
        return until

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        flavor = self.fleet.flavor(data["flavor"])
        # An unknown pool has no kind: "whole" asks nothing more of the checks, which then
        # name the pools there are.
        kind = flavor.mode if flavor else "whole"
        on_mig = flavor is not None and share_kind(flavor) in ("mig", "dra-mig")
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

    # More pools than this and the form does not look for a set that may go together.
    MOST_POOLS_TRIED = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        flavors = offered_flavors(self.fleet, dedicated=self.dedicated, mig=self.mig)
        pools = [(f.name, flavor_label(f)) for f in flavors]
        if self._one_pool_only(flavors):
            self.fields["node_pools"] = FleetChoiceField(
                label="Node pool",
                required=False,
                choices=[("", "none (no GPUs)"), *pools],
                help_text="The GPU pool its workloads run on; the tenant needs a GPU share on "
                "it. One pool: the tenant's pools have no node labels in common that a "
                "cluster could select them by together.",
            )
        else:
            self._choices("node_pools", pools)

    def _one_pool_only(self, flavors: list[Flavor]) -> bool:
        """Whether a cluster of this tenant can run on one pool at most: a vCluster selects
        its nodes by one set of labels (``gitops.render.vcluster.node_selector``), and runs
        only on the pools the tenant has a share or reserved nodes on."""
        spec = desired_tenant(self.tenant)
        usable = {share.flavor for share in spec.shares} | set(reserved_gpus(spec))
        pools = [f for f in flavors if f.name in usable]
        if len(pools) > self.MOST_POOLS_TRIED:
            return False
        return not any(
            node_selector(together, self.fleet) is not None
            for size in range(2, len(pools) + 1)
            for together in combinations(pools, size)
        )

    def build_spec(self, data: dict[str, Any]) -> dict[str, Any]:
        pools = data["node_pools"]
        return {
            "name": data["name"],
            "kubernetes_version": data["kubernetes_version"],
            "size": data["size"],
            # A list from the multiple select; one name (or none) from the single one.
            "node_pools": [pools] if isinstance(pools, str) and pools else list(pools or []),
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
        if not shares:
            self.fields["share"].help_text = self.no_share_help()

    def no_share_help(self) -> SafeString:
        """Why the list of shares is empty, and where to ask for one."""
        shares = self.tenant.resources.filter(kind=Kind.GPU_SHARE)
        waiting = sorted(shares.filter(state=Resource.State.PENDING).values_list("name", flat=True))
        leaving = shares.filter(state=Resource.State.DECOMMISSIONING).exists()
        if waiting:
            why = (
                f"The tenant's GPU share {', '.join(waiting)} is requested but not merged yet; "
                "an endpoint can use it once it is."
            )
        elif leaving:
            why = "The tenant's GPU shares are being decommissioned: no endpoint starts there."
        else:
            why = "The tenant has no GPU share yet, and an endpoint's replicas run on one."
        url = reverse("catalog:new", args=[self.tenant.slug, Kind.GPU_SHARE])
        return format_html('{} <a href="{}">Ask for a GPU share</a>.', why, url)

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
