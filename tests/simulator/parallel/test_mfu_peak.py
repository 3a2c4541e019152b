"""MFU's denominator is the dense peak of the precision the step's GEMMs run in, never a faster
precision's (an fp32 step on an H100 was once quoted against the fp8 peak, 1,979 TFLOP/s)."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from simulator.engines.options import EvalOptions
from simulator.parallel.compose import evaluate_plan
from workloads.parallel import ParallelPlan

DGX = load_system("dgx-h100")
PLAN = ParallelPlan(pp=2, microbatch=2, global_batch=4)

# H100 SXM5 datasheet, dense (the sparse figures halved): fp32 (SIMT) 66.9, TF32 494.7, BF16 989.4 TFLOP/s
H100_PEAK = {("fp32", False): 66.9e12, ("fp32", True): 494.7e12, ("bf16", False): 989.4e12}


@pytest.mark.parametrize(("dtype", "tf32"), sorted(H100_PEAK))
def test_mfu_is_over_the_peak_of_the_step_precision(dtype: str, tf32: bool) -> None:
    r = evaluate_plan("gpt2", DGX, PLAN, EvalOptions(allow_tf32=tf32), train=True, seq=256, dtype=dtype)
    assert r.peak_flops_per_s == pytest.approx(H100_PEAK[dtype, tf32])
    # model FLOPs per device per second over that peak, by hand
    assert r.mfu == pytest.approx(r.model_flops / r.latency_s / 2 / H100_PEAK[dtype, tf32])
    assert r.mfu < 1.0


def test_fp8_linears_are_quoted_against_the_bf16_peak() -> None:
    """torchtitan's and Megatron-Bridge's fp8 tables (and the training validation's MFU rows) divide by the
    dense bf16 peak; fp8 linears leave the step's dtype bf16."""
    r = evaluate_plan("gpt2", DGX, PLAN, train=True, seq=256, fp8_linears="tensorwise")
    assert r.peak_flops_per_s == pytest.approx(989.4e12)
