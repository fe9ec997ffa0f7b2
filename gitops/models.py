"""Change requests: pull requests against the fleet repository, with checks and reviews."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import models
from django.utils import timezone


class ChangeRequest(models.Model):
    """One reviewed change to the fleet repository: a branch with one commit, like a PR.

    The branch ``change/<id>`` holds a single commit on top of ``base_sha`` (main when the
    change was opened). Merging squashes it onto main as one commit whose message names the
    change, the requester and the approvers. Other apps read ``status`` and ``apply_state``
    to follow their requests; gitops knows nothing of those requests.
    """

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        MERGED = "merged", "Merged"
        CLOSED = "closed", "Closed"

    class Kind(models.TextChoices):
        ONBOARDING = "onboarding", "Tenant onboarding"
        TENANT = "tenant", "Tenant settings"
        CLUSTER = "cluster", "Tenant cluster"
        GPU_SHARE = "gpu-share", "GPU share"
        ENDPOINT = "endpoint", "Model endpoint"
        DECOMMISSION = "decommission", "Decommission"
        PLATFORM = "platform", "Platform"

    class Checks(models.TextChoices):
        PENDING = "pending", "Checks running"
        PASSED = "passed", "Checks passed"
        FAILED = "failed", "Checks failed"
        # None failed but one validated only part of what it read, or could not run: shown
        # apart from passed, never green; it merges only under GITOPS_ALLOW_PARTIAL_CHECKS.
        PARTIAL = "partial", "Checks partial"

    class Apply(models.TextChoices):
        # Filled in by the fleet status sync once the change is merged.
        NONE = "", "Not merged"
        PENDING = "pending", "Waiting for Flux"
        APPLIED = "applied", "Applied"
        FAILED = "failed", "Failed to apply"

    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PLATFORM)
    tenant_slug = models.CharField(max_length=63, blank=True, db_index=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    checks_state = models.CharField(max_length=8, choices=Checks.choices, default=Checks.PENDING)
    apply_state = models.CharField(max_length=8, choices=Apply.choices, blank=True, default="")
    apply_message = models.TextField(blank=True)
    branch = models.CharField(max_length=100, blank=True)
    base_sha = models.CharField(max_length=40, blank=True)
    head_sha = models.CharField(max_length=40, blank=True)
    merge_sha = models.CharField(max_length=40, blank=True)
    files_changed = models.JSONField(default=list, blank=True)
    # What the change was asked to touch of its tenant (gitops.checks.scope): items such as
    # "endpoints/chat", "settings", "members", or "*" for the whole directory. None: not said
    # (a change opened by hand, or before scopes): its tenant's whole directory.
    scope = models.JSONField(null=True, blank=True, default=None)
    # Who may not close it, besides the close rule (settings.GITOPS_CHANGE_POLICY): only those
    # who may take ``close_action`` (a tenants.access Action: what the change carries, such as
    # a trust level only platform admins set), and never the users in ``close_barred`` (those
    # it takes access from).
    close_action = models.CharField(max_length=32, blank=True)
    close_barred = models.JSONField(default=list, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    merged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # An admin's explicit mark that this change may push a flavor past the fleet's capacity.
    allow_overcommit = models.BooleanField(default=False)
    forge_number = models.PositiveIntegerField(null=True, blank=True)
    forge_url = models.URLField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    merged_at = models.DateTimeField(null=True, blank=True)
    # When the status sync first found it applied: merged_at to here is Flux's apply lag.
    applied_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["open", "merged", "closed"]),
                name="change_status_valid",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="merged") | ~models.Q(merge_sha=""),
                name="change_merged_has_sha",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    @classmethod
    def checks_state_of(cls, statuses: Iterable[str]) -> ChangeRequest.Checks:
        """The change's checks state from its check runs' statuses: any failed is failed, any
        partial or skipped (none failed) is partial, and only all passed is passed."""
        seen = set(statuses)
        if "failed" in seen:
            return cls.Checks.FAILED
        if seen & {"partial", "skipped"}:
            return cls.Checks.PARTIAL
        return cls.Checks.PASSED

    @property
    def checks_mergeable(self) -> bool:
        """Its checks let it merge: passed, or partial where partial checks may merge."""
        return checks_may_merge(self.checks_state)


def checks_may_merge(state: str) -> bool:
    """Whether a change in checks ``state`` may merge under ``GITOPS_ALLOW_PARTIAL_CHECKS``."""
    if state == ChangeRequest.Checks.PASSED:
        return True
    return state == ChangeRequest.Checks.PARTIAL and bool(settings.GITOPS_ALLOW_PARTIAL_CHECKS)


class CheckRun(models.Model):
    """The result of one check (schemas, kustomize, isolation, capacity) on one commit."""

    class Status(models.TextChoices):
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"
        # It validated only part of what it read (custom resources without a schema).
        PARTIAL = "partial", "Partial"
        SKIPPED = "skipped", "Skipped"

    change = models.ForeignKey(ChangeRequest, on_delete=models.CASCADE, related_name="checks")
    sha = models.CharField(max_length=40)
    name = models.CharField(max_length=32)
    status = models.CharField(max_length=8, choices=Status.choices)
    summary = models.CharField(max_length=300, blank=True)
    details = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["change", "sha", "name"], name="checkrun_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.status}"


class Review(models.Model):
    """A reviewer's verdict on the change as it stood at ``sha``."""

    class State(models.TextChoices):
        APPROVE = "approve", "Approved"
        REQUEST_CHANGES = "request_changes", "Changes requested"
        COMMENT = "comment", "Commented"

    change = models.ForeignKey(ChangeRequest, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    state = models.CharField(max_length=16, choices=State.choices)
    body = models.TextField(blank=True)
    sha = models.CharField(max_length=40)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.reviewer} {self.state} #{self.change_id}"


class FleetInventory(models.Model):
    """The fleet's flavors as the live inventory last counted them (one row).

    ``configured_fleet()`` takes its flavors from here when the row exists, so capacity checks
    count the GPUs that are really there; the fleet file (or the demo fleet) is the fallback
    and still supplies everything else (gateway, cohort, URLs).
    """

    flavors = models.JSONField(default=list)  # [Flavor fields as a mapping]
    topology_levels = models.JSONField(default=list)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fleet inventory ({len(self.flavors)} flavors)"


class SourceToken(models.Model):
    """The credential a tenant's Flux source uses to read the tenant's projection repository.

    Only a SHA-256 digest and a short visible prefix are kept: the token itself exists once,
    in the Kubernetes Secret the portal writes into the tenant's namespace. Tokens are 256
    random bits, so a plain digest is enough (no password stretching). One row per tenant:
    rotating replaces it, and the old token stops working at once.
    """

    tenant_slug = models.CharField(max_length=63, unique=True)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["tenant_slug"]

    def __str__(self) -> str:
        return f"source token {self.prefix}… of {self.tenant_slug}"


class ForgeDelivery(models.Model):
    """A forge webhook delivery the portal has acted on, by the forge's own delivery id.

    Forges deliver at least once and resend a delivery that got no 2xx answer; an attacker who
    captured one could resend it too. The unique id makes the second one a no-op ("duplicate")
    even when two arrive at once. Rows older than ``FORGE_DELIVERY_RETENTION`` are pruned by
    the hourly repository maintenance: by then the forge no longer resends (GitHub lets a
    delivery be redelivered for three days) and the change it was about has left "open".
    """

    forge = models.CharField(max_length=16)
    delivery = models.CharField(max_length=100)
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=8)
    received_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(fields=["forge", "delivery"], name="forgedelivery_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.forge} delivery {self.delivery} ({self.kind} #{self.number})"


class ServedCrd(models.Model):
    """A CustomResourceDefinition the cluster serves, as last read by the fleet sync: what the
    schema check validates custom resources against when schemas come from the cluster
    (``gitops.schemas``).

    In the database, not on a replica's disk, so every replica checks against the same
    schemas. ``spec`` is the CRD's spec as served (names, scope and every version with its
    ``openAPIV3Schema``, ``served`` and ``storage`` flags); the status is not kept.
    """

    name = models.CharField(max_length=253, unique=True)  # <plural>.<group>
    group = models.CharField(max_length=253)
    kind = models.CharField(max_length=63)
    # [{"name": "v1beta2", "served": true, "storage": true}, ...], for labels and the admin.
    versions = models.JSONField(default=list)
    spec = models.JSONField(default=dict)
    resource_version = models.CharField(max_length=64)
    fetched_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def served_versions(self) -> list[str]:
        return [v["name"] for v in self.versions if v.get("served")]


class MergeQueueBatch(models.Model):
    """One run of the merge queue over up to ``GITOPS_MERGE_QUEUE_BATCH`` queued changes.

    The changes are squashed onto main's tip one after another in memory (a chain), the checks
    run once over the combined tree, and main moves to the chain's tip in one compare-and-swap.
    ``check_runs`` counts how often the checks ran: once when the batch passes, a few more
    when a failing change had to be found by bisection, again after main moved under it.
    """

    class State(models.TextChoices):
        CHECKING = "checking", "Checking"
        MERGED = "merged", "Merged"
        FAILED = "failed", "Nothing merged"

    state = models.CharField(max_length=8, choices=State.choices, default=State.CHECKING)
    base_sha = models.CharField(max_length=40, blank=True)
    tip_sha = models.CharField(max_length=40, blank=True)
    size = models.PositiveIntegerField(default=0)
    merged = models.PositiveIntegerField(default=0)
    check_runs = models.PositiveIntegerField(default=0)
    rebuilds = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"merge queue batch {self.pk} ({self.state}, {self.merged} of {self.size})"


class MergeQueueEntry(models.Model):
    """A change waiting in (or gone through) the merge queue.

    ``queued`` until a batch takes it (``checking``), then ``merged`` or ``failed`` with the
    reason (a conflict, its checks' findings, a missing approval); ``removed`` when someone
    took it out first. At most one queued or checking entry per change.
    """

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        CHECKING = "checking", "Checking"
        MERGED = "merged", "Merged"
        FAILED = "failed", "Failed"
        REMOVED = "removed", "Removed"

    ACTIVE = (State.QUEUED, State.CHECKING)

    change = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="queue_entries"
    )
    enqueued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    enqueued_at = models.DateTimeField(default=timezone.now, db_index=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    batch = models.ForeignKey(
        MergeQueueBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="entries"
    )
    reason = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["enqueued_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["change"],
                condition=models.Q(state__in=["queued", "checking"]),
                name="mergequeue_one_active_entry",
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=["queued", "checking", "merged", "failed", "removed"]),
                name="mergequeue_state_valid",
            ),
        ]
        indexes = [models.Index(fields=["state", "enqueued_at"], name="mergequeue_state_idx")]

    def __str__(self) -> str:
        return f"#{self.change_id} in the merge queue ({self.state})"


class MergeQueueLease(models.Model):
    """Who runs the merge queue now (one row): only one batch runs at a time, across
    processes and replicas.

    A lease, not a held row lock: a batch runs checks for seconds, and a database transaction
    held open that long would also keep its row updates invisible (the queue page could not
    show "checking"). Taking the lease is one conditional UPDATE, atomic on every database;
    a worker killed mid-batch leaves a lease that expires (``GITOPS_MERGE_QUEUE_LEASE_SECONDS``),
    after which the next runner puts that batch's entries back in the queue.
    """

    holder = models.CharField(max_length=64, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"merge queue lease ({self.holder or 'free'})"
