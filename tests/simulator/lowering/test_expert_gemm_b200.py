"""The B200's expert GEMMs at MoE shapes as the model prices them, against measured kernels
(hwmodels/measurements/moe_gemm_kernels.csv: aiconfigurator @ 095f58a51, one GEMM at a time replayed in a CUDA graph,
B200 and H100 SXM; bf16 vLLM 0.24.0 ``F.linear``, fp8 TensorRT-LLM 1.3.0rc20's Linear less its two quantisation
kernels; docs/training.md "The B200 MoE layer's pieces against measured kernels").

What the file shows: the model prices one B200 GEMM at these shapes slower than measured (bf16 by 1.4x to 3.0x,
fp8 at 2,048 rows and more by +35% on average, with the B200's measured 1.56 us a kernel), and the same holds, less,
on the H100. Transformer Engine runs the experts as one cuBLASLt GEMM per expert on 4 streams; on the H100, where
that was measured (h100_expert_gemms.csv), the 4-stream time is the sum of the single GEMMs to within 9% in bf16, so the sum of
single GEMMs stands in for the B200's 4-stream time: against it the model's price of train-059's expert GEMMs is
18% slow in bf16 and 11% fast in fp8 (73 us per layer); the 1.7 ms per layer that the B200 Qwen3-30B-A3B
token-drop run takes beyond the model is not in the expert GEMMs' rate. Recorded, not fitted."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import PER_EXPERT_RULE, _gemm_cost

MEAS = Path(__file__).resolve().parents[3] / "hwmodels" / "measurements"
DATA = MEAS / "moe_gemm_kernels.csv"
H100 = "h100-sxm5-80gb"


def _dims(workload: str) -> tuple[int, int, int]:
    m, n, k = (int(x.split("=")[1]) for x in workload.split(":")[1].split(","))
    return m, n, k


def _rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return list(csv.DictReader(f))


ROWS = _rows()
#: (device, dtype, m, n, k) -> measured us of one GEMM
SINGLE = {(r["device"], r["dtype"], *_dims(r["workload"])): float(r["median_s"]) * 1e6 for r in ROWS}


def test_the_file_holds_both_gpus_and_both_dtypes_at_every_shape():
    assert len(ROWS) == 280
    for dev in ("b200", H100):
        for dt in ("bf16", "fp8_e4m3"):
            assert sum(1 for r in ROWS if r["device"] == dev and r["dtype"] == dt) == 70
    assert SINGLE[("b200", "bf16", 2048, 1536, 2048)] == pytest.approx(11.744, abs=0.001)
    assert SINGLE[(H100, "bf16", 2048, 1536, 2048)] == pytest.approx(18.676, abs=0.001)


def test_fp8_rows_are_the_linear_less_its_two_quantisation_kernels():
    """Every fp8 row's time is recomputed from the three figures its ``metric_reported`` prints."""
    for r in (r for r in ROWS if r["dtype"] == "fp8_e4m3"):
        parts = dict(p.strip().rsplit(" ", 2)[:2] for p in r["metric_reported"].split(";"))
        gemm_ms = float(parts["Linear"]) - float(parts["compute_scale"]) - float(parts["scale_matrix"])
        assert float(r["median_s"]) == pytest.approx(gemm_ms * 1e-3, rel=1e-4), r["id"]
    assert SINGLE[("b200", "fp8_e4m3", 2048, 1536, 2048)] == pytest.approx(7.682, abs=0.001)


@pytest.fixture(scope="module")
def errors() -> dict[tuple[str, str, str], np.ndarray]:
    from simulator.calibration.kernel_validation import validate_kernels

    dtype = {r["id"]: r["dtype"] for r in ROWS}
    out: dict[tuple[str, str, str], list[float]] = {}
    for r in validate_kernels({"moe gemm": DATA})["rows"]:
        m = _dims(r["workload"])[0]
        cls = "m<=512" if m <= 512 else "m768-1536" if m <= 1536 else "m>=2048"
        out.setdefault((r["device"], dtype[r["id"]], cls), []).append(r["error_pct"])
    return {k: np.asarray(v) for k, v in out.items()}


# (device, dtype, rows class) -> (MAPE, bias) achieved, percent (20 to 30 shapes each): the model is slow throughout
# the bf16 rows of both GPUs, more on the B200, whose GEMMs it holds to its L2 figure (as gemm_kernels.csv shows);
# the B200 rows include its measured per-kernel device time (1.56 us, test_b200_kernel_device_time.py)
ACHIEVED = {
    ("b200", "bf16", "m<=512"): (141.6, 141.6), ("b200", "bf16", "m768-1536"): (120.1, 120.1),
    ("b200", "bf16", "m>=2048"): (71.5, 71.5),
    ("b200", "fp8_e4m3", "m<=512"): (79.0, 78.5), ("b200", "fp8_e4m3", "m768-1536"): (65.3, 65.3),
    ("b200", "fp8_e4m3", "m>=2048"): (34.6, 34.6),
    # (the H100 rows with one SM's L2 intake above its share where SMs idle, efficiency.l2_tile_sm_port_ratio; held
    # to the share they were 77.0, 51.6, 23.2 and 40.9 (+39.9), 23.5 (+21.1), 13.5 (-10.5); before split-K hand-offs
    # and first K-slices were read at that intake too, 46.6, 35.2, 19.2 and 17.9 (+14.7), 13.8 (+8.7), 14.2 (-13.3))
    (H100, "bf16", "m<=512"): (42.6, 42.6), (H100, "bf16", "m768-1536"): (34.5, 34.5),
    (H100, "bf16", "m>=2048"): (19.2, 19.2),
    (H100, "fp8_e4m3", "m<=512"): (17.4, 13.6), (H100, "fp8_e4m3", "m768-1536"): (13.6, 8.4),
    (H100, "fp8_e4m3", "m>=2048"): (14.2, -13.3),
}


@pytest.mark.parametrize("group", sorted(ACHIEVED))
def test_single_gemm_errors_by_shape_class(errors, group):
    mape, bias = ACHIEVED[group]
    e = errors[group]
    assert float(np.mean(np.abs(e))) == pytest.approx(mape, abs=0.5)
    assert float(np.mean(e)) == pytest.approx(bias, abs=0.5)


def test_every_b200_bf16_gemm_is_priced_slower_than_measured(errors):
    assert all(float(errors[("b200", "bf16", c)].min()) > 30.0 for c in ("m<=512", "m768-1536", "m>=2048"))


def _own_h100() -> list[tuple[int, int, int, int, str, float]]:
    with (MEAS / "h100_expert_gemms.csv").open(newline="") as f:
        return [(int(r["experts"]), int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], float(r["gpu_time_us"]))
                for r in csv.DictReader(f)]


def test_on_the_h100_four_streams_take_the_sum_of_the_single_gemms():
    """The 4-stream time measured on an H100 (h100_expert_gemms.csv, shapes also in this file: 2,048 and 4,096 rows)
    against ``experts`` x the single GEMM: bf16 0.95-1.085 (15 shapes), fp8 0.92-1.39 (the fp8 Linear's GEMM at
    4,096 rows is slower than cuBLASLt's without fast accumulation; 2,048 rows: 0.93-1.21)."""
    bf16, fp8 = [], []
    for e, m, n, k, dt, us in _own_h100():
        if (H100, dt, m, n, k) in SINGLE:
            (bf16 if dt == "bf16" else fp8).append(e * SINGLE[(H100, dt, m, n, k)] / us)
    assert len(bf16) == len(fp8) == 15
    assert 0.94 <= min(bf16) and max(bf16) <= 1.09, bf16
    assert 0.92 <= min(fp8) and max(fp8) <= 1.40, fp8


#: train-059's expert GEMMs per layer at 2,048 rows per expert (16 local experts): (m, n, k), times run per layer
TRAIN_059 = {"fc1": ((2048, 1536, 2048), 1), "fc2": ((2048, 2048, 768), 1), "fc1.bwd_data": ((2048, 2048, 1536), 1),
             "fc2.bwd_data, fc2.bwd_weight": ((2048, 768, 2048), 2), "fc1.bwd_weight": ((1536, 2048, 2048), 1)}


def _four_streams_us(ctx, m: int, n: int, k: int, dtype: str) -> float:
    """The model's price of 16 expert GEMMs as 4 rounds of 4 concurrent ones (``_experts_gemm`` before any
    quantisation or row padding; no FP32 promotions on the B200)."""
    fp8 = dtype.startswith("fp8")
    one = _gemm_cost(ctx, m, n, k, batch=4, dtype=dtype, in_bytes=1 if fp8 else 2, out_bytes=2, b_shared=False,
                     rule=PER_EXPERT_RULE)
    return float(one.device_time_s) * 4 * 1e6


@pytest.mark.parametrize("dtype, lo, hi, layer", [("bf16", 1.06, 1.26, 1.178), ("fp8_e4m3", 0.74, 0.98, 0.892)])
def test_train_059_expert_gemms_against_sixteen_measured_single_gemms(dtype, lo, hi, layer):
    """bf16: every GEMM priced 7-25% slower than 16 measured ones, the layer's 1,064 us against 903; fp8: 3-26% faster,
    606 us against 680 (fc2 [2048 x 2048 x 768]: 77 against 105 us), 73 us a layer of the 1.7 ms the B200 token-drop
    run takes beyond the model."""
    ctx = LoweringContext(load_hardware("b200"), EvalOptions())
    model = meas = 0.0
    for (m, n, k), times in TRAIN_059.values():
        mod, mea = _four_streams_us(ctx, m, n, k, dtype), 16 * SINGLE[("b200", dtype, m, n, k)]
        assert lo <= mod / mea <= hi, ((m, n, k), mod, mea)
        model, meas = model + times * mod, meas + times * mea
    assert model / meas == pytest.approx(layer, abs=0.005)
