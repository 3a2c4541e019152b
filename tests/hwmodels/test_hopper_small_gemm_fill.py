"""A small Hopper GEMM's pipeline fill and drain, from the catalog's sourced latencies and rates.

docs/accuracy.md ("Small Hopper GEMMs: pipeline fill and drain, and the L2 tile rate again") asks whether the
small published H100 GEMM rows (pub-008 2048 x 1024 x 1024 fp16: -37%) are fast because the model leaves out
what a CTA pays before its first MMA (its first stage's operands from DRAM) and after its last (the C tile's
store). The model already charges both: the prologue is one DRAM latency (MT4G p-chase, 834 cycles), the
pipeline edge the cheaper of the first K-slice's load at one SM's share of the L2 and the last slice's math,
and the C store at that share plus one L2 latency (219 cycles); every kernel also pays
``efficiency.kernel_device_time_s`` (1.3 us on Hopper). The first stage's DRAM bytes, with the L2 merging
the misses of the CTAs that share a panel, take less time than the first-slice edge already charged, at the
catalog's L2 rate and at RRZE's ``gpu-l2-cache`` plateau alike, so nothing is added. Worked by hand below.
"""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device

SMS = 132
CLOCK_HZ = 1980e6  # boost clock, the catalog's cycle-to-second basis for MT4G's latencies
DRAM_LATENCY_S = 834 / CLOCK_HZ  # MT4G H100 80GB HBM3 main memory latency, mean 834 cycles
L2_LATENCY_S = 219 / CLOCK_HZ  # MT4G H100 L2 latency, mean 219 cycles
L2_BYTES_PER_S = 4529 * 2**30  # MT4G H100 SXM L2 read, 4529 GiB/s
DRAM_BYTES_PER_S = 3.35e12 * 0.946  # datasheet 3.35 TB/s x gpu-stream's triad fraction 0.946 (GH200 HBM3)
RATE_SM = 989.4e12 * 0.78 / SMS  # dense bf16/fp16 tensor peak x tensor_peak_fraction (DeepGEMM), per SM
RRZE_TILE_FRACTION = 9.92e12 / L2_BYTES_PER_S  # gpu-l2-cache/h200.txt @ 1038c5d, median over 4-32 MB: 2.04


@pytest.fixture(scope="module")
def params() -> gpu.GpuParams:
    return gpu.gpu_params(load_device("h100-sxm5-80gb"), "fp16")


def test_catalog_numbers_the_hand_computation_uses(params):
    assert float(params.sms) == SMS
    assert float(params.dram_latency_s) == pytest.approx(421.2e-9, rel=1e-3)
    assert float(params.l2_latency_s) == pytest.approx(110.6e-9, rel=1e-3)
    assert float(params.l2_bytes_per_s) * float(params.l2_tile_fraction) == pytest.approx(L2_BYTES_PER_S, rel=1e-9)
    assert float(params.dram_bytes_per_s) * float(params.dram_fraction) == pytest.approx(DRAM_BYTES_PER_S, rel=1e-9)
    assert float(params.matrix_flops_per_s) * float(params.matrix_fraction) / SMS == pytest.approx(RATE_SM, rel=1e-9)
    assert load_device("h100-sxm5-80gb").efficiency.kernel_device_time_s == pytest.approx(1.3e-6)


def test_pub_008_fill_and_drain_already_charged(params):
    e = gpu.gemm(2048, 1024, 1024, params, gpu.tile_candidates("hopper", True, 2.0))
    assert str(e.tile) == "128x128x64_s6_c2x2" and int(e.split_k) == 1 and int(e.ctas) == 128  # one wave
    l2_share = SMS / L2_BYTES_PER_S  # s per byte at one SM's share of the L2
    c_store = 128 * 128 * 2 * l2_share + L2_LATENCY_S  # drain: the C tile into L2
    slice_load = (128 / 2 + 128 / 2) * 64 * 2 * l2_share  # first K-slice, 2 x 2 cluster multicast
    slice_math = 2 * 128 * 128 * 64 / RATE_SM
    assert c_store == pytest.approx(1.0001e-6, rel=1e-3)
    assert slice_load == pytest.approx(0.4447e-6, rel=1e-3) and slice_math == pytest.approx(0.3587e-6, rel=1e-3)
    edges = c_store + min(slice_load, slice_math)
    assert float(e.edge_s) == pytest.approx(edges, rel=1e-9)
    assert float(e.latency_s) == pytest.approx(DRAM_LATENCY_S + edges, rel=1e-9)  # prologue + edges
    # the first stage from DRAM: every A row and B column of the one wave once (the L2 merges the misses)
    fill = (2048 + 1024) * 64 * 2 / DRAM_BYTES_PER_S
    assert fill == pytest.approx(0.1241e-6, rel=1e-3)
    assert fill < min(slice_load, slice_math)
    # measured 17.66 us (triton-lang/triton #2339, do_bench): the gap is ~45x the fill
    assert (17.664e-6 - float(e.time_s) - 1.3e-6) / fill > 40


def test_fill_is_covered_at_the_rrze_tile_rate_too(params):
    fast = dataclasses.replace(params, l2_tile_fraction=RRZE_TILE_FRACTION, l2_port_ratio=1.0)  # (the same per-SM figure)
    e = gpu.gemm(2048, 1024, 1024, fast, gpu.tile_candidates("hopper", True, 2.0))
    assert str(e.tile) == "128x128x64_s6_c2x2" and int(e.ctas) == 128
    slice_load = (128 / 2 + 128 / 2) * 64 * 2 * SMS / 9.92e12
    assert slice_load == pytest.approx(0.2180e-6, rel=1e-3)
    fill = (2048 + 1024) * 64 * 2 / DRAM_BYTES_PER_S
    assert fill < slice_load < 2 * 128 * 128 * 64 / RATE_SM
    # the whole kernel: 9.54 us at MT4G's rate (L2-bound: its 128 CTAs leave 4 of the 132 SMs idle, so the
    # grid's 128 x 294,912 B load at the whole tile rate, efficiency.l2_tile_sm_port_ratio), 6.93 us at RRZE's
    # (main-loop bound)
    assert float(gpu.gemm(2048, 1024, 1024, params, gpu.tile_candidates("hopper", True, 2.0)).time_s) == \
        pytest.approx(128 * 294912 / L2_BYTES_PER_S + 1.7834e-6, rel=1e-3)
    assert float(e.time_s) == pytest.approx(6.93e-6, rel=2e-3) and e.bound_term == "main-loop"


def test_m128_kernel_at_either_tile_rate(params):
    """gemmk-011 (128 x 4096 x 4096 bf16, TensorRT-LLM under CUDA graphs, 16.10 us). At MT4G's rate with every CTA
    held to its share of the L2, the no-split tile is L2-bound (29.5 us) and the model splits K three ways (96 CTAs,
    22.68 us, two fixup hand-offs of a 128 x 128 fp32 tile, 7.56 us). With the per-SM intake
    (efficiency.l2_tile_sm_port_ratio) a grid that leaves SMs idle loads faster than the share, and a split of two
    (64 CTAs, one hand-off) wins, main-loop bound: 16.88 us, the hand-off's read and the first K-slice also at the
    per-SM intake (the 32 and 64 SMs that read them take less than the tile rate at it). At RRZE's tile rate (whose per-SM figure is the same
    9.92 TB/s / 132, so the ratio is 1 there) a 128 x 64 tile split twice wins."""
    cands = gpu.tile_candidates("hopper", True, 2.0)
    held = gpu.gemm(128, 4096, 4096, dataclasses.replace(params, l2_port_ratio=1.0), cands)
    assert str(held.tile) == "128x128x64_s6_c2x2" and int(held.split_k) == 3
    hop = 2 * 128 * 128 * 4 * SMS / L2_BYTES_PER_S + 2 * L2_LATENCY_S  # one hand-off of the fp32 partial tile
    assert float(held.fixup_s) == pytest.approx(2 * hop, rel=1e-9) and 2 * hop == pytest.approx(7.558e-6, rel=1e-3)
    assert float(held.time_s) == pytest.approx(22.68e-6, rel=1e-3)
    slow = gpu.gemm(128, 4096, 4096, params, cands)
    assert str(slow.tile) == "128x128x64_s6_c2x2" and int(slow.split_k) == 2 and int(slow.ctas) == 64
    # the hand-off: 32 output tiles, so 32 SMs read the partners' fp32 tiles together, each at one SM's intake;
    # the sums are written at the share
    port_hop = (128 * 128 * 4 * SMS / L2_BYTES_PER_S * (1 + 1 / float(params.l2_port_ratio)) + 2 * L2_LATENCY_S)
    assert float(slow.fixup_s) == pytest.approx(port_hop, rel=1e-9) and port_hop == pytest.approx(2.872e-6, rel=1e-3)
    # the main loop: one 128 x 128 x 2048 slab per busy SM at the tensor rate; its panels (622,592 B a CTA, 2 x 2
    # multicast, the fp32 partial written and read back) load in 8.28 us at the per-SM intake, under the math
    assert float(slow.compute_s) == pytest.approx(2 * 128 * 128 * 2048 / RATE_SM, rel=1e-9)
    per_cta = (64 + 64) * 2048 * 2 + 128 * 128 * 4 * 1.5
    port_load = per_cta * SMS / (L2_BYTES_PER_S * 2.0396)
    assert port_load == pytest.approx(8.285e-6, rel=1e-3) and port_load < float(slow.compute_s)
    assert float(slow.time_s) == pytest.approx(16.88e-6, rel=1e-3) and slow.bound_term == "main-loop"
    fast = gpu.gemm(128, 4096, 4096, dataclasses.replace(params, l2_tile_fraction=RRZE_TILE_FRACTION,
                                                        l2_port_ratio=1.0), cands)
    # with the streaming figure at gpu-stream's triad a 128 x 64 tile split twice wins at RRZE's rate (13.49 us;
    # 14.79 us for the no-split 64 x 64 tile at MT4G's read figure)
    assert str(fast.tile) == "128x64x64_s8" and int(fast.split_k) == 2
    assert float(fast.time_s) == pytest.approx(13.49e-6, rel=1e-3)
    measured = 16.10e-6
    # +12.9% with the per-SM intake (+19.4% with only the main loop's panels at it, +49% held to the share),
    # -8.1% at RRZE's tile rate
    assert (float(slow.time_s) + 1.3e-6) / measured - 1 == pytest.approx(0.1291, abs=1e-3)
    assert (float(held.time_s) + 1.3e-6) / measured - 1 == pytest.approx(0.4897, abs=1e-3)
    assert abs(float(fast.time_s) + 1.3e-6 - measured) < abs(float(slow.time_s) + 1.3e-6 - measured)
