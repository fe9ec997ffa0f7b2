"""What a GPU share asks of Kubernetes, in each of the places that count it.

One share is counted three times, each with its own names:

- Kueue (``ClusterQueue`` nominal quota): the device-plugin resource names (``nvidia.com/gpu``,
  ``nvidia.com/mig-<profile>``, HAMi's ``nvidia.com/gpumem``/``gpucores``) and, for DRA, the
  name Kueue's ``resources.deviceClassMappings`` gives a DeviceClass. The platform's Kueue
  configuration maps each NVIDIA DeviceClass to a resource *named after the class*::

      resources:
        deviceClassMappings:
        - {name: gpu.nvidia.com, deviceClassNames: [gpu.nvidia.com]}
        - {name: mig.nvidia.com, deviceClassNames: [mig.nvidia.com]}

  (Kueue's ``DynamicResourceAllocation`` feature gate must be on). A DRA GPU is one device
  whatever claims it, so Kueue counts devices; a MIG device counts 1 whatever its profile.
- ``ResourceQuota`` in the namespace: ``requests.<resource>`` for extended resources,
  ``limits.nvidia.com/gpumem|gpucores`` as HAMi's scheduler reads them, and
  ``<class>.deviceclass.resource.k8s.io/devices`` for DRA claims.
- the container of an endpoint: ``resources.limits``/``requests``.

The namespace quota lists every GPU resource the fleet offers, with 0 for the ones the tenant
has no share of: an extended resource missing from a quota is unlimited, not forbidden.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

from gitops.specs import Flavor, FleetSpec, GpuShare

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
DRA_GPU_CLASS = "gpu.nvidia.com"
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
            GPU: share.count,
            GPUMEM: share.count * share.gpumem_mib,
            GPUCORES: share.count * share.gpucores_percent,
        }
    return {dra_device_class(share): share.count}


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
            f"requests.{GPU}": share.count,
            f"requests.{GPUMEM}": memory,
            f"limits.{GPUMEM}": memory,
            f"requests.{GPUCORES}": cores,
            f"limits.{GPUCORES}": cores,
        }
    return {dra_quota_key(dra_device_class(share)): share.count}


def fleet_quota_keys(fleet: FleetSpec) -> list[str]:
    """Every GPU quota key the fleet can be asked for, sorted."""
    keys: set[str] = set()
    for flavor in fleet.flavors:
        if flavor.mode in ("whole", "hami"):
            keys.add(f"requests.{GPU}")
        if flavor.mode == "hami":
            keys.update(
                f"{kind}.{name}" for kind in ("requests", "limits") for name in (GPUMEM, GPUCORES)
            )
        if flavor.mode == "mig":
            keys.update(f"requests.{mig_resource(profile)}" for profile, _ in flavor.mig_profiles)
        if flavor.dra:
            keys.add(dra_quota_key(DRA_MIG_CLASS if flavor.mode == "mig" else DRA_GPU_CLASS))
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
            GPU: str(devices),
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
