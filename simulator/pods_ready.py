"""Kueue's waitForPodsReady: its configuration, the ``PodsReady`` condition of a batch/v1 Job's
Workload, the timeouts that evict a Workload whose pods are not (or no longer) ready, and the
requeuing backoff.

Read from kubernetes-sigs/kueue v0.19.2:

- configuration (``apis/config/v1beta2/configuration_types.go`` ``WaitForPodsReady``,
  ``RequeuingStrategy``; ``defaults.go`` ``SetDefaults_Configuration``;
  ``pkg/config/validation.go`` ``validateWaitForPodsReady``; ``pkg/controller/core/core.go``
  ``waitForPodsReady``): in ``v1beta2`` the feature has no ``enable`` switch and is on even when
  the key is absent (only the ``DisableWaitForPodsReady`` feature gate turns it off,
  ``pkg/util/waitforpodsready``). ``timeout`` defaults to 30 minutes (also when given as 0),
  ``recoveryTimeout`` to ``timeout``, and ``0s`` turns the recovery check off;
  ``backoffLimitCount`` defaults to null (requeued for ever), ``backoffBaseSeconds`` to 60,
  ``backoffMaxSeconds`` to 3600, ``timestamp`` to ``Eviction``. Negative values and a
  ``timestamp`` other than ``Eviction``/``Creation`` are refused; the manager decodes strictly
  (``pkg/config/config.go``), so an unknown key (such as v1beta1's ``enable``) is refused too.
  The manager reads the ConfigMap ``kueue-system/kueue-manager-config``, key
  ``controller_manager_config.yaml`` (the release manifests' names:
  ``config/components/manager/kustomization.yaml`` with the ``kueue-`` prefix of
  ``config/default``);
- the condition (``pkg/controller/jobframework/reconciler.go`` ``generatePodsReadyCondition``;
  ``pkg/controller/jobs/job/job_controller.go`` ``PodsReady``, ``podsCount``): a Job's pods are
  ready when ``succeeded + ready >= min(parallelism, completions)``. Not admitted: False
  ``WaitForStart``; ready: True ``Started``, or ``Recovered`` after a ``WaitForRecovery``;
  not ready after being True: False ``WaitForRecovery``, which stays until ready again;
  otherwise False ``WaitForStart``;
- the timeouts (``pkg/controller/core/workload_controller.go`` ``admittedNotReadyWorkload``,
  ``reconcileNotReadyTimeout``, ``triggerDeactivation``): an admitted Workload without a True
  ``PodsReady`` is timed from its ``Admitted`` transition against ``timeout`` (no condition,
  ``WaitForStart`` or the old ``PodsReady`` reason) or from its ``PodsReady`` transition against
  ``recoveryTimeout`` (``WaitForRecovery``). Past it, a Workload whose requeue count + 1
  exceeds ``backoffLimitCount`` gets ``DeactivationTarget`` (reason
  ``RequeuingLimitExceeded``); any other is evicted (reason ``PodsReadyTimeout``, "Exceeded the
  PodsReady timeout <namespace>/<name>", the wait as its underlying cause) with its
  ``requeueState`` counted up and ``requeueAt`` set (``pkg/workload`` ``UpdateRequeueState``,
  ``SetRequeueState``);
- the backoff (``pkg/util/wait/backoff.go`` ``WaitTime``: ``base x 2^(n-1)``, capped at
  ``backoffMaxSeconds``; ``pkg/cache/queue/cluster_queue.go`` ``backoffWaitingTimeExpired``):
  a Workload whose ``Requeued`` is False is not queued; the workload controller sets it True
  (``BackoffFinished``, "The workload backoff was finished") once ``requeueAt`` has passed,
  clearing ``requeueAt``.

Simplified: Kueue reads its configuration once, at start; the simulator applies a change of
the ConfigMap at once (a bad one is logged and the last good one kept, as a running manager
keeps its own while a restarted one would crash); with the fleet's ``stack`` the Configuration
is a value of the Kueue HelmRelease, which the simulator does not render, so Kueue's defaults
apply there. The condition is computed for batch/v1 Jobs
only: Workloads of other integrations are never timed out here. No jitter on the backoff
(Kueue's is 0.01 %), no ``blockAdmission`` and no ``Creation`` timestamp.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from simulator.store import CONFIG_MAPS, JsonObject, Store, as_dict, timestamp

logger = logging.getLogger(__name__)

NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"

PODS_READY = "PodsReady"
DEACTIVATION_TARGET = "DeactivationTarget"
# Reasons (apis/kueue/v1beta2/workload_types.go).
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
STARTED = "Started"
RECOVERED = "Recovered"
PODS_READY_TIMEOUT = "PodsReadyTimeout"
BACKOFF_FINISHED = "BackoffFinished"
REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"
LIMIT_MESSAGE = "exceeding the maximum number of re-queuing retries"

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_FIELDS = {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
_STRATEGY_FIELDS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
_INT32_MAX = 2**31 - 1


class ConfigurationError(ValueError):
    """A Configuration the Kueue manager would refuse to start with."""


@dataclass(frozen=True)
class WaitForPodsReady:
    """The effective ``waitForPodsReady`` (seconds; ``recovery_timeout`` None: off)."""

    timeout: float = 1800.0
    recovery_timeout: float | None = 1800.0
    block_admission: bool = False
    timestamp: str = "Eviction"
    backoff_limit_count: int | None = None
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600


DEFAULT = WaitForPodsReady()


def parse_duration(text: object) -> float:
    """Seconds of a Go ``time.ParseDuration`` string ("600s", "1h30m", "0"), as metav1.Duration
    decodes it; ``ConfigurationError`` otherwise."""
    if not isinstance(text, str) or not text:
        raise ConfigurationError(f"invalid duration {text!r}")
    body, sign = text, 1.0
    if body[0] in "+-":
        sign, body = (-1.0 if body[0] == "-" else 1.0), body[1:]
    if body == "0":
        return 0.0
    total, position = 0.0, 0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise ConfigurationError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if not body:
        raise ConfigurationError(f"invalid duration {text!r}")
    return sign * total


def _int32(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > _INT32_MAX:
        raise ConfigurationError(f"{path}: expected an int32, got {value!r}")
    if value < 0:
        raise ConfigurationError(f"{path}: must be greater than or equal to 0")
    return value


def from_configuration(document: object) -> WaitForPodsReady:
    """The effective ``waitForPodsReady`` of a Configuration document (defaults, then the
    manager's validation); ``ConfigurationError`` for one Kueue would refuse."""
    if not isinstance(document, Mapping):
        raise ConfigurationError("the Configuration is not a mapping")
    raw = document.get("waitForPodsReady")
    if raw is None:
        return DEFAULT
    if not isinstance(raw, Mapping):
        raise ConfigurationError("waitForPodsReady: expected a mapping")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ConfigurationError(f'waitForPodsReady: unknown field "{unknown[0]}"')
    timeout = parse_duration(raw["timeout"]) if raw.get("timeout") is not None else 0.0
    if timeout < 0:
        raise ConfigurationError("waitForPodsReady.timeout: must be greater than or equal to 0")
    timeout = timeout or DEFAULT.timeout
    recovery: float | None = timeout
    if raw.get("recoveryTimeout") is not None:
        recovery = parse_duration(raw["recoveryTimeout"])
        if recovery < 0:
            raise ConfigurationError(
                "waitForPodsReady.recoveryTimeout: must be greater than or equal to 0"
            )
        recovery = recovery or None
    block = raw.get("blockAdmission", False)
    if not isinstance(block, bool):
        raise ConfigurationError("waitForPodsReady.blockAdmission: expected a boolean")
    strategy = raw.get("requeuingStrategy") or {}
    if not isinstance(strategy, Mapping):
        raise ConfigurationError("waitForPodsReady.requeuingStrategy: expected a mapping")
    unknown = sorted(set(strategy) - _STRATEGY_FIELDS)
    if unknown:
        raise ConfigurationError(
            f'waitForPodsReady.requeuingStrategy: unknown field "{unknown[0]}"'
        )
    where = "waitForPodsReady.requeuingStrategy"
    stamp = strategy.get("timestamp") or DEFAULT.timestamp
    if stamp not in ("Eviction", "Creation"):
        raise ConfigurationError(
            f'{where}.timestamp: Unsupported value: "{stamp}": supported values: '
            '"Creation", "Eviction"'
        )
    limit = strategy.get("backoffLimitCount")
    base = strategy.get("backoffBaseSeconds")
    cap = strategy.get("backoffMaxSeconds")
    return WaitForPodsReady(
        timeout=timeout,
        recovery_timeout=recovery,
        block_admission=block,
        timestamp=str(stamp),
        backoff_limit_count=None if limit is None else _int32(limit, f"{where}.backoffLimitCount"),
        # ``cmp.Or`` on pointers: an explicit 0 stays 0 (a zero maximum is no cap).
        backoff_base_seconds=(
            DEFAULT.backoff_base_seconds
            if base is None
            else _int32(base, f"{where}.backoffBaseSeconds")
        ),
        backoff_max_seconds=(
            DEFAULT.backoff_max_seconds
            if cap is None
            else _int32(cap, f"{where}.backoffMaxSeconds")
        ),
    )


class ConfigurationReader:
    """The ``waitForPodsReady`` of the Configuration in the store's ConfigMap, read again when
    the ConfigMap changes; the last good one is kept when a change is refused."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.current = DEFAULT
        # ``resources.excludeResourcePrefixes``: requests Kueue leaves out of a Workload's
        # (kueue v0.19.2 pkg/workload/workload.go ``dropExcludedResources``, a prefix match),
        # such as the SR-IOV VFs of the fabric, which no ClusterQueue covers.
        self.excluded: tuple[str, ...] = ()
        self._seen: object = None

    def read(self) -> WaitForPodsReady:
        found = self.store.get(CONFIG_MAPS, NAMESPACE, CONFIG_MAP)
        version = as_dict(found.get("metadata")).get("resourceVersion") if found else None
        if version == self._seen:
            return self.current
        self._seen = version
        if found is None:
            self.current, self.excluded = DEFAULT, ()
            return self.current
        try:
            text = as_dict(found.get("data")).get(CONFIG_KEY)
            document = yaml.safe_load(str(text or "")) or {}
            self.current = from_configuration(document)
            prefixes = as_dict(as_dict(document).get("resources")).get("excludeResourcePrefixes")
            self.excluded = tuple(str(p) for p in prefixes or ())
        except (ConfigurationError, yaml.YAMLError) as exc:
            logger.error("kueue: %s/%s refused, keeping the last: %s", NAMESPACE, CONFIG_MAP, exc)
        return self.current

    def excluded_prefixes(self) -> tuple[str, ...]:
        self.read()
        return self.excluded


# --- the backoff --------------------------------------------------------------------------------


def wait_time(iteration: int, base: float, cap: float, factor: float = 2.0) -> float:
    """``Backoff.WaitTime`` (pkg/util/wait/backoff.go) without jitter: the ``iteration``-th step
    of ``wait.Backoff`` starting at ``base``, multiplied by ``factor``, capped at ``cap`` (0:
    no cap but ``MaxInt64 / ceil(factor)`` nanoseconds); 0 for an iteration below 1."""
    if cap == 0:
        cap = (2**63 - 1) // int(-(-factor // 1)) / 1e9
    duration, step = 0.0, base
    for _ in range(max(0, iteration)):
        duration = step
        step = step * factor
        if step > cap:
            step = cap
        if duration == cap:
            break
    return duration


def update_requeue_state(wl: JsonObject, config: WaitForPodsReady, now: float) -> None:
    """``UpdateRequeueState``: count one more requeue, ``requeueAt`` after its backoff (kept
    when a later one is already set, ``SetRequeueState``)."""
    status = wl.setdefault("status", {})
    state = as_dict(status.get("requeueState"))
    count = int(state.get("count") or 0) + 1
    wait = wait_time(count, config.backoff_base_seconds, config.backoff_max_seconds)
    until = timestamp(now + wait)
    current = state.get("requeueAt")
    if not isinstance(current, str) or seconds(current) < now + wait:
        state["requeueAt"] = until
    state["count"] = count
    status["requeueState"] = state


def seconds(value: object) -> float:
    """An RFC 3339 timestamp as the API writes it, in seconds (0 for none)."""
    if not isinstance(value, str) or not value:
        return 0.0
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z").timestamp()


# --- the condition and the timeouts ----------------------------------------------------------


def job_pods_ready(job: Mapping[str, Any]) -> bool:
    """``Job.PodsReady``: succeeded and ready pods reach ``min(parallelism, completions)``."""
    spec, status = as_dict(job.get("spec")), as_dict(job.get("status"))
    parallelism = spec.get("parallelism")
    count = int(parallelism) if isinstance(parallelism, int) else 1
    completions = spec.get("completions")
    if isinstance(completions, int) and completions < count:
        count = completions
    return int(status.get("succeeded") or 0) + int(status.get("ready") or 0) >= count


def pods_ready_condition(
    current: Mapping[str, Any] | None, admitted: bool, ready: bool
) -> tuple[bool, str, str]:
    """``generatePodsReadyCondition``: (status, reason, message) from the Workload's current
    ``PodsReady`` condition, whether it is admitted and whether the job's pods are ready."""
    if not admitted:
        return False, WAIT_FOR_START, NOT_READY_MESSAGE
    reason = str((current or {}).get("reason") or "")
    if ready:
        recovered = reason in (WAIT_FOR_RECOVERY, RECOVERED)
        return True, RECOVERED if recovered else STARTED, READY_MESSAGE
    if current is None:
        return False, WAIT_FOR_START, NOT_READY_MESSAGE
    if current.get("status") == "True" or reason == WAIT_FOR_RECOVERY:
        return False, WAIT_FOR_RECOVERY, RECOVERY_MESSAGE
    return False, WAIT_FOR_START, NOT_READY_MESSAGE


def not_ready(
    admitted: Mapping[str, Any] | None,
    pods_ready: Mapping[str, Any] | None,
    config: WaitForPodsReady | None,
    now: float,
) -> tuple[str, float]:
    """``admittedNotReadyWorkload``: (the wait, ``WaitForStart`` or ``WaitForRecovery``, or
    "" when none is timed; seconds left, 0 once past) from the Workload's ``Admitted`` and
    ``PodsReady`` conditions."""
    if config is None or admitted is None or admitted.get("status") != "True":
        return "", 0.0
    if pods_ready is not None and pods_ready.get("status") == "True":
        return "", 0.0
    reason = (pods_ready or {}).get("reason")
    if pods_ready is None or reason in (WAIT_FOR_START, "PodsReady"):
        elapsed = now - seconds(admitted.get("lastTransitionTime"))
        return WAIT_FOR_START, max(config.timeout - elapsed, 0.0)
    if reason == WAIT_FOR_RECOVERY and config.recovery_timeout is not None:
        elapsed = now - seconds(pods_ready.get("lastTransitionTime"))
        return WAIT_FOR_RECOVERY, max(config.recovery_timeout - elapsed, 0.0)
    return "", 0.0
