"""The per-expert GEMMs of Transformer Engine's GroupedLinear as the model prices them on an H100 SXM, against
GPU times measured on one (benchmarks/bench_expert_gemm.py: one cuBLASLt GEMM per local expert on 4 streams,
captured in a CUDA graph and replayed; NVIDIA H100 80GB HBM3 at 1980 MHz, PyTorch 2.11.0+cu130, 2026-12-06;
docs/accuracy.md "MoE rows: the GPT-OSS H100 micro-batch, expert GEMMs measured on an H100, routing balance")."""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import PER_EXPERT_RULE, _gemm_cost

#: (local experts, m, n, k) -> measured (bf16 us, fp8 e4m3 us) for all the experts' GEMMs of one call, Qwen3-30B-A3B's
#: expert shapes (d 2,048, fc1 1,536, fc2 in 768) at the rows per expert the Megatron-Bridge rows run (each EP rank
#: receives its EP group's routed rows: EP x tokens per rank x top-8 / 128 experts = 2,048 for train-059, 4,096 for
#: 064 and 069, 8,192 for 068); fc2's input gradient and fc2's weight gradient at 2,048 rows are one shape (2,048 x
#: 768 x 2,048), measured 192.6 and 192.4 us in bf16: the first is kept
MEASURED = {
    (16, 2048, 1536, 2048): (309.2, 208.1), (16, 2048, 2048, 768): (180.6, 138.8),
    (16, 2048, 2048, 1536): (304.1, 202.5), (16, 2048, 768, 2048): (192.6, 120.6),
    (16, 1536, 2048, 2048): (306.9, 219.3),
    (16, 4096, 1536, 2048): (581.9, 354.7), (16, 4096, 2048, 768): (315.8, 228.6),
    (16, 4096, 2048, 1536): (572.3, 367.2), (16, 4096, 768, 2048): (311.6, 203.9),
    (16, 1536, 2048, 4096): (581.1, 392.1), (16, 2048, 768, 4096): (354.1, 201.5),
    (8, 4096, 1536, 2048): (294.5, 181.0), (8, 4096, 2048, 768): (162.9, 118.5),
    (8, 4096, 2048, 1536): (289.9, 185.8), (8, 4096, 768, 2048): (157.9, 104.9),
    (8, 1536, 2048, 4096): (290.8, 198.6), (8, 2048, 768, 4096): (178.3, 102.6),
    (16, 8192, 1536, 2048): (1097.8, 660.0), (16, 8192, 2048, 768): (606.9, 426.4),
    (16, 8192, 2048, 1536): (1098.0, 704.3), (16, 8192, 768, 2048): (596.2, 361.2),
    (16, 1536, 2048, 8192): (1129.1, 755.6), (16, 2048, 768, 8192): (689.0, 369.3),
}


@pytest.fixture(scope="module")
def ctx():
    return LoweringContext(load_hardware("h100-sxm5-80gb"), EvalOptions())


def _model_us(ctx, experts: int, m: int, n: int, k: int, dtype: str) -> float:
    """The model's price of ``experts`` GEMMs [m, k] @ [k, n] run as rounds of 4 concurrent GEMMs (what
    ``simulator.lowering.gpu._experts_gemm`` sums before any fp8 quantisation or row padding)."""
    one = _gemm_cost(ctx, m, n, k, batch=4, dtype=dtype, in_bytes=1 if dtype.startswith("fp8") else 2,
                     out_bytes=2, b_shared=False, rule=PER_EXPERT_RULE)
    return float(one.device_time_s) * (experts // 4) * 1e6


@pytest.mark.parametrize("case", sorted(MEASURED, key=str))
def test_bf16_expert_gemms_within_ten_percent_of_the_h100(ctx, case):
    experts, m, n, k = case
    measured = MEASURED[case][0]
    assert _model_us(ctx, experts, m, n, k, "bf16") == pytest.approx(measured, rel=0.10)


def test_fp8_expert_gemms_are_priced_faster_than_measured(ctx):
    """fp8 e4m3 (``torch._scaled_mm``, per-tensor scales): every shape priced 3-27% faster than measured, 14%
    on the median; recorded here, not fitted (the H100 fp8 GEMM rate is shared with every dense fp8 row)."""
    ratios = sorted(_model_us(ctx, e, m, n, k, "fp8_e4m3") / MEASURED[(e, m, n, k)][1] for e, m, n, k in MEASURED)
    assert all(0.70 <= r <= 1.0 for r in ratios), ratios
    assert ratios[len(ratios) // 2] == pytest.approx(0.86, abs=0.04)

