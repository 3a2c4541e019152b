"""How TensorRT-LLM's fp8 GEMMs accumulate, per path, as its code states (``FrameworkProfile.fp8_gemm_accumulation``):
the PyTorch backend's ``cublas_scaled_mm`` runs fast accumulation; the TensorRT engine's fp8 gemm plugin leaves
``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` at 0 (split), but the validated engines were built without a gemm plugin
(TensorRT's own fp8 tactics, accumulation not stated), so the engine profile records no forward promotion."""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import fp8_promotion
from workloads.frameworks import FP8_GEMM_ACCUMULATIONS, PROFILES


def test_trtllm_profiles_record_their_fp8_accumulation():
    engine, torch_backend = PROFILES["trt-llm"], PROFILES["trt-llm-pytorch"]
    assert engine.fp8_gemm_accumulation == ""  # TensorRT's own fp8 tactics: not stated, priced fast
    assert "fastAcc = 0" in engine.fp8_gemm_accumulation_source
    assert "--gemm_plugin fp8" in engine.fp8_gemm_accumulation_source
    assert torch_backend.fp8_gemm_accumulation == "fast"
    assert "fast_acc = true" in torch_backend.fp8_gemm_accumulation_source


def test_every_profile_names_a_known_accumulation():
    bad = {n: p.fp8_gemm_accumulation for n, p in PROFILES.items()
           if p.fp8_gemm_accumulation not in FP8_GEMM_ACCUMULATIONS}
    assert bad == {}
    stated = {n for n, p in PROFILES.items() if p.fp8_gemm_accumulation}
    assert all(PROFILES[n].fp8_gemm_accumulation_source for n in stated)


def test_split_engine_prefill_what_if_on_an_h100():
    # A '--gemm_plugin fp8' engine (split accumulator) would add to NIM's Llama 3.3 70B TP 2 prefill of 5,000
    # tokens, per device: 80 layers x (qkv 5120 x 64 + o 8192 x 32 + gate/up 28672 x 64 + down 8192 x 112
    # intervals of 128 K) x 5,000 rows FP32 adds, at 66.9 TFLOP/s / 2 FADD issue slots x 0.99 vector fraction
    ctx = LoweringContext(load_hardware("h100-sxm5-80gb"), EvalOptions())
    shapes = ((5120, 8192), (8192, 4096), (28672, 8192), (8192, 14336))
    secs = 80 * sum(fp8_promotion(ctx, 1, 5000, n, k)[0] for n, k in shapes)
    adds = 80 * 5000 * (5120 * 64 + 8192 * 32 + 28672 * 64 + 8192 * 112)
    assert secs == pytest.approx(adds / (66.9e12 / 2 * 0.99), rel=1e-3)
    assert secs == pytest.approx(40.37e-3, rel=1e-3)
