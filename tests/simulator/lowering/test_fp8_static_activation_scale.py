"""fp8 (W8A8) linear layers with a static activation scale (TensorRT-LLM's FP8Linear: a calibrated per-tensor
``activation_scaling_factor``) cast their input only; a dynamic scale (the default) adds the per-token absmax pass
and writes one fp32 scale per row (``EvalOptions.fp8_activation_scale``)."""

from __future__ import annotations

import pytest

from simulator.calibration.predict import run_options
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.frameworks import get_profile
from workloads.resolve import load_workload

TOKENS, HIDDEN = 128, 4096  # llama-2-7b prefill of 128 tokens: the qkv projection reads 128 x 4096 fp16 activations


@pytest.fixture(scope="module")
def records():
    from simulator.engines.analytical import LoweringContext
    from simulator.lowering import ruleset

    g = load_workload("llama-2-7b", batch=1, seq=TOKENS, phase="prefill", dtype="fp16", weight_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3")
    op = next(o for o in g.ops if o.name == "layers.0.attn.qkv")
    assert op.kind == "quant_matmul"
    h100 = load_hardware("h100-sxm5-80gb")
    rule = ruleset("gpu").rules[op.kind]
    return {scale: rule(op, LoweringContext(h100, EvalOptions(fusion=True, fp8_activation_scale=scale)))
            for scale in ("dynamic", "static")}


def test_static_scale_casts_only(records):
    dyn, st = records["dynamic"], records["static"]
    assert dyn.rule == "fp8-quant+gemm" and st.rule == "fp8-cast+gemm"
    mk = TOKENS * HIDDEN
    # the absmax pass's work: 2 FLOPs an element against the cast's 1, and one fp32 scale per token written
    assert float(dyn.vector_flops - st.vector_flops) == pytest.approx(mk, rel=1e-12)
    assert float(dyn.dram_bytes - st.dram_bytes) == pytest.approx(4.0 * TOKENS, rel=1e-9)
    assert float(st.device_time_s) <= float(dyn.device_time_s)


def test_engine_records_the_static_rule():
    g = load_workload("llama-2-7b", batch=1, seq=TOKENS, phase="prefill", dtype="fp16", weight_dtype="fp8_e4m3")
    rep = evaluate(g, load_hardware("h100-sxm5-80gb"), EvalOptions(fusion=True, fp8_activation_scale="static"))
    rules = {r.rule for r in rep.records if r.kind == "quant_matmul"}
    assert rules == {"fp8-cast+gemm"}


def test_rows_and_profile_state_the_static_scale():
    # TensorRT-LLM v0.5 / v0.6.1 build flag and v0.9.0 checkpoint config
    for text in ("FP8 weights and FP8 KV cache (--enable_fp8 --fp8_kv_cache)",
                 "checkpoint config quant_algo FP8 and kv_cache_quant_algo FP8"):
        opts, _ = run_options({"source": "", "notes": text, "metric_reported": "", "dtype": "fp16"})
        assert opts.fp8_activation_scale == "static", text
    opts, _ = run_options({"source": "vLLM", "notes": "fp8 dynamic quantisation", "metric_reported": "", "dtype": ""})
    assert opts.fp8_activation_scale == "dynamic"
    assert get_profile("trt-llm").cost_options()["fp8_activation_scale"] == "static"
    assert get_profile("vllm").cost_options()["fp8_activation_scale"] == "dynamic"


def test_unknown_scaling_is_a_located_error():
    with pytest.raises(ValueError, match=r"options\.fp8_activation_scale: unknown scaling; got 'statc'.*did you mean"):
        EvalOptions(fp8_activation_scale="statc")
