"""The A10 catalog device: its derived figures recomputed by hand from the cited measurements."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device


@pytest.fixture(scope="module")
def a10():
    return load_device("a10")


def test_tensor_rate_is_the_a40_per_sm_rate_at_the_a10_clock(a10) -> None:
    # A40 datasheet: BF16 149.7 TFLOP/s dense on 84 SMs at 1740 MHz; the A10 has 72 SMs at 1695 MHz.
    per_sm_per_clock = 149.7e12 / (84 * 1740e6)
    assert a10.compute.tensor_flops_per_s["bf16"] == pytest.approx(per_sm_per_clock * 72 * 1695e6, rel=1e-3)
    assert a10.compute.tensor_flops_per_s["tf32"] == pytest.approx(62.5e12)
    assert a10.compute.tensor_flops_per_s["int8"] == pytest.approx(250e12)
    assert "fp8_e4m3" not in a10.compute.tensor_flops_per_s  # no FP8 on Ampere


def test_vector_rates_and_fp64_ratio(a10) -> None:
    assert a10.compute.vector_flops_per_s["fp32"] == pytest.approx(9216 * 2 * 1695e6, rel=1e-3)
    assert a10.compute.vector_flops_per_s["fp64"] == pytest.approx(31.24e12 / 64, rel=1e-3)  # GA102 whitepaper 1/64


def test_l2_is_the_a40_measurement_scaled_by_sms_and_clock(a10) -> None:
    l2 = next(m for m in a10.memory if m.name == "l2")
    assert l2.read_bandwidth_bytes_per_s == pytest.approx(3275e9 / (84 * 1.74e9) * 72 * 1.695e9, rel=1e-3)
    assert l2.write_bandwidth_bytes_per_s == pytest.approx(2117e9 / (84 * 1.74e9) * 72 * 1.695e9, rel=1e-3)
    gddr = next(m for m in a10.memory if m.name == "gddr")
    assert gddr.read_bandwidth_bytes_per_s == pytest.approx(384 * 12.5e9 / 8)


def test_gddr6_efficiencies_replace_the_a100_defaults(a10) -> None:
    a100 = load_device("a100-pcie-40gb")
    assert a10.efficiency.dram_bandwidth_fraction == pytest.approx(670 / 696, abs=5e-4)
    assert a100.efficiency.dram_bandwidth_fraction != a10.efficiency.dram_bandwidth_fraction
    assert a10.efficiency.bandwidth_half_size_bytes == pytest.approx(316e-9 * 670e9, rel=2e-3)
    assert a10.efficiency.simt_gemm_peak_fraction == pytest.approx(29.17 / 35.48, abs=5e-4)


def test_energies_are_the_dynamic_budget_over_the_peak(a10) -> None:
    assert a10.power.idle_w == pytest.approx(0.228 * 150)
    budget = a10.power.tdp_w - a10.power.idle_w
    for dt, peak in a10.compute.tensor_flops_per_s.items():
        assert a10.energy.tensor_j_per_flop[dt] == pytest.approx(budget / peak, rel=1e-3), dt
    for dt, peak in a10.compute.vector_flops_per_s.items():
        assert a10.energy.vector_j_per_flop[dt] == pytest.approx(budget / peak, rel=1e-3), dt
    assert a10.dvfs is None  # no measured sustained clock or GEMM power on an A10
