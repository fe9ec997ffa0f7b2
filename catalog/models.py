"""What tenants ask for (requests) and what they have (resources), and who hears about it.

A ``Resource`` is one tenant cluster, GPU share or model endpoint of a tenant, with the spec
that is on main (empty until its first change merges). A ``ResourceRequest`` asks to create,
modify or decommission a resource and moves through the states of ``catalog.states``; every
move is a ``RequestEvent`` and an audit row. ``Notification`` is the in-app inbox.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from gitops.render.jobs import owner_workloads


class Kind(models.TextChoices):
    CLUSTER = "cluster", "Tenant cluster"
    GPU_SHARE = "gpu-share", "GPU share"
    ENDPOINT = "endpoint", "Model endpoint"


class Resource(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Requested"  # no spec on main yet
        ACTIVE = "active", "Active"
        DECOMMISSIONING = "decommissioning", "Decommissioning"
        DECOMMISSIONED = "decommissioned", "Decommissioned"
        WITHDRAWN = "withdrawn", "Never created"  # its create request was rejected or cancelled

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="resources")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=63)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # The spec on main (catalog.specs turns it into a gitops dataclass); {} until merged.
    spec = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "kind", "name"],
                condition=~models.Q(state__in=["decommissioned", "withdrawn"]),
                name="resource_unique_live_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name}"

    @property
    def on_main(self) -> bool:
        return self.state in (self.State.ACTIVE, self.State.DECOMMISSIONING)


class ResourceRequest(models.Model):
    class Action(models.TextChoices):
        CREATE = "create", "Create"
        MODIFY = "modify", "Modify"
        DECOMMISSION = "decommission", "Decommission"

    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        SUBMITTED = "submitted", "Submitted"
        CHANGES_REQUESTED = "changes_requested", "Changes requested"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        PR_OPEN = "pr_open", "Pull request open"
        MERGED = "merged", "Merged"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        DECOMMISSIONING = "decommissioning", "Decommissioning"
        DECOMMISSIONED = "decommissioned", "Decommissioned"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="requests")
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="requests")
    action = models.CharField(max_length=16, choices=Action.choices, default=Action.CREATE)
    state = models.CharField(max_length=20, choices=State.choices, default=State.DRAFT)
    spec = models.JSONField(default=dict, blank=True)  # the wanted spec (create, modify)
    reason = models.TextField(blank=True)  # why the tenant asks
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Everyone who wrote its spec: who asked, and whoever edited it since (a platform admin who
    # sent it back and then edited it included). None of them may decide it (four eyes).
    authors = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    decision_note = models.TextField(blank=True)
    allow_overcommit = models.BooleanField(default=False)
    change = models.ForeignKey(
        "gitops.ChangeRequest",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="catalog_requests",
    )
    # The last thing that went wrong (a Git write, a check, Flux); shown with a retry.
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(
                    state__in=[
                        "draft",
                        "submitted",
                        "changes_requested",
                        "approved",
                        "rejected",
                        "pr_open",
                        "merged",
                        "ready",
                        "failed",
                        "cancelled",
                        "decommissioning",
                        "decommissioned",
                    ]
                ),
                name="request_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.get_action_display().lower()} {self.resource}"

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def title(self) -> str:
        action = {"create": "New", "modify": "Change", "decommission": "Decommission"}
        kind = self.resource.get_kind_display().lower().replace("gpu", "GPU")
        return f"{action[self.action]} {kind} {self.resource.name}"

    def shown_spec(self) -> dict[str, Any]:
        return self.spec or self.resource.spec


class RequestEvent(models.Model):
    """One state transition of a request (the audit log has it too, with the diff)."""

    request = models.ForeignKey(ResourceRequest, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=20)
    to_state = models.CharField(max_length=20)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.from_state} -> {self.to_state}"


class Notification(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    request = models.ForeignKey(
        ResourceRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tenant_slug = models.CharField(max_length=63, blank=True)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title


class ShareVersion(models.Model):
    """A token changed in the transaction of every change to a GPU share resource (the signal
    receivers below). A process that keeps every tenant's shares for the capacity what-if
    (``catalog.services._share_totals``) reads this one row to know whether what it keeps is
    current, instead of reading every share on every check.

    A random token, not a counter: a rolled-back transaction's number would be handed out
    again by the next change, and a process that read the shares inside the rolled-back
    transaction would take them for current. Writes that send no signals (``bulk_create``,
    ``QuerySet.update``) must call ``bump_share_version`` themselves."""

    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"GPU shares version {self.value}"


def bump_share_version() -> None:
    """Mark the GPU shares changed, in the caller's transaction (the row lock orders
    concurrent changes)."""
    token = secrets.randbits(63)
    if not ShareVersion.objects.filter(pk=1).update(value=token):
        ShareVersion.objects.get_or_create(pk=1)
        ShareVersion.objects.filter(pk=1).update(value=token)


def _share_changed(sender: Any, instance: Resource, **kwargs: Any) -> None:
    if instance.kind == Kind.GPU_SHARE:
        bump_share_version()


# A tenant deleted deletes its resources through the cascade, which sends these signals too
# (Django only skips them on fast deletes, when no receiver is connected).
models.signals.post_save.connect(_share_changed, sender=Resource, dispatch_uid="share_version")
models.signals.post_delete.connect(_share_changed, sender=Resource, dispatch_uid="share_version_d")


class OutgoingMail(models.Model):
    """A mail to send, written in the transaction that decided it and sent after it commits.

    A burst of a thousand approvals tells people about three thousand times: one job per
    mail made the workers spend more time on mail than on the merge queue. The rows are sent
    by one outbox job (``catalog.tasks.send_outbox``) over one connection, and a job is only
    queued when none is waiting."""

    tenant_slug = models.CharField(max_length=63, blank=True)
    to = models.JSONField(default=list)
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.subject


class GatewayKey(models.Model):
    """The key a tenant's clients send (``x-api-key``) to reach its model endpoints.

    Only a SHA-256 digest and a visible prefix are kept: the key is shown once, when it is
    made, and otherwise exists only in the Secret ``gateway-api-key`` the portal writes into the
    tenant's namespace, which the gateway checks (``gitops.render.gateway``). One per tenant:
    rotating replaces it, revoking removes it and the Secret, and the gateway then refuses
    every request.
    """

    tenant = models.OneToOneField(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="gateway_key"
    )
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"gateway key {self.prefix}… of {self.tenant.slug}"


class WebhookEndpoint(models.Model):
    """An HTTPS URL of a tenant's that the portal calls, signed, when one of the tenant's
    requests changes state (``catalog.outbound``, the Standard Webhooks scheme).

    The portal must sign with the secret (HMAC), so it keeps it, encrypted: ``secret`` and
    ``previous_secret`` hold Fernet tokens (``portal.encryption``, keys outside the database),
    decrypted only to sign a delivery (``catalog.outbound.signing_secrets``). The secret is
    shown to the tenant's admins when it is made or rotated (``shown_secret``) and never again.
    After a rotation the previous secret also signs until ``previous_secret_until``, so
    receivers can switch without losing a delivery. An endpoint whose deliveries keep failing
    is disabled (``disabled_reason``) and its admins are told.
    """

    # The plaintext secret, only on the object ``do_add_webhook`` returns (to show it once);
    # never stored.
    shown_secret: str = ""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.CharField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(max_length=500)
    previous_secret = models.CharField(max_length=500, blank=True)
    previous_secret_until = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    # Deliveries that used up every attempt in a row; a success resets it.
    consecutive_failures = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"webhook {self.url} of {self.tenant.slug}"


class WebhookDelivery(models.Model):
    """One event for one endpoint: the exact body sent, and how its attempts went.

    ``message_id`` is the ``webhook-id`` header: the same on every attempt and redelivery, so
    a receiver can drop duplicates. A worker claims an attempt by moving ``next_attempt_at``
    forward (``catalog.outbound.claim_due``), so two workers never send the same attempt.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    message_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=64)
    request = models.ForeignKey(
        ResourceRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # The attempt after which a failure is final (a redelivery by hand allows one more).
    max_attempts = models.PositiveIntegerField(default=1)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "message_id"], name="webhook_delivery_unique_message"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id} to {self.endpoint.url}"


class JobTemplate(models.Model):
    """A platform-defined starting point for tenants' batch jobs (``BatchJob``): what it is for,
    the image and command it runs by default, how many GPUs per pod, and the longest it may
    run (a job's deadline may not exceed it). Platform admins manage them; a tenant's job form
    starts from one."""

    class Purpose(models.TextChoices):
        FINE_TUNING = "fine-tuning", "Fine-tuning"
        EVALUATION = "evaluation", "Evaluation"
        BATCH_INFERENCE = "batch-inference", "Batch inference"

    name = models.CharField(max_length=63, unique=True)
    purpose = models.CharField(max_length=20, choices=Purpose.choices)
    description = models.CharField(max_length=300, blank=True)
    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    gpus = models.PositiveIntegerField(default=1)
    max_runtime_seconds = models.PositiveIntegerField(default=3600)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["purpose", "name"]

    def __str__(self) -> str:
        return f"job template {self.name}"


class BatchJob(models.Model):
    """A batch job the portal submitted for a tenant (not a pull request: run-once work within
    the quota Git granted), as it was submitted: the Kubernetes object's kind, namespace, name
    and uid, and the ``BatchJobSpec`` JSON it was rendered from. Its state is the cluster's
    (the Job, Kueue's Workload) and is read, never stored here; ``cancelled_at`` records who
    deleted it through the portal. A name may be used again once the object is gone, so rows
    are told apart by ``uid`` and the newest of a name is the one its page shows."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="batch_jobs"
    )
    name = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63)
    kind = models.CharField(max_length=16)  # Job or JobSet
    uid = models.CharField(max_length=64, unique=True)
    template = models.ForeignKey(
        JobTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    spec = models.JSONField(default=dict)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "name"], name="batch_job_tenant_name")]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def ledger_workloads(self) -> list[str]:
        """The usage ledger's workload names of the job's pods (``gitops.render.jobs``)."""
        nodes = self.spec.get("nodes") if isinstance(self.spec, dict) else None
        return owner_workloads(self.kind, self.name, nodes if isinstance(nodes, int) else 1)
