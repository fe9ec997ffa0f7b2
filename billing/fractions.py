"""How much of a GPU a workload holds: GPU-equivalents per flavor mode.

One rule per way a GPU is handed out (``gitops.specs.Flavor.mode``):

- ``whole``: ``nvidia.com/gpu`` counts whole GPUs;
- ``mig``: a MIG instance holds its compute slices out of the seven of the GPU, whatever its
  memory: ``1g.18gb`` of an H200 is 1/7, ``3g.71gb`` 3/7. Slices, not memory, because the
  slices are what another instance can no longer get (a 7-slice GPU cut 4+3 is full);
- ``hami``: a vGPU holds the larger of its memory fraction (``nvidia.com/gpumem`` MiB over
  the card's memory, or ``nvidia.com/gpumem-percentage``) and its compute fraction
  (``nvidia.com/gpucores`` percent). The larger one, because that is what it denies the
  others: a share with half the memory and a tenth of the cores leaves room for one more
  such share, not nine (the dominant-resource rule). HAMi gives a vGPU with no memory
  asked the whole card (the chart's ``defaultMemory: 0``, HAMi v2.10.0
  pkg/device/nvidia/device.go ``GenerateResourceRequests``), so it counts 1; no cores asked
  reserves no compute (``defaultCores: 0``), so it counts by memory;
- ``dra``: a ResourceClaim holds the devices the driver allocated, a whole GPU each (a MIG
  device through DRA counts its slices as above).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

GPU = "nvidia.com/gpu"
VGPU = "nvidia.com/vgpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
MIG_PREFIX = "nvidia.com/mig-"
MIG_SLICES_PER_GPU = 7
MIG_PROFILE = re.compile(r"(?P<slices>[1-7])g\.(?P<gb>\d+)gb")


class FractionError(ValueError):
    """A request that names no GPU amount this module can count."""


def mig_fraction(profile: str) -> Fraction:
    """The GPU share of one MIG instance of ``profile`` (``1g.18gb`` -> 1/7)."""
    match = MIG_PROFILE.match(profile)
    if match is None:
        raise FractionError(f"{profile!r} is not a MIG profile like 1g.18gb")
    return Fraction(int(match["slices"]), MIG_SLICES_PER_GPU)


def hami_fraction(requests: Mapping[str, int], gpu_memory_mib: int) -> Fraction:
    """The GPU share of one HAMi vGPU with these per-container requests."""
    if requests.get(GPUMEM):
        if gpu_memory_mib <= 0:
            raise FractionError("the GPU's memory is unknown, so a gpumem share has no fraction")
        memory = Fraction(requests[GPUMEM], gpu_memory_mib)
    elif requests.get(GPUMEM_PERCENTAGE):
        memory = Fraction(requests[GPUMEM_PERCENTAGE], 100)
    else:
        memory = Fraction(1)
    cores = Fraction(requests.get(GPUCORES, 0), 100)
    return min(Fraction(1), max(memory, cores))


def gpu_equivalents(requests: Mapping[str, int], *, mode: str, gpu_memory_mib: int) -> Fraction:
    """GPU-equivalents a pod holds with ``requests`` (``{resource: amount}``, as
    ``fleet.models.Workload.gpu_requests``) on a node of flavor mode ``mode``."""
    if mode == "hami":
        vgpus = requests.get(VGPU, 0)
        if not vgpus and any(requests.get(r) for r in (GPUMEM, GPUMEM_PERCENTAGE, GPUCORES)):
            # HAMi's webhook gives a container that sets only memory or cores one vGPU.
            vgpus = 1
        return vgpus * hami_fraction(requests, gpu_memory_mib)
    total = Fraction(requests.get(GPU, 0))
    for resource, count in requests.items():
        if resource.startswith(MIG_PREFIX):
            total += count * mig_fraction(resource.removeprefix(MIG_PREFIX))
    return total


def device_fraction(mig_profile: str) -> Fraction:
    """The share of a GPU one DCGM device series stands for: a whole GPU, or a MIG
    instance's slices (dcgm-exporter labels an instance ``GPU_I_PROFILE``)."""
    return mig_fraction(mig_profile) if mig_profile else Fraction(1)
