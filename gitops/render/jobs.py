"""A tenant's batch job: a ``batch/v1`` Job, or a ``jobset.x-k8s.io/v1alpha2`` JobSet of one
pod per node when it asks for more than one node. Pure: ``validate_job`` judges a
``BatchJobSpec`` against the tenant as Git holds it and the fleet, ``job_object`` builds the
object as data (nothing a user types is pasted into YAML or any other text).

What the object carries, and why:

- Kueue: ``kueue.x-k8s.io/queue-name: gpu`` (the tenant's LocalQueue) and the
  ``kueue.x-k8s.io/priority-class`` label on the Job or JobSet, which Kueue's integrations read
  (kueue v0.19.2 pkg/controller/jobframework ``QueueName``, ``WorkloadPriorityClassName``);
  the queue label on the pod template too, because the tenant's Kyverno policy requires it on
  every GPU pod (``require-queue-name``, ``gitops.render.kyverno``), and the pod
  ``priorityClassName`` of the same name (``gitops.render.priority``). Kueue's pod webhook
  leaves pods whose owner it manages alone (pkg/controller/jobs/pod/pod_webhook.go: "Do not
  suspend a Pod whose owner is already managed by Kueue"). The object is created suspended, as
  Kueue's webhook would make it: Kueue unsuspends it on admission.
- Topology: a pod set that asks for GPUs the tenant has only on topology-aware flavors carries
  ``kueue.x-k8s.io/podset-unconstrained-topology`` (``gitops.render.kueue.tas_resources``);
  one that must stay in one NVLink domain or rack carries
  ``kueue.x-k8s.io/podset-required-topology`` with that level's node label instead (kueue
  v0.19.2 apis/kueue/v1beta2/topology_types.go ``PodSetRequiredTopologyAnnotation``).
- GPUs as the endpoints ask for them (``gitops.render.resources.container_resources``), with
  requests equal to limits; a DRA share's GPUs through the share's own claim template, which
  holds the share's whole count (``gitops.render.dra.share_template``), so a pod on a DRA share
  asks for exactly that many.
- cpu, memory and ephemeral storage stated, requests equal to limits, so the namespace's
  ResourceQuota counts the pod as asked and the LimitRange adds nothing
  (``gitops.render.quota``); Pod Security "restricted" on the pod and every container, the
  tenant namespace's level (``gitops.render.namespace``).
- The fabric: a dedicated tenant's job on a pool with a fabric partition asks for one of the
  pool's SR-IOV VFs per pod and names the tenant's attachment in
  ``k8s.v1.cni.cncf.io/networks`` (``gitops.render.fabric``), so its pods talk over the
  tenant's own partition.
- No retries (``backoffLimit: 0``; a JobSet ``maxRestarts: 0``): a failed fine-tuning run
  started again from scratch would spend the tenant's GPU hours unasked.
"""

from __future__ import annotations

import re
from typing import Any

from gitops.render import fabric, kueue, kyverno, resources
from gitops.render.kserve import RESTRICTED_CONTAINER_SECURITY
from gitops.render.meta import LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, metadata
from gitops.render.validate import DNS1123_LABEL, HOSTNAME_LABEL, LABEL_VALUE, text_problem
from gitops.specs import BatchJobSpec, FleetSpec, GpuShare, SpecError, TenantSpec

JOB_API = "batch/v1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
# The one replicated job of a multi-node JobSet; its Jobs are <name>-workers-<index>.
WORKERS = "workers"
CONTAINER = "main"
CLAIM = "gpus"
TEMPLATE_LABEL = "ai-factory.io/job-template"
REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
# JobSet names its Jobs <jobset>-<replicated job>-<index> and their pods after them, and a Job's
# name is a label value on its pods (63 characters at most): the job name leaves room for both.
NAME_MAX = 40
MAX_NODES = 64
MAX_ITEMS = 64  # command, args and env entries each
MAX_ITEM_LENGTH = 4096
MAX_TOTAL_LENGTH = 32 * 1024  # command, args and env values together
IMAGE_MAX = 512
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Values are stored with the job and shown to every member: names that say they hold a
# credential are refused, so nobody pastes one thinking it is kept secret.
SECRET_NAME = re.compile(r"(?i)(secret|passw|token|api_?key|private_?key|credential)")
MIN_DEADLINE = 60
MAX_DEADLINE = 7 * 24 * 3600
MAX_TTL = 7 * 24 * 3600
# Every container's node-local disk (image layers, logs, emptyDir), request and limit.
EPHEMERAL_GIB = 20
TOPOLOGIES = {"nvlink-domain": "one NVLink domain", "rack": "one rack"}


# --- identity -------------------------------------------------------------------------------


def topology_level(topology: str, fleet: FleetSpec) -> str:
    """The node label of the Topology level ``topology`` names, or "" when the fleet has none:
    an NVLink domain is the first level (the demo's topology block), a rack the level above
    the node, when the Topology has those."""
    levels = [level for level in fleet.topology_levels if level != HOSTNAME_LABEL]
    if topology == "nvlink-domain" and len(levels) >= 2:
        return levels[0]
    if topology == "rack" and levels:
        return levels[-1]
    return ""


def kind_of(job: BatchJobSpec) -> str:
    """``Job`` or ``JobSet``: what ``job_object`` renders for ``job``."""
    return "JobSet" if job.nodes > 1 else "Job"


def api_version_of(kind: str) -> str:
    return JOBSET_API if kind == "JobSet" else JOB_API


# --- validation -----------------------------------------------------------------------------


def validate_job(
    job: BatchJobSpec,
    tenant: TenantSpec,
    fleet: FleetSpec,
    *,
    max_deadline_seconds: int = MAX_DEADLINE,
) -> None:
    """Raise ``SpecError`` ({field: sentence}) unless ``job`` may run for ``tenant``: every
    field, its GPUs against the tenant's shares, its priority against its trust level."""
    errors: dict[str, str] = {}

    def add(path: str, message: str) -> None:
        errors.setdefault(path, message)

    if not isinstance(job.name, str) or not job.name:
        add("name", "Give the job a name.")
    elif len(job.name) > NAME_MAX or not DNS1123_LABEL.fullmatch(job.name):
        add(
            "name",
            f"The name may use lower-case letters, digits and '-', start and end with a letter "
            f"or digit, and be at most {NAME_MAX} characters (a Kubernetes DNS label).",
        )
    _validate_image(add, job.image, fleet)
    _validate_words(add, "command", job.command, "The command")
    _validate_words(add, "args", job.args, "The arguments")
    _validate_env(add, job.env)
    total = sum(len(word) for word in (*job.command, *job.args) if isinstance(word, str))
    total += sum(len(v) for pair in job.env for v in pair if isinstance(v, str))
    if total > MAX_TOTAL_LENGTH:
        add(
            "args",
            f"The command, arguments and environment may hold {MAX_TOTAL_LENGTH} "
            "characters together.",
        )
    _validate_count(add, "nodes", job.nodes, 1, MAX_NODES, "The number of nodes")
    share = tenant.share(job.share) if isinstance(job.share, str) else None
    if share is None:
        names = ", ".join(sorted(s.name for s in tenant.shares)) or "none yet"
        add("share", f"Choose one of the tenant's GPU shares ({names}).")
    elif _validate_count(add, "gpus", job.gpus, 1, 10_000, "The GPUs per pod") and _is_int(
        job.nodes
    ):
        _validate_gpus(add, job, share, tenant, fleet)
        _validate_topology(add, job, share, fleet)
    allowed = kueue.TRUST_PRIORITIES[tenant.trust_level]
    if job.priority not in allowed:
        add(
            "priority",
            f"A {tenant.trust_level} tenant's jobs may use the priorities {', '.join(allowed)}.",
        )
    limit = min(max_deadline_seconds, MAX_DEADLINE)
    _validate_count(
        add, "deadline_seconds", job.deadline_seconds, MIN_DEADLINE, limit, "The deadline (seconds)"
    )
    _validate_count(
        add,
        "ttl_seconds",
        job.ttl_seconds,
        0,
        MAX_TTL,
        "How long the finished job is kept (seconds)",
    )
    nodes = job.nodes if _is_int(job.nodes) and job.nodes >= 1 else 1
    if (
        _validate_count(add, "cpu", job.cpu, 1, tenant.cpu_quota, "The CPUs per pod")
        and job.cpu * nodes > tenant.cpu_quota
    ):
        add("cpu", f"{nodes} pods of {job.cpu} CPUs exceed the tenant's {tenant.cpu_quota}.")
    if (
        _validate_count(
            add, "memory_gib", job.memory_gib, 1, tenant.memory_gib, "The memory per pod (GiB)"
        )
        and job.memory_gib * nodes > tenant.memory_gib
    ):
        add(
            "memory_gib",
            f"{nodes} pods of {job.memory_gib} GiB exceed the tenant's {tenant.memory_gib} GiB.",
        )
    if EPHEMERAL_GIB * nodes > tenant.ephemeral_storage_gib:
        add(
            "nodes",
            f"Each pod has {EPHEMERAL_GIB} GiB of node disk; {nodes} pods exceed the "
            f"tenant's {tenant.ephemeral_storage_gib} GiB.",
        )
    if (
        not isinstance(job.template, str)
        or len(job.template) > 63
        or not LABEL_VALUE.fullmatch(job.template)
    ):
        add("template", "The template is named by a DNS label.")
    if errors:
        raise SpecError(errors)


Add = Any  # the ``add(path, message)`` of validate_job


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_count(add: Add, path: str, value: object, low: int, high: int, what: str) -> bool:
    if not _is_int(value):
        add(path, f"{what} must be a whole number.")
        return False
    assert isinstance(value, int)
    if not low <= value <= high:
        add(path, f"{what} must be between {low} and {high} (got {value}).")
        return False
    return True


def _validate_image(add: Add, image: object, fleet: FleetSpec) -> None:
    registries = ", ".join(fleet.allowed_registries)
    if not isinstance(image, str) or not image:
        add("image", "Give the container image.")
    elif len(image) > IMAGE_MAX or not IMAGE.fullmatch(image):
        add(
            "image",
            f"Give the image as registry/repository:tag (at most {IMAGE_MAX} "
            "characters, no spaces).",
        )
    elif not image.startswith(fleet.allowed_registries):
        add("image", f"Images must come from an allowed registry: {registries}.")


def _validate_words(add: Add, path: str, words: object, what: str) -> None:
    if not isinstance(words, tuple) or not all(isinstance(w, str) for w in words):
        add(path, f"{what} must be a list of strings.")
        return
    if len(words) > MAX_ITEMS:
        add(path, f"{what} may have at most {MAX_ITEMS} entries.")
    for index, word in enumerate(words):
        if len(word) > MAX_ITEM_LENGTH:
            add(f"{path}[{index}]", f"Each entry may be at most {MAX_ITEM_LENGTH} characters.")
        elif problem := text_problem(word):
            add(f"{path}[{index}]", f"{what} may not contain {problem}.")


def _validate_env(add: Add, env: object) -> None:
    if not isinstance(env, tuple) or not all(
        isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(v, str) for v in pair)
        for pair in env
    ):
        add("env", "The environment must be a list of name and value pairs.")
        return
    if len(env) > MAX_ITEMS:
        add("env", f"Give at most {MAX_ITEMS} environment variables.")
    seen: set[str] = set()
    for index, (name, value) in enumerate(env):
        where = f"env[{index}]"
        if len(name) > 128 or not ENV_NAME.fullmatch(name):
            add(
                where,
                f"{name!r} is not a variable name (letters, digits and '_', not first a digit).",
            )
        elif name in seen:
            add(where, f"{name} is set twice.")
        elif name in kyverno.HAMI_BYPASS_ENV:
            add(where, f"{name} switches off GPU sharing limits and is not allowed.")
        elif SECRET_NAME.search(name):
            add(
                where,
                f"{name} looks like a credential: environment values are stored with "
                "the job and shown to every member of the tenant, so no secrets here.",
            )
        elif len(value) > MAX_ITEM_LENGTH:
            add(where, f"A value may be at most {MAX_ITEM_LENGTH} characters.")
        elif problem := text_problem(value):
            add(where, f"Values may not contain {problem}.")
        seen.add(name)


def _gpu_resources(share: GpuShare, gpus: int) -> dict[str, int]:
    """What one pod of ``gpus`` units of ``share`` counts in Kueue, by resource."""
    if share.kind == "dra":
        return {resources.dra_device_class(share): gpus}
    return {
        name: int(amount)
        for name, amount in resources.container_resources(share, gpus).items()
        if name not in (resources.GPUMEM, resources.GPUCORES)
    }


def _validate_gpus(
    add: Add, job: BatchJobSpec, share: GpuShare, tenant: TenantSpec, fleet: FleetSpec
) -> None:
    unit = {
        "whole": "GPUs",
        "mig": f"{share.mig_profile} MIG slices",
        "hami": "vGPU slots",
        "dra": "GPUs",
    }[share.kind]
    if share.kind == "dra" and job.gpus != share.count:
        add(
            "gpus",
            f"The DRA share {share.name} hands out its GPUs through its claim template "
            f"of {share.count}: a pod on it asks for exactly {share.count}.",
        )
        return
    if share.kind == "whole":
        cap = kyverno.gpu_cap(tenant, fleet)
        if job.gpus > cap:
            add("gpus", f"A pod of this tenant may use at most {cap} whole GPUs.")
            return
    # What Kueue may admit for the tenant (its shares' nominal quota plus borrowing), which is
    # what the namespace's ResourceQuota holds too (gitops.render.quota).
    admissible = kueue.admissible(tenant, fleet)
    for name, amount in _gpu_resources(share, job.gpus).items():
        most = admissible.get(name, 0)
        if amount * job.nodes > most:
            add(
                "gpus",
                f"{job.nodes} pod(s) of {job.gpus} {unit} exceed what the tenant's shares "
                f"allow ({most} {unit}, borrowing included).",
            )
            return


def _validate_topology(add: Add, job: BatchJobSpec, share: GpuShare, fleet: FleetSpec) -> None:
    if not job.topology:
        return
    if job.topology not in TOPOLOGIES:
        add("topology", f"Choose one of {', '.join(TOPOLOGIES)}, or none.")
        return
    flavor = fleet.flavor(share.flavor)
    if flavor is None or not kueue.topology_enabled(flavor):
        add(
            "topology",
            f"The pool of share {share.name} has no topology-aware scheduling: its "
            "pods cannot be kept together.",
        )
    elif not topology_level(job.topology, fleet):
        add("topology", f"The fleet's topology has no level for {TOPOLOGIES[job.topology]}.")


# --- the object -----------------------------------------------------------------------------


def _labels(job: BatchJobSpec) -> dict[str, str]:
    labels = {QUEUE_NAME_LABEL: LOCAL_QUEUE, PRIORITY_CLASS_LABEL: job.priority}
    if job.template:
        labels[TEMPLATE_LABEL] = job.template
    return labels


def _pod_template(job: BatchJobSpec, tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    share = tenant.share(job.share)
    assert share is not None, "validate_job checks the share"
    gpu = resources.container_resources(share, job.gpus)
    compute = {
        "cpu": str(job.cpu),
        "memory": f"{job.memory_gib}Gi",
        "ephemeral-storage": f"{EPHEMERAL_GIB}Gi",
        **gpu,
    }
    # A dedicated tenant's job on a pool with a fabric joins the tenant's partition: one VF
    # per pod, attached by Multus to the tenant's attachment (gitops.render.fabric).
    pool = next((p for p in fabric.tenant_pools(tenant, fleet) if p.flavor == share.flavor), None)
    network, vf = fabric.attachment_request(pool) if pool is not None else ({}, {})
    compute.update({name: str(count) for name, count in vf.items()})
    container_resources: dict[str, Any] = {"requests": compute, "limits": dict(compute)}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image,
        "resources": container_resources,
        "securityContext": {
            key: value
            for key, value in RESTRICTED_CONTAINER_SECURITY.items()
            if key != "seccompProfile"  # set once for the pod
        },
    }
    if job.command:
        container["command"] = list(job.command)
    if job.args:
        container["args"] = list(job.args)
    if job.env:
        container["env"] = [{"name": name, "value": value} for name, value in job.env]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "priorityClassName": job.priority,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if share.kind == "dra":
        spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": share.name}]
        container_resources["claims"] = [{"name": CLAIM}]
    annotations: dict[str, str] = dict(network)
    level = topology_level(job.topology, fleet) if job.topology else ""
    if level:
        annotations[REQUIRED_TOPOLOGY_ANNOTATION] = level
    elif set(gpu) & set(kueue.tas_resources(tenant, fleet)):
        annotations[kueue.TAS_REQUEST_ANNOTATION] = "true"
    meta: dict[str, Any] = {"labels": _labels(job)}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def _job_spec(job: BatchJobSpec, tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    return {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "activeDeadlineSeconds": job.deadline_seconds,
        "template": _pod_template(job, tenant, fleet),
    }


def job_object(job: BatchJobSpec, tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    """The Job (one node) or JobSet (several) for ``job`` in the tenant's namespace; the spec
    must have passed ``validate_job``."""
    meta = metadata(job.name, tenant.slug, tenant=tenant.slug, extra_labels=_labels(job))
    if job.nodes == 1:
        return {
            "apiVersion": JOB_API,
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "suspend": True,
                "ttlSecondsAfterFinished": job.ttl_seconds,
                **_job_spec(job, tenant, fleet),
            },
        }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "suspend": True,
            "ttlSecondsAfterFinished": job.ttl_seconds,
            "failurePolicy": {"maxRestarts": 0},
            # Pods reach each other as <pod hostname>.<jobset name> (a headless Service).
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": WORKERS,
                    "replicas": job.nodes,
                    "template": {"spec": _job_spec(job, tenant, fleet)},
                }
            ],
        },
    }


def render_job(
    job: BatchJobSpec,
    tenant: TenantSpec,
    fleet: FleetSpec,
    *,
    max_deadline_seconds: int = MAX_DEADLINE,
) -> dict[str, Any]:
    """``validate_job`` then ``job_object``: raises ``SpecError``."""
    validate_job(job, tenant, fleet, max_deadline_seconds=max_deadline_seconds)
    return job_object(job, tenant, fleet)


def owner_workloads(kind: str, name: str, nodes: int) -> list[str]:
    """The ledger's workload names of the job's pods (``billing``: ``<OwnerKind>/<name>`` of a
    pod's controller): the Job, or each Job a JobSet made (``<name>-workers-<index>``)."""
    if kind == "Job":
        return [f"Job/{name}"]
    return [f"Job/{name}-{WORKERS}-{index}" for index in range(nodes)]


__all__ = [
    "job_object",
    "kind_of",
    "owner_workloads",
    "render_job",
    "topology_level",
    "validate_job",
]
