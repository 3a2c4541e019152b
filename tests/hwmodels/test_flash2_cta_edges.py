"""Each CTA's pipeline edges of a FlashAttention-2 launch (``hwmodels.gpu.attention_edges_s``): the tiles they are
read from, where the GPU lowering prices them, and the B200 tritonbench rows they move (docs/accuracy.md,
"FlashAttention-2's CTA edges")."""

from __future__ import annotations

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device

#: meta-pytorch/tritonbench pull request #171 test plan: flash_v2 TFLOP/s on a B200, batch 8, 16 heads, head dim 128,
#: FP16, non-causal, at 512 / 1k / 2k tokens (rows pub-024..026 of published_gpu.csv)
TRITONBENCH_B200 = {512: 245.259, 1024: 315.111, 2048: 352.104}


def test_tiles_are_flash_attention_2s():
    # run_mha_fwd_hdim64: Flash_fwd_kernel_traits<64, 128, 128, 4>; run_mha_fwd_hdim128 (sm80/sm90 and later, not
    # sm86/sm89): <128, 128, 64, 4>; run_mha_bwd_hdim64 / hdim128 with 144 KB of shared memory: kBlockM 128 / 64
    assert gpu.FLASH2_FWD_KV_BLOCK[64] == 128 and gpu.FLASH2_FWD_KV_BLOCK[128] == 64
    assert gpu.FLASH2_BWD_Q_BLOCK[64] == 128 and gpu.FLASH2_BWD_Q_BLOCK[128] == 64
    assert "v2.7.4.post1" in gpu.FLASH2_TILES_SOURCE
    assert gpu.FLASH2_EDGE_FAMILIES == frozenset({"sm80", "sm90", "sm100"})


def test_b200_edges_by_hand():
    # B200, head dim 128, batch 8, 16 heads, 512 tokens: 512 CTAs, 4 on the busiest of 148 SMs. One SM's share of
    # the L2 is 7.38 TB/s / 148 = 49.86 GB/s. Each CTA waits for Q (128 x 128) and the first K block (64 x 128),
    # 48 KiB = 0.986 us (the last 128 x 64 block of math takes longer), then stores O (128 x 128, 32 KiB, 0.657 us)
    # and one L2 latency (150 ns): 1.793 us per CTA, 7.17 us in all
    p = gpu.gpu_params(load_device("b200"), "fp16")
    grid = gpu.attention_grid(8, 16, 16, 512, 512, p.sms)
    share = 7.38e12 / 148
    per_cta = 49152 / share + 32768 / share + 150e-9
    assert gpu.attention_edges_s(grid, p, 128, 128, 1e-9, p.sms) == pytest.approx(4 * per_cta, rel=1e-9)
    assert 4 * per_cta == pytest.approx(7.17e-6, rel=1e-3)


def _forward_s(device: str, seq: int) -> float:
    from simulator.engines.analytical import EvalOptions, evaluate
    from workloads.micro import build_micro

    g = build_micro(f"attention:b=8,h=16,s={seq},d=128,causal=0", dtype="fp16")
    return evaluate(g, load_device(device), EvalOptions(attention_kernel="flash2")).latency_s


def _lowered_compute_s(device: str) -> float:
    from simulator.engines.analytical import EvalOptions
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, Role, TensorSpec

    t = TensorSpec("q", (8, 16, 512, 128), DType.FP16, Role.ACTIVATION)
    op = Op("a", "attention", (t, t, t), (t,), Attrs({"causal": False}))
    return lower(op, LoweringContext(load_device(device), EvalOptions(attention_kernel="flash2"))).compute_s


def test_lowering_prices_edges_on_flash_attention_2s_architectures_only():
    # the T4 (Turing, no FlashAttention-2 build) keeps the kernel model without edges; the A100 and B200 get them,
    # on their head-dim-128 tile (128 x 64, two CTAs an SM)
    for device, priced in (("t4", False), ("b200", True), ("a100-sxm4-80gb", True)):
        p = gpu.gpu_params(load_device(device), "fp16")
        bare = gpu.attention(8, 16, 16, 512, 512, 128, 128, p, kernel="flash2", cta_edges=False)
        edged = gpu.attention(8, 16, 16, 512, 512, 128, 128, p, kernel="flash2", tile=gpu.Flash2Tile(128, 64))
        assert edged.compute_s > bare.compute_s
        assert _lowered_compute_s(device) == pytest.approx((edged if priced else bare).compute_s, rel=1e-12)


def test_b200_tritonbench_rows_move_toward_the_measurement():
    # 4 * b * h * s^2 * d FLOP: priced 349 / 404 / 406 TFLOP/s without edges (1.42 / 1.28 / 1.15 x the measurement),
    # 304 / 376 / 391 (1.24 / 1.19 / 1.11 x) with every CTA's edges, 325 / 388 / 398 (1.32 / 1.23 / 1.13 x) with
    # two co-resident CTAs an SM exposing one edge a round, 312 / 372 / 382 (1.27 / 1.18 / 1.09 x) with the output
    # accumulator's rescale (2 FP32 multiplies a score at 128 x 64), now 307 / 370 / 382 (1.25 / 1.17 / 1.08 x) with
    # the B200's measured per-kernel device time (1.56 us): still fast, the B200 mma.sync rate being Hopper's, assumed
    for (seq, measured), ratio in zip(TRITONBENCH_B200.items(), (1.251, 1.175, 1.084), strict=True):
        tflops = 4 * 8 * 16 * seq * seq * 128 / _forward_s("b200", seq) / 1e12
        assert tflops / measured == pytest.approx(ratio, abs=0.001)


def test_output_rescale_is_counted_in_the_vector_work():
    # the A100's head-dim-128 forward tile is 128 x 64: 128 / 64 = 2 FP32 multiplies a score rescale the output
    # accumulators, on top of the softmax's 4 ALU operations a score; the energy reads these vector flops
    from simulator.engines.analytical import EvalOptions
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, Role, TensorSpec

    t = TensorSpec("q", (8, 16, 512, 128), DType.FP16, Role.ACTIVATION)
    op = Op("a", "attention", (t, t, t), (t,), Attrs({"causal": False}))
    cost = lower(op, LoweringContext(load_device("a100-sxm4-80gb"), EvalOptions(attention_kernel="flash2")))
    assert cost.vector_flops == 8 * 16 * 512 * 512 * (4 + 2)


def test_output_rescale_is_sized_by_the_value_head_dim():
    # 192-wide queries and keys, 128-wide values: the rescaled accumulators are O's 128 a row, 128 / 64 = 2 a score
    # on the 128 x 64 tile (192 / 64 = 3 were the query width's)
    p = gpu.gpu_params(load_device("a100-sxm4-80gb"), "fp16")
    e = gpu.attention(8, 16, 16, 512, 512, 192, 128, p, kernel="flash2", tile=gpu.Flash2Tile(128, 64))
    assert dict(e.details)["rescale_ops_per_score"] == 2.0
