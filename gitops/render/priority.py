"""Pod PriorityClasses (``scheduling.k8s.io/v1``), one per Kueue WorkloadPriorityClass, with the
same name and value.

Kueue and the kube-scheduler keep separate priorities. A workload labelled
``kueue.x-k8s.io/priority-class`` gets that WorkloadPriorityClass's value for Kueue's queueing
order and Kueue's preemption, and the label does nothing for its pods; a pod's
``priorityClassName`` is what the kube-scheduler (preemption on a full node) and the kubelet
(eviction order under node pressure) read, and Kueue uses it only when no WorkloadPriorityClass
is named (kueue v0.19.2 site/content/en/docs/concepts/workload_priority_class.md, "The
relationship between pod's priority and workload's priority"). Giving pods a PriorityClass of
the same value keeps the two orders the same: Kueue decides who gets quota, and when the
scheduler then has to make room on a node it can only evict pods Kueue also ranks lower, never
a production endpoint for a batch job.

``globalDefault`` stays false (pods naming no class keep priority 0) and every class keeps the
default ``PreemptLowerPriority``, except ``batch-low``: work that yields to everything has no
business evicting the tenants' priority-0 pods to start.
"""

from __future__ import annotations

from typing import Any

from gitops.render.kueue import PRIORITY_CLASSES
from gitops.render.meta import metadata

API = "scheduling.k8s.io/v1"
NON_PREEMPTING = frozenset({"batch-low"})


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API,
            "kind": "PriorityClass",
            "metadata": metadata(name),
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "Never" if name in NON_PREEMPTING else "PreemptLowerPriority",
            "description": description,
        }
        for name, value, description in PRIORITY_CLASSES
    ]
