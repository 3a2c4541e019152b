"""Calibrator: recovers known factors from synthetic measurements, error summaries, overlays and their errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hwmodels.catalog import load_device
from hwmodels.spec import SpecError
from simulator.calibration import (
    CalibrationError,
    Calibrator,
    apply_calibration,
    load_calibration,
    summarize_errors,
    write_overlay,
)
from simulator.calibration.measurements import MeasurementSet

DEV = "h100-sxm5-80gb"


def toy_predict(graph, system) -> float:  # noqa: ANN001
    """time = flops / (bf16 peak * tensor_peak_fraction) + launch overhead (a closed form to fit)."""
    dev = getattr(system, "device", system)
    return graph.flops / (dev.compute.tensor_flops_per_s["bf16"] * dev.efficiency.tensor_peak_fraction) \
        + dev.efficiency.launch_overhead_s


def _measurements(frac: float, overhead: float, noise: float = 0.0) -> MeasurementSet:
    dev = load_device(DEV)
    rows = ["id,workload,dtype,device,median_s"]
    rng = np.random.default_rng(0)
    for i, s in enumerate((64, 128, 256, 512, 1024, 2048, 4096, 8192)):
        t = 2 * s**3 / (dev.compute.tensor_flops_per_s["bf16"] * frac) + overhead
        t *= math.exp(noise * rng.standard_normal())
        rows.append(f'g{i},"gemm:m={s},n={s},k={s}",bf16,{DEV},{t!r}')
    return MeasurementSet.from_csv_text("\n".join(rows) + "\n", devices=[DEV])


def test_fit_recovers_known_factors() -> None:
    ms = _measurements(0.7, 5e-6)
    cal = Calibrator(["efficiency.tensor_peak_fraction", "efficiency.launch_overhead_s"], predict=toy_predict,
                     regularization=0.0)
    cal.fit(ms, load_device(DEV))
    assert cal.params_["efficiency.tensor_peak_fraction"] == pytest.approx(0.7, rel=1e-3)
    assert cal.params_["efficiency.launch_overhead_s"] == pytest.approx(5e-6, rel=1e-3)
    assert cal.after_.mape < 0.1 < cal.before_.mape
    np.testing.assert_allclose(cal.predict(ms), ms.median_s, rtol=1e-3)
    assert cal.defaults_["efficiency.tensor_peak_fraction"] == load_device(DEV).efficiency.tensor_peak_fraction


def test_regularization_pulls_towards_defaults() -> None:
    ms = _measurements(0.5, 5e-6, noise=0.05)
    free = Calibrator(["efficiency.tensor_peak_fraction"], predict=toy_predict, regularization=0.0).fit(ms, load_device(DEV))
    tied = Calibrator(["efficiency.tensor_peak_fraction"], predict=toy_predict, regularization=10.0).fit(ms, load_device(DEV))
    d = load_device(DEV).efficiency.tensor_peak_fraction
    assert abs(math.log(tied.params_["efficiency.tensor_peak_fraction"] / d)) < \
        abs(math.log(free.params_["efficiency.tensor_peak_fraction"] / d))


def test_error_summary_hand_computed() -> None:
    ms = MeasurementSet.from_csv_text(
        "id,category,workload,dtype,device,median_s\n"
        'a,gemm,"gemm:m=8,n=8,k=8",fp32,host,1.0\n'
        'b,gemm,"gemm:m=16,n=8,k=8",fp32,host,2.0\n'
        'c,copy,"copy:bytes=64",fp32,host,4.0\n', devices=["host"])
    s = summarize_errors(np.array([1.1, 1.0, 4.0]), ms)
    assert s.n == 3
    assert s.mape == pytest.approx((10 + 50 + 0) / 3)
    assert s.median_ape == pytest.approx(10)
    assert s.max_ape == pytest.approx(50)
    assert s.bias == pytest.approx(100 * ((1.1 * 0.5 * 1.0) ** (1 / 3) - 1))
    assert s.worst[0][0] == "b"
    assert s.by_class["gemm"].n == 2 and s.by_class["copy"].mape == 0


def test_overlay_round_trip_and_apply(tmp_path: Path) -> None:
    ms = _measurements(0.6, 8e-6)
    cal = Calibrator(["efficiency.tensor_peak_fraction", "efficiency.launch_overhead_s"], predict=toy_predict)
    cal.fit(ms, load_device(DEV))
    out = tmp_path / "ov.toml"
    write_overlay(cal.overlay(measurements_file="m.csv"), out)
    data = load_calibration(out)
    assert data["calibration"]["measurements_sha256"] == ms.content_hash()
    assert data["calibration"]["errors"]["train"]["after"]["n"] == len(ms)
    spec = apply_calibration(load_device(DEV), out)
    assert spec.efficiency.tensor_peak_fraction == pytest.approx(cal.params_["efficiency.tensor_peak_fraction"])
    assert spec.efficiency.launch_overhead_s == pytest.approx(cal.params_["efficiency.launch_overhead_s"])
    assert spec.source_of("efficiency.tensor_peak_fraction").source.startswith("measured: calibrated")


def test_overlay_text_round_trips_awkward_values() -> None:
    import tomllib

    from simulator.calibration.fit import overlay_text

    overlay = {"schema": "nodeperf.calibration/1", "source": 'measured: "run 3"\\notes\nline 2',
               "values": {"memory.hbm.read_bandwidth_bytes_per_s": 2.9876543210987654e12,
                          "efficiency.launch_overhead_s": 4.1e-06},
               "calibration": {"params": ["a.b", "c"], "errors": {"train": {"after": {"n": 3, "mape": 0.1}}},
                               "held_out": {"max": math.inf}}}
    text = overlay_text(overlay)
    assert text.startswith("# nodeperf calibration overlay: apply with `--calibration FILE`")
    assert tomllib.loads(text) == overlay  # floats bit for bit, quotes, backslashes, newlines, dotted keys, inf


def test_overlay_unknown_field_names_near_match(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('schema = "nodeperf.calibration/1"\nsource = "measured: x"\n'
                 '[values]\n"efficiency.tensor_peak_fractoin" = 0.5\n')
    with pytest.raises(SpecError) as e:
        apply_calibration(load_device(DEV), p)
    assert str(p) in str(e.value) and "did you mean 'tensor_peak_fraction'" in str(e.value)


def test_overlay_for_another_device_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "other.toml"
    p.write_text('schema = "nodeperf.calibration/1"\nsource = "measured: x"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n'
                 '[calibration]\ndevice = "a100-sxm4-80gb"\n')
    with pytest.raises(CalibrationError, match="fitted on another device"):
        apply_calibration(load_device(DEV), p)


def test_non_convergence_is_an_error() -> None:
    ms = _measurements(0.3, 5e-6, noise=0.02)
    cal = Calibrator(["efficiency.tensor_peak_fraction", "efficiency.launch_overhead_s"], predict=toy_predict,
                     max_nfev=1)
    with pytest.raises(CalibrationError, match="did not converge"):
        cal.fit(ms, load_device(DEV))
    assert not hasattr(cal, "params_")


def test_bad_param_path() -> None:
    with pytest.raises(SpecError, match="did you mean"):
        Calibrator(["efficiency.tensor_peak_fractio"], predict=toy_predict).fit(_measurements(0.5, 1e-6), load_device(DEV))


def test_cpu_default_params_cover_the_cpu_fields_with_bounds() -> None:
    import dataclasses

    from hwmodels.spec import CpuSpec
    from simulator.calibration.fit import DEFAULT_PARAMS, _levels_present, _params
    from tests.simulator.lowering.test_lowering_cpu import cpu_device

    dev = cpu_device(reference_gemm_flops_per_s={"fp16": 2e9}, row_moments_s=1e-10)
    params = {p.path: p for p in _params(_levels_present(DEFAULT_PARAMS["cpu"], dev), dev)}
    for f in dataclasses.fields(CpuSpec):
        if f.name not in ("special_function_s", "reference_gemm_flops_per_s"):
            assert f"cpu.{f.name}" in params, f.name
    assert {"cpu.special_function_s.exp", "cpu.special_function_s.tanh"} <= set(params)
    assert "cpu.reference_gemm_flops_per_s.fp16" in params and "cpu.reference_gemm_flops_per_s.bf16" not in params
    for p in params.values():
        from hwmodels.spec import get_path

        assert 0 < p.lower <= get_path(dev, p.path) <= p.upper, p
    # relative bounds resolve against the default: "x0.1".."x300" of 10 us
    lib = params["cpu.library_call_overhead_s"]
    assert (lib.lower, lib.upper) == pytest.approx((1e-6, 3e-3))
    with pytest.raises(SpecError, match="expected a number or 'x<factor>'"):
        _params({"cpu.strided_copy_run_s": ("y2", "x3")}, dev)


def test_cpu_calibration_recovers_a_library_fraction_and_overhead() -> None:
    """Synthetic measurements from a CPU spec with known fields: the fit finds them from the defaults."""
    import dataclasses

    from simulator.calibration import default_predict
    from tests.simulator.lowering.test_lowering_cpu import cpu_device
    from workloads.resolve import load_workload

    truth = cpu_device(dnn_peak_fraction=0.6, library_call_overhead_s=12e-6)
    start = cpu_device()
    rows = ["id,workload,dtype,device,median_s"]
    for i, s in enumerate((32, 64, 128, 256, 512)):
        w = f"gemm:m={s},n={s},k={s}"
        rows.append(f'g{i},"{w}",bf16,toy-cpu,{default_predict(load_workload(w, dtype="bf16"), truth)!r}')
    ms = MeasurementSet.from_csv_text("\n".join(rows) + "\n", devices=["toy-cpu"])
    cal = Calibrator(["cpu.dnn_peak_fraction", "cpu.library_call_overhead_s"], regularization=0.0).fit(ms, start)
    assert cal.params_["cpu.dnn_peak_fraction"] == pytest.approx(0.6, rel=1e-3)
    assert cal.params_["cpu.library_call_overhead_s"] == pytest.approx(12e-6, rel=1e-3)
    assert dataclasses.replace(start).cpu.dnn_peak_fraction == 0.8  # the input spec is untouched


def _predict_with_kernel_time(graph, system) -> float:  # noqa: ANN001
    """A toy predictor: bf16 GEMM FLOPs at 0.8 of the tensor peak plus one kernel_device_time_s."""
    d = getattr(system, "device", system)
    return graph.flops / (d.compute.tensor_flops_per_s["bf16"] * 0.8) + d.efficiency.kernel_device_time_s


def _gemms_with_kernel_time(dev, kernel_s: float):  # noqa: ANN001, ANN202
    """(predictor, measurements): six square bf16 GEMMs on ``dev`` timed by the toy predictor with a
    per-kernel time of ``kernel_s``, for fits that must recover it."""
    rows = ["id,workload,dtype,device,median_s"]
    for i, s in enumerate((128, 256, 512, 1024, 2048, 4096)):
        t = 2 * s**3 / (dev.compute.tensor_flops_per_s["bf16"] * 0.8) + kernel_s
        rows.append(f'g{i},"gemm:m={s},n={s},k={s}",bf16,{DEV},{t!r}')
    return _predict_with_kernel_time, MeasurementSet.from_csv_text("\n".join(rows) + "\n", devices=[DEV])


def test_a_zero_default_additive_time_is_fitted_on_a_linear_scale() -> None:
    """An additive time whose default is 0 (a device without a kernel_device_time_s figure) is fitted on a
    linear scale from 0; the fit recovers a known per-kernel time."""
    from hwmodels.spec import replace_path

    dev = replace_path(load_device(DEV), "efficiency.kernel_device_time_s", 0.0)

    predict, ms = _gemms_with_kernel_time(dev, 3e-6)
    cal = Calibrator({"efficiency.kernel_device_time_s": (0.0, 20e-6)}, predict=predict, regularization=0.0)
    cal.fit(ms, dev)
    assert cal.params_["efficiency.kernel_device_time_s"] == pytest.approx(3e-6, rel=1e-3)
    assert cal.defaults_["efficiency.kernel_device_time_s"] == 0.0
    # the default GPU bounds ("x0.01" of the default, up to 20 us) take a zero default on the linear scale too
    from simulator.calibration.fit import DEFAULT_PARAMS

    bounds = {"efficiency.kernel_device_time_s": DEFAULT_PARAMS["gpu"]["efficiency.kernel_device_time_s"]}
    cal = Calibrator(bounds, predict=predict, regularization=0.0).fit(ms, dev)
    assert cal.bounds_["efficiency.kernel_device_time_s"] == (0.0, 20e-6)
    assert cal.params_["efficiency.kernel_device_time_s"] == pytest.approx(3e-6, rel=1e-3)
    with pytest.raises(SpecError, match=r"default must be positive to fit on a log scale \(or 0 with bounds"):
        Calibrator(["efficiency.kernel_device_time_s"], predict=predict).fit(ms, dev)


def test_evaluate_adds_the_per_kernel_device_time() -> None:
    """A kernel above the launch floor and below the power cap takes exactly kernel_device_time_s longer."""
    from hwmodels.spec import replace_path
    from simulator.engines.analytical import evaluate
    from workloads.micro import build_micro

    dev = replace_path(load_device(DEV), "efficiency.kernel_device_time_s", 0.0)
    for spec in ("gemm:m=1024,n=1024,k=1024", "copy:bytes=268435456"):
        g = build_micro(spec)
        base = evaluate(g, dev).records[0]
        plus = evaluate(g, replace_path(dev, "efficiency.kernel_device_time_s", 4e-6)).records[0]
        assert not base.power_capped and not plus.power_capped
        assert base.time_s > dev.efficiency.launch_overhead_s
        assert plus.time_s - base.time_s == pytest.approx(4e-6, rel=1e-9)


def test_the_default_per_kernel_device_time_is_fitted_from_its_sourced_value() -> None:
    """With a sourced nonzero default (H100: 1.3 us), the default GPU parameters fit kernel_device_time_s on a
    log scale between 1% of it and 20 us, and recover a known per-kernel time."""
    from simulator.calibration.fit import DEFAULT_PARAMS

    dev = load_device(DEV)
    assert dev.efficiency.kernel_device_time_s == pytest.approx(1.3e-6)

    predict, ms = _gemms_with_kernel_time(dev, 3e-6)
    bounds = {"efficiency.kernel_device_time_s": DEFAULT_PARAMS["gpu"]["efficiency.kernel_device_time_s"]}
    cal = Calibrator(bounds, predict=predict, regularization=0.0).fit(ms, dev)
    assert cal.bounds_["efficiency.kernel_device_time_s"] == pytest.approx((1.3e-8, 20e-6))
    assert cal.params_["efficiency.kernel_device_time_s"] == pytest.approx(3e-6, rel=1e-3)


def test_the_per_kernel_device_time_counts_every_kernel_of_an_op_but_not_a_measured_call() -> None:
    """A fused-attention backward is three kernels (preprocess, main, dQ convert): it takes three times the
    per-kernel device time; a collective, whose fabric time is a whole measured call, takes none."""
    from hwmodels.spec import replace_path
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware
    from workloads.micro import build_micro

    dev = load_device(DEV)
    g = build_micro("attention:b=4,h=16,s=1024,d=128,causal=1,bwd=1")
    zero = evaluate(g, replace_path(dev, "efficiency.kernel_device_time_s", 0.0)).records[0]
    some = evaluate(g, replace_path(dev, "efficiency.kernel_device_time_s", 2e-6)).records[0]
    assert zero.kernels == some.kernels == 3
    assert not zero.power_capped and not some.power_capped
    assert some.time_s - zero.time_s == pytest.approx(3 * 2e-6, rel=1e-9)
    dgx = load_hardware("dgx-h100")
    c = build_micro("allreduce:bytes=1048576")
    t0 = evaluate(c, replace_path(dgx, "device.efficiency.kernel_device_time_s", 0.0)).totals.latency_s
    t1 = evaluate(c, replace_path(dgx, "device.efficiency.kernel_device_time_s", 5e-6)).totals.latency_s
    assert t0 == t1 > 0
