"""PodDisruptionBudgets (policy/v1): the disruption controller's status and the eviction
subresource's decision, as the API server makes it.

Read from kubernetes/kubernetes (the v1.34 line; the eviction handler has not changed in it):

- ``pkg/registry/core/pod/storage/eviction.go`` ``EvictionREST.Create``: a terminal, pending or
  terminating pod is deleted without asking a budget (``canIgnorePDB``); the budgets of the
  pod's namespace whose selector matches its labels count, an empty selector matching nothing
  (``getPodDisruptionBudgets``); more than one is a 500 failure status; an unready pod is let
  go when the budget is met anyway (``CurrentHealthy >= DesiredHealthy > 0``);
  ``checkAndDecrement``: a status older than the spec (``ObservedGeneration < Generation``) is
  a 429 ("still being processed"), negative ``DisruptionsAllowed`` a 403, zero a 429 ("needs N
  healthy pods and has M currently"); otherwise ``DisruptionsAllowed`` is decremented and the
  pod is recorded in ``DisruptedPods`` before the delete.
- ``pkg/controller/disruption/disruption.go`` ``getExpectedPodCount`` / ``countHealthyPods`` /
  ``updatePdbStatus``: ``desiredHealthy`` from minAvailable (an integer as is, a percentage of
  the expected count rounded up) or from maxUnavailable (expected minus it, percentages rounded
  up); ``currentHealthy`` counts ready pods that are not terminating and not in
  ``DisruptedPods``; ``disruptionsAllowed = max(0, currentHealthy - desiredHealthy)``; entries
  of ``DisruptedPods`` older than ``DeletionTimeout`` (2 minutes) are dropped.

One simplification: the real controller takes the expected count of a percentage or
maxUnavailable budget from the pods' controllers' ``scale``; here it is the number of pods the
selector matches (the same where every replica exists).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DELETION_TIMEOUT_SECONDS = 120.0


class Refused(Exception):
    """The eviction is refused: ``code`` 429, 403 or 500, with the API server's message."""

    def __init__(self, code: int, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.cause = cause


@dataclass(frozen=True)
class Decision:
    """Evict (delete the pod), and which budget to record the disruption in, if any."""

    budget: str = ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(_dict(obj.get("metadata")).get("labels")).items()}


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector: matchLabels and matchExpressions; an empty or missing
    selector matches nothing for a budget (eviction.go, "should match nothing")."""
    selector = _dict(selector)
    match = _dict(selector.get("matchLabels"))
    expressions = [e for e in selector.get("matchExpressions") or [] if isinstance(e, dict)]
    if not match and not expressions:
        return False
    if any(labels.get(str(k)) != str(v) for k, v in match.items()):
        return False
    for expression in expressions:
        key, operator = str(expression.get("key")), expression.get("operator")
        values = {str(v) for v in expression.get("values") or []}
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = _dict(pod.get("status")).get("conditions") or []
    return any(
        _dict(c).get("type") == "Ready" and _dict(c).get("status") == "True" for c in conditions
    )


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(_dict(pod.get("metadata")).get("deletionTimestamp"))


def _scaled(value: Any, expected: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with rounding up, as the controller calls it."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def _time(text: Any) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pdb_status(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: float) -> dict:
    """The disruption controller's status of ``pdb`` over the namespace's ``pods``."""
    metadata, spec = _dict(pdb.get("metadata")), _dict(pdb.get("spec"))
    status = _dict(pdb.get("status"))
    matched = [
        p
        for p in pods
        if _dict(p.get("metadata")).get("namespace") == metadata.get("namespace")
        and selector_matches(spec.get("selector"), _labels(p))
    ]
    names = {str(_dict(p.get("metadata")).get("name")) for p in matched}
    disrupted = {
        name: when
        for name, when in _dict(status.get("disruptedPods")).items()
        if name in names and now - _time(when) < DELETION_TIMEOUT_SECONDS
    }
    expected = len(matched)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected
    healthy = sum(
        1
        for p in matched
        if is_ready(p)
        and not _terminating(p)
        and str(_dict(p.get("metadata")).get("name")) not in disrupted
    )
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": int(metadata.get("generation") or 0),
        "disruptedPods": disrupted,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "lastTransitionTime": _stamp(now),
                "observedGeneration": int(metadata.get("generation") or 0),
            }
        ],
    }


def decide(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> Decision:
    """eviction.go ``Create``: whether the pod may go now, and under which budget; raises
    ``Refused`` as the API server answers."""
    phase = _dict(pod.get("status")).get("phase")
    if phase in ("Succeeded", "Failed", "Pending") or _terminating(pod):
        return Decision()  # canIgnorePDB
    namespace = _dict(pod.get("metadata")).get("namespace")
    labels = _labels(pod)
    matching = [
        p
        for p in pdbs
        if _dict(p.get("metadata")).get("namespace") == namespace
        and selector_matches(_dict(p.get("spec")).get("selector"), labels)
    ]
    if len(matching) > 1:
        raise Refused(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    if not matching:
        return Decision()
    pdb = matching[0]
    name = str(_dict(pdb.get("metadata")).get("name"))
    status = _dict(pdb.get("status"))
    current, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    if not is_ready(pod) and current >= desired and desired > 0:
        return Decision()
    generation = int(_dict(pdb.get("metadata")).get("generation") or 0)
    if int(status.get("observedGeneration", 0)) < generation:
        raise Refused(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            f"The disruption budget {name} is still being processed by the server.",
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise Refused(
            403, f'poddisruptionbudget "{name}" is forbidden: pdb disruptions allowed is negative'
        )
    if allowed == 0:
        raise Refused(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            f"The disruption budget {name} needs {desired} healthy pods and has {current} "
            "currently",
        )
    return Decision(budget=name)


def record_disruption(pdb: dict[str, Any], pod_name: str, now: float) -> None:
    """checkAndDecrement's write: one disruption fewer allowed, the pod in DisruptedPods."""
    status = pdb.setdefault("status", {})
    status["disruptionsAllowed"] = int(status.get("disruptionsAllowed", 0)) - 1
    status.setdefault("disruptedPods", {})[pod_name] = _stamp(now)
    if status["disruptionsAllowed"] == 0:
        for condition in status.get("conditions") or []:
            if condition.get("type") == "DisruptionAllowed":
                condition.update(status="False", reason="InsufficientPods")
