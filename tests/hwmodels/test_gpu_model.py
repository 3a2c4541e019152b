"""GPU kernel models: hand-worked GEMM tiles and waves, a bandwidth-bound kernel, properties, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_devices import h100, toy_gpu

from hwmodels import gpu
from hwmodels.energy import kernel_energy
from hwmodels.spec import SpecError

# One Hopper-style candidate with 4 math warps (2 x 2): warp tile 64 x 128.
TILE = gpu.TileCandidate(128, 256, 64, stages=2, warps_m=2, warps_n=2, threads=128)


def toy_params():
    return gpu.gpu_params(toy_gpu(), "bf16")


def test_occupancy_inputs_by_hand():
    # accumulators 128*256/128 = 256 regs -> capped at 255; smem 2 stages x (128+256) x 64 x 2 B
    assert TILE.registers_per_thread(2.0) == 255
    assert TILE.smem_bytes(2.0) == 98304


def test_gemm_one_full_wave_by_hand():
    # m=512, n=512, k=1024 -> 4 x 2 = 8 CTAs on 4 SMs; 2 CTAs/SM by registers (65536 // (255*128))
    # and shared memory (233472 // (98304 + 1024)): exactly one wave, 2 CTAs on every SM.
    e = gpu.gemm(512, 512, 1024, toy_params(), (TILE,), split_k=(1,))
    assert e.ctas == 8 and e.ctas_per_sm == 2 and e.waves == pytest.approx(1.0)
    # tensor time: 2 CTAs x 2*128*256*1024 FLOP / 4.096e12 FLOP/s per SM = 32.768 us
    assert e.compute_s == pytest.approx(32.768e-6)
    # shared memory: 2 x 4 warps x (64 + 128) x 1024 x 2 B / 128 GB/s = 24.576 us (< compute)
    # DRAM: A and B (2 MiB) fit in the 4 MiB L2 -> compulsory A + B + C = 2.5 MiB at 1 TB/s
    assert e.dram_bytes == pytest.approx(2.5 * 2**20)
    assert e.memory_s == pytest.approx(24.576e-6)
    # pipeline edges at one SM's share of the L2 (4 TB/s / 4 SMs = 1 ps/B): the first K-slice's
    # panels (128 + 256) x 64 x 2 B = 49.152 ns (shorter than a slice of math, 1.024 us), then the
    # C store 128 x 256 x 2 B = 65.536 ns + one L2 latency (20 ns)
    assert e.edge_s == pytest.approx(49.152e-9 + 65.536e-9 + 20e-9)
    assert e.time_s == pytest.approx(32.768e-6 + 100e-9 + 134.688e-9)  # + one DRAM latency + edges
    assert e.tile == "128x256x64_s2" and e.split_k == 1 and e.fixup_s == 0 and e.stall_s == 0


def test_gemm_partial_last_wave_by_hand():
    # m=640 -> 5 x 2 = 10 CTAs: the busiest SM runs ceil(10/4) = 3 CTAs; waves = 10 / 8 = 1.25
    e = gpu.gemm(640, 512, 1024, toy_params(), (TILE,), split_k=(1,))
    assert e.waves == pytest.approx(1.25)
    assert e.compute_s == pytest.approx(3 * 16.384e-6)
    # edges once per round of co-resident CTAs (the toy tile is not persistent; 134.688 ns each, two rounds)
    assert e.time_s == pytest.approx(3 * 16.384e-6 + 100e-9 + 2 * 134.688e-9)


def test_split_k_for_a_skinny_gemm_by_hand():
    # m=128, n=256, k=16384: one CTA without split-K (262.144 us on one SM); split-K 4 gives
    # 4 CTAs of K=4096 on 4 SMs: 65.536 us of tensor time, and it is chosen.
    p = toy_params()
    one = gpu.gemm(128, 256, 16384, p, (TILE,), split_k=(1,))
    assert one.time_s == pytest.approx(262.144e-6 + 100e-9 + 134.688e-9)
    e = gpu.gemm(128, 256, 16384, p, (TILE,), split_k=(1, 4))
    assert e.split_k == 4 and e.ctas == 4
    assert e.compute_s == pytest.approx(65.536e-6)
    # A + B = 12 MiB exceed the L2: DRAM streams them once (+ C); fp32 partials (1 MiB) stay in L2
    assert e.dram_bytes == pytest.approx(12 * 2**20 + 128 * 256 * 2)
    # serial fixup: 3 hand-offs, each 2 L2 latencies (40 ns) + reading and writing the fp32 tile
    # (2 x 128 x 256 x 4 B = 256 KiB) at one SM's share of the L2 (4 TB/s / 4) = 262.144 ns
    assert e.fixup_s == pytest.approx(3 * (40e-9 + 262.144e-9))
    # edges: the first slice's panels (49.152 ns) and the fp32 partial store 128 x 256 x 4 B
    # (131.072 ns) + one L2 latency
    assert e.edge_s == pytest.approx(49.152e-9 + 131.072e-9 + 20e-9)
    assert e.latency_s == pytest.approx(100e-9 + 906.432e-9 + 200.224e-9)
    assert e.time_s == pytest.approx(65.536e-6 + 100e-9 + 906.432e-9 + 200.224e-9)


def test_bandwidth_bound_kernel_by_hand():
    p = toy_params()
    e = gpu.streaming(1e8, 1e8, 0.0, p)
    assert e.memory_s == pytest.approx(200e-6)  # 2e8 B at 1 TB/s
    assert e.time_s == pytest.approx(200e-6 + 100e-9)
    # with a half-bandwidth size s_half the kernel moves s bytes at B * s / (s + s_half)
    ph = dataclasses.replace(p, bandwidth_half_size_bytes=2e8)
    assert gpu.streaming(1e8, 1e8, 0.0, ph).memory_s == pytest.approx(400e-6)
    assert gpu.achieved_bandwidth(2e8, 1e12, 1.0, 2e8) == pytest.approx(0.5e12)
    # reads resident in L2 (4 TB/s) instead of DRAM
    r = gpu.streaming(1e8, 1e8, 0.0, p, l2_resident_bytes=1e8)
    assert r.memory_s == pytest.approx(1e8 / 1e12 + 1e8 / 4e12)


def test_large_gemm_reaches_the_efficiency_factor():
    d = h100()
    p = gpu.gpu_params(d, "bf16")
    e = gpu.gemm(8192, 8192, 8192, p, gpu.tile_candidates(d.arch))
    achieved = 2 * 8192**3 / e.time_s
    peak = 989.4e12 * d.efficiency.tensor_peak_fraction
    assert 0.9 * peak < achieved <= peak


def test_more_bandwidth_never_slower():
    d = h100()
    bw = np.linspace(0.5e12, 8e12, 64)
    for dt in ("bf16", "fp32"):
        p = dataclasses.replace(gpu.gpu_params(d, dt), dram_bytes_per_s=bw, l2_bytes_per_s=bw * 3)
        cands = gpu.tile_candidates(d.arch, p.uses_matrix_unit)
        for m, n, k in [(1, 4096, 4096), (2048, 2048, 2048), (64, 11008, 4096), (8192, 128, 8192)]:
            t = gpu.gemm(m, n, k, p, cands).time_s
            assert np.all(np.diff(t) <= 1e-15), (dt, m, n, k)
        t = gpu.streaming(1e8, 5e7, 1e6, p).time_s
        assert np.all(np.diff(t) < 0)
        t = gpu.attention(1, 32, 8, 1, 4096, 128, 128, p).time_s
        assert np.all(np.diff(t) <= 1e-15)


def test_larger_gemm_never_faster():
    rng = np.random.default_rng(0)
    for d in (h100(), toy_gpu()):
        p = gpu.gpu_params(d, "bf16")
        cands = gpu.tile_candidates(d.arch)
        for _ in range(40):
            m, n, k = (int(x) for x in rng.integers(1, 5000, 3))
            t = gpu.gemm(m, n, k, p, cands).time_s
            for dm, dn, dk in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (128, 0, 0), (0, 0, 512)]:
                assert gpu.gemm(m + dm, n + dn, k + dk, p, cands).time_s >= t * (1 - 1e-12)


def test_vectorised_over_hardware_variants_matches_scalar():
    d = h100()
    p = gpu.gpu_params(d, "bf16")
    cands = gpu.tile_candidates(d.arch)
    sms = np.array([66.0, 132.0, 264.0])
    pv = dataclasses.replace(p, sms=sms)
    ev = gpu.gemm(4096, 4096, 4096, pv, cands)
    for i, s in enumerate(sms):
        es = gpu.gemm(4096, 4096, 4096, dataclasses.replace(p, sms=float(s)), cands)
        assert ev.time_s[i] == pytest.approx(es.time_s)
        assert ev.tile[i] == es.tile


def test_attention_causal_halves_the_work_and_decode_reads_kv_once():
    p = gpu.gpu_params(h100(), "bf16")
    full = gpu.attention(4, 16, 16, 8192, 8192, 128, 128, p)
    causal = gpu.attention(4, 16, 16, 8192, 8192, 128, 128, p, causal=True)
    assert causal.compute_s / full.compute_s == pytest.approx(0.5, rel=0.02)
    # decode with GQA: 32 query heads over 8 KV heads, one query: DRAM = K + V + Q + O (+ partials)
    dec = gpu.attention(1, 32, 8, 1, 4096, 128, 128, p)
    kv = 8 * 4096 * 256 * 2
    assert kv <= dec.dram_bytes < kv * 1.05
    assert dec.memory_s > dec.compute_s


def test_power_cap_stretches_time_to_tdp():
    e = kernel_energy(1e-3, 0.9, idle_w=100.0, tdp_w=700.0)
    assert e.power_capped and e.time_s == pytest.approx(1.5e-3)
    assert e.avg_power_w == pytest.approx(700.0)
    ok = kernel_energy(1e-3, 0.3, idle_w=100.0, tdp_w=700.0)
    assert not ok.power_capped and ok.time_s == 1e-3 and ok.energy_j == pytest.approx(0.4)


# --- located errors ----------------------------------------------------------------------------


def test_unknown_dtype_is_a_located_error():
    with pytest.raises(SpecError, match=r"test-h100: compute: no throughput for dtype; got 'int4'; expected one of"):
        gpu.gpu_params(h100(), "int4")


def test_missing_sm_section_is_a_located_error():
    d = dataclasses.replace(h100(), sm=None)
    with pytest.raises(SpecError, match=r"test-h100: sm: missing"):
        gpu.gpu_params(d, "bf16")


def test_unknown_arch_is_a_located_error():
    with pytest.raises(SpecError, match=r"arch: no GEMM tile table for this architecture; got 'pascal'"):
        gpu.tile_candidates("pascal")


def test_no_tile_fits_is_a_located_error():
    p = dataclasses.replace(toy_params(), smem_per_sm_bytes=16 * 1024.0, max_smem_per_cta_bytes=16 * 1024.0)
    with pytest.raises(SpecError, match=r"gemm m=512 n=512 k=512: no candidate tile fits the SM resources"):
        gpu.gemm(512, 512, 512, p, (TILE,))


def test_nonpositive_sizes_are_rejected():
    with pytest.raises(ValueError, match=r"gemm: sizes must be positive; got m=0"):
        gpu.gemm(0, 1, 1, toy_params(), (TILE,))


# --- attention kernel designs -------------------------------------------------------------------


def test_attention_kernel_designs_by_hand():
    # toy GPU: 4 SMs at 1 GHz, 4096 FLOP/clk/SM, 128 FP32 instr/clk/SM, 16 SFU results/clk/SM.
    # b=1, h=4, s=1024, d=64: 4 heads x 8 query blocks = 32 CTAs, 8 per SM, 2^20 pairs per SM.
    # per pair: matmuls 2 x (64 + 64) = 256 FLOP -> 62.5 ps; softmax 1 exp (62.5 ps) + 4 ALU (31.25 ps)
    p = toy_params()
    f3 = gpu.attention(1, 4, 4, 1024, 1024, 64, 64, p, kernel="flash3")
    assert f3.compute_s == pytest.approx(2**20 * 93.75e-12)  # max(62.5, 93.75) ps: softmax-bound
    f2 = gpu.attention(1, 4, 4, 1024, 1024, 64, 64, p, kernel="flash2")
    # serialised, plus each of the SM's 8 CTAs' edges at one SM's share of the L2 (1 ps/B): the Q block and
    # the first K block (128 + 128 rows x 64 x 2 B = 32.768 ns, shorter than the last block's math), then the
    # 128 x 64 x 2 B O tile (16.384 ns) and one L2 latency (20 ns)
    edges = 8 * (32.768e-9 + 16.384e-9 + 20e-9)
    assert f2.compute_s == pytest.approx(2**20 * (62.5 + 93.75) * 1e-12 + edges)
    grid = gpu.attention_grid(1, 4, 4, 1024, 1024, p.sms)
    assert gpu.attention_edges_s(grid, p, 64, 64, 156.25e-12, p.sms) == pytest.approx(edges)
    # the last block's math when it is shorter than the first load: 128 x 128 pairs x 1 ps
    assert gpu.attention_edges_s(grid, p, 64, 64, 1e-12, p.sms) == pytest.approx(8 * (16.384e-9 + 16.384e-9 + 20e-9))
    # FlashAttention-2 on a part whose warp-level mma.sync runs at half the native rate
    half = dataclasses.replace(p, warp_mma_scale=0.5)
    assert gpu.attention(1, 4, 4, 1024, 1024, 64, 64, half, kernel="flash2").compute_s == \
        pytest.approx(2**20 * (125.0 + 93.75) * 1e-12 + edges)
    # the warp-specialised design uses the native instructions: unaffected
    assert gpu.attention(1, 4, 4, 1024, 1024, 64, 64, half, kernel="flash3").compute_s == pytest.approx(f3.compute_s)
    assert dict(f3.details)["kernel"] == "flash3"


def test_shared_kv_panels_halve_l2_traffic():
    p = toy_params()
    one = gpu.attention(2, 8, 8, 4096, 4096, 128, 128, p, kernel="flash3")
    pair = gpu.attention(2, 8, 8, 4096, 4096, 128, 128, p, kernel="flash3", kv_sharing=gpu.BLACKWELL_CTA_PAIR)
    q_o = 2 * (2 * 8 * 4096 * 128 * 2)  # Q read and O written once
    assert pair.l2_bytes - q_o == pytest.approx((one.l2_bytes - q_o) / 2)
    assert pair.dram_bytes == one.dram_bytes


def test_backward_counts_dq_accumulation_in_l2():
    # b=1, h=1, s=256, d=64, block 128: each of the 2 key-block CTAs streams the Q and dO panels of
    # both query blocks (64 + 64 columns) and sends its fp32 dQ partial of all 256 rows to L2 once
    # (the add is performed at L2: red / cp.reduce.async.bulk)
    p = toy_params()
    e = gpu.attention(1, 1, 1, 256, 256, 64, 64, p, backward=True)
    q = 256 * 64 * 2
    # main kernel: reads Q, dO, K, V, writes dK, dV, and the fp32 dQ accumulator goes back once
    main = q + q + 2 * (256 * 128 * 2) + 256 * 64 * 4
    # preprocess: reads O and dO, clears the accumulator, writes the 256 fp32 row sums;
    # postprocess: reads the accumulator, writes dQ
    passes = (2 * q + 256 * 64 * 4 + 256 * 4) + (256 * 64 * 4 + q)
    q_do_panels = 2 * 256 * 128 * 2  # 2 key blocks x 256 query rows x (Q + dO) x 2 B
    dq = 2 * 256 * 64 * 4  # 2 key blocks x 256 rows x 64 x fp32, one way
    assert e.dram_bytes == pytest.approx(main + passes)
    assert e.l2_bytes == pytest.approx(main + q_do_panels + dq + passes)
    assert dict(e.details)["kernels"] == 3
    # the 2-CTA pair shares the streamed panels and reduces dQ over both key blocks before sending it
    pair = gpu.attention(1, 1, 1, 256, 256, 64, 64, p, backward=True, kernel="flash3", kv_sharing=2)
    assert pair.l2_bytes == pytest.approx(main + (q_do_panels + dq) / 2 + passes)


def test_backward_passes_are_serial_streaming_kernels():
    p = toy_params()
    b, h, s, d = 2, 8, 1024, 128
    passes, n = gpu.attention_bwd_passes(b, h, h, s, s, d, d, p)
    rows = b * h * s
    pre = gpu.streaming(2 * rows * d * 2, rows * d * 4 + rows * 4, 2.0 * rows * d, p)
    post = gpu.streaming(rows * d * 4, rows * d * 2, float(rows * d), p)
    assert n == 2
    assert passes.time_s == pytest.approx(pre.time_s + post.time_s)
    assert passes.latency_s == pytest.approx(passes.time_s)  # all of it serial
    e = gpu.attention(b, h, h, s, s, d, d, p, backward=True)
    # the main kernel (overlapped compute and memory, then its prologue) and the passes after it
    assert e.time_s == pytest.approx(max(e.compute_s, e.memory_s) + p.dram_latency_s + passes.time_s)
    fwd = gpu.attention(b, h, h, s, s, d, d, p)
    assert dict(fwd.details)["kernels"] == 1
    # grouped KV heads (8 query heads on 2 KV heads): FA3 converts fp32 dK and dV accumulators (two
    # kernels); FA2 sums the per-query-head gradients over each group (two reductions)
    keys = b * 2 * s
    f3, n3 = gpu.attention_bwd_passes(b, h, 2, s, s, d, d, p, kernel="flash3")
    f2, n2 = gpu.attention_bwd_passes(b, h, 2, s, s, d, d, p, kernel="flash2")
    assert n3 == n2 == 4
    assert f3.dram_bytes == pytest.approx(passes.dram_bytes + 2 * keys * d * (4 + 2))
    assert f2.dram_bytes == pytest.approx(passes.dram_bytes + 2 * (b * h * s * d * 2 + keys * d * 2))


def test_unknown_attention_kernel_is_rejected():
    with pytest.raises(ValueError, match=r"attention: kernel: unknown design; got 'fa9'; expected one of flash2, flash3"):
        gpu.attention(1, 1, 1, 128, 128, 64, 64, toy_params(), kernel="fa9")


def test_warp_mma_scale_from_the_spec():
    d = h100()
    assert gpu.gpu_params(d, "bf16").warp_mma_scale == 1.0  # field unset: native rate
    sm = dataclasses.replace(d.sm, warp_mma_flops_per_clk=2048)
    p = gpu.gpu_params(dataclasses.replace(d, sm=sm), "bf16")
    # 2048 FLOP/clk/SM x 132 SMs x sustained clock / dense FP16 peak
    expected = 2048 * d.compute.units * d.clock.sustained_hz / d.compute.tensor_flops_per_s["fp16"]
    assert p.warp_mma_scale == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------
# K-loop load chain (pipeline_stall_s)


def test_pipeline_stall_closed_form_by_hand():
    # 8 slices, 4 stages, 1 us latency, 0.1 us of math per slice. Slices 0-3 arrive at 1.0 and
    # finish at 1.1, 1.2, 1.3, 1.4; slice 4 is loaded when slice 0 frees its buffer (1.1) and
    # arrives at 2.1, so slices 4-7 finish at 2.2, 2.3, 2.4, 2.5. The loop ends at 2.5 us =
    # latency 1.0 + math 0.8 + stall 0.7 (one group waiting 1.0 - 3 x 0.1).
    assert gpu.pipeline_stall_s(8, 4, 1e-6, 0.1e-6) == pytest.approx(0.7e-6)
    # three slices of math cover the latency: no stall; one slice never waits twice
    assert gpu.pipeline_stall_s(8, 4, 0.3e-6, 0.1e-6) == 0.0
    assert gpu.pipeline_stall_s(1, 2, 1e-6, 0.1e-6) == 0.0
    # broadcasts over stages
    np.testing.assert_allclose(gpu.pipeline_stall_s(8, np.array([2.0, 4.0, 8.0]), 1e-6, 0.1e-6),
                               [3 * 0.9e-6, 0.7e-6, 0.0])


# A 128 x 128 x 32 tile with 4 math warps on the toy GPU: one K-slice is 2 x 128 x 128 x 32 FLOP
# at 4.096e12 FLOP/s per SM = 256 ns.
SMALL = gpu.TileCandidate(128, 128, 32, stages=2, warps_m=2, warps_n=2, threads=128)


def test_gemm_k_loop_latency_floor_by_hand():
    # m = n = 128, k = 4096: one CTA on one SM, 128 K-slices, 32.768 us of math. With a 1 us
    # load latency (a far-memory what-if) and shared-memory bandwidth raised to 1 TB/s (so the
    # warp-tile reads, 4 x 128 x 4096 x 2 B = 4.19 us, stay below the math):
    p = dataclasses.replace(toy_params(), dram_latency_s=1e-6, smem_bytes_per_s_per_sm=1e12)
    e = gpu.gemm(128, 128, 4096, p, (SMALL,), split_k=(1,))
    assert e.ctas == 1 and e.compute_s == pytest.approx(32.768e-6)
    assert e.memory_s == pytest.approx(4 * 128 * 4096 * 2 / 1e12)
    # edges: first panels (128 + 128) x 32 x 2 B = 16.384 ns, C store 128 x 128 x 2 B = 32.768 ns
    # + one L2 latency (20 ns)
    edge = 16.384e-9 + 32.768e-9 + 20e-9
    assert e.edge_s == pytest.approx(edge)
    # 2 stages: floor(127 / 2) = 63 groups each wait 1000 - 256 = 744 ns -> 46.872 us of stall
    assert e.stall_s == pytest.approx(46.872e-6)
    assert e.latency_s == pytest.approx(1e-6 + 46.872e-6 + edge)
    assert e.time_s == pytest.approx(32.768e-6 + 46.872e-6 + 1e-6 + edge)
    # 4 stages: floor(127 / 4) = 31 groups wait 1000 - 3 x 256 = 232 ns -> 7.192 us
    e4 = gpu.gemm(128, 128, 4096, p, (dataclasses.replace(SMALL, stages=4),), split_k=(1,))
    assert e4.time_s == pytest.approx(32.768e-6 + 7.192e-6 + 1e-6 + edge)
    # 5 stages: 4 slices of math (1.024 us) cover the latency: no stall
    e5 = gpu.gemm(128, 128, 4096, p, (dataclasses.replace(SMALL, stages=5),), split_k=(1,))
    assert e5.time_s == pytest.approx(32.768e-6 + 1e-6 + edge) and e5.stall_s == 0
    # at the toy's own 100 ns latency one slice of math (256 ns) covers a load: no stall
    e0 = gpu.gemm(128, 128, 4096, dataclasses.replace(p, dram_latency_s=100e-9), (SMALL,), split_k=(1,))
    assert e0.time_s == pytest.approx(32.768e-6 + 100e-9 + edge)


def test_gemm_stall_hides_under_memory_time():
    # DRAM at 20 GB/s: A + B + C = 2 MiB + 32 KiB take 106.5 us, longer than math + stall (79.6 us)
    p = dataclasses.replace(toy_params(), dram_latency_s=1e-6, smem_bytes_per_s_per_sm=1e12,
                            dram_bytes_per_s=2e10)
    e = gpu.gemm(128, 128, 4096, p, (SMALL,), split_k=(1,))
    assert e.memory_s == pytest.approx((2 * 2**20 + 128 * 128 * 2) / 2e10)
    # memory-bound: the first slice's load (16.384 ns) is shorter than the last slice's math
    # (256 ns), so the load is the exposed edge, plus the C store (32.768 ns) and one L2 latency
    edge = 16.384e-9 + 32.768e-9 + 20e-9
    assert e.stall_s == 0 and e.edge_s == pytest.approx(edge)
    assert e.time_s == pytest.approx(e.memory_s + 1e-6 + edge) and e.latency_s == pytest.approx(1e-6 + edge)


def test_turing_two_stage_small_tile_stall_hides_under_its_l2_share_by_hand():
    # T4 catalog: 40 SMs, fp16 tensor 65 TFLOP/s x 0.78; DRAM latency 496 cycles (MT4G, Turing).
    # A 64 x 64 x 32 two-stage tile (CUTLASS sm75) does 262144 FLOP per K-slice in
    # 262144 / (65e12 x 0.78 / 40) = 206.8 ns, less than one load latency (311.9 ns): with k = 4096
    # (128 slices, 63 groups) its loop waits 63 x 105.1 ns = 6.62 us on top of 26.47 us of math.
    # Its operand panels (64 + 64) x 4096 x 2 B + the C tile, at one SM's share (1/40) of the
    # 813.8 GB/s L2, take 51.94 us: the stall is hidden and the kernel is L2-bound.
    from hwmodels.catalog import load_device

    p = gpu.gpu_params(load_device("t4"), "fp16")
    tile = next(c for c in gpu.tile_candidates("turing") if c.name == "64x64x32_s2")
    t_iter = 2 * 64 * 64 * 32 / (p.matrix_flops_per_s * p.matrix_fraction / p.sms)
    assert t_iter == pytest.approx(206.8e-9, rel=1e-3) and p.dram_latency_s == pytest.approx(311.9e-9, rel=1e-3)
    assert gpu.pipeline_stall_s(128, 2, p.dram_latency_s, t_iter) == pytest.approx(63 * (p.dram_latency_s - t_iter))
    e = gpu.gemm(64, 64, 4096, p, (tile,), split_k=(1,))
    assert e.compute_s == pytest.approx(128 * t_iter)
    assert e.memory_s == pytest.approx((128 * 4096 * 2 + 64 * 64 * 2) * 40 / p.l2_bytes_per_s)
    # edges at one SM's share of the L2 (40 / 813.8 GB/s): the last slice's math (206.8 ns) is
    # shorter than the first slice's panels (64 + 64) x 32 x 2 B (402.6 ns); C 64 x 64 x 2 B + L2 latency
    share = p.sms / p.l2_bytes_per_s
    edge = t_iter + 64 * 64 * 2 * share + p.l2_latency_s
    assert 8192 * share == pytest.approx(402.6e-9, rel=1e-3) and e.edge_s == pytest.approx(edge)
    assert e.stall_s == 0
    assert e.time_s == pytest.approx(e.memory_s + p.dram_latency_s + edge)
    assert e.latency_s == pytest.approx(p.dram_latency_s + edge)


def test_gemm_choice_with_stalls_matches_every_candidate_alone():
    # the vectorised chooser re-times only variants whose stall-free choice stalls; the result
    # must equal the minimum over every (tile, split) timed on its own, over latency variants
    d = h100()
    base = gpu.gpu_params(d, "bf16")
    lat = np.array([0.2e-6, 0.4e-6, 1e-6, 3e-6, 8e-6])
    p = dataclasses.replace(base, dram_latency_s=lat, matrix_flops_per_s=base.matrix_flops_per_s * np.array([1, 2, 4, 1, 2]))
    cands = gpu.tile_candidates(d.arch)
    # (shape, variants whose chosen kernel has an exposed stall): at a 3 us latency, 3 slices of
    # a 4-stage 128 x 256 x 64 tile (0.72 us each at the catalog rate) do not cover one load;
    # at twice the rate the same kernels turn L2-bound and the stall hides, except at an 8 us
    # latency for 4096^3, where the cheapest kernel (split-K 4, fixup included) still stalls
    cases = [((4096, 4096, 4096), [3, 4]), ((1024, 1024, 8192), [3, 4]), ((2048, 512, 512), [])]
    for (m, n, k), stalled in cases:
        e = gpu.gemm(m, n, k, p, cands)
        alone = np.min([gpu.gemm(m, n, k, p, (c,), split_k=(s,)).time_s
                        for c in cands for s in gpu.SPLIT_K_FACTORS], axis=0)
        np.testing.assert_allclose(e.time_s, alone, rtol=1e-12)
        assert list(np.nonzero(e.stall_s > 0)[0]) == stalled
        # the chosen kernel's fixup and edges in the sweep equal each variant's own
        for i in range(len(lat)):
            one = gpu.gemm(m, n, k, dataclasses.replace(p, dram_latency_s=lat[i],
                                                        matrix_flops_per_s=p.matrix_flops_per_s[i]), cands)
            assert (one.edge_s, one.fixup_s) == pytest.approx((e.edge_s[i], e.fixup_s[i]), rel=1e-12)


def test_more_latency_never_faster():
    d = h100()
    p = dataclasses.replace(gpu.gpu_params(d, "bf16"), dram_latency_s=np.linspace(0.1e-6, 10e-6, 40))
    cands = gpu.tile_candidates(d.arch)
    for m, n, k in [(128, 128, 8192), (2048, 2048, 2048), (16, 4096, 4096)]:
        assert np.all(np.diff(gpu.gemm(m, n, k, p, cands).time_s) >= 0)


def test_tensor_core_tiles_keep_their_k_depth_in_bytes():
    """CUTLASS instantiates tf32 tiles with half, and fp8 tiles with twice, the 16-bit K depth (elements)."""
    base = [c.tile_k for c in gpu.tile_candidates("hopper")]
    assert set(base) == {64, 128}
    assert [c.tile_k for c in gpu.tile_candidates("hopper", in_bytes=4.0)] == [k // 2 for k in base]
    assert [c.tile_k for c in gpu.tile_candidates("hopper", in_bytes=1.0)] == [k * 2 for k in base]
    assert gpu.tile_candidates("hopper", matrix_unit=False) == gpu.tile_candidates("ampere", matrix_unit=False)


def test_tf32_gemm_on_hopper_fits_and_runs_below_the_tf32_peak():
    """A tf32 GEMM used to find no tile (16-bit K depth with 4-byte operands overflowed shared memory)."""
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import EvalOptions, evaluate
    from workloads.micro import build_micro

    rep = evaluate(build_micro("gemm:m=4096,n=4096,k=4096", dtype="tf32"), load_device("h100-sxm5-80gb"),
                   EvalOptions())
    rec = rep.records[0]
    assert rec.tile.endswith(("x32_s4_c2x2", "x32_s4_c2x1", "x32_s4", "x32_s6_c2x2", "x32_s6"))
    assert 0.5 * 494.7e12 < rec.flops / rec.time_s <= 494.7e12


# ------------------------------------------------------------------------------------------------
# the GEMM model's terms, each alone (toy GPU numbers, worked by hand)


def test_gemm_launch_grid_by_hand():
    # m=200, n=300 on 128 x 256 tiles: 2 x 2 output tiles; CTAs load 128 rows of A, 256 columns of B
    g = gpu.gemm_launch(200, 300, 1000, (TILE,), (1, 3))
    assert list(g.tiles_m) == [2, 2] and list(g.tiles_n) == [2, 2]
    assert list(g.rows) == [128, 128] and list(g.cols) == [256, 256]
    # split 1: K 1000 padded to 16 slices of 64; split 3: ceil(1000 / 3) = 334 -> 6 slices = 384
    assert list(g.k_split) == [1000, 334] and list(g.k_padded) == [1024, 384]
    assert list(g.ctas) == [4, 12]
    # small problems load only the rows and columns that exist (predicated loads)
    assert list(gpu.gemm_launch(16, 100, 64, (TILE,), (1,)).rows) == [16]
    # pick: one candidate per hardware variant
    assert list(g.pick(np.array([1, 0, 1])).ctas) == [12, 4, 12]


def test_gemm_main_loop_term_by_hand():
    # the busiest SM runs 3 CTAs, each 2 x 128 x 256 x 1024 FLOP, at 4.096e12 FLOP/s: 49.152 us
    g = gpu.gemm_launch(512, 512, 1000, (TILE,), (1,))  # K padded to 1024
    assert gpu.gemm_main_loop_s(g, 3.0, 4.096e12)[0] == pytest.approx(49.152e-6)
    # broadcasts over hardware variants (a trailing candidate axis)
    np.testing.assert_allclose(gpu.gemm_main_loop_s(g, 3.0, np.array([[4.096e12], [8.192e12]]))[:, 0],
                               [49.152e-6, 24.576e-6])


def test_gemm_operand_feed_terms_by_hand():
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,))
    # shared memory: 4 warps x (64 + 128) warp-tile rows/columns x 1024 x 2 B = 1.5 MiB per CTA;
    # 2 CTAs at 128 GB/s = 24.576 us
    assert gpu.gemm_smem_bytes_per_cta(g)[0] == 4 * 192 * 1024 * 2
    assert gpu.gemm_smem_feed_s(g, 2.0, 128e9)[0] == pytest.approx(24.576e-6)
    # L2: A and B panels (128 + 256) x 1024 x 2 B + the bf16 C tile 128 x 256 x 2 B = 851968 B;
    # 2 CTAs at 1 ps/B (4 TB/s over 4 SMs) = 1.703936 us
    assert gpu.gemm_l2_bytes_per_cta(g)[0] == 851968
    assert gpu.gemm_l2_panels_s(g, 2.0, 1e-12)[0] == pytest.approx(1.703936e-6)
    # a 2 x 1 cluster (2 CTAs along M) multicasts the B panel: (128 + 256 / 2) x 1024 x 2 B + C
    cl = gpu.gemm_launch(512, 512, 1024, (dataclasses.replace(TILE, cluster_m=2),), (1,))
    assert gpu.gemm_l2_bytes_per_cta(cl)[0] == 256 * 1024 * 2 + 65536
    # split-K 4: K 256 per CTA, and the fp32 partial written by every CTA and read back by all but
    # one: 4 x (2 - 1/4) = 7 B per element
    sk = gpu.gemm_launch(512, 512, 1024, (TILE,), (4,))
    assert gpu.gemm_l2_bytes_per_cta(sk)[0] == 384 * 256 * 2 + 128 * 256 * 7


def test_gemm_dram_traffic_term_by_hand():
    mib = 2**20
    # A + B (2 MiB) fit in a 4 MiB L2: compulsory A + B + C (0.5 MiB)
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,))
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 4 * mib)[0] == 2.5 * mib
    # m = 1024 with a 1 MiB L2: 16 CTAs, 8 resident (4 SMs x 2); a wave covers round(sqrt(8)) = 3
    # tile rows by min(ceil(8 / 3), 2) = 2 tile columns and streams (3 x 128 + 2 x 256) x 1024 x 2 B
    # = 1.75 MiB; 2 waves = 3.5 MiB (more than A + B once, 3 MiB), + C 1 MiB
    g = gpu.gemm_launch(1024, 512, 1024, (TILE,), (1,))
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 1 * mib)[0] == 4.5 * mib
    # split-K 2: fp32 partials 2 x 2 x 512 x 512 x 4 B = 4 MiB stay in an 8 MiB L2, reach a 3 MiB one
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (2,))
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 8 * mib)[0] == 2.5 * mib
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 3 * mib)[0] == 6.5 * mib
    # one B shared by all batch entries is read once
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,), batch=2, b_shared=True)
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 64 * mib)[0] == 2 * 1 * mib + 1 * mib + 2 * 0.5 * mib


def test_gemm_split_k_fixup_term_by_hand():
    # split 4 of a 128 x 256 tile: 3 hand-offs, each 2 L2 latencies (2 x 20 ns) plus reading and
    # writing the fp32 tile, 2 x 128 x 256 x 4 B = 256 KiB at 1 ps/B = 262.144 ns
    g = gpu.gemm_launch(128, 256, 16384, (TILE,), (1, 4))
    np.testing.assert_allclose(gpu.gemm_split_k_fixup_s(g, 1e-12, 20e-9), [0.0, 3 * (40e-9 + 262.144e-9)])


def test_gemm_pipeline_edges_term_by_hand():
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1, 2))
    # first slice's panels (128 + 256) x 64 x 2 B at 1 ps/B = 49.152 ns, shorter than a slice of math
    # (2 x 128 x 256 x 64 / 4.096e12 = 1.024 us); then the C store: bf16 128 x 256 x 2 B = 65.536 ns
    # (split-K: the fp32 partial, 131.072 ns) + one L2 latency
    np.testing.assert_allclose(gpu.gemm_pipeline_edges_s(g, 1e-12, 20e-9, 4.096e12),
                               [49.152e-9 + 65.536e-9 + 20e-9, 49.152e-9 + 131.072e-9 + 20e-9])
    # 1000 x faster math: the last slice's math (1.024 ns) is the shorter edge
    assert gpu.gemm_pipeline_edges_s(g, 1e-12, 20e-9, 4.096e15)[0] == pytest.approx(1.024e-9 + 65.536e-9 + 20e-9)


def test_gemm_k_loop_stall_term_by_hand():
    # SMALL tile, k = 4096: 128 slices of 256 ns math; 1 us load latency, 2 stages:
    # floor(127 / 2) = 63 groups wait 1000 - 256 = 744 ns -> 46.872 us (one CTA on its SM)
    g = gpu.gemm_launch(128, 128, 4096, (SMALL,), (1,))
    assert gpu.gemm_k_loop_stall_s(g, 1.0, 1.0, 4.096e12, 1e-6)[0] == pytest.approx(46.872e-6)
    # 4 CTAs on the SM, 2 resident at a time: a slice takes 2 x 256 ns, each group waits
    # 1000 - 512 = 488 ns; two rounds: 2 x 63 x 488 ns = 61.488 us
    assert gpu.gemm_k_loop_stall_s(g, 4.0, 2.0, 4.096e12, 1e-6)[0] == pytest.approx(61.488e-6)


def test_gemm_terms_compose_into_the_estimate():
    # the estimate of one candidate is its terms: max(main loop, memory) + prologue + fixup + edges
    p = toy_params()
    for m, n, k, split in [(512, 512, 1024, 1), (128, 256, 16384, 4), (1024, 512, 1024, 2)]:
        e = gpu.gemm(m, n, k, p, (TILE,), split_k=(split,))
        g = gpu.gemm_launch(m, n, k, (TILE,), (split,))
        busiest = np.ceil(g.ctas / 4.0)
        occ, feasible = gpu.gemm_occupancy(g, p)
        assert feasible.all() and e.ctas_per_sm == occ[0] == 2
        memory = max(gpu.gemm_smem_feed_s(g, busiest, 128e9)[0], gpu.gemm_l2_panels_s(g, busiest, 1e-12)[0],
                     gpu.gemm_dram_bytes(g, 4.0, occ, 4 * 2**20)[0] / 1e12)
        fixup = gpu.gemm_split_k_fixup_s(g, 1e-12, 20e-9)[0]
        edges = gpu.gemm_pipeline_edges_s(g, 1e-12, 20e-9, 4.096e12, gpu.gemm_edge_rounds(g, busiest, occ))[0]
        assert e.compute_s == pytest.approx(gpu.gemm_main_loop_s(g, busiest, 4.096e12)[0])
        assert e.memory_s == pytest.approx(memory)
        assert (e.fixup_s, e.edge_s, e.stall_s) == pytest.approx((fixup, edges, 0.0))
        assert e.time_s == pytest.approx(max(e.compute_s, memory) + 100e-9 + fixup + edges)


def test_gemm_bound_term_names_the_largest_term():
    p = toy_params()
    assert gpu.gemm(512, 512, 1024, p, (TILE,), split_k=(1,)).bound_term == "main-loop"
    slow_dram = dataclasses.replace(p, dram_bytes_per_s=2e10, dram_latency_s=1e-6, smem_bytes_per_s_per_sm=1e12)
    assert gpu.gemm(128, 128, 4096, slow_dram, (SMALL,), split_k=(1,)).bound_term == "dram"
    # a 16^3 GEMM still computes one padded 128 x 128 x 32 slice (256 ns): with a 1 us DRAM
    # latency the prologue is the largest term
    far_dram = dataclasses.replace(p, dram_latency_s=1e-6)
    assert gpu.gemm(16, 16, 16, far_dram, (SMALL,), split_k=(1,)).bound_term == "prologue"
    # a far L2 (1 us latency): the C store's latency makes the edges the largest term
    far = dataclasses.replace(p, l2_latency_s=1e-6)
    assert gpu.gemm(16, 16, 16, far, (SMALL,), split_k=(1,)).bound_term == "edges"
    # split-K 16 of a skinny GEMM (65.5 us of math on the busiest SM) with a 5 us L2 latency: 15
    # serial fixup hand-offs of two latencies each (150 us) dominate
    slow_l2 = dataclasses.replace(p, l2_latency_s=5e-6)
    e = gpu.gemm(128, 256, 16384, slow_l2, (TILE,), split_k=(16,))
    assert e.bound_term == "split-k fixup" and e.fixup_s > max(e.compute_s, e.memory_s, e.edge_s)
    # the 1 us far-memory loop of test_gemm_k_loop_latency_floor_by_hand: the stall exceeds the math
    far_mem = dataclasses.replace(p, dram_latency_s=1e-6, smem_bytes_per_s_per_sm=1e12)
    assert gpu.gemm(128, 128, 4096, far_mem, (SMALL,), split_k=(1,)).bound_term == "k-loop stall"
    assert set(gpu.GEMM_TERMS) >= {"main-loop", "dram", "l2", "smem", "prologue", "split-k fixup", "edges",
                                   "k-loop stall"}


def test_bound_term_broadcasts_over_hardware_variants():
    d = h100()
    p = gpu.gpu_params(d, "bf16")
    bw = np.array([0.05e12, 3.35e12, 50e12])
    pv = dataclasses.replace(p, dram_bytes_per_s=bw)
    cands = gpu.tile_candidates(d.arch)
    e = gpu.gemm(4096, 4096, 4096, pv, cands)
    a = gpu.attention(1, 32, 8, 1, 4096, 128, 128, pv)
    for i, b in enumerate(bw):
        one = dataclasses.replace(p, dram_bytes_per_s=float(b))
        assert e.bound_term[i] == gpu.gemm(4096, 4096, 4096, one, cands).bound_term
        assert a.bound_term[i] == gpu.attention(1, 32, 8, 1, 4096, 128, 128, one).bound_term
    assert e.bound_term[0] == "dram" and e.bound_term[2] == "main-loop"


# ------------------------------------------------------------------------------------------------
# the attention model's terms, each alone (toy GPU: 4 SMs, 4.096e12 FLOP/s, 16e9 SFU results/s and
# 128e9 FP32 instructions/s per SM)


def test_attention_grid_by_hand():
    # b=1, h=4, s=1024, block 128: 4 x 8 query-block CTAs of 128 x 1024 pairs
    g = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0)
    assert not g.decode and g.ctas == 32 and g.kv_splits == 1 and g.pad == 1
    assert (g.head_pairs, g.pairs, g.heaviest_pairs, g.q_panels) == (2**20, 4 * 2**20, 128 * 1024, 8)
    # causal: 1024 x 1025 / 2 pairs per head; the last block's 128 rows see 128 x 1024 - 128 x 127 / 2
    c = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0, causal=True)
    assert (c.head_pairs, c.heaviest_pairs) == (524800, 122944)
    # decode with GQA: 4 query heads per KV head packed into one tile (padded 4 -> 64 rows); the
    # 16 KV heads of batch 2 split the keys min(64 SMs / 16, 4096 / 256) = 4 ways
    d = gpu.attention_grid(2, 32, 8, 1, 4096, 64.0)
    assert d.decode and d.kv_splits == 4 and d.ctas == 64 and d.pad == 16
    assert (d.pairs, d.heaviest_pairs) == (2 * 32 * 4096, 4096 * 4 / 4)


def test_attention_matmul_and_softmax_terms_by_hand():
    p = toy_params()
    g = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0)
    # QK^T and PV: 2 x (64 + 64) FLOP per pair at 4.096e12 FLOP/s per SM = 62.5 ps
    assert gpu.attention_matmul_s(g, p, 64, 64, kernel="flash3") == pytest.approx(62.5e-12)
    # flash2's mma.sync at half the native rate: 125 ps; the warp-specialised kernel is unaffected
    half = dataclasses.replace(p, warp_mma_scale=0.5)
    assert gpu.attention_matmul_s(g, half, 64, 64, kernel="flash2") == pytest.approx(125e-12)
    assert gpu.attention_matmul_s(g, half, 64, 64, kernel="flash3") == pytest.approx(62.5e-12)
    # backward: five contractions, 2 x (3 x 64 + 2 x 64) = 640 FLOP = 156.25 ps
    gb = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0, backward=True)
    assert gpu.attention_matmul_s(gb, p, 64, 64) == pytest.approx(156.25e-12)
    # decode tiles padded from 4 to 64 rows do 16 x the math per real pair
    gd = gpu.attention_grid(2, 32, 8, 1, 4096, 64.0)
    assert gpu.attention_matmul_s(gd, p, 64, 64) == pytest.approx(16 * 62.5e-12)
    # softmax: 1 exp at 16e9/s (62.5 ps) + 4 FP32 instructions at 128e9/s (31.25 ps); backward 5
    assert gpu.attention_softmax_s(p) == pytest.approx(93.75e-12)
    assert gpu.attention_softmax_s(p, backward=True) == pytest.approx(62.5e-12 + 5 / 128e9)


def test_attention_compute_term_by_hand():
    g = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0)
    # 32 CTAs on 4 SMs: 8 per SM x 131072 pairs at 1 ps
    assert gpu.attention_compute_s(g, 1e-12, 4.0) == pytest.approx(2**20 * 1e-12)
    # causal on 64 SMs: one CTA per SM; the heaviest block (122944 pairs) outlasts the average
    c = gpu.attention_grid(1, 4, 4, 1024, 1024, 64.0, causal=True)
    assert gpu.attention_compute_s(c, 1e-12, 64.0) == pytest.approx(122944e-12)


def test_backward_with_grouped_kv_heads_writes_gradients_as_each_design_does():
    # 4 query heads on 1 KV head, s=256, d=64: the main kernel's CTAs are per query head
    g = gpu.attention_grid(1, 4, 1, 256, 256, 4.0, backward=True)
    q = 4 * 256 * 64 * 2  # Q (and dO) bytes
    kv = 256 * 128 * 2  # K and V of the one KV head
    expanded = 4 * 256 * 128  # dK and dV elements, one per query head
    q_accum = 4 * 256 * 64 * 4
    # FlashAttention-2: dK, dV written per query head (summed over the group by a later kernel)
    dram2, l2_2 = gpu.attention_traffic_bytes(g, 64, 64, kernel="flash2")
    assert dram2 == q + q + kv + expanded * 2 + q_accum
    # FA3: every query head adds into fp32 accumulators of the KV head at L2; they go back to DRAM once
    dram3, l2_3 = gpu.attention_traffic_bytes(g, 64, 64, kernel="flash3")
    assert dram3 == q + q + kv + 256 * 128 * 4 + q_accum
    assert l2_3 - l2_2 == (dram3 - dram2) + (expanded * 4 - 256 * 128 * 4)
    # without grouping both designs write dK, dV once in the input width
    m = gpu.attention_grid(1, 4, 4, 256, 256, 4.0, backward=True)
    assert gpu.attention_traffic_bytes(m, 64, 64, kernel="flash2") == gpu.attention_traffic_bytes(m, 64, 64,
                                                                                                   kernel="flash3")


def test_backward_passes_count_their_vector_work():
    p = toy_params()
    rows = 2 * 8 * 512
    passes, _ = gpu.attention_bwd_passes(2, 8, 8, 512, 512, 64, 64, p)
    assert dict(passes.details)["vector_flops"] == 2.0 * rows * 64 + rows * 64  # dO.O sums; dQ scale
    e = gpu.attention(2, 8, 8, 512, 512, 64, 64, p, backward=True)
    assert dict(e.details)["pass_vector_flops"] == dict(passes.details)["vector_flops"]
    assert dict(gpu.attention(2, 8, 8, 512, 512, 64, 64, p).details)["pass_vector_flops"] == 0.0


def test_attention_traffic_term_by_hand():
    g = gpu.attention_grid(1, 4, 4, 1024, 1024, 4.0)
    q = 4 * 1024 * 64 * 2  # Q (and O) bytes
    kv = 4 * 1024 * 128 * 2  # K and V
    dram, l2 = gpu.attention_traffic_bytes(g, 64, 64)
    # DRAM: Q, K, V, O once; L2: Q, O and the K/V panels once per query block (8)
    assert dram == 2 * q + kv and l2 == 2 * q + 8 * kv
    # a CTA pair sharing its panel loads halves them
    assert gpu.attention_traffic_bytes(g, 64, 64, kv_sharing=2)[1] == 2 * q + 4 * kv
    # decode split 4 ways: K and V read once; fp32 partial outputs written and read back
    d = gpu.attention_grid(2, 32, 8, 1, 4096, 64.0)
    dram, l2 = gpu.attention_traffic_bytes(d, 128, 128)
    q_o = 2 * (2 * 32 * 1 * 128 * 2)
    partials = 2 * 32 * 128 * 4 * 4 * 2
    assert dram == l2 == q_o + 2 * 8 * 4096 * 256 * 2 + partials


def test_attention_bound_term_names_the_largest_term():
    p = toy_params()
    # the pair costs of test_attention_kernel_designs_by_hand: softmax (93.75 ps) over matmuls (62.5)
    assert gpu.attention(1, 4, 4, 1024, 1024, 64, 64, p, kernel="flash3").bound_term == "softmax"
    assert gpu.attention(1, 4, 4, 1024, 1024, 64, 64, p, kernel="flash2").bound_term == "softmax"
    half = dataclasses.replace(p, warp_mma_scale=0.5)  # 125 ps of matmuls
    assert gpu.attention(1, 4, 4, 1024, 1024, 64, 64, half, kernel="flash2").bound_term == "matmuls"
    # decode on an H100 reads the KV cache once: DRAM (on the toy GPU, with far less math, the
    # 16-fold padded decode tiles make it matmul-bound)
    assert gpu.attention(1, 32, 8, 1, 4096, 128, 128, gpu.gpu_params(h100(), "bf16")).bound_term == "dram"
    assert gpu.attention(1, 32, 8, 1, 4096, 128, 128, p).bound_term == "matmuls"
    # one query, a handful of keys: the prologue's DRAM latency
    assert gpu.attention(1, 1, 1, 1, 16, 64, 64, p).bound_term == "prologue"
    assert gpu.ATTENTION_TERMS == ("matmuls", "softmax", "dram", "l2", "prologue")


def test_bound_term_reaches_the_op_notes():
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate
    from workloads.micro import build_micro

    dev = load_device("h100-sxm5-80gb")
    gemm = evaluate(build_micro("gemm:m=8192,n=8192,k=8192", dtype="bf16"), dev).records[0]
    assert "bound term main-loop" in gemm.notes
    attn = evaluate(build_micro("attention:b=1,h=32,s=1,d=128,s_kv=4096,kv_heads=8", dtype="bf16"), dev).records[0]
    assert attn.notes.startswith("flash3 kernel; bound term ")
    term, *rest = attn.notes.removeprefix("flash3 kernel; bound term ").split("; ")
    assert term in gpu.ATTENTION_TERMS
    # the device, not the launch floor, sets this kernel's time: the notes say what the kernel adds
    assert rest == [f"device time per kernel {dev.efficiency.kernel_device_time_s * 1e6:.3g} us"]


# ------------------------------------------------------------------------------------------------
# many hardware variants in one call equal each variant alone


def _fields_equal(many: gpu.GemmEstimate, i: int, one: gpu.GemmEstimate) -> None:
    for f in dataclasses.fields(one):
        if f.name == "details":
            continue
        got = np.asarray(getattr(many, f.name))
        assert (got[i] if got.ndim else got.item()) == getattr(one, f.name), f.name


def _sweep(p: gpu.GpuParams, n: int, seed: int, **spread: tuple[float, float]) -> gpu.GpuParams:
    rng = np.random.default_rng(seed)
    return dataclasses.replace(p, **{f: getattr(p, f) * rng.uniform(lo, hi, n) for f, (lo, hi) in spread.items()})


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_gemm_over_variants_equals_each_variant_alone(dtype, monkeypatch):
    # A one-axis sweep first sets aside the candidates no variant can choose, times the variants in
    # blocks (of 7 here) and re-times those whose choice exposes a K-loop stall; every field must
    # still equal the scalar call's, bit for bit. fp32 runs on the SIMT tiles (2-stage pipelines),
    # whose choices do expose stalls.
    monkeypatch.setattr(gpu, "GEMM_BLOCK_VARIANTS", 7)
    d = h100()
    p = gpu.gpu_params(d, dtype)
    cands = gpu.tile_candidates(d.arch, matrix_unit=p.uses_matrix_unit, in_bytes=2.0 if dtype == "bf16" else 4.0)
    n = gpu.PRUNE_MIN_VARIANTS + 8
    pv = _sweep(p, n, 3, dram_bytes_per_s=(0.3, 3.0), matrix_flops_per_s=(0.3, 3.0), dram_latency_s=(0.5, 3.0),
                l2_latency_s=(0.5, 3.0), l2_bytes_per_s=(0.5, 2.0))
    key_args = (gpu.SPLIT_K_FACTORS, 1, 2.0, 2.0, False)
    stalled = 0
    for m, nn, k in ((4096, 4096, 4096), (16, 4096, 4096), (100, 300, 1000)):
        e = gpu.gemm(m, nn, k, pv, cands)
        launch = gpu.gemm_launch(m, nn, k, cands)
        kept = gpu._survivors((m, nn, k, cands, *key_args), launch, pv, gpu._hardware(pv))
        assert kept is not None and len(kept.keep) < len(launch.ctas)  # some candidates were set aside
        stalled += int(np.count_nonzero(np.asarray(e.stall_s) > 0))
        again = gpu.gemm(m, nn, k, pv, cands)  # a second call re-times at once where the first re-timed most
        for i in range(n):
            one = dataclasses.replace(pv, **{f: getattr(pv, f)[i] for f in
                                             ("dram_bytes_per_s", "matrix_flops_per_s", "dram_latency_s",
                                              "l2_latency_s", "l2_bytes_per_s")})
            alone = gpu.gemm(m, nn, k, one, cands)
            _fields_equal(e, i, alone)
            _fields_equal(again, i, alone)
    if dtype == "fp32":
        assert stalled > 0  # the re-timing path was taken


def test_gemm_takes_sm_thread_and_cta_limits_as_arrays():
    # the occupancy limits alone vary (the times of a small GEMM do not depend on them, the residency
    # does), and together with the bandwidth on a GEMM whose operands stream from DRAM in waves
    d = h100()
    p = gpu.gpu_params(d, "bf16")
    cands = gpu.tile_candidates(d.arch)
    threads = np.array([2048.0, 1024.0, 384.0, 256.0])
    ctas = np.array([32.0, 1.0, 2.0, 1.0])
    cases = [((64, 64, 64), dataclasses.replace(p, max_threads_per_sm=threads)),
             ((64, 64, 64), dataclasses.replace(p, max_ctas_per_sm=ctas)),
             ((16384, 16384, 4096), dataclasses.replace(p, max_threads_per_sm=threads, max_ctas_per_sm=ctas,
                                                        dram_bytes_per_s=p.dram_bytes_per_s * np.array([1, 2, 1, .5])))]
    for (m, n, k), pv in cases:
        e = gpu.gemm(m, n, k, pv, cands)
        assert np.shape(e.ctas_per_sm) == (4,)
        for i in range(4):
            one = dataclasses.replace(pv, **{f.name: getattr(pv, f.name)[i] for f in dataclasses.fields(pv)
                                             if np.ndim(getattr(pv, f.name))})
            _fields_equal(e, i, gpu.gemm(m, n, k, one, cands))
    # 256 threads per SM leave room for none of the 384-thread (two consumer warpgroups) Hopper tiles
    by_name = {c.name: c for c in cands}
    assert by_name[str(e.tile[3])].threads == 256 and by_name[str(e.tile[0])].threads == 384
    assert e.time_s[3] > e.time_s[0]
