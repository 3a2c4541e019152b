"""cuDNN's implicit-GEMM convolutions below the GEMM figure (``efficiency.conv_rate_fraction``).

The source (catalog ref ``convcl3d``): one script timing fp16 ``Conv3d`` calls with bias on channels-last-3d
tensors under cuDNN 8.0.5 on an A100-SXM4-40GB and a V100-SXM2-16GB (xwang233/code-snippet,
``conv3d-channels-last``, table channels-last-3d-forward, column "PR (ch-last)"). A 3 x 3 x 3 convolution is
the implicit GEMM of a 2-D 3 x 3 one with the depth taps folded into the input channels and the output depth
into the batch; the bias add is a separate pass over the output. The checks: the catalog figures, the
derivation of the Ampere figure from the three rows by hand, the rows' times after the change, and that the
factor reaches convolutions only (not GEMMs, not the SIMT path, not devices without a measurement).
"""

from __future__ import annotations

import statistics

import pytest

from hwmodels.paths import with_overrides
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.micro import build_micro

#: (n, c, d, k): (n, c, d, d, d) -> k channels, 3 x 3 x 3, stride 1, pad 1; measured ms on each board
ROWS = {
    (2, 128, 32, 128): {"a100-sxm4-40gb": 0.290, "v100-sxm2-32gb": 0.921},
    (2, 256, 32, 128): {"a100-sxm4-40gb": 0.530, "v100-sxm2-32gb": 1.602},
    (2, 512, 16, 256): {"a100-sxm4-40gb": 0.272, "v100-sxm2-32gb": 0.740},
}


def _folded(n: int, c: int, d: int, k: int) -> str:
    return f"conv2d:n={n * d},c={c * 3},h={d},w={d},k={k},r=3,s=3,stride=1,pad=1"


def _conv_ms(dev, shape) -> float:
    return evaluate(build_micro(_folded(*shape), "fp16"), dev, EvalOptions()).records[0].time_s * 1e3


def _bias_ms(dev, shape) -> float:
    n, _, d, k = shape
    rate = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    return 2 * (n * k * d**3 * 2) / rate * 1e3  # the fp16 output read and written once


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-40gb")


def test_catalog_figures():
    assert load_hardware("a100-sxm4-80gb").efficiency.conv_rate_fraction == 0.903
    assert load_hardware("a100-sxm4-40gb").efficiency.conv_rate_fraction == 0.903
    for name in ("v100-sxm2-32gb", "t4", "h100-sxm5-80gb", "l4", "mi300x"):
        assert load_hardware(name).efficiency.conv_rate_fraction == 1.0


def test_ampere_figure_is_the_median_of_the_rows(a100):
    """Model time at fraction 1 over the measured time less the bias pass: 0.870, 0.903, 0.908 by hand."""
    one = with_overrides(a100, {"efficiency.conv_rate_fraction": 1.0})
    ratios = [_conv_ms(one, s) / (ms["a100-sxm4-40gb"] - _bias_ms(one, s)) for s, ms in ROWS.items()]
    assert ratios == pytest.approx([0.870, 0.903, 0.908], abs=0.0015)
    assert statistics.median(ratios) == pytest.approx(a100.efficiency.conv_rate_fraction, abs=0.0005)


def test_rows_after_the_change(a100):
    """With the catalog figure the three A100 rows land within 4% of their measured times (less the bias)."""
    for shape, ms in ROWS.items():
        net = ms["a100-sxm4-40gb"] - _bias_ms(a100, shape)
        assert _conv_ms(a100, shape) == pytest.approx(net, rel=0.04)


def test_v100_rows_straddle_one():
    """The same rows on the V100 (the model at its catalog figure 1): one above, two below, none resolved."""
    v100 = load_hardware("v100-sxm2-32gb")
    ratios = [_conv_ms(v100, s) / (ms["v100-sxm2-32gb"] - _bias_ms(v100, s)) for s, ms in ROWS.items()]
    assert ratios == pytest.approx([0.905, 0.963, 1.039], abs=0.002)


def test_compute_term_scales_by_the_fraction(a100):
    """A main-loop-bound convolution's compute term grows by exactly 1 / fraction where the tile and split-K
    stay (the Ampere figure); a GEMM does not move."""
    one = with_overrides(a100, {"efficiency.conv_rate_fraction": 1.0})
    g = build_micro(_folded(2, 512, 16, 256), "fp16")
    a = evaluate(g, one, EvalOptions()).records[0]
    b = evaluate(g, a100, EvalOptions()).records[0]
    assert (a.tile, a.split_k) == (b.tile, b.split_k) == ("128x128x32_s5", 4)
    assert b.compute_s == pytest.approx(a.compute_s / 0.903, rel=1e-9)
    half = with_overrides(a100, {"efficiency.conv_rate_fraction": 0.5})
    gemm = build_micro("gemm:m=8192,n=8192,k=8192", "fp16")
    assert evaluate(gemm, half, EvalOptions()).records[0].time_s == evaluate(gemm, one, EvalOptions()).records[0].time_s


def test_simt_fp32_convolution_is_not_scaled(a100):
    """The fraction is a tensor-core kernels' figure: an fp32 convolution without TF32 keeps its SIMT rate."""
    one = with_overrides(a100, {"efficiency.conv_rate_fraction": 1.0})
    half = with_overrides(a100, {"efficiency.conv_rate_fraction": 0.5})
    g = build_micro("conv2d:n=32,c=256,h=28,w=28,k=256,r=3,s=3,pad=1", "fp32")
    a = evaluate(g, one, EvalOptions(allow_tf32=False)).records[0]
    b = evaluate(g, half, EvalOptions(allow_tf32=False)).records[0]
    assert a.rule == "implicit-gemm-simt"
    assert b.time_s == a.time_s
