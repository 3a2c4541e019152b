"""fp32 fused attention is PyTorch's memory-efficient kernel (3xTF32 on sm80+), not FlashAttention."""

from __future__ import annotations

import pytest

import nodeperf as npf
from hwmodels import gpu
from simulator.engines.options import EvalOptions
from workloads.resolve import load_workload


def _attention_record(dtype: str, device: str = "a100-sxm4-80gb", **opts):
    graph = load_workload("bert_large", batch=16, seq=512, dtype=dtype)
    report = npf.evaluate(graph, npf.load_hardware(device), EvalOptions(**opts))
    return next(r for r in report.records if r.kind == "attention")


def test_fp32_forward_on_a100_is_hand_computed_at_a_third_of_the_tf32_rate():
    # BERT-Large: 16 heads of 64, batch 16, sequence 512. The fp32 forward instantiation for head dim 64 has 64
    # query rows a CTA: 16 * 16 * 512 / 64 = 2048 CTAs on 108 SMs, 19 rounds of 64 * 512 pairs each. A pair's
    # QK^T and PV are 2 * (64 + 64) FLOP at 156 / 3 TFLOP/s (3xTF32) over 108 SMs; its softmax one MUFU op
    # (16 a clock at 1.41 GHz) and four FP32 instructions (19.5 TFLOP/s / 2 at 0.99)
    t_mma = 256 * 108 / (156e12 / 3)
    t_soft = 1 / (16 * 1.41e9) + 4 * 108 / (19.5e12 / 2 * 0.99)
    rec = _attention_record("fp32")
    assert rec.compute_s == pytest.approx(19 * 64 * 512 * (t_mma + t_soft), rel=1e-9)
    assert rec.tile == "q64"
    assert rec.notes.startswith("memory-efficient")


def test_fp32_kernel_ignores_allow_tf32_and_fp16_keeps_flashattention():
    # OpMultiplyAddFastF32 is compiled in: the TF32 switch does not change the kernel
    assert _attention_record("fp32", allow_tf32=True).compute_s == pytest.approx(_attention_record("fp32").compute_s)
    half = _attention_record("fp16")
    assert half.notes.startswith("flash2") and half.tile == "q128"


def test_fp32_on_volta_is_simt_at_the_sgemm_rate():
    # below compute capability 8.0 DefaultGemmType falls back to FFMA: no tensor-core rate, no mma.sync scale
    hw = npf.load_hardware("v100-sxm2-32gb")
    simt = gpu.gpu_params(hw, "fp32")
    p = gpu.mem_efficient_f32_params(simt, simt, int(hw.sm.compute_capability))
    assert p.matrix_flops_per_s == simt.matrix_flops_per_s and p.warp_mma_scale == 1.0
    assert _attention_record("fp32", "v100-sxm2-32gb").notes.startswith("memory-efficient")


@pytest.mark.parametrize(("head_dim", "backward", "batch_heads", "seq_kv", "rows"),
                         [(64, False, 0, 0, 64), (80, False, 0, 0, 64), (128, False, 0, 0, 64),
                          (256, False, 0, 0, 32),
                          # backward: a CTA per 64 keys, or every key of a head when the grid already holds 256
                          # heads and the keys are at most two blocks (the split-keys heuristic)
                          (64, True, 256, 512, 64), (64, True, 256, 128, 128), (64, True, 255, 128, 64)])
def test_mem_efficient_blocks_follow_the_fp32_instantiations(head_dim, backward, batch_heads, seq_kv, rows):
    assert gpu.mem_efficient_f32_block(head_dim, backward=backward, batch_heads=batch_heads, seq_kv=seq_kv) == rows


def test_fp32_backward_launches_pytorchs_delta_ops_and_the_workspace_clear():
    # b16 x 16 heads x 512 keys: 8 key splits, so the multiply, row sum, copy and workspace clear around the kernel
    graph = load_workload("bert_large", batch=16, seq=512, dtype="fp32", train=True)
    report = npf.evaluate(graph, npf.load_hardware("a100-sxm4-80gb"))
    bwd = next(r for r in report.records if r.kind == "attention_bwd")
    assert bwd.kernels == 5 and bwd.tile == "q64"
    p = gpu.gpu_params(npf.load_hardware("a100-sxm4-80gb"), "fp32")
    passes, n = gpu.mem_efficient_f32_bwd_passes(16, 16, 512, 512, 64, 64, p)
    rows = 16 * 16 * 512
    # the product of O and dO (read 2 x 4 B, write 4 B a element), its read and row sums, the sums copied, the
    # dQ workspace written
    assert n == 4
    assert passes.dram_bytes == pytest.approx(3 * rows * 64 * 4 + rows * 64 * 4 + rows * 4 + 2 * rows * 4 + rows * 64 * 4)
