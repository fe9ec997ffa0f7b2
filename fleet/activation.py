"""Deactivating and reactivating a Kueue Workload: how idle reclaim stops run-once work.

A batch job is run-once work, not a Git-owned object, so it is stopped directly through the
Kubernetes API, not by a pull request. Kueue v0.19.2 (kubernetes-sigs/kueue):

- ``pkg/controller/core/workload_controller.go`` ``Reconcile``: a Workload whose
  ``spec.active`` is false and not yet evicted gets ``Evicted`` with reason ``Deactivated``
  ("The workload is deactivated") and its quota reservation released;
- ``pkg/controller/jobframework/reconciler.go`` ``ReconcileGenericJob`` step 6 ("handle
  eviction"): an evicted Workload's job is stopped (``stopJob``: a batch Job is suspended,
  its pods removed); set ``spec.active`` true again and the Workload queues anew and the job
  resumes once admitted.

The simulator models both (simulator/kueue.py ``reconcile_workloads``, simulator/jobs.py).
The Workload of a job is found by its owner reference to the job, as Kueue's
``jobframework`` creates it (``workload.go`` ``NewInfo``'s caller sets the controller
reference), never by a label a tenant could write.
"""

from __future__ import annotations

from typing import Any

from fleet.kube import WORKLOAD, Kube, KubeError


class NoWorkload(LookupError):
    """No Kueue Workload owns nothing of that name: the job is gone or not Kueue's."""


def workload_of(kube: Kube, namespace: str, owner_kind: str, owner_name: str) -> dict[str, Any]:
    """The Workload whose controller owner is ``owner_kind``/``owner_name`` in ``namespace``."""
    for obj in kube.list(f"{WORKLOAD.group}/{WORKLOAD.version}", WORKLOAD.kind, namespace):
        for ref in obj.get("metadata", {}).get("ownerReferences") or []:
            if ref.get("kind") == owner_kind and ref.get("name") == owner_name:
                return obj
    raise NoWorkload(f"no Kueue Workload in {namespace} belongs to {owner_kind} {owner_name}")


def set_active(kube: Kube, namespace: str, name: str, active: bool) -> dict[str, Any]:
    """Set ``spec.active`` of the Workload ``namespace/name`` (a merge patch: only that
    field changes)."""
    return kube.merge_patch_custom(WORKLOAD, namespace, name, {"spec": {"active": active}})


__all__ = ["KubeError", "NoWorkload", "set_active", "workload_of"]
