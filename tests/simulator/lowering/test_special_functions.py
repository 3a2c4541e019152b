"""Transcendental elementwise ops on a GPU: the compiled special function's FP32 instructions and MUFU
ops (hwmodels.gpu.ELEMENTWISE_INSTRUCTIONS) set their vector work, SFU time and arithmetic energy."""

from __future__ import annotations

import pytest

from hwmodels import gpu
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.lowering import LoweringContext, gpu_vector_flops, lower, sfu_ops
from workloads.micro import build_micro

N = 1 << 20


def _op(fn: str, dtype: str = "fp16"):
    return build_micro(f"elementwise:numel={N},op={fn}", dtype).ops[0]


def test_instruction_counts_of_precise_cuda_functions():
    # precise sinf/cosf: FMUL, 3 FFMA reduction, FSETP, FMUL, 5 FFMA polynomial, 1 FFMA sign = 12, no MUFU
    cos = _op("cos")
    assert gpu_vector_flops(cos) == 2 * 12 * N and sfu_ops(cos) == 0.0
    # __nv_expf: 6 FP32 instructions and one MUFU.EX2
    exp = _op("exp")
    assert gpu_vector_flops(exp) == 2 * 6 * N and sfu_ops(exp) == N
    # ops outside the table keep their semantic FLOPs
    assert gpu_vector_flops(_op("abs")) == float(_op("abs").flops) == N


def test_sfu_and_fma_pipes_overlap_and_memory_bounds_the_kernel():
    a100 = load_hardware("a100-sxm4-40gb")
    ctx = LoweringContext(a100, EvalOptions())
    p = ctx.params("fp32")
    kc = lower(_op("tanh"), ctx)
    fma_s = 2 * 11 * N / (p.vector_flops_per_s * p.vector_fraction)
    sfu_s = 2 * N / p.sfu_ops_per_s
    assert kc.compute_s == pytest.approx(max(fma_s, sfu_s), rel=1e-12)
    assert kc.memory_s > kc.compute_s  # 1 Mi fp16 elements in and out: HBM-bound on an A100


def test_cos_costs_eleven_fma_energies_more_than_abs_per_element():
    a100 = load_hardware("a100-sxm4-40gb")
    opts = EvalOptions(power_cap=False)
    e = {fn: evaluate(build_micro(f"elementwise:numel={N},op={fn}", "fp16"), a100, opts).records[0]
         for fn in ("abs", "cos")}
    j_per_flop = a100.energy.vector_j_per_flop["fp32"]
    # same bytes; cos 24 FLOP-equivalents per element, abs 1
    assert e["cos"].dynamic_energy_j - e["abs"].dynamic_energy_j == pytest.approx(23 * N * j_per_flop, rel=1e-9)
    assert gpu.ELEMENTWISE_INSTRUCTIONS["gelu"] == (1, 23)
