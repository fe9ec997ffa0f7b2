"""What the renderers take: plain, immutable data with no Django in it.

Other apps build these specs from their models and hand them to ``gitops.services``; the
renderers in ``gitops/render/`` turn them into Kubernetes objects. ``validate_*`` functions
(in ``gitops/render/validate.py``) check a spec against the fleet before anything is rendered,
so a bad spec is a clear ``SpecError`` and nothing is written to Git.

The whole of a tenant's directory is a function of its ``TenantSpec``: every change request
re-renders the directory from the tenant's current resources plus the change, and the diff
between the two trees is exactly the change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

GpuMode = Literal["whole", "mig", "hami", "dra"]
ShareKind = Literal["whole", "mig", "hami", "dra"]
TrustLevel = Literal["shared", "dedicated"]
ScaleMetric = Literal["concurrency", "rps", "cpu", "memory"]
ClusterSize = Literal["small", "medium", "large"]
# The controller behind the fleet's Gateway: it decides where gateway traffic comes from (the
# NetworkPolicy that admits it) and how routes are authenticated.
GatewayImplementation = Literal["envoy-gateway", "cilium"]
# The ID token claim tenant clusters take a person's user name from (kube-apiserver
# --oidc-username-claim); the portal knows both of its members (see ClusterMember).
UsernameClaim = Literal["sub", "email"]
MemberRole = Literal["admin", "member", "viewer"]


class SpecError(ValueError):
    """A spec that cannot be rendered. ``errors`` maps a field path to a sentence."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())))


@dataclass(frozen=True)
class Flavor:
    """A pool of like GPUs: one Kueue ResourceFlavor.

    ``mode`` says how the pool's GPUs are handed out, and so which NVIDIA component serves
    its nodes: ``whole`` (device plugin, one ``nvidia.com/gpu`` per GPU), ``mig`` (device
    plugin, mixed strategy: ``nvidia.com/mig-<profile>`` resources, capacity per profile in
    ``mig_profiles``), ``hami`` (HAMi's device plugin: ``nvidia.com/vgpu`` slots plus
    ``nvidia.com/gpumem`` MiB and ``nvidia.com/gpucores`` percent) or ``dra`` (the NVIDIA DRA
    driver: ResourceClaims on DeviceClass ``gpu.nvidia.com``, or ``mig.nvidia.com`` when the
    pool lists ``mig_profiles``, the MIG devices the MIG manager made).

    One mode per pool because a device plugin and the DRA driver must not serve the same
    node: each would advertise every GPU on its own, so the scheduler could hand one GPU out
    twice. NVIDIA's GPU Operator refuses a ClusterPolicy that enables both ("the
    device-plugin and DRA driver for GPUs cannot both be enabled", NVIDIA/gpu-operator
    pull request 1541), and per node it keeps the device plugin off with the label
    ``nvidia.com/gpu.deploy.device-plugin=false`` (gpu-operator v26.7.0
    controllers/state_manager.go ``addGPUStateLabels`` leaves a value already set alone).
    A DRA pool therefore carries that label among its ``node_labels``.

    ``topology`` asks for Kueue topology-aware scheduling on the pool: left out (None), whole-GPU
    and MIG pools get it and HAMi and DRA pools do not; ``false`` turns it off for a whole-GPU
    or MIG pool, and ``true`` on a HAMi or DRA pool is refused by ``validate_fleet`` (HAMi's
    vGPU memory and cores are no node's allocatable resources, and TAS sizes pods from the pod
    spec and ignores ResourceClaims: see ``gitops.render.kueue.topology_enabled``).
    """

    name: str
    product: str  # GFD nvidia.com/gpu.product, e.g. NVIDIA-H200
    mode: GpuMode
    gpus: int  # physical GPUs in the pool
    gpu_memory_mib: int
    node_labels: tuple[tuple[str, str], ...] = ()
    mig_profiles: tuple[tuple[str, int], ...] = ()  # (profile, slices in the pool)
    hami_split: int = 10  # vGPU slots per physical GPU (HAMi deviceSplitCount)
    topology: bool | None = None  # Kueue topology-aware scheduling; None: by mode
    taint_key: str = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodsReady:
    """Kueue's ``waitForPodsReady`` (``gitops.render.kueue_config``), in seconds.

    ``timeout_seconds``: how long an admitted job may take until all its pods are ready;
    ``recovery_seconds``: how long a running job may stay short of ready pods (a node drained
    and its pod's replacement Pending) before Kueue evicts it, releases its quota and requeues
    it (0: never); each requeue waits ``backoff_base_seconds x 2^(n-1)``, at most
    ``backoff_max_seconds``; after ``requeue_limit`` requeues the job is deactivated (None:
    requeued without end).
    """

    timeout_seconds: int = 1800
    recovery_seconds: int = 600
    requeue_limit: int | None = 5
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600


@dataclass(frozen=True)
class GatewayRef:
    """The fleet's shared Gateway.

    ``hostname`` is the base domain: each tenant is served on ``<slug>.<hostname>`` (a wildcard
    listener and certificate ``*.<hostname>`` on the Gateway), so one tenant's routes can never
    match another tenant's requests. ``implementation`` is the controller behind the Gateway;
    ``proxy_namespace`` is where Envoy Gateway runs its proxies (its default,
    ``envoy-gateway-system``; unused with Cilium, whose proxy traffic has the ``ingress``
    identity instead of a namespace).

    ``tls_secret`` is the Secret (in ``namespace``) holding the wildcard certificate the HTTPS
    listener serves. With ``cluster_issuer`` set, cert-manager's Gateway support issues it into
    that Secret (a wildcard needs a DNS-01 solver); otherwise the operator provides it.
    """

    name: str = "ai-gateway"
    namespace: str = "gateway-system"
    hostname: str = "models.ai-factory.example.com"
    implementation: GatewayImplementation = "envoy-gateway"
    proxy_namespace: str = "envoy-gateway-system"
    tls_secret: str = "ai-gateway-tls"
    cluster_issuer: str = ""


@dataclass(frozen=True)
class ClusterOidc:
    """The identity provider tenant clusters' API servers trust, and the client people sign in
    to it with from kubectl (kubelogin).

    ``issuer_url`` must be the portal's own sign-in provider (``OIDC_SERVER_URL``): members are
    bound in their clusters by the subject the portal knows them under, and a subject means
    something only together with its issuer. ``client_id`` is a *public* client of that
    provider (kubelogin runs on people's machines and can keep no secret); the API servers
    accept only ID tokens issued to it (``aud``). ``username_claim`` is ``sub`` (stable, the
    default) or ``email`` (readable, but the provider must only release verified addresses).
    ``groups_claim``, when set, passes the provider's groups into the clusters, prefixed; the
    portal binds people, never groups, so membership stays the only key.
    """

    issuer_url: str
    client_id: str
    username_claim: UsernameClaim = "sub"
    groups_claim: str = ""


# The secondary network GPU traffic between a dedicated tenant's nodes runs on: an InfiniBand
# fabric (partitioned by partition keys) or RoCE on Ethernet (partitioned by VLANs).
FabricKind = Literal["infiniband", "roce"]


@dataclass(frozen=True)
class FabricPool:
    """One GPU pool's secondary network: the SR-IOV resource its nodes advertise for fabric
    virtual functions (the SR-IOV network device plugin's ``<prefix>/<resourceName>``, e.g.
    ``nvidia.com/rdma_ib0``), which a pod requests to get one."""

    flavor: str
    resource: str


@dataclass(frozen=True)
class FabricPartition:
    """A dedicated tenant's own partition of the fabric (``gitops.render.fabric``).

    On InfiniBand ``pkey`` is the partition key (15 bits, 0x0001-0x7ffe: 0x7fff is the default
    partition every port is in); on RoCE ``vlan`` is the VLAN (1-4094). ``subnet`` is the IP
    range the tenant's fabric interfaces take addresses from (whereabouts IPAM): required on
    RoCE, whose RDMA traffic is routed by IP, optional on InfiniBand.
    """

    tenant: str
    pkey: int = 0
    vlan: int = 0
    subnet: str = ""


@dataclass(frozen=True)
class Fabric:
    """The fleet's GPU fabric: which pools have one (``pools``) and which dedicated tenant owns
    which partition of it (``partitions``). Kept in the fleet file, one list for the whole
    fleet, so that a key can only be given once (docs/architecture.md, "Fabric partitions")."""

    kind: FabricKind
    pools: tuple[FabricPool, ...] = ()
    partitions: tuple[FabricPartition, ...] = ()

    def pool(self, flavor: str) -> FabricPool | None:
        return next((p for p in self.pools if p.flavor == flavor), None)

    def partition(self, tenant: str) -> FabricPartition | None:
        return next((p for p in self.partitions if p.tenant == tenant), None)


@dataclass(frozen=True)
class FleetSpec:
    """The platform: its flavors, topology, cohort and the shared services tenants reach."""

    name: str = "ai-factory"
    flavors: tuple[Flavor, ...] = ()
    cohort: str = "gpu-fleet"
    # The host cluster's Kubernetes minor version: built-in kinds are validated against its
    # upstream schemas (kubernetes-validate ships 1.25 to 1.37), so a field a newer release
    # added is caught before the API server prunes or refuses it.
    kubernetes_version: str = "1.34"
    topology_levels: tuple[str, ...] = (
        "network.topology.kubernetes.io/block",
        "network.topology.kubernetes.io/rack",
        "kubernetes.io/hostname",
    )
    allowed_registries: tuple[str, ...] = ("docker.io/vllm/", "kserve/", "ghcr.io/ai-factory/")
    gateway: GatewayRef = field(default_factory=GatewayRef)
    litellm_namespace: str = "litellm"
    # Where Prometheus runs: its pods scrape vLLM metrics from tenant namespaces, and KServe's
    # KEDA autoscaler queries it for concurrency/rps scaling.
    monitoring_namespace: str = "monitoring"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    # Where the GPU Operator runs dcgm-exporter and where HAMi is installed: the platform's
    # ServiceMonitors select their Services there.
    gpu_operator_namespace: str = "gpu-operator"
    hami_namespace: str = "kube-system"
    # The External Secrets ClusterSecretStore holding tenants' model-download credentials
    # (gitops/render/secrets.py); empty: no ExternalSecret is rendered.
    secret_store: str = ""
    # The one vCluster chart version the renderer writes values for (validate_fleet refuses
    # another): the values schema the checks use is that version's.
    vcluster_chart_version: str = "0.35.3"
    # The image of the init container vCluster adds to StatefulSet pods to rewrite /etc/hosts
    # (the chart's default, pinned). The tenant policy allows exactly this image for tenants
    # with clusters; point it at a mirror in an air-gapped fleet.
    vcluster_hosts_image: str = "mirror.gcr.io/library/alpine:3.20"
    # Tenant clusters' API servers are reachable from outside as <cluster>.<slug>.<this domain>
    # through a TLS-passthrough listener of the fleet gateway; "" keeps them in-cluster only
    # (the downloaded kubeconfig then works from inside the host cluster alone).
    vcluster_api_domain: str = ""
    # Per-person access to tenant clusters through the identity provider (None: tenant clusters
    # trust no identity provider and the portal hands out no kubeconfig).
    cluster_oidc: ClusterOidc | None = None
    git_url: str = "http://portal.portal-system.svc/git/fleet.git"
    # Each tenant's Flux source reads only its own projection repository,
    # ``<tenant_git_base_url>/<slug>.git`` (see gitops/sources.py).
    tenant_git_base_url: str = "http://portal.portal-system.svc/git/tenants"
    # The portal's own service account: it may read tenant clusters' kubeconfig Secrets.
    portal_namespace: str = "portal-system"
    portal_service_account: str = "portal"
    git_branch: str = "main"
    max_gpus_per_tenant: int = 64
    # Kueue's Configuration sets ``fairSharing`` (the ClusterQueues' fairSharing weights then
    # count, and borrowWithinCohort is ignored); false: classic preemption.
    fair_sharing: bool = True
    # The address NodeLocal DNSCache answers on, when the cluster runs it (pods then send DNS
    # to this link-local address, 169.254.20.10 by default, not to kube-dns pods); "" when not.
    node_local_dns: str = ""
    # Where the host cluster's API server answers (CIDRs of its endpoints): tenant clusters'
    # control planes may reach it and nothing else. Empty: ports 443 and 6443 anywhere but the
    # link-local range (gitops/render/network.py).
    api_server_cidrs: tuple[str, ...] = ()
    # The repository installs the platform's controllers too (Kueue, KServe, HAMi, the GPU
    # Operator, the DRA driver, Envoy Gateway, Kyverno, KEDA, cert-manager, LiteLLM:
    # gitops/render/stack.py); false: the operator installs them (docs/operator-guide.md).
    stack: bool = False
    # Kueue evicts and requeues a job whose pods are not (or no longer) all ready in time, so
    # a job stuck after a drain does not hold its quota (``PodsReady``).
    pods_ready: PodsReady = field(default_factory=PodsReady)
    # The GPU fabric's partitions for dedicated tenants (None: no secondary network rendered).
    fabric: Fabric | None = None

    def flavor(self, name: str) -> Flavor | None:
        return next((f for f in self.flavors if f.name == name), None)

    def tenant_git_url(self, slug: str) -> str:
        """The URL of the tenant's read-only projection repository."""
        return f"{self.tenant_git_base_url.rstrip('/')}/{slug}.git"


@dataclass(frozen=True)
class GpuShare:
    """Quota on one flavor for one tenant.

    ``kind`` ``whole``/``mig``/``hami`` go through the device plugin; ``dra`` adds a
    ResourceClaimTemplate to the tenant's workloads. ``count`` is GPUs (whole, dra), MIG
    slices of ``mig_profile`` (mig) or vGPU slots (hami, each with ``gpumem_mib`` and
    ``gpucores_percent``). ``until`` is an ISO date for a time-bound reservation.
    """

    name: str
    flavor: str
    kind: ShareKind
    count: int
    mig_profile: str = ""
    gpumem_mib: int = 0
    gpucores_percent: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    until: str = ""


@dataclass(frozen=True)
class TenantClusterSpec:
    """A vCluster for the tenant, platform-owned, scheduling onto the named flavors' nodes."""

    name: str
    kubernetes_version: str = "1.33"
    size: ClusterSize = "small"
    node_pools: tuple[str, ...] = ()
    gpu_quota: int = 0
    cpu_quota: int = 16
    memory_gib: int = 64
    max_pods: int = 100
    # Asleep: its control plane scaled to zero through the chart's values, so it runs no
    # pods and answers no API; woken by a change that sets it back (catalog.idle_actions).
    asleep: bool = False


@dataclass(frozen=True)
class EndpointSpec:
    """An OpenAI-compatible model endpoint: KServe + vLLM, an HTTPRoute, a LiteLLM route."""

    name: str
    model_uri: str  # hf://org/model, s3://bucket/path or pvc://claim/path
    share: str  # the GpuShare it runs on
    served_model_name: str = ""
    gpus_per_replica: int = 1
    args: tuple[str, ...] = ()
    min_replicas: int = 1
    max_replicas: int = 1
    scale_metric: ScaleMetric = "concurrency"
    scale_target: int = 8
    expose: bool = True
    cpu: int = 8
    memory_gib: int = 64
    # Asleep: scaled to zero (no predictor pods, no GPUs held) until a change wakes it
    # (catalog.idle_actions); ``min_replicas`` stays what it wakes to.
    asleep: bool = False


# Where a multi-pod job's pods must land together (Kueue topology-aware scheduling): one NVLink
# domain (the Topology's first level) or one rack (the level above the node); "" for anywhere.
JobTopology = Literal["", "nvlink-domain", "rack"]


@dataclass(frozen=True)
class BatchJobSpec:
    """Run-once work of a tenant (fine-tuning, evaluation, batch inference): one batch/v1 Job,
    or a JobSet of one pod per node when ``nodes`` > 1 (``gitops.render.jobs``).

    Not held in Git: the portal submits it to the Kubernetes API within the quota Git granted.
    ``gpus`` is per pod, in the unit of ``share`` (GPUs, MIG slices or vGPU slots; a DRA share's
    claim template size); ``cpu`` and ``memory_gib`` are per pod too. ``env`` holds plain
    values only, no secrets. ``deadline_seconds`` bounds the run (activeDeadlineSeconds),
    ``ttl_seconds`` how long the finished job is kept (ttlSecondsAfterFinished).
    """

    name: str
    image: str
    share: str
    gpus: int = 1
    nodes: int = 1
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    priority: str = "batch-low"
    topology: JobTopology = ""
    deadline_seconds: int = 3600
    ttl_seconds: int = 86400
    cpu: int = 4
    memory_gib: int = 32
    template: str = ""


@dataclass(frozen=True)
class ClusterMember:
    """One member of the tenant as its clusters know them: the portal role, and the identity
    the provider ``issuer`` vouches for (``subject``, the ``sub`` claim; ``email`` when the
    provider said it is verified). ``name`` is the portal user name, for people reading the
    bindings. A member the provider does not know yet (never signed in through it) has none.
    """

    name: str
    role: MemberRole
    issuer: str
    subject: str
    email: str = ""


@dataclass(frozen=True)
class NodeReservation:
    """A whole node of a GPU pool reserved for one dedicated tenant (``name`` is the node's).

    The node carries the label and ``NoSchedule`` taint ``ai-factory.io/reserved-for=<slug>``
    (``gitops.render.reservations``); the tenant's ClusterQueue gets its ``gpus`` on a
    ResourceFlavor of its own that selects and tolerates them, and no other tenant's pod may
    tolerate the taint (the tenant policy). ``flavor`` is the pool the node belongs to, a
    whole-GPU pool (``validate_tenant``).
    """

    name: str
    flavor: str
    gpus: int


@dataclass(frozen=True)
class TenantSpec:
    """Everything the platform runs for one tenant."""

    slug: str
    display_name: str = ""
    trust_level: TrustLevel = "shared"
    cost_centre: str = ""
    cpu_quota: int = 64
    memory_gib: int = 512
    max_pods: int = 200
    # Requested node-local disk (container layers, logs, emptyDir such as KServe's model
    # download) and PersistentVolumeClaim storage, in GiB.
    ephemeral_storage_gib: int = 500
    storage_gib: int = 1000
    fair_share_weight: int = 1
    shares: tuple[GpuShare, ...] = ()
    clusters: tuple[TenantClusterSpec, ...] = ()
    endpoints: tuple[EndpointSpec, ...] = ()
    # Who may use the tenant's clusters, and how (gitops/render/cluster_access.py).
    members: tuple[ClusterMember, ...] = ()
    # Whole nodes of its own (dedicated tenants only).
    reservations: tuple[NodeReservation, ...] = ()
    # A dedicated tenant gets MIG slices only once a platform admin enabled them for it (MIG
    # as a barrier between hostile tenants is still debated); in tenant.json only when set.
    mig_allowed: bool = False

    def share(self, name: str) -> GpuShare | None:
        return next((s for s in self.shares if s.name == name), None)


# --- the portal's own deployment (opt-in platform component) --------------------------------


@dataclass(frozen=True)
class PortalResources:
    """Requests of one portal container; the memory request is also its limit (a Python
    process that outgrows it is restarted rather than starving its node)."""

    cpu_millis: int
    memory_mib: int


@dataclass(frozen=True)
class PortalEgress:
    """One destination the portal's pods may open connections to (TCP): the database, Redis,
    the Kubernetes API server's endpoints, the Git remote, the identity provider, SMTP. Either
    a network (``cidr``) or every pod of a namespace of the cluster (``namespace``, for a
    Service there: a NetworkPolicy sees the pods behind a Service, not its address)."""

    cidr: str
    port: int
    namespace: str = ""


@dataclass(frozen=True)
class PortalDeploySpec:
    """The portal running on the fleet it manages (``gitops.render.portal``).

    It runs in the fleet's ``portal_namespace`` as its ``portal_service_account`` (the names
    tenant directories already grant Secrets to). Secret values never reach Git: the pods read
    them from the Secret ``secret_name`` (``SECRET_KEY``, ``PORTAL_ENCRYPTION_KEYS``,
    ``DATABASE_URL``, ``CELERY_BROKER_URL``, ``METRICS_TOKEN``, ...), which the operator
    creates, or which an ExternalSecret fills from the fleet's ``secret_store`` when
    ``external_secret_key`` names the remote secret.
    """

    image: str
    base_url: str  # PORTAL_BASE_URL, https://<first hostname>
    hostnames: tuple[str, ...]
    web_replicas: int = 2
    worker_replicas: int = 2
    gunicorn_workers: int = 4
    worker_concurrency: int = 4
    secret_name: str = "portal-env"
    metrics_token_key: str = "METRICS_TOKEN"
    external_secret_key: str = ""
    # A ReadWriteMany claim mounted as the portal's var/ (the bare repository) in every pod:
    # the shared-volume mode. Empty: each pod has its own emptyDir, which is only a source of
    # truth with a Git remote configured in the Secret.
    state_claim: str = ""
    # Where Ingress traffic comes from (the proxies in front of the portal); empty: the fleet
    # gateway's proxy namespace.
    ingress_namespace: str = ""
    egress: tuple[PortalEgress, ...] = ()
    # HTTPS to public addresses (not private ranges or the metadata address): outbound webhooks,
    # a forge or an identity provider on the internet.
    public_https: bool = False
    web: PortalResources = field(default_factory=lambda: PortalResources(500, 1024))
    worker: PortalResources = field(default_factory=lambda: PortalResources(500, 1024))
    beat: PortalResources = field(default_factory=lambda: PortalResources(50, 256))
    run_as_user: int = 10001
    app_dir: str = "/app"
    static_root: str = "/app/staticfiles"
