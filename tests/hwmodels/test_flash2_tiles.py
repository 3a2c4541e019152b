"""FlashAttention-2's tiles as its v2.7.4 launch templates choose them (``hwmodels.gpu.flash2_tile``): every branch of
``run_mha_fwd_hdim*`` / ``run_mha_bwd_hdim*``, hand-computed CTAs and edges of a forward and a backward case per
branch, the GPU lowering's choice per device, and the causal-ratio edges without a step at a ratio of 1
(docs/accuracy.md, "FlashAttention-2's tiles by head dim, direction and device")."""

from __future__ import annotations

import pytest
from gpu_devices import toy_gpu

from hwmodels import gpu
from hwmodels.catalog import load_device

KIB = 1024
#: (compute capability, shared memory per SM, per block) as the catalog states them (CUDA C++ Programming Guide)
A100 = (80, 164 * KIB, 163 * KIB)
H100 = (90, 228 * KIB, 227 * KIB)
B200 = (100, 228 * KIB, 227 * KIB)
L4 = (89, 100 * KIB, 99 * KIB)  # sm89; the A10 (sm86) has the same figures
ORIN = (87, 164 * KIB, 163 * KIB)  # is_sm8x, with the A100's shared memory


def _tile(head_dim: int, dev: tuple[int, int, int], *, backward: bool = False, **kw: bool) -> tuple[int, int, int]:
    cc, per_sm, per_block = dev
    t = gpu.flash2_tile(head_dim, backward=backward, compute_capability=cc, smem_per_sm=per_sm,
                        smem_per_block=per_block, **kw)
    return t.block_m, t.block_n, t.warps


# Flash_fwd_kernel_traits<Headdim, kBlockM, kBlockN, kNWarps, ...> of flash_fwd_launch_template.h, v2.7.4.post1
FORWARD = [
    (32, A100, {}, (128, 128, 4)),
    (64, H100, {}, (128, 128, 4)), (64, H100, {"dropout": True}, (128, 64, 4)),
    (96, L4, {}, (128, 64, 4)), (96, L4, {"causal": True}, (64, 64, 4)), (96, A100, {"causal": True}, (128, 64, 4)),
    (128, A100, {}, (128, 64, 4)), (128, B200, {"causal": True}, (128, 64, 4)), (128, A100, {"dropout": True}, (128, 32, 4)),
    (128, L4, {}, (128, 32, 4)), (128, L4, {"causal": True}, (64, 64, 4)), (128, ORIN, {"causal": True}, (64, 64, 4)),
    (160, A100, {}, (128, 32, 4)), (160, L4, {}, (128, 64, 8)), (160, L4, {"causal": True}, (64, 64, 4)),
    (192, H100, {}, (128, 64, 8)), (192, H100, {"dropout": True}, (64, 64, 4)),
    # 256: 128 x 64 with 8 warps where a block may take 2 * 256 * (128 + 128) B = 128 KiB and an SM holds less
    # than 4 * 256 * (64 + 128) B = 192 KiB (the A100); 64 x 64 on the H100 (two CTAs an SM) and on sm86/sm89
    (256, A100, {}, (128, 64, 8)), (256, ORIN, {}, (128, 64, 8)), (256, H100, {}, (64, 64, 4)), (256, L4, {}, (64, 64, 4)),
]

# Flash_bwd_kernel_traits<Headdim, kBlockM, kBlockN, kNWarps, ...> of flash_bwd_launch_template.h, v2.7.4.post1
BACKWARD = [
    (32, L4, {}, (128, 128, 8)),
    (64, A100, {}, (128, 128, 8)), (64, L4, {}, (64, 128, 8)),
    (96, B200, {}, (64, 128, 8)),
    (128, H100, {}, (64, 128, 8)), (128, L4, {}, (64, 64, 8)),
    (160, A100, {}, (64, 64, 8)), (160, L4, {}, (64, 64, 8)),
    (192, H100, {}, (64, 64, 8)), (192, L4, {}, (64, 64, 8)),
    (256, H100, {}, (64, 64, 8)), (256, A100, {}, (64, 64, 8)), (256, L4, {}, (64, 32, 8)),
]


@pytest.mark.parametrize(("head_dim", "dev", "kw", "expected"), FORWARD)
def test_forward_tiles_by_branch(head_dim, dev, kw, expected):
    assert _tile(head_dim, dev, **kw) == expected


@pytest.mark.parametrize(("head_dim", "dev", "kw", "expected"), BACKWARD)
def test_backward_tiles_by_branch(head_dim, dev, kw, expected):
    assert _tile(head_dim, dev, backward=True, **kw) == expected


def test_backward_register_and_buffer_flags():
    def flags(head_dim, dev, dropout=False):
        t = gpu.flash2_tile(head_dim, backward=True, compute_capability=dev[0], smem_per_sm=dev[1],
                            smem_per_block=dev[2], dropout=dropout)
        return t.v_in_regs, t.double_buffer

    # head dim 32: V in registers unless dropout with 2 * ((3 * 128 + 2 * 128) * 32 + 2 * 128 * 128) B = 104 KiB
    assert flags(32, A100) == (True, True) and flags(32, A100, True) == (False, True) and flags(32, L4, True) == (True, True)
    assert flags(160, L4) == (False, False) and flags(160, A100) == (False, True)  # No_double_buffer under 116 KiB
    assert flags(192, L4) == (True, False) and flags(192, A100) == (False, True)  # under 136 KiB
    # head dim 256: the H100 (176 KiB and more) double-buffers, the A100 does not, sm86/sm89 hold V in registers
    assert flags(256, H100) == (False, True) and flags(256, A100) == (False, False) and flags(256, L4) == (True, False)


def test_head_dims_run_the_next_instantiation():
    # HEADDIM_SWITCH: 80 runs the 96 kernel, 112 the 128 one, 200 the 256 one
    assert _tile(80, L4, causal=True) == _tile(96, L4, causal=True) == (64, 64, 4)
    assert _tile(112, L4) == (128, 32, 4)
    assert _tile(200, H100, backward=True) == (64, 64, 8)


def _edges(grid, p, head_dim, rows_step, pair_s=1e-6):
    return gpu.attention_edges_s(grid, p, head_dim, head_dim, pair_s, p.sms, step_rows=rows_step)


def test_forward_edges_by_hand_per_branch():
    # toy GPU: 4 SMs, one SM's share of the L2 1 ps/B, L2 latency 20 ns. b=1, h=4, s=1024, head dim 128
    p = gpu.gpu_params(toy_gpu(), "bf16")
    # sm80/sm90/sm100, 128 x 64: 32 CTAs, 8 an SM; each loads Q and the first K block (128 + 64) x 128 x 2 B
    # = 49.152 ns, stores O 128 x 128 x 2 B = 32.768 ns, one L2 latency
    grid = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, block_q=128)
    assert _edges(grid, p, 128, 64) == pytest.approx(8 * (49.152e-9 + 32.768e-9 + 20e-9))
    # sm8x non-causal, 128 x 32: the first K block is 32 keys, (128 + 32) x 128 x 2 B = 40.96 ns
    assert _edges(grid, p, 128, 32) == pytest.approx(8 * (40.96e-9 + 32.768e-9 + 20e-9))
    # sm8x causal, 64 x 64: 64 CTAs, 16 an SM; (64 + 64) x 128 x 2 B = 32.768 ns in, 64 x 128 x 2 B = 16.384 ns out
    grid64 = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, causal=True, block_q=64)
    assert grid64.ctas == 64
    assert _edges(grid64, p, 128, 64) == pytest.approx(16 * (32.768e-9 + 16.384e-9 + 20e-9))


def test_backward_edges_by_hand_per_branch():
    # the same toy GPU and problem, backward: a CTA owns a key block and loads K, V and the first Q and dO blocks
    p = gpu.gpu_params(toy_gpu(), "bf16")
    # at least 144 KiB a block, head dim 128, 64 x 128: 32 CTAs, 8 an SM; (128 + 64) x 256 x 2 B = 98.304 ns in,
    # dK and dV 128 x 256 x 2 B = 65.536 ns out
    grid = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, backward=True, block_q=128)
    assert _edges(grid, p, 128, 64) == pytest.approx(8 * (98.304e-9 + 65.536e-9 + 20e-9))
    # under 144 KiB (sm86/sm89), 64 x 64: 64 CTAs, 16 an SM; (64 + 64) x 256 x 2 B in, 64 x 256 x 2 B out
    grid64 = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, backward=True, block_q=64)
    assert _edges(grid64, p, 128, 64) == pytest.approx(16 * (65.536e-9 + 32.768e-9 + 20e-9))
    # head dim 256 under 144 KiB, 64 x 32: 128 CTAs, 32 an SM; (32 + 64) x 512 x 2 B in, 32 x 512 x 2 B out
    grid32 = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, backward=True, block_q=32)
    assert _edges(grid32, p, 256, 64) == pytest.approx(32 * (98.304e-9 + 32.768e-9 + 20e-9))


@pytest.mark.parametrize(("backward", "causal", "dev", "own", "step"), [
    (False, False, L4, 128, 32), (False, True, L4, 64, 64), (False, False, A100, 128, 64),
    (True, False, A100, 128, 64), (True, False, L4, 64, 64)])
def test_attention_prices_the_tiles_ctas_and_edges(backward, causal, dev, own, step):
    # attention(tile=...) is the kernel model on the tile's own blocks plus the edges of its first blocks
    p = gpu.gpu_params(toy_gpu(), "bf16")
    tile = gpu.flash2_tile(128, backward=backward, compute_capability=dev[0], smem_per_sm=dev[1],
                           smem_per_block=dev[2], causal=causal)
    assert (tile.own_rows(backward), tile.step_rows(backward)) == (own, step)
    args = (1, 4, 4, 1024, 1024, 128, 128, p)
    bare = gpu.attention(*args, backward=backward, causal=causal, tile=tile, cta_edges=False)
    tiled = gpu.attention(*args, backward=backward, causal=causal, tile=tile)
    grid = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, causal=causal, backward=backward, block_q=own,
                              block_kv=0 if backward else step)
    pair_s = bare.compute_s / (grid.pairs / 4)  # the busiest of the 4 SMs runs a quarter of the pairs
    assert dict(tiled.details)["ctas"] == grid.ctas == 4 * 1024 / own
    # the toy SM (64 Ki registers, 228 KiB) holds two 4-warp forward CTAs, one 8-warp backward CTA
    occ = gpu.flash2_ctas_per_sm(tile, 128, backward, p)
    assert occ == (1.0 if backward else 2.0)
    assert tiled.compute_s - bare.compute_s == pytest.approx(
        float(gpu.attention_edges_s(grid, p, 128, 128, pair_s, p.sms, step_rows=step, ctas_per_sm=occ)), rel=1e-9)


def _lowered_tile(device: str, d: int, *, causal: bool, backward: bool) -> str:
    from simulator.engines.analytical import EvalOptions
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, Role, TensorSpec

    t = TensorSpec("q", (2, 8, 1024, d), DType.FP16, Role.ACTIVATION)
    kind = "attention_bwd" if backward else "attention"
    op = Op("a", kind, (t, t, t, t, t), (t, t, t), Attrs({"causal": causal})) if backward else \
        Op("a", kind, (t, t, t), (t,), Attrs({"causal": causal}))
    return lower(op, LoweringContext(load_device(device), EvalOptions(attention_kernel="flash2"))).tile


@pytest.mark.parametrize(("device", "d", "causal", "backward", "tile"), [
    ("l4", 128, True, False, "q64"), ("l40s", 128, False, False, "q128"), ("jetson-agx-orin-64gb", 128, True, False, "q64"),
    ("a100-sxm4-80gb", 128, True, False, "q128"), ("a10", 128, False, True, "q64"), ("a100-sxm4-80gb", 128, False, True, "q128"),
    ("h100-sxm5-80gb", 256, False, True, "q64"), ("b200", 256, False, False, "q64"), ("a100-sxm4-80gb", 256, False, False, "q128"),
    ("t4", 128, True, False, "q128")])
def test_lowering_takes_the_devices_tile(device, d, causal, backward, tile):
    # the CTA's own rows from the catalog's compute capability and shared memory (the T4 keeps 128: no FA2 build)
    assert _lowered_tile(device, d, causal=causal, backward=backward) == tile


def test_measured_causal_ratio_of_one_prices_edges_as_just_below_it():
    # a measured ratio scales the non-causal edges by the visible share; that holds at a ratio of exactly 1 too
    # (a calibrated scale may take the table to 1): no step between 0.999999 and 1, and no measurement is not 1
    p = gpu.gpu_params(toy_gpu(), "bf16")
    args = (1, 4, 4, 1024, 1024, 128, 128, p)
    at_one = gpu.attention(*args, causal=True, causal_rate_ratio=1.0).compute_s
    below = gpu.attention(*args, causal=True, causal_rate_ratio=0.999999).compute_s
    unmeasured = gpu.attention(*args, causal=True).compute_s
    assert at_one == pytest.approx(below, rel=1e-5)
    assert unmeasured > at_one * 1.001


def test_backward_ctas_own_key_blocks_of_a_cross_attention():
    # run_flash_bwd_seqk_parallel launches grid_n(ceil(seqlen_k / kBlockN), b, h): 256 queries over 1024 keys in
    # 128-key blocks are 8 CTAs a head (the forward's 2 query blocks before), each streaming all 256 Q and dO rows
    p = gpu.gpu_params(toy_gpu(), "bf16")
    grid = gpu.attention_grid(1, 2, 2, 256, 1024, p.sms, backward=True)
    assert grid.ctas == 16 and grid.q_panels == 8
    assert grid.heaviest_pairs == 128 * 256  # every query sees the first key block
    # causal, aligned to the end of the keys: the first 128 keys are 768 and more behind every query
    assert gpu.attention_grid(1, 2, 2, 256, 1024, p.sms, backward=True, causal=True).heaviest_pairs == 128 * 256
    # self-attention: the first key block is seen by 1024 - j queries, 128 * 1024 - 127 * 128 / 2 pairs, as the
    # forward's last query block
    self_bwd = gpu.attention_grid(1, 2, 2, 1024, 1024, p.sms, backward=True, causal=True)
    assert self_bwd.heaviest_pairs == gpu.attention_grid(1, 2, 2, 1024, 1024, p.sms, causal=True).heaviest_pairs == 122944
    # L2: the Q and dO panels (64 + 64 columns, 2 B) of 256 rows past each of the 8 key blocks of each head, besides
    # the compulsory traffic and the dQ partials
    _, l2 = gpu.attention_traffic_bytes(grid, 64, 64)
    dram, _ = gpu.attention_traffic_bytes(grid, 64, 64)
    dq_partials = 2 * 8 * 256 * 64 * gpu.DQ_ACCUM_BYTES
    assert l2 - dram - dq_partials == pytest.approx(2 * 8 * 256 * 128 * 2)


def test_hardware_variants_each_take_their_own_tile():
    # a sweep over the shared memory a block may take: 99 KiB (64 x 64 backward CTAs at head dim 128) and 227 KiB
    # (64 x 128) priced in one vectorised pass equal the scalar engine variant by variant
    from hwmodels.paths import with_overrides
    from simulator.engines.analytical import EvalOptions, evaluate
    from simulator.engines.vectorized import evaluate_variants
    from simulator.hardware import load_hardware
    from workloads.micro import build_micro

    g = build_micro("attention:b=4,h=16,s=2048,d=128,causal=1,bwd=1", dtype="bf16")
    spec, opts = load_hardware("b200"), EvalOptions(attention_kernel="flash2")
    res = evaluate_variants(g, spec, {"sm.max_shared_mem_per_cta_bytes": [99 * KIB, 227 * KIB, 160 * KIB]}, opts)
    times = []
    for i in range(len(res)):
        times.append(evaluate(g, with_overrides(spec, res.variant(i)), opts).totals.latency_s)
        assert res.latency_s[i] == pytest.approx(times[i], rel=1e-9)
    assert times[0] != pytest.approx(times[1], rel=1e-3) and times[1] == pytest.approx(times[2], rel=1e-12)


# kSmemSize (forward) and kSmemSize1colblock (backward) of kernel_traits.h against the shared memory the launch
# templates' comments state: "128 x 64 (128KB smem)" and "64 x 64 (96KB smem)" at head dim 256 forward, and the
# 144 KiB a block must take for the 128 x 128 (head dim 64) and 64 x 128 (head dim 128) backward tiles
@pytest.mark.parametrize(("head_dim", "dev", "backward", "kib"), [
    (256, A100, False, 128), (256, H100, False, 96), (64, A100, True, 144), (128, H100, True, 144),
    # head dim 128 forward 128 x 64: Q 128 x 128 x 2 B + K and V 2 x 64 x 128 x 2 B = 64 KiB
    (128, A100, False, 64),
    # sm86/sm89 backward at head dim 128, 64 x 64 with V in registers: Q double-buffered and dO, 3 x 64 x 128 x 2 B
    # = 48 KiB, then max(K and V 32 KiB, 16 KiB + P and dS 2 x 64 x 64 x 2 B = 16 KiB) = 32 KiB
    (128, L4, True, 80)])
def test_shared_memory_per_cta_as_the_templates_state(head_dim, dev, backward, kib):
    t = gpu.flash2_tile(head_dim, backward=backward, compute_capability=dev[0], smem_per_sm=dev[1],
                        smem_per_block=dev[2])
    assert t.smem_bytes(head_dim, backward) == kib * KIB


def _resident(device: str, head_dim: int, backward: bool = False, causal: bool = False) -> float:
    d = load_device(device)
    t = gpu.flash2_tile(head_dim, backward=backward, compute_capability=int(d.sm.compute_capability),
                        smem_per_sm=float(d.sm.shared_mem_per_sm_bytes),
                        smem_per_block=float(d.sm.max_shared_mem_per_cta_bytes), causal=causal)
    return float(gpu.flash2_ctas_per_sm(t, head_dim, backward, gpu.gpu_params(d, "bf16")))


def test_ctas_per_sm_by_registers_and_shared_memory():
    # "For H100 we want to run with 64 x 64 (96KB smem) since then we can get 2 CTAs per SM": 2 x 97 KiB of 228
    assert _resident("h100-sxm5-80gb", 256) == 2.0
    # the A100's 128 x 64 with 8 warps at 255 registers (issue #340): 256 x 255 of 65,536 registers, one CTA
    assert _resident("a100-sxm4-80gb", 256) == 1.0
    # 4-warp forward CTAs at 180-255 registers (issue #1630): 2 x 128 x 255 = 65,280 registers, two a SM
    assert _resident("a100-sxm4-80gb", 128) == _resident("b200", 64) == _resident("l4", 128, causal=True) == 2.0
    # the L4's 100 KiB hold one 96 KiB CTA (head dim 256, 64 x 64) and one 8-warp backward CTA
    assert _resident("l4", 256) == 1.0 and _resident("h100-sxm5-80gb", 128, backward=True) == 1.0


def test_co_resident_ctas_expose_one_edge_a_round():
    # the toy GPU's 64 x 64 forward case: 64 CTAs, 16 an SM, one edge 32.768 + 16.384 + 20 ns; two resident at once
    # expose 8 rounds, three 6 (ceil(16 / 3)), sixteen or more one
    p = gpu.gpu_params(toy_gpu(), "bf16")
    grid = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms, causal=True, block_q=64)
    edge = 32.768e-9 + 16.384e-9 + 20e-9
    for q, rounds in ((1, 16), (2, 8), (3, 6), (16, 1), (32, 1)):
        assert gpu.attention_edges_s(grid, p, 128, 128, 1e-6, p.sms, step_rows=64, ctas_per_sm=q) == pytest.approx(
            rounds * edge)


def test_causal_forward_computes_whole_key_blocks():
    # n_block_max = ceil(((i + 1) * kBlockM + seqlen_k - seqlen_q) / kBlockN): 256 x 256 causal, 64 x 64 tiles run
    # 1, 2, 3, 4 key blocks of 64 x 64 pairs, 10 x 4096 = 40,960 (32,896 visible), the last CTA 64 x 256 = 16,384;
    # 128 x 32 tiles run 4 and 8 blocks of 128 x 32, 16,384 + 32,768 = 49,152, the last CTA 32,768
    p = gpu.gpu_params(toy_gpu(), "bf16")
    square = gpu.attention_grid(1, 1, 1, 256, 256, p.sms, causal=True, block_q=64, block_kv=64)
    assert (square.head_pairs, square.heaviest_pairs) == (40960.0, 16384.0)
    tall = gpu.attention_grid(1, 1, 1, 256, 256, p.sms, causal=True, block_q=128, block_kv=32)
    assert (tall.head_pairs, tall.heaviest_pairs) == (49152.0, 32768.0)
    exact = gpu.attention_grid(1, 1, 1, 256, 256, p.sms, causal=True, block_q=64)
    assert exact.head_pairs == 256 * 257 / 2
    # 200 queries over 300 keys (aligned to the end), 128 x 64: the first CTA runs ceil((128 + 100) / 64) = 4 blocks,
    # 128 x 256 pairs; the second's 72 rows ceil((256 + 100) / 64) = 6, capped at the 300 keys: 72 x 300
    cross = gpu.attention_grid(1, 1, 1, 200, 300, p.sms, causal=True, block_q=128, block_kv=64)
    assert (cross.head_pairs, cross.heaviest_pairs) == (128 * 256 + 72 * 300, 128 * 256)


def test_square_tile_is_the_fastest_causal_forward_on_sm8x():
    # "64 x 64 ... the fastest for causal (because it's square)" (run_mha_fwd_hdim128, is_sm8x): on the L4 the
    # template's tile prices faster than the 128 x 32 it takes non-causal, which wastes twice the masked pairs
    p = gpu.gpu_params(load_device("l4"), "bf16")
    for seq in (2048, 4096, 8192):
        args = (16384 // seq, 16, 16, seq, seq, 128, 128, p)
        square = gpu.attention(*args, causal=True, tile=gpu.Flash2Tile(64, 64)).time_s
        assert square < gpu.attention(*args, causal=True, tile=gpu.Flash2Tile(128, 32)).time_s
