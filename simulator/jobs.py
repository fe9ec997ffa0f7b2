"""Run-once work: Kueue's job reconciler for batch/v1 Jobs and JobSets, and the Job and JobSet
controllers that run them on the simulator's nodes.

Kueue's side (kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/reconciler.go``
``ReconcileGenericJob``, ``pkg/controller/jobs/job``, ``pkg/controller/jobs/jobset``): a Job or
JobSet with a queue gets its Workload (``workloads.py``); once the Workload holds quota the job
starts: each pod set's template gets the flavors' ``nodeLabels`` and ``tolerations`` and the
``kueue.x-k8s.io/podset`` label (``startJob``, ``podset.FromAssignment``), and ``spec.suspend``
goes false. An evicted Workload (preempted or deactivated) stops its job: suspended again, the
templates restored from the Workload's pod sets (``RestorePodSetsInfo``), its pods gone; then
the quota is released (``QuotaReserved`` False with the eviction's message, ``Requeued`` True
after a preemption, False after a deactivation) and it queues again. A finished job finishes
its Workload (``Finished``, reason Succeeded or Failed, the job's condition message), which
releases the quota. ``spec.active`` back to true requeues a deactivated Workload (``Requeued``
reason Reactivated, ``pkg/controller/core/workload_controller.go``).
With waitForPodsReady (on by default in Kueue's v1beta2 configuration) the reconciler also
writes the Workload's ``PodsReady`` condition from the Job's ready and succeeded pods
(``pods_ready.py``); the workload controller times it out (``kueue.py``).

The Job controller (kubernetes ``pkg/controller/job/job_controller.go``): an unsuspended Job
keeps ``parallelism`` pods (fewer when fewer completions remain) named ``<job>-<5 random>``
with the ``batch.kubernetes.io/controller-uid`` and ``job-name`` labels and a controller
ownerReference; a suspended one has none (``Suspended`` condition, reason JobSuspended, and
JobResumed when resumed, ``startTime`` reset). Its status counts ``active``, ``succeeded`` and
``failed`` pods and ``ready`` the active ones whose Ready condition is True
(``countReadyPods``); once ``completions`` pods succeeded it gets ``SuccessCriteriaMet`` then
``Complete`` (reason CompletionsReached); more failures than ``backoffLimit`` (default 6) give
``FailureTarget`` then ``Failed`` (BackoffLimitExceeded), a run longer than
``activeDeadlineSeconds`` the same with DeadlineExceeded, and its active pods are deleted. A
pod runs ``SimConfig.job_seconds`` of simulated time (the pod template's
``sim.ai-factory.io/run-seconds`` annotation overrides it), then succeeds; ``finish`` ends them
now (the ``/sim/jobs`` endpoint).

The JobSet controller (kubernetes-sigs/jobset ``pkg/controllers/jobset_controller.go``, API
v1alpha2): one child Job ``<jobset>-<replicatedJob>-<index>`` per replica, suspended with the
JobSet; ``Completed`` (AllJobsCompleted, "jobset completed successfully") once every child
completed, ``Failed`` (FailedJobs, "jobset failed due to one or more job failures") when one
failed.

An indexed Job (``completionMode: Indexed``) gives each pod a completion index: pod ``i`` is
``<job>-<i>-<5 random>`` with hostname ``<job>-<i>`` (the template's ``subdomain`` kept), the
``batch.kubernetes.io/job-completion-index`` annotation and label and ``JOB_COMPLETION_INDEX``
from that label (kubernetes v1.34 ``pkg/controller/job/job_controller.go`` ``manageJob``,
``indexed_job_utils.go`` ``podGenerateNameWithIndex``, ``addCompletionIndexLabel``,
``addCompletionIndexEnvVariables``); the missing indexes are created, ``completedIndexes``
lists the succeeded ones, and it completes once every index succeeded, or once a
``successPolicy`` rule matched (``success_policy.go`` ``matchSuccessPolicy``: the rule's
``succeededIndexes`` all succeeded, or ``succeededCount`` of them; ``SuccessCriteriaMet``
reason SuccessPolicy, the other pods deleted).

Simplified: no pod failure policy, backoff delay or backoff per index; a JobSet has no failure
policy (restarts) and its children share its Workload.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from simulator.admission import Rejected
from simulator.kueue_webhooks import UNMANAGED_NAMESPACES, managed_owner, queue_name
from simulator.pods_ready import PODS_READY, job_pods_ready, pods_ready_condition
from simulator.store import JOBS, JOBSETS, PODS, WORKLOADS, JsonObject, as_dict, as_list, key_of
from simulator.store import timestamp as rfc3339
from simulator.workloads import (
    ADMITTED,
    EVICTED,
    MAIN,
    REQUEUED,
    condition,
    finisher,
    has_quota,
    is_evicted,
    is_finished,
    new_workload,
    pod_set,
    set_condition,
    unset_quota,
    workload_name,
)

if TYPE_CHECKING:
    from simulator.cluster import Cluster

logger = logging.getLogger(__name__)

RUN_SECONDS = "sim.ai-factory.io/run-seconds"
PODSET_LABEL = "kueue.x-k8s.io/podset"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
# kubernetes pkg/apis/batch/types.go ``JobTrackingFinalizer``.
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
DEFAULT_BACKOFF_LIMIT = 6
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_KINDS = {"Job": (JOBS, "batch"), "JobSet": (JOBSETS, "jobset.x-k8s.io")}


def _spec(obj: Mapping[str, Any]) -> JsonObject:
    return as_dict(obj.get("spec"))


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def job_pod_sets(kind: str, obj: Mapping[str, Any]) -> list[JsonObject]:
    """``PodSets()``: a Job's ``main`` of ``parallelism`` pods; a JobSet's one per replicated
    job of ``replicas x parallelism``."""
    spec = _spec(obj)
    if kind == "Job":
        return [pod_set(MAIN, as_dict(spec.get("template")), int(spec.get("parallelism") or 1))]
    podsets = []
    for replicated in as_list(spec.get("replicatedJobs")):
        replicated = as_dict(replicated)
        job_spec = as_dict(as_dict(replicated.get("template")).get("spec"))
        count = int(replicated.get("replicas") or 1) * int(job_spec.get("parallelism") or 1)
        podsets.append(
            pod_set(str(replicated.get("name", "")), as_dict(job_spec.get("template")), count)
        )
    return podsets


def _templates(kind: str, obj: JsonObject) -> dict[str, JsonObject]:
    """Pod set name -> the pod template in the job object (to change in place)."""
    spec = obj.setdefault("spec", {})
    if kind == "Job":
        return {MAIN: spec.setdefault("template", {})}
    return {
        str(as_dict(r).get("name", "")): as_dict(r)
        .setdefault("template", {})
        .setdefault("spec", {})
        .setdefault("template", {})
        for r in as_list(spec.get("replicatedJobs"))
        if isinstance(r, dict)
    }


class Batch:
    """Kueue's job reconciler and the Job and JobSet controllers, over the cluster's store."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.kueue = cluster.kueue

    # --- Kueue's job reconciler ----------------------------------------------------------------

    def _managed(self, obj: Mapping[str, Any]) -> bool:
        namespace = str(as_dict(obj.get("metadata")).get("namespace", ""))
        return (
            bool(queue_name(obj))
            and namespace not in UNMANAGED_NAMESPACES
            and not managed_owner(self.store, obj)
        )

    def workload_of(self, kind: str, obj: Mapping[str, Any]) -> JsonObject | None:
        metadata = as_dict(obj.get("metadata"))
        name = workload_name(
            str(metadata.get("name", "")), str(metadata.get("uid", "")), kind, _KINDS[kind][1]
        )
        return self.store.get(WORKLOADS, str(metadata.get("namespace", "")), name)

    def reconcile(self, now: float) -> None:
        """Workloads for new jobs; stop evicted ones; finish finished ones."""
        for kind, (resource, group) in _KINDS.items():
            for obj in self.store.list(resource):
                if not self._managed(obj):
                    continue
                wl = self.workload_of(kind, obj)
                if wl is None:
                    if self._finished(obj) is None:
                        self.store.apply(
                            WORKLOADS,
                            new_workload(self.store, obj, kind, group, job_pod_sets(kind, obj)),
                            now,
                        )
                    continue
                outcome = self._finished(obj)
                if outcome is not None:
                    if not is_finished(wl):
                        reason, message = outcome
                        self.store.mutate(WORKLOADS, *key_of(wl), finisher(reason, message, now))
                    continue
                if kind == "Job":
                    self._sync_pods_ready(obj, wl, now)
                if is_evicted(wl) and has_quota(wl):
                    self._stop(kind, obj, wl, now)

    def _sync_pods_ready(self, job: Mapping[str, Any], wl: JsonObject, now: float) -> None:
        """Step 5 of ``ReconcileGenericJob``: the Workload's ``PodsReady`` condition from the
        Job's ready and succeeded pods (``pods_ready.pods_ready_condition``), written when its
        status or reason changes (``HasConditionWithTypeAndReason``)."""
        current = condition(wl, PODS_READY)
        admitted = condition(wl, ADMITTED)
        status, reason, message = pods_ready_condition(
            current,
            admitted is not None and admitted.get("status") == "True",
            job_pods_ready(job),
        )
        if current is not None and (current.get("status") == "True", current.get("reason")) == (
            status,
            reason,
        ):
            return
        self.store.mutate(
            WORKLOADS,
            *key_of(wl),
            lambda o: set_condition(o, PODS_READY, status, reason, message, now),
        )

    def _finished(self, obj: Mapping[str, Any]) -> tuple[str, str] | None:
        """``Finished()``: (Succeeded or Failed, the condition's message) of a finished job."""
        for kind in ("Complete", "Completed", "Failed"):
            found = condition(obj, kind)
            if found is not None and found.get("status") == "True":
                reason = "Failed" if kind == "Failed" else "Succeeded"
                return reason, str(found.get("message", ""))
        return None

    def _stop(self, kind: str, obj: Mapping[str, Any], wl: JsonObject, now: float) -> None:
        """``stopJob`` then the quota release of ``ReconcileGenericJob`` step 6."""
        podsets = {
            str(as_dict(p).get("name")): as_dict(as_dict(p).get("template"))
            for p in as_list(_spec(wl).get("podSets"))
        }

        def suspend(job: JsonObject) -> None:
            job.setdefault("spec", {})["suspend"] = True
            for name, template in _templates(kind, job).items():
                original = podsets.get(name, {})
                template["spec"] = {
                    **as_dict(template.get("spec")),
                    **{
                        k: v
                        for k, v in as_dict(original.get("spec")).items()
                        if k in ("nodeSelector", "tolerations")
                    },
                }
                for field in ("nodeSelector", "tolerations"):
                    if field not in as_dict(original.get("spec")):
                        template["spec"].pop(field, None)
                labels = as_dict(as_dict(template.get("metadata")).get("labels"))
                labels.pop(PODSET_LABEL, None)

        resource = _KINDS[kind][0]
        self.store.mutate(resource, *key_of(obj), suspend)
        self._sync_suspended(kind, key_of(obj), now)
        evicted = condition(wl, EVICTED) or {}
        reason, message = str(evicted.get("reason", "")), str(evicted.get("message", ""))

        def release(o: JsonObject) -> None:
            set_condition(o, REQUEUED, reason == "Preempted", reason, message, now)
            unset_quota(o, "Pending", message, now)

        self.store.mutate(WORKLOADS, *key_of(wl), release)

    def start(self, now: float) -> None:
        """``startJob`` for every suspended job whose Workload holds quota."""
        for kind, (resource, _) in _KINDS.items():
            for obj in self.store.list(resource):
                if not self._managed(obj) or _spec(obj).get("suspend") is not True:
                    continue
                held = self.workload_of(kind, obj)
                if held is None or not has_quota(held) or is_evicted(held) or is_finished(held):
                    continue
                wl = held
                admission = as_dict(as_dict(wl.get("status")).get("admission"))
                assigned = {
                    str(as_dict(a).get("name")): list(as_dict(as_dict(a).get("flavors")).values())
                    for a in as_list(admission.get("podSetAssignments"))
                }

                def unsuspend(job: JsonObject, kind: str = kind, assigned: Any = assigned) -> None:
                    job.setdefault("spec", {})["suspend"] = False
                    for name, template in _templates(kind, job).items():
                        self.kueue.apply_admission(template, assigned.get(name, []))
                        template.setdefault("metadata", {}).setdefault("labels", {})[
                            PODSET_LABEL
                        ] = name

                self.store.mutate(resource, *key_of(obj), unsuspend)

    # --- the JobSet controller -----------------------------------------------------------------

    def run_jobsets(self, now: float) -> None:
        for jobset in self.store.list(JOBSETS):
            metadata = as_dict(jobset.get("metadata"))
            namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
            if self._finished(jobset) is not None:
                continue
            suspended = _spec(jobset).get("suspend") is True
            children = []
            for replicated in as_list(_spec(jobset).get("replicatedJobs")):
                replicated = as_dict(replicated)
                rname = str(replicated.get("name", ""))
                template = as_dict(replicated.get("template"))
                for index in range(int(replicated.get("replicas") or 1)):
                    child_name = f"{name}-{rname}-{index}"
                    children.append(child_name)
                    child = self.store.get(JOBS, namespace, child_name)
                    if child is None:
                        labels = {
                            **as_dict(as_dict(template.get("metadata")).get("labels")),
                            JOBSET_NAME: name,
                            REPLICATED_JOB: rname,
                            JOB_INDEX: str(index),
                        }
                        self.store.apply(
                            JOBS,
                            {
                                "metadata": {
                                    "name": child_name,
                                    "namespace": namespace,
                                    "labels": labels,
                                    "ownerReferences": [_owner(jobset, "JobSet")],
                                },
                                "spec": {**as_dict(template.get("spec")), "suspend": suspended},
                            },
                            now,
                        )
                    elif _spec(child).get("suspend") is not suspended:
                        job_template = as_dict(template.get("spec")).get("template")

                        def follow(
                            job: JsonObject, tpl: Any = job_template, stop: bool = suspended
                        ) -> None:
                            job["spec"]["suspend"] = stop
                            job["spec"]["template"] = tpl

                        self.store.mutate(JOBS, namespace, child_name, follow)
            states = [self.store.get(JOBS, namespace, c) for c in children]
            if any(s is not None and _true(s, "Failed") for s in states):
                self.store.mutate(
                    JOBSETS,
                    namespace,
                    name,
                    lambda o: set_condition(
                        o,
                        "Failed",
                        True,
                        "FailedJobs",
                        "jobset failed due to one or more job failures",
                        now,
                    ),
                )
            elif states and all(s is not None and _true(s, "Complete") for s in states):
                self.store.mutate(
                    JOBSETS,
                    namespace,
                    name,
                    lambda o: set_condition(
                        o,
                        "Completed",
                        True,
                        "AllJobsCompleted",
                        "jobset completed successfully",
                        now,
                    ),
                )

    # --- the Job controller --------------------------------------------------------------------

    def _pods(self, job: Mapping[str, Any]) -> list[JsonObject]:
        uid = str(as_dict(job.get("metadata")).get("uid", ""))
        namespace = str(as_dict(job.get("metadata")).get("namespace", ""))
        return [
            p
            for p in self.store.list(PODS, namespace)
            if any(
                as_dict(ref).get("uid") == uid and as_dict(ref).get("controller") is True
                for ref in as_list(as_dict(p.get("metadata")).get("ownerReferences"))
            )
        ]

    def _sync_suspended(self, kind: str, key: tuple[str, str], now: float) -> None:
        if kind == "Job":
            job = self.store.get(JOBS, *key)
            if job is not None:
                self._run_job(job, now)

    def run_jobs(self, now: float) -> None:
        for job in self.store.list(JOBS):
            self._run_job(job, now)

    def _run_job(self, job: JsonObject, now: float) -> None:
        metadata = as_dict(job.get("metadata"))
        key = key_of(job)
        spec = _spec(job)
        if self._finished(job) is not None:
            return
        pods = self._pods(job)
        active = [
            p for p in pods if as_dict(p.get("status")).get("phase") not in ("Succeeded", "Failed")
        ]
        status = as_dict(job.get("status"))
        succeeded = int(status.get("succeeded") or 0)
        failed = int(status.get("failed") or 0)
        # Finished pods are counted once: the controller removes their tracking finalizer
        # (``trackJobStatusAndRemoveFinalizers``) and leaves the pods, and their logs, until
        # the Job goes (its deletion's propagation, or the TTL controller).
        for pod in pods:
            phase = as_dict(pod.get("status")).get("phase")
            finalizers = as_list(as_dict(pod.get("metadata")).get("finalizers"))
            if phase in ("Succeeded", "Failed") and TRACKING_FINALIZER in finalizers:
                succeeded += phase == "Succeeded"
                failed += phase == "Failed"
                self.store.mutate(PODS, *key_of(pod), _untrack)
        if spec.get("suspend") is True:
            for pod in active:
                self.cluster.delete_pod(*key_of(pod), now, recreate=False)
            self.store.mutate(
                JOBS, *key, lambda o: _job_status(o, 0, succeeded, failed, now, ready=None)
            )
            return
        ready = sum(1 for p in active if _true(p, "Ready"))
        self.store.mutate(
            JOBS,
            *key,
            lambda o: _job_status(o, len(active), succeeded, failed, now, ready=ready),
        )
        job = self.store.get(JOBS, *key) or job
        status = as_dict(job.get("status"))
        parallelism = _int(spec.get("parallelism"), 1)
        completions = spec.get("completions")
        completions = int(completions) if completions is not None else None
        backoff = _int(spec.get("backoffLimit"), DEFAULT_BACKOFF_LIMIT)
        deadline = spec.get("activeDeadlineSeconds")
        started = _seconds(status.get("startTime"))
        if failed > backoff:
            self._fail(
                job,
                active,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
            )
            return
        if deadline is not None and started is not None and now - started >= int(deadline):
            self._fail(
                job,
                active,
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                now,
            )
            return
        indexed = spec.get("completionMode") == "Indexed"
        reason = "CompletionsReached"
        done_indexes: set[int] = set()
        if indexed:
            total = completions or 0
            done_indexes = {
                index
                for pod in pods
                if (index := _index(pod)) is not None
                and index < total
                and _phase(pod) == "Succeeded"
            }
            self.store.mutate(JOBS, *key, lambda o: _completed_indexes(o, sorted(done_indexes)))
            succeeded = len(done_indexes)
            rule = success_policy_match(spec.get("successPolicy"), done_indexes, total)
            if rule is not None:
                reason = f"SuccessPolicy:{rule}"
            done = rule is not None or len(done_indexes) >= total
        else:
            done = (
                succeeded >= completions
                if completions is not None
                else succeeded > 0 and not active
            )
        if done:
            for pod in active:
                self.cluster.delete_pod(*key_of(pod), now, recreate=False)
            self.store.mutate(JOBS, *key, lambda o: _complete(o, now, reason))
            return
        remaining = completions - succeeded if completions is not None else parallelism
        wanted = min(parallelism, remaining) if succeeded == 0 or completions is not None else 0
        template = as_dict(spec.get("template"))
        busy = {i for i in (_index(p) for p in active) if i is not None}
        missing = (
            [i for i in range(completions or 0) if i not in done_indexes | busy] if indexed else []
        )
        for slot in range(max(0, wanted - len(active))):
            if indexed and slot >= len(missing):
                break
            pod = {
                "metadata": {
                    "namespace": key[0],
                    "labels": {
                        **as_dict(as_dict(template.get("metadata")).get("labels")),
                        CONTROLLER_UID: str(metadata.get("uid", "")),
                        JOB_NAME: key[1],
                        "controller-uid": str(metadata.get("uid", "")),
                        "job-name": key[1],
                    },
                    "annotations": as_dict(as_dict(template.get("metadata")).get("annotations")),
                    "ownerReferences": [_owner(job, "Job")],
                    "finalizers": [TRACKING_FINALIZER],
                },
                "spec": as_dict(template.get("spec")),
            }
            base = key[1]
            if indexed:
                index = missing[slot]
                base = f"{key[1]}-{index}"
                _set_index(pod, key[1], index)
            try:
                self.cluster.create_pod(pod, base, now)
            except Rejected as exc:
                # The Job controller's FailedCreate; it retries on the next sync.
                logger.info("creating a pod of job %s/%s: %s", *key, exc)
                break
        for pod in self._pods(job):
            phase = as_dict(pod.get("status")).get("phase")
            if phase != "Running":
                continue
            annotations = as_dict(as_dict(pod.get("metadata")).get("annotations"))
            seconds = float(annotations.get(RUN_SECONDS) or self.cluster.config.job_seconds)
            began = _seconds(as_dict(pod.get("status")).get("startTime"))
            if began is not None and now - began >= seconds:
                self.cluster.finish_pod(*key_of(pod), "Succeeded", now)

    def _fail(
        self, job: JsonObject, active: list[JsonObject], reason: str, message: str, now: float
    ) -> None:
        for pod in active:
            self.cluster.delete_pod(*key_of(pod), now, recreate=False)

        def failed(o: JsonObject) -> None:
            set_condition(o, "FailureTarget", True, reason, message, now, generation=False)
            set_condition(o, "Failed", True, reason, message, now, generation=False)
            o["status"]["active"] = 0

        self.store.mutate(JOBS, *key_of(job), failed)

    def finish(self, namespace: str, name: str, outcome: str, now: float) -> int:
        """End the running pods of Job ``name`` now as ``outcome`` (Succeeded or Failed);
        returns how many. ``LookupError`` when there is no such Job."""
        job = self.store.get(JOBS, namespace, name)
        if job is None:
            raise LookupError(f'jobs.batch "{name}" not found')
        ended = 0
        for pod in self._pods(job):
            if as_dict(pod.get("status")).get("phase") in ("Running", "Pending"):
                self.cluster.finish_pod(*key_of(pod), outcome, now)
                ended += 1
        return ended

    def tick_before_schedule(self, now: float) -> None:
        self.reconcile(now)

    def tick_after_schedule(self, now: float) -> None:
        self.start(now)
        self.run_jobsets(now)
        self.run_jobs(now)
        self.reconcile(now)


def _untrack(pod: JsonObject) -> None:
    finalizers = [f for f in as_list(pod["metadata"].get("finalizers")) if f != TRACKING_FINALIZER]
    if finalizers:
        pod["metadata"]["finalizers"] = finalizers
    else:
        pod["metadata"].pop("finalizers", None)


def _owner(obj: Mapping[str, Any], kind: str) -> JsonObject:
    metadata = as_dict(obj.get("metadata"))
    return {
        "apiVersion": str(obj.get("apiVersion", "")),
        "kind": kind,
        "name": str(metadata.get("name", "")),
        "uid": str(metadata.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _int(value: object, default: int) -> int:
    """An integer field, ``default`` when unset (the API server's defaulting)."""
    return int(value) if isinstance(value, int | str) else default


def _seconds(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z").timestamp()


def _job_status(
    job: JsonObject, active: int, succeeded: int, failed: int, now: float, *, ready: int | None
) -> None:
    """``ready`` None: the Job is suspended. ``status.ready`` counts the active pods whose Ready
    condition is True (the Job controller's ``countReadyPods``)."""
    status = job.setdefault("status", {})
    status.update({"active": active, "succeeded": succeeded, "failed": failed, "ready": ready or 0})
    old = condition(job, "Suspended")
    if ready is None:
        set_condition(
            job, "Suspended", True, "JobSuspended", "Job suspended", now, generation=False
        )
        status.pop("startTime", None)
    else:
        if old is not None and old.get("status") == "True":
            set_condition(
                job, "Suspended", False, "JobResumed", "Job resumed", now, generation=False
            )
        status.setdefault("startTime", rfc3339(now))


def _complete(job: JsonObject, now: float, reason: str = "CompletionsReached") -> None:
    message = "Reached expected number of succeeded pods"
    if reason.startswith("SuccessPolicy:"):
        reason, _, rule = reason.partition(":")
        message = f"Matched rules at index {rule}"
    set_condition(job, "SuccessCriteriaMet", True, reason, message, now, generation=False)
    set_condition(job, "Complete", True, reason, message, now, generation=False)
    job["status"]["active"] = 0
    job["status"]["completionTime"] = rfc3339(now)


# --- indexed Jobs ------------------------------------------------------------------------------


def _phase(pod: Mapping[str, Any]) -> str:
    return str(as_dict(pod.get("status")).get("phase") or "")


def _index(pod: Mapping[str, Any]) -> int | None:
    """The pod's completion index (``getCompletionIndex``: the annotation), None if it has none."""
    value = as_dict(as_dict(pod.get("metadata")).get("annotations")).get(COMPLETION_INDEX)
    try:
        index = int(str(value))
    except ValueError:
        return None
    return index if index >= 0 else None


def _set_index(pod: JsonObject, job_name: str, index: int) -> None:
    metadata, spec = pod["metadata"], dict(pod["spec"])
    metadata["annotations"] = {**metadata["annotations"], COMPLETION_INDEX: str(index)}
    metadata["labels"][COMPLETION_INDEX] = str(index)
    spec["hostname"] = f"{job_name}-{index}"
    env = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}},
    }
    spec["containers"] = [
        {**as_dict(c), "env": [*as_list(as_dict(c).get("env")), env]}
        for c in as_list(spec.get("containers"))
    ]
    pod["spec"] = spec


def _parse_indexes(text: str, completions: int) -> set[int]:
    """``"0,2-4"`` as a set of indexes below ``completions`` (``parseIndexesFromString``);
    empty when it does not parse."""
    found: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            return set()
        found.update(i for i in range(low, high + 1) if i < completions)
    return found


def success_policy_match(policy: object, done: set[int], completions: int) -> int | None:
    """The position of the first rule of ``policy`` the succeeded indexes ``done`` meet, None
    when none does (``matchSuccessPolicy``)."""
    if not done:
        return None
    for position, rule in enumerate(as_list(as_dict(policy).get("rules"))):
        rule = as_dict(rule)
        count = rule.get("succeededCount")
        if rule.get("succeededIndexes") is not None:
            required = _parse_indexes(str(rule["succeededIndexes"]), completions)
            if not required:
                continue
            matched = len(required & done)
            if matched >= (int(count) if count is not None else len(required)):
                return position
        elif count is not None and len(done) >= int(count):
            return position
    return None


def _completed_indexes(job: JsonObject, indexes: list[int]) -> None:
    """``status.completedIndexes`` as the controller writes it: ``"0-2,4"``."""
    ranges: list[list[int]] = []
    for index in indexes:
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
    status = job.setdefault("status", {})
    if text:
        status["completedIndexes"] = text
    else:
        status.pop("completedIndexes", None)
