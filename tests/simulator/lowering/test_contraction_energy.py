"""Contractions are charged the energy per FLOP of the path they ran on (regressions).

fp32 GEMMs allowed onto the tensor cores (``allow_tf32``) run at the TF32 rate; they used to be
charged fp32's missing tensor energy (falling back to fp64's 8.08 pJ on H100), hit the 700 W cap and
come out about 6x slower than the same GEMM declared as tf32 (63.9 vs 368 TFLOP/s).
"""

from __future__ import annotations

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.resolve import load_workload

H100 = "h100-sxm5-80gb"


def test_fp32_with_tf32_is_priced_as_tf32():
    hw = load_hardware(H100)
    as_fp32 = evaluate(load_workload("gemm:m=8192,n=8192,k=8192", dtype="fp32"), hw, EvalOptions(allow_tf32=True))
    as_tf32 = evaluate(load_workload("gemm:m=8192,n=8192,k=8192", dtype="tf32"), hw)
    assert as_fp32.records[0].matrix_dtype == "tf32"
    assert as_fp32.latency_s == pytest.approx(as_tf32.latency_s, rel=1e-12)
    assert as_fp32.energy_j == pytest.approx(as_tf32.energy_j, rel=1e-12)
    assert not any("tensor_j_per_flop.fp32" in w for w in as_fp32.warnings)
    # 2 * 8192^3 FLOP at well over 300 TFLOP/s (TF32 dense peak 494.7), not the ~64 of the old pricing
    assert 2 * 8192**3 / as_fp32.latency_s > 300e12


def test_fp32_fused_attention_runs_its_3xtf32_kernel_whatever_allow_tf32():
    """An fp32 SDPA runs PyTorch's memory-efficient kernel (FlashAttention has no fp32 kernel), whose sm80+ GEMMs are
    CUTLASS's 3xTF32 (``OpMultiplyAddFastF32``, hwmodels.gpu.MEM_EFFICIENT_SOURCE) whether or not TF32 is allowed:
    on an H100 it pays TF32 tensor energy either way, at one latency; on a V100 (no TF32) it runs on the FP32 lanes
    and pays no tensor energy."""
    w = "attention:b=4,h=32,s=4096,d=128"
    hw = load_hardware(H100)
    r = evaluate(load_workload(w, dtype="fp32"), hw)
    with_tf32 = evaluate(load_workload(w, dtype="fp32"), hw, EvalOptions(allow_tf32=True))
    assert r.records[0].matrix_dtype == with_tf32.records[0].matrix_dtype == "tf32"
    assert "memory-efficient (CUTLASS, fp32)" in r.records[0].notes
    assert with_tf32.latency_s == pytest.approx(r.latency_s, rel=1e-12)
    assert not any("tensor_j_per_flop" in x for x in r.warnings)
    volta = evaluate(load_workload(w, dtype="fp32"), load_hardware("v100-sxm2-32gb"))
    assert volta.records[0].matrix_dtype == "" and volta.latency_s > r.latency_s
