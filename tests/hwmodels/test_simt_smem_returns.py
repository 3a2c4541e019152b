"""SIMT (CUDA-core) GEMM tiles: each lane reads its own thread tile's operands from shared memory.

Hand-worked values: CUTLASS's SIMT lane layout (8 x 4 lanes for a tall warp tile, else 4 x 8) gives
the thread tile; shared memory returns one 32-bit register per lane per clock (128 B/clk/SM), so a
warp's K step costs ``32 * (thread_m + thread_n)`` register returns.
"""

from __future__ import annotations

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device

SIMT = {t.name: t for t in gpu.tile_candidates("ampere", matrix_unit=False)}


@pytest.mark.parametrize(("name", "thread_tile", "scale"), [
    # 128x128, 4 x 2 warps: warp tile 32 x 64, lanes 4 x 8 -> 8 x 8; 32 x (8 + 8) / (32 + 64)
    ("128x128x8_s2", (8, 8), 32 * 16 / 96),
    # 128x64, 2 x 2 warps: warp tile 64 x 32 (tall), lanes 8 x 4 -> 8 x 8
    ("128x64x8_s2", (8, 8), 32 * 16 / 96),
    # 64x64, 2 x 2 warps: warp tile 32 x 32 (not tall), lanes 4 x 8 -> 8 x 4; 32 x 12 / 64 = 6
    ("64x64x8_s2", (8, 4), 6.0),
    ("32x32x8_s2", (8, 4), 6.0),
])
def test_simt_thread_tile_and_register_returns_by_hand(name, thread_tile, scale):
    t = SIMT[name]
    assert t.simt
    assert t.thread_tile == thread_tile
    assert t.smem_return_scale() == pytest.approx(scale)


def test_tensor_core_tiles_read_each_warp_tile_word_once():
    for t in gpu.tile_candidates("ampere") + gpu.tile_candidates("hopper"):
        assert not t.simt
        assert t.smem_return_scale() == 1.0


def test_simt_smem_feed_by_hand():
    # 4096^3 fp32 on the 128x128 SIMT tile: 8 warps x (32 + 64) x 4096 x 4 B = 12 MiB of distinct
    # words per CTA (the energy count), but 256 lanes x (8 + 8) x 4096 x 4 B = 64 MiB of register
    # returns; 2 CTAs at 128 GB/s = 1.048576 ms
    g = gpu.gemm_launch(4096, 4096, 4096, (SIMT["128x128x8_s2"],), (1,), in_bytes=4.0, out_bytes=4.0)
    assert gpu.gemm_smem_bytes_per_cta(g)[0] == 8 * 96 * 4096 * 4
    assert gpu.gemm_smem_return_bytes_per_cta(g)[0] == pytest.approx(256 * 16 * 4096 * 4)
    assert gpu.gemm_smem_feed_s(g, 2.0, 128e9)[0] == pytest.approx(1.048576e-3)


def _terms(device: str, tile: str) -> tuple[float, float, float]:
    """(main-loop math, shared-memory feed, FP32 FLOP per SM per clock) of one CTA's 4096^3 SGEMM (s)."""
    p = gpu.gpu_params(load_device(device), "fp32")
    g = gpu.gemm_launch(4096, 4096, 4096, (SIMT[tile],), (1,), in_bytes=4.0, out_bytes=4.0)
    rate_sm = p.matrix_flops_per_s * p.matrix_fraction / p.sms
    math = gpu.gemm_main_loop_s(g, 1.0, rate_sm)[0]
    return math, gpu.gemm_smem_feed_s(g, 1.0, p.smem_bytes_per_s_per_sm)[0], rate_sm / p.clock_hz


def test_128_lane_sms_are_fed_by_shared_memory_only_with_8x8_thread_tiles():
    # per K step: a 128x128 CTA (8 x 8 per lane) needs 256 x 16 x 4 B = 16384 B of returns = 128 clocks
    # at 128 B/clk, against 2 x 128 x 128 FLOP of math; a 32x32 CTA (8 x 4) 32 x 12 x 4 B = 12 clocks
    # against 2 x 32 x 32 FLOP. H100: 66.9 TFLOP/s x 0.775 over 132 SMs at the 1830 MHz sustained clock
    # = 214.6 FLOP/clk per SM (the datasheet rate is at the 1980 MHz boost clock): 128 x 128 tiles need
    # 152.7 clocks of math per K step (math-bound), 32 x 32 tiles 9.54 (shared-memory bound)
    math, feed, per_clk = _terms("h100-sxm5-80gb", "128x128x8_s2")
    assert feed / math == pytest.approx(128 / (2 * 128 * 128 / per_clk))
    assert feed < math
    math, feed, per_clk = _terms("h100-sxm5-80gb", "32x32x8_s2")
    assert feed / math == pytest.approx(12 / (2 * 32 * 32 / per_clk))
    assert feed > math
    # A100 (64 FP32 lanes/SM): 19.5 TFLOP/s x 0.9605 (FlagPerf's measured SGEMM) / 108 SMs / 1410 MHz
    # = 123.0 FLOP/clk: a 32 x 32 CTA's 12 clocks of returns stay under its 16.65 clocks of math
    math, feed, per_clk = _terms("a100-sxm4-40gb", "32x32x8_s2")
    assert per_clk == pytest.approx(19.5e12 * 0.9605 / 108 / 1.41e9)
    assert feed / math == pytest.approx(12 / (2 * 32 * 32 / per_clk))
    assert feed < math


def test_an_sgemm_on_hopper_takes_8x8_thread_tiles():
    # at 4096^3 the 64x64 and 32x32 tiles (8 x 4 per lane) wait on shared memory; the chosen tile is one
    # of the 8 x 8 ones, at the measured 0.775 of the FP32 peak
    p = gpu.gpu_params(load_device("h100-sxm5-80gb"), "fp32")
    est = gpu.gemm(4096, 4096, 4096, p, gpu.tile_candidates("hopper", matrix_unit=False), in_bytes=4.0, out_bytes=4.0)
    assert SIMT[est.tile.split()[0] if " " in est.tile else est.tile].thread_tile == (8, 8)
