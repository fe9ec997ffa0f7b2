"""Burn-in: the tests a node passes before it takes work (discovered -> burn-in -> ready).

Every node the lifecycle has in ``burn-in`` (new at discovery, sent back by remediation or by
an admin) gets a ``BurnInRun`` and two Jobs on it, one after the other, in the burn-in
namespace (``FLEET_BURN_IN_NAMESPACE``, rendered with the portal's rights there by
``gitops.render.portal.burn_in_objects``):

1. the DCGM diagnostic, ``dcgmi diag -r 3 -j`` (level 3: software, pcie, memory, diagnostic,
   targeted stress and power, memory bandwidth), against a host engine the Job starts (the
   DCGM image's entrypoint is ``nv-hostengine``: NVIDIA/DCGM v4.6.0
   ``docker/Dockerfile.ubuntu22.04``). Its JSON is read as ``dcgmi/Diag.cpp`` writes it
   (schema ``testing/python3/dcgm_diag_schema.json``): a test failed when a GPU's result has
   status "Fail"; its warnings say why.
2. NCCL's all-reduce across the node's GPUs (nccl-tests ``all_reduce_perf -g <gpus>``); the
   ``# Avg bus bandwidth : <GB/s>`` footer line (NVIDIA/nccl-tests v2.19.6 ``src/util.cu``
   ``writeResultFooter``, printed with ``%g``) is compared with the expected bus bandwidth of
   the node's GPU product times the pass share (``FLEET_BURN_IN_EXPECTED_BUSBW``,
   ``FLEET_BURN_IN_PASS_SHARE``; nccl-tests' own ``-G`` check uses 0.9 the same way).

Each Job is pinned to the node by its ``kubernetes.io/hostname`` label, tolerates the
``node.kubernetes.io/unschedulable`` taint (kube-scheduler's NodeUnschedulable filter lets
such a pod onto a cordoned node: kubernetes v1.34 ``pkg/scheduler/framework/plugins/
nodeunschedulable/node_unschedulable.go`` ``Filter``) and the ``nvidia.com/gpu`` taint, and
asks for all the node's GPUs. The log is read once the Job finished and before the engine
deletes it: the Job controller leaves finished pods in place (it only drops their tracking
finalizer) until the Job goes; ``ttlSecondsAfterFinished`` is a day, a backstop, never the
normal end.

A node in a multi-node NVLink domain (GPU feature discovery's ``nvidia.com/gpu.clique`` label,
``<clusterUUID>.<cliqueId>``: NVIDIA/k8s-device-plugin v0.20.0, the GFD the GPU Operator
deploys here, ``internal/lm/imex.go`` ``newImexLabeler``; the topology block is not used, a
block's nodes need not share an NVLink fabric) then waits at step ``domain`` for a third
test, NCCL's all-reduce across nodes (``BurnInDomainRun``):

- who: the domain's nodes in burn-in that passed their own tests, started once none of the
  domain's nodes is still in its single-node tests (a new rack is tested as one); a node
  alone in burn-in (a repaired node joining a domain whose others are ready) is tested with
  one ready peer of its product, an idle one first. A node without a peer passes on its own
  tests.
- how: one indexed Job (``completionMode: Indexed``, a pod per node; plain batch/v1, no MPI
  operator or JobSet), each pod asking for all its node's GPUs and limited to the members by
  node affinity, so no two pods share a node. The Job controller names pod ``i``'s host
  ``<job>-<i>`` (kubernetes v1.34 ``pkg/controller/job/job_controller.go`` ``manageJob``)
  and gives it ``JOB_COMPLETION_INDEX`` (``indexed_job_utils.go``
  ``addCompletionIndexEnvVariables``); with ``subdomain`` set to a headless Service the
  hosts resolve as ``<job>-<i>.<job>``. Pod 0 waits until it reaches every pod by ssh, then
  runs ``mpirun`` over them (nccl-tests takes ranks from MPI only: v2.19.6 ``src/common.cu``
  ``run``, ``MPI_Comm_size``/``MPI_Bcast`` of the NCCL id), the others serve ssh. The
  success policy ``succeededIndexes: "0"`` ends the Job when the launcher succeeded, and the
  controller then stops the workers (``success_policy.go`` ``matchSuccessPolicy``).
- judged: pod 0's ``# Avg bus bandwidth`` against ``FLEET_BURN_IN_EXPECTED_DOMAIN_BUSBW`` of
  the product times the pass share. A slow or failed result fails every member in burn-in
  (they stay cordoned: a slow ring cannot say which link is slow, an admin re-runs or marks
  ready); a ready peer keeps its state, the result is on its page.
- not built: the pods ask for no RDMA devices and no IMEX channel (a GB200 ComputeDomain),
  so NCCL across nodes uses what the pod network gives it; the ssh identity is a Secret the
  operator creates (``FLEET_BURN_IN_SSH_SECRET``).

On a pass the node moves to ``ready``, and the cordon is lifted only if the lifecycle set it
(``NodeLifecycle.lifecycle_cordoned``): a node remediation cordoned stays cordoned until
remediation lifts its own cordon. A failed node moves to ``failed`` and stays cordoned until
an admin runs the burn-in again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.utils import timezone

from fleet import lifecycle
from fleet.kube import Kube, KubeError
from fleet.models import (
    BurnInDomainRun,
    BurnInExpectation,
    BurnInRun,
    Node,
    NodeLifecycle,
    Workload,
)
from gitops.checks.schema import SchemaRegistry
from portal.audit import record_audit
from tenants import access
from tenants.access import Action

State = NodeLifecycle.State
Scope = BurnInExpectation.Scope
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
GPU_TAINT = "nvidia.com/gpu"
RUN_LABEL = "ai-factory.io/burn-in-run"
STEP_LABEL = "ai-factory.io/burn-in-step"
NODE_ANNOTATION = "ai-factory.io/burn-in-node"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DOMAIN_RUN_LABEL = "ai-factory.io/burn-in-domain-run"
# The Job controller's label (and annotation) of an indexed Job's pod: kubernetes v1.34
# ``pkg/controller/job/indexed_job_utils.go`` ``addCompletionIndexLabel``.
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
SSH_DIR = "/root/.ssh"
# Pod 0 launches once every pod answers ssh, the others serve it; a fixed script reading the
# env the Job sets (hosts the portal derives from the Job's name), nothing typed.
DOMAIN_SCRIPT = (
    'if [ "$JOB_COMPLETION_INDEX" != 0 ]; then exec /usr/sbin/sshd -D -e; fi; '
    'for host in $(echo "$BURN_IN_HOSTS" | tr , " "); do '
    'until ssh $OMPI_MCA_plm_rsh_args -o BatchMode=yes "${host%%:*}" true; '
    "do sleep 2; done; done; "
    'exec mpirun --allow-run-as-root -np "$BURN_IN_RANKS" -H "$BURN_IN_HOSTS" '
    "-x NCCL_DEBUG=WARN all_reduce_perf -b 8 -e 8G -f 2 -g 1"
)
# The host engine daemonises, then the diagnostic talks to it; a fixed script, nothing typed.
DIAG_SCRIPT = "nv-hostengine --log-level NONE && exec dcgmi diag -r 3 -j"
TTL_SECONDS = 86_400
LOG_LINES = 20_000
BUSBW_LINE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.MULTILINE)


class BurnInParseError(ValueError):
    """A test's output is not in the format its program writes."""


# --- parsing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagResult:
    passed: bool
    failures: list[str]  # "memory: GPU 0: <warning>" per failing result


def parse_diag(text: str) -> DiagResult:
    """Judge ``dcgmi diag -j``'s output: the JSON document among the log's lines."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise BurnInParseError("no JSON document in the diagnostic's output")
    try:
        document = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise BurnInParseError(f"the diagnostic's JSON does not parse: {exc}") from exc
    diag = document.get("DCGM Diagnostic") if isinstance(document, dict) else None
    if not isinstance(diag, dict):
        raise BurnInParseError('the diagnostic\'s JSON has no "DCGM Diagnostic" object')
    if diag.get("runtime_error"):
        return DiagResult(False, [f"runtime error: {diag['runtime_error']}"])
    categories = diag.get("test_categories")
    if not isinstance(categories, list) or not categories:
        raise BurnInParseError("the diagnostic ran no tests")
    failures: list[str] = []
    for category in categories:
        for test in category.get("tests", []) if isinstance(category, dict) else []:
            name = str(test.get("name", "?"))
            for result in test.get("results", []):
                if result.get("status") != "Fail":
                    continue
                warnings = [str(w.get("warning", "")) for w in result.get("warnings", [])]
                where = f"{result.get('entity_group', 'GPU')} {result.get('entity_id', '?')}"
                failures.append(f"{name}: {where}: {'; '.join(warnings) or 'failed'}")
            summary = test.get("test_summary", {})
            if summary.get("status") == "Fail" and not any(
                f.startswith(f"{name}:") for f in failures
            ):
                failures.append(f"{name}: failed")
    return DiagResult(not failures, failures)


def parse_busbw(text: str) -> float:
    """The average bus bandwidth (GB/s) of nccl-tests' footer."""
    found = BUSBW_LINE.findall(text)
    if not found:
        raise BurnInParseError('no "# Avg bus bandwidth" line in the NCCL test\'s output')
    try:
        value = float(found[-1])
    except ValueError as exc:
        raise BurnInParseError(f"the bus bandwidth {found[-1]!r} is not a number") from exc
    if value < 0:
        raise BurnInParseError("the bus bandwidth is negative")
    return value


# --- expectations -----------------------------------------------------------------------------


def check_expected(table: object) -> dict[str, float]:
    """The expected bus bandwidth per GPU product, each a positive number of GB/s;
    ``ValidationError`` otherwise."""
    if not isinstance(table, dict):
        raise ValidationError("The expected bus bandwidth must map GPU products to GB/s.")
    checked: dict[str, float] = {}
    for product, value in table.items():
        if not isinstance(product, str) or not product:
            raise ValidationError("Each expected bus bandwidth needs a GPU product name.")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValidationError(
                f"The expected bus bandwidth of {product} must be a positive number of GB/s."
            )
        checked[product] = float(value)
    return checked


SETTING = {
    Scope.NODE: "FLEET_BURN_IN_EXPECTED_BUSBW",
    Scope.DOMAIN: "FLEET_BURN_IN_EXPECTED_DOMAIN_BUSBW",
}


def configured_expectations(scope: str = Scope.NODE) -> dict[str, float]:
    """``FLEET_BURN_IN_EXPECTED_BUSBW`` (one node) or ``..._DOMAIN_BUSBW`` (across an NVLink
    domain), checked."""
    name = SETTING[Scope(scope)]
    try:
        return check_expected(getattr(settings, name))
    except ValidationError as exc:
        raise ImproperlyConfigured(f"{name}: {exc.messages[0]}") from exc


def expectations(scope: str = Scope.NODE) -> dict[str, float]:
    """The expected bus bandwidth per product: the setting, overridden by the admins' values."""
    table = configured_expectations(scope)
    table.update(BurnInExpectation.objects.filter(scope=scope).values_list("product", "busbw_gbps"))
    return dict(sorted(table.items()))


def expected_busbw(product: str, scope: str = Scope.NODE) -> float | None:
    """The bus bandwidth (GB/s) a healthy node of ``product`` reaches (or a domain of them
    across nodes), None when unknown."""
    return expectations(scope).get(product)


@transaction.atomic
def do_set_expectation(
    product: str, busbw_gbps: object, *, acting_user: Any, scope: str = Scope.NODE
) -> None:
    """A platform admin sets the expected bus bandwidth of ``product`` (a positive number of
    GB/s) on one node or across a domain; bad input is a ``ValidationError`` and changes
    nothing."""
    access.require(acting_user, Action.OPERATE_FLEET)
    if scope not in Scope.values:
        raise ValidationError(f"The scope must be one of {', '.join(Scope.values)}.")
    product = product.strip() if isinstance(product, str) else product
    value = check_expected({product: busbw_gbps})[str(product)]
    if len(str(product)) > 120:
        raise ValidationError("A GPU product name has at most 120 characters.")
    before = expected_busbw(str(product), scope)
    row, _ = BurnInExpectation.objects.update_or_create(
        product=product, scope=scope, defaults={"busbw_gbps": value}
    )
    record_audit(
        actor=acting_user,
        action="fleet.burn_in_expectation",
        target=row,
        diff={"busbw_gbps": [before, value], "scope": [None, scope]},
    )


def pass_share() -> float:
    share = settings.FLEET_BURN_IN_PASS_SHARE
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ImproperlyConfigured("FLEET_BURN_IN_PASS_SHARE must be above 0 and at most 1.")
    return float(share)


# --- the Jobs ---------------------------------------------------------------------------------


def _job(run: BurnInRun, step: str, hostname: str, container: dict[str, Any]) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "ai-factory-portal",
        RUN_LABEL: str(run.pk),
        STEP_LABEL: step,
    }
    gpus = {"nvidia.com/gpu": run.gpus}
    container["resources"] = {"requests": dict(gpus), "limits": dict(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"burn-in-{run.pk}-{step}",
            "namespace": settings.FLEET_BURN_IN_NAMESPACE,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: run.node_name},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.FLEET_BURN_IN_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": hostname},
                    "tolerations": [
                        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [container],
                },
            },
        },
    }


def diag_job(run: BurnInRun, hostname: str) -> dict[str, Any]:
    """The DCGM diagnostic's Job for ``run``'s node."""
    container = {
        "name": "diag",
        "image": settings.FLEET_BURN_IN_DIAG_IMAGE,
        "command": ["/bin/sh", "-c", DIAG_SCRIPT],
    }
    return _job(run, BurnInRun.Step.DIAG, hostname, container)


def nccl_job(run: BurnInRun, hostname: str) -> dict[str, Any]:
    """NCCL's all-reduce across the node's GPUs, 8 B to 8 GiB doubling."""
    container = {
        "name": "nccl",
        "image": settings.FLEET_BURN_IN_NCCL_IMAGE,
        "command": ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(run.gpus)],
    }
    return _job(run, BurnInRun.Step.NCCL, hostname, container)


def domain_name(domain_run: BurnInDomainRun) -> str:
    """The domain test's Job and headless Service (its pods' subdomain)."""
    return f"burn-in-domain-{domain_run.pk}"


def domain_objects(domain_run: BurnInDomainRun, hostnames: list[str]) -> list[dict[str, Any]]:
    """The headless Service and the indexed Job of NCCL's all-reduce across ``hostnames``
    (the members' ``kubernetes.io/hostname``, in ``domain_run.nodes`` order): a pod per
    node, all the node's GPUs each, one MPI rank per GPU."""
    name = domain_name(domain_run)
    namespace = settings.FLEET_BURN_IN_NAMESPACE
    labels = {
        "app.kubernetes.io/managed-by": "ai-factory-portal",
        DOMAIN_RUN_LABEL: str(domain_run.pk),
        STEP_LABEL: BurnInRun.Step.DOMAIN,
    }
    count, gpus = len(hostnames), domain_run.gpus
    hosts = ",".join(f"{name}-{index}.{name}:{gpus}" for index in range(count))
    resources = {"nvidia.com/gpu": gpus}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            # Pods resolve before they are ready: the launcher waits on ssh, not on DNS.
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: name},
            "ports": [{"name": "ssh", "port": 22, "targetPort": 22}],
        },
    }
    container = {
        "name": "nccl",
        "image": settings.FLEET_BURN_IN_NCCL_IMAGE,
        "command": ["/bin/sh", "-c", DOMAIN_SCRIPT],
        "env": [
            {"name": "BURN_IN_HOSTS", "value": hosts},
            {"name": "BURN_IN_RANKS", "value": str(count * gpus)},
            # mpirun's ssh to the workers, whose host keys nobody knows in advance; the
            # mounted .ssh is read-only (as the MPI operator sets it for its launchers).
            {
                "name": "OMPI_MCA_plm_rsh_args",
                "value": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
            },
        ],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [{"name": "ssh", "mountPath": SSH_DIR, "readOnly": True}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: ",".join(domain_run.nodes)},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": 0,
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "activeDeadlineSeconds": settings.FLEET_BURN_IN_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": list(hostnames),
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [
                        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "ssh",
                            "secret": {
                                "secretName": settings.FLEET_BURN_IN_SSH_SECRET,
                                "defaultMode": 0o400,
                            },
                        }
                    ],
                },
            },
        },
    }
    return [service, job]


def _validated(obj: dict[str, Any]) -> dict[str, Any]:
    """The object, checked against the upstream schema before it is sent."""
    errors = SchemaRegistry().validate(obj)
    if errors:
        raise ValueError(f"the burn-in {obj.get('kind')} is invalid: {'; '.join(map(str, errors))}")
    return obj


# --- the engine -------------------------------------------------------------------------------


def run_all(kube: Kube) -> list[BurnInRun]:
    """Move every node in burn-in one step on; returns the runs looked at."""
    runs = []
    for row in NodeLifecycle.objects.filter(state=State.BURN_IN):
        run = (
            BurnInRun.objects.filter(node_name=row.node_name, outcome=BurnInRun.Outcome.RUNNING)
            .order_by("-pk")
            .first()
        )
        if run is None:
            node = Node.objects.filter(name=row.node_name).first()
            if node is None:
                continue  # not listed (yet): the next sync has it
            run = BurnInRun.objects.create(
                node_name=node.name, product=node.product, gpus=node.gpu_count
            )
        advance(run, kube)
        runs.append(run)
    advance_domains(kube)
    return runs


def advance(run: BurnInRun, kube: Kube) -> None:
    """One step of ``run``: start the step's Job, or judge it once it finished."""
    node = Node.objects.filter(name=run.node_name).first()
    if node is None:
        _finish(run, kube, passed=False, error="the node left the cluster during its burn-in")
        return
    if run.step == BurnInRun.Step.DIAG:
        if not run.diag_job:
            run.diag_job = _start(kube, diag_job(run, node.hostname or node.name))
            run.save(update_fields=["diag_job"])
            return
        try:
            text = _finished_log(kube, run.diag_job)
            if text is None:
                return
            result = parse_diag(text)
        except BurnInParseError as exc:
            _finish(run, kube, passed=False, error=f"DCGM diagnostic: {exc}")
            return
        run.diag_passed, run.diag_failures = result.passed, result.failures
        _delete(kube, run.diag_job)
        if not result.passed:
            _finish(run, kube, passed=False)
            return
        run.step = BurnInRun.Step.NCCL
        run.save(update_fields=["diag_passed", "diag_failures", "step"])
    if run.step == BurnInRun.Step.NCCL:
        if not run.nccl_job:
            run.expected_gbps = expected_busbw(run.product)
            run.pass_share = pass_share()
            run.nccl_job = _start(kube, nccl_job(run, node.hostname or node.name))
            run.save(update_fields=["nccl_job", "expected_gbps", "pass_share"])
            return
        try:
            text = _finished_log(kube, run.nccl_job)
            if text is None:
                return
            run.busbw_gbps = parse_busbw(text)
        except BurnInParseError as exc:
            _finish(run, kube, passed=False, error=f"NCCL all-reduce: {exc}")
            return
        _delete(kube, run.nccl_job)
        if run.expected_gbps is None:
            run.nccl_passed = False
            _finish(
                run,
                kube,
                passed=False,
                error=f"no expected bus bandwidth is set for {run.product or 'this GPU'}",
            )
            return
        run.nccl_passed = run.busbw_gbps >= run.expected_gbps * (run.pass_share or 1.0)
        if run.nccl_passed and node.clique and settings.FLEET_BURN_IN_DOMAIN:
            run.step = BurnInRun.Step.DOMAIN
            run.save(update_fields=["busbw_gbps", "nccl_passed", "step"])
            return
        _finish(run, kube, passed=run.nccl_passed)


# --- across an NVLink domain ------------------------------------------------------------------


def advance_domains(kube: Kube) -> None:
    """Judge the domain tests that finished, then start one for each domain whose nodes in
    burn-in all wait at step ``domain``."""
    for domain_run in BurnInDomainRun.objects.filter(outcome=BurnInDomainRun.Outcome.RUNNING):
        _judge_domain(domain_run, kube)
    waiting = BurnInRun.objects.filter(
        step=BurnInRun.Step.DOMAIN, outcome=BurnInRun.Outcome.RUNNING, domain_run=None
    )
    nodes = Node.objects.in_bulk([r.node_name for r in waiting], field_name="name")
    groups: dict[tuple[str, str], list[BurnInRun]] = {}
    for run in waiting:
        node = nodes.get(run.node_name)
        if node is not None:  # else ``advance`` fails the run
            groups.setdefault((node.clique, node.product), []).append(run)
    for (clique, product), runs in sorted(groups.items()):
        _start_domain(clique, product, runs, kube)


def _start_domain(clique: str, product: str, runs: list[BurnInRun], kube: Kube) -> None:
    members = list(Node.objects.filter(clique=clique).values_list("name", flat=True))
    still_alone = BurnInRun.objects.filter(
        node_name__in=members,
        outcome=BurnInRun.Outcome.RUNNING,
        step__in=[BurnInRun.Step.DIAG, BurnInRun.Step.NCCL],
    )
    ongoing = BurnInDomainRun.objects.filter(clique=clique, outcome=BurnInDomainRun.Outcome.RUNNING)
    if still_alone.exists() or ongoing.exists():
        return  # one test per domain, once its new nodes are all through their own
    names = sorted(run.node_name for run in runs)
    peers = [] if len(names) > 1 else _peer(clique, product, names[0], runs[0])
    if len(names) == 1 and not peers:
        _finish(runs[0], kube, passed=True)  # no other node of its product in the domain
        return
    hosts = Node.objects.in_bulk(names + peers, field_name="name")
    domain_run = BurnInDomainRun.objects.create(
        clique=clique,
        product=product,
        gpus=min(node.gpu_count for node in hosts.values()),
        nodes=names + peers,
        peers=peers,
        expected_gbps=expected_busbw(product, Scope.DOMAIN),
        pass_share=pass_share(),
    )
    BurnInRun.objects.filter(pk__in=[run.pk for run in runs]).update(domain_run=domain_run)
    _launch(domain_run, kube)


def _launch(domain_run: BurnInDomainRun, kube: Kube) -> None:
    """Create the run's Service and Job (again, after a refusal: both tolerate 409)."""
    hosts = Node.objects.in_bulk(domain_run.nodes, field_name="name")
    hostnames = [hosts[n].hostname or n if n in hosts else n for n in domain_run.nodes]
    service, job = domain_objects(domain_run, hostnames)
    _start(kube, service)
    domain_run.job = _start(kube, job)
    domain_run.save(update_fields=["job"])


def _peer(clique: str, product: str, node_name: str, run: BurnInRun) -> list[str]:
    """A ready, schedulable node of the domain, product and GPU sharing to test
    ``node_name`` with, one without tenant workloads first (its pod waits for all the
    peer's GPUs)."""
    sharing = Node.objects.filter(name=node_name).values_list("sharing", flat=True).first()
    ready = set(NodeLifecycle.objects.filter(state=State.READY).values_list("node_name", flat=True))
    candidates = [
        node.name
        for node in Node.objects.filter(
            clique=clique, product=product, sharing=sharing or "", unschedulable=False
        )
        if node.name != node_name and node.name in ready and node.gpu_count >= run.gpus
    ]
    busy = set(
        Workload.objects.filter(node__in=candidates).values_list("node", flat=True).distinct()
    )
    candidates.sort(key=lambda name: (name in busy, name))
    return candidates[:1]


def _judge_domain(domain_run: BurnInDomainRun, kube: Kube) -> None:
    if not domain_run.job:  # the API refused the Job last round
        _launch(domain_run, kube)
        return
    try:
        text = _finished_log(kube, domain_run.job, index=0)
        if text is None:
            return
        if not text.strip():
            raise BurnInParseError(
                "pod 0 printed nothing: a pod did not start in time (a member's GPUs busy?)"
            )
        domain_run.busbw_gbps = parse_busbw(text)
    except BurnInParseError as exc:
        _finish_domain(domain_run, kube, passed=False, error=f"NCCL across the domain: {exc}")
        return
    if domain_run.expected_gbps is None:
        error = f"no expected bus bandwidth across an NVLink domain is set for {domain_run.product}"
        _finish_domain(domain_run, kube, passed=False, error=error)
        return
    floor = domain_run.expected_gbps * (domain_run.pass_share or 1.0)
    _finish_domain(domain_run, kube, passed=domain_run.busbw_gbps >= floor)


def _finish_domain(
    domain_run: BurnInDomainRun, kube: Kube, *, passed: bool, error: str = ""
) -> None:
    domain_run.outcome = (
        BurnInDomainRun.Outcome.PASSED if passed else BurnInDomainRun.Outcome.FAILED
    )
    domain_run.error = error
    domain_run.finished_at = timezone.now()
    domain_run.save()
    if domain_run.job:
        _delete(kube, domain_run.job)
        _delete(kube, domain_run.job, kind="Service")
    for run in domain_run.runs.filter(outcome=BurnInRun.Outcome.RUNNING):
        _finish(run, kube, passed=passed)


def _start(kube: Kube, job: dict[str, Any]) -> str:
    name = str(job["metadata"]["name"])
    try:
        kube.create(
            job["apiVersion"], job["kind"], settings.FLEET_BURN_IN_NAMESPACE, _validated(job)
        )
    except KubeError as exc:
        if exc.status != 409:  # already there: a run resumed after a restart
            raise
    return name


def _finished_log(kube: Kube, job_name: str, index: int | None = None) -> str | None:
    """The log of the finished Job's pod (of completion index ``index``); None while it
    runs."""
    namespace = settings.FLEET_BURN_IN_NAMESPACE
    try:
        job = kube.get("batch/v1", "Job", namespace, job_name)
    except KubeError as exc:
        if exc.status == 404:
            raise BurnInParseError(f"Job {job_name} is gone before its log was read") from exc
        raise
    conditions = job.get("status", {}).get("conditions") or []
    done = {c.get("type") for c in conditions if c.get("status") == "True"}
    if not done & {"Complete", "Failed"}:
        return None
    selector = f"{JOB_NAME_LABEL}={job_name}"
    if index is not None:
        selector += f",{COMPLETION_INDEX_LABEL}={index}"
    pods = kube.list("v1", "Pod", namespace, label_selector=selector)
    if not pods:
        return ""
    pods.sort(key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))
    name = str(pods[-1]["metadata"]["name"])
    try:
        return kube.pod_log(namespace, name, tail_lines=LOG_LINES)
    except KubeError as exc:
        if exc.status == 400:  # the container never started: no output to judge
            return ""
        raise


def _delete(kube: Kube, job_name: str, kind: str = "Job") -> None:
    api_version = "batch/v1" if kind == "Job" else "v1"
    try:
        kube.delete(api_version, kind, settings.FLEET_BURN_IN_NAMESPACE, job_name)
    except KubeError as exc:
        if exc.status != 404:
            raise


@transaction.atomic
def _finish(run: BurnInRun, kube: Kube, *, passed: bool, error: str = "") -> None:
    run.outcome = BurnInRun.Outcome.PASSED if passed else BurnInRun.Outcome.FAILED
    run.step = BurnInRun.Step.DONE
    run.error = error
    run.finished_at = timezone.now()
    run.save()
    row = lifecycle.get(run.node_name)
    if row is None or row.state != State.BURN_IN:
        return  # an admin moved it meanwhile: their word stands
    if passed:
        lifecycle.move(run.node_name, State.READY, reason=f"burn-in #{run.pk} passed")
        _lift_own_cordon(run.node_name, kube)
    else:
        lifecycle.move(run.node_name, State.FAILED, reason=_why(run))


def _why(run: BurnInRun) -> str:
    if run.error:
        return f"burn-in #{run.pk} failed: {run.error}"
    if run.diag_passed is False:
        return f"burn-in #{run.pk} failed the DCGM diagnostic: {'; '.join(run.diag_failures)}"
    domain = run.domain_run
    if domain is not None and run.nccl_passed:
        if domain.error:
            return f"burn-in #{run.pk} failed across NVLink domain {domain.clique}: {domain.error}"
        return (
            f"burn-in #{run.pk} failed NCCL across NVLink domain {domain.clique} "
            f"({len(domain.nodes)} nodes): {domain.busbw_gbps or 0:.2f} GB/s, expected at "
            f"least {(domain.expected_gbps or 0) * (domain.pass_share or 1):.2f} GB/s"
        )
    return (
        f"burn-in #{run.pk} failed NCCL: {run.busbw_gbps or 0:.2f} GB/s, expected at least "
        f"{(run.expected_gbps or 0) * (run.pass_share or 1):.2f} GB/s"
    )


def _lift_own_cordon(node_name: str, kube: Kube) -> None:
    row = NodeLifecycle.objects.select_for_update().get(node_name=node_name)
    if not row.lifecycle_cordoned:
        return
    kube.set_unschedulable(node_name, False)
    row.lifecycle_cordoned = False
    row.save(update_fields=["lifecycle_cordoned"])
    node = Node.objects.filter(name=node_name).first()
    if node is not None:
        node.unschedulable = False
        node.save(update_fields=["unschedulable"])
        record_audit(
            actor=None,
            action="node.uncordon",
            target=node,
            diff={"unschedulable": [True, False], "reason": [None, "burn-in passed"]},
        )


def _cordon_for_burn_in(node_name: str, kube: Kube, reason: str, actor: Any = None) -> None:
    """Cordon the node for its burn-in, remembering the cordon is the lifecycle's; a node
    already cordoned (by remediation or an admin) keeps that cordon as theirs."""
    node = Node.objects.select_for_update().filter(name=node_name).first()
    row = NodeLifecycle.objects.select_for_update().get(node_name=node_name)
    if node is not None and node.unschedulable:
        return
    kube.set_unschedulable(node_name, True)
    row.lifecycle_cordoned = True
    row.save(update_fields=["lifecycle_cordoned"])
    if node is not None:
        node.unschedulable = True
        node.save(update_fields=["unschedulable"])
        record_audit(
            actor=actor,
            action="node.cordon",
            target=node,
            diff={"unschedulable": [False, True], "reason": [None, reason]},
        )


# --- discovery --------------------------------------------------------------------------------


def discover(kube: Kube) -> list[str]:
    """Place the listed nodes the lifecycle has never seen. On a fleet with no lifecycle rows
    at all (the first sync after an upgrade) every node is adopted as ready; after that a new
    GPU node is discovered, cordoned and sent to burn-in (``FLEET_BURN_IN_AUTO``), and a node
    without GPUs is ready at once. Returns the names sent to burn-in."""
    known = set(NodeLifecycle.objects.values_list("node_name", flat=True))
    nodes = list(Node.objects.exclude(name__in=known).order_by("name"))
    if not nodes:
        return []
    if not known:
        for node in nodes:
            lifecycle.move(node.name, State.READY, reason="adopted on the first sync")
        return []
    sent = []
    for node in nodes:
        if not node.gpu_count or not settings.FLEET_BURN_IN_AUTO:
            lifecycle.move(node.name, State.READY, reason="new node, no burn-in needed")
            continue
        with transaction.atomic():
            lifecycle.move(node.name, State.DISCOVERED, reason="new node")
            _cordon_for_burn_in(node.name, kube, "burn-in of a new node")
            lifecycle.request_burn_in(node.name, reason="new node: burn-in before work")
        sent.append(node.name)
    return sent


# --- admins' verbs ----------------------------------------------------------------------------


def do_run_burn_in(node_name: str, *, acting_user: Any, kube: Kube | None = None) -> None:
    """Send the node (back) to burn-in by hand, e.g. after a repair: cordoned, tested again."""
    access.require(acting_user, Action.OPERATE_FLEET)
    if not Node.objects.filter(name=node_name).exists():
        raise ValidationError(f"There is no node {node_name}.")
    row = lifecycle.get(node_name)
    if row is not None and row.state == State.BURN_IN:
        raise ValidationError(f"{node_name} is in burn-in already.")
    own = kube is None
    kube = kube or Kube()
    try:
        with transaction.atomic():
            lifecycle.move(
                node_name, State.DISCOVERED, reason="burn-in asked for", actor=acting_user
            )
            _cordon_for_burn_in(node_name, kube, "burn-in asked for", acting_user)
            lifecycle.request_burn_in(node_name, reason="burn-in asked for", actor=acting_user)
    except KubeError as exc:
        raise ValidationError(str(exc)) from exc
    finally:
        if own:
            kube.close()


def do_mark_ready(
    node_name: str, *, acting_user: Any, reason: str, kube: Kube | None = None
) -> None:
    """An admin's word that the node is fit, with a reason: ready, and the lifecycle's own
    cordon lifted."""
    access.require(acting_user, Action.OPERATE_FLEET)
    reason = reason.strip()
    if not reason:
        raise ValidationError("Say why the node is ready without passing its burn-in.")
    if not Node.objects.filter(name=node_name).exists():
        raise ValidationError(f"There is no node {node_name}.")
    own = kube is None
    kube = kube or Kube()
    try:
        with transaction.atomic():
            BurnInRun.objects.filter(node_name=node_name, outcome=BurnInRun.Outcome.RUNNING).update(
                outcome=BurnInRun.Outcome.FAILED,
                step=BurnInRun.Step.DONE,
                error="stopped: marked ready by an admin",
                finished_at=timezone.now(),
            )
            lifecycle.move(
                node_name, State.READY, reason=f"marked ready: {reason}", actor=acting_user
            )
            if lifecycle.get(node_name) is not None:
                _lift_own_cordon(node_name, kube)
    except KubeError as exc:
        raise ValidationError(str(exc)) from exc
    finally:
        if own:
            kube.close()
