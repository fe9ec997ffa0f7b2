"""The fraction rules: how much of a GPU a MIG slice, a HAMi share or a DRA claim holds."""

from __future__ import annotations

from fractions import Fraction

import pytest

from billing.fractions import (
    FractionError,
    device_fraction,
    gpu_equivalents,
    hami_fraction,
    mig_fraction,
)

H200_MIB = 143771


def test_it_counts_a_mig_slice_by_its_compute_slices_out_of_seven() -> None:
    assert mig_fraction("1g.18gb") == Fraction(1, 7)
    assert mig_fraction("2g.35gb") == Fraction(2, 7)
    assert mig_fraction("3g.71gb") == Fraction(3, 7)
    assert mig_fraction("7g.141gb") == 1
    assert device_fraction("1g.18gb") == Fraction(1, 7)
    assert device_fraction("") == 1


def test_it_refuses_a_profile_it_cannot_read() -> None:
    with pytest.raises(FractionError, match="not a MIG profile"):
        mig_fraction("big")


def test_it_counts_whole_and_mig_requests() -> None:
    assert gpu_equivalents({"nvidia.com/gpu": 8}, mode="whole", gpu_memory_mib=H200_MIB) == 8
    mixed = {"nvidia.com/mig-1g.18gb": 2, "nvidia.com/mig-3g.71gb": 1}
    assert gpu_equivalents(mixed, mode="mig", gpu_memory_mib=H200_MIB) == Fraction(5, 7)


def test_it_counts_a_hami_share_by_its_larger_fraction() -> None:
    # The demo's chat endpoint: 24000 MiB is a sixth of an H200, 30% of the cores is more.
    share = {"nvidia.com/vgpu": 1, "nvidia.com/gpumem": 24000, "nvidia.com/gpucores": 30}
    assert hami_fraction(share, H200_MIB) == Fraction(3, 10)
    assert gpu_equivalents(share, mode="hami", gpu_memory_mib=H200_MIB) == Fraction(3, 10)
    # Memory-heavy: half the card's memory and a tenth of its cores holds half of it.
    heavy = {"nvidia.com/vgpu": 2, "nvidia.com/gpumem": 71885, "nvidia.com/gpucores": 10}
    assert gpu_equivalents(heavy, mode="hami", gpu_memory_mib=H200_MIB) == 2 * Fraction(
        71885, H200_MIB
    )


def test_it_reads_hami_defaults_as_hami_does() -> None:
    # No memory asked: HAMi hands the vGPU the whole card's memory.
    assert gpu_equivalents({"nvidia.com/vgpu": 1}, mode="hami", gpu_memory_mib=H200_MIB) == 1
    # Only a memory percentage: the webhook adds one vGPU; no cores reserve none.
    percent = {"nvidia.com/gpumem-percentage": 25}
    assert gpu_equivalents(percent, mode="hami", gpu_memory_mib=H200_MIB) == Fraction(1, 4)
    # Never more than the card.
    assert hami_fraction({"nvidia.com/gpucores": 150}, H200_MIB) == 1


def test_it_needs_the_card_memory_for_a_memory_share() -> None:
    with pytest.raises(FractionError, match="memory is unknown"):
        hami_fraction({"nvidia.com/gpumem": 1000}, 0)
