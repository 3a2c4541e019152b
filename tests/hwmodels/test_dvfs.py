"""The DVFS power-cap model: the clock a kernel holds under a board power limit (hwmodels.energy)."""

from __future__ import annotations

import dataclasses
import re
import tomllib

import numpy as np
import pytest

from hwmodels.catalog import load_device
from hwmodels.energy import (
    dvfs_kernel,
    dynamic_energy,
    kernel_energy,
    path_sustained_clock,
    power_capped_time,
    sustained_clock,
    voltage_fraction,
)
from hwmodels.loader import device_from_dict
from hwmodels.spec import SpecError
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.resolve import load_workload

# A simple V-f line for hand computations: 1 GHz base at 0.6 of the boost voltage, 2 GHz boost.
LINE = dict(base_hz=1e9, boost_hz=2e9, base_voltage_fraction=0.6)


def test_voltage_is_linear_between_base_and_boost_and_flat_outside():
    f = np.array([0.5e9, 1e9, 1.25e9, 1.5e9, 2e9, 2.5e9])
    # 0.6 + 0.4 (f - 1 GHz) / 1 GHz, floor 0.6 below base, 1 above boost
    assert voltage_fraction(f, **LINE) == pytest.approx([0.6, 0.6, 0.7, 0.8, 1.0, 1.0])


def test_sustained_clock_hand_computed_on_the_linear_line():
    # 200 W of dynamic power at 2 GHz draws 200 (f / 2 GHz) V(f)^2 at f. At 1.5 GHz: V = 0.8, so
    # 200 x 0.75 x 0.64 = 96 W; with 10 W idle a 106 W limit holds exactly 1.5 GHz.
    f = sustained_clock(200.0, ref_hz=2e9, idle_w=10.0, tdp_w=106.0, **LINE)
    assert f == pytest.approx(1.5e9, rel=1e-12)
    # below base the voltage is at its floor 0.6: at 0.5 GHz, 200 x 0.25 x 0.36 = 18 W (+ 10 W idle)
    assert sustained_clock(200.0, ref_hz=2e9, idle_w=10.0, tdp_w=28.0, **LINE) == pytest.approx(0.5e9, rel=1e-12)
    # a kernel within the budget stays at the reference clock
    assert sustained_clock(80.0, ref_hz=2e9, idle_w=10.0, tdp_w=100.0, **LINE) == 2e9


def test_dvfs_kernel_scales_compute_and_core_energy_but_not_memory():
    # 1 ms of compute, 0.3 ms of memory, 0.2 J of arithmetic and 0.05 J of traffic at 2 GHz.
    k = dvfs_kernel(compute_s=1e-3, memory_s=0.3e-3, fixed_s=0.0, floor_s=0.0, core_j=0.2, other_j=0.05,
                    ref_hz=2e9, idle_w=10.0, tdp_w=100.0, **LINE)
    f = float(k.clock_hz)
    v = 0.6 + 0.4 * (f - 1e9) / 1e9
    assert k.power_capped
    assert k.compute_s == pytest.approx(1e-3 * 2e9 / f, rel=1e-12)
    assert k.time_s == pytest.approx(k.compute_s, rel=1e-12)  # compute-bound at the lower clock
    assert k.core_j == pytest.approx(0.2 * v * v, rel=1e-12)
    assert k.other_j == 0.05
    assert k.avg_power_w == pytest.approx(100.0, rel=1e-9)
    assert k.static_j == pytest.approx(10.0 * k.time_s, rel=1e-12)


def test_higher_power_limit_never_lowers_the_clock_and_boost_caps_it():
    tdp = np.linspace(12.0, 400.0, 200)
    f = sustained_clock(200.0, ref_hz=2e9, idle_w=10.0, tdp_w=tdp, **LINE)
    assert np.all(np.diff(f) >= 0)
    assert np.all(f <= 2e9)
    assert np.all(f[tdp >= 210.0] == 2e9)  # 10 W idle + 200 W fits at the reference clock
    assert np.all(f[tdp < 209.0] < 2e9)


def test_without_a_dynamic_budget_the_kernel_is_not_capped():
    k = dvfs_kernel(compute_s=1e-3, memory_s=0.0, fixed_s=0.0, floor_s=0.0, core_j=1.0, other_j=0.0,
                    ref_hz=2e9, idle_w=50.0, tdp_w=50.0, **LINE)
    assert not k.power_capped and k.clock_hz == 2e9 and k.time_s == 1e-3


def _gemm_record(dev, n, dtype, **opts):
    g = load_workload(f"gemm:m={n},n={n},k={n}", dtype=dtype)
    r = evaluate(g, dev, EvalOptions(**opts))
    (rec,) = [x for x in r.records if x.kind == "matmul"]
    return r, rec


def _uncapped_same_kernel(monkeypatch, dev, n, dtype, rec):
    """The uncapped record of the kernel ``rec`` ran (the GEMM's kernel is chosen under the power limit,
    hwmodels.gpu.GemmPower, so the power-blind choice may be another tile): the candidates cut to its tile."""
    import simulator.lowering.gpu as lg
    from simulator.engines.analytical import clear_kernel_cost_cache

    every = lg.gpu.tile_candidates
    monkeypatch.setattr(lg.gpu, "tile_candidates", lambda *a, **k: tuple(c for c in every(*a, **k) if c.name == rec.tile))
    clear_kernel_cost_cache()
    _, free = _gemm_record(dev, n, dtype, power_cap=False)
    monkeypatch.setattr(lg.gpu, "tile_candidates", every)
    clear_kernel_cost_cache()
    assert (free.tile, free.split_k) == (rec.tile, rec.split_k)
    return free


def test_a_device_without_dvfs_data_keeps_the_constant_energy_stretch(monkeypatch):
    # H100 SXM has no [dvfs]: a capped kernel is stretched to exactly dynamic / (TDP - idle)
    dev = load_device("h100-sxm5-80gb")
    assert dev.dvfs is None
    _, rec = _gemm_record(dev, 8192, "bf16")
    free = _uncapped_same_kernel(monkeypatch, dev, 8192, "bf16", rec)
    assert rec.power_capped
    assert rec.dynamic_energy_j == pytest.approx(free.dynamic_energy_j, rel=1e-12)
    budget = dev.power.tdp_w - dev.power.idle_w
    assert rec.time_s == pytest.approx(free.dynamic_energy_j / budget, rel=1e-12)
    assert "GHz" not in rec.notes
    est = kernel_energy(free.time_s, free.dynamic_energy_j, dev.power.idle_w, dev.power.tdp_w)
    assert rec.time_s == pytest.approx(est.time_s, rel=1e-12)


def test_dropping_the_dvfs_table_restores_the_stretch_on_the_same_board(monkeypatch):
    l4 = load_device("l4")
    plain = dataclasses.replace(l4, dvfs=None)
    _, rec = _gemm_record(plain, 8192, "fp16")
    free = _uncapped_same_kernel(monkeypatch, plain, 8192, "fp16", rec)
    assert rec.time_s == pytest.approx(free.dynamic_energy_j / (plain.power.tdp_w - plain.power.idle_w), rel=1e-12)


def test_8192_fp16_gemm_on_t4_runs_at_its_stated_clock_at_the_tdp(monkeypatch):
    t4 = load_device("t4")
    _, rec = _gemm_record(t4, 8192, "fp16")
    free = _uncapped_same_kernel(monkeypatch, t4, 8192, "fp16", rec)
    m = re.search(r"sustained (\d+(?:\.\d+)?) GHz under 70 W", rec.notes)
    assert rec.power_capped and m, rec.notes
    # the clock the arithmetic ran at, recovered from the stretch of its compute time
    clock = t4.clock.sustained_hz * free.compute_s / rec.compute_s
    assert clock / 1e9 == pytest.approx(float(m.group(1)), abs=0.005)  # the note rounds to 3 digits
    assert t4.dvfs.base_hz < clock < t4.clock.sustained_hz
    # average power at that clock equals the 70 W limit
    assert rec.energy_j / rec.time_s == pytest.approx(70.0, rel=1e-9)
    # and the energy is the V-f model's at that clock, computed independently
    v = voltage_fraction(clock, t4.dvfs.base_hz, t4.clock.boost_hz, t4.dvfs.base_voltage_fraction)
    v_ref = voltage_fraction(t4.clock.sustained_hz, t4.dvfs.base_hz, t4.clock.boost_hz,
                             t4.dvfs.base_voltage_fraction)
    core = 2 * 8192**3 * t4.energy.tensor_j_per_flop["fp16"]
    traffic = free.dynamic_energy_j - core
    assert rec.dynamic_energy_j == pytest.approx(core * (v / v_ref) ** 2 + traffic, rel=1e-9)
    # compute-bound: the time is the stretched compute plus the kernel's fixed latency
    assert rec.time_s == pytest.approx(free.time_s + rec.compute_s - free.compute_s, rel=1e-9)


def test_dvfs_runs_a_capped_kernel_faster_than_the_constant_energy_stretch():
    # a lower clock lowers the voltage and so the energy per FLOP: more work fits under the limit
    t4 = load_device("t4")
    _, dvfs = _gemm_record(t4, 8192, "fp16")
    _, stretch = _gemm_record(dataclasses.replace(t4, dvfs=None), 8192, "fp16")
    assert dvfs.time_s < stretch.time_s and dvfs.dynamic_energy_j < stretch.dynamic_energy_j


def test_t4_reproduces_the_power_capped_gemm_its_tensor_energy_is_derived_from():
    # NVIDIA forum thread (t4.toml @capped): cuBLAS FP16 4096^3 sustains about 24 TFLOP/s at 70 W
    t4 = load_device("t4")
    report, rec = _gemm_record(t4, 4096, "fp16")
    assert 2 * 4096**3 / rec.time_s / 1e12 == pytest.approx(24.0, rel=0.05)
    assert rec.energy_j / rec.time_s == pytest.approx(70.0, rel=1e-9)
    assert "under 70 W" in rec.notes


def test_the_sustained_clock_differs_by_dtype_path_on_t4():
    # from the spec's energies: the tensor path at its full rate draws 3.555 pJ x 65 T x 0.78 = 180 W
    # at 1587 MHz, the SIMT fp32 path 17.85 pJ x 8.1 T x 0.99 = 143 W; the 54 W budget holds the SIMT math
    # near 0.95 GHz and the tensor math lower still
    t4 = load_device("t4")
    tensor = path_sustained_clock(t4, "fp16", "tensor")
    simt = path_sustained_clock(t4, "fp32", "vector")
    assert t4.dvfs.base_hz < tensor < simt < 0.65 * t4.clock.sustained_hz
    ps = t4.energy.vector_j_per_flop["fp32"] * t4.compute.vector_flops_per_s["fp32"] * 0.99
    vs = voltage_fraction(simt, t4.dvfs.base_hz, t4.clock.boost_hz, t4.dvfs.base_voltage_fraction)
    vr = voltage_fraction(t4.clock.sustained_hz, t4.dvfs.base_hz, t4.clock.boost_hz, t4.dvfs.base_voltage_fraction)
    assert t4.power.idle_w + ps * simt / t4.clock.sustained_hz * (vs / vr) ** 2 == pytest.approx(70.0, rel=1e-3)
    # int8 draws the same power at its peak (its energy is fp16's x 65/130, rounded to 4 digits in the file)
    assert path_sustained_clock(t4, "int8", "tensor") == pytest.approx(tensor, rel=1e-3)
    # the power balance at that clock, evaluated directly: idle + P (f / f_ref) (V(f) / V(f_ref))^2 = TDP
    p = t4.energy.tensor_j_per_flop["fp16"] * t4.compute.tensor_flops_per_s["fp16"] * \
        t4.efficiency.tensor_peak_fraction
    v = voltage_fraction(tensor, t4.dvfs.base_hz, t4.clock.boost_hz, t4.dvfs.base_voltage_fraction)
    v_ref = voltage_fraction(t4.clock.sustained_hz, t4.dvfs.base_hz, t4.clock.boost_hz,
                             t4.dvfs.base_voltage_fraction)
    assert t4.power.idle_w + p * tensor / t4.clock.sustained_hz * (v / v_ref) ** 2 == pytest.approx(70.0, rel=1e-9)


def test_path_sustained_clock_refuses_unknown_paths():
    t4 = load_device("t4")
    with pytest.raises(SpecError, match=r"t4: compute.tensor_flops_per_s.bf16: missing; got 'bf16'"):
        path_sustained_clock(t4, "bf16")
    with pytest.raises(SpecError, match=r"unknown unit; got 'simd'"):
        path_sustained_clock(t4, "fp32", "simd")


def test_dynamic_energy_split_is_unchanged_for_the_engine():
    # the engine adds arithmetic and traffic energy separately; the sum is the old single call
    a = dynamic_energy(1e9, 2e-12, 1e8, 5e-12, {"dram": 1e6, "l2": 2e6}, {"dram": 1e-11, "l2": 1e-12})
    b = dynamic_energy(1e9, 2e-12, 1e8, 5e-12, {}, {}) + dynamic_energy(0, 0, 0, 0, {"dram": 1e6, "l2": 2e6},
                                                                     {"dram": 1e-11, "l2": 1e-12})
    assert a == pytest.approx(b, rel=1e-15)


def _t4_dict():
    from hwmodels.catalog import CATALOG_DIR

    with open(f"{CATALOG_DIR}/devices/t4.toml", "rb") as fh:
        return tomllib.load(fh)


def test_loader_reads_the_dvfs_table_with_sources():
    t4 = load_device("t4")
    assert t4.dvfs.base_hz == 585e6 and t4.dvfs.base_voltage_fraction == pytest.approx(0.6723)
    assert "585MHz" in t4.source_of("dvfs.base_hz").source
    assert "0.718 V" in t4.source_of("dvfs.base_voltage_fraction").source


def test_loader_locates_bad_dvfs_values():
    data = _t4_dict()
    data["dvfs"]["base_hz"] = {"value": "1700 MHz", "source": "test"}
    data["dvfs"]["base_voltage_fraction"] = {"value": 1.2, "source": "test"}
    with pytest.raises(SpecError) as e:
        device_from_dict(data, where="t4.toml")
    msg = str(e.value)
    assert "t4.toml: dvfs.base_voltage_fraction: fraction above 1; got 1.2" in msg
    data["dvfs"]["base_voltage_fraction"] = {"value": 0.7, "source": "test"}
    with pytest.raises(SpecError, match=r"t4.toml: dvfs.base_hz: base clock not below the sustained clock; "
                                        r"got 1.7 GHz; expected < clock.sustained_hz"):
        device_from_dict(data, where="t4.toml")
    data["dvfs"] = {"base_hz": {"value": "585 MHz", "source": "test"}, "base_volt_fraction": 0.7}
    with pytest.raises(SpecError, match=r"dvfs.base_volt_fraction: unknown key.*did you mean 'base_voltage_fraction'"):
        device_from_dict(data, where="t4.toml")


def test_a_kernel_without_arithmetic_over_the_limit_is_stretched_at_constant_energy():
    # 0.2 J of traffic in 1 ms is 200 W on a 100 W board (10 W idle): no core clock can help, so the
    # kernel takes 0.2 J / 90 W, as the first-order cap does
    k = dvfs_kernel(compute_s=0.0, memory_s=1e-3, fixed_s=0.0, floor_s=0.0, core_j=0.0, other_j=0.2,
                    ref_hz=2e9, idle_w=10.0, tdp_w=100.0, **LINE)
    assert k.power_capped and k.clock_hz == 2e9
    assert k.time_s == pytest.approx(0.2 / 90.0, rel=1e-12)
    assert k.avg_power_w == pytest.approx(100.0, rel=1e-12)
    t, capped = power_capped_time(1e-3, 0.2, 10.0, 100.0)
    assert capped and k.time_s == pytest.approx(t, rel=1e-12)


@pytest.mark.parametrize("case", [
    dict(compute_s=1e-3, memory_s=0.3e-3, fixed_s=2e-6, floor_s=0.0, core_j=0.2, other_j=0.05, tdp_w=100.0),
    dict(compute_s=1e-3, memory_s=2e-3, fixed_s=0.0, floor_s=0.0, core_j=0.1, other_j=0.15, tdp_w=90.0),
    dict(compute_s=1e-6, memory_s=0.0, fixed_s=0.0, floor_s=5e-6, core_j=1e-3, other_j=0.0, tdp_w=100.0),
    dict(compute_s=0.0, memory_s=1e-3, fixed_s=0.0, floor_s=0.0, core_j=0.0, other_j=0.2, tdp_w=100.0),
    dict(compute_s=1e-3, memory_s=0.0, fixed_s=0.0, floor_s=0.0, core_j=0.05, other_j=0.0, tdp_w=100.0),
])
def test_scalar_and_array_solves_agree(case):
    # the engine's float path and the broadcasting path (sweeps) are the same model
    common = dict(ref_hz=2e9, idle_w=10.0, **LINE)
    s = dvfs_kernel(**case, **common)
    a = dvfs_kernel(**{k: np.array([v]) for k, v in case.items()}, **common)
    for name in ("clock_hz", "time_s", "compute_s", "core_j", "other_j", "static_j"):
        assert float(np.asarray(getattr(a, name))[0]) == pytest.approx(getattr(s, name), rel=1e-12, abs=1e-300), name
    assert bool(np.asarray(a.power_capped)[0]) == s.power_capped


def test_l40s_reproduces_the_gemms_its_tensor_energies_are_derived_from():
    """l40s.toml @aicgemm (aiconfigurator's TensorRT-LLM GEMM tables on an L40S): the bf16 4096^3 GEMM ran at
    251.9 TFLOP/s; the fp8 4096^3 Linear took 0.3661 ms, 0.0316 ms of it dynamic activation quantisation measured on
    its own (compute_scale 0.0219 + scale_matrix 0.0097 ms), so the GEMM alone ran at 410.9. The tensor energies are
    derived from them at the 350 W limit; the same tables' m = 2048, n = 12288, k = 4096 rows are the cross-check."""
    l40s = load_device("l40s")
    _, fp8 = _gemm_record(l40s, 4096, "fp8_e4m3")
    gemm_only = 0.36611413955688477e-3 - 0.021914e-3 - 0.009694e-3
    assert fp8.time_s == pytest.approx(gemm_only, rel=2e-3)
    assert fp8.energy_j / fp8.time_s == pytest.approx(350.0, rel=1e-9)  # held at the limit
    _, bf16 = _gemm_record(l40s, 4096, "bf16")
    assert 2 * 4096**3 / bf16.time_s / 1e12 == pytest.approx(251.9, rel=0.02)
    assert bf16.energy_j / bf16.time_s <= 350.0 * (1 + 1e-9)
    from simulator.engines.analytical import evaluate
    from workloads.micro import build_micro

    # the kernel chosen under the 350 W limit (hwmodels.gpu.GemmPower) is a 256 x 128 tile where the power-blind
    # choice was 128 x 128: bf16 moves from -4% to +2.7% of the measured rate, fp8 from +5% to +10% (the fp8 rate
    # of this shape, 9% below the 4096^3 one the energy is derived from, is not reproduced: recorded, not explained)
    for dt, measured_s, ratio in (("bf16", 0.8582719961802164e-3, 1.027),  # 240.2 TFLOP/s
                                  ("fp8_e4m3", 0.5737813313802084e-3 - 0.014478e-3 - 0.005764e-3, 1.100)):  # 372.4
        rec = evaluate(build_micro("gemm:m=2048,n=12288,k=4096", dt), l40s).records[0]
        assert measured_s / rec.time_s == pytest.approx(ratio, abs=0.005), dt
    # the old rule, (TDP - idle) / peak, let the fp8 GEMM run far above the measured rate within 350 W
    old = dataclasses.replace(l40s, energy=dataclasses.replace(
        l40s.energy, tensor_j_per_flop={**l40s.energy.tensor_j_per_flop,
                                        "fp8_e4m3": (l40s.power.tdp_w - l40s.power.idle_w) / 733e12}))
    _, fast = _gemm_record(old, 4096, "fp8_e4m3")
    assert 2 * 4096**3 / fast.time_s / 1e12 > 450.0
