"""The GA100 V-f line (``[dvfs]`` of the A100 files): solved from two sustained cuBLAS burns, checked by two others."""

from __future__ import annotations

import dataclasses
import re

import pytest

from hwmodels.catalog import load_device
from hwmodels.energy import path_sustained_clock, voltage_fraction
from hwmodels.loader import apply_power_mode
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.resolve import load_workload

MHZ = 1e6


def _v(dev, f_hz):
    return float(voltage_fraction(f_hz, dev.dvfs.base_hz, dev.clock.boost_hz, dev.dvfs.base_voltage_fraction))


def _burn_clock(rate, peak):
    # the T4's rule: the clock a burn held = its rate / (datasheet peak x tensor_peak_fraction 0.869) x 1410 MHz
    return rate / (peak * 0.869) * 1410 * MHZ


def _gemm(dev, n, dtype, **opts):
    r = evaluate(load_workload(f"gemm:m={n},n={n},k={n}", dtype=dtype), dev, EvalOptions(**opts))
    (rec,) = [x for x in r.records if x.kind == "matmul"]
    return rec


def test_ga100_line_hand_computed_from_the_two_bf16_burns():
    dev = load_device("a100-sxm4-80gb")
    assert (dev.dvfs.base_hz, dev.clock.boost_hz) == (1095 * MHZ, 1410 * MHZ)
    f_sxm, f_pcie = _burn_clock(270e12, 312e12), _burn_clock(224e12, 312e12)
    assert (f_sxm / MHZ, f_pcie / MHZ) == pytest.approx((1404.13, 1164.91), abs=0.01)
    # V = 0.7803 + 0.2197 (f - 1095) / 315: 0.99591 at 1404.13 MHz, 0.82906 at 1164.91 MHz
    assert _v(dev, f_sxm) == pytest.approx(0.7803 + 0.2197 * 309.13 / 315, abs=1e-5)
    assert _v(dev, f_pcie) == pytest.approx(0.82906, abs=1e-5)
    # the squared ratio is the ratio of the two boards' math energies at their burns (0.510 / 0.736 pJ)
    assert (_v(dev, f_pcie) / _v(dev, f_sxm)) ** 2 == pytest.approx(0.510 / 0.736, rel=2e-4)
    # so both files hold the same energy at 1410 MHz: 0.736 / 0.99591^2 = 0.510 / 0.82906^2 = 0.7421 pJ
    pcie = load_device("a100-pcie-40gb")
    assert dev.energy.tensor_j_per_flop["bf16"] == pcie.energy.tensor_j_per_flop["bf16"] == pytest.approx(0.7421e-12)
    assert 0.736e-12 / _v(dev, f_sxm) ** 2 == pytest.approx(0.7421e-12, rel=1e-3)


def test_the_unused_tf32_burns_land_on_the_line():
    # 130 and 106 TFLOP/s on the same boards: 1352.1 and 1102.5 MHz, 1.671 and 1.117 pJ at those clocks
    dev = load_device("a100-sxm4-80gb")
    f_sxm, f_pcie = _burn_clock(130e12, 156e12), _burn_clock(106e12, 156e12)
    predicted = (_v(dev, f_pcie) / _v(dev, f_sxm)) ** 2
    assert predicted == pytest.approx(0.6700, abs=5e-4)
    assert predicted == pytest.approx(1.117 / 1.671, rel=3e-3)
    sxm_ref, pcie_ref = dev.energy.tensor_j_per_flop["tf32"], load_device("a100-pcie-40gb").energy.tensor_j_per_flop["tf32"]
    assert (sxm_ref, pcie_ref) == (pytest.approx(1.815e-12), pytest.approx(1.810e-12))
    assert sxm_ref == pytest.approx(pcie_ref, rel=3e-3)


@pytest.mark.parametrize("name, limit, rate", [("a100-sxm4-80gb", 400.0, 270.0), ("a100-pcie-40gb", 250.0, 224.0)])
def test_each_board_reproduces_its_bf16_burn_at_its_limit(name, limit, rate):
    rec = _gemm(load_device(name), 8192, "bf16")
    assert 2 * 8192**3 / rec.time_s / 1e12 == pytest.approx(rate, rel=0.01)
    assert rec.energy_j / rec.time_s == pytest.approx(limit, rel=1e-6)


def test_pcie_burn_runs_at_the_clock_the_derivation_assumed():
    rec = _gemm(load_device("a100-pcie-40gb"), 8192, "bf16")
    assert re.search(r"sustained 1\.17 GHz under 250 W", rec.notes), rec.notes


def test_bf16_path_clock_under_a_250w_limit_hand_computed():
    # the tensor math at its full rate draws 0.7421 pJ x 312 T x 0.869 = 201.2 W at 1410 MHz; a 250 W limit
    # leaves 250 - 91.2 = 158.8 W: f / 1410 x V(f)^2 = 0.78925, which holds at 1301.8 MHz (V = 0.92456)
    dev = apply_power_mode(load_device("a100-sxm4-80gb"), "250w")
    f = path_sustained_clock(dev, "bf16", "tensor")
    assert f / MHZ == pytest.approx(1301.8, abs=0.1)
    assert _v(dev, f) == pytest.approx(0.7803 + 0.2197 * (1301.8 - 1095) / 315, abs=1e-4)
    assert f / (1410 * MHZ) * _v(dev, f) ** 2 == pytest.approx(158.8 / 201.204, rel=1e-6)
    # at 400 W the same math fits at 1410 MHz (201 W + 91 W idle)
    assert path_sustained_clock(load_device("a100-sxm4-80gb"), "bf16", "tensor") == 1410 * MHZ


def test_a100_at_250w_runs_faster_and_cheaper_than_the_constant_energy_stretch():
    dev = apply_power_mode(load_device("a100-sxm4-80gb"), "250w")
    dvfs, stretch = _gemm(dev, 8192, "bf16"), _gemm(dataclasses.replace(dev, dvfs=None), 8192, "bf16")
    assert 2 * 8192**3 / dvfs.time_s / 1e12 == pytest.approx(197.5, abs=0.5)
    assert dvfs.time_s < stretch.time_s and dvfs.energy_j < stretch.energy_j
    assert dvfs.energy_j / dvfs.time_s == pytest.approx(250.0, rel=1e-6)


def test_a_kernel_within_the_limit_keeps_the_reference_clock():
    rec = _gemm(load_device("a100-sxm4-80gb"), 4096, "bf16")
    assert not rec.power_capped and "GHz" not in rec.notes
    assert rec.energy_j / rec.time_s < 400.0
