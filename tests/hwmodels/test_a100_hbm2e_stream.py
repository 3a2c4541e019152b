"""The A100 80 GB boards' streaming figure: their own HBM2e triad, not the 40 GB board's HBM2 one."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from hwmodels.gpu import gpu_params


def test_a100_80gb_streams_at_its_own_hbm2e_triad() -> None:
    # RRZE gpu-benches gpu-stream/a100_80.txt, last row (100% occupancy): triad 1794 GB/s of 2039 GB/s.
    sxm = load_device("a100-sxm4-80gb")
    assert sxm.efficiency.dram_bandwidth_fraction == pytest.approx(1794 / 2039, abs=5e-4)
    # the 40 GB boards keep the HBM2 triad of gpu-stream/a100_40.txt (1358 of 1555 GB/s)
    for name in ("a100-sxm4-40gb", "a100-pcie-40gb"):
        assert load_device(name).efficiency.dram_bandwidth_fraction == pytest.approx(1358 / 1555, abs=5e-4)


def test_a100_pcie_80gb_takes_the_hbm2e_fraction_at_its_own_peak() -> None:
    pcie, sxm = load_device("a100-pcie-80gb"), load_device("a100-sxm4-80gb")
    assert pcie.efficiency.dram_bandwidth_fraction == sxm.efficiency.dram_bandwidth_fraction
    p = gpu_params(pcie, "fp16")
    # the fraction applies to the PCIe board's own datasheet rate, 1935 GB/s: 0.880 x 1935 = 1702 GB/s
    assert p.dram_bytes_per_s * p.dram_fraction == pytest.approx(1935e9 * 1794 / 2039, rel=1e-3)
