"""TensorRT-LLM's bf16 GEMMs on five GPUs as aiconfigurator measured them: data the catalog never saw.

hwmodels/measurements/gemm_kernels.csv holds 30 shapes per GPU (M = 1 ... 8192 against the N x K of
7B-class linear layers and 8192^2). The bounds are the achieved errors, so a change to the GEMM model
that moves them shows here; docs/accuracy.md reads them: the model is slow at medium M on the Hopper
GPUs and the B200 (the B200's GEMMs bound by its L2 figure); the A100's, at the cp.async tile rate, are
within a few percent of the measurement from M = 128 up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import run_options
from simulator.hardware import known_devices

DATA = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "gemm_kernels.csv"


@pytest.fixture(scope="module")
def errors() -> dict[str, dict[int, list[float]]]:
    from simulator.calibration.kernel_validation import validate_kernels

    out: dict[str, dict[int, list[float]]] = {}
    for r in validate_kernels({"gemm": DATA})["rows"]:
        rows = int(r["workload"].split("m=")[1].split(",")[0])
        out.setdefault(r["device"], {}).setdefault(rows, []).append(r["error_pct"])
    return out


def test_rows_are_predicted_as_the_collector_ran_them():
    ms = MeasurementSet.load(DATA, devices=known_devices())
    assert len(ms) == 150 and {m.device for m in ms} == {"h100-sxm5-80gb", "h200-sxm-141gb", "b200", "l40s",
                                                        "a100-sxm4-80gb"}
    opts, overrides = run_options({"source": ms[0].source, "notes": ms[0].notes, "dtype": "bf16"})
    assert opts.cuda_graphs and not overrides  # timed by CUDA-graph replay


# achieved MAPE per GPU, rounded up (the A100 at its cp.async L2 tile rate: 6.6%; 23.3% at the plain-load rate).
# With the kernel chosen under the power limit (hwmodels.gpu.GemmPower) and the burn-derived tensor energies
# re-derived with it: H100 9.5 -> 9.5%, H200 15.0 -> 14.2%,
# A100 6.6 -> 6.5%, L40S 18.9 -> 20.6% (its 350 W limit now takes lower-traffic kernels that are priced faster)
# The B200 streaming at its own measured rate (0.850 of 8 TB/s, not the H100's 0.821): B200 31.8 -> 32.6%
# (bias +12.8 -> +11.7%: rows priced fast get faster; docs/accuracy.md "The B200's streaming rate").
# The A100's DRAM at gpu-stream's triad (0.873, was MT4G's read kernel 0.758): A100 6.5 -> 9.3% (bias -4.4 -> -7.7%),
# its M = 16 and M = 128 weight-streaming GEMMs 10-23% fast: cuBLAS's tensor-core kernels at small M stream below a
# plain streaming kernel, as its M = 1 GEMV does (efficiency.gemv_bandwidth_fraction); with that rate for library
# GEMMs of up to 64 rows (cuBLAS M = 16 and 64 measured, ml-explore/mlx PR #3255): A100 9.3 -> 7.5%.
# The Hopper DRAM at gpu-stream's triad (H100 SXM 0.946 from the GH200's HBM3, H200 its own cast 0.880; both were
# MT4G's read kernel 0.821): H100 9.5 -> 13.5% (bias +6.5 -> +0.2%), H200 14.2 -> 15.3%; the H100's M = 1 GEMVs
# go from within 5% to 14% fast: cuBLAS's GEMV streams below the triad, as on the A100, and no Hopper GEMV
# measurement sets efficiency.gemv_bandwidth_fraction there (docs/accuracy.md "The Hopper streaming figures").
# The H100 SXM's library GEMV and skinny GEMMs (up to 64 rows) at cuBLAS's measured Hopper GEMV rate (0.762, the
# median of two H100 rows; docs/accuracy.md "The Hopper library GEMV rate"): H100 13.5 -> 11.6% (bias +7.1%); the
# H200 keeps its streaming figure (no GEMV measurement of its HBM3e): 15.3%.
ACHIEVED = {"h100-sxm5-80gb": 12.0, "h200-sxm-141gb": 16.0, "l40s": 21.0, "a100-sxm4-80gb": 8.0, "b200": 33.0}


@pytest.mark.parametrize("device", sorted(ACHIEVED))
def test_errors_stay_at_the_achieved_level(errors, device):
    allv = [e for v in errors[device].values() for e in v]
    assert len(allv) == 30
    assert float(np.mean(np.abs(allv))) <= ACHIEVED[device]


def test_where_the_model_is_slow(errors):
    # medium M (512 rows): predicted slower than measured on the Hopper GPUs and the B200, most on the
    # B200, whose GEMMs the model holds to its L2 figure; single-row GEMVs on the H100 were 10-15% fast at the
    # triad rate (within 5% at MT4G's 0.821); at cuBLAS's measured Hopper GEMV rate (0.762) they are slow by +5.6% on
    # average (-7.5% at 32 MiB, +7.4..+10.8% at 101-134 MiB, where these rows stream at 0.79-0.81 of 3.35 TB/s)
    slow = {d: float(np.mean(errors[d][512])) for d in ("b200", "h100-sxm5-80gb", "h200-sxm-141gb")}
    assert all(v > 10 for v in slow.values()), slow
    assert slow["b200"] > 35
    assert float(np.mean(errors["h100-sxm5-80gb"][1])) == pytest.approx(5.6, abs=0.5)


def test_a100_medium_and_large_gemms_at_the_cp_async_tile_rate(errors):
    # at the plain-load L2 rate (0.353 of 5120 B/clk) these were 13-56% slow, labelled L2-bound; at the
    # cp.async rate (0.755) every mean from M = 128 up is within 10% (M = 512: -0.5%)
    a100 = errors["a100-sxm4-80gb"]
    assert all(abs(float(np.mean(a100[m]))) < 10 for m in (512, 2048, 8192)), a100
    # M = 128 (-9.3% power-blind, -13.4% now): DRAM-bound GEMMs the model has drawing over 400 W with a 128 x 64
    # tile (432 W at m=128, n=12288, k=4096), which the power-blind choice then stretched; chosen under the limit
    # the 128 x 128 tile fits. The measured kernels are slower than either: a cost the power draw stood in for.
    # -20.2% with the A100's DRAM at gpu-stream's triad (0.873 for MT4G's read, 0.758): these weight-streaming
    # GEMMs are DRAM-bound, and cuBLAS's kernels stream below a plain streaming kernel (docs/accuracy.md)
    assert float(np.mean(a100[128])) == pytest.approx(-20.2, abs=1.0)
    # -0.5% power-blind, -3.5% with the kernel chosen under the 400 W limit, -4.2% with the GA100 V-f line (a kernel
    # over the limit lowers its clock and voltage instead of stretching at constant energy: it runs faster)
    assert abs(float(np.mean(a100[512]))) < 5
