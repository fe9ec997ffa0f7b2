"""JSON in and out. Input serializers refuse fields they do not know (``StrictSerializer``):
a misspelt ``allow_overcommit`` must be an error, not a silent default."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.models import ApiToken, Robot
from billing.request_costs import RequestCost
from catalog.jobs import STATES, state_from, workload_of
from catalog.models import BatchJob, RequestEvent, ResourceRequest
from catalog.services import APPROVE_MANY_MAX
from gitops.models import ChangeRequest, CheckRun, MergeQueueEntry, Review
from portal.models import Job
from tenants.models import Membership, Role, Tenant
from tenants.quota import QUOTA_MAX


class StrictSerializer(serializers.Serializer[Any]):
    """A serializer for input that answers 400 for any field it does not declare."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key: ["Unknown field; this call does not take it."] for key in unknown}
                )
        return super().to_internal_value(data)


# --- input ----------------------------------------------------------------------------------

NOTE_MAX = 2000


class EmptyInput(StrictSerializer):
    """No fields: an empty object (or no body at all)."""


class NoteInput(StrictSerializer):
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=NOTE_MAX)


class RequiredNoteInput(StrictSerializer):
    note = serializers.CharField(max_length=NOTE_MAX, help_text="Why, for the requester.")


SEEN_DIGEST_HELP = (
    "The digest of the diff you reviewed: seen_digest of GET /api/v1/requests/{id}/preview/. "
    "The approval is refused, with nothing done, when the manifests approving would write are "
    "no longer that diff (main moved on): preview again, look, and approve with the new one."
)


class ApproveInput(StrictSerializer):
    seen_digest = serializers.RegexField(
        r"^[0-9a-f]{16}$",
        help_text=SEEN_DIGEST_HELP,
        # DRF formats these messages: the braces of the path are doubled.
        error_messages={
            "required": "Required: the seen_digest of GET /api/v1/requests/{{id}}/preview/, "
            "the diff you reviewed.",
            "invalid": "Not a digest: take seen_digest from GET /api/v1/requests/{{id}}/preview/.",
        },
    )
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=NOTE_MAX)
    allow_overcommit = serializers.BooleanField(required=False, default=False)
    merge = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Approve and merge: the pull request goes into the merge queue.",
    )


class ApproveManyInput(StrictSerializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=APPROVE_MANY_MAX,
        help_text="The requests to approve, in the order to approve them (each waiting for a "
        "decision, none the caller's own).",
    )
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=NOTE_MAX)
    merge = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Approve and merge: each pull request goes into the merge queue.",
    )


class JobSerializer(serializers.ModelSerializer[Job]):
    """A background job: its progress and the lines it logged."""

    class Meta:
        model = Job
        fields = [
            "id",
            "task",
            "title",
            "status",
            "progress",
            "attempts",
            "created_at",
            "started_at",
            "finished_at",
            "log",
        ]
        read_only_fields = fields


class ReviewInput(StrictSerializer):
    state = serializers.ChoiceField(choices=Review.State.choices)
    body = serializers.CharField(required=False, allow_blank=True, default="", max_length=NOTE_MAX)


class GpuQuotaInput(StrictSerializer):
    gpu_quota = serializers.IntegerField(
        min_value=0,
        max_value=QUOTA_MAX,
        help_text="The most GPUs the tenant's shares may add up to (MIG slices and HAMi slots "
        "counted as fractions); never below what its approved shares already hold.",
    )


class MemberAddInput(StrictSerializer):
    user = serializers.CharField(max_length=254, help_text="A username or an e-mail address.")
    role = serializers.ChoiceField(choices=Role.choices)


class MemberRoleInput(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


# --- output ---------------------------------------------------------------------------------


class DetailSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()


def _name(user: Any) -> str | None:
    return user.username if user is not None else None


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    class Meta:
        model = Tenant
        fields = ["slug", "display_name", "trust_level", "cost_centre", "gpu_quota", "created_at"]


class MemberSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username")
    robot = serializers.SerializerMethodField()

    class Meta:
        model = Membership
        fields = ["username", "role", "source", "robot", "created_at"]

    def get_robot(self, membership: Membership) -> bool:
        known = getattr(membership, "is_robot", None)  # annotated by the members view
        if known is None:
            return Robot.objects.filter(user_id=membership.user_id).exists()
        return bool(known)


class ChangeSummarySerializer(serializers.ModelSerializer[ChangeRequest]):
    class Meta:
        model = ChangeRequest
        fields = ["id", "title", "status", "checks_state", "apply_state", "forge_url"]


class EventSerializer(serializers.ModelSerializer[RequestEvent]):
    actor = serializers.SerializerMethodField()

    class Meta:
        model = RequestEvent
        fields = ["from_state", "to_state", "actor", "note", "created_at"]

    def get_actor(self, event: RequestEvent) -> str | None:
        return _name(event.actor)


class RequestSerializer(serializers.ModelSerializer[ResourceRequest]):
    tenant = serializers.CharField(source="tenant.slug")
    kind = serializers.CharField(source="resource.kind")
    name = serializers.CharField(source="resource.name")
    requested_by = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    change = ChangeSummarySerializer(allow_null=True)

    class Meta:
        model = ResourceRequest
        fields = [
            "id",
            "tenant",
            "kind",
            "name",
            "action",
            "state",
            "spec",
            "reason",
            "requested_by",
            "decided_by",
            "decision_note",
            "error",
            "change",
            "created_at",
            "submitted_at",
            "decided_at",
            "finished_at",
        ]

    def get_requested_by(self, request: ResourceRequest) -> str | None:
        return _name(request.requested_by)

    def get_decided_by(self, request: ResourceRequest) -> str | None:
        return _name(request.decided_by)


class RequestDetailSerializer(RequestSerializer):
    events = EventSerializer(many=True)

    class Meta(RequestSerializer.Meta):
        fields = [*RequestSerializer.Meta.fields, "events"]


class FilePatchSerializer(serializers.Serializer[Any]):
    path = serializers.CharField()
    status = serializers.ChoiceField(choices=["added", "modified", "deleted"])
    patch = serializers.CharField(help_text="A unified diff against main.")


def _money(help_text: str, *, nullable: bool = False) -> serializers.DecimalField:
    """An amount of the billing currency as a decimal string, two decimals: ``"3650.00"``."""
    return serializers.DecimalField(
        max_digits=None, decimal_places=2, allow_null=nullable, help_text=help_text
    )


class EstimateLineSerializer(serializers.Serializer[Any]):
    what = serializers.CharField(help_text="What is held, as a person reads it.")
    gpu_model = serializers.CharField()
    mig_profile = serializers.CharField()
    quantity = serializers.DecimalField(
        max_digits=None, decimal_places=4, help_text="Units held at once, in `unit`s an hour."
    )
    unit = serializers.CharField(help_text="GPU-hour or instance-hour.")
    unit_price = serializers.DecimalField(
        max_digits=None,
        decimal_places=4,
        allow_null=True,
        help_text="The price of one unit in the currency; null: no price set (counts as zero).",
    )


class EstimateSerializer(serializers.Serializer[Any]):
    """A cost at current prices, as the request form and approval page show it."""

    per_month = _money("The most it costs a month: every unit held all month.")
    low_per_month = _money(
        "The least, when it runs on a range (an endpoint's replicas); else null.", nullable=True
    )
    hours_per_month = serializers.IntegerField()
    ends = serializers.DateField(allow_null=True, help_text="A time-bound share's end date.")
    hours_to_end = serializers.DecimalField(max_digits=None, decimal_places=2, allow_null=True)
    until_end = _money("What it costs from now to its end date.", nullable=True)
    basis = serializers.CharField(help_text="What the figure assumes.")
    lines = EstimateLineSerializer(many=True)
    unpriced = serializers.ListField(
        child=serializers.CharField(), help_text="A sentence per GPU model with no price set."
    )


class RequestCostSerializer(serializers.Serializer[Any]):
    """What approving the request changes in a month's cost, at the prices in effect now."""

    currency = serializers.CharField()
    after = EstimateSerializer(
        allow_null=True, help_text="Once applied; null for a decommission or when it holds no GPU."
    )
    before = EstimateSerializer(
        allow_null=True, help_text="Its resource as it runs; null for a create."
    )
    change_per_month = _money(
        "after less before (negative: it saves); null when neither is priced.", nullable=True
    )
    billed_directly = serializers.BooleanField(
        help_text="A GPU share is paid for itself; an endpoint's or a cluster's cost is use of "
        "the tenant's shares, part of theirs."
    )


def cost_data(cost: RequestCost) -> dict[str, Any]:
    """``cost`` as ``RequestCostSerializer`` reads it."""
    return {
        "currency": settings.BILLING_CURRENCY,
        "after": cost.after,
        "before": cost.before,
        "change_per_month": cost.change,
        "billed_directly": cost.billed_directly,
    }


class FreePoolSerializer(serializers.Serializer[Any]):
    """One pool the tenant may ask for: its capacity and what no tenant is promised yet."""

    flavor = serializers.CharField()
    unit = serializers.CharField(help_text="What the pool counts: GPUs, MIG slices, vGPU slots.")
    capacity = serializers.FloatField()
    free_now = serializers.FloatField()
    free_after = serializers.FloatField(help_text="Once the request is applied.")
    changed = serializers.BooleanField(help_text="The request changes this pool.")


class RequestPreviewSerializer(serializers.Serializer[Any]):
    """What approving a request would write, as the approval page shows it."""

    id = serializers.IntegerField()
    state = serializers.CharField()
    seen_digest = serializers.CharField(
        help_text="The digest of these files: send it as seen_digest to approve them."
    )
    files = FilePatchSerializer(
        many=True,
        help_text="The files the pull request would change; none when the request is not "
        "waiting or fails its check.",
    )
    errors = serializers.DictField(
        child=serializers.CharField(), help_text="Why the request cannot be approved, by field."
    )
    warnings = serializers.ListField(child=serializers.CharField())
    overcommit = serializers.BooleanField(
        help_text="Approving needs allow_overcommit: true (the request promises more than a "
        "flavor has)."
    )
    cost = RequestCostSerializer(help_text="What it would cost at current prices.")
    free_capacity = FreePoolSerializer(many=True, help_text="Free capacity per pool.")


class CheckSerializer(serializers.ModelSerializer[CheckRun]):
    class Meta:
        model = CheckRun
        fields = ["name", "status", "summary", "sha", "created_at"]


class ReviewSerializer(serializers.ModelSerializer[Review]):
    reviewer = serializers.CharField(source="reviewer.username")

    class Meta:
        model = Review
        fields = ["reviewer", "state", "body", "sha", "created_at"]


class ChangeSerializer(serializers.ModelSerializer[ChangeRequest]):
    tenant = serializers.CharField(source="tenant_slug")
    author = serializers.SerializerMethodField()
    requested_by = serializers.SerializerMethodField()
    merged_by = serializers.SerializerMethodField()

    class Meta:
        model = ChangeRequest
        fields = [
            "id",
            "title",
            "kind",
            "tenant",
            "status",
            "checks_state",
            "apply_state",
            "author",
            "requested_by",
            "merged_by",
            "forge_url",
            "created_at",
            "merged_at",
            "closed_at",
        ]

    def get_author(self, change: ChangeRequest) -> str | None:
        return _name(change.author)

    def get_requested_by(self, change: ChangeRequest) -> str | None:
        return _name(change.requested_by)

    def get_merged_by(self, change: ChangeRequest) -> str | None:
        return _name(change.merged_by)


class MergeQueueSerializer(serializers.ModelSerializer[MergeQueueEntry]):
    enqueued_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = MergeQueueEntry
        fields = ["state", "enqueued_at", "enqueued_by", "batch", "reason", "finished_at"]


class ChangeDetailSerializer(ChangeSerializer):
    checks = serializers.SerializerMethodField()
    reviews = ReviewSerializer(many=True)
    merge_blockers = serializers.ListField(child=serializers.CharField())
    merge_queue = serializers.SerializerMethodField()

    class Meta(ChangeSerializer.Meta):
        fields = [
            *ChangeSerializer.Meta.fields,
            "description",
            "apply_message",
            "branch",
            "base_sha",
            "head_sha",
            "merge_sha",
            "files_changed",
            "checks",
            "reviews",
            "merge_blockers",
            "merge_queue",
        ]

    def get_checks(self, change: ChangeRequest) -> list[dict[str, Any]]:
        """The latest run of each check at the change's head."""
        runs = change.checks.filter(sha=change.head_sha).order_by("name", "-created_at", "-id")
        latest: dict[str, CheckRun] = {}
        for run in runs:
            latest.setdefault(run.name, run)
        return [dict(CheckSerializer(run).data) for run in latest.values()]

    @extend_schema_field(MergeQueueSerializer(allow_null=True))
    def get_merge_queue(self, change: ChangeRequest) -> dict[str, Any] | None:
        """The change's latest time in the merge queue (queued, checking, or how it ended)."""
        entry = change.queue_entries.order_by("-enqueued_at", "-id").first()
        return dict(MergeQueueSerializer(entry).data) if entry is not None else None


ONLY_OPERATORS = "Only for those who operate the fleet (platform admins): the whole view."


class FleetCapacitySerializer(serializers.Serializer[Any]):
    """One flavor (one MIG profile of a MIG flavor): what a new pod could get now, and, for
    those who operate the fleet, what is in use and unavailable."""

    flavor = serializers.CharField()
    mode = serializers.CharField()
    resource = serializers.CharField()
    unit = serializers.CharField()
    free = serializers.IntegerField()
    in_use = serializers.IntegerField(required=False, help_text=ONLY_OPERATORS)
    unavailable = serializers.IntegerField(required=False, help_text=ONLY_OPERATORS)
    total = serializers.IntegerField(required=False, help_text=ONLY_OPERATORS)


class MoneySerializer(serializers.DecimalField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_digits=20, decimal_places=4, coerce_to_string=True, **kwargs)


class BucketSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField()
    gpu_hours = MoneySerializer()
    used_gpu_hours = MoneySerializer()
    energy_kwh = MoneySerializer()


class PriceLineSerializer(serializers.Serializer[Any]):
    gpu_model = serializers.CharField()
    mig_profile = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    unit = serializers.CharField()
    unit_price = MoneySerializer(allow_null=True)
    quantity = MoneySerializer()
    amount = MoneySerializer()


class TotalSerializer(serializers.Serializer[Any]):
    gpu_hours = MoneySerializer()
    used_gpu_hours = MoneySerializer()
    energy_kwh = MoneySerializer()
    amount = MoneySerializer()
    unpriced_gpu_hours = MoneySerializer()


class UsageSerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    bucket = serializers.CharField()
    currency = serializers.CharField()
    total = TotalSerializer()
    series = BucketSerializer(many=True)
    price_lines = PriceLineSerializer(many=True)


class InvoiceSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    number = serializers.CharField()
    tenant = serializers.CharField(source="tenant_slug")
    cost_centre = serializers.CharField()
    month = serializers.DateField()
    version = serializers.IntegerField()
    status = serializers.CharField()
    currency = serializers.CharField()
    gpu_total = MoneySerializer()
    other_total = MoneySerializer()
    total = MoneySerializer()
    gpu_hours = MoneySerializer()
    issued_at = serializers.DateTimeField(allow_null=True)


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["prefix", "name", "scope", "expires_at", "last_used_at", "revoked_at"]


# --- tenants' batch jobs --------------------------------------------------------------------


class BatchJobInput(serializers.Serializer[Any]):
    """A batch job to submit, for the schema: the body is read by ``catalog.jobs.read_job``
    (the form's and the declarative document's reader too), strictly."""

    name = serializers.CharField(help_text="A DNS label of at most 40 characters.")
    template = serializers.CharField(required=False, help_text="A job template's name.")
    image = serializers.CharField(
        required=False, help_text="From one of the fleet's allowed registries."
    )
    command = serializers.ListField(child=serializers.CharField(), required=False)
    args = serializers.ListField(child=serializers.CharField(), required=False)
    env = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="Plain values, no secrets."
    )
    share = serializers.CharField(help_text="The GPU share its GPUs come from.")
    gpus = serializers.IntegerField(required=False, help_text="Per pod, in the share's unit.")
    nodes = serializers.IntegerField(required=False, help_text="Pods; more than 1: a JobSet.")
    priority = serializers.ChoiceField(choices=["training", "batch-low"], required=False)
    topology = serializers.ChoiceField(choices=["", "nvlink-domain", "rack"], required=False)
    deadline_seconds = serializers.IntegerField(required=False)
    ttl_seconds = serializers.IntegerField(required=False)
    cpu = serializers.IntegerField(required=False)
    memory_gib = serializers.IntegerField(required=False)


class BatchJobStateSerializer(serializers.Serializer[Any]):
    state = serializers.ChoiceField(choices=list(STATES))
    detail = serializers.CharField()
    position = serializers.IntegerField(allow_null=True)


class BatchJobSerializer(serializers.ModelSerializer[BatchJob]):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    cancelled_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = BatchJob
        fields = [
            "tenant",
            "name",
            "namespace",
            "kind",
            "uid",
            "spec",
            "submitted_by",
            "created_at",
            "cancelled_at",
            "cancelled_by",
            "state",
        ]

    @extend_schema_field(BatchJobStateSerializer)
    def get_state(self, job: BatchJob) -> dict[str, Any]:
        states = self.context.get("states") or {}
        state = states.get(job.pk) or state_from(job, workload_of(job))
        return {"state": state.state, "detail": state.detail, "position": state.position}


class PodLogSerializer(serializers.Serializer[Any]):
    pod = serializers.CharField()
    phase = serializers.CharField()
    text = serializers.CharField()
    error = serializers.CharField()


class JobLogsSerializer(serializers.Serializer[Any]):
    pods = PodLogSerializer(many=True)
    error = serializers.CharField(help_text="Why the pods could not be read, or empty.")
