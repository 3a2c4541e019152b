"""A library matrix-vector product streams its matrix at efficiency.gemv_bandwidth_fraction.

The Ampere figure is the median of ml-explore/mlx's cuBLAS fp16 GEMV rows (M = 1) whose matrix exceeds the
A100's L2: 1494.6 GB/s of 2039 GB/s. Hand-computed cases on an A100-SXM4-80GB: a 16384 x 16384 fp16 GEMV's
DRAM time at that rate, the same product as Inductor's generated kernel (at the streaming figure), and a
two-row GEMM (no GEMV). Up to ``efficiency.gemv_max_rows`` rows (64 on Ampere, ml-explore/mlx PR #3255) a library
GEMM streams at the same figure; a bad value of that field in a user's device file is one located error.
"""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device
from hwmodels.loader import apply_overlay
from simulator.engines.analytical import EvalOptions, evaluate
from tests.bad_input.contract import cli_exit, one_line
from workloads.micro import build_micro


def test_the_ampere_figure_is_the_median_of_the_out_of_l2_rows():
    dev = load_device("a100-sxm4-80gb")
    rows_gb_s = sorted([1494.6, 1476.1, 1691.5])  # N = K = 8192 (twice), 16384
    assert dev.efficiency.gemv_bandwidth_fraction == pytest.approx(round(rows_gb_s[1] / 2039.0, 3))
    # the GDDR6 and LPDDR5 Ampere parts state no GEMV figure: their streaming figure applies
    for name in ("a10", "jetson-agx-orin-64gb", "jetson-orin-nano"):
        d = load_device(name)
        assert d.efficiency.gemv_bandwidth_fraction == 0.0
        p = gpu.gpu_params(d, "fp16")
        assert gpu.gemv_params(p).dram_fraction == pytest.approx(d.efficiency.dram_bandwidth_fraction)


def test_gemv_params_changes_only_the_dram_fraction():
    p = gpu.gpu_params(load_device("a100-sxm4-80gb"), "fp16")
    q = gpu.gemv_params(p)
    assert q.dram_fraction == pytest.approx(0.733)
    assert dataclasses.replace(q, dram_fraction=p.dram_fraction) == p
    none = dataclasses.replace(p, gemv_dram_fraction=None)  # no figure: the parameters as they are
    assert gpu.gemv_params(none) is none


# generated: the board's own HBM2e stream triad, 1794 of 2039 GB/s (gpu-stream/a100_80.txt)
@pytest.mark.parametrize(("opts", "fraction"), [(EvalOptions(), 0.733), (EvalOptions(gemv_generated=True), 0.880)])
def test_a_one_row_gemm_streams_at_the_gemv_figure_unless_generated(opts, fraction):
    dev = load_device("a100-sxm4-80gb")
    rec = evaluate(build_micro("gemm:m=1,n=16384,k=16384", "fp16"), dev, opts).records[0]
    moved = 2 * (16384 * 16384 + 16384 + 16384)  # matrix, activation row and output row, fp16
    assert rec.dram_bytes == moved
    assert rec.memory_s == pytest.approx(moved / (2039e9 * fraction), rel=1e-9)


@pytest.mark.parametrize("rows", [2, 16, 64])
def test_a_skinny_library_gemm_streams_at_the_gemv_figure_even_when_generated(rows):
    # cuBLAS's fp16 GEMMs at M = 16 and 64 stream an N = K = 16384 matrix at 0.815 and 0.773 of 2039 GB/s
    # (ml-explore/mlx PR #3255), at or below its GEMV of the same matrix (0.830): up to 64 rows a library GEMM
    # takes efficiency.gemv_bandwidth_fraction (0.733); Inductor generates only the one-row product
    dev = load_device("a100-sxm4-80gb")
    assert dev.efficiency.gemv_max_rows == 64
    assert "@mlxskinny" not in dev.source_of("efficiency.gemv_max_rows").source  # the ref is expanded
    assert "1577.0 GB/s" in dev.source_of("efficiency.gemv_max_rows").source
    for opts in (EvalOptions(), EvalOptions(gemv_generated=True)):
        rec = evaluate(build_micro(f"gemm:m={rows},n=16384,k=16384", "fp16"), dev, opts).records[0]
        assert rec.bound == "memory"
        assert rec.memory_s == pytest.approx(rec.dram_bytes / (2039e9 * 0.733), rel=1e-9)


def test_a_gemm_past_the_measured_rows_streams_at_the_stream_figure():
    dev = load_device("a100-sxm4-80gb")
    rec = evaluate(build_micro("gemm:m=65,n=16384,k=16384", "fp16"), dev).records[0]
    assert rec.memory_s == pytest.approx(rec.dram_bytes / (2039e9 * 0.880), rel=1e-9)  # the board's own triad


def test_the_scope_is_the_device_field():
    # a device stating 16 rows: M = 16 streams at the GEMV figure (0.733), M = 17 at the streaming figure (0.880)
    dev = apply_overlay(load_device("a100-sxm4-80gb"), {"efficiency.gemv_max_rows": 16}, source="test")
    for rows, fraction in ((16, 0.733), (17, 0.880)):
        rec = evaluate(build_micro(f"gemm:m={rows},n=16384,k=16384", "fp16"), dev).records[0]
        assert rec.memory_s == pytest.approx(rec.dram_bytes / (2039e9 * fraction), rel=1e-9)
    # hardware variants (a sweep over the field): each variant's own scope
    p = dataclasses.replace(gpu.gpu_params(load_device("a100-sxm4-80gb"), "fp16"), gemv_max_rows=[16, 64])
    assert list(gpu.gemv_params(p, 32).dram_fraction) == pytest.approx([0.880, 0.733])


@pytest.mark.parametrize(("value", "got", "expected"), [("-4", "got -4", "expected > 0"),
                                                        ("12.5", "got 12.5", "expected a whole number")])
def test_a_bad_scope_in_a_device_file_is_one_located_error(tmp_path, capsys, value, got, expected):
    text = open(load_device("a10").source_file).read()
    assert text.count("\ngemv_bandwidth_fraction = ") == 1
    text = text.replace("\ngemv_bandwidth_fraction = ", f'\ngemv_max_rows = {{ value = {value}, source = "typed" }}'
                        "\ngemv_bandwidth_fraction = ")
    path = tmp_path / "my-a10.toml"
    path.write_text(text)
    rc, err = cli_exit(capsys, "predict", "llama-2-7b", "--hardware", str(path))
    one_line(rc, err, f"{path}: efficiency.gemv_max_rows:", got, expected)
