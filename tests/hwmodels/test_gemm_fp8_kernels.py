"""TensorRT-LLM's fp8 GEMMs on the H100 SXM at the Llama 3 70B TP 2 shapes, as aiconfigurator measured them.

hwmodels/measurements/gemm_fp8_kernels.csv: TensorRT-LLM 1.3.0rc20's fp8 Linear (per-tensor scales) timed by
CUDA-graph replay, less the two activation-quantisation kernels the same release's tables time at the row's m
and k, at M = 512 ... 8192 against the N x K of the 70B model's QKV, output, gate/up and down projections split
over two GPUs. Data the catalog never saw; the model's fp8 GEMM rate is checked against it (docs/serving.md,
"Time to first token, sixth pass": the NIM prefill's GEMMs are not where its per-token gap is).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import run_options
from simulator.hardware import known_devices

DATA = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "gemm_fp8_kernels.csv"


def _mnk(workload: str) -> tuple[int, int, int]:
    m, n, k = (int(t.split("=")[1]) for t in workload.split(":")[1].split(","))
    return m, n, k


@pytest.fixture(scope="module")
def rows() -> dict[tuple[int, int, int], tuple[float, float]]:
    from simulator.calibration.kernel_validation import validate_kernels

    return {_mnk(r["workload"]): (r["measured_s"], r["predicted_s"]) for r in validate_kernels({"fp8 gemm": DATA})["rows"]}


def test_rows_are_the_gemm_alone_as_the_collector_ran_it():
    ms = MeasurementSet.load(DATA, devices=known_devices())
    assert len(ms) == 30 and {m.device for m in ms} == {"h100-sxm5-80gb"} and {m.dtype for m in ms} == {"fp8_e4m3"}
    for m in ms:  # "L ms Linear - a compute_scale - b scale_matrix": the median is L - a - b
        linear, scale, cast = (float(x.split()[0]) for x in m.metric_reported.split(" - "))
        assert m.median_s == pytest.approx((linear - scale - cast) * 1e-3, rel=1e-5)
    # gemmf-001 by hand: 0.0511173 - 0.0098528 - 0.00409493 = 0.03716957 ms
    assert ms[0].median_s == pytest.approx(3.716957e-05, rel=1e-5)
    opts, overrides = run_options({"source": ms[0].source, "notes": ms[0].notes, "dtype": "fp8_e4m3"})
    assert opts.cuda_graphs and not overrides  # timed by CUDA-graph replay


def test_model_fp8_rate_within_the_achieved_error(rows):
    err = np.array([100.0 * (p - m) / m for m, p in rows.values()])
    # achieved: MAPE 7.3%, bias (geometric) -1.2%; worst the M = 512 QKV row (+30.6%: the model's 128 x 128 tile)
    assert float(np.mean(np.abs(err))) <= 7.5
    assert abs(float(np.mean(err))) < 3.0
    # from M = 4096 up (the prompt sizes of the NIM rows) every row is within 7%
    assert all(abs(100.0 * (p - m) / m) < 7.0 for (mm, _n, _k), (m, p) in rows.items() if mm >= 4096)


@pytest.mark.parametrize("m", [4096, 8192])
def test_llama3_70b_tp2_layer_gemms(rows, m):
    """The four fp8 GEMMs of one 70B layer at TP 2: gate/up (N 28672) between the N 16384 and 51200 rows, down
    (K 14336) half way between the K 12288 and 16384 rows, both linear. At M = 4096 the measured layer is
    0.2269 + 0.1928 + (0.7669 + 0.3529 x 1.6198) + (0.5285 + 0.6988) / 2 = 2.372 ms; the model is within 3%."""

    def layer(i: int) -> float:
        gu = rows[(m, 16384, 8192)][i] + (rows[(m, 51200, 8192)][i] - rows[(m, 16384, 8192)][i]) * 12288 / 34816
        down = (rows[(m, 8192, 12288)][i] + rows[(m, 8192, 16384)][i]) / 2
        return rows[(m, 5120, 8192)][i] + rows[(m, 8192, 4096)][i] + gu + down

    measured, predicted = layer(0), layer(1)
    if m == 4096:
        assert measured == pytest.approx(2.372e-3, rel=2e-3)
    assert predicted == pytest.approx(measured, rel=0.03)
