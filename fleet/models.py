"""What the cluster says, as last read: nodes, GPU workloads, Flux and KServe objects, Kueue's
queues and workloads.

Rows are a cache of the Kubernetes API, kept current by the watcher (``fleet.watch``) and
refreshed by the sync (``fleet.services``). Nothing
here is the source of truth: Git is, for what should run, and the cluster, for what does. A
row the last sync did not see is removed, except when the sync failed; then the rows stay and
``SyncState`` says how old they are.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class Health(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"
    UNKNOWN = "unknown", "Unknown"


class Node(models.Model):
    """A node of the fleet with its GPU Feature Discovery facts, topology and health."""

    name = models.CharField(max_length=253, unique=True)
    pool = models.CharField(max_length=63, blank=True)
    flavor = models.CharField(max_length=63, blank=True)  # the portal flavor its GPUs belong to
    product = models.CharField(max_length=120, blank=True)  # GFD nvidia.com/gpu.product
    gpu_count = models.PositiveIntegerField(default=0)  # physical GPUs
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    gpu_family = models.CharField(max_length=40, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    sharing = models.CharField(max_length=16, blank=True)  # whole | mig | hami | dra | time-slicing
    mig_strategy = models.CharField(max_length=16, blank=True)
    mig_config = models.CharField(max_length=63, blank=True)
    mig_config_state = models.CharField(max_length=16, blank=True)
    mig_profiles = models.JSONField(default=dict, blank=True)  # {profile: instances on the node}
    clique = models.CharField(max_length=120, blank=True)  # NVLink/IMEX domain
    block = models.CharField(max_length=63, blank=True)
    rack = models.CharField(max_length=63, blank=True)
    hostname = models.CharField(max_length=253, blank=True)
    instance_type = models.CharField(max_length=63, blank=True)
    gpu_capacity = models.JSONField(default=dict, blank=True)  # {resource: int}
    gpu_allocatable = models.JSONField(default=dict, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    allocatable = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)  # [[key, value, effect]]
    conditions = models.JSONField(default=list, blank=True)  # [{type, status, reason, ...}]
    unschedulable = models.BooleanField(default=False)
    ready = models.BooleanField(null=True)
    health = models.CharField(max_length=9, choices=Health.choices, default=Health.UNKNOWN)
    health_reasons = models.JSONField(default=list, blank=True)
    problems = models.JSONField(default=list, blank=True)  # what the API object lacked
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def gpu_memory_gib(self) -> int:
        """Memory per GPU in whole GiB, as GPU memory is usually quoted (143771 MiB: 140)."""
        return self.gpu_memory_mib // 1024

    @property
    def domain(self) -> str:
        """The NVLink domain: the GFD clique, else the topology block."""
        return self.clique or self.block


class Workload(models.Model):
    """A pod that asks for GPUs (or runs in a tenant namespace), and where it runs."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    tenant_slug = models.CharField(max_length=63, blank=True, db_index=True)
    node = models.CharField(max_length=253, blank=True, db_index=True)
    phase = models.CharField(max_length=20, blank=True)
    owner_kind = models.CharField(max_length=63, blank=True)
    owner_name = models.CharField(max_length=253, blank=True)
    queue = models.CharField(max_length=63, blank=True)
    gpu_requests = models.JSONField(default=dict, blank=True)  # {resource: int}
    last_seen = models.DateTimeField(default=timezone.now)
    # The tenant cluster whose syncer made the pod: its vcluster.loft.sh/managed-by label, the
    # release (fleet.sleep). For display (a sleeping cluster's pods), never for attribution.
    vcluster = models.CharField(max_length=63, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="workload_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class FluxObject(models.Model):
    """A Flux Kustomization or HelmRelease, or a KServe InferenceService, and its state."""

    class Kind(models.TextChoices):
        KUSTOMIZATION = "Kustomization", "Kustomization"
        HELM_RELEASE = "HelmRelease", "HelmRelease"
        INFERENCE_SERVICE = "InferenceService", "InferenceService"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    tenant_slug = models.CharField(max_length=63, blank=True, db_index=True)
    ready = models.CharField(max_length=8, default="Unknown")  # True | False | Unknown
    reconciling = models.BooleanField(default=False)
    stalled = models.BooleanField(default=False)
    released = models.BooleanField(null=True)
    suspended = models.BooleanField(default=False)
    reason = models.CharField(max_length=120, blank=True)
    message = models.TextField(blank=True)
    last_applied_revision = models.CharField(max_length=200, blank=True)
    last_attempted_revision = models.CharField(max_length=200, blank=True)
    url = models.CharField(max_length=500, blank=True)
    # An InferenceService's address inside the cluster (status.address.url).
    address = models.CharField(max_length=500, blank=True)
    path = models.CharField(max_length=500, blank=True)
    chart = models.CharField(max_length=200, blank=True)
    problems = models.JSONField(default=list, blank=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "namespace", "name"], name="fluxobject_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def is_vcluster(self) -> bool:
        """A tenant cluster: the HelmRelease of the vCluster chart (see gitops.render.vcluster)."""
        chart = self.chart.split("@", 1)[0]
        return self.kind == self.Kind.HELM_RELEASE and chart.rsplit("/", 1)[-1] == "vcluster"

    @property
    def cluster_state(self) -> str:
        """A vCluster is ready once helm-controller reports it both Ready and Released."""
        state = self.state
        if state == "ready" and self.released is False:
            return "progressing"
        return state

    @property
    def state(self) -> str:
        """One word for a badge: ready, failed, progressing, suspended or unknown."""
        if self.suspended:
            return "suspended"
        if self.ready == "True":
            return "ready"
        if self.stalled or (self.ready == "False" and not self.reconciling):
            return "failed"
        if self.reconciling or self.ready == "Unknown":
            return "progressing"
        return "unknown"


class SyncState(models.Model):
    """When each part of the inventory was last read, and why the last read failed."""

    class Source(models.TextChoices):
        NODES = "nodes", "Nodes"
        PODS = "pods", "Workloads"
        FLUX = "flux", "Flux"
        KSERVE = "kserve", "InferenceServices"
        KUEUE = "kueue", "Kueue queues and workloads"
        POSITIONS = "pending", "Queue positions (Kueue's visibility API)"
        CRDS = "crds", "CRD schemas"

    source = models.CharField(max_length=8, choices=Source.choices, unique=True)
    last_attempt = models.DateTimeField(null=True, blank=True)
    last_success = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    items = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)  # objects too malformed to keep

    class Meta:
        ordering = ["source"]

    def __str__(self) -> str:
        return self.source

    @property
    def stale(self) -> bool:
        """The data may be out of date: the last read failed, or none succeeded recently."""
        if self.error or self.last_success is None:
            return True
        limit = timedelta(seconds=settings.FLEET_STALE_AFTER_SECONDS)
        return timezone.now() - self.last_success > limit


class WatchState(models.Model):
    """One Kubernetes watch of the fleet watcher (``fleet.watch``): where it resumes from, and
    when the cluster was last heard on it (an event or a bookmark)."""

    kind = models.CharField(max_length=40, unique=True)  # the resource's plural
    resource_version = models.CharField(max_length=64, blank=True)
    connected = models.BooleanField(default=False)
    last_heard = models.DateTimeField(null=True, blank=True)
    last_list = models.DateTimeField(null=True, blank=True)
    relists = models.PositiveIntegerField(default=0)  # lists after a 410 Gone
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["kind"]

    def __str__(self) -> str:
        return self.kind

    @property
    def stale(self) -> bool:
        """Not heard within the limit: the watch is down or the API stopped sending."""
        if not self.connected or self.last_heard is None:
            return True
        limit = timedelta(seconds=settings.FLEET_WATCH_STALE_SECONDS)
        return timezone.now() - self.last_heard > limit


class FluxEventReceipt(models.Model):
    """An accepted Flux notification (by the digest of its signed body), kept for the replay
    window so the same delivery sent again changes nothing."""

    digest = models.CharField(max_length=64, unique=True)
    received = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=20)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    reason = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ["-received"]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} {self.reason}"


# --- Kueue, read back (fleet.kueue parses, fleet.queues stores) ---------------------------------


class QueueWorkload(models.Model):
    """A Kueue Workload: one Job, JobSet or pod group as Kueue queues it, and where it stands.

    ``tenant`` comes from the namespace (``fleet.services.tenant_of``), never from a label: a
    tenant cluster's pods are synced into the tenant's namespace by vCluster under translated
    names, and their Workloads are the tenant's by that namespace. ``position_*`` come from the
    visibility API (``fleet.queues.read_positions``), 0-based as Kueue counts, null when the
    workload is not waiting or its queue was not read yet; ``positions_read`` says when."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        QUOTA_RESERVED = "quota-reserved", "Quota reserved"
        ADMITTED = "admitted", "Admitted"
        PREEMPTED = "preempted", "Preempted"
        EVICTED = "evicted", "Evicted"
        INACTIVE = "inactive", "Inactive"
        SUCCEEDED = "finished-succeeded", "Finished (succeeded)"
        FAILED = "finished-failed", "Finished (failed)"

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True, db_index=True)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    owner_kind = models.CharField(max_length=63, blank=True)  # Job | JobSet | Pod | ...
    owner_name = models.CharField(max_length=253, blank=True)
    owner_uid = models.CharField(max_length=64, blank=True)
    local_queue = models.CharField(max_length=253, blank=True)
    cluster_queue = models.CharField(max_length=253, blank=True, db_index=True)
    priority = models.IntegerField(null=True, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=120, blank=True)  # the explaining condition's
    message = models.TextField(blank=True)
    preemption_reason = models.CharField(max_length=64, blank=True)  # InClusterQueue, ...
    preemptor_uid = models.CharField(max_length=64, blank=True)
    preemptor_path = models.CharField(max_length=500, blank=True)  # /<cohort>/<cluster queue>
    eviction_reason = models.CharField(max_length=64, blank=True)
    # [{name, count, requests: {resource: "2"}, flavors: {resource: flavor}}]
    pod_sets = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    position_in_cluster_queue = models.PositiveIntegerField(null=True, blank=True)
    position_in_local_queue = models.PositiveIntegerField(null=True, blank=True)
    positions_read = models.DateTimeField(null=True, blank=True)
    problems = models.JSONField(default=list, blank=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="queueworkload_unique"),
        ]
        indexes = [
            # The job page reads a Job's or JobSet's workload by its owner.
            models.Index(
                fields=["namespace", "owner_kind", "owner_name"], name="queueworkload_owner"
            ),
            models.Index(fields=["tenant", "state"], name="queueworkload_tenant_state"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def waiting(self) -> bool:
        """Still in the queue: pending, or preempted or evicted and requeued."""
        return self.state in (self.State.PENDING, self.State.PREEMPTED, self.State.EVICTED)

    @property
    def finished(self) -> bool:
        return self.state in (self.State.SUCCEEDED, self.State.FAILED)


class ClusterQueueStatus(models.Model):
    """A Kueue ClusterQueue: quotas per flavor from its spec (``quotas``: {flavor: {resource:
    {nominal, borrowing_limit, lending_limit}}}), and from its status what it uses and has
    reserved ({flavor: {resource: {total, borrowed}}}), its workload counts and its fair
    share. ``tenant`` is the tenant the ClusterQueue is named after (the renderer names each
    tenant's queue by its slug: ``gitops.render.kueue.cluster_queue``); ClusterQueues are
    cluster-scoped and only the platform writes them."""

    name = models.CharField(max_length=253, unique=True)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cohort = models.CharField(max_length=253, blank=True)
    weight = models.CharField(max_length=40, blank=True)  # spec.fairSharing.weight, "" if unset
    weighted_share = models.BigIntegerField(null=True, blank=True)  # status.fairSharing
    quotas = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    reservation = models.JSONField(default=dict, blank=True)
    pending = models.PositiveIntegerField(default=0)
    reserving = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    active = models.BooleanField(null=True)
    reason = models.CharField(max_length=120, blank=True)
    message = models.TextField(blank=True)
    problems = models.JSONField(default=list, blank=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LocalQueueStatus(models.Model):
    """A Kueue LocalQueue: the ClusterQueue it feeds, and the namespace's usage, reservation
    and workload counts from its status."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cluster_queue = models.CharField(max_length=253, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    reservation = models.JSONField(default=dict, blank=True)
    pending = models.PositiveIntegerField(default=0)
    reserving = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    weighted_share = models.BigIntegerField(null=True, blank=True)
    problems = models.JSONField(default=list, blank=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="localqueuestatus_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class CohortStatus(models.Model):
    """A Kueue Cohort: its parent in the cohort tree, its own quotas, weight and fair share."""

    name = models.CharField(max_length=253, unique=True)
    parent = models.CharField(max_length=253, blank=True)
    weight = models.CharField(max_length=40, blank=True)
    weighted_share = models.BigIntegerField(null=True, blank=True)
    quotas = models.JSONField(default=dict, blank=True)
    problems = models.JSONField(default=list, blank=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NodeLifecycle(models.Model):
    """Where a node stands in its life in the fleet: discovered, in burn-in, ready, or failed
    its burn-in. Kept by node name, apart from ``Node`` (a cache row that goes when the node
    leaves the API), so a repaired node that comes back keeps its history.

    ``fleet.lifecycle`` owns the transitions; remediation (``fleet.remediation``) sends a node
    back to burn-in after a fatal fault, and the burn-in engine moves it on."""

    class State(models.TextChoices):
        DISCOVERED = "discovered", "Discovered"
        BURN_IN = "burn-in", "Burn-in"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed burn-in"

    node_name = models.CharField(max_length=253, unique=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.DISCOVERED)
    reason = models.TextField(blank=True)
    since = models.DateTimeField(default=timezone.now)  # when it entered ``state``
    updated_at = models.DateTimeField(auto_now=True)
    # The lifecycle cordoned the node itself (at discovery, or for an admin's re-run), so the
    # burn-in engine uncordons it on a pass; a cordon someone else set (remediation, an
    # admin) is theirs to lift.
    lifecycle_cordoned = models.BooleanField(default=False)

    class Meta:
        ordering = ["node_name"]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.state}"


# --- remediation (fleet.remediation) ---------------------------------------------------------


class RemediationPolicy(models.Model):
    """How the remediation loop acts: one row (``current()``), edited by platform admins.

    The guard caps how much of a pool remediation may hold cordoned at once: ``guard_percent``
    of its nodes, rounded down, but never fewer than ``guard_min_nodes``."""

    guard_percent = models.PositiveSmallIntegerField(default=10)
    guard_min_nodes = models.PositiveSmallIntegerField(default=1)
    grace_seconds = models.PositiveIntegerField(default=300)  # cordoned, before the drain
    healthy_seconds = models.PositiveIntegerField(default=600)  # healthy this long to return
    auto_return = models.BooleanField(default=False)  # else an admin clicks "return"
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(guard_percent__lte=100), name="remediation_guard_percent_le_100"
            ),
            models.CheckConstraint(
                condition=models.Q(guard_min_nodes__gte=1), name="remediation_guard_min_ge_1"
            ),
        ]

    def __str__(self) -> str:
        return f"guard {self.guard_percent}% (min {self.guard_min_nodes})"

    @classmethod
    def current(cls) -> RemediationPolicy:
        policy = cls.objects.order_by("pk").first()
        return policy if policy is not None else cls.objects.create()

    def allowed(self, pool_size: int) -> int:
        """How many of a pool of ``pool_size`` nodes remediation may hold cordoned at once."""
        return max(self.guard_min_nodes, pool_size * self.guard_percent // 100)


class RemediationPause(models.Model):
    """A pool whose remediation loop the guard stopped: no new cordon there until an admin
    resumes it. The row goes when the pool is resumed."""

    pool = models.CharField(max_length=63, unique=True)
    reason = models.TextField()
    since = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["pool"]

    def __str__(self) -> str:
        return f"{self.pool or '(no pool)'} paused"


class Remediation(models.Model):
    """One incident of one node: what the loop did about it and where it stands. The state
    lives here, so a restarted portal goes on from it (``fleet.remediation.step``)."""

    class State(models.TextChoices):
        CORDONED = "cordoned", "Cordoned"  # waiting out the grace before the drain
        DRAINING = "draining", "Draining"  # evicting; a disruption budget may hold it
        BURN_IN = "burn-in", "Waiting for burn-in"  # after a fatal XID
        RECHECK = "recheck", "Health re-check"  # healthy for the hysteresis window?
        WAITING_ADMIN = "waiting-admin", "Waiting for an admin"
        # A drain before a reservation or a release: drained, its change is open.
        WAITING_CHANGE = "waiting-change", "Waiting for its change"
        RETURNED = "returned", "Returned"

    node_name = models.CharField(max_length=253, db_index=True)
    pool = models.CharField(max_length=63, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.CORDONED)
    signal = models.CharField(max_length=32)  # fatal-xid | health-watch | node-condition
    reason = models.TextField()
    needs_burn_in = models.BooleanField(default=False)
    was_cordoned = models.BooleanField(default=False)  # by someone else: not ours to lift
    tenants = models.JSONField(default=list, blank=True)  # slugs whose pods ran there
    started_at = models.DateTimeField(default=timezone.now)
    state_since = models.DateTimeField(default=timezone.now)
    drain_after = models.DateTimeField()
    burn_in_asked_at = models.DateTimeField(null=True, blank=True)
    healthy_since = models.DateTimeField(null=True, blank=True)
    blocked = models.TextField(blank=True)  # what the eviction API refused last round
    closed_at = models.DateTimeField(null=True, blank=True)
    # A drain an admin confirmed before reserving the node for (or releasing it from) this
    # tenant (signal "reservation" / "release"); whose change opens once it is drained.
    reserve_tenant = models.CharField(max_length=63, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-started_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["node_name"],
                condition=models.Q(closed_at__isnull=True),
                name="one_open_remediation_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.state}"

    @property
    def open(self) -> bool:
        return self.closed_at is None


class RemediationEvent(models.Model):
    """What the loop (or an admin) did in an incident, and why; every one is audited too."""

    remediation = models.ForeignKey(Remediation, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=32)
    reason = models.TextField()

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.action}: {self.reason}"


class RemediationWarning(models.Model):
    """A non-fatal signal on a node (thermal, a correctable error): admins are told once, and
    the node is never cordoned for it. ``cleared_at`` is set when the signal goes away."""

    node_name = models.CharField(max_length=253)
    reason = models.TextField()
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen", "-pk"]

    def __str__(self) -> str:
        return f"{self.node_name}: {self.reason}"


class BurnInRun(models.Model):
    """One burn-in of a node: the DCGM diagnostic, then the NCCL all-reduce, each a Job on the
    node (``fleet.burnin``). ``step`` is where the run stands; the results stay after the
    Jobs are gone."""

    class Step(models.TextChoices):
        DIAG = "diag", "DCGM diagnostic"
        NCCL = "nccl", "NCCL all-reduce"
        DOMAIN = "domain", "NCCL across the NVLink domain"
        DONE = "done", "Done"

    class Outcome(models.TextChoices):
        RUNNING = "running", "Running"
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"

    node_name = models.CharField(max_length=253, db_index=True)
    step = models.CharField(max_length=8, choices=Step.choices, default=Step.DIAG)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.RUNNING)
    product = models.CharField(max_length=120, blank=True)  # the GPU product tested
    gpus = models.PositiveIntegerField(default=0)
    diag_job = models.CharField(max_length=63, blank=True)
    diag_passed = models.BooleanField(null=True)
    diag_failures = models.JSONField(default=list, blank=True)  # ["memory: GPU 0 ...", ...]
    nccl_job = models.CharField(max_length=63, blank=True)
    nccl_passed = models.BooleanField(null=True)
    busbw_gbps = models.FloatField(null=True, blank=True)  # measured average bus bandwidth
    expected_gbps = models.FloatField(null=True, blank=True)  # nominal for the product
    pass_share = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)  # why a step could not be judged
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The multi-node all-reduce across the node's NVLink domain that judged its last step.
    domain_run = models.ForeignKey(
        "BurnInDomainRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"burn-in #{self.pk} of {self.node_name}: {self.outcome}"


class BurnInDomainRun(models.Model):
    """NCCL's all-reduce across nodes of one NVLink domain (``nvidia.com/gpu.clique``), one
    indexed Job with a pod per node (``fleet.burnin``): the nodes in burn-in that passed
    their single-node tests, with a ready peer when only one is. ``nodes`` lists them all,
    ``peers`` those that were ready (a slow result does not fail a peer)."""

    class Outcome(models.TextChoices):
        RUNNING = "running", "Running"
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"

    clique = models.CharField(max_length=120, db_index=True)
    product = models.CharField(max_length=120, blank=True)
    gpus = models.PositiveIntegerField(default=0)  # per node
    nodes = models.JSONField(default=list)  # node names, pod index order
    peers = models.JSONField(default=list, blank=True)  # ready nodes among ``nodes``
    job = models.CharField(max_length=63, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.RUNNING)
    busbw_gbps = models.FloatField(null=True, blank=True)
    expected_gbps = models.FloatField(null=True, blank=True)
    pass_share = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"domain burn-in #{self.pk} of {self.clique}: {self.outcome}"


class BurnInExpectation(models.Model):
    """The NCCL bus bandwidth a healthy node of a GPU product reaches (scope ``node``), or a
    domain of such nodes across nodes (scope ``domain``), set by a platform admin in the
    portal; it overrides ``FLEET_BURN_IN_EXPECTED_BUSBW`` (``..._DOMAIN_BUSBW``) for that
    product."""

    class Scope(models.TextChoices):
        NODE = "node", "One node"
        DOMAIN = "domain", "Across an NVLink domain"

    product = models.CharField(max_length=120)  # nvidia.com/gpu.product
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.NODE)
    busbw_gbps = models.FloatField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["product", "scope"]
        constraints = [
            models.UniqueConstraint(fields=["product", "scope"], name="burn_in_expectation_unique"),
            models.CheckConstraint(
                condition=models.Q(busbw_gbps__gt=0), name="burn_in_expectation_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.product}: {self.busbw_gbps:.2f} GB/s"


class NetBoxDevice(models.Model):
    """What the NetBox sync (``fleet.netbox``) last found and wrote for a node: its NetBox
    device, the serial NetBox holds, the validation state written to the device's custom field,
    its GPU inventory items, and the error of the last attempt. Kept by node name, as
    ``NodeLifecycle`` is."""

    node_name = models.CharField(max_length=253, unique=True)
    device_id = models.PositiveIntegerField(null=True, blank=True)
    device_url = models.URLField(max_length=500, blank=True)  # NetBox's page of the device
    serial = models.CharField(max_length=50, blank=True)  # as NetBox holds it
    validation = models.CharField(max_length=200, blank=True)  # the custom field's value
    gpu_items = models.PositiveIntegerField(null=True, blank=True)  # GPU inventory items
    mismatch = models.TextField(blank=True)  # NetBox and the fleet disagree
    missing = models.BooleanField(default=False)  # no device of the node's name
    error = models.TextField(blank=True)  # the last attempt's failure, "" when it worked
    checked_at = models.DateTimeField(null=True, blank=True)
    written_at = models.DateTimeField(null=True, blank=True)  # the last write to NetBox

    class Meta:
        ordering = ["node_name"]

    def __str__(self) -> str:
        return f"{self.node_name} in NetBox"


class NodeReservation(models.Model):
    """A whole node reserved for a dedicated tenant (issue 29), as asked and as main came to
    hold it. Git is the truth of which nodes are reserved (the tenant's spec files, read by
    ``fleet.reservations``); this row keeps what Git does not: who asked, the change that
    reserved the node and the one that released it, and when each merged. Billing reads
    "reserved from ``accepted_at`` to ``released_at``, per node and GPU model" from it.

    A row whose reserving change closed unmerged is deleted; ``accepted_at`` and
    ``released_at`` are set by ``fleet.reservations.follow`` from the changes' merge times
    (or, for a reservation made or removed in Git by hand, when the portal first saw it)."""

    node_name = models.CharField(max_length=253)
    tenant_slug = models.CharField(max_length=63, db_index=True)
    flavor = models.CharField(max_length=63)
    gpu_product = models.CharField(max_length=120, blank=True)
    gpus = models.PositiveIntegerField()
    change = models.ForeignKey(
        "gitops.ChangeRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    release_change = models.ForeignKey(
        "gitops.ChangeRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    accepted_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_name", "-requested_at"]
        constraints = [
            # One reservation of a node not released yet, asked or accepted.
            models.UniqueConstraint(
                fields=["node_name"],
                condition=models.Q(released_at__isnull=True),
                name="node_reservation_open_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_name} for {self.tenant_slug}"
