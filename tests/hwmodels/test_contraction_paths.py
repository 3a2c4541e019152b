"""Contraction paths: fp32 without TF32 per architecture, SIMT SGEMM efficiency, pipeline edges per round.

Hand-worked values from the catalog's datasheet and measurement figures (docs/contraction_paths.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_devices import toy_gpu

from hwmodels import gpu
from hwmodels.catalog import load_device

# a non-persistent (sm80-style) and a persistent (warp-specialised) candidate of the same tile
PLAIN = gpu.TileCandidate(128, 256, 64, stages=2, warps_m=2, warps_n=2, threads=128)
PERSISTENT = dataclasses.replace(PLAIN, threads=256, producer_threads=128)


def test_cdna_fp32_without_tf32_runs_at_the_native_matrix_rate():
    # MI250X: MFMA F32 95.74 TFLOP/s (twice the 47.87 vector rate), at the tensor peak fraction
    for name, matrix, vector in (("mi250x", 95.74e12, 47.87e12), ("mi210", 45.26e12, 22.63e12),
                                 ("mi300x", 163.4e12, 163.4e12)):
        dev = load_device(name)
        p = gpu.gpu_params(dev, "fp32")
        assert p.uses_matrix_unit
        assert p.matrix_flops_per_s == pytest.approx(matrix)
        assert p.matrix_fraction == dev.efficiency.tensor_peak_fraction
        assert p.vector_flops_per_s == pytest.approx(vector)
    # MI300X with TF32 allowed takes its XF32 rate instead
    assert gpu.gpu_params(load_device("mi300x"), "fp32", allow_tf32=True).matrix_flops_per_s == pytest.approx(653.7e12)


def test_nvidia_fp32_without_tf32_stays_on_the_cuda_cores():
    a100 = load_device("a100-sxm4-80gb")
    p = gpu.gpu_params(a100, "fp32")
    assert not p.uses_matrix_unit and p.matrix_flops_per_s == pytest.approx(19.5e12)
    t = gpu.gpu_params(a100, "fp32", allow_tf32=True)
    assert t.uses_matrix_unit and t.matrix_flops_per_s == pytest.approx(156e12)


def test_sgemm_fraction_on_128_lane_sms_is_the_measured_one():
    # Ada (128 FP32 lanes per SM): cuBLAS SGEMM on an RTX 4070 Ti, 29.17 of 35.48 TFLOP/s
    l4 = load_device("l4")
    assert l4.efficiency.simt_gemm_peak_fraction == pytest.approx(29.17 / 35.48, abs=5e-4)
    p = gpu.gpu_params(l4, "fp32")
    assert not p.uses_matrix_unit and p.matrix_fraction == pytest.approx(0.822)
    assert p.vector_fraction == l4.efficiency.vector_peak_fraction  # element-wise work keeps its own figure
    # other dtypes on the SIMT path keep the vector fraction
    assert gpu.simt_gemm_fraction(l4, "fp64") == l4.efficiency.vector_peak_fraction
    # main loop by hand: 4096^3 on the 128x128x8 SIMT tile, 1024 CTAs over 58 SMs -> 18 on the busiest,
    # each 2 x 128 x 128 x 4096 FLOP at 30.3e12 x 0.822 / 58 FLOP/s per SM
    cands = gpu.tile_candidates(l4.arch, matrix_unit=False)
    launch = gpu.gemm_launch(4096, 4096, 4096, cands[:1], (1,), in_bytes=4.0, out_bytes=4.0)
    per_sm = 30.3e12 * 0.822 / 58
    assert gpu.gemm_main_loop_s(launch, 18.0, per_sm)[0] == pytest.approx(18 * 2 * 128 * 128 * 4096 / per_sm)
    e = gpu.gemm(4096, 4096, 4096, p, cands[:1], split_k=(1,), in_bytes=4.0, out_bytes=4.0)
    assert e.compute_s == pytest.approx(18 * 2 * 128 * 128 * 4096 / per_sm)


def test_zero_means_the_vector_fraction_and_arrays_broadcast():
    dev = load_device("l4")
    off = dataclasses.replace(dev, efficiency=dataclasses.replace(dev.efficiency, simt_gemm_peak_fraction=0.0))
    assert gpu.simt_gemm_fraction(off, "fp32") == dev.efficiency.vector_peak_fraction
    arr = dataclasses.replace(dev, efficiency=dataclasses.replace(
        dev.efficiency, simt_gemm_peak_fraction=np.array([0.0, 0.5, 0.822])))
    np.testing.assert_array_equal(gpu.simt_gemm_fraction(arr, "fp32"),
                                  [dev.efficiency.vector_peak_fraction, 0.5, 0.822])


def test_edge_rounds_by_hand():
    g = gpu.gemm_launch(640, 512, 1024, (PLAIN, PERSISTENT), (1,))
    assert list(g.persistent) == [0.0, 1.0]
    # busiest SM runs 3 CTAs, 2 resident at a time: 2 rounds for the plain kernel, 1 for the persistent one
    np.testing.assert_array_equal(gpu.gemm_edge_rounds(g, 3.0, 2.0), [2.0, 1.0])
    np.testing.assert_array_equal(gpu.gemm_edge_rounds(g, 3.0, 4.0), [1.0, 1.0])  # all resident at once
    np.testing.assert_array_equal(gpu.gemm_edge_rounds(g, 5.0, 1.0), [5.0, 1.0])
    # per round: first slice's panels (128 + 256) x 64 x 2 B at 1 ps/B = 49.152 ns, C store 65.536 ns,
    # one L2 latency 20 ns
    one = 49.152e-9 + 65.536e-9 + 20e-9
    np.testing.assert_allclose(gpu.gemm_pipeline_edges_s(g, 1e-12, 20e-9, 4.096e12, np.array([2.0, 1.0])),
                               [2 * one, one])


def test_plain_kernel_exposes_edges_per_round_persistent_once():
    # toy GPU (4 SMs): m=640 -> 10 CTAs, busiest SM 3, 2 resident (registers): 2 rounds
    p = gpu.gpu_params(toy_gpu(), "bf16")
    one = 49.152e-9 + 65.536e-9 + 20e-9
    e = gpu.gemm(640, 512, 1024, p, (PLAIN,), split_k=(1,))
    assert e.ctas_per_sm == 2 and e.edge_s == pytest.approx(2 * one)
    assert e.time_s == pytest.approx(3 * 16.384e-6 + 100e-9 + 2 * one)  # main loop + DRAM latency + edges
    # one wave (2 CTAs per SM, 2 resident): one round, as before
    e1 = gpu.gemm(512, 512, 1024, p, (PLAIN,), split_k=(1,))
    assert e1.edge_s == pytest.approx(one)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_pruned_sweep_equals_each_variant_on_a_non_persistent_family(dtype):
    # A100 (sm80 tiles and SIMT tiles, none persistent): a one-axis sweep of the SM count and the L2
    # bandwidth (so the busiest CTAs and the edge rounds vary per variant) equals each variant alone
    dev = load_device("a100-sxm4-80gb")
    p = gpu.gpu_params(dev, dtype)
    ib = 2.0 if dtype == "fp16" else 4.0
    cands = gpu.tile_candidates(dev.arch, matrix_unit=p.uses_matrix_unit, in_bytes=ib)
    n = gpu.PRUNE_MIN_VARIANTS + 4
    rng = np.random.default_rng(0)
    pv = dataclasses.replace(p, sms=np.round(rng.uniform(40, 140, n)), l2_bytes_per_s=p.l2_bytes_per_s * rng.uniform(
        0.5, 2.0, n))
    pruned = 0
    for m, nn, k in ((4096, 4096, 4096), (512, 1024, 768), (100, 300, 1000)):
        launch = gpu.gemm_launch(m, nn, k, cands, in_bytes=ib, out_bytes=ib)
        kept = gpu._survivors((m, nn, k, cands, gpu.SPLIT_K_FACTORS, 1, ib, ib, False, None), launch, pv,
                              gpu._hardware(pv))
        pruned += kept is not None and len(kept.keep) < len(launch.ctas)
        e = gpu.gemm(m, nn, k, pv, cands, in_bytes=ib, out_bytes=ib)
        for i in range(n):
            alone = gpu.gemm(m, nn, k, dataclasses.replace(pv, sms=pv.sms[i], l2_bytes_per_s=pv.l2_bytes_per_s[i]),
                             cands, in_bytes=ib, out_bytes=ib)
            assert np.asarray(e.time_s)[i] == alone.time_s
            assert np.asarray(e.edge_s)[i] == alone.edge_s
            assert np.asarray(e.tile)[i] == alone.tile
    assert pruned > 0  # the dominance pruning (with the edge rounds among its keys) was exercised
