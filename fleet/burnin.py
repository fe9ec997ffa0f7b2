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

On a pass the node moves to ``ready``, and the cordon is lifted only if the lifecycle set it
(``NodeLifecycle.lifecycle_cordoned``): a node remediation cordoned stays cordoned until
remediation lifts its own cordon. A failed node moves to ``failed`` and stays cordoned until
an admin runs the burn-in again. Single-node only: a multi-node run across an NVLink domain
is not built.
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
from fleet.models import BurnInExpectation, BurnInRun, Node, NodeLifecycle
from gitops.checks.schema import SchemaRegistry
from portal.audit import record_audit
from tenants import access
from tenants.access import Action

State = NodeLifecycle.State
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
GPU_TAINT = "nvidia.com/gpu"
RUN_LABEL = "ai-factory.io/burn-in-run"
STEP_LABEL = "ai-factory.io/burn-in-step"
NODE_ANNOTATION = "ai-factory.io/burn-in-node"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
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


def configured_expectations() -> dict[str, float]:
    """``FLEET_BURN_IN_EXPECTED_BUSBW``, checked."""
    try:
        return check_expected(settings.FLEET_BURN_IN_EXPECTED_BUSBW)
    except ValidationError as exc:
        raise ImproperlyConfigured(f"FLEET_BURN_IN_EXPECTED_BUSBW: {exc.messages[0]}") from exc


def expectations() -> dict[str, float]:
    """The expected bus bandwidth per product: the setting, overridden by the admins' values."""
    table = configured_expectations()
    table.update(BurnInExpectation.objects.values_list("product", "busbw_gbps"))
    return dict(sorted(table.items()))


def expected_busbw(product: str) -> float | None:
    """The bus bandwidth (GB/s) a healthy node of ``product`` reaches, None when unknown."""
    return expectations().get(product)


@transaction.atomic
def do_set_expectation(product: str, busbw_gbps: object, *, acting_user: Any) -> None:
    """A platform admin sets the expected bus bandwidth of ``product`` (a positive number of
    GB/s); bad input is a ``ValidationError`` and changes nothing."""
    access.require(acting_user, Action.OPERATE_FLEET)
    product = product.strip() if isinstance(product, str) else product
    value = check_expected({product: busbw_gbps})[str(product)]
    if len(str(product)) > 120:
        raise ValidationError("A GPU product name has at most 120 characters.")
    before = expected_busbw(str(product))
    row, _ = BurnInExpectation.objects.update_or_create(
        product=product, defaults={"busbw_gbps": value}
    )
    record_audit(
        actor=acting_user,
        action="fleet.burn_in_expectation",
        target=row,
        diff={"busbw_gbps": [before, value]},
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


def _validated(obj: dict[str, Any]) -> dict[str, Any]:
    """The Job, checked against the upstream batch/v1 schema before it is sent."""
    errors = SchemaRegistry().validate(obj)
    if errors:
        raise ValueError(f"the burn-in Job is invalid: {'; '.join(map(str, errors))}")
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
        _finish(run, kube, passed=run.nccl_passed)


def _start(kube: Kube, job: dict[str, Any]) -> str:
    name = str(job["metadata"]["name"])
    try:
        kube.create("batch/v1", "Job", settings.FLEET_BURN_IN_NAMESPACE, _validated(job))
    except KubeError as exc:
        if exc.status != 409:  # already there: a run resumed after a restart
            raise
    return name


def _finished_log(kube: Kube, job_name: str) -> str | None:
    """The log of the finished Job's pod; None while it runs."""
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
    pods = kube.list("v1", "Pod", namespace, label_selector=f"{JOB_NAME_LABEL}={job_name}")
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


def _delete(kube: Kube, job_name: str) -> None:
    try:
        kube.delete("batch/v1", "Job", settings.FLEET_BURN_IN_NAMESPACE, job_name)
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
