"""Hand-computed cases, broadcasting and input validation of hwmodels.systolic."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.systolic import SystolicError, conv_cycles, conv_gemm_view, gemm_cycles, gemm_view


def test_gemm_by_hand_output_stationary() -> None:
    # M=20, N=13, K=30 on 8x8: row folds ceil(20/8)=3, col folds ceil(13/8)=2, 6 folds of
    # 30 + 8 + 8 - 2 = 44 cycles -> 264 cycles, reported as 263 (index of the last one).
    r = gemm_cycles(8, 8, "os", 20, 13, 30)
    assert (int(r.row_folds), int(r.col_folds), int(r.folds)) == (3, 2, 6)
    assert int(r.fold_cycles) == 44
    assert int(r.compute_cycles) == 263
    assert int(r.sram_ifmap_reads) == 20 * 30 * 2
    assert int(r.sram_filter_reads) == 13 * 30 * 3
    assert int(r.sram_ofmap_writes) == 20 * 13 + 6 * 16
    assert float(r.mapping_eff_pct) == pytest.approx(100 * 260 / (64 * 6))
    assert float(r.compute_util_pct) == pytest.approx(100 * 260 * 30 / (64 * 44 * 6))
    assert float(r.overall_util_pct) == pytest.approx(100 * 20 * 13 * 30 / (263 * 64))
    assert str(r.bound) == "compute"


def test_weight_and_input_stationary_by_hand() -> None:
    # ws: (Sr, Sc, T) = (K, N, M) = (30, 13, 20): 4 x 2 folds of 2*8 + 8 + 20 - 2 = 42 cycles
    ws = gemm_cycles(8, 8, "ws", 20, 13, 30)
    assert (int(ws.folds), int(ws.fold_cycles), int(ws.compute_cycles)) == (8, 42, 335)
    assert (int(ws.preload_cycles), int(ws.skew_cycles), int(ws.stream_cycles)) == (64, 112, 160)
    assert int(ws.sram_ofmap_writes) == 20 * 13 * 4
    assert int(ws.sram_ofmap_reads) == 20 * 13 * 3
    # is: (Sr, Sc, T) = (K, M, N) = (30, 20, 13): 4 x 3 folds of 16 + 8 + 13 - 2 = 35 cycles
    is_ = gemm_cycles(8, 8, "is", 20, 13, 30)
    assert (int(is_.folds), int(is_.fold_cycles), int(is_.compute_cycles)) == (12, 35, 419)
    assert int(is_.sram_ifmap_reads) == 20 * 30
    assert int(is_.sram_filter_reads) == 30 * 13 * 3


def test_gemm_view_per_dataflow() -> None:
    assert gemm_view("os", 1, 2, 3) == (1, 2, 3)
    assert gemm_view("ws", 1, 2, 3) == (3, 2, 1)
    assert gemm_view("is", 1, 2, 3) == (3, 1, 2)


def test_conv_view_resnet50_conv1() -> None:
    # 224x224x3 padded by 3: the 112 windows of a 7x7 stride-2 filter cover 111*2 + 7 = 229
    # pixels per axis; SCALE-Sim's ceil-based output size needs that extent, not 230 (-> 113).
    v = conv_gemm_view(229, 229, 7, 7, 3, 64, 2)
    assert (int(v.ofmap_h), int(v.m), int(v.n), int(v.k)) == (112, 12544, 64, 147)
    assert int(v.ifmap_words) == 229 * 229 * 3
    assert int(conv_gemm_view(230, 230, 7, 7, 3, 64, 2).ofmap_h) == 113


def test_conv_view_overhanging_window_like_scalesim() -> None:
    # 16 rows, 3-row filter, stride 2: SCALE-Sim's ceil((16 - 3 + 2) / 2) = 8 outputs
    v = conv_gemm_view(16, 16, 3, 3, 1, 1, 2)
    assert int(v.ofmap_h) == 8
    assert int(v.ifmap_words) == 16 * 16


def test_broadcasts_over_geometry_and_layers() -> None:
    sizes = np.array([[8], [16], [32]])
    m = np.array([20, 100, 300])
    r = gemm_cycles(sizes, sizes, "ws", m, 64, 64)
    assert r.compute_cycles.shape == (3, 3)
    for i, s in enumerate((8, 16, 32)):
        for j, mm in enumerate(m):
            one = gemm_cycles(s, s, "ws", int(mm), 64, 64)
            assert int(r.compute_cycles[i, j]) == int(one.compute_cycles)
            assert float(r.compute_util_pct[i, j]) == float(one.compute_util_pct)


def test_fold_average_modes_agree_to_rounding() -> None:
    a = gemm_cycles([8, 32], [8, 32], "os", 2000, 1300, 70)
    b = gemm_cycles([8, 32], [8, 32], "os", 2000, 1300, 70, fold_average="scalesim")
    np.testing.assert_allclose(a.mapping_eff_pct, b.mapping_eff_pct, rtol=1e-12)
    np.testing.assert_allclose(a.compute_util_pct, b.compute_util_pct, rtol=1e-12)


def test_larger_gemm_never_faster() -> None:
    base = gemm_cycles(32, 32, "os", 100, 100, 100)
    for bigger in ((101, 100, 100), (100, 101, 100), (100, 100, 101)):
        assert int(gemm_cycles(32, 32, "os", *bigger).compute_cycles) >= int(base.compute_cycles)


def test_conv_cycles_equals_gemm_of_view() -> None:
    c = conv_cycles(16, 16, "is", 30, 30, 3, 3, 16, 150, 1)
    g = gemm_cycles(16, 16, "is", 784, 150, 144)
    assert int(c.compute_cycles) == int(g.compute_cycles)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rows": 0}, "rows must be integers >= 1; got 0"),
        ({"cols": -4}, "cols must be integers >= 1; got -4"),
        ({"m": 2.5}, "m must be integers >= 1"),
        ({"k": "7"}, "k must be integers >= 1"),
        ({"dataflow": "rs"}, "unknown dataflow; got 'rs'; expected one of os, ws, is"),
    ],
)
def test_rejects_bad_inputs(kwargs: dict, match: str) -> None:
    args = {"rows": 8, "cols": 8, "dataflow": "os", "m": 4, "n": 4, "k": 4} | kwargs
    with pytest.raises(SystolicError, match=match):
        gemm_cycles(**args)


def test_rejects_filter_larger_than_input() -> None:
    with pytest.raises(SystolicError, match="filter_h exceeds ifmap_h"):
        conv_gemm_view(3, 3, 5, 1, 1, 1)
