"""What a GPU share asks of Kubernetes, in each of the places that count it.

Each unit has its own resource name, so no quota key ever adds up two different things:

- ``nvidia.com/gpu`` is a whole GPU, advertised by NVIDIA's device plugin on whole-GPU pools;
- ``nvidia.com/vgpu`` is a HAMi vGPU slot. HAMi's chart value ``resourceName`` (the device
  config's ``resourceCountName``) is set to it on the fleet, so HAMi's device plugin advertises
  its slots under that name and its webhook and scheduler extender manage it
  (HAMi v2.10.0 charts/hami/values.yaml ``resourceName``,
  charts/hami/templates/scheduler/device-configmap.yaml, pkg/device/nvidia/device.go
  ``ResourceCountName``). Under HAMi's default ``nvidia.com/gpu`` a quota or a Kueue flavor
  could not tell a whole card from a tenth of one;
- ``nvidia.com/gpumem`` (MiB) and ``nvidia.com/gpucores`` (percent) go with every vGPU slot;
  they are never node allocatable (HAMi's scheduler extender lists them
  ``ignoredByScheduler``, charts/hami/templates/_helpers.tpl ``managedResources``);
- ``nvidia.com/mig-<profile>`` is a MIG slice (mixed strategy).

One share is counted three times, each with its own names:

- Kueue (``ClusterQueue`` nominal quota): the device-plugin resource names above and, for DRA,
  the name Kueue's ``resources.deviceClassMappings`` gives a DeviceClass. The platform's Kueue
  configuration maps each NVIDIA DeviceClass to a resource *named after the class*::

      resources:
        deviceClassMappings:
        - {name: gpu.nvidia.com, deviceClassNames: [gpu.nvidia.com]}
        - {name: mig.nvidia.com, deviceClassNames: [mig.nvidia.com]}

  (Kueue's ``KueueDRAIntegration`` feature gate, beta and on by default since v0.18: kueue
  v0.19.2 pkg/features/kube_features.go). A DRA GPU is one device whatever claims it, so Kueue
  counts devices; a MIG device counts 1 whatever its profile.
- ``ResourceQuota`` in the namespace: ``requests.<resource>`` for extended resources,
  ``limits.nvidia.com/gpumem|gpucores`` as HAMi's scheduler reads them, and
  ``<class>.deviceclass.resource.k8s.io/devices`` for DRA claims (``quota_keys``).
- the container of an endpoint: ``resources.limits``/``requests``.

The namespace quota lists every GPU resource the fleet offers, with 0 for the ones the tenant
can never be admitted: an extended resource missing from a quota is unlimited, not forbidden.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from fractions import Fraction

from gitops.specs import Flavor, FleetSpec, GpuShare

GPU = "nvidia.com/gpu"
# HAMi vGPU slots: the fleet sets HAMi's resourceName to this (see the module docstring).
VGPU = "nvidia.com/vgpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
# Every resource HAMi's webhook treats as a HAMi request (pkg/device/nvidia/device.go
# ``mutateContainerResource``): any one of them makes the container a vGPU container.
HAMI_RESOURCES = (VGPU, GPUMEM, GPUMEM_PERCENTAGE, GPUCORES)
DRA_GPU_CLASS = "gpu.nvidia.com"
# The GPU Operator's per-node switch for its device plugin; "false" on the nodes of a DRA pool
# (see ``gitops.specs.Flavor``).
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
DRA_MIG_CLASS = "mig.nvidia.com"
MIG_PROFILE = re.compile(r"([1-7])g\.([1-9][0-9]{0,3})gb")
# A GPU has seven MIG compute slices, whatever its memory.
MIG_SLICES_PER_GPU = 7


def mig_resource(profile: str) -> str:
    return f"nvidia.com/mig-{profile}"


def dra_device_class(share: GpuShare) -> str:
    """The DeviceClass a DRA share claims from: MIG devices when it names a profile."""
    return DRA_MIG_CLASS if share.mig_profile else DRA_GPU_CLASS


def dra_quota_key(device_class: str) -> str:
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


def kueue_resources(share: GpuShare) -> dict[str, int]:
    """Nominal quota one share adds to its flavor in the tenant's ClusterQueue."""
    if share.kind == "whole":
        return {GPU: share.count}
    if share.kind == "mig":
        return {mig_resource(share.mig_profile): share.count}
    if share.kind == "hami":
        return {
            VGPU: share.count,
            GPUMEM: share.count * share.gpumem_mib,
            GPUCORES: share.count * share.gpucores_percent,
        }
    return {dra_device_class(share): share.count}


def hami_slot_caps(shares: Iterable[GpuShare]) -> tuple[int, int] | None:
    """The most ``nvidia.com/gpumem`` (MiB) and ``nvidia.com/gpucores`` (percent) one container
    of the tenant may ask per vGPU: the largest slot of its HAMi shares, or None without any.

    HAMi gives *every* vGPU of a container the memory and cores it names (HAMi v2.10.0
    pkg/device/nvidia/device.go ``GenerateResourceRequests``: one ``Memreq``/``Coresreq`` for
    ``Nums`` devices), while Kueue and the API server's quota charge the container's single
    value. Capped at a slot, a container's memory is at most its slots times a slot, which is
    what Kueue charged it in ``nvidia.com/vgpu``; HAMi's own quota (the ResourceQuota's
    ``limits.`` keys, counted per device, pkg/device/quota.go) bounds the namespace's sum."""
    hami = [share for share in shares if share.kind == "hami"]
    if not hami:
        return None
    return (max(s.gpumem_mib for s in hami), max(s.gpucores_percent for s in hami))


def kueue_limit(share: GpuShare, limit: int) -> dict[str, int]:
    """A borrowing or lending limit given in the share's unit, per Kueue resource."""
    return kueue_resources(dataclasses.replace(share, count=limit))


def quota_usage(share: GpuShare) -> dict[str, int]:
    """What one share adds to the tenant's ResourceQuota."""
    if share.kind == "whole":
        return {f"requests.{GPU}": share.count}
    if share.kind == "mig":
        return {f"requests.{mig_resource(share.mig_profile)}": share.count}
    if share.kind == "hami":
        memory = share.count * share.gpumem_mib
        cores = share.count * share.gpucores_percent
        return {
            f"requests.{VGPU}": share.count,
            f"requests.{GPUMEM}": memory,
            f"limits.{GPUMEM}": memory,
            f"requests.{GPUCORES}": cores,
            f"limits.{GPUCORES}": cores,
        }
    return {dra_quota_key(dra_device_class(share)): share.count}


def quota_keys(resource: str) -> list[str]:
    """The ResourceQuota keys that count what Kueue counts as ``resource`` (none for cpu and
    memory, which the quota bounds by the tenant's own budget)."""
    if resource in (DRA_GPU_CLASS, DRA_MIG_CLASS):
        return [dra_quota_key(resource)]
    if resource in (GPUMEM, GPUCORES):
        # HAMi's scheduler reads the limits.* keys itself (pkg/device/quota.go).
        return [f"requests.{resource}", f"limits.{resource}"]
    if resource.startswith("nvidia.com/"):
        return [f"requests.{resource}"]
    return []


def flavor_capacity(flavor: Flavor, resource: str) -> int:
    """The most of Kueue resource ``resource`` the flavor's pool can ever provide: what a
    queue that borrows it without limit may be admitted at most."""
    profiles = dict(flavor.mig_profiles)
    if flavor.mode == "whole":
        return flavor.gpus if resource == GPU else 0
    if flavor.mode == "mig":
        return profiles.get(resource.removeprefix("nvidia.com/mig-"), 0)
    if flavor.mode == "hami":
        return {
            VGPU: flavor.gpus * flavor.hami_split,
            GPUMEM: flavor.gpus * flavor.gpu_memory_mib,
            GPUCORES: flavor.gpus * 100,
        }.get(resource, 0)
    if resource == dra_flavor_class(flavor):
        return sum(profiles.values()) if profiles else flavor.gpus
    return 0


def dra_flavor_class(flavor: Flavor) -> str:
    """The DeviceClass a DRA pool hands out: its MIG devices when it lists MIG profiles."""
    return DRA_MIG_CLASS if flavor.mig_profiles else DRA_GPU_CLASS


def fleet_quota_keys(fleet: FleetSpec) -> list[str]:
    """Every GPU quota key the fleet can be asked for, sorted."""
    keys: set[str] = set()
    for flavor in fleet.flavors:
        if flavor.mode == "whole":
            keys.add(f"requests.{GPU}")
        if flavor.mode == "hami":
            keys.add(f"requests.{VGPU}")
            keys.update(
                f"{kind}.{name}" for kind in ("requests", "limits") for name in (GPUMEM, GPUCORES)
            )
        if flavor.mode == "mig":
            keys.update(f"requests.{mig_resource(profile)}" for profile, _ in flavor.mig_profiles)
        if flavor.mode == "dra":
            keys.add(dra_quota_key(dra_flavor_class(flavor)))
    return sorted(keys)


def container_resources(share: GpuShare, devices: int) -> dict[str, str]:
    """Device-plugin resources for a container using ``devices`` units of ``share``.

    ``devices`` is GPUs (whole), vGPU slots (HAMi, each with the share's memory and cores) or
    MIG slices. DRA shares have none: their devices come from a ResourceClaim.
    """
    if share.kind == "whole":
        return {GPU: str(devices)}
    if share.kind == "mig":
        return {mig_resource(share.mig_profile): str(devices)}
    if share.kind == "hami":
        # HAMi's gpumem and gpucores are per GPU, not per container.
        return {
            VGPU: str(devices),
            GPUMEM: str(share.gpumem_mib),
            GPUCORES: str(share.gpucores_percent),
        }
    return {}


def mig_slices(profile: str) -> int:
    match = MIG_PROFILE.fullmatch(profile)
    return int(match.group(1)) if match else MIG_SLICES_PER_GPU


def gpu_equivalents(share: GpuShare, flavor: Flavor) -> Fraction:
    """How many physical GPUs the share amounts to, for the per-tenant cap."""
    if share.kind == "hami":
        return Fraction(share.count, max(flavor.hami_split, 1))
    if share.mig_profile:
        return Fraction(share.count * mig_slices(share.mig_profile), MIG_SLICES_PER_GPU)
    return Fraction(share.count)


def share_capacity(share: GpuShare, flavor: Flavor) -> int:
    """The most units of ``share.kind`` the flavor has (GPUs, slots or slices)."""
    if share.kind == "hami":
        return flavor.gpus * flavor.hami_split
    if share.mig_profile:
        return dict(flavor.mig_profiles).get(share.mig_profile, 0)
    return flavor.gpus
