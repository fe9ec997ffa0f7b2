"""HAMi's admission webhook, as far as its namespace quota goes (HAMi v2.10.0).

HAMi keeps a quota of its own per namespace, read from the ResourceQuotas' ``limits.`` keys of
its memory and cores resources (``nvidia.com/gpumem``, ``nvidia.com/gpucores``;
pkg/device/quota.go ``managedQuotaName``, ``addQuotaLocked``: the last quota naming a key
wins). It counts what each vGPU device holds, not what the container states: a container
asking ``vgpu: 4, gpumem: 24000`` holds 4 x 24000 MiB (pkg/device/nvidia/device.go
``GenerateResourceRequests``: one ``Memreq``/``Coresreq`` for ``Nums`` devices). Its webhook
denies a pod whose devices would take the namespace over a limit, the pod's request being the
larger of its containers' sum and its largest init container (pkg/scheduler/webhook.go
``fitResourceQuota``; ``FitQuota`` compares ``Used + request`` with the limit, a limit of 0
included). ``Used`` is what the scheduler allocated: pods bound to a node (``AddUsage`` on the
pods that carry their devices).

Memory given as a percentage or left to HAMi's default (the chart's ``defaultMemory: 0``, the
whole card) has no ``Memreq`` and counts 0 here, as in HAMi.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.admission import Rejected, quantity
from simulator.store import PODS, RESOURCE_QUOTAS, JsonObject, Store, as_dict, as_list

VGPU = "nvidia.com/vgpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
WEBHOOK = "vgpu.hami.io"
HAMI_RESOURCES = (VGPU, GPUMEM, "nvidia.com/gpumem-percentage", GPUCORES)


def _value(resources: Mapping[str, Any], name: str) -> int | None:
    for kind in ("limits", "requests"):
        value = as_dict(resources.get(kind)).get(name)
        if value is not None:
            return int(quantity(value))
    return None


def container_request(container: Mapping[str, Any]) -> tuple[int, int]:
    """(memory MiB, cores %) the container's devices hold together."""
    resources = as_dict(container.get("resources"))
    names = {*as_dict(resources.get("limits")), *as_dict(resources.get("requests"))}
    if not names & set(HAMI_RESOURCES):
        return 0, 0
    # The webhook gives a container that names only memory or cores one vGPU
    # (device.go ``mutateContainerResource``).
    nums = _value(resources, VGPU) or 1
    return nums * (_value(resources, GPUMEM) or 0), nums * (_value(resources, GPUCORES) or 0)


def pod_request(pod: Mapping[str, Any]) -> dict[str, int]:
    spec = as_dict(pod.get("spec"))
    app = [container_request(as_dict(c)) for c in as_list(spec.get("containers"))]
    init = [container_request(as_dict(c)) for c in as_list(spec.get("initContainers"))]
    memory = max(sum(m for m, _ in app), max((m for m, _ in init), default=0))
    cores = max(sum(c for _, c in app), max((c for _, c in init), default=0))
    return {GPUMEM: memory, GPUCORES: cores}


def _limits(store: Store, namespace: str) -> dict[str, int]:
    limits: dict[str, int] = {}
    for quota in store.list(RESOURCE_QUOTAS, namespace):
        for key, value in as_dict(as_dict(quota.get("spec")).get("hard")).items():
            name = str(key).removeprefix("limits.")
            if str(key).startswith("limits.") and name in (GPUMEM, GPUCORES):
                limits[name] = int(quantity(value))
    return limits


class HamiWebhook:
    """The quota part of HAMi's mutating webhook: ``Rejected`` when the pod does not fit."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, pod: JsonObject) -> None:
        request = pod_request(pod)
        if not any(request.values()):
            return
        namespace = str(as_dict(pod.get("metadata")).get("namespace") or "default")
        limits = _limits(self.store, namespace)
        if not limits:
            return
        used = dict.fromkeys(limits, 0)
        for other in self.store.list(PODS, namespace):
            spec = as_dict(other.get("spec"))
            phase = as_dict(other.get("status")).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                continue
            for name, amount in pod_request(other).items():
                if name in used:
                    used[name] += amount
        if any(used[name] + request[name] > limit for name, limit in limits.items()):
            raise Rejected(
                f'admission webhook "{WEBHOOK}" denied the request: exceeding resource quota'
            )
