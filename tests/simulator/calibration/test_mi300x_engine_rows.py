"""The MI300X serving-engine rows of published_frameworks.csv as their stacks ran them: fw-084's FP8 model quantises
only the linear layers (weight_dtype fp8_e4m3 on a bf16 graph, lm_head and KV cache 16-bit), each fp8 linear layer
is a quantise kernel plus a library scaled-matmul call that takes no epilogue under vLLM, and fw-088 was timed in
sglang.bench_latency's serial loop (profile sglang-0.3, host time per sequence)."""

from __future__ import annotations

import pytest

from simulator.calibration.frameworks_validation import (
    _row_costing,
    engine_step_host_s,
    load_framework_rows,
    row_breakdown,
)
from simulator.engines.walk import is_library_kernel
from workloads.dtypes import DType
from workloads.precision import apply_precision


@pytest.fixture(scope="module")
def rows():
    ms, parsed = load_framework_rows()
    return {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}


def test_fw084_quantises_the_linear_layers_only(rows):
    m, p, o = rows["fw-084"]
    assert (m.dtype, m.weight_dtype, m.kv_dtype) == ("bf16", "fp8_e4m3", None)
    graph, _, _ = _row_costing(m, p, o)
    quant = [op for op in graph.ops if op.kind == "quant_matmul"]
    # Llama-3-8B: 32 blocks x (QKV, O, gate-up, down) = 128 fp8 linear layers; the lm_head stays bf16
    assert len(quant) == 128 and all(op.inputs[1].dtype is DType.FP8_E4M3 for op in quant)
    head = [op for op in graph.ops if op.name == "lm_head.logits"]
    assert len(head) == 1 and head[0].kind == "matmul" and head[0].inputs[1].dtype is DType.BF16
    attn = [op for op in graph.ops if op.kind == "attention"]
    assert len(attn) == 32 and all(t.dtype is DType.BF16 for op in attn for t in op.inputs)  # 16-bit KV cache


def test_fp8_linear_is_a_library_call_weight_only_is_not(rows):
    m, p, o = rows["fw-083"]
    graph, _, _ = _row_costing(m, p, o)
    fp8 = [op for op in apply_precision(graph, weight_dtype="fp8").ops if op.kind == "quant_matmul"]
    int4 = [op for op in apply_precision(graph, weight_dtype="int4").ops if op.kind == "quant_matmul"]
    assert len(fp8) == len(int4) == 128
    assert all(is_library_kernel(op) for op in fp8)
    assert not any(is_library_kernel(op) for op in int4)  # a compiling stack may generate the int4 kernel
    # a stack that does not compile (vLLM, SGLang) runs Marlin / AWQ / GPTQ kernels: library calls, nothing fused
    assert all(is_library_kernel(op, compiled=False) for op in int4)
    assert all(is_library_kernel(op, compiled=False) for op in fp8)


def test_fw084_launches_the_bf16_kernels_plus_one_quantise_kernel_per_linear_layer(rows):
    """vLLM (epilogue_fusion off) runs RoPE, SiLU-and-mul and the residual adds after torch._scaled_mm as their own
    kernels, as after a bf16 GEMM; each of the 128 fp8 linear layers adds its input's quantise kernel."""
    bf16 = row_breakdown(*rows["fw-083"])
    fp8 = row_breakdown(*rows["fw-084"])
    assert fp8["kernels"] == bf16["kernels"] + 128
    # the same host time per decode step: 0.28 ms + 8 x 0.0296 ms (the vllm-v0 profile's Vidur line)
    assert fp8["call_host_s"] == bf16["call_host_s"] == pytest.approx(0.5168e-3, rel=1e-9)
    # and the same sampler call's host time, 0.623 ms + 8 x 0.00700 ms (the profile's line from Vidur's
    # SAMPLER_E2E less its device work), before the same six sampler kernels over 8 x 128,256 logits
    assert fp8["decode_extras_s"] == pytest.approx(bf16["decode_extras_s"], rel=1e-9)
    assert 0.679e-3 < bf16["decode_extras_s"] < 0.679e-3 + 0.1e-3
    assert fp8["device_s"] < bf16["device_s"]  # half the weight bytes in the linear layers


def test_fw088_bench_latency_loop_is_serial_with_the_host(rows):
    m, p, o = rows["fw-088"]
    assert p.name == "sglang-0.3" and m.batch == 32
    # 32 sequences x 10.1 us (the non-overlapped loop's host time per sequence, sgl-project/sglang PR #1738)
    assert engine_step_host_s(m, p) == pytest.approx(32 * 10.1e-6, rel=1e-9)
    bd = row_breakdown(m, p, o)
    assert bd["call_host_s"] == pytest.approx(0.3232e-3, rel=1e-9)
    # the profile's 26 eager ops (20 us each) and 6 synchronisations (5.8 us each) around the graph replay, and
    # its sampler's four kernels over 32 x 128,256 logits (device time, a few tens of microseconds)
    ops_s = 26 * 20e-6 + 6 * 5.8e-6
    assert ops_s < bd["decode_extras_s"] < ops_s + 0.1e-3
    assert bd["predicted_s"] == pytest.approx(bd["device_s"] + bd["call_host_s"] + bd["decode_extras_s"], rel=1e-9)


def test_weight_only_int4_under_vllm_launches_the_bf16_kernels(rows):
    """vLLM runs W4A16 layers as hand-written Marlin / AWQ / GPTQ kernels that take no epilogue: llama-3-8b's RoPE,
    SiLU-and-mul and residual adds stay kernels of their own, as after a bf16 GEMM, and weight-only layers quantise
    no activation: the bf16 row's 419 kernels (not 419 - 128 with one epilogue fused into each linear layer)."""
    import dataclasses

    m, p, o = rows["fw-083"]
    bf16 = row_breakdown(m, p, o)
    int4 = row_breakdown(dataclasses.replace(m, weight_dtype="int4"), p, o)
    assert bf16["kernels"] == int4["kernels"] == 419
    assert int4["device_s"] < bf16["device_s"]  # a quarter of the weight bytes in the linear layers
