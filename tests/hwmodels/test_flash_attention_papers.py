"""The fused-attention model against the FlashAttention-2 and -3 papers' own speed charts.

Settings of both papers: batch x sequence = 16k tokens, hidden 2048, head dim 128 (16 heads), BF16/FP16,
FLOPs counted as 4 * seq^2 * head_dim * heads * batch (causal: half; backward: 2.5x the forward).
FlashAttention-2: Dao 2023, arXiv 2307.08691, A100 80GB SXM4, Fig. 5(b) forward and Fig. 6(b) backward,
non-causal (values as labelled on the bars). FlashAttention-3: Shah et al. 2024, arXiv 2407.08608,
H100 80GB SXM5, Fig. 5(c)/(d) forward non-causal/causal and Fig. 6(b) backward non-causal.
"""

from __future__ import annotations

import pytest

from hwmodels import gpu
from simulator.hardware import load_hardware

SEQS = (2048, 4096, 8192, 16384)
#: (paper figure) -> measured TFLOP/s at SEQS
A100_FA2 = {"fwd": (200, 224, 222, 225), "bwd": (187, 193, 196, 196)}
H100_FA2 = {"fwd": (362, 368, 370, 370), "fwd_causal": (298, 319, 333, 335), "bwd": (291, 310, 318, 322)}
H100_FA3 = {"fwd": (625, 638, 646, 648), "fwd_causal": (521, 579, 602, 616), "bwd": (501, 542, 559, 561)}


def _tflops(p: gpu.GpuParams, seq: int, kernel: str, *, backward: bool = False, causal: bool = False,
            tile: gpu.Flash2Tile | None = None) -> float:
    b = 16384 // seq
    e = gpu.attention(b, 16, 16, seq, seq, 128, 128, p, kernel=kernel, backward=backward, causal=causal, tile=tile)
    flops = 4 * seq * seq * 128 * 16 * b * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    return flops / e.time_s / 1e12


def _params(device: str) -> gpu.GpuParams:
    return gpu.gpu_params(load_hardware(device), "bf16")


def _hand_flash2_forward_s(p: gpu.GpuParams, seq: int, fraction: float) -> float:
    """Compute time of the FlashAttention-2 forward at head dim 128, one batch of ``seq``, 16 heads, by hand:
    per pair 2 * 256 FLOP at 2048 FLOP/clk/SM (warp_mma_flops_per_clk) x ``fraction``, then one MUFU exp2
    (16 per SM per clock) and four FP32 instructions, in 16 waves of 128-row query blocks on 132 SMs; each
    CTA also waits for its Q block and first K block (128 + 64 rows of 128 BF16 values, 48 KiB, at one SM's
    share of the L2 tile bandwidth; its last 128 x 64 block of math takes longer) and stores its 128 x 128 O
    tile (32 KiB at that share, plus one L2 latency)."""
    clk = p.clock_hz
    mma = 2 * 256 / (2048 * clk * fraction)
    soft = 1 / (16 * clk) + 4 / (p.vector_flops_per_s / 2 * p.vector_fraction / p.sms)
    waves = -(-(16 * seq // 128) // 132)
    share = p.l2_bytes_per_s * p.l2_tile_fraction / p.sms
    first = (128 + 64) * 128 * 2 / share
    assert first < 128 * 64 * (mma + soft)
    edges = first + 128 * 128 * 2 / share + p.l2_latency_s
    return waves * (128 * seq * (mma + soft) + edges)


def test_flash2_forward_runs_at_the_mma_sync_rate_the_backward_carries_the_library_fraction():
    p = _params("h100-sxm5-80gb")
    seq = 16384
    assert gpu.FLASH2_LIBRARY_FRACTION == frozenset({"bwd"})
    e = gpu.attention(1, 16, 16, seq, seq, 128, 128, p, kernel="flash2")
    assert e.compute_s == pytest.approx(_hand_flash2_forward_s(p, seq, 1.0), rel=1e-9)


def test_flash2_forward_near_both_papers(monkeypatch):
    # at the mma.sync instruction rate (no library fraction) both papers agree within 9%: H100 335 / 343 / 347 /
    # 349 against 362 / 368 / 370 / 370 (-7.5..-5.7%; 351 flat before each CTA's edges were priced), A100
    # 202 / 205 / 206 / 207 against 200 / 224 / 222 / 225
    for device, table, tol in (("h100-sxm5-80gb", H100_FA2, 0.08), ("a100-sxm4-80gb", A100_FA2, 0.09)):
        p = _params(device)
        for seq, paper in zip(SEQS, table["fwd"], strict=True):
            assert _tflops(p, seq, "flash2") == pytest.approx(paper, rel=tol)
    # charged the GEMM library fraction as before: H100 280-289 TFLOP/s against 362-370 (-23..-22%), A100 184-188
    # against 200-225 (-8..-17%), the rate this replaced
    monkeypatch.setattr(gpu, "FLASH2_LIBRARY_FRACTION", frozenset({"fwd", "bwd"}))
    for device, table, lo, hi in (("h100-sxm5-80gb", H100_FA2, 0.77, 0.79), ("a100-sxm4-80gb", A100_FA2, 0.83, 0.93)):
        p = _params(device)
        for seq, paper in zip(SEQS, table["fwd"], strict=True):
            assert lo < _tflops(p, seq, "flash2") / paper < hi


def test_flash3_forward_near_the_paper():
    p = _params("h100-sxm5-80gb")
    for seq, paper in zip(SEQS, H100_FA3["fwd"], strict=True):
        assert _tflops(p, seq, "flash3") == pytest.approx(paper, rel=0.07)


def test_h100_backward_near_the_paper():
    p = _params("h100-sxm5-80gb")
    for seq, fa2, fa3 in zip(SEQS, H100_FA2["bwd"], H100_FA3["bwd"], strict=True):
        assert _tflops(p, seq, "flash2", backward=True) == pytest.approx(fa2, rel=0.06)
        assert _tflops(p, seq, "flash3", backward=True) == pytest.approx(fa3, rel=0.07)


def test_known_gaps_stay_as_documented():
    # docs/accuracy.md "FlashAttention-2 at the mma.sync rate": the A100 FlashAttention-2 backward is priced
    # 10-14% fast; the kernel model alone prices the H100 causal forward at the non-causal rate (the paper's
    # causal bars are 9-18% below the non-causal ones), which the GPU lowering corrects by the measured ratio
    # (test_lowered_flash2_causal_forward_at_the_measured_ratio)
    a100 = _params("a100-sxm4-80gb")
    for seq, paper in zip(SEQS, A100_FA2["bwd"], strict=True):
        assert 1.05 < _tflops(a100, seq, "flash2", backward=True) / paper < 1.15
    h100 = _params("h100-sxm5-80gb")
    # the kernel model's causal rate is below the non-causal one only by the CTAs' edges (the same CTAs, half
    # the pairs): 0.956 / 0.977 / 0.988 / 0.994 of it at 2k / 4k / 8k / 16k
    ratios = [_tflops(h100, seq, "flash2", causal=True) / _tflops(h100, seq, "flash2") for seq in SEQS]
    assert ratios == sorted(ratios) and 0.95 < ratios[0] < 0.96 and 0.99 < ratios[-1] < 1.0
    for causal, plain in zip(H100_FA2["fwd_causal"], H100_FA2["fwd"], strict=True):
        assert 0.80 < causal / plain < 0.92


def test_flash2_causal_ratio_interpolates_the_paper():
    table = load_hardware("h100-sxm5-80gb").efficiency.flash2_causal_fwd_ratio

    def r(seq: int) -> float:
        return gpu.flash2_causal_forward_ratio(seq, table)

    for (seq, ratio), causal, plain in zip(table, H100_FA2["fwd_causal"], H100_FA2["fwd"], strict=True):
        assert r(seq) == causal / plain == ratio  # the catalog's rows are the paper's quotients, to the bit
    assert r(1024) == pytest.approx(298 / 362) and r(262144) == pytest.approx(335 / 370)  # ends held
    assert r(2896) == pytest.approx((298 / 362 + 319 / 368) / 2, abs=1e-4)  # log2 midpoint of 2k and 4k


def test_lowered_flash2_causal_forward_at_the_measured_ratio():
    # through the GPU lowering on the H100 (sm90): the causal FlashAttention-2 forward is the non-causal rate
    # times the measured ratio, 271 / 288 / 301 / 304 TFLOP/s against the paper's 298 / 319 / 333 / 335 (-9..-10%;
    # -7..-6% before the output accumulator's rescale was priced, -3..-5% before each CTA's edges were, both
    # lowering the non-causal rate the ratio scales);
    # the backward and other architectures are unchanged
    from simulator.engines.analytical import EvalOptions
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, Role, TensorSpec

    def tflops(device: str, seq: int, causal: bool, bwd: bool = False) -> float:
        b = 16384 // seq
        t = TensorSpec("q", (b, 16, seq, 128), DType.BF16, Role.ACTIVATION)
        ins = (t, t, t) + ((t,) if bwd else ())
        op = Op("a", "attention_bwd" if bwd else "attention", ins, (t,) * (3 if bwd else 1), Attrs({"causal": causal}))
        kc = lower(op, LoweringContext(load_hardware(device), EvalOptions(attention_kernel="flash2")))
        t_s = max(kc.compute_s, kc.memory_s) + kc.latency_s
        return 4 * seq * seq * 128 * 16 * b * (0.5 if causal else 1.0) * (2.5 if bwd else 1.0) / t_s / 1e12

    for seq, paper in zip(SEQS, H100_FA2["fwd_causal"], strict=True):
        plain = tflops("h100-sxm5-80gb", seq, False)
        table = load_hardware("h100-sxm5-80gb").efficiency.flash2_causal_fwd_ratio
        assert tflops("h100-sxm5-80gb", seq, True) == pytest.approx(plain * gpu.flash2_causal_forward_ratio(seq, table),
                                                                     rel=0.01)
        assert tflops("h100-sxm5-80gb", seq, True) == pytest.approx(paper, rel=0.10)
        assert tflops("h100-sxm5-80gb", seq, True, bwd=True) == pytest.approx(
            _tflops(_params("h100-sxm5-80gb"), seq, "flash2", backward=True, causal=True), rel=0.01)
        assert tflops("a100-sxm4-80gb", seq, True) == pytest.approx(  # the A100's 128 x 64 tile, two CTAs an SM
            _tflops(_params("a100-sxm4-80gb"), seq, "flash2", causal=True, tile=gpu.Flash2Tile(128, 64)), rel=0.01)


@pytest.mark.parametrize("ratio", [0.0, 1.2])
def test_causal_rate_ratio_out_of_range_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match=r"attention: causal_rate_ratio; got .*; expected a number in \(0, 1\]"):
        gpu.attention(1, 16, 16, 2048, 2048, 128, 128, _params("h100-sxm5-80gb"), causal=True,
                      causal_rate_ratio=ratio)


#: FlashAttention-3 forward on the H100 SXM5 by head dim, non-causal and causal, at 2k / 4k / 8k / 16k
#: tokens (Shah et al. 2024, Fig. 5(a)/(b) head dim 64, 5(e)/(f) head dim 256; bar labels of
#: assets/flash3_fp16_fwd.png in Dao-AILab/flash-attention, the same figure)
H100_FA3_HD64 = {"fwd": (460, 476, 496, 497), "fwd_causal": (371, 420, 460, 473)}
H100_FA3_HD256 = {"fwd": (707, 736, 746, 756)}


def _tflops_hd(p: gpu.GpuParams, seq: int, head_dim: int, **kw) -> float:
    heads, b = 2048 // head_dim, 16384 // seq
    e = gpu.attention(b, heads, heads, seq, seq, head_dim, head_dim, p, kernel="flash3", **kw)
    return 4 * seq * seq * head_dim * heads * b * (0.5 if kw.get("causal") else 1.0) / e.time_s / 1e12


def test_flash3_exposed_exponential_pair_time_by_hand():
    # head dim 64 on the H100: two contractions of 2 * 64 * 2 FLOP at 4096 FLOP/clk/SM (the wgmma rate, 989
    # TFLOP/s over 132 SMs at 1830 MHz) take 1/16 clock, the exp2 at 16 per SM per clock 1/16 clock more;
    # the contractions at the 0.78 library fraction alone take 0.080 clock, so the sum binds
    p = _params("h100-sxm5-80gb")
    clk = p.clock_hz
    grid = gpu.attention_grid(1, 32, 32, 4096, 4096, p.sms)
    t_mma = gpu.attention_matmul_s(grid, p, 64, 64, kernel="flash3")
    assert t_mma == pytest.approx(256 / (4096 * clk * p.matrix_fraction), rel=1e-3)
    t_soft = gpu.attention_softmax_s(p)
    exposed = gpu.attention_pair_s(t_mma, t_soft, p, overlap=True, exp_exposed=True)
    assert exposed == pytest.approx(256 / (4096 * clk) + 1 / (16 * clk), rel=1e-3)
    assert gpu.attention_pair_s(t_mma, t_soft, p, overlap=True) == max(t_mma, t_soft)
    assert gpu.attention_pair_s(t_mma, t_soft, p, overlap=False) == t_mma + t_soft
    # head dim 256: the contractions at the library fraction (0.32 clock) outlast 0.25 + 0.0625
    grid = gpu.attention_grid(1, 8, 8, 4096, 4096, p.sms)
    t_mma = gpu.attention_matmul_s(grid, p, 256, 256, kernel="flash3")
    assert gpu.attention_pair_s(t_mma, t_soft, p, overlap=True, exp_exposed=True) == t_mma


def test_flash3_forward_head_dim_64_near_the_paper():
    # with the exponential exposed: 479 / 480 / 480 / 480 against 460 / 476 / 496 / 497 (+4..-3%); hidden behind
    # the tensor cores (the rule before) 585 / 603 / 613 / 618, +23..+27%
    p = _params("h100-sxm5-80gb")
    for seq, paper in zip(SEQS, H100_FA3_HD64["fwd"], strict=True):
        assert _tflops_hd(p, seq, 64, exp_exposed=True) == pytest.approx(paper, rel=0.05)
        assert 1.2 < _tflops_hd(p, seq, 64) / paper < 1.3
    # causal: 479 / 480 against 460 / 473 at 8k / 16k; +14% at 4k and more below (the short-sequence gap of every
    # head dim: 351 / 496 against 292 / 423 at 512 / 1k at head dim 128)
    for seq, paper in zip(SEQS[2:], H100_FA3_HD64["fwd_causal"][2:], strict=True):
        assert _tflops_hd(p, seq, 64, causal=True, exp_exposed=True) == pytest.approx(paper, rel=0.05)
    # head dim 128 does not move (L2-bound either way); head dim 256 is priced 18% slow, the known L2 gap
    for seq, paper in zip(SEQS, H100_FA3["fwd"], strict=True):
        assert _tflops_hd(p, seq, 128, exp_exposed=True) == _tflops_hd(p, seq, 128) == pytest.approx(paper, rel=0.07)
    for seq, paper in zip(SEQS[1:], H100_FA3_HD256["fwd"][1:], strict=True):
        assert 0.78 < _tflops_hd(p, seq, 256, exp_exposed=True) / paper < 0.85


def test_lowering_exposes_the_exponential_on_hopper_only():
    # the GPU lowering prices a flash3 forward at head dim 64 with the exposed exponential on the H100 (sm90),
    # not on the B200 (FlashAttention-4 emulates part of its exp2 on the FMA units)
    from simulator.engines.analytical import EvalOptions
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, Role, TensorSpec

    assert gpu.FLASH3_EXP_EXPOSED_FAMILIES == frozenset({"sm90"})
    t = TensorSpec("q", (4, 32, 4096, 64), DType.BF16, Role.ACTIVATION)
    op = Op("a", "attention", (t, t, t), (t,), Attrs({"causal": False}))
    for device, exposed in (("h100-sxm5-80gb", True), ("b200", False)):
        hw = load_hardware(device)
        kc = lower(op, LoweringContext(hw, EvalOptions(attention_kernel="flash3")))
        p = gpu.gpu_params(hw, "bf16")
        sharing = gpu.BLACKWELL_CTA_PAIR if device == "b200" else 1
        e = gpu.attention(4, 32, 32, 4096, 4096, 64, 64, p, kernel="flash3", exp_exposed=exposed,
                          kv_sharing=sharing, bwd_softmax_overlap=device == "b200")
        assert kc.compute_s == pytest.approx(e.compute_s, rel=1e-9)
